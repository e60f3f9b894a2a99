-- zklock.testing.servers: one standalone ZooKeeper server (ZooKeeperServerMain) under a
-- babysitter shell, and the Server methods ensemble nodes share: stop, kill, pause/resume,
-- restart, four-letter words, mntr, mode.
--   server(opts) -> Server;   Server, defaults(opts, timeout), check_install(), write_config(s)
local config = require("zklock.testing.config")
local shell = require("zklock.testing.shell")
local processes = require("zklock.testing.processes")
local ports = require("zklock.testing.ports")
local registry = require("zklock.testing.registry")

local shq, execute, readcmd = shell.shq, shell.execute, shell.readcmd
local read_file, write_file = shell.read_file, shell._write_file
local file_exists, now, sleep, tail = shell.exists, shell.now, shell.sleep, shell.tail
local mktemp, remove_tree = shell.mktemp, shell.remove_tree
local proc_stat, pid_alive = processes.proc_stat, processes.pid_alive
local pick_ports, owns_listener = ports.free_ports, ports.owns_listener
local register, unregister = registry.register, registry.unregister

local STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"

local M = { STANDALONE_MAIN = STANDALONE_MAIN, QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain" }
---------------------------------------------------------------- four-letter words

local have_socat
local function four(port, cmd, timeout)
  if type(cmd) ~= "string" or not cmd:match("^%l%l%l%l$") then
    error("zklock.testing: four(): expected a four-letter word such as 'mntr', got " .. tostring(cmd), 3)
  end
  timeout = math.max(1, math.floor((timeout or 2) + 0.5))
  if have_socat == nil then have_socat = execute("command -v socat >/dev/null 2>&1") end
  local sh
  if have_socat then
    sh = ("printf %s | timeout -k 1 %d socat -T%d -t%d - TCP:127.0.0.1:%d,connect-timeout=%d 2>/dev/null")
      :format(cmd, timeout + 1, timeout, timeout, port, timeout)
  else
    sh = ("timeout -k 1 %d bash -c %s 2>/dev/null"):format(timeout,
      shq(("exec 3<>/dev/tcp/127.0.0.1/%d && printf %s >&3 && cat <&3"):format(port, cmd)))
  end
  local out = readcmd(sh)
  if not out or out == "" then
    return nil, ("no reply to '%s' from 127.0.0.1:%d within %d s (server down or paused?)"):format(cmd, port, timeout)
  end
  return out
end

local function parse_mntr(s)
  local t = {}
  for k, v in s:gmatch("([%w_%.]+)\t([^\n]*)") do
    t[k] = tonumber(v) or v
  end
  return t
end

---------------------------------------------------------------- installation

local function check_install()
  local cfg = config
  if not file_exists(cfg.zookeeper_jar) then
    error("zklock.testing: " .. cfg.zookeeper_jar .. " not found; install the ZooKeeper server with "
      .. "`apt-get install zookeeper` (or set zklock.testing.config.zookeeper_jar)", 3)
  end
  if not processes.pid then
    error("zklock.testing: cannot find this process's pid (needs Linux /proc or a POSIX sh)", 3)
  end
end

local function classpath()
  local cfg = config
  local cp = cfg.conf_dir .. ":" .. cfg.zookeeper_jar
  if cfg.slf4j_jar and file_exists(cfg.slf4j_jar) then cp = cp .. ":" .. cfg.slf4j_jar end
  return cp
end

---------------------------------------------------------------- servers

local Server = {}
Server.__index = Server

local function write_config(self)
  local o = self.opts
  local lines = {
    "tickTime=" .. o.tick_ms,
    "dataDir=" .. self.data_dir,
    "clientPort=" .. self.port,
    "clientPortAddress=127.0.0.1",
    "maxClientCnxns=0",
    "admin.enableServer=false",
    "4lw.commands.whitelist=*",
    "minSessionTimeout=" .. o.min_session_ms,
    "maxSessionTimeout=" .. o.max_session_ms,
  }
  if self.quorum then
    lines[#lines + 1] = "initLimit=" .. (o.init_limit or 10)
    lines[#lines + 1] = "syncLimit=" .. (o.sync_limit or 4)
    for _, l in ipairs(self.quorum) do lines[#lines + 1] = l end
  end
  local keys = {}
  for k in pairs(o.config or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do lines[#lines + 1] = k .. "=" .. tostring(o.config[k]) end
  write_file(self.cfg, table.concat(lines, "\n") .. "\n")
end

-- Start the JVM under a babysitter shell; sets self.pid / self.pid_start.
function Server:_spawn()
  local cfg = config
  local argv = { shq(cfg.java) }
  for _, a in ipairs(cfg.jvm_opts) do argv[#argv + 1] = shq(a) end
  argv[#argv + 1] = shq("-Dznode.container.checkIntervalMs=" .. self.opts.container_check_ms)
  -- TTL nodes (client:create's ttl option) need the server's extended types
  if self.opts.extended_types then argv[#argv + 1] = shq("-Dzookeeper.extendedTypesEnabled=true") end
  for _, a in ipairs(self.opts.jvm_opts or {}) do argv[#argv + 1] = shq(a) end
  -- ZKL_TEST_TAG (set by .ci/run) marks the servers of one run, so a check for servers left
  -- behind looks only at its own
  local tag = os.getenv("ZKL_TEST_TAG")
  if tag and tag:match("^[%w%-_.]+$") then argv[#argv + 1] = shq("-Dzklock.tag=" .. tag) end
  argv[#argv + 1] = "-cp " .. shq(classpath())
  argv[#argv + 1] = self.main
  argv[#argv + 1] = shq(self.cfg)
  local java_cmd = table.concat(argv, " ")
  self.command = java_cmd

  local pid, err = processes.spawn{ command = java_cmd, log = self.log, pidfile = self.dir .. "/java.pid",
                            stop = "TERM", grace = 3 }
  if not pid then
    error("zklock.testing: " .. err .. "\ncommand: " .. java_cmd
      .. "\nlog " .. self.log .. ":\n" .. tail(read_file(self.log), 25), 3)
  end
  local _, st = proc_stat(pid)
  self.pid = tonumber(pid)
  self.pid_start = st
  self.paused = false
  self.stopped = false
end

function Server:running()
  return pid_alive(self.pid, self.pid_start)
end

function Server:log_tail(n)
  return tail(read_file(self.log), n or 25)
end

function Server:four(cmd, timeout)
  return four(self.port, cmd, timeout)
end

function Server:mntr(timeout)
  local s, err = four(self.port, "mntr", timeout)
  if not s then return nil, err end
  local t = parse_mntr(s)
  if next(t) == nil then return nil, "mntr: unexpected reply: " .. s end
  return t
end

function Server:mode(timeout)
  local s, err = four(self.port, "srvr", timeout)
  if not s then return nil, err end
  local m = s:match("Mode: (%a+)")
  if not m then return nil, (s:gsub("%s+$", "")) end   -- e.g. "not currently serving requests"
  return m
end

-- Wait until our JVM listens on the client port and `ruok` gives `imok`; with
-- need_serving, also until it serves requests (standalone servers). Returns true, or
-- nil, reason, why where why is "bind" (port taken), "exit" (JVM died) or "timeout".
function Server:_wait_ready(deadline, need_serving)
  local owned, stranger = false, false
  while true do
    if not self:running() then
      local log = read_file(self.log) or ""
      if log:find("Address already in use", 1, true) then
        return nil, "port already in use", "bind"
      end
      return nil, "the JVM exited", "exit"
    end
    if four(self.port, "ruok", 1) == "imok" then
      -- make sure the answer came from our JVM and not from a stranger on the same port
      owned = owned or owns_listener(self.pid, self.port)
      if owned then
        if not need_serving then return true end
        if self:mode(1) then return true end
      else
        stranger = true
      end
    end
    if now() > deadline then
      if owned then return nil, "the server did not start serving requests", "timeout" end
      if stranger then return nil, "port " .. self.port .. " is answered by another process", "bind" end
      return nil, "no 'imok' reply", "timeout"
    end
    sleep(0.05)
  end
end

function Server:_signal(sig)
  if self:running() then execute(("kill -%s %d 2>/dev/null"):format(sig, self.pid)) end
end

-- Wait until the JVM has exited, and (briefly) until the babysitter has reaped it, so
-- that /proc/<pid> is gone too when this returns.
function Server:_wait_gone(timeout)
  local deadline = now() + timeout
  while self:running() do
    if now() > deadline then return false end
    sleep(0.02)
  end
  local reap_deadline = now() + 2
  while now() < reap_deadline do
    local state, st = proc_stat(self.pid)
    if not state or st ~= self.pid_start then break end
    sleep(0.01)
  end
  return true
end

function Server:_fail(what, reason)
  local msg = ("zklock.testing: %s on 127.0.0.1:%d failed: %s\ncommand: %s\nlog %s:\n%s")
    :format(what, self.port, reason, tostring(self.command), self.log, self:log_tail(25))
  return msg
end

function Server:kill()
  if self:running() then
    self:_signal("KILL")
    if not self:_wait_gone(10) then
      error(("zklock.testing: pid %d survived SIGKILL for 10 s"):format(self.pid), 2)
    end
  end
  self.paused = false
  return true
end

-- opts.keep_dir: keep the temp dir so restart() works (default for ensemble nodes).
function Server:stop(opts)
  if self:running() then
    self:_signal("TERM")
    self:_signal("CONT")               -- a stopped JVM cannot act on SIGTERM
    if not self:_wait_gone(config.stop_timeout) then
      self:_signal("KILL")
      self:_wait_gone(10)
    end
  end
  self.paused = false
  self.stopped = true
  local keep = opts and opts.keep_dir
  if keep == nil then keep = not self.owns_dir end
  if not keep and not self.removed then
    remove_tree(self.dir)
    self.removed = true
    unregister(self)
  end
  return true
end

-- SIGSTOP or SIGCONT, then wait (up to 2 s) until the kernel shows the process (not) stopped.
local function stop_cont(self, what, sig, stopped)
  if not self:running() then
    error(("zklock.testing: %s(): server on port %d is not running"):format(what, self.port), 3)
  end
  self:_signal(sig)
  processes.wait_stopped(self.pid, stopped, 2)
  self.paused = stopped
end

function Server:pause()
  stop_cont(self, "pause", "STOP", true)
  return true
end

function Server:resume()
  stop_cont(self, "resume", "CONT", false)
  return true
end

function Server:restart(timeout)
  if self.removed then
    error("zklock.testing: restart(): the data dir of 127.0.0.1:" .. self.port
      .. " was removed by stop(); use kill() or stop{keep_dir=true} before restart()", 2)
  end
  if self:running() then
    error("zklock.testing: restart(): server on port " .. self.port
      .. " is still running; kill() or stop() it first", 2)
  end
  self:_spawn()
  local ok, reason = self:_wait_ready(now() + (timeout or self.opts.timeout or 20), self.main == STANDALONE_MAIN)
  if not ok then
    local msg = self:_fail("restart", reason)
    self:kill()
    error(msg, 2)
  end
  return self
end

local function defaults(opts, timeout)
  opts = opts or {}
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  -- durations are seconds unless the name ends in _ms: the old millisecond names are refused
  for old, new in pairs({ tick = "tick_ms", min_session = "min_session_ms", max_session = "max_session_ms" }) do
    if o[old] ~= nil then
      error(("zklock.testing: option %s is now %s (milliseconds)"):format(old, new), 3)
    end
  end
  o.tick_ms = o.tick_ms or 500
  o.min_session_ms = o.min_session_ms or 1000
  o.max_session_ms = o.max_session_ms or 60000
  o.container_check_ms = o.container_check_ms or 100
  o.timeout = o.timeout or timeout
  for _, k in ipairs({ "tick_ms", "min_session_ms", "max_session_ms", "container_check_ms", "timeout" }) do
    if type(o[k]) ~= "number" or o[k] <= 0 then
      error(("zklock.testing: option %s must be a positive number, got %s"):format(k, tostring(o[k])), 3)
    end
    if k ~= "timeout" then o[k] = math.floor(o[k]) end   -- milliseconds go into zoo.cfg as integers
  end
  if o.min_session_ms > o.max_session_ms then
    error(("zklock.testing: min_session_ms (%d) is greater than max_session_ms (%d)"):format(
      o.min_session_ms, o.max_session_ms), 3)
  end
  if o.port ~= nil and (type(o.port) ~= "number" or o.port < 1 or o.port > 65535 or o.port ~= math.floor(o.port)) then
    error("zklock.testing: option port must be a TCP port number, got " .. tostring(o.port), 3)
  end
  if o.port then o.port = math.floor(o.port) end
  if o.config ~= nil and type(o.config) ~= "table" then
    error("zklock.testing: option config must be a table of zoo.cfg key = value, got " .. type(o.config), 3)
  end
  if o.extended_types ~= nil and type(o.extended_types) ~= "boolean" then
    error("zklock.testing: option extended_types must be a boolean, got " .. type(o.extended_types), 3)
  end
  if o.jvm_opts ~= nil and type(o.jvm_opts) ~= "table" then
    error("zklock.testing: option jvm_opts must be a list of strings, got " .. type(o.jvm_opts), 3)
  end
  return o
end

function M.server(opts)
  check_install()
  local o = defaults(opts, 20)
  local last
  for _ = 1, (o.port and 1 or 5) do
    local port = o.port or pick_ports(1)[1]
    local dir = mktemp("zklock-zk")
    local self = setmetatable({
      opts = o, main = STANDALONE_MAIN, owns_dir = true, port = port,
      dir = dir, data_dir = dir .. "/data", cfg = dir .. "/zoo.cfg", log = dir .. "/server.log",
    }, Server)
    self.hosts = "127.0.0.1:" .. self.port
    execute("mkdir -p " .. shq(self.data_dir))
    write_config(self)
    register(self)
    local t0 = now()
    self:_spawn()
    local ok, reason, why = self:_wait_ready(t0 + o.timeout, true)
    if ok then
      self.start_time = now() - t0
      return self
    end
    last = self:_fail("start", reason)
    self:kill()
    self:stop()
    if why ~= "bind" then break end
  end
  error(last, 2)
end
M.Server, M.defaults, M.check_install, M.write_config = Server, defaults, check_install, write_config

return M
