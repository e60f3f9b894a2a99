-- spec/support/nginx/harness.lua: a throwaway nginx (Debian's nginx-core + libnginx-mod-http-lua)
-- for the OpenResty adapter's spec. Pure Lua (5.1-5.4), Linux only.
--
--   local harness = require("support.nginx.harness")
--   local why = harness.unavailable(root)          -- nginx, the lua module, resty.core, build-jit, curl
--   local ngx_srv = harness.start{ root = root, vars = { ZK_HOSTS = ..., ... }, workers = 4 }
--   ngx_srv:get("/free") -> status, body, seconds      (curl)
--   ngx_srv:reload()  ngx_srv:workers()  ngx_srv:stop()  ngx_srv:log_tail(40)
--
-- nginx runs with `daemon off` in its own prefix (a temp dir) under a babysitter shell that
-- stops it (QUIT, then KILL) when this Lua process goes away, so a crashed test run leaves no
-- nginx behind. stop() is idempotent and removes the prefix dir.
local M = {}

M.NGINX = "/usr/sbin/nginx"
M.MODULES = "/usr/lib/nginx/modules"

-- Shell, file and process helpers of the public test harness (commands run with LD_PRELOAD unset).
local testing = require("zklock.testing")
local deps = require("support.deps")
local shq, execute, readcmd = testing.shq, testing.execute, testing.sh
local read_file, write_file, exists = testing.read_file, testing.write_file, testing.exists
local sleep, now = testing.sleep, testing.now
M.now = now

-- The repository's root (absolute), from this file's own path: nginx's config and the specs
-- name files under it.
M.ROOT = (function()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  local dir = src:match("^(.*)/spec/support/nginx/[^/]*$") or "."
  if dir:sub(1, 1) ~= "/" then
    local cwd = (readcmd("pwd"):gsub("%s+$", ""))
    dir = (dir == "." and cwd) or (cwd .. "/" .. dir)
  end
  return dir
end)()


local function alive(pid)
  return pid ~= nil and testing.pid_alive(pid)
end

-- Why the OpenResty specs cannot run here (what is missing and how to install it), or nil. The
-- specs pass it to deps.skip (spec/support/deps.lua): a skip, or a failure under CI=true.
-- ZKL_TEST_MISSING can hide each of these by its name (nginx, ngx_http_lua_module, lua-resty-core,
-- build-jit, curl), to show that path on a machine that has them.
function M.unavailable(root)
  local checks = {
    { "nginx", function() return exists(M.NGINX) end, "nginx is not installed", "apt-get install nginx-core" },
    { "ngx_http_lua_module", function() return exists(M.MODULES .. "/ngx_http_lua_module.so") end,
      "the nginx Lua module is not installed", "apt-get install libnginx-mod-http-lua" },
    { "lua-resty-core", function() return exists("/usr/share/lua/5.1/resty/core.lua") end,
      "lua-resty-core is not installed", "apt-get install lua-resty-core" },
    { "build-jit", function() return exists(root .. "/build-jit/zklock/core.so") end,
      "no LuaJIT build of zklock.core (build-jit/zklock/core.so)",
      "cmake -S . -B build-jit -DZKL_LUA=luajit && cmake --build build-jit" },
    { "curl", function() return execute("command -v curl >/dev/null 2>&1") end, "curl is not installed",
      "apt-get install curl" },
  }
  for _, c in ipairs(checks) do
    if not deps.present(c[1], c[2]()) then return deps.reason(c[3], c[4], c[1]) end
  end
  return nil
end

-- A free loopback port (not in /proc/net/tcp*).
local function free_port() return testing.free_ports(1)[1] end

local Server = {}
Server.__index = Server

function M.start(opts)
  local root = assert(opts.root, "root")
  local dir = assert(readcmd("mktemp -d /tmp/zklock-nginx.XXXXXX")):gsub("%s+$", "")
  assert(dir ~= "", "mktemp failed")
  execute("mkdir -p " .. shq(dir .. "/logs") .. " " .. shq(dir .. "/tmp") .. " " .. shq(dir .. "/conf"))
  -- ready_path: a location that answers 200 once a worker runs (default /free)
  local self = setmetatable({ dir = dir, root = root, ready_path = opts.ready_path or "/free" }, Server)
  local template = assert(read_file(opts.template or (root .. "/spec/support/nginx/nginx.conf.in")))
  local vars = {}
  for k, v in pairs(opts.vars or {}) do vars[k] = tostring(v) end
  vars.ROOT = root
  vars.PREFIX = dir
  vars.WORKERS = tostring(opts.workers or 4)
  for attempt = 1, 5 do
    vars.PORT = tostring(free_port())
    self.port = tonumber(vars.PORT)
    local conf = template:gsub("@([%u_]+)@", function(k)
      return assert(vars[k], "no value for @" .. k .. "@ in the nginx template")
    end)
    self.conf = dir .. "/conf/nginx.conf"
    write_file(self.conf, conf)
    local ok, err = self:_spawn()
    if ok then return self end
    if attempt == 5 or not (err or ""):find("in use", 1, true) then
      local tail = self:log_tail(30)
      self:stop()
      error("nginx did not start: " .. tostring(err) .. "\n" .. tail, 2)
    end
  end
end

function Server:_spawn()
  local dir = self.dir
  local pidfile = dir .. "/master.pid"
  local cmd = table.concat({ shq(M.NGINX), "-p", shq(dir .. "/"), "-c", shq(self.conf) }, " ")
  -- babysat: QUIT (graceful), then KILL after 5 s, once this Lua process is gone
  local pid, err = testing.spawn{ command = cmd, cwd = dir, log = dir .. "/logs/stdout.log", pidfile = pidfile,
                                  stop = "QUIT", grace = 5 }
  self.pid = tonumber(pid)
  if not self.pid then return nil, "no master pid: " .. tostring(err) end
  -- ready when it answers
  local deadline = now() + 15
  while now() < deadline do
    if not alive(self.pid) then
      return nil, "nginx exited: " .. (read_file(dir .. "/logs/stdout.log") or "") .. self:log_tail(10)
    end
    local status = self:get(self.ready_path, 1)
    if status == 200 then return true end
    sleep(0.05)
  end
  return nil, "nginx does not answer on port " .. self.port
end

function Server:url(path)
  return ("http://127.0.0.1:%d%s"):format(self.port, path)
end

-- curl GET -> status (number, 0 if no answer), body, total seconds
function Server:get(path, max_time)
  local out = readcmd(("curl -s --max-time %g -w '\\n%%{http_code} %%{time_total}' %s 2>/dev/null"):format(
    max_time or 30, shq(self:url(path)))) or ""
  local body, code, t = out:match("^(.*)\n(%d+) ([%d%.]+)$")
  if not code then return 0, out, nil end
  return tonumber(code), body, tonumber(t)
end

-- A shell command line that GETs `path` `n` times in sequence, appending
-- "<http code> <seconds> <body>" lines to `out`.
function Server:curl_loop(path, n, out, max_time)
  local body, meta = shq(out .. ".body"), shq(out .. ".meta")
  return ("for i in $(seq %d); do rm -f %s; curl -s --max-time %g -o %s -w '%%{http_code} %%{time_total}' %s >%s; "
    .. "echo \"$(tr -d '\\n' <%s 2>/dev/null) $(cat %s)\" >>%s; done")
    :format(n, body, max_time or 60, body, shq(self:url(path)), meta, body, meta, shq(out))
end

function Server:workers()
  local pids = {}
  local list = readcmd("ls /proc") or ""
  for pid in list:gmatch("(%d+)") do
    local state, _, ppid = testing.proc_stat(pid)
    if state and tonumber(ppid) == self.pid and state ~= "Z" then
      local cmdline = (read_file("/proc/" .. pid .. "/cmdline") or ""):gsub("%z", " ")
      pids[#pids + 1] = { pid = tonumber(pid), cmdline = cmdline,
                          shutting_down = cmdline:find("shutting down", 1, true) ~= nil }
    end
  end
  table.sort(pids, function(a, b) return a.pid < b.pid end)
  return pids
end

function Server:reload()
  assert(self.pid and alive(self.pid), "nginx is not running")
  return execute("kill -HUP " .. self.pid)
end

function Server:log_tail(n)
  local s = read_file(self.dir .. "/logs/error.log") or ""
  local lines = {}
  for line in s:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local from = math.max(1, #lines - (n or 40) + 1)
  local out = {}
  for i = from, #lines do out[#out + 1] = lines[i] end
  return table.concat(out, "\n")
end

function Server:error_log()
  return read_file(self.dir .. "/logs/error.log") or ""
end

-- Graceful stop (QUIT), then TERM, then KILL; removes the prefix dir. Idempotent.
function Server:stop(opts)
  if self.stopped then return end
  self.stopped = true
  local pid = self.pid
  if pid and alive(pid) then
    execute("kill -QUIT " .. pid .. " 2>/dev/null")
    local deadline = now() + 10
    while alive(pid) and now() < deadline do sleep(0.05) end
    if alive(pid) then execute("kill -TERM " .. pid .. " 2>/dev/null") sleep(0.5) end
    if alive(pid) then execute("kill -KILL " .. pid .. " 2>/dev/null") end
    deadline = now() + 5
    while alive(pid) and now() < deadline do sleep(0.05) end
  end
  if not (opts and opts.keep_dir) and self.dir and self.dir:find("^/tmp/zklock%-nginx%.") then
    execute("rm -rf " .. shq(self.dir))
  end
end

return M
