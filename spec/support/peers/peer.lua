-- spec/support/peers/peer.lua: the foreign contenders of the interop specs (70-curator, 71-kazoo)
-- and the checks on their hold logs. Lua 5.4 and LuaJIT.
--
--   local peers = require("support.peers.peer")
--   peers.curator(hosts [, opts])  start CuratorPeer.java in a JVM (compiled with javac on first use
--                                  into $TMPDIR/zklock-curator-peer-<hash of source and jars>)
--   peers.kazoo(hosts [, opts])    start kazoo_peer.py under /usr/bin/python3
--     opts.session_ms (10000), opts.max_seconds (600: the peer exits after that in any case)
--     p:send(cmd, args) -> seq      append "<seq> <cmd> k=v ..." to the peer's control file
--     p:wait(seq, timeout, pump)   -> reply { status = "ok"|"timeout"|"err", f = { k = v }, text }
--                                     (raises on timeout or if the peer died, with its output);
--                                     pump(dt) is called while waiting (drive zklock clients there)
--     p:reply(seq)                 -> the reply if it has arrived, else nil (never blocks)
--     p:call(cmd, args, timeout, pump) = p:wait(p:send(cmd, args), timeout, pump)
--     p:alive(), p:output(), p:stop()   (quit, then SIGKILL if needed)
--   peers.zklock_loop(args)        start spec/support/peers/zklock_peer.lua (same interpreter
--                                  and build as this process); w:wait_exit(timeout, pump), w:stop()
--   peers.read_log(path, t)        parse a peer log into t (or a new table):
--                                  t.holds (H lines), t.leases (S lines), t.fails, t.errors, t.summary
--                                  holds are fault_worker.check() records plus node, seq, mode, runtime
--   peers.check_rw(holds)          writers exclude every other hold; counts cross-runtime read overlaps
--   peers.cross_overlaps(holds)    pairs of overlapping holds from different runtimes
--   peers.fifo(holds)              grant order (by start) against node sequence order
--   peers.seq(name)                the sequence number at the end of a node name (util.seq)
--   peers.names(csv)               "a,b" (a reply field) -> { "a", "b" }; peers.contains(list, x)
--   peers.stop_all()               stop every peer and worker started here, remove temp dirs
--
-- Clock: every peer writes CLOCK_MONOTONIC milliseconds with 3 decimals (zklock core.now(), Java
-- System.nanoTime()/1e6, Python time.monotonic()*1000), so the intervals of all runtimes are
-- directly comparable; the specs check this with "ping".
local fw = require("support.fault_worker")

local M = {}
local ROOT = fw.ROOT
M.ROOT = ROOT
M.PYTHON = "/usr/bin/python3"
M.JAVA_DIR = "/usr/share/java"
-- Debian's jars: the same set bench/run compiles CuratorBench.java against (failureaccess if present)
M.JARS = { "curator-recipes.jar", "curator-framework.jar", "curator-client.jar", "zookeeper.jar",
           "zookeeper-jute.jar", "guava.jar", "failureaccess.jar", "slf4j-api.jar", "slf4j-nop.jar" }

local testing = require("zklock.testing")
local shq, sh, read_file, write_file = testing.shq, testing.sh, testing.read_file, testing.write_file
local exists, pid_alive, sleep = testing.exists, testing.pid_alive, testing.sleep

local function mono() return require("zklock.core").now() / 1000 end

local scope = fw.scope("zklock-peer")
local tmpdir = scope.tmpdir
M.tmpdir = tmpdir

local spawn_bg = fw.spawn_bg

local function terminate(pid, start, sig)
  if not pid_alive(pid, start) then return true end
  os.execute(("kill -%s %d 2>/dev/null"):format(sig or "KILL", pid))
  local deadline = mono() + 5
  while pid_alive(pid, start) and mono() < deadline do sleep(0.02) end
  return not pid_alive(pid, start)
end

---------------------------------------------------------------- Java build

