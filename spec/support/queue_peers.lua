-- spec/support/queue_peers.lua: the producer and consumer processes of the queue interop spec
-- (75-queue-interop) and the checker over their logs. Lua 5.4 and LuaJIT.
--
--   qp.java(impl, mode, hosts, path, a)  QueuePeer.java in a JVM: impl "curator" (Curator's
--        SimpleDistributedQueue) or "jar" (ZooKeeper's queue recipe); mode "produce" (a.count,
--        a.prefix) or "consume" (until a take of a.poll seconds finds nothing once the file
--        a.stop exists; a.threads threads on one Curator/ZooKeeper client, a.work_ms sleep after each take); compiled
--        with javac on first use into $TMPDIR/zklock-queue-peer-<hash of source and jars>
--   qp.lua(mode, hosts, path, a)         queue_worker.lua (same interpreter and build as this
--        process): produce (a.count, a.prefix) or consume (a.cos coroutines, a.poll, a.stop)
--   p:alive(), p:kill() (SIGKILL, waits until gone), p:wait_exit(timeout) -> true when it ended,
--   p:log() -> { ready = connected, puts = { item... }, takes = { item... }, done = n | nil, ms = first to last put or
--        take (Java peers), errors = { text... } }
--   qp.check(procs) -> report: every item put is taken once (puts/takes/duplicates/lost, and
--        the lost items beyond what the killed consumers may account for)
--   qp.stop_all()                        kill every process started here, remove temp dirs
local fw = require("support.fault_worker")
local peers = require("support.peers.peer")
local testing = require("zklock.testing")

local shq, sh, read_file = testing.shq, testing.sh, testing.read_file
local exists, pid_alive, sleep = testing.exists, testing.pid_alive, testing.sleep

local M = {}
local ROOT = fw.ROOT
local scope = fw.scope("zklock-queue")

local function mono() return require("zklock.core").now() / 1000 end

local function classes(class)
  class = class or "QueuePeer"
  local src = ROOT .. "/spec/support/peers/" .. class .. ".java"
  local cp = peers.classpath() .. ":" .. peers.JAVA_DIR .. "/zookeeper-recipes-queue.jar"
  local hash = sh(("{ cat %s; echo %s; javac -version 2>&1; } | sha1sum"):format(shq(src), shq(cp))):match("^(%x+)")
  assert(hash, "sha1sum failed")
  local base = os.getenv("TMPDIR") or "/tmp"
  local dir = ("%s/zklock-queue-peer-%s"):format(base, hash:sub(1, 16))
  if exists(dir .. "/" .. class .. ".class") then return dir, cp end
  local tmp = (sh("mktemp -d " .. shq(base .. "/zklock-queue-build.XXXXXXXX")):gsub("%s+$", ""))
  local out = sh(("javac -nowarn -d %s -cp %s %s 2>&1; echo rc=$?"):format(shq(tmp), shq(cp), shq(src)))
  if not out:match("rc=0%s*$") then
    sh("rm -rf -- " .. shq(tmp))
    error("javac " .. class .. ".java failed:\n" .. out)
  end
  sh(("mv -T %s %s 2>/dev/null || rm -rf -- %s"):format(shq(tmp), shq(dir), shq(tmp)))
  assert(exists(dir .. "/" .. class .. ".class"), "compiled classes not found in " .. dir)
  return dir, cp
end

local Proc = {}
Proc.__index = Proc

local function start(name, cmd, mode)
  local dir = scope.tmpdir(name)
  local log = dir .. "/log"
  local pid, st = fw.spawn_bg(cmd(log), dir .. "/output")
  return scope.add(setmetatable({ name = name, mode = mode, pid = pid, start = st, dir = dir, logfile = log }, Proc))
end

function M.java(impl, mode, hosts, path, a)
  local dir, cp = classes()
  local x, y = a.count or a.poll or 1, a.prefix or a.stop
  return start(impl .. "-" .. mode, function(log)
    return ("env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS java -Xmx128m -XX:+UseSerialGC "
      .. "-XX:TieredStopAtLevel=1 -Xss512k -cp %s QueuePeer %s %s %s %s %s %s %s %d %d %d"):format(
      shq(dir .. ":" .. cp), impl, mode, shq(hosts), shq(path), shq(log), shq(tostring(x)), shq(tostring(y)),
      a.max or 120, a.threads or 1, a.work_ms or 0)
  end, mode)
end

