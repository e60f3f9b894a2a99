-- Runs the fleet example: two nginx instances (2 workers each) on 127.0.0.1:$PORT and $PORT+1
-- (default 8091, 8092) keep one job running in exactly one of their 4 workers. The script
-- shows the report the job writes, reloads (HUP) and then stops (QUIT) the instance running
-- it, and shows the job moving; then it stops everything.
--
--   lua5.4 examples/openresty/run_fleet.lua              starts a throwaway ZooKeeper too
--   ZK_HOSTS=host:port PORT=8091 lua5.4 examples/openresty/run_fleet.lua
-- Needs nginx-core, libnginx-mod-http-lua, lua-resty-core and build-jit/ (the LuaJIT build of
-- zklock.core); this script itself runs under any Lua.
local root = (arg and arg[0] or ""):match("^(.*)/examples/openresty/[^/]*$") or "."
if root:sub(1, 1) ~= "/" then root = io.popen("pwd"):read("*l") .. "/" .. root end
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. (jit and "/build-jit/?.so;" or "/build/?.so;") .. package.cpath

local function sh(cmd) local r = os.execute(cmd); return r == true or r == 0 end
local function out(cmd) local p = io.popen(cmd); local s = p:read("*a"); p:close(); return s end
local function sleep(s) sh("sleep " .. s) end

local zk = not os.getenv("ZK_HOSTS") and require("zklock.testing").server{}
local hosts = os.getenv("ZK_HOSTS") or zk.hosts
local port = tonumber(os.getenv("PORT") or "8091")
local dir = out("mktemp -d /tmp/zklock-fleet-example.XXXXXX"):gsub("%s+$", "")
sh("chmod 0777 " .. dir) -- workers run as nobody when nginx is started as root
local report = dir .. "/report.log"

local instances = {}
local function start(name, p)
  local prefix = dir .. "/" .. name
  sh("mkdir -p " .. prefix .. " && chmod 0777 " .. prefix)
  local conf = io.open(root .. "/examples/openresty/fleet.conf"):read("*a"):gsub("@([%u_]+)@", {
    ROOT = root, PREFIX = prefix, PORT = tostring(p), ZK_HOSTS = hosts, NAME = name, JOB_LOG = report })
  io.open(prefix .. "/nginx.conf", "w"):write(conf):close()
  local cmd = "nginx -p %s/ -c %s/nginx.conf </dev/null >%s/stdout.log 2>&1 &"
  assert(sh(cmd:format(prefix, prefix, prefix)))
  instances[name] = { prefix = prefix, port = p }
end
local function master(name)
  return (out("cat " .. instances[name].prefix .. "/nginx.pid 2>/dev/null"):gsub("%s+", ""))
end
local function last_line() return (out("tail -1 " .. report .. " 2>/dev/null"):gsub("%s+$", "")) end
local function runner() return last_line():match(" by (%a+) worker") end

local ok, err = pcall(function()
  start("A", port)
  start("B", port + 1)
  for _ = 1, 100 do if runner() then break end sleep(0.1) end
  sleep(2)
  print("report so far:\n" .. out("cat " .. report))
  local name = assert(runner(), "no worker runs the job")
  print(("== nginx -s reload of instance %s (it runs the job)"):format(name))
  sh("kill -HUP " .. master(name))
  sleep(3)
  print("   " .. last_line())
  name = runner()
  print(("== nginx -s quit of instance %s (it runs the job now)"):format(name))
  sh("kill -QUIT " .. master(name))
  sleep(3)
  print("   " .. last_line())
  local other = runner()
  assert(other ~= name, "the job did not move to the other instance")
  print(("the job moved to instance %s"):format(other))
end)
for name in pairs(instances) do sh("kill -QUIT " .. master(name) .. " 2>/dev/null") end
sleep(1)
if not ok then io.stderr:write(out("tail -20 " .. dir .. "/*/error.log")) end
sh("rm -rf " .. dir)
if zk then zk:stop() end
assert(ok, err)
