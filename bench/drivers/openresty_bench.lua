-- openresty_bench.lua - zklock's per-request overhead in OpenResty (nginx + ngx_lua), under wrk.
-- Run from the repository root with Lua 5.4 (the script only drives; nginx runs LuaJIT):
--
--   lua5.4 bench/drivers/openresty_bench.lua HOSTS http [secs=5] [c=16] [workers=2] [warm=1]
--                                            [order=free,lock,shared] [build=bench/out/build-jit] [busy=S]
--                                            [wakeup=fd|poll]
--
-- Starts nginx (Debian's nginx-core + libnginx-mod-http-lua + lua-resty-core; the template
-- bench/drivers/openresty/nginx.conf.in, handlers bench_app.lua) on a free 127.0.0.1 port with
-- `workers` worker processes, each with one zklock client of the ZooKeeper at HOSTS
-- (zklock.adapters.openresty, zklock.core from `build`), and loads each location in `order` with
-- `wrk -t1 -c<c> -d<secs>s --latency` (keep-alive connections, one request at a time each):
--   free    the request's work (a per-worker count, a short body), no lock
--   lock    the same work between acquire and release of a mutex of the connection's own
--           (uncontended: 3 ZooKeeper requests per request)
--   shared  the same, every request of every worker on one mutex (c requests queue on it)
-- Each location gets `warm` seconds of the same load first (not measured). Per location: requests
-- per second, p50/p99 latency (wrk's), and the CPU of nginx's workers per request (utime + stime
-- of every worker process from /proc, over the measured run: the lock's client work shows here).
-- Output: one line "RESULT key=value ..." with <loc>_rate, <loc>_p50_us, <loc>_p99_us,
-- <loc>_cpu_us_per, <loc>_requests, and lock_ratio / shared_ratio (their rate over free's, this
-- run). busy=S sets the adapter's pump period while operations are pending when it polls
-- (pump_opts.busy_interval, default 0.001 s, at least 0.001 s) and wakeup=fd|poll the pump's
-- wake-up (pump_opts.wakeup, default fd: woken by the reply). Any non-2xx answer or socket error
-- fails the run (exit 1, no RESULT).
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
local testing = require("zklock.testing")
local harness = require("support.nginx.harness")

local hosts, workload = arg[1], arg[2]
local function usage(msg)
  io.stderr:write("openresty_bench: " .. msg .. "\nusage: lua5.4 bench/drivers/openresty_bench.lua HOSTS http "
    .. "[secs=5] [c=16] [workers=2] [warm=1] [order=free,lock,shared] [build=bench/out/build-jit] [busy=S]"
    .. " [wakeup=fd|poll]\n")
  os.exit(2)
end
if not hosts or not hosts:match(":%d+") then usage("HOSTS (host:port[,host:port...]) is required") end
if workload ~= "http" then usage("unknown workload " .. tostring(workload) .. " (only: http)") end
local opt = { secs = 5, c = 16, workers = 2, warm = 1, order = "free,lock,shared", build = "bench/out/build-jit",
              busy = "default", wakeup = "default" }
local NUMERIC = { secs = true, c = true, workers = true, warm = true, busy = true }
for i = 3, #arg do
  local k, v = arg[i]:match("^([%w_]+)=(.*)$")
  if not k or opt[k] == nil then usage("unknown argument " .. arg[i]) end
  if NUMERIC[k] then
    v = tonumber(v)
    if not v or v < 0 or (k ~= "warm" and k ~= "busy" and v <= 0) then
      usage(k .. "= needs a positive number, got " .. arg[i])
    end
  end
  opt[k] = v
end
local LOCS = { free = "/free", lock = "/lock", shared = "/shared" }
local order = {}
for name in opt.order:gmatch("[^,%s]+") do
  if not LOCS[name] then usage("order=: unknown location " .. name .. " (free, lock, shared)") end
  order[#order + 1] = name
end
if #order == 0 then usage("order= names no location") end
if opt.wakeup ~= "default" and opt.wakeup ~= "fd" and opt.wakeup ~= "poll" then
  usage("wakeup= needs fd or poll, got " .. tostring(opt.wakeup))
end

local shq, sh = testing.shq, testing.sh
local ROOT = harness.ROOT
for _, need in ipairs({ { harness.NGINX, "nginx-core" }, { harness.MODULES .. "/ngx_http_lua_module.so",
  "libnginx-mod-http-lua" }, { "/usr/share/lua/5.1/resty/core.lua", "lua-resty-core" },
  { "/usr/bin/wrk", "wrk" },
  { ROOT .. "/" .. opt.build .. "/zklock/core.so", "bench/run (builds " .. opt.build .. ")" } }) do
  if not testing.exists(need[1]) then
    io.stderr:write(("openresty_bench: %s is missing (install: %s)\n"):format(need[1], need[2]))
    os.exit(1)
  end
end

local TCK = tonumber((sh("getconf CLK_TCK") or ""):match("%d+")) or 100

-- utime + stime of nginx's worker processes, seconds
local function workers_cpu(srv)
  local total = 0
  for _, w in ipairs(srv:workers()) do
    local stat = testing.read_file("/proc/" .. w.pid .. "/stat") or ""
    local rest = stat:match("%) (.*)$") or ""
    local fields = {}
    for f in rest:gmatch("%S+") do fields[#fields + 1] = f end
    -- after the ")": field 3 is the state, so utime (14) and stime (15) are the 12th and 13th
    total = total + (tonumber(fields[12]) or 0) + (tonumber(fields[13]) or 0)
  end
  return total / TCK
end

local UNIT = { us = 1, ms = 1e3, s = 1e6, m = 60e6 }
local function micros(s)
  local v, u = s:match("^([%d%.]+)(%a+)$")
  return v and UNIT[u] and tonumber(v) * UNIT[u] or nil
end

-- wrk against one location; returns its numbers or raises with wrk's output
local function wrk(srv, loc, secs)
  local cmd = ("wrk -t1 -c%d -d%ds --timeout 10s --latency %s 2>&1"):format(opt.c, math.max(1, math.floor(secs + 0.5)),
    shq(srv:url(LOCS[loc])))
  local out = sh(cmd) or ""
  local r = {
    rate = tonumber(out:match("Requests/sec:%s*([%d%.]+)")),
    requests = tonumber(out:match("(%d+) requests in")),
    p50_us = micros(out:match("\n%s*50%%%s+(%S+)") or ""),
    p99_us = micros(out:match("\n%s*99%%%s+(%S+)") or ""),
    non2xx = tonumber(out:match("Non%-2xx or 3xx responses:%s*(%d+)")) or 0,
  }
  local sock = out:match("Socket errors:([^\n]*)")
  if not (r.rate and r.requests and r.p50_us and r.p99_us) or r.non2xx > 0 or sock then
    error(("wrk on %s: %s\n%s\nnginx error log:\n%s"):format(loc,
      r.non2xx > 0 and (r.non2xx .. " non-2xx answers") or sock and ("socket errors:" .. sock) or "no result",
      out, srv:log_tail(20)), 0)
  end
  return r
end

local base = ("/bench/openresty-%d-%d"):format(os.time() % 1000000, math.random(1, 999999))
local srv = harness.start{ root = ROOT, template = ROOT .. "/bench/drivers/openresty/nginx.conf.in",
  ready_path = "/ready", workers = opt.workers,
  vars = { ZK_HOSTS = hosts, LOCK_BASE = base, BUILD = opt.build,
          BUSY = opt.busy == "default" and "nil" or ("%.6f"):format(opt.busy),
          WAKEUP = opt.wakeup == "default" and "nil" or ("%q"):format(opt.wakeup) } }
local ok, res = pcall(function()
  local out = {}
  for _, loc in ipairs(order) do
    if opt.warm > 0 then wrk(srv, loc, opt.warm) end
    local c0 = workers_cpu(srv)
    local r = wrk(srv, loc, opt.secs)
    local cpu = workers_cpu(srv) - c0
    out[#out + 1] = ("%s_rate=%.1f %s_p50_us=%.0f %s_p99_us=%.0f %s_cpu_us_per=%.1f %s_requests=%d"):format(
      loc, r.rate, loc, r.p50_us, loc, r.p99_us, loc, cpu / r.requests * 1e6, loc, r.requests)
    out[loc] = r
  end
  for _, loc in ipairs({ "lock", "shared" }) do
    if out[loc] and out.free then out[#out + 1] = ("%s_ratio=%.3f"):format(loc, out[loc].rate / out.free.rate) end
  end
  local errors = select(2, srv:error_log():gsub("%[error%]", ""))
  if errors > 0 then error(("%d [error] lines in nginx's error log:\n%s"):format(errors, srv:log_tail(20)), 0) end
  return ("RESULT workers=%d c=%d secs=%g busy=%s wakeup=%s order=%s %s"):format(opt.workers, opt.c, opt.secs,
    tostring(opt.busy), tostring(opt.wakeup), table.concat(order, ","), table.concat(out, " "))
end)
srv:stop()
if not ok then
  io.stderr:write("openresty_bench: " .. tostring(res) .. "\n")
  os.exit(1)
end
print(res)
