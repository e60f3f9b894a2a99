-- Nemesis soak (test catalogue §3.8, bounded): 4 worker processes x 50 coroutines over 10 mutexes
-- and one lease semaphore (max 3), all through the public fault proxy (testing.proxy), while the
-- public seeded nemesis (testing.nemesis) pauses the server (1-2 s, below the 6 s session
-- timeout), resets every connection at the proxy, or restarts the server (kill -9 + restart).
-- Afterwards the workers' histories are checked with the public checkers (zklock.testing.check):
--   * no two uninterrupted holds of one mutex overlap (holds that saw SUSPENDED/LOST are counted
--     apart: the contract is that holders stop on those);
--   * at most 3 uninterrupted semaphore leases at any instant;
--   * fencing tokens strictly increase per mutex in grant order (uninterrupted holds);
--   * every operation is accounted for: started == acquired + failed, nothing raised;
--   * nothing leaks: no children left under the lock paths and the semaphore, ephemerals back
--     to the baseline.
--   busted --lua=lua5.4 spec/91-soak_spec.lua
--   ZKLOCK_SOAK_SECONDS=120 ZKLOCK_SOAK_SEED=12345 busted --lua=lua5.4 spec/91-soak_spec.lua
--   ZKLOCK_SOAK_KEEP=/tmp/soak-logs ...   keeps the worker logs (and ZooKeeper client logs) there
-- Runtime: ZKLOCK_SOAK_SECONDS (default 45) + ~15 s.
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")

local SECONDS = tonumber(os.getenv("ZKLOCK_SOAK_SECONDS") or "") or 45
local SEED = tonumber(os.getenv("ZKLOCK_SOAK_SEED") or "")
  or ((os.time() * 7919 + (fw.pid or 1)) % 1000000 + 1)
local WORKERS, COROUTINES, LOCKS, SEM_MAX = 4, 50, 10, 3
local SESSION = 6          -- s
local ACQUIRE_TIMEOUT = 3  -- s
local HOLD_MS = 10         -- holds last 0..HOLD_MS ms
local KEEP = os.getenv("ZKLOCK_SOAK_KEEP")

local function now() return core.now() end

