-- The lease semaphore (Curator InterProcessSemaphoreV2) and the semaphore mutex (Curator
-- InterProcessSemaphoreMutex) against a real ZooKeeper: the shared server of spec/support/fixture.lua
-- (clean at each describe's start). Runs under Lua 5.4 and LuaJIT (tests tagged #lua54 are 5.4 only).
-- This file: give-up paths leave nothing, acquire_many, participants, release, <close>, the semaphore mutex, bad input.
--   busted --lua=lua5.4 spec/51-semaphore-cleanup_spec.lua
--   busted --lua=luajit --run=luajit spec/51-semaphore-cleanup_spec.lua
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

local THIS_FILE = debug.getinfo(1, "S").short_src

-- Raise-check: fn must raise, and the message must contain every word. fn is called from a frame
-- of this file (not a tail call), so a message that points at its caller names this file.
local function assert_raises(words, fn, ...)
  local msg = util.error_of(function(...)
    local r = fn(...)
    return r
  end, ...)
  return util.assert_words(msg, words)
end

describe("semaphore: giving up, acquire_many, release, semaphore mutex", function()
  local zk
  local fx = fixture.server({}, { each = true, workers = true }, function(s) zk = s end)
  local connect = fx.connect

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
        for i in ipairs(leases) do
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
    assert_raises({ "bad argument #3 to 'semaphore'", "unknown option 'bogus'" },
      c.semaphore, c, "/sem/bad", 2, { bogus = 1 })
    assert_raises({ "bad argument #1 to 'semaphore_mutex'", "lock path" }, c.semaphore_mutex, c, "")
    assert_raises({ "bad argument #2 to 'semaphore_mutex'", "unknown option 'max'" },
      c.semaphore_mutex, c, "/sem/bad", { max = 2 })

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