-- DQueuePeer.java: Curator's DistributedQueue. produce: a.count, a.prefix, a.multi (every
-- multi-th message holds 3 items); consume: a.idle seconds, a.stop, a.work_ms; a.lock_path
-- (nil: plain mode).
function M.dqueue(mode, hosts, path, a)
  local dir, cp = classes("DQueuePeer")
  local x, y = a.count or a.idle or 1, a.prefix or a.stop
  return start("curator-dq-" .. mode, function(log)
    return ("env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS java -Xmx128m -XX:+UseSerialGC "
      .. "-XX:TieredStopAtLevel=1 -Xss512k -cp %s DQueuePeer %s %s %s %s %s %s %d %s %d"):format(
      shq(dir .. ":" .. cp), mode, shq(hosts), shq(path), shq(log), shq(tostring(x)), shq(tostring(y)),
      a.max or 120, shq(a.lock_path or "-"), a.multi or a.work_ms or 0)
  end, mode)
end

function M.lua(mode, hosts, path, a)
  local lpath = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;" .. ROOT .. "/spec/?.lua"
  local setup = ("package.path=%q;package.cpath=%q"):format(lpath, fw.cpath())
  return start("zklock-" .. mode, function(log)
    local argv = { "hosts=" .. hosts, "path=" .. path, "log=" .. log, "mode=" .. mode }
    for k, v in pairs(a) do argv[#argv + 1] = k .. "=" .. tostring(v) end
    for i, v in ipairs(argv) do argv[i] = shq(v) end
    return ("env ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 %s -e %s %s %s"):format(
      fw.interpreter(), shq(setup), shq(ROOT .. "/spec/support/peers/queue_worker.lua"), table.concat(argv, " "))
  end, mode)
end

function Proc:alive() return pid_alive(self.pid, self.start) end

function Proc:kill()
  self.killed = true
  os.execute(("kill -KILL %d 2>/dev/null"):format(self.pid))
  local deadline = mono() + 5
  while pid_alive(self.pid, self.start) and mono() < deadline do sleep(0.02) end
  return not pid_alive(self.pid, self.start)
end
Proc.stop = Proc.kill

function Proc:wait_exit(timeout)
  local deadline = mono() + timeout
  while pid_alive(self.pid, self.start) do
    if mono() > deadline then return false end
    sleep(0.05)
  end
  return true
end

function Proc:output() return read_file(self.dir .. "/output") or "" end

function Proc:log()
  local t = { puts = {}, takes = {}, errors = {}, starts = {}, commits = {} }
  for l in ((read_file(self.logfile) or "") .. "\n"):gmatch("([^\n]*)\n") do
    local k, rest = l:match("^(%u) (.*)$")
    if k == "P" then t.puts[#t.puts + 1] = rest
    elseif k == "T" then t.takes[#t.takes + 1] = rest
    elseif k == "S" then t.starts[#t.starts + 1] = rest
    elseif k == "C" then t.commits[#t.commits + 1] = rest
    elseif l == "R" then t.ready = true
    elseif k == "D" then t.done, t.ms = tonumber(rest:match("^(%d+)")), tonumber(rest:match(" (%d+)$"))
    elseif k == "X" then t.errors[#t.errors + 1] = rest end
  end
  return t
end

-- Every item put (P lines of the producers, and `extra_puts`) taken exactly once. A consumer
-- logs an item after its take returned, so the one gap allowed is an item a consumer deleted
-- and was killed before logging: at most `cos` per killed consumer (its concurrent takes).
function M.check(procs, extra_puts)
  local r = { puts = 0, takes = 0, duplicates = {}, lost = {}, unknown = {}, allowed = 0, killed = 0,
              per = {} }
  local put, taken = {}, {}
  local function add_put(item)
    assert(not put[item], "item put twice: " .. item)
    put[item] = true
    r.puts = r.puts + 1
  end
  for _, item in ipairs(extra_puts or {}) do add_put(item) end
  for _, p in ipairs(procs) do
    local t = p:log()
    for _, item in ipairs(t.puts) do add_put(item) end
    for _, item in ipairs(t.takes) do
      if taken[item] then r.duplicates[#r.duplicates + 1] = item end
      taken[item] = (taken[item] or 0) + 1
      r.takes = r.takes + 1
    end
    if p.mode == "consume" then r.per[#r.per + 1] = { name = p.name, takes = #t.takes, killed = p.killed } end
    if p.killed and p.mode == "consume" then
      r.killed = r.killed + 1
      r.allowed = r.allowed + (p.cos or 1)
    end
  end
  for item in pairs(taken) do
    if not put[item] then r.unknown[#r.unknown + 1] = item end
  end
  for item in pairs(put) do
    if not taken[item] then r.lost[#r.lost + 1] = item end
  end
  table.sort(r.lost)
  return r
end

M.stop_all = scope.stop_all

return M
