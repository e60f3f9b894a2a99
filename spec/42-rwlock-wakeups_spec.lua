-- The read-write lock (Curator InterProcessReadWriteLock) against a real ZooKeeper of its own
-- (spec/support/fixture.lua, o.own: it reads mntr maxima), stopped in teardown. Runs under Lua 5.4 and LuaJIT
-- (tests tagged #lua54 are 5.4 only).
-- This file: a writer's release wakes each waiting reader once, never the queued writer (no herd).
--   busted --lua=lua5.4 spec/42-rwlock-wakeups_spec.lua
--   busted --lua=luajit --run=luajit spec/42-rwlock-wakeups_spec.lua
--
-- Test catalogue: RW-01 (readers share), RW-02/RW-09 (writer excludes; interval checker),
-- RW-03 (upgrade refused), RW-04/RW-05/RW-06 (downgrade), RW-07/RW-08 (FIFO, no writer
-- starvation), RW-10 (participants), RE-01/RE-02 (reentrancy per coroutine), HE-01 (herd).
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")
local fixture = require("support.fixture")
local H = require("support.rwlock")

local WRITE_NODE, check_rw = H.WRITE_NODE, H.check_rw

describe("rwlock wake-ups (no herd)", function()
  local zk

  fixture.server({}, { own = "the mntr maxima below count this test only" }, function(s) zk = s end)

  it("a writer's release wakes each waiting reader once (first earlier writer), never the queued writer", function()
    -- Queue: W (held) <- 30 readers (group A, 3 clients x 10) <- W2 <- 20 readers (group B, 2 x 10).
    -- Documented: a reader watches the first earlier writer, a writer its immediate predecessor.
    -- So W's release wakes all 50 readers once: group A is granted, group B watches W2 (each
    -- walks down the listing it kept to the next earlier writer: no new listing).
    -- Readers' releases wake W2 only; W2's release wakes group B once.
    local path = "/herd/rw"
    local w = util.connect(zk.hosts, { identity = "W" })
    local w2 = util.connect(zk.hosts, { identity = "W2" })
    local ga, gb = {}, {}
    for i = 1, 3 do ga[i] = util.connect(zk.hosts, { identity = "A" .. i }) end
    for i = 1, 2 do gb[i] = util.connect(zk.hosts, { identity = "B" .. i }) end
    local all = { w, w2, ga[1], ga[2], ga[3], gb[1], gb[2] }
    local rww = w:rwlock(path)
    assert(rww.write:acquire(5))
    local wnode = rww.write:node()

    local holds = { A = {}, B = {}, W2 = {} }
    local release = { A = false, B = false }
    local function readers(group, clients)
      for _, c in ipairs(clients) do
        local rw = c:rwlock(path)
        for _ = 1, 10 do
          c:spawn(function()
            assert(rw.read:acquire(60))
            local h = { key = "rw", owner = group, start = core.now() }
            for _ = 1, 2000 do
              if release[group] then break end
              c:sleep(0.01)
            end
            h.finish = core.now()
            local list = holds[group]
            list[#list + 1] = h
            assert(rw.read:release())
          end)
        end
      end
    end
    readers("A", ga)
    assert.is_true(util.wait_until(function() return #util.children(w, path) == 31 end, 10, all))
    local rw2 = w2:rwlock(path)
    local w2node
    w2:spawn(function()
      assert(rw2.write:acquire(60))
      w2node = rw2.write:node()
      local h = { key = "rw", owner = "W2", start = core.now() }
      w2:sleep(0.02)
      h.finish = core.now()
      holds.W2[1] = h
      assert(rw2.write:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(w, path) == 32 end, 5, all))
    local sorted = core.sort(util.children(w, path), core.WRITE)
    local w2name, last_a = sorted[32], sorted[31]
    assert.matches(WRITE_NODE, w2name)
    readers("B", gb)
    assert.is_true(util.wait_until(function() return #util.children(w, path) == 52 end, 10, all))

    -- Server side, once every waiter has its watch: every reader watches the FIRST earlier writer
    -- (Curator's read predicate), so both groups' 5 sessions watch W; W2 watches the last reader
    -- of group A; nothing else is watched.
    local function expect_watches(expected)
      local watches
      local settled = util.wait_until(function()
        watches = util.watches_by_path(zk)
        for p, n in pairs(expected) do
          if not watches[p] or #watches[p] ~= n then return false end
        end
        for p in pairs(watches) do if not expected[p] then return false end end
        return true
      end, 10, all)
      if not settled then
        local got = {}
        for p, s in pairs(watches) do got[#got + 1] = p .. "=" .. #s end
        table.sort(got)
        error("unexpected watches: " .. table.concat(got, " "), 2)
      end
    end
    expect_watches({ [wnode] = 5, [path .. "/" .. last_a] = 1 })
    -- and client side, every waiter has set its watch (one getData each). A client handles one
    -- ZooKeeper reply per process() call, so this can lag behind the server's view.
    assert.is_true(util.wait_until(function()
      return util.stats_sum(ga).gets == 30 and util.stats_sum(gb).gets == 20 and w2:stats().gets == 1
    end, 10, all), "the waiters did not all set their watches")
    util.drive(all, 0.3) -- the getData replies themselves
    assert.are.equal(0, util.mntr(zk, "zk_max_node_children_watch_count"))

    local function sums()
      return { A = util.stats_sum(ga), B = util.stats_sum(gb), W2 = util.stats_sum({ w2 }) }
    end
    local s0 = sums()
    assert.is_true(rww.write:release())
    assert.is_true(util.wait_until(function()
      return #holds.A == 0 and util.stats_sum(ga).acquired - s0.A.acquired == 30
        and util.stats_sum(gb).gets - s0.B.gets == 20
    end, 10, all), "group A was not all granted, or group B did not watch again")
    -- group B re-watches W2 (its first earlier writer now)
    expect_watches({ [path .. "/" .. w2name] = 2, [path .. "/" .. last_a] = 1 })
    util.drive(all, 0.3)
    local s1 = sums()
    local dA, dB, dW2 = util.stats_delta(s0.A, s1.A), util.stats_delta(s0.B, s1.B), util.stats_delta(s0.W2, s1.W2)
    -- each reader of group A: one watch event, granted without a request: the listing it kept
    -- holds no earlier writer but W, which it saw go
    assert.are.equal(30, dA.acquired, util.format_stats(dA))
    assert.are.equal(30, dA.watch_events, util.format_stats(dA))
    assert.are.equal(0, dA.lists, util.format_stats(dA))
    assert.are.equal(0, dA.gets + dA.creates + dA.exists + dA.deletes, util.format_stats(dA))
    -- each reader of group B: one watch event, one getData+watch on W2 (the nearest earlier
    -- writer of its kept listing), no listing; not granted
    assert.are.equal(0, dB.acquired, util.format_stats(dB))
    assert.are.equal(20, dB.watch_events, util.format_stats(dB))
    assert.are.equal(0, dB.lists, util.format_stats(dB))
    assert.are.equal(20, dB.gets, util.format_stats(dB))
    assert.are.equal(0, dB.creates + dB.exists + dB.deletes, util.format_stats(dB))
    -- the queued writer heard nothing
    for _, k in ipairs(util.STAT_KEYS) do
      assert.are.equal(0, dW2[k], "W2: " .. util.format_stats(dW2))
    end
    -- W's deletion woke the 5 reader sessions, and only those
    assert.are.equal(5, util.mntr(zk, "zk_max_node_deleted_watch_count"))
    assert.is_nil(w2node)

    -- group A leaves; W2 goes next; then group B, each reader woken once by W2's release
    release.A = true
    assert.is_true(util.wait_until(function() return holds.W2[1] ~= nil end, 15, all), "W2 never got in")
    assert.is_true(util.wait_until(function() return util.stats_sum(gb).acquired - s1.B.acquired == 20 end,
      10, all), "group B was not all granted")
    util.drive(all, 0.1)
    local dB2 = util.stats_delta(s1.B, util.stats_sum(gb))
    assert.are.equal(20, dB2.acquired, util.format_stats(dB2))
    assert.are.equal(20, dB2.watch_events, util.format_stats(dB2))
    assert.are.equal(0, dB2.lists, util.format_stats(dB2)) -- W and W2 seen gone: no writer left
    local dW2b = util.stats_delta(s1.W2, util.stats_sum({ w2 }))
    -- W2 watches one predecessor at a time: at most one wake-up per group-A reader that left
    assert.is_true(dW2b.watch_events <= 30, util.format_stats(dW2b))
    assert.are.equal(1, dW2b.acquired)
    release.B = true
    assert.is_true(zklock.run(all, 20))
    assert.are.equal(5, util.mntr(zk, "zk_max_node_deleted_watch_count")) -- no later deletion woke more

    -- exclusion over the whole run
    local reads = {}
    for _, g in ipairs({ "A", "B" }) do for _, h in ipairs(holds[g]) do reads[#reads + 1] = h end end
    assert.are.equal(50, #reads)
    local report, max_readers = check_rw(holds.W2, reads)
    assert.are.equal(0, report.violations, table.concat(report.examples, "\n"))
    assert.are.equal(30, max_readers)
    assert.are.same({}, util.children(w, path))
    assert.is_true(util.wait_until(function() return #util.watched_paths(zk) == 0 end, 3, all),
      "watches left: " .. table.concat(util.watched_paths(zk), " "))
  end)
end)
