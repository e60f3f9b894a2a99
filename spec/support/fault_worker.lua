-- spec/support/fault_worker.lua: helpers for the fault and soak specs, and the worker process
-- they start. Runs under Lua 5.4 and LuaJIT (no <close>, no //, no integer-only operators).
--
-- As a module (from a spec):
--   local fw = require("support.fault_worker")
--   fw.interpreter(), fw.cpath()      the interpreter and build this process runs: a worker
--                                     started by fw.worker() uses the same ones
--   fw.proxy(target_hosts [, opts])   the public fault proxy (testing.proxy, zklock.testing.net)
--                                     in front of a server: p.hosts, p:cut(), p:blackhole(), ...,
--                                     p:send("drop"|"cut"|"heal"|...), p:status(), p:stop()
--   fw.worker(mode, args)             start this file as a worker process (see below); w.pid,
--                                     w:lines(), w:wait_line(pattern, timeout [, pump]), w:alive(),
--                                     w:signal(sig), w:wait_exit(timeout), w:stop()
--   fw.stop_all()                     stop every proxy and worker started here (teardown)
--   fw.check(holds, capacity)         exclusion / overlap / fencing counts of hold intervals (the
--                                     public zklock.testing.check.stats)
--   fw.read_log(path)                 a soak worker's log parsed
--   fw.log_records(path)              iterator over a worker log's lines: f (tab-separated fields), line
--   fw.summary_of(f), fw.hold_of(f)   a C (summary) / H or S (hold) record's fields as a table
--   fw.rng(seed)                      testing.rng: r() in [0,1), r(lo, hi) integer
--   fw.scope(prefix)                  processes and temp dirs to clean up together: s.tmpdir(tag)
--                                     ($TMPDIR/<prefix>-<tag>.*), s.add(obj with :stop()) -> obj,
--                                     s.stop_all() (what fw.tmpdir/fw.stop_all use, "zklock-fault")
--   fw.wait_exit(proc, timeout, pump [, idle])  until proc:alive() is false: pump(0.02) or sleep
--                                     idle s (0.02) between looks -> true | false on timeout
--   fw.spawn_bg(cmd, log)             run the shell command `cmd` in the background (exec'd, output
--                                     to the file `log`) -> pid, starttime (for testing.pid_alive)
--   fw.pid, fw.ROOT                   this process's pid, the repository root (the cwd)
--
-- As a worker:  <lua> -e "package.path=...;package.cpath=..." fault_worker.lua MODE key=value...
--   acquire hosts= path= session= timeout= hold= log= [parent=]
--          connect, acquire `path`, log "acquired <core.now() ms>" (or "failed <code>"), hold it
--          `hold` seconds, release, log "released <ms>", close.
--   crash  hosts= path= session= identity= log= after=kill|stop [parent=]
--          connect, start an acquire of `path` (create + list go out at once), log "sent", then
--          SIGKILL (after=kill) or SIGSTOP (after=stop) itself: a client that dies between its
--          create and its list.
--   soak   hosts= session= locks= lock_root= sem= sem_max= cos= seconds= seed= id= log=
--          acquire_timeout= hold_ms= p_sem= parent= [zklog=path: the ZooKeeper client's log]
--          `cos` coroutines loop for `seconds` over `locks` mutexes (lock_root/1..n) and one
--          semaphore, logging every hold interval and every outcome (format in read_log), each
--          hold also as acquire/release events of the public history format
--          (zklock.testing.check; process "pid/coroutine", key the lock or semaphore path).
--   counter hosts= session= lock_root= locks= cos= iters= counters= [store=znode] go= seed= id= log=
--          acquire_timeout= hold_ms= parent= [unlocked=1: the control, the same without the lock]
--          connect, log "R <session>", wait (bounded, pumping) until the file `go` exists, then
--          `cos` coroutines each run `iters` critical sections on lock_root/<j> (j seeded-random
--          in 1..locks): read the integer in the file counters/<j>, yield for up to hold_ms,
--          write it back plus one. Every grant is logged as a tab-separated line
--            G <j> <pid> <co> <token> <seq> <start ms> <finish ms> <interrupted 0|1> <release> <node>
--          (seq = the sequence number of the granted node), every failed acquire as F <j> <code>,
--          a raised error as R.. (see spec/20-processes_spec.lua), then C <started> <acquired>
--          <failed> <raised> and D.
--   lease  hosts= path= max= qty= session= identity= timeout= hold= log= [parent=]
--          connect, take `qty` leases of the semaphore `path` (max_leases `max`) with
--          acquire_many, log "acquired <ms> <lease node,...>" (or "failed <code> <msg>"), hold
--          them `hold` seconds (or until the parent is gone), release each, log "released <ms>
--          ok|<code>", close. For kill -9 tests: the leases must vanish with the session.
local MODNAME = ...

---------------------------------------------------------------- small helpers (both roles)

-- Shell, file and process helpers from the public test harness (the worker's package.path,
-- set by fw.worker(), includes lua/ as well).
local testing = require("zklock.testing")
local read_file, shq, sh = testing.read_file, testing.shq, testing.sh
local proc_stat, pid_alive, sleep, mono = testing.proc_stat, testing.pid_alive, testing.sleep, testing.now
local MY_PID = testing.pid

-- the public kit's seeded generator (Park-Miller in doubles): r() in [0,1), r(lo, hi) integer
local function rng(seed) return testing.rng(tonumber(seed) or 1) end

---------------------------------------------------------------- module role

local M = { rng = rng, pid = MY_PID }

local ROOT = (sh("pwd"):gsub("%s+$", ""))
M.ROOT = ROOT

-- A set of started processes (objects with :stop()) and temp dirs named $TMPDIR/<prefix>-<tag>.*;
-- scope.stop_all() stops the processes (newest first) and removes the dirs.
function M.scope(prefix)
  local started, tmpdirs = {}, {}
  local scope = {}
  local name = prefix:gsub("%-", "%%-")
  local made, mine = "^/.+" .. name .. "%-", "^/.+/" .. name .. "%-[%w%-]+%.[%w]+$" -- tags may hold '-'

  function scope.tmpdir(tag)
    local d = (sh("mktemp -d -t " .. prefix .. "-" .. tag .. ".XXXXXXXX"):gsub("%s+$", ""))
    assert(d:match(made), "mktemp failed")
    tmpdirs[#tmpdirs + 1] = d
    return d
  end
  function scope.add(obj)
    started[#started + 1] = obj
    return obj
  end
  function scope.stop_all()
    for i = #started, 1, -1 do
      pcall(started[i].stop, started[i])
      started[i] = nil
    end
    for i = #tmpdirs, 1, -1 do
      local d = tmpdirs[i]
      if d:match(mine) then os.execute("rm -rf -- " .. shq(d)) end
      tmpdirs[i] = nil
    end
  end
  return scope
end

local scope = M.scope("zklock-fault")
local tmpdir = scope.tmpdir
M.tmpdir = tmpdir

-- Start `cmd` in the background, output to `log`; returns its pid (the command is exec'd by
-- the subshell, so $! is the command's own pid).
local function spawn_bg(cmd, log)
  local out = sh("( exec " .. cmd .. " ) >" .. shq(log) .. " 2>&1 </dev/null & echo $!")
  local pid = tonumber(out:match("(%d+)"))
  assert(pid, "could not start: " .. cmd)
  local _, st = proc_stat(pid)
  return pid, st
end
M.spawn_bg = spawn_bg

function M.interpreter()
  if jit then return "luajit" end
  return "lua5.4"
end

-- The package.cpath template of the zklock.core this process loaded (so that a worker runs the
-- same build: build/, build-jit/ or build-asan/).
function M.cpath()
  local found = package.searchpath and package.searchpath("zklock.core", package.cpath)
  local dir = found and found:match("^(.-)/?zklock/core%.so$")
  if not dir then dir = jit and "build-jit" or "build" end
  if dir == "" then dir = "." end
  if dir:sub(1, 1) ~= "/" then dir = ROOT .. "/" .. dir end
  return dir .. "/?.so"
end

---------------------------------------------------------------- proxy

-- fw.proxy(target [, opts]): the public fault proxy (testing.proxy), stopped by fw.stop_all() too.
function M.proxy(target, opts)
  return scope.add(testing.proxy(target, opts))
end

---------------------------------------------------------------- workers

local Worker = {}
Worker.__index = Worker

local KitWorker = require("zklock.testing.workers").Worker -- the public kit's worker: alive, output, signal, stop, ...
setmetatable(Worker, { __index = KitWorker })

-- mode: "acquire" | "crash" | "soak" | "counter" | "lease"; args: table of key = value (strings
-- or numbers). The worker is the public kit's (testing.worker: same interpreter and build, its
-- output in w.out, stopped with its children, and killed if this process dies).
function M.worker(mode, args)
  local argv = { mode }
  local keys = {}
  for k in pairs(args) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do argv[#argv + 1] = k .. "=" .. tostring(args[k]) end
  argv[#argv + 1] = "parent=" .. MY_PID
  local w = testing.worker{ script = ROOT .. "/spec/support/fault_worker.lua", args = argv, lua = M.interpreter(),
                            cwd = ROOT }
  w.log, w.mode = args.log, mode
  return scope.add(setmetatable(w, Worker))
end

function Worker:state() return (proc_stat(self.pid)) end

function Worker:lines()
  local s = read_file(self.log or self.out) or ""
  local t = {}
  for line in s:gmatch("[^\n]+") do t[#t + 1] = line end
  return t
end

-- Wait until a line of the log matches `pattern`; returns the line, or nil on timeout/exit.
function Worker:wait_line(pattern, timeout, pump)
  local deadline = mono() + (timeout or 10)
  while true do
    for _, line in ipairs(self:lines()) do
      if line:match(pattern) then return line end
    end
    if mono() > deadline then return nil end
    if not self:alive() then
      for _, line in ipairs(self:lines()) do
        if line:match(pattern) then return line end
      end
      return nil
    end
    if pump then pump(0.01) else sleep(0.01) end
  end
end

-- Wait up to `timeout` s until proc:alive() is false, calling pump(0.02) (or sleeping `idle` s,
-- 0.02) in between; true if it is gone.
function M.wait_exit(proc, timeout, pump, idle)
  local deadline = mono() + timeout
  while proc:alive() do
    if mono() > deadline then return false end
    if pump then pump(0.02) else sleep(idle or 0.02) end
  end
  return true
end

function Worker:wait_exit(timeout, pump) return M.wait_exit(self, timeout or 10, pump) end

M.stop_all = scope.stop_all

---------------------------------------------------------------- checker

-- fw.check(holds, capacity): the public kit's counting check (zklock.testing.check.stats over
-- check.from_holds): holds are { key, owner, start = ms, finish = ms, token, interrupted };
-- capacity how many may overlap (1 = mutex). -> { holds, clean, violations, max_overlap,
-- interrupted_overlaps, token_violations, examples }.
function M.check(holds, capacity)
  return testing.check.stats(testing.check.from_holds(holds), { limit = capacity or 1 })
end

-- A soak worker's log, parsed:
--   H <lock> <pid> <co> <token> <start> <end> <session-events> <lock-events> <held-at-end> <release-code>
--   S <sem>  <pid> <co> <token> <start> <end> <session-events> <lock-events> <held-at-end> <release-code>
--   F <kind> <code> <waited-ms>              a failed acquire
--   R <kind> <message>                       an acquire or release that raised
--   E <state> <time>                         a session event
--   I <session-id> <time>                    a session (re)established
--   C <started> <acquired> <failed> <raised> counters at the end;  K <code> <n> failures by code
--   D done
-- The lines of a worker log as tab-separated fields: for f, line in fw.log_records(path) do
-- ... end, f[1] the record kind ({} lines if the file is missing).
function M.log_records(path)
  local next_line = (read_file(path) or ""):gmatch("[^\n]+")
  return function()
    local line = next_line()
    if not line then return nil end
    local f = {}
    for w in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = w end
    return f, line
  end
end

-- "C <started> <acquired> <failed> <raised>" fields -> { started =, acquired =, failed =, raised = }
function M.summary_of(f)
  return { started = tonumber(f[2]), acquired = tonumber(f[3]), failed = tonumber(f[4]), raised = tonumber(f[5]) }
end

-- "H|S <key> <pid> <co> <token> <start> <finish> <sess> <lev> <held_at_end> <release> ..." fields
-- -> a hold record for M.check (interrupted: a session or lock event came during the hold)
function M.hold_of(f)
  local h = { key = f[2], owner = f[3] .. "/" .. f[4], token = tonumber(f[5]), start = tonumber(f[6]),
              finish = tonumber(f[7]), sess = f[8], lev = f[9], held_at_end = f[10] == "1", release = f[11] }
  h.interrupted = h.sess ~= "-" or h.lev ~= "-"
  return h
end

-- Fold a worker log into t. The records every log format shares are handled here: X (an
-- error line, into t.errors), C (the summary, t.summary), D (done, t.done), and t.lines counts
-- the records; on[k](t, fields, line) handles the kinds of one format. Returns t.
function M.fold_log(path, t, on)
  t.errors, t.lines = t.errors or {}, t.lines or 0
  for f, line in M.log_records(path) do
    t.lines = t.lines + 1
    local k = f[1]
    if on[k] then on[k](t, f, line)
    elseif k == "X" then t.errors[#t.errors + 1] = line
    elseif k == "C" then t.summary = M.summary_of(f)
    elseif k == "D" then t.done = true
    end
  end
  return t
end

local function add_hold(t, f)
  local list = f[1] == "H" and t.holds or t.leases
  list[#list + 1] = M.hold_of(f)
end

local WORKER_LOG = {
  H = add_hold, S = add_hold,
  F = function(t, f) t.fails[#t.fails + 1] = { kind = f[2], code = f[3], waited = tonumber(f[4]) } end,
  R = function(t, _, line) t.raised[#t.raised + 1] = line end,
  E = function(t, f) t.events[#t.events + 1] = { state = f[2], at = tonumber(f[3]) } end,
  I = function(t, f) t.sessions[#t.sessions + 1] = f[2] end,
  K = function(t, f) t.codes[f[2]] = tonumber(f[3]) end,
}

function M.read_log(path)
  return M.fold_log(path, { holds = {}, leases = {}, fails = {}, raised = {}, events = {}, codes = {},
                            sessions = {}, summary = nil, done = false }, WORKER_LOG)
end

if MODNAME == "support.fault_worker" or MODNAME == "spec.support.fault_worker" then
  return M
end

---------------------------------------------------------------- worker role

local args = { ... }
local mode = args[1]
local opt = {}
for i = 2, #args do
  local k, v = args[i]:match("^([%w_]+)=(.*)$")
  if k then opt[k] = v end
end

local zklock = require("zklock")
local core = require("zklock.core")
local now = core.now

local parent = tonumber(opt.parent)
local parent_start = parent and select(2, proc_stat(parent))
local function parent_alive()
  return not parent or pid_alive(parent, parent_start)
end

local function fmt(t) return ("%.3f"):format(t) end

-- crash, acquire and lease workers: log lines "word ..." (unbuffered, appended to opt.log),
-- connect and log "connected <session> <ms>" (or "error <msg>" and exit 3) -> client, say
local function connect_logged(default_identity)
  local out = assert(io.open(opt.log, "a"))
  out:setvbuf("no")
  local function say(...) out:write(table.concat({ ... }, " "), "\n") end
  local c, err = zklock.connect(opt.hosts, { session_timeout = tonumber(opt.session) or 4,
                                             identity = opt.identity or default_identity })
  if not c then say("error", tostring(err)) os.exit(3) end
  say("connected", (c:session()), fmt(now()))
  return c, say
end

-- counter and soak workers: while busy(), check every `period` s that the parent (the spec
-- process) is alive; if not, log X "parent gone" and exit at once (code 4).
local function exit_when_parent_gone(c, period, busy, emit, out)
  testing.exit_with_parent(c, parent, period, busy, function()
    emit("X", "parent gone")
    out:close()
  end)
end

-- Pump c for opt.hold seconds, or until the parent process is gone.
local function hold_while_parent(c)
  local deadline = now() + (tonumber(opt.hold) or 0) * 1000
  while now() < deadline and parent_alive() do c:sleep(0.02) end
end

if mode == "crash" then
  local c, say = connect_logged("crash-worker")
  local m = c:mutex(opt.path)
  c:spawn(function()
    local ok, msg = m:acquire(tonumber(opt.timeout) or 30)
    say(ok and "acquired" or "failed", tostring(msg))
  end)
  c:process() -- runs the coroutine: its create and the pipelined list are written to the socket
  say("sent", fmt(now()))
  if opt.after == "stop" then
    os.execute("kill -STOP " .. MY_PID)
  else
    os.execute("kill -KILL " .. MY_PID)
  end
  -- only after SIGCONT: carry on as a normal client until the parent goes away (bounded)
  local deadline = now() + 60000
  while parent_alive() and now() < deadline do c:sleep(0.2) end
  c:close()
  os.exit(0)
end

if mode == "acquire" then
  local c, say = connect_logged("acquire-worker")
  local m = c:mutex(opt.path)
  local ok, msg, code = m:acquire(tonumber(opt.timeout) or 30)
  if ok then
    say("acquired", fmt(now()), ("%.0f"):format(m:token()))
    hold_while_parent(c)
    local rok, _, rcode = m:release()
    say("released", fmt(now()), rok and "ok" or tostring(rcode))
  else
    say("failed", tostring(code), tostring(msg))
  end
  c:close()
  os.exit(0)
end

if mode == "counter" then
  local out = assert(io.open(opt.log, "w"))
  out:setvbuf("full")
  local function emit(...)
    out:write(table.concat({ ... }, "\t"), "\n")
  end
  local id = tonumber(opt.id) or 1
  local nlocks = tonumber(opt.locks) or 1
  local ncos = tonumber(opt.cos) or 50
  local iters = tonumber(opt.iters) or 1
  local acq_timeout = tonumber(opt.acquire_timeout) or 60
  local hold_ms = tonumber(opt.hold_ms) or 2
  local seed = tonumber(opt.seed) or 1
  local unlocked = opt.unlocked == "1"
  local c, cerr = zklock.connect(opt.hosts, { session_timeout = tonumber(opt.session) or 10,
                                               identity = "counter-" .. id .. "-" .. MY_PID })
  if not c then
    emit("X", "connect", tostring(cerr))
    out:close()
    os.exit(3)
  end
  -- store=znode: counters=<znode path>, each counter a znode (get, then an unconditional set:
  -- a read-modify-write that loses updates unless the lock excludes); otherwise files in a dir
  local on_znode = opt.store == "znode"
  local function counter_path(j) return opt.counters .. "/" .. j end
  local function read_counter(j)
    if on_znode then
      local data, err = c:get(counter_path(j))
      assert(data, err)
      return tonumber(data) or 0
    end
    local f = io.open(counter_path(j), "r")
    local v = f and f:read("*n")
    if f then f:close() end
    return v or 0
  end
  local function write_counter(j, v)
    if on_znode then
      assert(c:set(counter_path(j), ("%.0f"):format(v)))
      return
    end
    local f = assert(io.open(counter_path(j), "w"))
    f:write(("%.0f\n"):format(v))
    f:close()
  end
  local active = {}          -- hold -> true while inside its critical section
  c:on_session(function(state)
    if state ~= "CONNECTED" then for h in pairs(active) do h.interrupted = true end end
  end)
  emit("R", (c:session()) or "-")
  out:flush()
  -- barrier: every worker starts its critical sections at once
  local deadline = now() + 60000
  while not read_file(opt.go) do
    if now() > deadline or not parent_alive() then
      emit("X", "no go")
      out:close()
      os.exit(4)
    end
    c:sleep(0.005)
  end
  local counts = { started = 0, acquired = 0, failed = 0, raised = 0 }
  local running = ncos
  for i = 1, ncos do
    c:spawn(function()
      local r = rng(seed * 1000003 + id * 1009 + i)
      local objs = {}
      for _ = 1, iters do
        local j = r(1, nlocks)
        local m = objs[j]
        if not m then
          m = c:mutex(opt.lock_root .. "/" .. j)
          objs[j] = m
        end
        counts.started = counts.started + 1
        local pok, res, code, _
        if not unlocked then pok, res, _, code = pcall(m.acquire, m, acq_timeout) end
        if unlocked then -- the control run: the same critical section without the lock
          counts.acquired = counts.acquired + 1
          local start = now()
          local v = read_counter(j)
          c:sleep(r() * hold_ms / 1000)
          write_counter(j, v + 1)
          emit("G", tostring(j), tostring(MY_PID), tostring(i), "-", "-", fmt(start), fmt(now()), "0", "ok", "-")
        elseif not pok then
          counts.raised = counts.raised + 1
          emit("R", "acquire", (tostring(res):gsub("[\t\n]", " ")))
        elseif not res then
          counts.failed = counts.failed + 1
          emit("F", tostring(j), tostring(code))
        else
          counts.acquired = counts.acquired + 1
          local h = { interrupted = false }
          m:on_lost(function() h.interrupted = true end)
          local node = m:node()
          h.token = m:token()
          h.start = now()
          active[h] = true
          local v = read_counter(j)          -- read, yield, write: a second holder loses an update
          c:sleep(r() * hold_ms / 1000)
          write_counter(j, v + 1)
          h.finish = now()
          active[h] = nil
          m:on_lost(nil)
          local rok, rres, _, rcode = pcall(m.release, m)
          local rel = not rok and "raised" or (rres and "ok" or tostring(rcode))
          if not rok then counts.raised = counts.raised + 1 end
          emit("G", tostring(j), tostring(MY_PID), tostring(i), h.token and ("%.0f"):format(h.token) or "-",
               tostring(node and node:match("%-(%-?%d+)$") or "-"), fmt(h.start), fmt(h.finish),
               h.interrupted and "1" or "0", rel, tostring(node))
        end
      end
      running = running - 1
    end)
  end
  exit_when_parent_gone(c, 0.1, function() return running > 0 end, emit, out) -- the spec process died
  local ok, err = c:run(acq_timeout * iters + 120)
  if not ok then emit("X", "run", tostring(err)) end
  emit("C", tostring(counts.started), tostring(counts.acquired), tostring(counts.failed), tostring(counts.raised))
  c:close()
  emit("D", fmt(now()))
  out:close()
  os.exit(ok and 0 or 5)
end

if mode == "lease" then
  local c, say = connect_logged("lease-worker")
  local sem = c:semaphore(opt.path, tonumber(opt.max) or 1)
  local leases, msg, code = sem:acquire_many(tonumber(opt.qty) or 1, tonumber(opt.timeout) or 30)
  if leases then
    local nodes = {}
    for i, l in ipairs(leases) do nodes[i] = l:node() end
    say("acquired", fmt(now()), table.concat(nodes, ","))
    hold_while_parent(c)
    local status = "ok"
    for _, l in ipairs(leases) do
      local rok, _, rcode = l:release()
      if not rok then status = tostring(rcode) end
    end
    say("released", fmt(now()), status)
  else
    say("failed", tostring(code), tostring(msg))
  end
  c:close()
  os.exit(0)
end

if mode ~= "soak" then
  io.stderr:write("fault_worker.lua: unknown mode " .. tostring(mode) .. "\n")
  os.exit(2)
end

---------------------------------------------------------------- soak worker

local out = assert(io.open(opt.log, "w"))
out:setvbuf("full")
local nlines = 0
local function emit(...)
  out:write(table.concat({ ... }, "\t"), "\n")
  nlines = nlines + 1
  if nlines % 200 == 0 then out:flush() end
end

local id = tonumber(opt.id) or 1
local nlocks = tonumber(opt.locks) or 10
local ncos = tonumber(opt.cos) or 50
local seconds = tonumber(opt.seconds) or 45
local acq_timeout = tonumber(opt.acquire_timeout) or 3
local hold_ms = tonumber(opt.hold_ms) or 10
local p_sem = tonumber(opt.p_sem) or 0.12
local lock_root = opt.lock_root or "/soak/locks"
local sem_path = opt.sem or "/soak/sem"
local sem_max = tonumber(opt.sem_max) or 3
local seed = tonumber(opt.seed) or 1

local zklog = opt.zklog and opt.zklog ~= "" and assert(io.open(opt.zklog, "w"))
if zklog then zklog:setvbuf("line") end
local c, cerr = zklock.connect(opt.hosts, { session_timeout = tonumber(opt.session) or 6,
                                             identity = "soak-" .. id .. "-" .. MY_PID,
                                             log_level = zklog and "info" or nil,
                                             log = zklog and function(line)
                                               zklog:write(fmt(now()), " ", line, "\n")
                                             end or nil })
if not c then
  emit("X", "connect", tostring(cerr))
  out:close()
  os.exit(3)
end
emit("I", (c:session()) or "-", fmt(now()))
out:flush()

local active = {}          -- hold -> true while inside its critical section
local current = {}         -- coroutine index -> hold
local counts = { started = 0, acquired = 0, failed = 0, raised = 0 }
local codes = {}

c:on_session(function(state)
  emit("E", state, fmt(now()))
  if state == "CONNECTED" then
    emit("I", (c:session()) or "-", fmt(now()))
  else
    for h in pairs(active) do
      if h.sess == "-" then h.sess = state else h.sess = h.sess .. "," .. state end
    end
  end
end)

local function note_lock_event(h, state)
  if h.lev == "-" then h.lev = state else h.lev = h.lev .. "," .. state end
end

local objs = {}            -- [i][j] mutex objects, one per coroutine and lock
local sems = {}            -- [i] semaphore objects
local function mutex_of(i, j)
  objs[i] = objs[i] or {}
  local m = objs[i][j]
  if not m then
    m = c:mutex(lock_root .. "/" .. j)
    m:on_lost(function(state)
      local h = current[i]
      if h and h.obj == m then note_lock_event(h, state) end
    end)
    objs[i][j] = m
  end
  return m
end
local function sem_of(i)
  local s = sems[i]
  if not s then
    s = c:semaphore(sem_path, sem_max)
    s:on_lost(function(state, lease)
      local h = current[i]
      if h and h.obj == lease then note_lock_event(h, state) end
    end)
    sems[i] = s
  end
  return s
end

local function failed(kind, code, t0)
  counts.failed = counts.failed + 1
  code = tostring(code)
  codes[code] = (codes[code] or 0) + 1
  emit("F", kind, code, fmt(now() - t0))
end

local recs = {}            -- [i] a zklock.testing.check recorder per coroutine (process "pid/i")
local function one_op(i, r)
  local use_sem = r() < p_sem
  local kind, key, obj = "lock"
  if use_sem then
    kind, key, obj = "sem", sem_path, sem_of(i)
  else
    local j = r(1, nlocks)
    key, obj = tostring(j), mutex_of(i, j)
  end
  counts.started = counts.started + 1
  local t0 = now()
  local pok, res, _, code = pcall(obj.acquire, obj, acq_timeout)
  if not pok then
    counts.raised = counts.raised + 1
    emit("R", kind, (tostring(res):gsub("[\t\n]", " ")))
    return
  end
  if not res then
    failed(kind, code, t0)
    return
  end
  counts.acquired = counts.acquired + 1
  local lease = use_sem and res or nil
  local h = { obj = lease or obj, sess = "-", lev = "-" }
  h.token = lease and lease:token() or obj:token()
  h.start = now()
  current[i] = h
  active[h] = true
  c:sleep(r() * hold_ms / 1000)
  h.finish = now()
  active[h] = nil
  local held = (lease or obj):is_held()
  local rok, rres, _, rcode = pcall((lease or obj).release, lease or obj)
  current[i] = nil
  local rel
  if not rok then
    counts.raised = counts.raised + 1
    emit("R", kind .. "-release", (tostring(rres):gsub("[\t\n]", " ")))
    rel = "raised"
  elseif rres then
    rel = "ok"
  else
    rel = tostring(rcode)
  end
  -- the hold in the public history format too (zklock.testing.check), through the same file
  local rec = recs[i]
  if not rec then
    rec = testing.check.recorder(out, MY_PID .. "/" .. i)
    recs[i] = rec
  end
  local key_path = use_sem and sem_path or (lock_root .. "/" .. key)
  rec:log("acquire", key_path, { token = h.token }, h.start)
  rec:log("release", key_path, { interrupted = h.sess ~= "-" or h.lev ~= "-" }, h.finish)
  emit(use_sem and "S" or "H", key, tostring(MY_PID), tostring(i),
       h.token and ("%.0f"):format(h.token) or "-", fmt(h.start), fmt(h.finish), h.sess, h.lev,
       held and "1" or "0", rel)
end

local end_at = now() + seconds * 1000
local running = 0
for i = 1, ncos do
  running = running + 1
  c:spawn(function()
    local r = rng(seed * 1000003 + id * 1009 + i)
    while now() < end_at do
      one_op(i, r)
      if r() < 0.3 then c:sleep(r() * 0.005) end
    end
    running = running - 1
  end)
end
exit_when_parent_gone(c, 0.5, function() return running > 0 end, emit, out) -- watchdog

local ok, err = c:run(seconds + acq_timeout + 60)
if not ok then emit("X", "run", tostring(err)) end
emit("C", tostring(counts.started), tostring(counts.acquired), tostring(counts.failed), tostring(counts.raised))
local keys = {}
for k in pairs(codes) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do emit("K", k, tostring(codes[k])) end
c:close()
emit("D", "done", fmt(now()))
out:close()
os.exit(ok and 0 or 5)