function M.classpath()
  local parts = {}
  for _, j in ipairs(M.JARS) do
    local p = M.JAVA_DIR .. "/" .. j
    if exists(p) then parts[#parts + 1] = p
    elseif j ~= "failureaccess.jar" then error("missing " .. p .. " (apt-get install libcurator-recipes-java)") end
  end
  return table.concat(parts, ":")
end

-- Compile CuratorPeer.java (or another peer, name = "SharedPeer") once per (source, class path);
-- returns the class directory.
function M.curator_classes(name)
  name = name or "CuratorPeer"
  -- with PeerControl.java, the file protocol that the peers share
  local src = ROOT .. "/spec/support/peers/" .. name .. ".java"
  local srcs = shq(src) .. " " .. shq(ROOT .. "/spec/support/peers/PeerControl.java")
  local cp = M.classpath()
  -- SharedPeer also drives ZooKeeper's own lock recipe (WriteLock)
  if name == "SharedPeer" then cp = cp .. ":" .. M.JAVA_DIR .. "/zookeeper-recipes-lock.jar" end
  local hash = sh(("{ cat %s; echo %s; javac -version 2>&1; } | sha1sum"):format(srcs, shq(cp))):match("^(%x+)")
  assert(hash, "sha1sum failed")
  local base = os.getenv("TMPDIR") or "/tmp"
  local dir = ("%s/zklock-curator-peer-%s"):format(base, hash:sub(1, 16))
  if exists(dir .. "/" .. name .. ".class") then return dir, cp end
  local tmp = (sh("mktemp -d " .. shq(base .. "/zklock-curator-build.XXXXXXXX")):gsub("%s+$", ""))
  local out = sh(("javac -nowarn -d %s -cp %s %s 2>&1; echo rc=$?"):format(shq(tmp), shq(cp), srcs))
  if not out:match("rc=0%s*$") then
    sh("rm -rf -- " .. shq(tmp))
    error("javac " .. name .. ".java failed:\n" .. out)
  end
  -- publish atomically; a concurrent build that won the race is just as good
  sh(("mv -T %s %s 2>/dev/null || rm -rf -- %s"):format(shq(tmp), shq(dir), shq(tmp)))
  assert(exists(dir .. "/" .. name .. ".class"), "compiled classes not found in " .. dir)
  return dir, cp
end

---------------------------------------------------------------- long-lived peers

local Peer = {}
Peer.__index = Peer

local function start_peer(kind, cmd_of, opts)
  opts = opts or {}
  local dir = tmpdir(kind)
  write_file(dir .. "/control", "")
  write_file(dir .. "/reply", "")
  local cmd = cmd_of(dir, fw.pid, opts.max_seconds or 600, opts.session_ms or 10000)
  local pid, start = spawn_bg(cmd, dir .. "/output")
  local self = setmetatable({ kind = kind, pid = pid, start = start, dir = dir, seq = 0, replies = {},
                              roffset = 0 }, Peer)
  scope.add(self)
  local ok, r = pcall(self.wait, self, 0, opts.start_timeout or 60)
  if not ok or r.status ~= "ready" then
    local out = self:output()
    self:stop()
    error(("%s peer did not start: %s\n%s"):format(kind, ok and r.text or tostring(r), out))
  end
  self.ready = r
  return self
end

-- Start JVM peer `class` (compiled by M.curator_classes) as a peer of kind `kind`.
local function java_peer(kind, class, hosts, opts)
  local classes, cp = M.curator_classes(class)
  return start_peer(kind, function(dir, parent, max, session)
    -- as lua/zklock/testing/processes.lua does for its servers: no sanitizer preload into java
    return ("env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS java -Xmx192m -XX:+UseSerialGC "
      .. "-XX:TieredStopAtLevel=1 -Xss512k -cp %s %s %s %s %d %d %d"):format(
      shq(classes .. ":" .. cp), class, shq(hosts), shq(dir), parent, max, session)
  end, opts)
end

function M.curator(hosts, opts) return java_peer("curator", "CuratorPeer", hosts, opts) end

-- SharedPeer.java: Curator's SharedCount, DistributedAtomicLong and DistributedDoubleBarrier
-- (spec/76-curator-shared_spec.lua); same protocol as M.curator.
function M.curator_shared(hosts, opts) return java_peer("curator-shared", "SharedPeer", hosts, opts) end

-- MemberPeer.java: Curator's GroupMember and PersistentNode (spec/78-curator-member_spec.lua);
-- same protocol as M.curator.
function M.curator_member(hosts, opts) return java_peer("curator-member", "MemberPeer", hosts, opts) end

function M.kazoo(hosts, opts)
  return start_peer("kazoo", function(dir, parent, max, session)
    return ("env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS %s %s %s %s %d %d %d"):format(
      M.PYTHON, shq(ROOT .. "/spec/support/peers/kazoo_peer.py"), shq(hosts), shq(dir), parent, max, session)
  end, opts)
end

function Peer:alive() return pid_alive(self.pid, self.start) end
function Peer:output() return read_file(self.dir .. "/output") or "" end

local function encode(args)
  local keys = {}
  for k in pairs(args or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    local v = tostring(args[k])
    assert(not v:find("[%s]"), "peer argument values may not contain white space: " .. k)
    out[#out + 1] = k .. "=" .. v
  end
  return table.concat(out, " ")
end

function Peer:send(cmd, args)
  self.seq = self.seq + 1
  write_file(self.dir .. "/control", ("%d %s %s\n"):format(self.seq, cmd, encode(args)), "a")
  return self.seq
end

local function parse_reply(line)
  local seq, status, rest = line:match("^(%d+) (%S+)%s*(.*)$")
  if not seq then return nil end
  local f = {}
  for k, v in rest:gmatch("([%w_]+)=(%S*)") do f[k] = v end
  return tonumber(seq), { status = status, f = f, text = line }
end

function Peer:_read()
  local s = read_file(self.dir .. "/reply") or ""
  if #s <= self.roffset then return end
  local chunk = s:sub(self.roffset + 1)
  local last_nl = chunk:match("^.*()\n")
  if not last_nl then return end
  self.roffset = self.roffset + last_nl
  for line in chunk:sub(1, last_nl):gmatch("[^\n]+") do
    local seq, r = parse_reply(line)
    if seq then self.replies[seq] = r end
  end
end

function Peer:reply(seq)
  self:_read()
  return self.replies[seq]
end

function Peer:wait(seq, timeout, pump)
  local deadline = mono() + (timeout or 30)
  while true do
    local r = self:reply(seq)
    if r then return r end
    if not self:alive() then
      r = self:reply(seq)
      if r then return r end
      error(("%s peer died waiting for reply %d:\n%s"):format(self.kind, seq, self:output()), 2)
    end
    if mono() > deadline then
      error(("%s peer: no reply to command %d within %g s"):format(self.kind, seq, timeout or 30), 2)
    end
    if pump then pump(0.005) else sleep(0.01) end
  end
end

function Peer:call(cmd, args, timeout, pump)
  return self:wait(self:send(cmd, args), timeout, pump)
end

function Peer:stop()
  if self.stopped then return true end
  self.stopped = true
  if self:alive() then
    pcall(function()
      local seq = self:send("quit", {})
      local deadline = mono() + 3
      while self:alive() and not self:reply(seq) and mono() < deadline do sleep(0.02) end
    end)
  end
  return terminate(self.pid, self.start, "KILL")
end

---------------------------------------------------------------- zklock worker processes

local Worker = {}
Worker.__index = Worker

function M.zklock_loop(args)
  local dir = tmpdir("zklock")
  local lpath = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;" .. ROOT .. "/spec/?.lua"
  local setup = ("package.path=%q;package.cpath=%q"):format(lpath, fw.cpath())
  local argv = {}
  local a = {}
  for k, v in pairs(args) do a[k] = v end
  a.parent = fw.pid
  a.log = a.log or (dir .. "/loop.log")
  for k, v in pairs(a) do argv[#argv + 1] = shq(k .. "=" .. tostring(v)) end
  table.sort(argv)
  local cmd = ("env ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 %s -e %s %s %s"):format(
    fw.interpreter(), shq(setup), shq(ROOT .. "/spec/support/peers/zklock_peer.lua"), table.concat(argv, " "))
  local pid, start = spawn_bg(cmd, dir .. "/output")
  local self = setmetatable({ pid = pid, start = start, dir = dir, log = a.log }, Worker)
  scope.add(self)
  return self
end

function Worker:alive() return pid_alive(self.pid, self.start) end
function Worker:output() return read_file(self.dir .. "/output") or "" end

function Worker:wait_exit(timeout, pump) return fw.wait_exit(self, timeout or 30, pump, 0.05) end

function Worker:stop()
  if self.stopped then return true end
  self.stopped = true
  return terminate(self.pid, self.start, "KILL")
end

M.stop_all = scope.stop_all

---------------------------------------------------------------- logs and checks

-- The sequence number at the end of a node name: "..-lock-0000000042" -> 42, "..__lock__0000000007"
-- -> 7, a wrapped counter "..-lock--2147483648" -> -2147483648 (as util.seq).
M.seq = require("support.util").seq

-- "a,b,c" (a reply field) -> { "a", "b", "c" }; nil -> {}
function M.names(list)
  local t = {}
  for name in (list or ""):gmatch("[^,]+") do t[#t + 1] = name end
  return t
end

function M.contains(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

local function runtime_of(owner) return (owner:match("^(%a+)%-")) or owner end

local function add_hold(t, f)
  local h = fw.hold_of(f)
  h.node, h.mode, h.runtime = f[12], f[13], runtime_of(f[3])
  h.seq = M.seq(h.node)
  local list = f[1] == "H" and t.holds or t.leases
  list[#list + 1] = h
end

local PEER_LOG = {
  H = add_hold, S = add_hold,
  F = function(t, f) t.fails[#t.fails + 1] = { mode = f[2], code = f[3], waited = tonumber(f[4]) } end,
}

-- Parse a log (CuratorPeer.java format) into t.holds / t.leases (fw.check records with node,
-- seq, mode, runtime), t.fails (F lines), t.errors (X lines), t.summary (zklock's C line).
function M.read_log(path, t)
  return fw.fold_log(path, t or { holds = {}, leases = {}, fails = {}, errors = {}, summary = nil, done = false },
                     PEER_LOG)
end

function M.count_by(list, field)
  local c = {}
  for _, h in ipairs(list) do c[h[field]] = (c[h[field]] or 0) + 1 end
  return c
end

local function overlaps(a, b) return a.start < b.finish and b.start < a.finish end

-- Pairs of overlapping holds of different runtimes (optionally only with modes ma / mb).
function M.cross_overlaps(list, ma, mb)
  local sorted = {}
  for _, h in ipairs(list) do sorted[#sorted + 1] = h end
  table.sort(sorted, function(a, b) return a.start < b.start end)
  local n, example = 0, nil
  for i = 1, #sorted do
    local a = sorted[i]
    for j = i + 1, #sorted do
      local b = sorted[j]
      if b.start >= a.finish then break end
      if a.runtime ~= b.runtime and overlaps(a, b)
         and (not ma or ((a.mode == ma and b.mode == mb) or (a.mode == mb and b.mode == ma))) then
        n = n + 1
        example = example or ("%s %s [%.3f..%.3f] and %s %s [%.3f..%.3f]"):format(a.owner, a.mode, a.start,
          a.finish, b.owner, b.mode, b.start, b.finish)
      end
    end
  end
  return n, example
end

-- Read-write exclusion: a write hold overlaps no other hold (read or write).
function M.check_rw(list)
  local r = { holds = #list, reads = 0, writes = 0, violations = 0, examples = {}, interrupted = 0 }
  local sorted = {}
  for _, h in ipairs(list) do
    if h.interrupted then r.interrupted = r.interrupted + 1 else sorted[#sorted + 1] = h end
    if h.mode == "write" then r.writes = r.writes + 1 else r.reads = r.reads + 1 end
  end
  table.sort(sorted, function(a, b) return a.start < b.start end)
  for i = 1, #sorted do
    local a = sorted[i]
    for j = i + 1, #sorted do
      local b = sorted[j]
      if b.start >= a.finish then break end
      if (a.mode == "write" or b.mode == "write") and overlaps(a, b) then
        r.violations = r.violations + 1
        if #r.examples < 6 then
          r.examples[#r.examples + 1] = ("%s %s %s [%.3f..%.3f] overlaps %s %s %s [%.3f..%.3f]"):format(a.owner,
            a.mode, tostring(a.node), a.start, a.finish, b.owner, b.mode, tostring(b.node), b.start, b.finish)
        end
      end
    end
  end
  r.cross_read_overlaps, r.read_example = M.cross_overlaps(sorted, "read", "read")
  return r
end

-- FIFO: in grant order (by start) the node sequence numbers must strictly increase.
function M.fifo(list)
  local sorted = {}
  for _, h in ipairs(list) do sorted[#sorted + 1] = h end
  table.sort(sorted, function(a, b) return a.start < b.start end)
  local r = { checked = 0, violations = 0, examples = {}, switches = 0 }
  local prev
  for _, h in ipairs(sorted) do
    if h.seq then
      r.checked = r.checked + 1
      if prev then
        if h.seq <= prev.seq then
          r.violations = r.violations + 1
          if #r.examples < 6 then
            r.examples[#r.examples + 1] = ("%s seq %d granted at %.3f after %s seq %d at %.3f"):format(h.owner,
              h.seq, h.start, prev.owner, prev.seq, prev.start)
          end
        end
        if prev.runtime ~= h.runtime then r.switches = r.switches + 1 end
      end
      prev = h
    end
  end
  return r
end

return M