describe("soak: workers under a seeded nemesis #soak #slow", function()
  local zk, proxy

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    proxy = fw.proxy(zk.hosts)
  end)

  teardown(function()
    util.close_all()
    fw.stop_all()
    util.stop_server(zk)
  end)

  it(("keeps exclusion, the lease limit and token order; accounts for every operation; "
      .. "leaks nothing (%d s)"):format(SECONDS), function()
    print(("\n  [soak] seed=%d seconds=%d (reproduce: ZKLOCK_SOAK_SEED=%d ZKLOCK_SOAK_SECONDS=%d)"):format(
      SEED, SECONDS, SEED, SECONDS))
    local root = "/soak/" .. SEED
    local lock_root, sem_path = root .. "/locks", root .. "/sem"
    local baseline = util.mntr(zk, "zk_ephemerals_count")

    ---------------------------------------------------------------- workers
    local dir = fw.tmpdir("soak")
    local workers = {}
    local t_start = now()
    for i = 1, WORKERS do
      workers[i] = fw.worker("soak", {
        hosts = proxy.hosts, session = SESSION, locks = LOCKS, lock_root = lock_root, sem = sem_path,
        sem_max = SEM_MAX, cos = COROUTINES, seconds = SECONDS, seed = SEED, id = i,
        acquire_timeout = ACQUIRE_TIMEOUT, hold_ms = HOLD_MS, p_sem = 0.12,
        log = ("%s/worker%d.log"):format(dir, i),
        zklog = KEEP and ("%s/worker%d.zk.log"):format(dir, i) or "",
      })
    end
    for i, w in ipairs(workers) do
      assert.truthy(w:wait_line("^I\t", 20), ("worker %d did not connect: %s"):format(i, w:output()))
    end

    ---------------------------------------------------------------- nemesis
    -- the public kit's seeded nemesis: server pauses (1-2 s, below the session timeout),
    -- connection resets at the proxy, server restarts (kill -9 + restart); quiet at the end
    local nem = testing.nemesis{ seed = SEED, server = zk, nets = { proxy },
                                 faults = { pause = 0.4, reset = 0.35, restart = 0.25 },
                                 gap = { 2, 5 }, duration = { 1, 2 }, quiet = 4 }
    local report = nem:run(math.max(1, SECONDS - (now() - t_start) / 1000))
    local faults = { pause = report.counts.pause or 0, reset = report.counts.reset or 0,
                     restart = report.counts.restart or 0 }
    local nfaults = report.faults
    local timeline = {}
    for _, st in ipairs(report.steps) do
      timeline[#timeline + 1] = ("%.1fs %s%s"):format(st.t, st.fault,
        st.fault == "pause" and (" %.1fs"):format(st.seconds) or "")
    end
    print(("  [soak] nemesis (%s): %s"):format(report.summary, table.concat(timeline, ", ")))

    ---------------------------------------------------------------- let the workers finish
    for i, w in ipairs(workers) do
      local left = (t_start + SECONDS * 1000 - now()) / 1000
      assert.is_true(w:wait_exit(math.max(0, left) + ACQUIRE_TIMEOUT + 30),
        ("worker %d did not finish: %s"):format(i, w:output()))
    end

    if KEEP and KEEP:match("^/[%w%-_./]+$") then
      os.execute(("mkdir -p '%s' && cp '%s'/worker* '%s'/"):format(KEEP, dir, KEEP))
      print("  [soak] worker logs kept in " .. KEEP)
    end

    ---------------------------------------------------------------- check
    local holds, leases, raised, fails = {}, {}, {}, 0
    local started, acquired, failed, nraised = 0, 0, 0, 0
    local codes, events = {}, {}
    local interrupted_holds, lost_holds, release_errors = 0, 0, {}
    local session_timelines, expired = {}, false
    for i, w in ipairs(workers) do
      local log = fw.read_log(w.log)
      local tl = {}
      for _, e in ipairs(log.events) do
        tl[#tl + 1] = ("%.1fs %s"):format((e.at - t_start) / 1000, e.state)
        if e.state == "EXPIRED" then expired = true end
      end
      session_timelines[i] = table.concat(tl, ", ")
      assert.is_true(log.done, ("worker %d log incomplete (%d lines): %s"):format(i, log.lines, w:output()))
      assert.truthy(log.summary, "worker " .. i .. " wrote no counters")
      local s = log.summary
      started, acquired = started + s.started, acquired + s.acquired
      failed, nraised = failed + s.failed, nraised + s.raised
      -- each worker: every operation it started ended one way or the other, and is in the log
      assert.are.equal(s.started, s.acquired + s.failed + s.raised, "worker " .. i .. " lost track of operations")
      assert.are.equal(s.acquired, #log.holds + #log.leases, "worker " .. i .. ": holds logged ~= acquired")
      assert.are.equal(s.failed, #log.fails, "worker " .. i .. ": failures logged ~= failed")
      for k, n in pairs(log.codes) do codes[k] = (codes[k] or 0) + n end
      for _, e in ipairs(log.events) do events[e.state] = (events[e.state] or 0) + 1 end
      for _, line in ipairs(log.raised) do raised[#raised + 1] = "worker " .. i .. ": " .. line end
      fails = fails + #log.fails
      for _, h in ipairs(log.holds) do
        holds[#holds + 1] = h
        if h.interrupted then interrupted_holds = interrupted_holds + 1 end
        if h.lev:find("LOST", 1, true) or h.sess:find("EXPIRED", 1, true) then lost_holds = lost_holds + 1 end
        if h.release ~= "ok" then release_errors[h.release] = (release_errors[h.release] or 0) + 1 end
      end
      for _, h in ipairs(log.leases) do
        leases[#leases + 1] = h
        if h.release ~= "ok" then release_errors[h.release] = (release_errors[h.release] or 0) + 1 end
      end
    end
    -- the public checkers over the workers' histories (one file per worker process, public
    -- format): exclusion per mutex, token order, the lease limit; interrupted holds (SUSPENDED /
    -- LOST during the hold) are left out, as the contract asks only holders that stop on those
    local logs = {}
    for i, w in ipairs(workers) do logs[i] = w.log end
    local history = testing.check.load(logs)
    local function on_sem(ev) return ev.key == sem_path end
    local locks = testing.check.filter(history, function(ev) return not on_sem(ev) end)
    local sems = testing.check.filter(history, on_sem)
    local clean = { ignore_interrupted = true }
    local mutex_ok, mutex_msg = testing.check.mutex(locks, clean)
    local token_ok, token_msg = testing.check.tokens(locks, clean)
    local sem_ok, sem_msg = testing.check.semaphore(sems, { limit = SEM_MAX, ignore_interrupted = true })
    local mutex = testing.check.stats(locks)
    local sem = testing.check.stats(sems, { limit = SEM_MAX })
    local sem_max = 0
    for _, v in pairs(sem.max_overlap) do if v > sem_max then sem_max = v end end
    local code_list = {}
    for k, n in pairs(codes) do code_list[#code_list + 1] = k .. "=" .. n end
    table.sort(code_list)
    local ev_list = {}
    for k, n in pairs(events) do ev_list[#ev_list + 1] = k .. "=" .. n end
    table.sort(ev_list)
    local rel_list = {}
    for k, n in pairs(release_errors) do rel_list[#rel_list + 1] = k .. "=" .. n end
    table.sort(rel_list)

    ---------------------------------------------------------------- leaks
    local obs = util.connect(zk.hosts, { session_timeout = 10, identity = "soak-observer" })
    local paths = { sem_path .. "/leases", sem_path .. "/locks" }
    for j = 1, LOCKS do paths[#paths + 1] = lock_root .. "/" .. j end
    local function leftovers()
      local left = {}
      for _, p in ipairs(paths) do
        for _, name in ipairs(util.children(obs, p)) do left[#left + 1] = p .. "/" .. name end
      end
      return left
    end
    -- workers closed their sessions, so nothing should be left at all; allow one session timeout
    -- for a session the server still has to expire (a worker whose close did not reach it)
    local left
    util.wait_until(function() left = leftovers() return #left == 0 end, SESSION + 2, { obs })
    local ephemerals
    util.wait_until(function()
      ephemerals = util.mntr(zk, "zk_ephemerals_count")
      return ephemerals <= baseline
    end, SESSION + 2, { obs })

    print(("  [soak] summary: seed=%d seconds=%d workers=%dx%d operations=%d acquired=%d failed=%d raised=%d "
      .. "mutex_holds=%d (interrupted=%d, lost=%d) leases=%d faults=%d (pause=%d reset=%d restart=%d) "
      .. "violations=%d interrupted_overlaps=%d token_violations=%d lease_overlap_max=%d/%d lease_violations=%d "
      .. "leaked_nodes=%d ephemerals=%d/%d"):format(
      SEED, SECONDS, WORKERS, COROUTINES, started, acquired, failed, nraised, #holds, interrupted_holds,
      lost_holds, #leases, nfaults, faults.pause, faults.reset, faults.restart, mutex.violations,
      mutex.interrupted_overlaps + sem.interrupted_overlaps, mutex.token_violations, sem_max, SEM_MAX,
      sem.violations, #left, ephemerals, baseline))
    print(("  [soak] failures by code: %s; session events: %s; releases not ok: %s"):format(
      table.concat(code_list, " "), table.concat(ev_list, " "),
      #rel_list > 0 and table.concat(rel_list, " ") or "none"))
    for i, tl in ipairs(session_timelines) do
      if i == 1 or expired then print(("  [soak] worker %d session events: %s"):format(i, tl)) end
    end
    for _, e in ipairs(mutex.examples) do print("  [soak] mutex: " .. e) end
    for _, e in ipairs(sem.examples) do print("  [soak] semaphore: " .. e) end

    assert.is_true(nfaults >= 3, "the nemesis injected too few faults")
    assert.is_true(acquired > 100, "too little work got done")
    assert.are.same({}, raised)
    assert.are.equal(started, acquired + failed)
    assert(mutex_ok, mutex_msg)
    assert(token_ok, token_msg)
    assert(sem_ok, sem_msg)
    assert.are.equal(#holds, mutex.holds, "the public history lacks holds")
    assert.are.equal(#leases, sem.holds, "the public history lacks leases")
    assert.are.equal(0, mutex.violations, table.concat(mutex.examples, "\n"))
    assert.are.equal(0, mutex.token_violations, table.concat(mutex.examples, "\n"))
    assert.are.equal(0, sem.violations, table.concat(sem.examples, "\n"))
    assert.is_true(sem_max <= SEM_MAX)
    assert.are.same({}, left)
    assert.is_true(ephemerals <= baseline, ("ephemerals %d, baseline %d"):format(ephemerals, baseline))
    -- connection problems the client recovers from must not surface: an acquire ends granted,
    -- timed out, or (session gone) ESESSION; a release ends ok, or ELOST
    local unexpected = {}
    for k in pairs(codes) do
      if k ~= "ETIMEDOUT" and k ~= "ESESSION" then unexpected[#unexpected + 1] = "acquire:" .. k end
    end
    for k in pairs(release_errors) do
      if k ~= "ELOST" then unexpected[#unexpected + 1] = "release:" .. k end
    end
    table.sort(unexpected)
    assert.are.same({}, unexpected)
  end)
end)
