-- The mutex (Curator InterProcessMutex) against real ZooKeeper servers: the many-waiters block
-- has a server of its own (it reads mntr maxima), the other the shared one (spec/support/fixture.lua).
-- Runs under Lua 5.4 and LuaJIT (tests tagged #lua54 are 5.4 only).
-- This file: many waiters (no herd, no stale watches) and 1,000 coroutines in one process.
--   busted --lua=lua5.4 spec/13-mutex-scale_spec.lua
--   busted --lua=luajit --run=luajit spec/13-mutex-scale_spec.lua
local zklock = require("zklock")
local util = require("support.util")
local fixture = require("support.fixture")
local H = require("support.mutex")

local unpack_, pack, assert_code = H.unpack_, H.pack, H.assert_code

describe("mutex under many waiters", function()
  local zk
  fixture.server({}, { each = true, own = "the mntr watch maxima below count this describe only" },
    function(s) zk = s end)

  it("no herd: 200 waiters over 10 clients, every release wakes exactly one", function()
    local path = "/herd/lock"
    local h = util.connect(zk.hosts, { identity = "holder" })
    local hm = h:mutex(path)
    assert(hm:acquire(5))
    local clients = {}
    for i = 1, 10 do clients[i] = util.connect(zk.hosts, { identity = "c" .. i }) end
    local all = { h }
    for _, c in ipairs(clients) do all[#all + 1] = c end
    local before = util.stats_sum(clients)
    local done, in_lock, overlap = 0, 0, false
    for _, c in ipairs(clients) do
      local m = c:mutex(path)
      for _ = 1, 20 do
        c:spawn(function()
          assert(m:acquire(60))
          in_lock = in_lock + 1
          if in_lock > 1 then overlap = true end
          in_lock = in_lock - 1
          assert(m:release())
          done = done + 1
        end)
      end
    end
    assert.is_true(util.wait_until(function() return #util.children(h, path) == 201 end, 30, all),
      "the 200 waiters did not all queue")
    assert.are.equal(0, util.mntr(zk, "zk_max_node_children_watch_count"))
    assert.is_true(util.mntr(zk, "zk_max_node_deleted_watch_count") <= 1)
    local t0 = util.now()
    assert.is_true(hm:release())
    assert.is_true(zklock.run(clients, 60))
    local handoff_time = util.now() - t0
    assert.are.equal(200, done)
    assert.is_false(overlap)

    -- server side: each deletion woke at most one watcher, nobody watched children
    local m = assert(zk:mntr())
    assert.is_true(m.zk_max_node_deleted_watch_count <= 1,
      "a deletion woke " .. tostring(m.zk_max_node_deleted_watch_count) .. " watchers")
    assert.are.equal(0, m.zk_max_node_children_watch_count)

    -- client side: one create and one watch (getData) per waiter; a woken waiter walks down the
    -- listing it kept (exists() probes, without a watch, of the nodes below its own that it has
    -- not seen go and that lie above its own client's last grant) or lists again when that is
    -- cheaper. Its predecessor may have left by timeout or cancel while an earlier node still
    -- holds, so it never skips a node it has not seen go.
    local d = util.stats_delta(before, util.stats_sum(clients))
    local report = util.format_stats(d) .. (" handoff chain %.2f s"):format(handoff_time)
    assert.are.equal(200, d.acquired, report)
    assert.are.equal(200, d.creates, report)
    -- a walk with a single node left watches it at once (getData, the same round trip as a
    -- probe); that node is usually gone too, and then the lock is ours: at most one more getData
    -- per wakeup, and a few probes
    assert.is_true(d.gets <= 200 + d.handoffs + 5, report)
    assert.is_true(d.exists <= 16 * d.handoffs, report) -- seen: about 7 per handoff
    assert.is_true(d.handoffs >= 1, report)
    assert.is_true(d.lists <= 200 + (200 - d.handoffs) + 5, report)
    assert.is_true(d.watch_events <= 200 + 5, report)

    -- nothing left: no children, no watches
    assert.are.same({}, util.children(h, path))
    assert.is_true(util.wait_until(function() return #util.watched_paths(zk) == 0 end, 2, all),
      "watches left: " .. table.concat(util.watched_paths(zk), " "))
    assert.are.equal(0, util.mntr(zk, "zk_watch_count"))
  end)

  it("waiters that timed out leave no watch behind, so a release wakes no stale session", function()
    -- (test catalogue TO-02 / NC-03) Runs after the herd test: the server's max deleted-watch
    -- count is 1 at this point.
    local path = "/herd/stale"
    local h = util.connect(zk.hosts, { identity = "holder" })
    local hm = h:mutex(path)
    assert(hm:acquire(5))
    local holder_node = hm:node()
    local quitters = {}
    for i = 1, 4 do
      quitters[i] = util.connect(zk.hosts, { identity = "q" .. i })
      assert_code("ETIMEDOUT", pack(quitters[i]:mutex(path):acquire(0.1)), "quitter " .. i)
    end
    local all = { h, unpack_(quitters) }
    assert.is_true(util.wait_until(function() return #util.children(h, path) == 1 end, 1, all))
    local watchers = util.watches_by_path(zk)[holder_node] or {}
    assert.is_true(hm:release())
    util.drive(all, 0.2)
    local max = util.mntr(zk, "zk_max_node_deleted_watch_count")
    assert.are.equal(0, #watchers, ("%d sessions still watch the holder's node after their acquire(0.1) "
      .. "timed out"):format(#watchers))
    assert.is_true(max <= 1, ("the holder's deletion woke %d watchers (zk_max_node_deleted_watch_count)")
      :format(max))
  end)
end)

describe("mutex with many coroutines in one process", function()
  local zk
  fixture.server({}, {}, function(s) zk = s end)

  it("1,000 coroutines on one client share 10 locks: exact counters, never two holders", function()
    local c = util.connect(zk.hosts, { identity = "many" })
    local locks, counters, inside, max_inside = {}, {}, {}, {}
    for k = 1, 10 do
      locks[k] = c:mutex("/many/l" .. k)
      counters[k], inside[k], max_inside[k] = 0, 0, 0
    end
    local finished = 0
    local before = c:stats()
    for i = 1, 1000 do
      local k = i % 10 + 1
      local m = locks[k]
      c:spawn(function()
        assert(m:acquire(60))
        inside[k] = inside[k] + 1
        if inside[k] > max_inside[k] then max_inside[k] = inside[k] end
        local v = counters[k]       -- read, yield, write: a second holder would lose an update
        c:sleep(0)
        counters[k] = v + 1
        inside[k] = inside[k] - 1
        assert(m:release())
        finished = finished + 1
      end)
    end
    local t0 = util.now()
    assert.is_true(c:run(120))
    local dt = util.now() - t0
    assert.are.equal(1000, finished)
    local total = 0
    for k = 1, 10 do
      assert.are.equal(100, counters[k], "lost updates on lock " .. k)
      assert.are.equal(1, max_inside[k], "two holders at once on lock " .. k)
      total = total + counters[k]
      assert.are.same({}, util.children(c, "/many/l" .. k))
    end
    assert.are.equal(1000, total)
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(1000, d.acquired, util.format_stats(d))
    assert.is_true(dt < 120, ("took %.1f s"):format(dt))
  end)
end)
