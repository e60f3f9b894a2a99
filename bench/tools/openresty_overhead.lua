-- bench/tools/openresty_overhead.lua: OpenResty's per-request overhead of a zklock mutex. One
-- nginx worker (Debian's nginx-core + libnginx-mod-http-lua, zklock's LuaJIT build), `wrk`
-- against a location that takes and releases a mutex per request and against the same
-- location without it; prints requests/s and the worker's CPU (user + system from
-- /proc/<pid>/stat) per request for each.
--
--   lua5.4 tests/with_zk.lua lua5.4 bench/tools/openresty_overhead.lua [secs] [connections] [build-jit] [tree]
--
-- tree: the directory whose lua/ and <build>/ nginx loads (default: this repository), e.g. an
-- unpacked older revision to compare with.
-- With as many mutexes as connections (the location takes them in turn), requests rarely wait
-- for each other: the figure is the cost of an uncontended acquire+release inside a request.
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local harness = require("support.nginx.harness")
local testing = require("zklock.testing")

local secs, conns, build = tonumber(arg[1] or 5), tonumber(arg[2] or 4), arg[3] or "build-jit"
local tree = arg[4] or harness.ROOT
local hosts = assert(os.getenv("ZK_HOSTS"), "run under tests/with_zk.lua (ZK_HOSTS)")
local why = harness.unavailable(harness.ROOT)
if why then io.stderr:write("openresty_overhead: ", why, "\n") os.exit(2) end

local function cpu_ticks(pid)
  local s = testing.read_file("/proc/" .. pid .. "/stat")
  local rest = s:match("%) (.*)$")
  local f = {}
  for x in rest:gmatch("%S+") do f[#f + 1] = x end
  return tonumber(f[12]) + tonumber(f[13]) -- utime, stime (fields 14 and 15)
end
local HZ = tonumber(testing.sh("getconf CLK_TCK")) or 100

local srv = harness.start{ root = harness.ROOT, workers = 1,
  template = harness.ROOT .. "/bench/tools/openresty_overhead.conf.in",
  vars = { ZK_HOSTS = hosts, BUILD = build, TREE = tree, LOCKS = conns,
           LOCK_PATH = ("/bench/openresty-overhead/%d-%d"):format(os.time(), math.random(1e6)) } }
local ok, err = pcall(function()
  local worker = assert(srv:workers()[1], "no worker").pid
  for _, path in ipairs({ "/mutex", "/free", "/mutex", "/free" }) do
    testing.sh(("wrk -t1 -c%d -d1s %s >/dev/null 2>&1"):format(conns, srv:url(path))) -- warm up
    local c0 = cpu_ticks(worker)
    local out = testing.sh(("wrk -t1 -c%d -d%ds %s 2>&1"):format(conns, secs, srv:url(path)))
    local c1 = cpu_ticks(worker)
    local n = tonumber(out:match("(%d+) requests in"))
    local non2xx = tonumber(out:match("Non%-2xx or 3xx responses: (%d+)") or "0")
    print(("%-7s %d connections: %8.0f requests/s, worker CPU %7.1f µs/request, %d non-2xx"):format(
      path, conns, n / secs, (c1 - c0) / HZ / n * 1e6, non2xx))
  end
end)
srv:stop()
if not ok then error(err, 0) end
