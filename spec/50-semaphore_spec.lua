-- The lease semaphore (Curator InterProcessSemaphoreV2) and the semaphore mutex (Curator
-- InterProcessSemaphoreMutex) against real ZooKeeper servers: one server per describe block,
-- stopped in teardown. Runs under Lua 5.4 and LuaJIT (tests tagged #lua54 are 5.4 only).
--   busted --lua=lua5.4 spec/50-semaphore_spec.lua
--   busted --lua=luajit --run=luajit spec/50-semaphore_spec.lua
--
-- Test catalogue: SE-01/SE-02 (limits), SE-03/HE-01 (checker over many holders), SE-07 (holder
-- gone), SE-11/TO-01/TO-03/TO-04 (give-up paths leave nothing), MX-04 (participants), RE-04
-- (semaphore mutex is not reentrant), RL-03 (double release).
local zklock = require("zklock")
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")

local THIS_FILE = debug.getinfo(1, "S").short_src

local UUID = "%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x"
local SEQ10 = ("%d"):rep(10)
local LEASE_NODE = "^_c_" .. UUID .. "%-lease%-" .. SEQ10 .. "$"

local pack, assert_code = util.pack, util.assert_code

-- Raise-check: fn must raise, and the message must contain every word. fn is called from a frame
-- of this file (not a tail call), so a message that points at its caller names this file.
local function assert_raises(words, fn, ...)
  local msg = util.error_of(function(...)
    local r = fn(...)
    return r
  end, ...)
  return util.assert_words(msg, words)
end

-- Watches of every kind on the server (mntr counts child watches too; wchp shows data watches only).
local function watch_count(zk) return util.mntr(zk, "zk_watch_count") end

-- Data watches on paths under `prefix` (from wchp).
local function data_watches_under(zk, prefix)
  local n = 0
  for p, s in pairs(util.watches_by_path(zk)) do
    if p:sub(1, #prefix) == prefix then n = n + #s end
  end
  return n
end

local function leases_of(c, path) return util.children(c, path .. "/leases") end
local function locks_of(c, path) return util.children(c, path .. "/locks") end

-- Wait until <path>/leases holds exactly `names` (a list, any order) and <path>/locks exactly
-- `nlocks` children.
local function wait_layout(c, path, names, nlocks, clients, timeout)
  local want = {}
  for _, n in ipairs(names) do want[n] = true end
  local got_l, got_m
  local ok = util.wait_until(function()
    got_l, got_m = leases_of(c, path), locks_of(c, path)
    if #got_l ~= #names or #got_m ~= nlocks then return false end
    for _, n in ipairs(got_l) do if not want[n] then return false end end
    return true
  end, timeout or 2, clients)
  assert(ok, ("%s: leases {%s} locks {%s}, expected leases {%s} and %d lock node(s)"):format(path,
    table.concat(got_l, " "), table.concat(got_m, " "), table.concat(names, " "), nlocks))
end

describe("semaphore", function()
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() util.close_all() fw.stop_all() if zk then zk:stop() end end)
  after_each(util.close_all)

  local function connect(identity, opts)
    opts = opts or {}
    opts.identity = identity
    return util.connect(zk.hosts, opts)
  end

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
  it("a free lease costs 6 requests per acquire+release and leaves no watch; a stale 'room' hint still waits and wakes", function()
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
    assert.is_true(total - known <= 2, ("%d requests the client did not count (a ping of each client at most expected): "
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
    assert.is_true(dt <= SESSION + 1.5, ("the leases were freed %.2f s after kill -9 (session %d s)"):format(dt, SESSION))
    -- the grant came only once the dead holder's leases were gone
    for _, n in ipairs(seen_at_grant) do
      assert.are_not.equal(wnodes[1], n)
      assert.are_not.equal(wnodes[2], n)
    end
    assert.are.same({ util.basename(lease:node()) }, leases_of(c, path))
    assert.is_true(lease:release())
    wait_layout(c, path, {}, 0, { c })
  end)

  ------------------------------------------------------------------ giving up leaves nothing

  it("timeout, try-once and cancel leave no lease node and no internal-mutex node", function()
    local a, b, c3 = connect("gu-a"), connect("gu-b"), connect("gu-c")
    local all = { a, b, c3 }
    local path = "/sem/giveup"
    local sa, sb, sc = a:semaphore(path, 1), b:semaphore(path, 1), c3:semaphore(path, 1)
    local held = assert(sa:acquire(5))
    local hname = util.basename(held:node())

    -- timed out while holding the internal mutex and counting (its lease exists meanwhile)
    local t0 = util.now()
    local res = pack(sb:acquire(0.3))
    local dt = util.now() - t0
    assert_code("ETIMEDOUT", res, "acquire(0.3)")
    assert.truthy(util.has_words(res[2], path, "0.3"), res[2])
    assert.is_true(dt >= 0.298 and dt < 2, ("gave up after %.3f s"):format(dt))
    wait_layout(a, path, { hname }, 0, all)

    -- try-once
    res = pack(sb:acquire(0))
    assert_code("ETIMEDOUT", res, "acquire(0)")
    assert.truthy(util.has_words(res[2], path, "no free lease"), res[2])
    wait_layout(a, path, { hname }, 0, all)
    assert_code("ETIMEDOUT", pack(sb:acquire_many(1, 0.1)), "acquire_many(1, 0.1)")
    wait_layout(a, path, { hname }, 0, all)

    -- cancelled while counting: B holds the internal mutex; C waits for that mutex and times out
    assert.are.equal(0, sb:cancel())
    local bres
    b:spawn(function() bres = pack(sb:acquire(20)) end)
    assert.is_true(util.wait_until(function() return #leases_of(a, path) == 2 and #locks_of(a, path) == 1 end,
      3, all))
    local bmutex = locks_of(a, path)[1]
    local bname
    for _, n in ipairs(leases_of(a, path)) do if n ~= hname then bname = n end end
    assert.matches(LEASE_NODE, bname)
    local cres = pack(sc:acquire(0.3))
    assert_code("ETIMEDOUT", cres, "acquire(0.3) behind the internal mutex")
    wait_layout(a, path, { hname, bname }, 1, all)     -- C made no lease; its mutex node is gone
    assert.are.same({ bmutex }, locks_of(a, path))
    -- watches: B (the head) watches the leases (a children watch); C's data watch on B's mutex
    -- node went with C's timeout
    assert.is_true(util.wait_until(function()
      return watch_count(zk) == 1 and data_watches_under(zk, "/") == 0
    end, 2, all), ("stale watches: %d in all, data watches on %s"):format(watch_count(zk),
      table.concat(util.watched_paths(zk), " ")))
    local t1 = util.now()
    assert.are.equal(1, sb:cancel())
    assert.is_true(util.wait_until(function() return bres ~= nil end, 2, all))
    assert.is_true(util.now() - t1 < 1)
    assert_code("ECANCELED", bres, "cancelled acquire")
    wait_layout(a, path, { hname }, 0, all)
    assert.is_true(util.wait_until(function() return watch_count(zk) == 0 end, 2, all),
      "the cancelled waiter's children watch on the leases was left behind")

    -- and the semaphore still works: the next acquire after the holder's release succeeds at once
    assert.is_true(held:release())
    local lb = assert(sb:acquire(2))
    assert.are.same({ util.basename(lb:node()) }, leases_of(a, path))
    assert.is_true(lb:release())
    wait_layout(a, path, {}, 0, all)
  end)

  it("coroutine.close on a coroutine waiting in acquire removes its lease and mutex nodes #lua54", function()
    local a, b = connect("cc-a"), connect("cc-b")
    local path = "/sem/coclose"
    local held = assert(a:semaphore(path, 1):acquire(5))
    local sb = b:semaphore(path, 1)
    local returned = false
    local co = b:spawn(function() sb:acquire(20); returned = true end)
    assert.is_true(util.wait_until(function() return #leases_of(a, path) == 2 and #locks_of(a, path) == 1 end,
      3, { a, b }))
    assert.is_true(coroutine.close(co))
    wait_layout(a, path, { util.basename(held:node()) }, 0, { a, b }, 1)
    assert.is_false(returned)
    assert.is_true(held:release())
  end)

  ------------------------------------------------------------------ acquire_many

  it("acquire_many is all or none within its deadline", function()
    local a, b = connect("many-a"), connect("many-b")
    local all = { a, b }
    local path = "/sem/many"
    local sa, sb = a:semaphore(path, 4), b:semaphore(path, 4)
    local two = assert(sa:acquire_many(2, 5))
    assert.are.equal(2, #two)
    local anames = { util.basename(two[1]:node()), util.basename(two[2]:node()) }
    -- 3 more do not fit: none is taken, nothing is left behind
    local t0 = util.now()
    local res = pack(sb:acquire_many(3, 0.4))
    assert.is_true(util.now() - t0 >= 0.398)
    assert_code("ETIMEDOUT", res, "acquire_many(3) with 2 of 4 free")
    assert.truthy(util.has_words(res[2], "3 lease(s)", path), res[2])
    wait_layout(a, path, anames, 0, all)
    -- while it waits, its three leases are counted with the two held (5 > 4): it cannot take 2 of 3
    local many
    b:spawn(function() many = pack(sb:acquire_many(3, 10)) end)
    assert.is_true(util.wait_until(function() return #leases_of(a, path) == 5 end, 3, all))
    util.drive(all, 0.2)
    assert.is_nil(many)
    local g0 = util.now()
    assert.is_true(two[1]:release())
    assert.is_true(util.wait_until(function() return many ~= nil end, 5, all))
    assert.is_true(util.now() - g0 < 2)
    local got = many[1]
    assert.is_table(got, tostring(many[2]))
    assert.are.equal(3, #got)
    local nodes, tokens = {}, {}
    for i, l in ipairs(got) do
      assert.are.equal("lease", zklock.type(l))
      assert.is_true(l:is_held())
      nodes[i] = util.basename(l:node())
      assert.matches(LEASE_NODE, nodes[i])
      assert.is_nil(tokens[l:token()])
      tokens[l:token()] = true
    end
    wait_layout(a, path, { anames[2], nodes[1], nodes[2], nodes[3] }, 0, all)
    -- each lease is released on its own, by any coroutine
    assert.is_true(got[2]:release())
    wait_layout(a, path, { anames[2], nodes[1], nodes[3] }, 0, all)
    local rel
    b:spawn(function() rel = { got[1]:release(), got[3]:release() } end)
    assert.is_true(b:run(5))
    assert.are.same({ true, true }, rel)
    assert.is_true(two[2]:release())
    wait_layout(a, path, {}, 0, all)
  end)

  it("two clients' acquire_many(3) of 4 leases never deadlock and never overlap", function()
    local a, b = connect("dl-a"), connect("dl-b")
    local path = "/sem/nodeadlock"
    local holds, counts = {}, { a = 0, b = 0 }
    local ROUNDS = 6
    local function worker(c, tag, k)
      local sem = c:semaphore(path, 4)
      local r = fw.rng(k)
      for round = 1, ROUNDS do
        local leases = assert(sem:acquire_many(3, 15))
        assert(#leases == 3, "acquire_many(3) returned " .. #leases .. " leases")
        local start = core.now()
        c:sleep(r() * 0.01)
        local finish = core.now()
        for i, l in ipairs(leases) do
          holds[#holds + 1] = { key = path, owner = ("%s/%d/%d/%d"):format(tag, k, round, i), start = start,
                                finish = finish }
        end
        counts[tag] = counts[tag] + 1
        for _, l in ipairs(leases) do assert(l:release()) end
      end
    end
    for k = 1, 2 do
      a:spawn(worker, a, "a", k)
      b:spawn(worker, b, "b", 10 + k)
    end
    assert.is_true(zklock.run({ a, b }, 40), "the acquire_many calls did not all finish")
    assert.are.same({ a = 2 * ROUNDS, b = 2 * ROUNDS }, counts)
    local report = fw.check(holds, 4)
    assert.are.equal(0, report.violations, table.concat(report.examples, "\n"))
    assert.are.equal(3, report.max_overlap[path])
    wait_layout(a, path, {}, 0, { a, b })
  end)

  ------------------------------------------------------------------ participants, leases

  it("participants() lists the leases with each holder's identity, by sequence", function()
    local cs = { connect("p1"), connect("p2"), connect("p3"), connect("p4") }
    local path = "/sem/participants"
    local sems, leases = {}, {}
    for i, c in ipairs(cs) do sems[i] = c:semaphore(path, 3) end
    assert.are.same({}, sems[1]:participants())      -- nothing there yet
    for i = 1, 3 do leases[i] = assert(sems[i]:acquire(5)) end
    for _, viewer in ipairs({ sems[1], sems[4] }) do
      local p = assert(viewer:participants())
      assert.are.equal(3, #p)
      for i, e in ipairs(p) do
        assert.are.equal("p" .. i, e.data)
        assert.are.equal(leases[i]:node(), e.path)
        assert.are.equal(path .. "/leases/" .. e.node, e.path)
        assert.matches(LEASE_NODE, e.node)
        assert.are.equal(util.seq(e.node), e.sequence)
        if i > 1 then assert.is_true(e.sequence > p[i - 1].sequence) end
      end
    end
    -- a waiter's lease is listed too while it is being counted (as Curator's getParticipantNodes)
    local res
    cs[4]:spawn(function() res = pack(sems[4]:acquire(10)) end)
    assert.is_true(util.wait_until(function() return #leases_of(cs[1], path) == 4 end, 3, cs))
    local p = assert(sems[1]:participants())
    assert.are.same({ "p1", "p2", "p3", "p4" }, { p[1].data, p[2].data, p[3].data, p[4].data })
    assert.are.equal(1, sems[4]:cancel())
    assert.is_true(util.wait_until(function() return res ~= nil end, 2, cs))
    assert_code("ECANCELED", res, "cancelled waiter")
    for i = 1, 3 do assert.is_true(leases[i]:release()) end
    assert.is_true(util.wait_until(function() return #assert(sems[1]:participants()) == 0 end, 2, cs))
  end)

  it("lease:release() twice raises and sends nothing; a released lease reports not held", function()
    local c = connect("twice")
    local path = "/sem/twice"
    local lease = assert(c:semaphore(path, 2):acquire(5))
    local node = lease:node()
    assert.is_true(lease:release())
    assert.is_false(c:exists(node))
    assert.is_false(lease:is_held())
    assert.is_nil(lease:token())
    local before = c:stats()
    assert_raises({ "already released", node, path }, lease.release, lease)
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(0, d.deletes + d.creates + d.lists, util.format_stats(d))
  end)

  it("a <close> lease is returned at scope exit, also on error #lua54", function()
    local c = connect("guard")
    local path = "/sem/guard"
    local sem = c:semaphore(path, 1)
    local chunk = assert(load([[
      local sem = ...
      local r = {}
      r.ok, r.err = pcall(function()
        local lease <close> = assert(sem:acquire(5))
        r.node = lease:node()
        error("boom")
      end)
      return r
    ]], "=guard"))
    local r = chunk(sem)
    assert.is_false(r.ok)
    assert.matches("boom", r.err)
    assert.is_string(r.node)
    assert.is_false(c:exists(r.node))
    assert.is_true(sem:acquire(0):release())
  end)

  ------------------------------------------------------------------ semaphore mutex

  it("semaphore mutex: not reentrant (the holder's second acquire times out); any coroutine may release", function()
    local a, b = connect("sm-a"), connect("sm-b")
    local path = "/sem/mutex"
    local sm = a:semaphore_mutex(path)
    assert.are.equal("semaphore mutex", zklock.type(sm))
    assert.is_false(sm:is_held())
    assert.are.equal(sm, sm:acquire(5))
    assert.is_true(sm:is_held())
    local node, token = sm:node(), sm:token()
    assert.matches(LEASE_NODE, util.basename(node))
    assert.are.equal(path .. "/leases/" .. util.basename(node), node)
    local t0 = util.now()
    local res = pack(sm:acquire(0.3))
    local dt = util.now() - t0
    assert_code("ETIMEDOUT", res, "second acquire by the holder")
    assert.is_true(dt >= 0.298, ("gave up after %.3f s"):format(dt))
    assert_code("ETIMEDOUT", pack(sm:acquire(0)), "second try-once by the holder")
    -- still held once, by the first acquisition, and nothing else left behind
    assert.is_true(sm:is_held())
    assert.are.equal(node, sm:node())
    assert.are.equal(token, sm:token())
    wait_layout(a, path, { util.basename(node) }, 0, { a, b })
    -- another client cannot take it
    local other = b:semaphore_mutex(path)
    assert_code("ETIMEDOUT", pack(other:acquire(0)), "another client while held")
    -- released from another coroutine
    local rel
    a:spawn(function() rel = pack(sm:release()) end)
    assert.is_true(a:run(5))
    assert.is_true(rel[1])
    assert.is_false(sm:is_held())
    assert.is_nil(sm:node())
    assert.is_false(a:exists(node))
    assert_raises({ "semaphore mutex", path, "not held" }, sm.release, sm)
    assert.are.equal(other, other:acquire(0))
    assert.is_true(other:release())
    wait_layout(a, path, {}, 0, { a, b })
  end)

  ------------------------------------------------------------------ bad input

  it("rejects bad input with errors that name the argument and point at the caller", function()
    local c = connect("bad")
    for _, v in ipairs({ 0, -1, 1.5, "4", math.huge, 0 / 0, 2 ^ 31, true }) do
      local msg = assert_raises({ "bad argument #2 to 'semaphore'", "max_leases", "integer >= 1" },
        c.semaphore, c, "/sem/bad", v)
      assert.truthy(msg:find(THIS_FILE, 1, true), "the error does not point at the caller: " .. msg)
    end
    assert_raises({ "bad argument #2 to 'semaphore'", "max_leases", "nil" }, c.semaphore, c, "/sem/bad")
    assert_raises({ "bad argument #1 to 'semaphore'", "lock path" }, c.semaphore, c, "no-slash", 2)
    assert_raises({ "bad argument #1 to 'semaphore'", "lock path" }, c.semaphore, c, 42, 2)
    assert_raises({ "bad argument #3 to 'semaphore'", "unknown option 'bogus'" }, c.semaphore, c, "/sem/bad", 2, { bogus = 1 })
    assert_raises({ "bad argument #1 to 'semaphore_mutex'", "lock path" }, c.semaphore_mutex, c, "")
    assert_raises({ "bad argument #2 to 'semaphore_mutex'", "unknown option 'max'" }, c.semaphore_mutex, c, "/sem/bad", { max = 2 })

    local sem = c:semaphore("/sem/bad", 4)
    for _, v in ipairs({ 0, -1, 1.5, 5, "2", 0 / 0 }) do
      local msg = assert_raises({ "bad argument #1 to 'acquire_many'", "count", "from 1 to 4 (max_leases)" },
        sem.acquire_many, sem, v, 1)
      assert.truthy(msg:find(THIS_FILE, 1, true), "the error does not point at the caller: " .. msg)
    end
    assert_raises({ "bad argument #1 to 'acquire_many'", "count", "nil" }, sem.acquire_many, sem)
    assert_raises({ "bad argument #2 to 'acquire_many'", "timeout" }, sem.acquire_many, sem, 2, -1)
    assert_raises({ "bad argument #1 to 'acquire'", "timeout" }, sem.acquire, sem, -1)
    assert_raises({ "bad argument #1 to 'acquire'", "timeout" }, sem.acquire, sem, "5")
    assert_raises({ "bad argument #2 to 'acquire'", "retry" }, sem.acquire, sem, 1, { retry = 5 })
    assert_raises({ "bad argument #1 to 'on_lost'", "function" }, sem.on_lost, sem, 42)
    local sm = c:semaphore_mutex("/sem/bad-mutex")
    assert_raises({ "bad argument #1 to 'acquire'", "timeout" }, sm.acquire, sm, -1)
    -- nothing was created by any of this
    assert.is_false(c:exists("/sem/bad"))
    assert.is_false(c:exists("/sem/bad-mutex"))
  end)
end)
