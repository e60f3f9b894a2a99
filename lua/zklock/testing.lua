--- zklock.testing: throwaway ZooKeeper servers for lock tests.
--
-- Starts real ZooKeeper servers (Debian package `zookeeper`, 3.8) on 127.0.0.1,
-- each on a random free port with a private temporary data directory, and gives
-- you the knobs that fault tests need: kill, SIGSTOP/SIGCONT, restart on the same
-- port and data, four-letter words, and forced session expiry.
--
--     local testing = require("zklock.testing")
--
--     describe("my lock", function()
--       local zk
--       setup(function() zk = testing.server{ tick_ms = 500, min_session_ms = 1000 } end)
--       teardown(function() if zk then zk:stop() end end)
--
--       it("survives a server restart", function()
--         local c = zklock.connect(zk.hosts)
--         ...
--         zk:kill(); zk:restart()
--         assert.is_number(zk:mntr().zk_znode_count)
--       end)
--     end)
--
-- API
--   testing.server(opts) -> server      one standalone ZooKeeperServerMain
--     opts.tick_ms (500)                tickTime
--     opts.min_session_ms (1000)        minSessionTimeout
--     opts.max_session_ms (60000)       maxSessionTimeout
--     opts.container_check_ms (100)     -Dznode.container.checkIntervalMs
--     opts.port (nil = random free port in 20000-40000; retried on bind failure)
--     opts.timeout (20)                 seconds to wait for `ruok` -> `imok`
--     opts.config                       extra zoo.cfg lines: { ["key"] = value, ... }
--     opts.jvm_opts                     extra JVM arguments: { "-Dfoo=bar", ... }
--   server.hosts  "127.0.0.1:PORT"      server.port, server.dir (temp dir), server.pid,
--   server.data_dir, server.cfg, server.log (server output, file in server.dir)
--   server:stop([{keep_dir=true}])      SIGTERM (SIGKILL after 10 s), wait, remove server.dir.
--                                       Idempotent. Nodes of an ensemble keep their dir
--                                       (the ensemble removes it in ens:stop()).
--   server:kill()                       SIGKILL and wait until gone; dir kept for restart()
--   server:pause() / server:resume()    SIGSTOP / SIGCONT (a reliable connection loss)
--   server:restart([timeout_s])         start again on the same port and data; waits `ruok`
--   server:four(cmd [, timeout_s])      four-letter word (ruok, mntr, srvr, stat, cons, dump,
--                                       wchc, wchp, ...) -> reply string | nil, err
--   server:mntr()                       -> { zk_znode_count = 5, zk_server_state = "standalone", ... }
--                                          | nil, err
--   server:mode()                       -> "standalone" | "leader" | "follower" | nil, err
--   server:running()                    -> boolean (the JVM process exists and is not a zombie)
--   server:log_tail([n])                -> last n lines of the server output
--
--   testing.ensemble(opts) -> ensemble  n x QuorumPeerMain (opts.n = 3, other opts as above,
--                                       opts.timeout = 30); returns when every node answers
--                                       and exactly one is leader
--   ens.hosts  "127.0.0.1:p1,127.0.0.1:p2,..."   ens.nodes[i] (servers, as above), ens.dir
--   ens:leader([timeout_s])             index of the node that is leader (exactly one node says
--                                       leader and a quorum serves); polls up to timeout_s (10)
--                                       -> i | nil, err. Paused and dead nodes are skipped.
--   ens:wait_quorum([timeout_s])        like leader(), and also waits until every running,
--                                       unpaused node serves as leader or follower -> i | nil, err
--   ens:stop()                          stops all nodes, removes ens.dir. Idempotent.
--
--   testing.stop_all()                  stops every server and ensemble this process started
--   testing.expire(client [, hosts [, timeout_ms]])
--                                       expire the client's session at the server (a second
--                                       handle with the same session id and password connects
--                                       and closes); needs the C module zklock.core
--                                       -> true | nil, err
--   testing.sleep(seconds)              fractional sleep
--   testing.now()                       monotonic seconds (for measuring), 10 ms resolution
--
--   Shell, file and process helpers (also used by the spec support code and its workers):
--   testing.shq(s)                      s quoted for POSIX sh ('...')
--   testing.sh(cmd)                     run cmd under sh (LD_PRELOAD unset) -> its stdout string;
--                                       raises if no shell can be started
--   testing.execute(cmd)                run cmd under sh (LD_PRELOAD unset) -> true if it exits 0
--   testing.read_file(path)             -> the whole file | nil if it cannot be opened
--   testing.write_file(path, s [, mode])  write (mode "w", or "a" to append); raises on failure
--   testing.exists(path)                -> boolean (the file can be opened for reading)
--   testing.proc_stat(pid)              -> state letter, starttime, ppid (strings, from
--                                          /proc/<pid>/stat) | nil if there is no such process
--   testing.pid_alive(pid [, starttime]) -> boolean: exists, is not a zombie, and (if starttime
--                                          is given) is the same process, not a reused pid
--   testing.exit_with_parent(client, parent_pid [, period [, busy [, on_gone]]])
--                                       in a worker process: exit (status 4, after on_gone())
--                                       once the test process that started it is gone
--   testing.free_ports(n [, avoid])     n distinct loopback ports no socket uses now (from
--                                       /proc/net/tcp*, in testing.config.port_min..port_max)
--   testing.spawn{ command = sh_cmd, log = path, pidfile = path [, cwd = dir]
--                  [, stop = "TERM"] [, grace = 3] }
--                                       run a long-lived command that goes away with this
--                                       process (babysitter shell, as for the servers; on exit:
--                                       `stop` signal, KILL after `grace` s) -> pid | nil, err
--   testing.pid, testing.pid_start      this process's pid (number) and its starttime (string)
--
-- Failure convention: a server that cannot be started raises an error that carries the
-- tail of its log; four()/mntr()/mode()/leader()/wait_quorum()/expire() return nil, err.
--
-- Cleanup. Every server is recorded and testing.stop_all() stops them; it also runs when
-- the Lua state is closed (busted closes it on exit). Independently, each JVM runs under a
-- small babysitter shell (its own session, via setsid) that polls once a second whether the
-- Lua process that started it still exists; if not, it terminates the JVM. So a test process
-- that crashes or is SIGKILLed leaves no server behind (it goes within ~1-4 s). The temp dir
-- is left behind in that case only.
--
-- Requirements: Linux (/proc), POSIX sh, java, the `zookeeper` package
-- (/usr/share/java/zookeeper.jar), and socat or bash for four-letter words. Pure Lua:
-- runs under Lua 5.1-5.4 and LuaJIT. Paths can be changed in testing.config before use.

