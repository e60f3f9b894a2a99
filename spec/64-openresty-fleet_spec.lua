-- One worker across the fleet (zklock.adapters.openresty.one_worker) in real nginx: two
-- instances (Debian's nginx-core + libnginx-mod-http-lua + lua-resty-core) with 4 workers each
-- on one path, a real ZooKeeper. The job (spec/support/nginx/fleet_app.lua) appends start, beat
-- and stop lines with its fencing token and pid to one O_APPEND log; the checker below reads
-- that log in write order (no clocks) and finds any overlap. Like spec/61, the nginx side does
-- not depend on busted's interpreter: run once, in the Lua 5.4 run (#lua54).
--   busted --lua=lua5.4 spec/64-openresty-fleet_spec.lua
-- Skipped when nginx, the Lua module, lua-resty-core, curl or build-jit are missing, and failed
-- instead under CI=true (spec/support/deps.lua).
local zklock = require("zklock")
local testing = require("zklock.testing")
local harness = require("support.nginx.harness")
local deps = require("support.deps")

local ROOT = harness.ROOT
local JOB_PATH = "/fleet/job"
local WORKERS = 4
local SESSION = 3 -- s: the fleet's session timeout (the server allows 1..60 s)
-- s: the job writes a beat line this often. Longer than the supervisor's poll (0.1 s), so on a
-- worker exit the supervisor usually notices first and tells the job (not the job itself).
local BEAT = 0.25

local read_file, execute, now = testing.read_file, testing.execute, harness.now

-- wall-clock seconds (the job's lines carry nginx's ngx.now())
local function wall()
  return tonumber((testing.sh("date +%s.%N") or ""):match("[%d%.]+"))
end

---------------------------------------------------------------- the checker

-- Reads the job log in write order. A term is one run of the job: `start T` .. `stop T` (or
-- `dead PID`, written by the test once it saw a killed worker gone). Violations:
--   * a start while the previous term has not ended (two jobs at once);
--   * any line of an older term after a newer term started (it was still running);
--   * tokens that do not rise from term to term.
-- opts.unended_ok: a term may end without a stop line (a job the supervisor had to kill writes
-- nothing more); the interleaving check still catches it running on.
local function check_log(text, opts)
  opts = opts or {}
  local terms, problems = {}, {}
  local cur
  local n = 0
  for line in (text or ""):gmatch("[^\n]+") do
    n = n + 1
    local kind, a, b, c, d = line:match("^(%a+) (%S+) ?(%S*) ?(%S*) ?(%S*)$")
    if kind == "start" then
      local token = tonumber(a)
      if cur and not cur.ended and not opts.unended_ok then
        problems[#problems + 1] = ("line %d: token %s (pid %s) started while token %s (pid %s) still ran")
          :format(n, a, b, cur.token, cur.pid)
      end
      if cur and token <= cur.token then
        problems[#problems + 1] = ("line %d: token %s after token %s: tokens must rise"):format(n, a, cur.token)
      end
      cur = { token = token, pid = tonumber(b), instance = c, t_start = tonumber(d), line = n, beats = 0 }
      terms[#terms + 1] = cur
    elseif kind == "beat" or kind == "stop" or kind == "stubborn" or kind == "style" then
      local token = tonumber(a)
      if not cur or token ~= cur.token then
        problems[#problems + 1] = ("line %d: %s of token %s while token %s runs (pid %s)")
          :format(n, kind, a, cur and cur.token or "none", cur and cur.pid or "-")
      elseif cur.ended then
        problems[#problems + 1] = ("line %d: %s of token %s after it ended"):format(n, kind, a)
      elseif kind == "beat" then
        cur.beats = cur.beats + 1
      elseif kind == "stubborn" then
        cur.stubborn = true
      elseif kind == "style" then
        cur.style = b
      else
        cur.ended, cur.reason, cur.t_stop = "stop", c, tonumber(d)
      end
    elseif kind == "dead" then
      if cur and cur.pid == tonumber(a) and not cur.ended then cur.ended, cur.reason = "dead", "killed" end
    else
      problems[#problems + 1] = ("line %d: cannot parse %q"):format(n, line)
    end
  end
  return { terms = terms, problems = problems, current = cur and not cur.ended and cur or nil }
end

describe("one worker across the fleet #openresty #lua54 #nosan", function()
  local why = harness.unavailable(ROOT)
  if why then deps.skip(why, pending) return end

  local zk, client, tmp, job_log
  local inst = {} -- name -> nginx server
  local moves = {} -- what happened, for the report
  local all_problems = {}

  local function log_text() return read_file(job_log) or "" end

  local function checked(opts)
    local r = check_log(log_text(), opts)
    for _, p in ipairs(r.problems) do all_problems[#all_problems + 1] = p end
    assert(#r.problems == 0, "the job ran twice at once:\n" .. table.concat(r.problems, "\n") .. "\nlog:\n"
      .. log_text():sub(-3000))
    return r
  end

  -- kills of jobs in the nginx logs: a cooperative job must never need one
  local killed_ok = {} -- token -> true: the stubborn job's
  local raised_ok = false -- the job raised on purpose: its error is in the nginx log
  local function no_kills(s)
    for token in s:error_log():gmatch("ended the job %(token (%d+)%): killed") do
      assert(killed_ok[tonumber(token)], "the job with token " .. token .. " was killed although it polls stopping():\n"
        .. s:log_tail(30))
    end
  end

  -- The old worker released (and closed its session) as soon as its job stopped: the next job
  -- started well before a dead session could have expired (at least 2/3 of SESSION after the
  -- last ping). prev.t_stop and nxt.t_start are both nginx's clock; `moved` is the test's view
  -- (the event to two beats of the next term), only bounded generously.
  local function handed_over_fast(prev, nxt, moved, what)
    local gap = nxt.t_start - prev.t_stop
    assert.is_true(gap < SESSION / 2, ("after %s the next job started %.2f s after the last one stopped:"
      .. " the old worker did not hand it over"):format(what, gap))
    assert.is_true(moved < SESSION + 10, ("the job took %.2f s to move after %s"):format(moved, what))
  end

  local function tails()
    local out = {}
    for name, s in pairs(inst) do out[#out + 1] = "nginx " .. name .. ":\n" .. s:log_tail(25) end
    return table.concat(out, "\n")
  end

  local function wait_for(pred, timeout, what)
    local deadline = now() + timeout
    while now() < deadline do
      local v = pred()
      if v then return v end
      client:sleep(0.02)
    end
    error("timed out after " .. timeout .. " s waiting for " .. what .. "\njob log tail:\n"
      .. log_text():sub(-1500) .. "\n" .. tails(), 2)
  end

  -- the term running now (started, not ended, beating), once one is
  local function running_term(timeout, not_token)
    return wait_for(function()
      local r = check_log(log_text())
      local cur = r.current
      if cur and cur.token ~= not_token and cur.beats >= 2 then return cur end
    end, timeout, "a running job" .. (not_token and (" other than token " .. not_token) or ""))
  end

  local function queued()
    local names, _, code = client:children(JOB_PATH)
    if not names then assert(code == "ZNONODE", code) return 0 end
    return #names
  end

  local function instance_of(pid)
    for name, s in pairs(inst) do
      for _, w in ipairs(s:workers()) do if w.pid == pid then return name, s end end
    end
  end

  local function start_instance(name, extra)
    local vars = { ZK_HOSTS = zk.hosts, JOB_PATH = JOB_PATH, JOB_LOG = job_log, INSTANCE = name,
                   SESSION_TIMEOUT = SESSION, BEAT = BEAT, STUBBORN = "no" }
    for k, v in pairs(extra or {}) do vars[k] = v end
    inst[name] = harness.start{ root = ROOT, workers = WORKERS, vars = vars,
                                template = ROOT .. "/spec/support/nginx/fleet.conf.in" }
    return inst[name]
  end

  setup(function()
    tmp = assert(io.popen("mktemp -d /tmp/zklock-fleet-spec.XXXXXX")):read("*l")
    assert(execute("chmod 0777 '" .. tmp .. "'")) -- workers run as nobody when nginx runs as root
    job_log = tmp .. "/job.log"
    zk = testing.server{}
    client = assert(zklock.connect(zk.hosts, { identity = "spec-64" }))
    start_instance("A")
    start_instance("B")
  end)

  teardown(function()
    local logs = {}
    local kill_problem
    for name, s in pairs(inst) do
      logs[#logs + 1] = s:error_log()
      local ok, err = pcall(no_kills, s)
      kill_problem = kill_problem or (not ok and err) or nil
      s:stop()
      inst[name] = nil
    end
    if client then client:close() end
    if zk then zk:stop() end
    local r = check_log(job_log and read_file(job_log) or "", { unended_ok = true })
    if tmp then execute("rm -rf '" .. tmp .. "'") end
    print(("\n  [fleet] %d terms of the job in all, %d overlaps; moves: %s")
      :format(#r.terms, #all_problems, table.concat(moves, "; ")))
    if kill_problem then error(kill_problem) end
    for _, log in ipairs(logs) do
      for line in log:gmatch("[^\n]+") do
        if line:find("[error]", 1, true) and line:find("zklock", 1, true)
           and not (raised_ok and line:find("the job raised in worker", 1, true)) then
          error("zklock error in the nginx log: " .. line)
        end
      end
    end
  end)

  it("exactly one of 8 workers in 2 instances runs the job; all 8 queue", function()
    wait_for(function() return queued() == 2 * WORKERS end, 20, "8 queued workers")
    local cur = running_term(20)
    -- ten beats (2.5 s when nginx's timers are on time; a busy machine may take longer): one term
    wait_for(function()
      local t = checked().current
      return t and (t.token ~= cur.token or t.beats >= 10)
    end, 30, "10 beats of the running term")
    local r = checked()
    assert.are.equal(1, #r.terms, "the job changed hands without a reason")
    assert.are.equal(cur.token, r.current.token)
    assert.is_true(r.current.beats >= 10)
    -- the worker running it says so (by asking every worker: /job answers for the one it hits)
    local name = instance_of(cur.pid)
    assert.is_truthy(name, "the running pid is no worker of either instance")
    -- the holder's node carries the id "<instance>/<pid>"
    local names = assert(client:children(JOB_PATH))
    local found = false
    for _, n in ipairs(names) do
      local data = client:get(JOB_PATH .. "/" .. n)
      if data == name .. "/" .. cur.pid then found = true end
    end
    assert.is_true(found, "no queue node with the id of the running worker")
  end)

  it("kill -9 of the worker running it: another worker takes over within the session timeout", function()
    local cur = running_term(20)
    local t0, w0 = now(), wall()
    assert(execute("kill -KILL " .. cur.pid))
    wait_for(function() return not testing.pid_alive(cur.pid) end, 10, "the killed worker to vanish")
    testing.write_file(job_log, "dead " .. cur.pid .. "\n", "a")
    local nxt = running_term(SESSION + 15, cur.token)
    local moved = now() - t0
    local r = checked()
    assert.are_not.equal(cur.pid, nxt.pid)
    assert.is_true(nxt.token > cur.token)
    moves[#moves + 1] = ("kill -9: next start %.2f s after the kill (pid %d -> %d)")
      :format(nxt.t_start - w0, cur.pid, nxt.pid)
    -- not before the dead worker's session expired
    assert.is_true(moved >= SESSION * 0.5, ("the job moved %.2f s after kill -9: before the session expired?")
      :format(moved))
    -- nginx's master replaced the worker; the new one queues too
    wait_for(function() return queued() == 2 * WORKERS end, 20, "8 queued workers again")
    assert.are.equal(#r.terms, 2)
  end)

  it("HUP of the instance running it: the job stays or moves, never twice at once", function()
    local cur = running_term(20)
    local name, srv = instance_of(cur.pid)
    assert(srv, "the running worker belongs to no instance")
    local t0 = now()
    assert.is_true(srv:reload())
    local nxt = running_term(20, cur.token)
    local moved = now() - t0
    local r = checked()
    local prev = r.terms[#r.terms - 1]
    assert.are.equal(cur.token, prev.token)
    assert.are.equal("EXITING", prev.reason)
    moves[#moves + 1] = ("HUP of %s: stop -> next start %.3f s (pid %d -> %d of %s)"):format(name,
      nxt.t_start - prev.t_stop, cur.pid, nxt.pid, nxt.instance)
    handed_over_fast(prev, nxt, moved, "HUP")
    -- the old workers are gone, their sessions closed: 8 in the queue again
    wait_for(function() return queued() == 2 * WORKERS end, 20, "8 queued workers after the reload")
    checked()
    no_kills(srv)
  end)

  it("QUIT of the instance running it: the job moves to the other instance", function()
    local cur = running_term(20)
    local name, srv = instance_of(cur.pid)
    assert(srv, "the running worker belongs to no instance")
    local other = name == "A" and "B" or "A"
    local t0 = now()
    assert(execute("kill -QUIT " .. srv.pid))
    local nxt = running_term(20, cur.token)
    local moved = now() - t0
    local r = checked()
    assert.are.equal("EXITING", r.terms[#r.terms - 1].reason)
    assert.are.equal(other, nxt.instance)
    moves[#moves + 1] = ("QUIT of %s: stop -> next start %.3f s (pid %d -> %d of %s)"):format(name,
      nxt.t_start - r.terms[#r.terms - 1].t_stop, cur.pid, nxt.pid, other)
    handed_over_fast(r.terms[#r.terms - 1], nxt, moved, "QUIT")
    wait_for(function() return not testing.pid_alive(srv.pid) end, 20, "the quit instance to exit")
    wait_for(function() return queued() == WORKERS end, 20, "the other instance's 4 workers queued")
    no_kills(srv)
    srv:stop()
    inst[name] = nil
    client:sleep(1)
    checked()
    -- back to two instances for what follows
    start_instance(name)
    wait_for(function() return queued() == 2 * WORKERS end, 20, "8 queued workers with the instance back")
  end)

  it("handle:close() in the worker running it: the job moves, that worker leaves the queue", function()
    local cur = running_term(20)
    local name, srv = instance_of(cur.pid)
    local t0 = now()
    local st = srv:get("/close?pid=" .. cur.pid, 5)
    assert.are.equal(200, st)
    local nxt = running_term(20, cur.token)
    local moved = now() - t0
    local r = checked()
    local prev = r.terms[#r.terms - 1]
    assert.are.equal(cur.token, prev.token)
    assert.are.equal("CLOSED", prev.reason)
    assert.are_not.equal(cur.pid, nxt.pid)
    moves[#moves + 1] = ("close(): stop -> next start %.3f s (pid %d -> %d)"):format(nxt.t_start - prev.t_stop,
      cur.pid, nxt.pid)
    handed_over_fast(prev, nxt, moved, "close()")
    -- its session is closed: 7 queued, and the worker itself lives on
    wait_for(function() return queued() == 2 * WORKERS - 1 end, 10, "7 queued workers")
    assert.is_true(testing.pid_alive(cur.pid))
    client:sleep(1)
    assert.are.equal(2 * WORKERS - 1, queued())
    -- a reload gives that instance fresh workers, all queued
    srv:get("/close?pid=0", 5)
    assert(srv:reload())
    wait_for(function() return queued() == 2 * WORKERS end, 20, "8 queued workers after reloading " .. name)
    checked()
  end)

  it("a job that raises is logged, its worker queues again, and the job goes on elsewhere", function()
    local flag = job_log .. ".raise"
    local cur = running_term(20)
    testing.write_file(flag, "")
    -- the running job moves on a reload; the next one raises at once
    local _, srv = instance_of(cur.pid)
    assert(srv:reload())
    local failed = wait_for(function()
      local r = check_log(log_text())
      local last = r.terms[#r.terms]
      return last.token ~= cur.token and last.reason == "RAISED" and last
    end, 20, "a job that raised")
    os.remove(flag)
    raised_ok = true
    local nxt = running_term(20, failed.token)
    checked()
    local log = ""
    for _, s in pairs(inst) do log = log .. s:error_log() end
    assert.is_truthy(log:find("the job raised in worker " .. failed.pid .. ": ", 1, true), "no error logged")
    assert.is_truthy(log:find("fleet_app: the job fails on purpose", 1, true))
    moves[#moves + 1] = ("a job raised: next start %.3f s after (pid %d -> %d)"):format(nxt.t_start - failed.t_stop,
      failed.pid, nxt.pid)
    wait_for(function() return queued() == 2 * WORKERS end, 20, "8 queued workers after the reload")
  end)

  it("bad input to one_worker raises a clear error naming the argument, and connects nothing", function()
    local function sessions()
      local n = 0
      for _ in (zk:four("cons") or ""):gmatch("sid=0x") do n = n + 1 end
      return n
    end
    -- one per worker, and ours (workers of a recent reload may still be connecting)
    wait_for(function() return sessions() == 2 * WORKERS + 1 end, 20, "9 sessions: " .. (zk:four("cons") or ""))
    local before = sessions()
    local st, body = inst.A:get("/bad", 10)
    assert.are.equal(200, st, body)
    local lines = {}
    for line in body:gmatch("[^\n]+") do lines[#lines + 1] = line end
    local expect = {
      "bad argument #1 to 'one_worker' (lock path: expected a string",
      "bad argument #1 to 'one_worker' (lock path",
      "bad argument #1 to 'one_worker' (lock path",
      "bad argument #2 to 'one_worker' (job: expected a function, got \"job\"",
      "bad argument #3 to 'one_worker' (option 'hosts' is required",
      "bad argument #3 to 'one_worker' (options: expected a table, got \"opts\"",
      "bad argument #3 to 'one_worker' (hosts: expected \"host:port[,host:port...]\", got \"nohost\")",
      "bad argument #3 to 'one_worker' (option 'session_timeout': expected a number > 0, got -1",
      "bad argument #3 to 'one_worker' (option 'stop_grace': expected a number >= 0, got \"1\"",
      "bad argument #3 to 'one_worker' (option 'stop_grace': expected a number of seconds >= 0 (finite), got inf",
      "bad argument #3 to 'one_worker' (option 'id': expected a string, got 5",
      "bad argument #3 to 'one_worker' (option 'acl': expected \"open\", \"creator\"",
      "bad argument #3 to 'one_worker' (unknown option 'requeue' (known: acl, hosts, id, max_watch_bytes,"
        .. " session_timeout, stop_grace))",
      "zklock: use handle:running() (with a colon)",
      "zklock: use handle:close() (with a colon)",
      "zklock: one_worker must be called in init_worker_by_lua* (or later), not in init_by_lua*",
    }
    assert.are.equal(#expect, #lines, body)
    for i, e in ipairs(expect) do
      assert.is_truthy(lines[i]:find(e, 1, true), ("call %d: expected %q in %q"):format(i, e, lines[i]))
      -- raised at the caller (fleet_app.lua), not inside zklock
      assert.is_truthy(lines[i]:find("fleet_app.lua:", 1, true), lines[i])
    end
    -- no session was opened by the bad calls, no node queued
    client:sleep(0.5)
    assert.are.equal(before, sessions())
    assert.are.equal(2 * WORKERS, queued())
    checked()
  end)

  it("the server goes silent (SUSPENDED): the job is told to stop and the next worker runs it", function()
    local cur = running_term(20)
    local t0 = now()
    zk:pause()
    -- silence for 2/3 of the session timeout makes the connection SUSPENDED (LOST follows a
    -- tenth before the timeout); the server resumes once the job stopped, the sessions may or
    -- may not have expired by then
    local ok, err = pcall(wait_for, function()
      local r = check_log(log_text())
      local last = r.terms[#r.terms]
      return last.token == cur.token and last.ended and last
    end, SESSION + 2, "the job to stop while the server is silent")
    zk:resume()
    assert(ok, err)
    local r = checked()
    -- the term that ran during the silence (by its token: once the server is back the next worker
    -- may already have started a term of its own, which is then the last one in the log)
    local term
    for _, t in ipairs(r.terms) do if t.token == cur.token then term = t end end
    assert.are.equal("SUSPENDED", term and term.reason)
    local told = now() - t0
    local nxt = running_term(SESSION + 15, cur.token)
    moves[#moves + 1] = ("server paused: job told SUSPENDED %.2f s into the silence, next start %.2f s after"
      .. " the resume (pid %d -> %d)"):format(told, now() - t0 - told, cur.pid, nxt.pid)
    checked()
    wait_for(function() return queued() == 2 * WORKERS end, 20, "8 queued workers after the pause")
  end)

  it("a job that ignores stopping() is killed before another worker starts it", function()
    local flag = job_log .. ".stubborn"
    testing.write_file(flag, "")
    local cur = running_term(20)
    -- the current (cooperative) job moves on a reload; the next term starts stubborn
    local _, srv = instance_of(cur.pid)
    assert(srv:reload())
    local stub = wait_for(function()
      local t = check_log(log_text()).current
      return t and t.token ~= cur.token and t.stubborn and t.beats >= 2 and t
    end, 20, "a stubborn term")
    os.remove(flag)
    killed_ok[stub.token] = true
    -- it ignores SUSPENDED; the supervisor kills it stop_grace (2 s) later, before the session
    -- could expire; the server stays silent past the session timeout: every session expires
    local t0 = now()
    zk:pause()
    client:sleep(SESSION + 1)
    zk:resume()
    local nxt = running_term(SESSION + 20, stub.token)
    local r = checked({ unended_ok = true })
    local prev = r.terms[#r.terms - 1]
    assert.are.equal(stub.token, prev.token)
    assert.is_nil(prev.ended) -- killed: no stop line; no line of it after the next start either
    local log = ""
    for _, s in pairs(inst) do log = log .. s:error_log() end
    assert.is_truthy(log:find("ended the job (token " .. stub.token .. "): killed", 1, true),
      "no kill of the stubborn job in the nginx logs")
    moves[#moves + 1] = ("stubborn job killed after SUSPENDED; next start %.2f s after the pause began (pid %d -> %d)")
      :format(now() - t0, stub.pid, nxt.pid)
    wait_for(function() return queued() == 2 * WORKERS end, 30, "8 queued workers after the expiry")
    checked({ unended_ok = true })
  end)

  it("on LOST a job that ignores stopping() is killed at once, before the server expires the session", function()
    -- workers started now take a stop_grace of 30 s: only the loss can end the stubborn job
    local function reload(s)
      local old = {}
      for _, w in ipairs(s:workers()) do old[w.pid] = true end
      assert(s:reload())
      wait_for(function()
        for _, w in ipairs(s:workers()) do if old[w.pid] then return false end end
        return true
      end, 30, "the old workers to exit")
    end
    testing.write_file(job_log .. ".grace", "30\n")
    for _, s in pairs(inst) do reload(s) end
    -- every worker has the long grace now; the next term (after the cooperative one moves) is stubborn
    testing.write_file(job_log .. ".stubborn", "")
    local before = running_term(20)
    reload(select(2, instance_of(before.pid)))
    local stub = wait_for(function()
      local t = check_log(log_text(), { unended_ok = true }).current
      return t and t.token ~= before.token and t.stubborn and t.beats >= 2 and t
    end, 30, "a stubborn term")
    os.remove(job_log .. ".stubborn")
    os.remove(job_log .. ".grace")
    killed_ok[stub.token] = true
    wait_for(function() return queued() == 2 * WORKERS end, 30, "8 queued workers after the reloads")
    local t0 = now()
    zk:pause()
    client:sleep(SESSION + 1)
    zk:resume()
    local nxt = running_term(SESSION + 20, stub.token)
    local r = checked({ unended_ok = true })
    assert.are.equal(stub.token, r.terms[#r.terms - 1].token)
    assert.is_nil(r.terms[#r.terms - 1].ended)
    local log = ""
    for _, s in pairs(inst) do log = log .. s:error_log() end
    local killed = "ended the job (token " .. stub.token .. "): killed at once: the session was lost"
    assert.is_truthy(log:find(killed, 1, true), "the stubborn job was not killed on LOST")
    moves[#moves + 1] = ("stubborn job killed on LOST; next start %.2f s after the pause began (pid %d -> %d)")
      :format(now() - t0, stub.pid, nxt.pid)
  end)
end)
