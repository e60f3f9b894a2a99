-- The `zklock` command (issue 13, part 1), driven the way a user's shell script drives it:
-- bin/zklock under this process's interpreter and build (ZKLOCK_BUILD), against a real ZooKeeper.
--   * run: two shells racing on one path never overlap (an interval checker over the children's
--     own logs; a control run without the lock shows the checker firing); --semaphore 2 with five
--     racers never has more than 2 children at once (and does reach 2); -n and -w against a held
--     lock give the conflict code (-E); exit codes (child's status, 128+signal, 126, 127, 64, 69);
--     the child's environment (ZKLOCK_PATH, ZKLOCK_NODE, ZKLOCK_TOKEN) and stdin;
--   * signals: HUP, INT, QUIT, USR1, USR2, TERM sent to zklock reach the child once each; at a
--     terminal (script(1)) ^C reaches the child once, not again through zklock; a signal while
--     waiting cancels the wait (exit 128+N) and the queue node goes;
--   * elect: the command runs only while leader; a killed leader's successor runs within the
--     session timeout; an expired leader's command is stopped (exit 75);
--   * session expiry under a running child (zklock.testing's expiry on zklock's own session):
--     the child (SIGTERM trapped) is killed with SIGKILL at once, zklock exits 75 within the
--     session timeout; a --kill-grace that cannot fit the session is said once; --keep-running
--     leaves the child alone (the schedule before LOST and the whole tree: spec/97);
--   * ls on a --semaphore 2 path with a third taker waiting: 2 holders and 1 waiting lease;
--   * -w inf / 1e300 wait forever; -w -1 is out of range;
--   * bad options: exit 64 with a message naming the option;
--   * ls against nodes made by Curator (mutex, read-write lock, semaphore) and Kazoo (lock);
--   * reap: persistent contender nodes, empty never-used containers and left-over semaphore
--     parents are found (dry run by default), deleted with --yes; live nodes and user data stay;
--     --session deletes a live session's forgotten lease.
--   busted --lua=lua5.4 spec/65-cli_spec.lua          (50-90 s on 2 busy cores; ASan about 170 s)
--   busted --lua=luajit --run=luajit spec/65-cli_spec.lua
-- One server for the file; every process started is killed in after_each/teardown. Children
-- run with the sanitizer preload removed (env -u), so that the ASan run checks zklock only.
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")

local ROOT = fw.ROOT
local shq, sh, read_file, write_file = testing.shq, testing.sh, testing.read_file, testing.write_file
local pid_alive = testing.pid_alive
local function now() return core.now() / 1000 end

local SESSION = 2 -- s: the session timeout of the zklock processes in the expiry tests
local SH = "env -u LD_PRELOAD -u ASAN_OPTIONS sh -c"

local scope = fw.scope("zklock-cli")
local zk, c
local started = {} -- pids of zklock wrappers and zklock processes (killed in after_each)

local function build_dir() return (fw.cpath():gsub("/%?%.so$", "")) end

-- The shell words that run bin/zklock with this process's interpreter and build.
local function zklock(args, env)
  local words = { "env", "ZKLOCK_HOSTS=" .. shq(zk.hosts), "ZKLOCK_BUILD=" .. shq(build_dir()) }
  local preload = os.getenv("LD_PRELOAD")
  if preload then
    words[#words + 1] = "LD_PRELOAD=" .. shq(preload)
    words[#words + 1] = "ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0"
  end
  for k, v in pairs(env or {}) do words[#words + 1] = k .. "=" .. shq(v) end
  words[#words + 1] = fw.interpreter()
  words[#words + 1] = shq(ROOT .. "/bin/zklock")
  words[#words + 1] = args
  return table.concat(words, " ")
end

-- Run to completion (bounded): -> exit status, output (stdout and stderr), seconds
local function run(args, o)
  o = o or {}
  local t0 = now()
  local input = o.stdin and ("printf %s | "):format(shq(o.stdin)) or ""
  local out = sh(("%stimeout -s KILL %d %s 2>&1%s; echo \"rc=$?\""):format(input, o.limit or 60,
    zklock(args, o.env), o.stdin and "" or " </dev/null"))
  local body, rc = out:match("^(.-)rc=(%d+)%s*$")
  return tonumber(rc), body or out, now() - t0
end

-- Start in the background: zklock's own pid is in .pidfile, its exit status in .rcfile when it ends.
local Bg = {}
Bg.__index = Bg
local function bg(script_or_args, o)
  o = o or {}
  local dir = scope.tmpdir("bg")
  local self = setmetatable({ dir = dir, pidfile = dir .. "/pid", rcfile = dir .. "/rc", out = dir .. "/out" }, Bg)
  local inner = o.script or (zklock(script_or_args, o.env) .. " & echo $! >" .. shq(self.pidfile)
    .. "; wait $!; echo $? >" .. shq(self.rcfile))
  local pid = fw.spawn_bg("sh -c " .. shq(inner), self.out)
  self.wrapper = pid
  started[#started + 1] = pid
  if not o.script then
    local deadline = now() + 10
    repeat
      self.pid = tonumber((read_file(self.pidfile) or ""):match("%d+"))
      if not self.pid then testing.sleep(0.01) end
    until self.pid or now() > deadline
    assert(self.pid, "zklock did not start")
    started[#started + 1] = self.pid
  end
  return self
end

function Bg:kill(sig) os.execute(("kill -%s %d"):format(sig, self.pid)) end

-- -> exit status, or nil after `timeout` s
function Bg:wait(timeout)
  local deadline = now() + (timeout or 30)
  while now() < deadline do
    local rc = tonumber((read_file(self.rcfile) or ""):match("%d+"))
    if rc then return rc end
    c:sleep(0.02) -- drives the spec's own client meanwhile
  end
  return nil
end
function Bg:output() return read_file(self.out) or "" end

local function wait_for(pred, timeout, what)
  local deadline = now() + (timeout or 20)
  while not pred() do
    assert(now() < deadline, "timed out waiting for " .. (what or "a condition"))
    c:sleep(0.02)
  end
end

-- a shell loop that waits until the file `stop` exists (bounded: 30 s)
local function until_file(stop)
  return ("i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"):format(shq(stop))
end

-- children of a lock path; {} once the server reaped its container
local function kids(path)
  local names, msg, code = c:children(path)
  if names then return names end
  assert(code == "ZNONODE", msg)
  return {}
end

local function lines(path)
  local t = {}
  for l in (read_file(path) or ""):gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- A child that logs its hold: "S <key> <ns>" at the start and "E <key> <ns>" at the end.
local function holder_child(log, hold_s)
  return ("%s %s"):format(SH, shq(("echo \"S $ZKLOCK_TOKEN.$$ $(date +%%s%%N)\" >>%s; sleep %s; "
    .. "echo \"E $ZKLOCK_TOKEN.$$ $(date +%%s%%N)\" >>%s"):format(shq(log), hold_s, shq(log))))
end

-- The interval checker: holds from such a log -> list, and the most holds at one instant.
local function holds_of(log)
  local by = {}
  for _, l in ipairs(lines(log)) do
    local ev, key, t = l:match("^([SE]) (%S+) (%d+)$")
    if ev then
      by[key] = by[key] or { key = key }
      by[key][ev == "S" and "start" or "finish"] = tonumber(t)
    end
  end
  local list = {}
  for _, h in pairs(by) do list[#list + 1] = h end
  return list
end

local function max_concurrent(list)
  local ev = {}
  for _, h in ipairs(list) do
    assert(h.start and h.finish, "a hold without start or end: " .. h.key)
    ev[#ev + 1] = { h.start, 1 }
    ev[#ev + 1] = { h.finish, -1 }
  end
  table.sort(ev, function(a, b) if a[1] ~= b[1] then return a[1] < b[1] end return a[2] < b[2] end)
  local cur, max = 0, 0
  for _, e in ipairs(ev) do
    cur = cur + e[2]
    if cur > max then max = cur end
  end
  return max
end

local function kill_started()
  for i = #started, 1, -1 do
    local pid = started[i]
    -- the zklock process's children first (by id), then the process itself
    local children = sh(("cat /proc/%d/task/*/children 2>/dev/null"):format(pid))
    for kid in children:gmatch("%d+") do os.execute("kill -KILL " .. kid .. " 2>/dev/null") end
    os.execute(("kill -KILL %d 2>/dev/null"):format(pid))
    started[i] = nil
  end
end

describe("the zklock command", function()
  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    c = util.connect(zk.hosts, { session_timeout = 10, identity = "cli-spec", keepalive = true })
  end)

  after_each(kill_started)

  teardown(function()
    kill_started()
    util.close_all()
    scope.stop_all()
    if zk then zk:stop() end
  end)

  describe("run", function()
    it("gives the child ZKLOCK_PATH, ZKLOCK_NODE, ZKLOCK_TOKEN and its stdin, and returns its status", function()
      local rc, out = run("run /cli/env -- " .. SH .. " "
        .. shq("echo \"P=$ZKLOCK_PATH N=$ZKLOCK_NODE T=$ZKLOCK_TOKEN\"; exit 3"))
      assert.equal(3, rc, out)
      local p, n, t = out:match("P=(%S+) N=(%S+) T=(%d+)")
      assert.equal("/cli/env", p, out)
      assert.truthy(n:match("^/cli/env/_c_[%x%-]+%-lock%-%d+$"), out)
      local rc2, out2 = run("run /cli/env -c " .. shq("echo T=$ZKLOCK_TOKEN; exit 5"))
      assert.equal(5, rc2, out2)
      assert.is_true(tonumber(out2:match("T=(%d+)")) > tonumber(t), "fencing tokens grow")
      -- read lock and semaphore lease nodes
      local _, o3 = run("run -s /cli/rw -- " .. SH .. " 'echo N=$ZKLOCK_NODE'")
      assert.truthy(o3:match("N=/cli/rw/_c_[%x%-]+%-__READ__%d+"), o3)
      local _, o4 = run("run --semaphore 3 /cli/sem -- " .. SH .. " 'echo N=$ZKLOCK_NODE'")
      assert.truthy(o4:match("N=/cli/sem/leases/_c_[%x%-]+%-lease%-%d+"), o4)
      -- stdin is the child's (not a terminal here)
      local rc5, o5 = run("run /cli/env -- cat", { stdin = "through stdin\n" })
      assert.equal(0, rc5, o5)
      assert.equal("through stdin\n", o5)
      -- nothing left behind
      assert.same({}, kids("/cli/env"))
    end)

    it("exit codes: 128+signal, 127 not found, 126 not executable, 69 no server", function()
      local rc, out = run("run /cli/codes -- " .. SH .. " 'kill -KILL $$'")
      assert.equal(137, rc, out)
      rc, out = run("run /cli/codes -- /nonexistent/command")
      assert.equal(127, rc, out)
      assert.truthy(out:match("/nonexistent/command"), out)
      local dir = scope.tmpdir("noexec")
      write_file(dir .. "/script", "#!/bin/sh\necho hi\n")
      rc, out = run("run /cli/codes -- " .. shq(dir .. "/script"))
      assert.equal(126, rc, out)
      assert.truthy(out:match("[Pp]ermission denied"), out)
      local port = testing.free_ports(1)[1]
      rc, out = run(("run --hosts 127.0.0.1:%d --connect-timeout 1 /cli/codes -- true"):format(port))
      assert.equal(69, rc, out)
      assert.truthy(out:match("could not connect"), out)
      assert.same({}, kids("/cli/codes"))
    end)

    it("bad options: exit 64 and a message naming the option", function()
      local cases = {
        { "run /x -w abc -- true", "%-%-timeout" },
        { "run /x -w -1 -- true", "%-%-timeout: %-1 is out of range" },
        { "run /x --timeout -0.5 -- true", "%-%-timeout: %-0.5 is out of range" },
        { "elect /x -w -1 -- true", "%-%-timeout: %-1 is out of range" },
        { "run /x -w nan -- true", "%-%-timeout" },
        { "run /x -E 300 -n -- true", "%-%-conflict%-exit%-code" },
        { "run /x --semaphore 0 -- true", "%-%-semaphore" },
        { "run /x --semaphore 2.5 -- true", "%-%-semaphore" },
        { "run /x --kill-grace x -- true", "%-%-kill%-grace" },
        { "run /x --session-timeout 0 -- true", "%-%-session%-timeout" },
        { "run /x --hosts bogus -- true", '^zklock: %-%-hosts: expected "host:port' },
        { "run /x --session-timeout 1e9 -- true", "%-%-session%-timeout: 1e9 is out of range: .* at most 1e%+?0*6" },
        { "run /x --max-hold 2e6 -- true", "%-%-max%-hold: 2e6 is out of range: .* at most 1e%+?0*6" },
        { "run /x -s --semaphore 2 -- true", "%-%-shared" },
        { "run /x -s -x -- true", "%-%-exclusive" },
        { "run /x", "no command" },
        { "run /x -c 'true' -- true", "not both" },
        { "run x -- true", "PATH" },
        { "run /x --bogus -- true", "%-%-bogus" },
        { "frobnicate /x", "frobnicate" },
        { "", "command" },
        { "reap /x --yes --dry-run", "contradict" },
        { "reap /x --session zz", "%-%-session" },
        { "elect --id '' /x -- true", "%-%-id: expected a non%-empty participant id" },
        -- the common options are also taken before the command, and judged the same way there
        { "--hosts bogus ls /x", '^zklock: %-%-hosts: expected "host:port' },
        { "--session-timeout 0 -v ls /x", "%-%-session%-timeout" },
        { "-v --session-timeout -1 ls /x", "%-%-session%-timeout: .*%-1" },
        { "--hosts 127.0.0.1:1 --bogus ls /x", "%-%-bogus" },
      }
      for _, case in ipairs(cases) do
        local rc, out = run(case[1])
        assert.equal(64, rc, case[1] .. ": " .. out)
        assert.truthy(out:match("[Uu]sage") or out:match("zklock"), case[1] .. ": " .. out)
        assert.truthy(out:match(case[2]), case[1] .. ": expected " .. case[2] .. " in: " .. out)
      end
      -- -w inf and -w 1e300 mean forever, as in the library: against a free lock they just run
      for _, w in ipairs({ "inf", "1e300", "Infinity" }) do
        local rc, out = run("run -w " .. w .. " /cli/winf -- echo RAN")
        assert.equal(0, rc, w .. ": " .. out)
        assert.truthy(out:match("RAN"), w .. ": " .. out)
      end
      -- common options before the command: the same run as with them after it
      assert(c:create("/cli/before", "", { parents = true }))
      local rc1, out1 = run("ls /cli/before --hosts " .. shq(zk.hosts) .. " --session-timeout 5")
      local rc2, out2 = run("--hosts " .. shq(zk.hosts) .. " --session-timeout=5 ls /cli/before")
      assert.equal(0, rc1, out1)
      assert.equal(0, rc2, out2)
      assert.equal(out1, out2)
      assert(c:delete("/cli/before"))
      -- the credentials never on the command line: only from a file or the environment
      local rc, out = run("run /x --auth-env NO_SUCH_VAR -- true")
      assert.equal(64, rc, out)
      assert.truthy(out:match("NO_SUCH_VAR"), out)
    end)

    it("two shells racing on one path never overlap (and the checker catches an overlap without the lock)", function()
      local dir = scope.tmpdir("race")
      local log = dir .. "/holds.log"
      for i = 1, 2 do
        local loop = ("i=0; while [ $i -lt 5 ]; do %s || echo FAIL >>%s; i=$((i+1)); done; echo done >%s"):format(
          zklock("run /cli/race -- " .. holder_child(log, "0.15")), shq(log), shq(dir .. "/done" .. i))
        bg(nil, { script = loop })
      end
      wait_for(function()
        return read_file(dir .. "/done1") ~= nil and read_file(dir .. "/done2") ~= nil
      end, 90, "both shells")
      local holds = holds_of(log)
      assert.equal(10, #holds, read_file(log))
      assert.is_nil((read_file(log) or ""):match("FAIL"))
      assert.equal(1, max_concurrent(holds), read_file(log))
      -- tokens grow in hold order
      table.sort(holds, function(a, b) return a.start < b.start end)
      for i = 2, #holds do
        assert.is_true(tonumber(holds[i].key:match("^(%d+)")) > tonumber(holds[i - 1].key:match("^(%d+)")))
      end
      -- control: the same children without zklock do overlap, and the checker says so
      local clog = dir .. "/control.log"
      local child = holder_child(clog, "0.5")
      sh(("(%s) & (%s) & wait"):format(child, child))
      assert.equal(2, max_concurrent(holds_of(clog)))
      assert.same({}, kids("/cli/race"))
    end)

    it("--semaphore 2 with five racers: never more than 2 children at once", function()
      local dir = scope.tmpdir("sem")
      local log = dir .. "/holds.log"
      local racers = {}
      -- a holder stays until a second holder is in (or all five have had their turn, or 10 s), so
      -- that a slow start (ASan) cannot serialize them: the second lease must be used
      local child = SH .. " " .. shq(("L=%s; echo \"S $ZKLOCK_TOKEN.$$ $(date +%%s%%N)\" >>$L; i=0; "
        .. "while [ $i -lt 200 ]; do s=$(grep -c '^S' $L); e=$(grep -c '^E' $L); "
        .. "[ $((s - e)) -ge 2 ] || [ $s -ge 5 ] && break; sleep 0.05; i=$((i+1)); done; sleep 0.2; "
        .. "echo \"E $ZKLOCK_TOKEN.$$ $(date +%%s%%N)\" >>$L"):format(shq(log)))
      for i = 1, 5 do racers[i] = bg("run --semaphore 2 /cli/sem5 -- " .. child) end
      for i, r in ipairs(racers) do
        assert.equal(0, r:wait(60), ("racer %d: %s"):format(i, r:output()))
      end
      local holds = holds_of(log)
      assert.equal(5, #holds, read_file(log))
      assert.equal(2, max_concurrent(holds), read_file(log)) -- at most 2, and the second lease is used
      assert.same({}, kids("/cli/sem5/leases"))
    end)

    it("ls on a --semaphore 2 path with three takers: two holders, the third's lease waits", function()
      local dir = scope.tmpdir("sem-ls")
      local stop = dir .. "/stop"
      local child = SH .. " " .. shq(until_file(stop))
      local takers = {}
      for i = 1, 3 do
        takers[i] = bg("run --semaphore 2 /cli/sem-ls -- " .. child)
        -- one at a time, so that the third is the one that waits
        wait_for(function() return #kids("/cli/sem-ls/leases") >= i end, 20, "lease " .. i)
      end
      -- the third holds the internal lock and waits with its lease node made
      wait_for(function() return #kids("/cli/sem-ls/locks") >= 1 end, 20, "the third waiting")
      local rc, out = run("ls /cli/sem-ls")
      assert.equal(0, rc, out)
      local holders, waiters = 0, 0
      for l in out:gmatch("[^\n]+") do
        if l:match("^holder%s+curator lease%s") then holders = holders + 1 end
        if l:match("^waiter%s+curator lease%s") then waiters = waiters + 1 end
      end
      assert.equal(2, holders, out)
      assert.equal(1, waiters, out)
      testing.write_file(stop, "")
      for i = 1, 3 do assert.equal(0, takers[i]:wait(30), takers[i]:output()) end
    end)

    it("-n and -w against a held lock give the conflict code; the command does not run", function()
      local dir = scope.tmpdir("held")
      local stop = dir .. "/stop"
      local holder = bg("run /cli/held -- " .. SH .. " "
        .. shq(("touch %s/held; "):format(shq(dir)) .. until_file(stop)))
      wait_for(function() return read_file(dir .. "/held") ~= nil end, 20, "the holder")
      local rc, out, took = run("run -n /cli/held -- echo RAN")
      assert.equal(1, rc, out)
      assert.is_nil(out:match("RAN"))
      assert.truthy(out:match("held by another process"), out)
      assert.is_true(took < 15)
      rc, out = run("run -n -E 42 /cli/held -- echo RAN")
      assert.equal(42, rc, out)
      rc, out, took = run("run -w 0.5 -E 0 -q /cli/held -- echo RAN")
      assert.equal(0, rc, out)
      assert.equal("", out) -- -q: no message; -E 0
      assert.is_true(took >= 0.5, took)
      assert.equal(1, #kids("/cli/held"), "the failed tries left no node")
      write_file(stop, "")
      assert.equal(0, holder:wait(20), holder:output())
      assert.same({}, kids("/cli/held"))
      -- -s holders share; -x (the write side) excludes them and they it
      local rstop = dir .. "/rstop"
      local reader = bg("run -s /cli/held-rw -- " .. SH .. " "
        .. shq(("touch %s/rheld; "):format(shq(dir)) .. until_file(rstop)))
      wait_for(function() return read_file(dir .. "/rheld") ~= nil end, 20, "the reader")
      rc, out = run("run -s -n /cli/held-rw -- echo SHARED")
      assert.equal(0, rc, out)
      assert.truthy(out:match("SHARED"), out)
      rc, out = run("run -x -n /cli/held-rw -- echo RAN")
      assert.equal(1, rc, out)
      assert.is_nil(out:match("RAN"))
      write_file(rstop, "")
      assert.equal(0, reader:wait(20), reader:output())
      rc, out = run("run -x -n /cli/held-rw -- echo EXCL")
      assert.equal(0, rc, out)
    end)
  end)

  describe("signals", function()
    it("HUP, INT, QUIT, USR1, USR2 and TERM sent to zklock reach the child, once each", function()
      local dir = scope.tmpdir("sig")
      local log = dir .. "/child.log"
      local traps = {}
      for _, s in ipairs({ "HUP", "INT", "QUIT", "USR1", "USR2" }) do
        traps[#traps + 1] = ("trap 'echo %s >>%s' %s"):format(s, shq(log), s)
      end
      traps[#traps + 1] = ("trap 'echo TERM >>%s; exit 7' TERM"):format(shq(log))
      local script = table.concat(traps, "; ") .. ("; echo ready >>%s; "):format(shq(log)) .. until_file(dir .. "/x")
      local z = bg("run /cli/sig -- " .. SH .. " " .. shq(script))
      wait_for(function() return (read_file(log) or ""):match("ready") end, 20, "the child")
      for n, s in ipairs({ "HUP", "INT", "QUIT", "USR1", "USR2" }) do
        z:kill(s)
        wait_for(function() return #lines(log) >= n + 1 end, 10, "SIG" .. s .. " at the child")
        assert.equal(s, lines(log)[n + 1])
      end
      z:kill("TERM")
      assert.equal(7, z:wait(20), z:output())
      assert.same({ "ready", "HUP", "INT", "QUIT", "USR1", "USR2", "TERM" }, lines(log))
      assert.same({}, kids("/cli/sig"))
    end)

    it("at a terminal: the child has the terminal as stdin, and ^C reaches it once (not forwarded again)", function()
      local dir = scope.tmpdir("tty")
      local log, ready = dir .. "/child.log", dir .. "/ready"
      -- (it logs every SIGINT for half a second after the first: a second one, passed on by zklock,
      -- would show)
      local child = ("test -t 0 && echo TTY >>%s; trap 'echo INT >>%s; got=1' INT; touch %s; i=0; "
        .. "while [ -z \"$got\" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; sleep 0.5; exit 5"):format(
        shq(log), shq(log), shq(ready))
      -- script(1) runs zklock on a new pseudo-terminal; the feeder types ^C once the child is ready,
      -- and the terminal sends SIGINT to the foreground process group: the child's own group, which
      -- zklock put in the foreground (zklock, in the background meanwhile, must not pass it on).
      -- `exec`: script's shell ($SHELL, or dash without it) must not stay in that group: dash
      -- waiting on zklock dies of the SIGINT, and script reports 130 whatever zklock does
      local feeder = ("i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
        .. "printf '\\003'; sleep 1"):format(shq(ready))
      local out = sh(("(%s) | timeout -s KILL 60 script -qec %s /dev/null 2>&1; echo \"rc=$?\""):format(feeder,
        shq("exec " .. zklock("run /cli/tty -- " .. SH .. " " .. shq(child)))))
      assert.truthy(out:match("rc=5%s*$"), out)
      assert.same({ "TTY", "INT" }, lines(log))
      assert.same({}, kids("/cli/tty"))
    end)

    it("a signal while waiting cancels the wait: exit 128+N and the queue node is gone", function()
      local dir = scope.tmpdir("cancel")
      local stop = dir .. "/stop"
      local holder = bg("run /cli/cancel -- " .. SH .. " " .. shq(until_file(stop)))
      assert.is_true(util.wait_children(c, "/cli/cancel", 1, 20))
      for _, s in ipairs({ { "TERM", 143 }, { "INT", 130 }, { "USR1", 138 } }) do
        local waiter = bg("run /cli/cancel -- echo RAN")
        assert.is_true(util.wait_children(c, "/cli/cancel", 2, 20), "the waiter queued")
        waiter:kill(s[1])
        assert.equal(s[2], waiter:wait(20), waiter:output())
        assert.is_nil(waiter:output():match("RAN"))
        assert.is_true(util.wait_children(c, "/cli/cancel", 1, 10), "the waiter's node went")
      end
      write_file(stop, "")
      assert.equal(0, holder:wait(20), holder:output())
    end)
  end)

  describe("session expiry under a running child", function()
    -- zklock.testing's expiry (core.expire_session: a second handle takes the session over and
    -- closes it) on zklock's session, with zklock stopped meanwhile: a running zklock would
    -- reconnect at once and move the session back before the close arrives
    local function expire_zklock(z, sfile)
      local sid, pwhex
      wait_for(function()
        sid, pwhex = (read_file(sfile) or ""):match("^(%x+) (%x+)")
        return sid ~= nil
      end, 20, "the session file")
      local pw = pwhex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
      z:kill("STOP")
      local ok, err = core.expire_session(zk.hosts, sid, pw, 5000)
      z:kill("CONT")
      assert(ok, err)
    end

    -- The session ended by the server: the lock may be someone else's already, so no grace once
    -- that is known: the command's whole tree gets SIGKILL (the grace is spent before LOST, while
    -- SUSPENDED; spec/97-cli-tree_spec.lua covers that schedule)
    it("a session the server ended: the command's tree gets SIGKILL; zklock exits 75", function()
      local dir = scope.tmpdir("expire")
      local log = dir .. "/child.log"
      local script = ("trap 'echo TERM >>%s' TERM; echo $$ >>%s; "):format(shq(log), shq(log))
        .. until_file(dir .. "/x") .. "; echo survived >>" .. shq(log)
      local z = bg(("run --session-timeout %d --kill-grace 1 /cli/expire -- %s %s"):format(SESSION, SH, shq(script)),
                   { env = { ZKLOCK_SESSION_FILE = dir .. "/session" } })
      wait_for(function() return #lines(log) >= 1 end, 20, "the child")
      local child = tonumber(lines(log)[1])
      expire_zklock(z, dir .. "/session")
      local t0 = now()
      local rc = z:wait(30)
      local took = now() - t0
      assert.equal(75, rc, z:output())
      assert.is_false(pid_alive(child))
      -- SIGKILL ended it (a SIGTERM may come first while the link was in doubt, SUSPENDED, before
      -- the reconnect learnt of the expiry: the grace is spent before LOST, never after)
      assert.equal(tostring(child), lines(log)[1])
      assert.is_nil((read_file(log) or ""):match("survived"))
      assert.truthy(z:output():match("SIGKILL"), z:output())
      -- a --kill-grace that a 2 s session cannot fit is said once
      local _, warnings = z:output():gsub("does not fit", "")
      assert.equal(1, warnings, z:output())
      assert.is_true(took < SESSION + 8, ("took %.2f s"):format(took))
      -- the lock is free again
      local rc2, out2 = run("run -n /cli/expire -- true")
      assert.equal(0, rc2, out2)
    end)

    it("elect: a leader whose session expires has its command killed and exits 75", function()
      local dir = scope.tmpdir("elect-expire")
      local log = dir .. "/child.log"
      local script = ("trap 'echo TERM >>%s; exit 0' TERM; echo $$ >>%s; "):format(shq(log), shq(log))
        .. until_file(dir .. "/x")
      local z = bg(("elect --session-timeout %d /cli/elect-expire -- %s %s"):format(
        SESSION, SH, shq(script)), { env = { ZKLOCK_SESSION_FILE = dir .. "/session" } })
      wait_for(function() return #lines(log) >= 1 end, 20, "the leader's command")
      expire_zklock(z, dir .. "/session")
      local t0 = now()
      assert.equal(75, z:wait(30), z:output())
      assert.is_true(now() - t0 < SESSION + 8)
      assert.is_false(pid_alive(tonumber(lines(log)[1])))
      assert.is_nil(z:output():match("does not fit"), z:output()) -- the default grace fits, silently
    end)

    -- --max-hold (issue 25 part 4): the command is stopped before the lock is released, even one
    -- that ignores SIGTERM: SIGTERM at max-hold, SIGKILL of the tree --kill-grace later, then the
    -- release; a waiter's command finds the first command dead
    it("--max-hold stops a TERM-ignoring command (SIGTERM, grace, SIGKILL) before releasing; exit 75", function()
      local dir = scope.tmpdir("maxhold")
      local log, wlog = dir .. "/child.log", dir .. "/waiter.log"
      local script = ("trap '' TERM; echo $$ >>%s; "):format(shq(log)) .. until_file(dir .. "/never")
        .. "; echo survived >>" .. shq(log)
      local z = bg(("run --max-hold 1 --kill-grace 1 /cli/maxhold -- %s %s"):format(SH, shq(script)))
      wait_for(function() return #lines(log) >= 1 end, 20, "the child")
      local child = tonumber(lines(log)[1])
      local t0 = now()
      -- the waiter's command asks whether the first command still runs
      local rc, out = run(("run -w 30 /cli/maxhold -- %s %s"):format(SH,
        shq(("if kill -0 %d 2>/dev/null; then echo alive; else echo dead; fi >>%s"):format(child, shq(wlog)))))
      local waited = now() - t0
      assert.equal(0, rc, out)
      assert.same({ "dead" }, lines(wlog)) -- released only once the first command was gone
      assert.equal(75, z:wait(20), z:output())
      assert.is_false(pid_alive(child))
      assert.is_nil((read_file(log) or ""):match("survived"))
      local o = z:output()
      assert.truthy(o:match("%-%-max%-hold 1 s; sending SIGTERM"), o)
      assert.truthy(o:match("sending SIGKILL"), o) -- it ignored SIGTERM: the grace ran out
      -- the waiter came after max-hold and the grace (less the time the child took to start)
      assert.is_true(waited >= 1.2 and waited < 15, ("the waiter waited %.2f s"):format(waited))
    end)

    it("--keep-running leaves the child running on loss, with a warning", function()
      local dir = scope.tmpdir("keep")
      local log = dir .. "/child.log"
      local stop = dir .. "/stop"
      local script = ("echo started >>%s; "):format(shq(log)) .. until_file(stop)
        .. ("; echo finished >>%s; exit 4"):format(shq(log))
      local z = bg(("run --keep-running --session-timeout %d /cli/keep -- %s %s"):format(SESSION, SH, shq(script)),
                   { env = { ZKLOCK_SESSION_FILE = dir .. "/session" } })
      wait_for(function() return #lines(log) >= 1 end, 20, "the child")
      expire_zklock(z, dir .. "/session")
      wait_for(function() return z:output():match("keeps running") end, 20, "the warning")
      assert.is_nil(read_file(z.rcfile))
      write_file(stop, "")
      assert.equal(4, z:wait(20), z:output())
      assert.same({ "started", "finished" }, lines(log))
    end)
  end)

  describe("elect", function()
    it("runs the command only while leader; a killed leader's successor runs within the session timeout", function()
      local dir = scope.tmpdir("elect")
      local log = dir .. "/leaders.log"
      local stop = dir .. "/stop"
      local child = SH .. " " .. shq(("echo \"S $ZKLOCK_ID $$ $ZKLOCK_TOKEN $(date +%%s%%N)\" >>%s; "):format(shq(log))
        .. until_file(stop))
      local a = bg(("elect --id first --session-timeout %d /cli/elect -- %s"):format(SESSION, child))
      wait_for(function() return #lines(log) >= 1 end, 20, "the first leader")
      local b = bg(("elect --id second --session-timeout %d /cli/elect -- %s"):format(SESSION, child))
      assert.is_true(util.wait_children(c, "/cli/elect", 2, 20), "the second queued")
      -- a third gives up after -w with the conflict code, naming the leader
      local rc, out = run("elect -w 0.3 -E 9 /cli/elect -- echo RAN")
      assert.equal(9, rc, out)
      assert.truthy(out:match("leader: first"), out)
      assert.is_nil(out:match("RAN"))
      local first = lines(log)[1]
      assert.truthy(first:match("^S first "), first)
      -- the leader's host dies: zklock and its command, at once
      local cpid = tonumber(first:match("^S first (%d+)"))
      os.execute(("kill -KILL %d %d"):format(a.pid, cpid))
      local killed_ns = tonumber(sh("date +%s%N"):match("%d+"))
      local t0 = now()
      wait_for(function() return #lines(log) >= 2 end, SESSION + 15, "the second leader")
      local took = now() - t0
      local second = lines(log)[2]
      assert.truthy(second:match("^S second "), second)
      assert.is_true(tonumber(second:match("(%d+)$")) > killed_ns, "the second started after the first died")
      assert.is_true(tonumber(second:match("^S second %d+ (%d+)")) > tonumber(first:match("^S first %d+ (%d+)")),
                     "the term's fencing token grew")
      assert.is_true(took < SESSION + 8, ("took %.2f s"):format(took))
      write_file(stop, "")
      assert.equal(0, b:wait(20), b:output())
      assert.same({}, kids("/cli/elect"))
    end)
  end)

  describe("ls", function()
    local peers = require("support.peers.peer")
    local cur
    local function pump(dt) util.drive({ c }, dt) end
    setup(function() cur = peers.curator(zk.hosts) end)
    teardown(function() peers.stop_all() end)

    it("shows holders and waiters of Curator's mutex, read-write lock and semaphore", function()
      local h = cur:call("hold", { id = "m1", recipe = "mutex", path = "/cli/ls/m", timeout_ms = 10000 }, 20, pump)
      assert.equal("ok", h.status, h.text)
      local wseq = cur:send("hold", { id = "m2", recipe = "mutex", path = "/cli/ls/m", timeout_ms = 20000 })
      assert.is_true(util.wait_children(c, "/cli/ls/m", 2, 10))
      local rc, out = run("ls /cli/ls/m")
      assert.equal(0, rc, out)
      assert.truthy(out:match("mutex %(Curator InterProcessMutex"), out)
      local holder = out:match("\nholder%s+curator mutex%s+(%d+)%s+(%d+)%s+0x(%x+)")
      assert.truthy(holder, out)
      assert.truthy(out:match("\nwaiter%s+curator mutex%s+1%s"), out)
      -- the token is the holder node's czxid
      local node = h.f.node
      local _, st = c:get(node)
      assert.truthy(out:find(("%d"):format(st.czxid), 1, true), out)
      assert.truthy(out:find(node, 1, true), out)
      assert.equal("ok", cur:call("release", { id = "m1" }, 10, pump).status)
      assert.equal("ok", cur:wait(wseq, 20, pump).status)
      assert.equal("ok", cur:call("release", { id = "m2" }, 10, pump).status)

      assert.equal("ok", cur:call("hold", { id = "r1", recipe = "read", path = "/cli/ls/rw", timeout_ms = 10000 }, 20,
                                  pump).status)
      local w = cur:send("hold", { id = "w1", recipe = "write", path = "/cli/ls/rw", timeout_ms = 20000 })
      assert.is_true(util.wait_children(c, "/cli/ls/rw", 2, 10))
      rc, out = run("ls /cli/ls/rw")
      assert.equal(0, rc, out)
      assert.truthy(out:match("read%-write lock"), out)
      assert.truthy(out:match("\nholder%s+curator read%s+0%s"), out)
      assert.truthy(out:match("\nwaiter%s+curator write%s+1%s"), out)
      assert.equal("ok", cur:call("release", { id = "r1" }, 10, pump).status)
      assert.equal("ok", cur:wait(w, 20, pump).status)
      assert.equal("ok", cur:call("release", { id = "w1" }, 10, pump).status)

      local sem = { recipe = "semaphore", max = 1, path = "/cli/ls/sem" }
      assert.equal("ok", cur:call("hold", { id = "s1", recipe = sem.recipe, max = sem.max, path = sem.path,
                                            timeout_ms = 10000 }, 20, pump).status)
      local s2 = cur:send("hold", { id = "s2", recipe = sem.recipe, max = sem.max, path = sem.path,
                                    timeout_ms = 20000 })
      assert.is_true(util.wait_children(c, "/cli/ls/sem/locks", 1, 10))
      rc, out = run("ls /cli/ls/sem")
      assert.equal(0, rc, out)
      assert.truthy(out:match("semaphore %(Curator InterProcessSemaphoreV2 layout"), out)
      assert.truthy(out:match("\nholder%s+curator lease%s+0%s"), out)
      assert.truthy(out:match("\nnext%s+curator lease wait%s"), out)
      assert.equal("ok", cur:call("release", { id = "s1" }, 10, pump).status)
      assert.equal("ok", cur:wait(s2, 20, pump).status)
      assert.equal("ok", cur:call("release", { id = "s2" }, 10, pump).status)

      rc, out = run("ls /cli/ls/none")
      assert.equal(1, rc, out)
      assert.truthy(out:match("no such node"), out)
    end)

    it("shows a leader latch (zklock's client:latch, Curator LeaderLatch's nodes): leader and waiters", function()
      local other = util.connect(zk.hosts, { session_timeout = 10 })
      local la = c:latch("/cli/ls/latch", { id = "latch-a" })
      assert.is_true(la:await(10))
      local lb = other:latch("/cli/ls/latch", { id = "latch-b" }) -- joins in a coroutine of `other`
      assert.truthy(util.drive_until({ c, other }, function() return #kids("/cli/ls/latch") == 2 end, 10))
      local rc, out = run("ls /cli/ls/latch")
      assert.equal(0, rc, out)
      assert.truthy(out:match("leader latch %(Curator LeaderLatch%)"), out)
      assert.truthy(out:match("\nleader%s+curator latch%s+%d+%s+%d+%s+0x%x+%s+%S+%s+latch%-a%s"), out)
      assert.truthy(out:match("\nwaiter%s+curator latch%s+%d+%s+%d+%s+0x%x+%s+%S+%s+latch%-b%s"), out)
      la:close()
      lb:close()
      other:close()
    end)

    it("shows a Kazoo lock and a zklock holder queued behind it", function()
      local kz = peers.kazoo(zk.hosts)
      local h = kz:call("hold", { id = "k1", recipe = "lock", path = "/cli/ls/kz", timeout_ms = 10000 }, 20, pump)
      assert.equal("ok", h.status, h.text)
      local rc, out = run("ls /cli/ls/kz")
      assert.equal(0, rc, out)
      assert.truthy(out:match("Kazoo"), out)
      assert.truthy(out:match("\nholder%s+kazoo lock%s+0%s"), out)
      assert.truthy(out:find("kazoo-", 1, true), out) -- the identity (node data)
      assert.equal("ok", kz:call("release", { id = "k1" }, 10, pump).status)
      -- Kazoo's semaphore: leases are the path's children, the queue a sibling -__lock__
      local s = kz:call("hold", { id = "ks", recipe = "semaphore", max = 2, path = "/cli/ls/kzsem",
                                  timeout_ms = 10000 }, 20, pump)
      assert.equal("ok", s.status, s.text)
      rc, out = run("ls /cli/ls/kzsem")
      assert.equal(0, rc, out)
      assert.truthy(out:match("semaphore %(Kazoo layout: leases as children, max 2"), out)
      assert.truthy(out:match("\nholder%s+kazoo lease%s"), out)
      assert.truthy(out:find("kazoo-", 1, true), out)
      assert.equal("ok", kz:call("release", { id = "ks" }, 10, pump).status)
      kz:stop()
    end)
  end)

  describe("reap", function()
    it("finds persistent contenders, empty never-used containers and left-over parents; --yes deletes them", function()
      assert(c:create("/cli/reap/m", "", { parents = true }))
      local stale = assert(c:create("/cli/reap/m/_c_00000000-0000-4000-8000-000000000000-lock-", "old",
                                    { sequential = true }))
      local blocked = run("run -n /cli/reap/m -- true") -- it can never be granted
      assert.equal(1, blocked)
      local live = c:mutex("/cli/reap/live")
      assert(live:acquire(5))
      assert(c:create("/cli/reap/empty", "", { container = true }))
      assert(c:create("/cli/reap/sem/locks", "", { parents = true }))
      assert(c:create("/cli/reap/data", "user data"))
      assert(c:create("/cli/reap/kz", "")) -- a Kazoo lock path: persistent, used, now empty
      assert(c:create("/cli/reap/kz/x__lock__0000000000", "", { ephemeral = true }))
      assert(c:delete("/cli/reap/kz/x__lock__0000000000"))
      -- the stats reap decides by: cversion counts child changes, ctime is the server's clock
      local _, st_empty = c:get("/cli/reap/empty")
      local _, st_kz = c:get("/cli/reap/kz")
      assert.equal(0, st_empty.cversion)
      assert.equal(2, st_kz.cversion)
      assert.is_true(math.abs(st_kz.ctime / 1000 - os.time()) < 120, st_kz.ctime)
      assert.is_true(st_kz.mtime >= st_kz.ctime)
      local rc, out = run("reap /cli/reap --min-age 0")
      assert.equal(0, rc, out)
      assert.truthy(out:find("would delete " .. stale, 1, true), out)
      assert.truthy(out:find("would delete /cli/reap/empty ", 1, true), out)
      assert.truthy(out:find("would delete /cli/reap/sem/locks ", 1, true), out)
      assert.truthy(out:find("would delete /cli/reap/kz ", 1, true), out)
      assert.is_nil(out:find("/cli/reap/live/", 1, true), out)
      assert.is_nil(out:find("/cli/reap/data ", 1, true), out)
      assert.truthy(c:exists(stale), "a dry run deletes nothing")
      -- --min-age keeps young empty parents
      local _, young = run("reap /cli/reap")
      assert.is_nil(young:find("/cli/reap/empty ", 1, true), young)
      rc, out = run("reap /cli/reap --min-age 0 --yes")
      assert.equal(0, rc, out)
      assert.truthy(out:find("deleted " .. stale, 1, true), out)
      assert.is_false(c:exists(stale))
      assert.is_false(c:exists("/cli/reap/empty"))
      assert.is_false(c:exists("/cli/reap/sem/locks"))
      assert.is_false(c:exists("/cli/reap/kz"))
      assert.truthy(c:exists("/cli/reap/data"))
      assert.equal(0, (run("run -n /cli/reap/m -- true")))
      assert.truthy(live:is_held())
      assert.equal(1, #kids("/cli/reap/live"))
      assert.truthy(live:release())
    end)

    it("--session deletes the leases a live session lost track of (CURATOR-315/462), and only those", function()
      local other = util.connect(zk.hosts, { session_timeout = 10 })
      local sem = c:semaphore("/cli/reap2", 2)
      local lease = assert(sem:acquire(5))
      -- a lease whose create the owner never saw answered: its node, its session, nobody's lease
      local orphan = assert(other:create("/cli/reap2/leases/_c_11111111-1111-4111-8111-111111111111-lease-", "lost",
                                         { ephemeral = true, sequential = true }))
      local sid = other:session()
      local rc, out = run("ls /cli/reap2")
      assert.equal(0, rc, out)
      assert.truthy(out:find("0x" .. sid:gsub("^0+", ""), 1, true), out)
      rc, out = run("reap /cli/reap2 --session " .. sid .. " --yes")
      assert.equal(0, rc, out)
      assert.truthy(out:find("deleted " .. orphan, 1, true), out)
      assert.is_false(c:exists(orphan))
      assert.truthy(lease:is_held())
      assert.truthy(c:exists(lease:node()))
      assert.truthy(lease:release())
      other:close()
    end)
  end)
end)
