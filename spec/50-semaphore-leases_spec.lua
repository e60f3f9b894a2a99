-- The lease semaphore (Curator InterProcessSemaphoreV2) and the semaphore mutex (Curator
-- InterProcessSemaphoreMutex) against a real ZooKeeper: the shared server of spec/support/fixture.lua
-- (clean at each describe's start). Runs under Lua 5.4 and LuaJIT (tests tagged #lua54 are 5.4 only).
-- This file: Curator's layout, the lease limit, request costs, many holders, a killed holder.
--   busted --lua=lua5.4 spec/50-semaphore-leases_spec.lua
--   busted --lua=luajit --run=luajit spec/50-semaphore-leases_spec.lua
--
-- Test catalogue: SE-01/SE-02 (limits), SE-03/HE-01 (checker over many holders), SE-07 (holder
-- gone), SE-11/TO-01/TO-03/TO-04 (give-up paths leave nothing), MX-04 (participants), RE-04
-- (semaphore mutex is not reentrant), RL-03 (double release).
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")
local fixture = require("support.fixture")
local H = require("support.semaphore")

local LEASE_NODE, pack, assert_code, watch_count = H.LEASE_NODE, H.pack, H.assert_code, H.watch_count
local data_watches_under, leases_of = H.data_watches_under, H.leases_of
local locks_of, wait_layout = H.locks_of, H.wait_layout

describe("semaphore: leases", function()
  local zk
  local fx = fixture.server({}, { each = true, workers = true }, function(s) zk = s end)
  local connect = fx.connect

  ------------------------------------------------------------------ layout

  it("uses Curator's layout: <path>/locks for the internal mutex, <path>/leases/_c_<uuid>-lease-<seq10>", function()
    local a, b = connect("lay-a"), connect("lay-b")
    local path = "/sem/layout"
    local sa, sb = a:semaphore(path, 1), b:semaphore(path, 1)
    assert.are.equal("semaphore", zklock.type(sa))
    local lease = assert(sa:acquire(5))
    assert.are.equal("lease", zklock.type(lease))
    assert.is_true(lease:is_held())
    local node = lease:node()
    assert.are.equal(path .. "/leases/", node:sub(1, #path + 8))
    local name = util.basename(node)
    assert.matches(LEASE_NODE, name)
    local data, stat = a:get(node)
    assert.are.equal("lay-a", data)
    assert.are.equal(a:session(), stat.ephemeral_owner)
    assert.are.equal(lease:token(), stat.czxid)
    assert.is_true(util.is_integer(lease:token()))
    -- the internal mutex was given back once the lease was granted (its empty container parent
    -- may be reaped by the server at any time)
    wait_layout(a, path, { name }, 0, { a, b })
    -- a waiter holds the internal mutex (a Curator mutex node) while it counts the leases
    local res
    b:spawn(function() res = pack(sb:acquire(10)) end)
    assert.is_true(util.wait_until(function() return #locks_of(a, path) == 1 and #leases_of(a, path) == 2 end,
      3, { a, b }))
    local mnode = locks_of(a, path)[1]
    assert.matches(util.MUTEX_NODE, mnode)
    local _, mstat = a:get(path .. "/locks/" .. mnode)
    assert.are.equal(b:session(), mstat.ephemeral_owner)
    -- only that waiter watches, and only the leases: one children watch, no data watch
    assert.is_true(util.wait_until(function()
      return watch_count(zk) == 1 and data_watches_under(zk, "/") == 0
    end, 2, { a, b }), ("the head waiter does not watch the leases (watches: %d, data watches: %d)")
      :format(watch_count(zk), data_watches_under(zk, "/")))
    assert.is_true(lease:release())
    assert.is_false(lease:is_held())
    assert.is_nil(lease:token())
    assert.is_true(util.wait_until(function() return res ~= nil end, 5, { a, b }))
    local lb = res[1]
    assert.are.equal("lease", zklock.type(lb), tostring(res[2]))
    assert.is_true(lb:token() > stat.czxid)
    wait_layout(a, path, { util.basename(lb:node()) }, 0, { a, b })
    assert.is_true(lb:release())
    wait_layout(a, path, {}, 0, { a, b })
  end)

  ------------------------------------------------------------------ limits

  it("grants max leases and no more; the next waits until one is returned", function()
    local a, b = connect("lim-a"), connect("lim-b")
    local path = "/sem/limit"
    local sa, sb = a:semaphore(path, 3), b:semaphore(path, 3)
    local held = {}
    for i = 1, 3 do held[i] = assert(sa:acquire(5)) end
    assert.are.equal(3, #leases_of(a, path))
    assert_code("ETIMEDOUT", pack(sb:acquire(0)), "a 4th lease, try-once")
    assert_code("ETIMEDOUT", pack(sb:acquire(0.2)), "a 4th lease, timed")
    local names = {}
    for i, l in ipairs(held) do names[i] = util.basename(l:node()) end
    wait_layout(a, path, names, 0, { a, b })
    local res
    b:spawn(function() res = pack(sb:acquire(10)) end)
    assert.is_true(util.wait_until(function() return #leases_of(a, path) == 4 end, 3, { a, b }))
    util.drive({ a, b }, 0.1)
    assert.is_nil(res)
    assert.is_true(held[2]:release())
    assert.is_true(util.wait_until(function() return res ~= nil end, 5, { a, b }))
    assert.are.equal("lease", zklock.type(res[1]), tostring(res[2]))
    assert.are.equal(3, #leases_of(a, path))
    assert.is_true(res[1]:release())
    assert.is_true(held[1]:release())
    assert.is_true(held[3]:release())
    wait_layout(a, path, {}, 0, { a, b })
  end)

  -- Requests, counted at the server: a free lease costs create+list on the internal mutex,
  -- create+list on the leases, and the two deletes; no watch is armed (or taken back) when the
  -- listing shows room. The watch-less listing comes from a hint (the client's last listing of
  -- these leases had room); when the hint is wrong, the waiter must still arm a watch and wake.
  it("a free lease costs 6 requests per acquire+release and leaves no watch; "
     .. "a stale 'room' hint still waits and wakes", function()
    local c, b = connect("req-c"), connect("req-b")
    local all = { c, b }
    local path = "/sem/requests"
    local sc, sb = c:semaphore(path, 2), b:semaphore(path, 2)
    -- persistent parents, so the test server's quick container reaper cannot add re-creations
    assert(c:create(path .. "/locks", "", { parents = true }))
    assert(c:create(path .. "/leases", "", { parents = true }))
    for _ = 1, 2 do assert(sc:acquire(5)):release() end  -- the hint learns "room"
    wait_layout(c, path, {}, 0, all)
    local function packets() return util.mntr(zk, "zk_packets_received") end
    local p0 = packets()
    local own = packets() - p0                          -- what one mntr adds by itself
    local N = 20
    local s0 = c:stats()
    p0 = packets()
    for _ = 1, N do assert(sc:acquire(5)):release() end
    wait_layout(c, path, {}, 0, { c })                    -- every delete answered
    local total = packets() - p0 - own
    local d = util.stats_delta(s0, c:stats())
    -- what the client knows it sent; the rest would be requests it does not count (removeWatches)
    local known = d.creates + d.lists + d.deletes + d.gets + d.exists + d.ops
    print(("\n  [requests] %.2f per free-lease acquire+release (%d at the server, %d of them the test's polls); %s")
      :format((total - d.ops) / N, total, d.ops, util.format_stats(d)))
    assert.are.same({ 2 * N, 2 * N, 2 * N, 0, 0 }, { d.creates, d.lists, d.deletes, d.gets, d.exists },
      util.format_stats(d))
    assert.is_true(total - known <= 2, ("%d requests the client did not count "
      .. "(a ping of each client at most expected): "
      .. "a watch was set and taken back"):format(total - known))
    assert.are.equal(0, watch_count(zk))

    -- full now, but c's hint still says "room": its first listing sets no watch, shows 3 > 2,
    -- so it lists again with a watch and waits
    local h1, h2 = assert(sb:acquire(5)), assert(sb:acquire(5))
    s0 = c:stats()
    local res
    c:spawn(function() res = pack(sc:acquire(10)) end)
    assert.is_true(util.wait_until(function() return watch_count(zk) == 1 and #leases_of(b, path) == 3 end,
      3, all), "the waiter did not arm a watch on the leases")
    util.drive(all, 0.1)
    assert.is_nil(res)
    assert.is_true(h1:release())
    assert.is_true(util.wait_until(function() return res ~= nil end, 5, all), "the waiter was not woken")
    assert.are.equal("lease", zklock.type(res[1]), tostring(res[2]))
    d = util.stats_delta(s0, c:stats())
    -- the internal mutex's listing, then the leases: no watch, with a watch, after the wake
    assert.are.equal(4, d.lists, util.format_stats(d))
    assert.are.equal(1, d.watch_events, util.format_stats(d))
    assert.is_true(util.wait_until(function() return watch_count(zk) == 0 end, 2, all),
      "a watch was left behind after the grant")
    assert.is_true(res[1]:release())
    assert.is_true(h2:release())
    wait_layout(c, path, {}, 0, all)
    assert(c:delete(path .. "/locks")); assert(c:delete(path .. "/leases"))
  end)

  -- The internal mutex is handed over inside the client: a waiter whose predecessor was this
  -- client's own holder of <path>/locks is the head once that node is deleted, without listing.
  it("waiters of one client queued on the internal mutex take it over without listing again", function()
    local c = connect("handover")
    local path = "/sem/handover"
    local s = c:semaphore(path, 10)
    -- persistent parents: the test server's quick container reaper would otherwise remove an
    -- empty <path>/locks or <path>/leases under the burst and add re-creations and listings
    assert(c:create(path .. "/locks", "", { parents = true }))
    assert(c:create(path .. "/leases", "", { parents = true }))
    local s0 = c:stats()
    local got, K = {}, 10
    for i = 1, K do c:spawn(function() got[i] = pack(s:acquire(10)) end) end
    assert.is_true(util.wait_until(function() return #got == K end, 10, { c }))
    local d = util.stats_delta(s0, c:stats())
    for i = 1, K do
      assert.are.equal("lease", zklock.type(got[i][1]), tostring(got[i][2]))
      assert.is_true(got[i][1]:release())
    end
    wait_layout(c, path, {}, 0, { c })
    print(("\n  [handover] %d acquires: %s"):format(K, util.format_stats(d)))
    -- the K queue entries were listed together (one shared listing), then one listing of the
    -- leases each; K - 1 waited on a node of their own client and took over without listing
    assert.are.equal(K + 1, d.lists, util.format_stats(d))
    assert.are.equal(K - 1, d.handoffs, util.format_stats(d))
    assert.are.equal(2 * K, d.creates, util.format_stats(d))
    assert(c:delete(path .. "/locks")); assert(c:delete(path .. "/leases"))
  end)

  it("never more than max holders: 3 worker processes x 20 coroutines, max 4, hold-interval checker", function()
    local path = "/sem/checker"
    local dir = fw.tmpdir("sem")
    local SECONDS = 6
    local workers = {}
    local t0 = core.now()
    for i = 1, 3 do
      workers[i] = fw.worker("soak", {
        hosts = zk.hosts, session = 10, locks = 1, lock_root = "/sem/checker-unused", sem = path,
        sem_max = 4, cos = 20, seconds = SECONDS, seed = 4242, id = i, acquire_timeout = 30,
        hold_ms = 20, p_sem = 1, log = ("%s/worker%d.log"):format(dir, i),
      })
    end
    for i, w in ipairs(workers) do
      assert.truthy(w:wait_line("^I\t", 20), ("worker %d did not connect: %s"):format(i, w:output()))
    end
    for i, w in ipairs(workers) do
      local left = (t0 + SECONDS * 1000 - core.now()) / 1000
      assert.is_true(w:wait_exit(math.max(0, left) + 40), ("worker %d did not finish: %s"):format(i, w:output()))
    end
    local leases, raised, fails, released_bad, by_worker = {}, {}, {}, {}, {}
    for i, w in ipairs(workers) do
      local log = fw.read_log(w.log)
      assert.is_true(log.done, ("worker %d did not log its end: %s"):format(i, w:output()))
      assert.truthy(log.summary)
      by_worker[i] = #log.leases
      for _, h in ipairs(log.leases) do
        leases[#leases + 1] = h
        if h.release ~= "ok" then released_bad[#released_bad + 1] = h.release end
      end
      for _, line in ipairs(log.raised) do raised[#raised + 1] = line end
      for _, f in ipairs(log.fails) do fails[#fails + 1] = f.kind .. ":" .. f.code end
      assert.are.equal(log.summary.acquired, #log.leases)
      assert.are.equal(0, #log.holds) -- p_sem = 1: the workers took leases only
    end
    assert.are.same({}, raised)
    assert.are.same({}, fails)
    assert.are.same({}, released_bad)
    for i = 1, 3 do assert.is_true(by_worker[i] >= 20, ("worker %d held only %d leases"):format(i, by_worker[i])) end
    local report = fw.check(leases, 4)
    if os.getenv("ZKLOCK_SPEC_VERBOSE") then
      print(("\n  [sem] leases held per worker: %d %d %d"):format(by_worker[1], by_worker[2], by_worker[3]))
    end
    assert.are.equal(#leases, report.clean)  -- no session trouble: every hold counts
    assert.are.equal(0, report.violations, table.concat(report.examples, "\n"))
    assert.are.equal(4, report.max_overlap[path], "the semaphore was never saturated (or overfilled)")
    -- tokens: every lease has its own czxid
    local seen = {}
    for _, h in ipairs(leases) do
      assert.is_number(h.token)
      assert.is_nil(seen[h.token], "two leases with one token")
      seen[h.token] = true
    end
    local c = connect("sem-observer")
    wait_layout(c, path, {}, 0, { c }, 5)
  end)

  it("the checker used above does see a fifth holder (self-test)", function()
    local holds = {}
    for i = 1, 4 do holds[i] = { key = "s", owner = i, start = 0, finish = 10 } end
    assert.are.equal(0, fw.check(holds, 4).violations)
    holds[5] = { key = "s", owner = 5, start = 9, finish = 12 }
    assert.are.equal(1, fw.check(holds, 4).violations)
    holds[5].start = 10
    assert.are.equal(0, fw.check(holds, 4).violations)
  end)

  ------------------------------------------------------------------ holder gone

  it("leases of a holder killed with SIGKILL are freed within the session timeout", function()
    local SESSION = 2
    local path = "/sem/killed"
    local dir = fw.tmpdir("lease")
    local wk = fw.worker("lease", { hosts = zk.hosts, path = path, max = 2, qty = 2, session = SESSION,
                                    identity = "doomed", timeout = 10, hold = 60, log = dir .. "/lease.log" })
    local line = wk:wait_line("^acquired ", 20)
    assert.truthy(line, "the worker did not get its leases: " .. table.concat(wk:lines(), " | ") .. wk:output())
    local wnodes = {}
    for n in line:match("^acquired %S+ (%S+)$"):gmatch("[^,]+") do wnodes[#wnodes + 1] = util.basename(n) end
    assert.are.equal(2, #wnodes)
    local c = connect("survivor")
    local sem = c:semaphore(path, 2)
    local parts = assert(sem:participants())
    assert.are.equal(2, #parts)
    for _, p in ipairs(parts) do assert.are.equal("doomed", p.data) end
    assert_code("ETIMEDOUT", pack(sem:acquire(0)), "a lease while the worker holds both")
    local res, granted_at, seen_at_grant
    c:spawn(function()
      local r = pack(sem:acquire(SESSION * 5))
      granted_at = util.now()
      seen_at_grant = assert(c:children(path .. "/leases"))
      res = r
    end)
    assert.is_true(util.wait_until(function() return #leases_of(c, path) == 3 end, 3, { c }))
    local killed_at = util.now()
    wk:signal("KILL")
    assert.is_true(wk:wait_exit(5))
    assert.is_true(util.wait_until(function() return res ~= nil end, SESSION * 4, { c }),
      "no lease was freed after the holder was killed")
    local lease = res[1]
    assert.are.equal("lease", zklock.type(lease), tostring(res[2]))
    local dt = granted_at - killed_at
    if os.getenv("ZKLOCK_SPEC_VERBOSE") then
      print(("\n  [sem] leases of the killed holder freed after %.2f s (session %d s)"):format(dt, SESSION))
    end
    assert.is_true(dt <= SESSION + 1.5,
      ("the leases were freed %.2f s after kill -9 (session %d s)"):format(dt, SESSION))
    -- the grant came only once the dead holder's leases were gone
    for _, n in ipairs(seen_at_grant) do
      assert.are_not.equal(wnodes[1], n)
      assert.are_not.equal(wnodes[2], n)
    end
    assert.are.same({ util.basename(lease:node()) }, leases_of(c, path))
    assert.is_true(lease:release())
    wait_layout(c, path, {}, 0, { c })
  end)
end)