local M = { _NAME = "zklock.testing", _VERSION = "0.1.0" }

M.config = {
  java = os.getenv("ZKLOCK_JAVA") or "java",
  zookeeper_jar = "/usr/share/java/zookeeper.jar",
  conf_dir = "/etc/zookeeper/conf",
  slf4j_jar = "/usr/share/java/slf4j-simple.jar",   -- added to the class path if present
  jvm_opts = { "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true" },
  stop_timeout = 10,                               -- s: SIGTERM grace before SIGKILL
  port_min = 20000, port_max = 40000,
}

local STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
local QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

---------------------------------------------------------------- small helpers

local function shq(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.shq = shq

-- Helper commands run without a sanitizer preload: with libasan preloaded (the ASan test
-- run), tools such as pgrep can deadlock at start-up.
local function clean(cmd)
  if os.getenv("LD_PRELOAD") then return "unset LD_PRELOAD; " .. cmd end
  return cmd
end

-- os.execute that returns true/false under both 5.1/LuaJIT (number) and 5.2+ (boolean)
local function execute(cmd)
  local a = os.execute(clean(cmd))
  return a == true or a == 0
end
M.execute = execute

local function readcmd(cmd)
  local f = io.popen(clean(cmd), "r")
  if not f then return nil end
  local out = f:read("*a")
  f:close()
  return out
end

function M.sh(cmd)
  local out = readcmd(cmd)
  if not out then error("zklock.testing: cannot run a shell for: " .. tostring(cmd), 2) end
  return out
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
M.read_file = read_file

local function write_file(path, s, mode)
  local f, err = io.open(path, mode or "w")
  if not f then error("zklock.testing: cannot write " .. path .. ": " .. tostring(err), 3) end
  f:write(s)
  f:close()
end
function M.write_file(path, s, mode) write_file(path, s, mode) end

local function file_exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end
M.exists = file_exists

function M.sleep(seconds)
  if seconds and seconds > 0 then
    execute(("sleep %.3f"):format(seconds))
  end
end

-- Monotonic seconds from /proc/uptime (10 ms resolution); os.time() as a fallback.
function M.now()
  local f = io.open("/proc/uptime", "r")
  if f then
    local t = f:read("*n")
    f:close()
    if t then return t end
  end
  return os.time()
end
local now, sleep = M.now, M.sleep

local function tail(s, n)
  if not s or s == "" then return "(empty)" end
  local lines = {}
  for line in (s .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  while #lines > 0 and lines[#lines] == "" do lines[#lines] = nil end
  local first = #lines - n + 1
  if first < 1 then first = 1 end
  local out = {}
  for i = first, #lines do out[#out + 1] = "  | " .. lines[i] end
  return table.concat(out, "\n")
end

---------------------------------------------------------------- processes

-- pid -> state letter, starttime, ppid (strings) from /proc/<pid>/stat, or nil
local function proc_stat(pid)
  local s = read_file("/proc/" .. tostring(pid) .. "/stat")
  if not s then return nil end
  local rest = s:match("^.*%) (.*)$")       -- comm may contain spaces and ')'
  if not rest then return nil end
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  -- fields[1] = state (stat field 3), fields[2] = ppid (field 4), fields[20] = starttime (field 22)
  return fields[1], fields[20], fields[2]
end
M.proc_stat = proc_stat

local function pid_alive(pid, starttime)
  if not pid then return false end
  local state, st = proc_stat(pid)
  if not state or state == "Z" or state == "X" or state == "x" then return false end
  if starttime and st ~= starttime then return false end   -- pid was reused
  return true
end
M.pid_alive = pid_alive

-- The PID of this Lua process, read from /proc/self/stat, or $PPID of a child shell.
local MY_PID, MY_START
do
  local s = read_file("/proc/self/stat")
  MY_PID = s and s:match("^(%d+)")
  if not MY_PID then
    MY_PID = (readcmd("echo $PPID") or ""):match("(%d+)")
  end
  if MY_PID then
    local _, st = proc_stat(MY_PID)
    MY_START = st
  end
end
M.pid, M.pid_start = tonumber(MY_PID), MY_START

---------------------------------------------------------------- ports

-- Park-Miller generator of our own, so that we neither depend on nor disturb math.random
-- (LuaJIT seeds it identically in every process).
local rng_state
local function rand_int(lo, hi)
  if not rng_state then
    local up = math.floor(now() * 100)
    rng_state = ((tonumber(MY_PID) or 1) * 7919 + up + os.time()) % 2147483646 + 1
    for _ = 1, 3 do rng_state = (rng_state * 16807) % 2147483647 end
  end
  rng_state = (rng_state * 16807) % 2147483647
  return lo + rng_state % (hi - lo + 1)
end

-- every local TCP port that appears in /proc/net/tcp{,6} (listening or not)
local function used_ports()
  local used = {}
  for _, file in ipairs({ "/proc/net/tcp", "/proc/net/tcp6" }) do
    local s = read_file(file)
    if s then
      for hex in s:gmatch("\n%s*%d+:%s+%x+:(%x+)%s") do
        used[tonumber(hex, 16)] = true
      end
    end
  end
  return used
end

-- distinct free ports; `taken` lists ports to avoid as well
local function pick_ports(count, taken)
  local used = used_ports()
  for _, p in ipairs(taken or {}) do used[p] = true end
  local ports = {}
  local tries = 0
  while #ports < count do
    tries = tries + 1
    if tries > 1000 then error("zklock.testing: no free TCP port found in the range", 3) end
    local p = rand_int(M.config.port_min, M.config.port_max)
    if not used[p] then
      used[p] = true
      ports[#ports + 1] = p
    end
  end
  return ports
end
M.free_ports = pick_ports

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
  local cfg = M.config
  if not file_exists(cfg.zookeeper_jar) then
    error("zklock.testing: " .. cfg.zookeeper_jar .. " not found; install the ZooKeeper server with "
      .. "`apt-get install zookeeper` (or set zklock.testing.config.zookeeper_jar)", 3)
  end
  if not MY_PID then
    error("zklock.testing: cannot find this process's pid (needs Linux /proc or a POSIX sh)", 3)
  end
end

local function classpath()
  local cfg = M.config
  local cp = cfg.conf_dir .. ":" .. cfg.zookeeper_jar
  if cfg.slf4j_jar and file_exists(cfg.slf4j_jar) then cp = cp .. ":" .. cfg.slf4j_jar end
  return cp
end

local function mktemp(prefix)
  local dir = readcmd("mktemp -d -t " .. prefix .. ".XXXXXXXX 2>/dev/null")
  dir = dir and dir:match("^%s*(.-)%s*$")
  if not dir or dir == "" or not dir:match("^/") then
    error("zklock.testing: mktemp -d failed (is $TMPDIR writable?)", 3)
  end
  return dir
end

local function remove_tree(dir)
  -- only ever remove what mktemp made for us
  if dir and dir:match("/zklock%-zk[%w%-]*%.[%w]+$") then
    execute("rm -rf -- " .. shq(dir))
  end
end

---------------------------------------------------------------- registry and shutdown

local live = {}   -- servers and ensembles with something left to clean up

local function register(obj)
  for _, o in ipairs(live) do if o == obj then return end end
  live[#live + 1] = obj
end

local function unregister(obj)
  for i = #live, 1, -1 do
    if live[i] == obj then table.remove(live, i) end
  end
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

-- A worker process started by a test stops when that test process is gone: a coroutine of
-- `client` checks every `period` s (0.5), while busy() is true (always, if nil), that
-- parent_pid (as started now: a reused pid does not count) still exists; once it does not, it
-- calls on_gone() (to log and flush) and exits the process with status 4.
function M.exit_with_parent(client, parent_pid, period, busy, on_gone)
  if not parent_pid then return end
  local _, start = proc_stat(parent_pid)
  client:spawn(function()
    while busy == nil or busy() do
      client:sleep(period or 0.5)
      if not pid_alive(parent_pid, start) then
        if on_gone then on_gone() end
        os.exit(4)
      end
    end
  end)
end

-- Run a long-lived command under a babysitter shell in its own session (setsid): the shell
-- starts the command in the background and reaps it, and a watcher polls once a second that
-- this Lua process (pid + start time) still exists; once it is gone it sends CONT and `stop`
-- to the command, then KILL after `grace` seconds. Sanitizer preloads are unset (they belong
-- to Lua, not to the child). Returns the command's pid (a string) once it is in pidfile.
function M.spawn(o)
  if not MY_PID then return nil, "cannot tell this process's pid (no /proc/self/stat)" end
  local pidfile = o.pidfile
  os.remove(pidfile)
  local tries = math.max(1, math.floor((o.grace or 3) * 2 + 0.5))
  local script = table.concat({
    "set -f",
    "unset LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS",
    "cd " .. shq(o.cwd or "/") .. " || exit 1",
    "echo \"=== start $(date '+%F %T')\" >>" .. shq(o.log),
    o.command .. " </dev/null >>" .. shq(o.log) .. " 2>&1 &",
    "J=$!",
    "echo $J >" .. shq(pidfile .. ".tmp") .. " && mv -f " .. shq(pidfile .. ".tmp") .. " " .. shq(pidfile),
    "(",
    "  while :; do",
    "    s=$(cat /proc/" .. MY_PID .. "/stat 2>/dev/null) || break",
    "    s=${s##*) }; set -- $s",
    "    [ \"$1\" != Z ] || break",
    MY_START and ("    [ \"${20}\" = " .. MY_START .. " ] || break") or "    :",
    "    kill -0 $J 2>/dev/null || exit 0",
    "    sleep 1",
    "  done",
    "  kill -CONT $J 2>/dev/null; kill -" .. (o.stop or "TERM") .. " $J 2>/dev/null",
    "  i=0; while [ $i -lt " .. tries .. " ]; do kill -0 $J 2>/dev/null || exit 0; sleep 0.5; i=$((i+1)); done",
    "  kill -KILL $J 2>/dev/null",
    ") </dev/null >/dev/null 2>&1 &",
    "W=$!",
    "wait $J",
    "kill $W 2>/dev/null",
  }, "\n")
  if not execute("setsid sh -c " .. shq(script) .. " </dev/null >/dev/null 2>&1 &") then
    return nil, "could not start the babysitter shell (setsid sh)"
  end
  local deadline = now() + 5
  repeat
    local s = read_file(pidfile)
    local pid = s and s:match("(%d+)")
    if pid then return pid end
    sleep(0.01)
  until now() > deadline
  return nil, "the command did not start (no pid file after 5 s)"
end

-- Start the JVM under a babysitter shell; sets self.pid / self.pid_start.
function Server:_spawn()
  local cfg = M.config
  local argv = { shq(cfg.java) }
  for _, a in ipairs(cfg.jvm_opts) do argv[#argv + 1] = shq(a) end
  argv[#argv + 1] = shq("-Dznode.container.checkIntervalMs=" .. self.opts.container_check_ms)
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

  local pid, err = M.spawn{ command = java_cmd, log = self.log, pidfile = self.dir .. "/java.pid",
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

-- inodes of the sockets listening on TCP `port` (any address), from /proc/net/tcp{,6}
local function listen_inodes(port)
  local hex = ("%04X"):format(port)
  local inodes = {}
  for _, file in ipairs({ "/proc/net/tcp", "/proc/net/tcp6" }) do
    local s = read_file(file)
    if s then
      for line in s:gmatch("[^\n]+") do
        local f = {}
        for w in line:gmatch("%S+") do f[#f + 1] = w end
        -- f[2] = local address, f[4] = state (0A = LISTEN), f[10] = inode
        if f[4] == "0A" and f[2] and f[2]:match(":(%x+)$") == hex then inodes[#inodes + 1] = f[10] end
      end
    end
  end
  return inodes
end

-- true if process `pid` holds the socket listening on `port`
local function owns_listener(pid, port)
  local inodes = listen_inodes(port)
  if #inodes == 0 then return false end
  local fds = readcmd("ls -l /proc/" .. pid .. "/fd 2>/dev/null") or ""
  for _, ino in ipairs(inodes) do
    if fds:find("socket:[" .. ino .. "]", 1, true) then return true end
  end
  return false
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
    if not self:_wait_gone(M.config.stop_timeout) then
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
  local deadline = now() + 2
  while (proc_stat(self.pid) == "T") ~= stopped and now() < deadline do sleep(0.01) end
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
    error("zklock.testing: restart(): server on port " .. self.port .. " is still running; kill() or stop() it first", 2)
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
    error(("zklock.testing: min_session_ms (%d) is greater than max_session_ms (%d)"):format(o.min_session_ms, o.max_session_ms), 3)
  end
  if o.port ~= nil and (type(o.port) ~= "number" or o.port < 1 or o.port > 65535 or o.port ~= math.floor(o.port)) then
    error("zklock.testing: option port must be a TCP port number, got " .. tostring(o.port), 3)
  end
  if o.port then o.port = math.floor(o.port) end
  if o.config ~= nil and type(o.config) ~= "table" then
    error("zklock.testing: option config must be a table of zoo.cfg key = value, got " .. type(o.config), 3)
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

---------------------------------------------------------------- ensembles

local Ensemble = {}
Ensemble.__index = Ensemble

function Ensemble:_live_nodes()
  local out = {}
  for i, node in ipairs(self.nodes) do
    if not node.paused and node:running() then out[#out + 1] = i end
  end
  return out
end

-- one round: index of the single leader if a quorum serves, plus whether all live nodes serve
function Ensemble:_poll()
  local leaders, serving, live = {}, 0, self:_live_nodes()
  for _, i in ipairs(live) do
    local m = self.nodes[i]:mode(1)
    if m == "leader" then leaders[#leaders + 1] = i end
    if m == "leader" or m == "follower" or m == "standalone" then serving = serving + 1 end
  end
  local quorum = math.floor(#self.nodes / 2) + 1
  if #leaders == 1 and serving >= quorum then
    return leaders[1], serving == #live
  end
  if #self.nodes == 1 and serving == 1 then return 1, true end
  return nil, false, ("%d leader(s), %d of %d nodes serving"):format(#leaders, serving, #self.nodes)
end

function Ensemble:leader(timeout)
  local deadline = now() + (timeout or 10)
  local why
  while true do
    local i, _, w = self:_poll()
    if i then return i end
    why = w
    if now() > deadline then return nil, "no leader: " .. tostring(why) end
    sleep(0.1)
  end
end

function Ensemble:wait_quorum(timeout)
  local deadline = now() + (timeout or 30)
  local why
  while true do
    local i, all, w = self:_poll()
    if i and all then return i end
    why = w or "not every running node serves yet"
    if now() > deadline then return nil, "no quorum: " .. tostring(why) end
    sleep(0.1)
  end
end

function Ensemble:running()
  for _, node in ipairs(self.nodes) do
    if node:running() then return true end
  end
  return false
end

function Ensemble:stop()
  -- terminate all at once, then wait for each
  for _, node in ipairs(self.nodes) do node:_signal("TERM"); node:_signal("CONT") end
  for _, node in ipairs(self.nodes) do node:stop({ keep_dir = true }) end
  if not self.removed then
    remove_tree(self.dir)
    self.removed = true
    for _, node in ipairs(self.nodes) do node.removed = true end
  end
  unregister(self)
  return true
end

function M.ensemble(opts)
  check_install()
  local o = defaults(opts, 30)
  local n = o.n or 3
  if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then
    error("zklock.testing: ensemble option n must be a positive integer, got " .. tostring(n), 2)
  end
  local last
  for _ = 1, 3 do
    local t0 = now()
    local ports = pick_ports(3 * n)
    local root = mktemp("zklock-zk-ens")
    local self = setmetatable({ n = n, dir = root, nodes = {}, opts = o }, Ensemble)
    local quorum, hosts = {}, {}
    for i = 1, n do
      quorum[i] = ("server.%d=127.0.0.1:%d:%d"):format(i, ports[3 * i - 1], ports[3 * i])
      hosts[i] = "127.0.0.1:" .. ports[3 * i - 2]
    end
    self.hosts = table.concat(hosts, ",")
    register(self)
    for i = 1, n do
      local dir = root .. "/node" .. i
      local node = setmetatable({
        opts = o, main = QUORUM_MAIN, owns_dir = false, quorum = quorum, index = i, ensemble = self,
        dir = dir, data_dir = dir .. "/data", cfg = dir .. "/zoo.cfg", log = dir .. "/server.log",
        port = ports[3 * i - 2], hosts = hosts[i],
      }, Server)
      execute("mkdir -p " .. shq(node.data_dir))
      write_file(node.data_dir .. "/myid", i .. "\n")
      write_config(node)
      self.nodes[i] = node
    end
    for i = 1, n do self.nodes[i]:_spawn() end
    local deadline = t0 + o.timeout
    -- a node whose quorum or election port is taken keeps running and logs a BindException
    local function bind_failure()
      for i = 1, n do
        local log = read_file(self.nodes[i].log) or ""
        if log:find("Address already in use", 1, true) then return i end
      end
    end
    local ok, reason, why, bad = true, nil, nil, nil
    for i = 1, n do
      ok, reason, why = self.nodes[i]:_wait_ready(deadline)
      if not ok then bad = i break end
    end
    if ok then
      local leader, err = self:wait_quorum(deadline - now())
      bad = bind_failure()
      if leader and not bad then
        self.start_time = now() - t0
        return self
      end
      if bad then
        reason, why = "a quorum or election port is already in use", "bind"
      else
        reason, bad = err, 1
      end
    end
    last = self.nodes[bad]:_fail("ensemble start (node " .. bad .. ")", reason)
    for i = 1, n do self.nodes[i]:kill() end
    self:stop()
    if why ~= "bind" then break end
  end
  error(last, 2)
end

---------------------------------------------------------------- stop_all

function M.stop_all()
  local objs = {}
  for i, o in ipairs(live) do objs[i] = o end
  -- signal everything first so the JVMs shut down in parallel
  for _, o in ipairs(objs) do
    local nodes = o.nodes or { o }
    for _, node in ipairs(nodes) do node:_signal("TERM"); node:_signal("CONT") end
  end
  local errs = {}
  for _, o in ipairs(objs) do
    local ok, err
    if getmetatable(o) == Ensemble then
      ok, err = pcall(o.stop, o)
    else
      ok, err = pcall(o.stop, o, { keep_dir = false })
    end
    if not ok then errs[#errs + 1] = tostring(err) end
  end
  for i = #live, 1, -1 do live[i] = nil end
  if #errs > 0 then return nil, table.concat(errs, "\n") end
  return true
end

-- Run stop_all when the Lua state is closed (os.exit(code, true), end of script, busted exit).
do
  local function on_close() pcall(M.stop_all) end
  local sentinel
  if newproxy then                       -- Lua 5.1 / LuaJIT: only userdata has __gc
    sentinel = newproxy(true)
    getmetatable(sentinel).__gc = on_close
  else
    sentinel = setmetatable({}, { __gc = on_close })
  end
  M._sentinel = sentinel
  -- anchor it in the registry too, so it lives until the state closes even if the
  -- module table is dropped
  local ok, reg = pcall(function() return debug.getregistry() end)
  if ok and type(reg) == "table" then reg["zklock.testing.sentinel"] = sentinel end
end

---------------------------------------------------------------- session expiry

-- Expire a live client's session at the server: a second handle connects with the same
-- session id and password, then closes (test catalogue §2.2). The victim sees
-- SUSPENDED (a CONNECTING/CONNECTED flap) and then EXPIRED, typically within 100 ms.
function M.expire(client, hosts, timeout_ms)
  if client == nil then error("zklock.testing.expire: expected a zklock client as argument 1", 2) end
  local ok, core = pcall(require, "zklock.core")
  if not ok or type(core) ~= "table" or type(core.expire_session) ~= "function" then
    error("zklock.testing.expire: needs the C module zklock.core with expire_session() "
      .. "(build it and put zklock/core.so on package.cpath)"
      .. (ok and "" or (": " .. tostring(core))), 2)
  end
  if hosts == nil then
    local h = client.hosts
    if type(h) == "function" then h = h(client) end
    hosts = h
  end
  if type(hosts) ~= "string" or hosts == "" then
    error("zklock.testing.expire: cannot tell the client's hosts; pass them as argument 2", 2)
  end
  if type(client.session) ~= "function" then
    error("zklock.testing.expire: argument 1 has no session() method (expected a zklock client)", 2)
  end
  local sid, password = client:session()
  if sid == nil then return nil, "expire: client has no session: " .. tostring(password) end
  if type(sid) == "number" then sid = ("%016x"):format(sid) end   -- core takes 16 hex digits
  return core.expire_session(hosts, sid, password, timeout_ms or 5000)
end

return M
