-- Runs the shared-cache example (upstreams.conf next to this file): nginx with 2 workers on
-- 127.0.0.1:$PORT (default 8093) serves the backends listed under /zklock-examples/services/web
-- from a cache one of its workers keeps. The script lists them through /upstreams, adds and
-- removes a backend with its own client and lists them again, then stops everything.
--
--   lua5.4 examples/openresty/run_upstreams.lua              starts a throwaway ZooKeeper too
--   ZK_HOSTS=host:port PORT=8093 lua5.4 examples/openresty/run_upstreams.lua
-- Needs nginx-core, libnginx-mod-http-lua, lua-resty-core, curl, build/ (for this script) and
-- build-jit/ (the LuaJIT build of zklock.core, for nginx).
local root = (arg and arg[0] or ""):match("^(.*)/examples/openresty/[^/]*$") or "."
if root:sub(1, 1) ~= "/" then root = io.popen("pwd"):read("*l") .. "/" .. root end
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. (jit and "/build-jit/?.so;" or "/build/?.so;") .. package.cpath
local zklock = require("zklock")

local function sh(cmd) local r = os.execute(cmd); return r == true or r == 0 end
local function out(cmd) local p = io.popen(cmd); local s = p:read("*a"); p:close(); return s end

local SERVICES = "/zklock-examples/services/web"
local zk = not os.getenv("ZK_HOSTS") and require("zklock.testing").server{}
local hosts = os.getenv("ZK_HOSTS") or zk.hosts
local port = tonumber(os.getenv("PORT") or "8093")
local dir = out("mktemp -d /tmp/zklock-upstreams-example.XXXXXX"):gsub("%s+$", "")
sh(("mkdir -p %s/logs %s/tmp && chmod -R 0777 %s"):format(dir, dir, dir)) -- workers run as nobody under root
local conf = io.open(root .. "/examples/openresty/upstreams.conf"):read("*a"):gsub("@([%u_]+)@", {
  ROOT = root, PREFIX = dir, PORT = tostring(port), WORKERS = "2", ZK_HOSTS = hosts, SERVICES = SERVICES,
  ELECTION = "/zklock-examples/keepers", SESSION_TIMEOUT = "5" })
io.open(dir .. "/nginx.conf", "w"):write(conf):close()

local client = assert(zklock.connect(hosts))
local function show(what)
  client:sleep(0.5) -- the keeper publishes within a round trip or two
  print("== " .. what)
  for _ = 1, 4 do -- new connections: reuseport spreads them over the workers
    io.write("   ", (out(("curl -s -H 'Connection: close' http://127.0.0.1:%d/upstreams"):format(port))
      :gsub("\n(.)", " %1")))
  end
end

local ok, err = pcall(function()
  for _, addr in ipairs{ "10.0.0.1:8080", "10.0.0.2:8080" } do
    assert(client:create(SERVICES .. "/" .. addr, "", { parents = true }))
  end
  assert(sh(("nginx -p %s/ -c %s/nginx.conf </dev/null >%s/stdout.log 2>&1 &"):format(dir, dir, dir)))
  client:sleep(1.5)
  show("two backends (each line: worker pid, version, keeper pid, count, addresses)")
  assert(client:create(SERVICES .. "/10.0.0.3:8080", ""))
  assert(client:delete(SERVICES .. "/10.0.0.1:8080"))
  show("after adding 10.0.0.3:8080 and removing 10.0.0.1:8080")
end)
sh(("kill -QUIT $(cat %s/logs/nginx.pid 2>/dev/null) 2>/dev/null; sleep 1"):format(dir))
if not ok then io.stderr:write(out("tail -20 " .. dir .. "/logs/error.log")) end
client:close()
sh("rm -rf " .. dir)
if zk then zk:stop() end
assert(ok, err)
