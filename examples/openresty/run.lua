-- Runs the OpenResty example: nginx (2 workers) on 127.0.0.1:$PORT (default 8089) with zklock,
-- 20 concurrent requests on the locked location, one on the free one, then stops everything.
--
--   lua5.4 examples/openresty/run.lua                      starts a throwaway ZooKeeper too
--   ZK_HOSTS=host:port PORT=8089 lua5.4 examples/openresty/run.lua
-- Needs nginx-core, libnginx-mod-http-lua, lua-resty-core, curl, and build-jit/ (the LuaJIT
-- build of zklock.core); this script itself runs under any Lua.
local root = (arg and arg[0] or ""):match("^(.*)/examples/openresty/[^/]*$") or "."
if root:sub(1, 1) ~= "/" then root = io.popen("pwd"):read("*l") .. "/" .. root end
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. (jit and "/build-jit/?.so;" or "/build/?.so;") .. package.cpath

local function sh(cmd) local r = os.execute(cmd); return r == true or r == 0 end
local function out(cmd) local p = io.popen(cmd); local s = p:read("*a"); p:close(); return s end

local zk = not os.getenv("ZK_HOSTS") and require("zklock.testing").server{}
local port = tonumber(os.getenv("PORT") or "8089")
local prefix = out("mktemp -d /tmp/zklock-openresty-example.XXXXXX"):gsub("%s+$", "")
sh("chmod 0777 " .. prefix) -- workers run as nobody when nginx is started as root
local conf = io.open(root .. "/examples/openresty/nginx.conf"):read("*a"):gsub("@([%u_]+)@", {
  ROOT = root, PREFIX = prefix, PORT = tostring(port), ZK_HOSTS = os.getenv("ZK_HOSTS") or zk.hosts })
io.open(prefix .. "/nginx.conf", "w"):write(conf):close()

local url = "http://127.0.0.1:" .. port
local ok, err = pcall(function()
  assert(sh(("nginx -p %s/ -c %s/nginx.conf </dev/null >%s/stdout.log 2>&1 &"):format(prefix, prefix, prefix)))
  for _ = 1, 100 do
    if out("curl -s " .. url .. "/hello"):find("hello") then break end
    sh("sleep 0.05")
  end
  print("20 concurrent requests to /counter:")
  io.write(out(("for i in $(seq 20); do curl -s %s/counter & done; wait"):format(url)))
  print("and /hello: " .. out(("curl -s -w '(%%{time_total} s)' %s/hello"):format(url)):gsub("\n", " "))
  print("counter file: " .. io.open(prefix .. "/counter"):read("*a") .. " (expected 20)")
end)
sh(("kill -QUIT $(cat %s/nginx.pid) 2>/dev/null; sleep 0.5"):format(prefix))
if not ok then io.stderr:write(out("tail -20 " .. prefix .. "/error.log")) end
sh("rm -rf " .. prefix)
if zk then zk:stop() end
assert(ok, err)
