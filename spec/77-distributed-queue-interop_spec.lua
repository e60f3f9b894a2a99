-- Curator's DistributedQueue in lock-safe mode, interop on one real ZooKeeper server: Curator 5.4
-- (spec/support/peers/DQueuePeer.java) and zklock (client:queue(path, { format = "curator",
-- lock_path = }), spec/support/peers/queue_worker.lua) produce and consume on one queue path and
-- one lock path, single and multi-item messages, while consumers of both are killed with kill -9
-- in the middle of processing. The checker over every process's log and the done nodes:
--   * lost: an item put that no consumer finished. None allowed: an item leaves the queue only
--     after its consumer finished it (a killed consumer's item stays for another one).
--   * consumed twice: zklock consumers commit "done" (a node <done>/<item>) in the same multi
--     that removes the item, guarded by their lock node, so no item is done twice by zklock, and
--     a zklock C line means the item was removed. A Curator consumer finishes an item and then
--     deletes it in a second request: one killed between the two leaves a finished item in the
--     queue, and another consumer finishes it again. That is Curator's at-least-once gap, and
--     the only repetition allowed: the earlier finish must be among the last items (one
--     message, up to 3) the killed Curator consumer finished.
--   busted --lua=lua5.4 spec/77-distributed-queue-interop_spec.lua
local testing = require("zklock.testing")
local util = require("support.util")
local qp = require("support.queue_peers")

describe("distributed queue interop with Curator's DistributedQueue, lock-safe #interop", function()
  local zk, c

  setup(function()
    zk = testing.server{}
    c = util.connect(zk.hosts)
  end)

  teardown(function()
    qp.stop_all()
    util.close_all()
    if zk then zk:stop() end
  end)

  it("Curator and zklock producing and consuming, consumers killed mid-processing: none lost, none twice", function()
    local path, locks, done = "/idq/q", "/idq/locks", "/idq/done"
    local PER = 150 -- items per producer
    local WORK_MS = 100 -- each consumer's processing of an item (the kills land inside it)
    assert(c:create(path, "", { parents = true }))
    assert(c:create(locks, ""))
    assert(c:create(done, ""))
    local stop = os.tmpname()
    os.remove(stop)
    local t0 = util.now()
    local procs, consumers = {}, {}
    local function trace(fmt, ...) -- ZKL_QUEUE_TRACE=1: print the run's milestones
      if os.getenv("ZKL_QUEUE_TRACE") then print(("%.1f s: " .. fmt):format(util.now() - t0, ...)) end
    end
    local function consumer(kind)
      local p
      if kind == "zklock" then
        p = qp.lua("consume", zk.hosts, path, { format = "curator", lock = locks, done = done, cos = 1, poll = 1,
                                                stop = stop, work_ms = WORK_MS, session = 2 })
      else
        p = qp.dqueue("consume", zk.hosts, path, { idle = 2, stop = stop, lock_path = locks, work_ms = WORK_MS })
      end
      p.kind = kind
      procs[#procs + 1], consumers[#consumers + 1] = p, p
      return p
    end
    local victims = { consumer("curator"), consumer("zklock"), consumer("curator"), consumer("zklock") }
    consumer("curator")
    consumer("zklock")
    assert(util.wait_until(function()
      for _, p in ipairs(consumers) do if not p:log().ready then return false end end
      return true
    end, 120, { c }), "consumers did not connect")
    trace("consumers ready")
    local producers = {
      qp.lua("produce", zk.hosts, path, { format = "curator", count = PER, prefix = "zkl", cos = 2, multi = 3 }),
      qp.dqueue("produce", zk.hosts, path, { count = PER, prefix = "cur", multi = 3 }),
    }
    for _, p in ipairs(producers) do procs[#procs + 1] = p end
    local function started()
      local n = 0
      for _, p in ipairs(consumers) do n = n + #p:log().starts end
      return n
    end
    -- kill each victim while it is inside its processing (its last S has no C yet), at 1/10 .. 4/10
    local kills, mid = 0, 0
    for i, v in ipairs(victims) do
      local goal = i * 2 * PER / 10
      local deadline = util.now() + 120
      while started() < goal do
        assert(util.now() < deadline, ("only %d items started (waiting for %d)"):format(started(), goal))
        util.drive({ c }, 0.02)
      end
      local until_t = util.now() + 10
      local function inside()
        local t = v:log()
        return #t.starts > #t.commits
      end
      local was = inside()
      while not was and util.now() < until_t and v:alive() do
        util.drive({ c }, 0.002)
        was = inside()
      end
      local tl = v:log()
      assert(v:kill())
      trace("killed %s: %d started, %d finished, inside %s", v.name, #tl.starts, #tl.commits, tostring(was))
      if was then mid = mid + 1 end
      kills = kills + 1
      consumer(v.kind)
    end
    for _, p in ipairs(producers) do
      assert(util.wait_until(function() return not p:alive() end, 120, { c }), p.name .. ": " .. p:output())
      assert(p:log().done, p.name .. " failed: " .. table.concat(p:log().errors, "; "))
    end
    trace("producers done, %d started", started())
    assert(io.open(stop, "w")):close()
    for _, p in ipairs(consumers) do
      if not p.killed then
        assert(util.wait_until(function() return not p:alive() end, 120, { c }), p.name .. ": " .. p:output())
        assert(p:log().done, p.name .. " failed: " .. table.concat(p:log().errors, "; ") .. p:output())
      end
    end
    os.remove(stop)
    trace("consumers done")
    -- the consumers end once a take finds nothing: an item whose killed consumer's session has not
    -- expired yet is still locked then. Drain those here (lock-safe too, as soon as the dead
    -- session's lock node goes); each must be an item a killed consumer had started.
    local q = c:queue(path, { format = "curator", lock_path = locks })
    local drained = {}
    local deadline = util.now() + 60
    while q:size() > 0 do
      assert(util.now() < deadline, "items left in the queue: " .. table.concat(util.children(c, path), " "))
      local items = q:take(1, function() end)
      for _, it in ipairs(items or {}) do drained[#drained + 1] = it end
    end
    trace("drained %d", #drained)

    -- the checker
    local put, finished, by_zklock = {}, {}, {}
    local puts, dups, allowed_dups, lost, unknown = 0, {}, 0, {}, {}
    for _, p in ipairs(producers) do
      for _, it in ipairs(p:log().puts) do
        assert(not put[it], "put twice: " .. it)
        put[it], puts = true, puts + 1
      end
    end
    local tail = {} -- item -> true: among the last 3 finished by a killed Curator consumer
    for _, p in ipairs(consumers) do
      local t = p:log()
      for i, it in ipairs(t.commits) do
        finished[it] = (finished[it] or 0) + 1
        if p.kind == "zklock" then
          assert(not by_zklock[it], "zklock finished twice: " .. it)
          by_zklock[it] = true
        elseif p.killed and i > #t.commits - 3 then
          tail[it] = true
        end
      end
    end
    local killed_started = {}
    for _, p in ipairs(consumers) do
      if p.killed then for _, it in ipairs(p:log().starts) do killed_started[it] = true end end
    end
    for _, it in ipairs(drained) do
      assert(killed_started[it], "drained an item no killed consumer had started: " .. it)
      finished[it] = (finished[it] or 0) + 1
    end
    -- zklock's done nodes: exactly the items zklock removed (its C lines; a killed worker may have
    -- committed without logging C: then the done node shows it)
    for _, name in ipairs(util.children(c, done)) do
      if not by_zklock[name] then
        finished[name] = (finished[name] or 0) + 1
        by_zklock[name] = true
      end
    end
    for it, n in pairs(finished) do
      if not put[it] then unknown[#unknown + 1] = it end
      if n > 1 then
        dups[#dups + 1] = it
        if tail[it] and n == 2 then allowed_dups = allowed_dups + 1 end
      end
    end
    for it in pairs(put) do if not finished[it] then lost[#lost + 1] = it end end
    table.sort(lost)
    table.sort(dups)
    local per = {}
    for _, p in ipairs(consumers) do
      per[#per + 1] = ("%s%s=%d"):format(p.kind, p.killed and "(killed)" or "", #p:log().commits)
    end
    print(("\ndistributed queue interop (%.1f s): %d items put, %d consumers (%s), %d killed (%d mid-processing),"
      .. " lost %d, finished twice %d (Curator's kill gap: %d), zklock done nodes %d, drained after the run %d")
      :format(util.now() - t0, puts, #consumers, table.concat(per, " "), kills, mid, #lost, #dups, allowed_dups,
        #util.children(c, done), #drained))
    assert.are.equal(2 * PER, puts)
    assert.are.equal(4, kills)
    assert.is_true(mid >= 2, "fewer than 2 kills landed inside processing")
    assert.are.same({}, unknown)
    assert.are.same({}, lost, "items lost")
    assert.are.equal(#dups, allowed_dups, "items finished twice beyond Curator's kill gap: " .. table.concat(dups, " "))
    assert.are.same({}, util.children(c, locks), "lock nodes left")
    local by = { zklock = 0, curator = 0 }
    for _, p in ipairs(consumers) do by[p.kind] = by[p.kind] + #p:log().commits end
    for k, n in pairs(by) do assert.is_true(n > 0, k .. " consumers finished nothing") end
  end)
  it("plain mode (no lock path), consumers killed: none twice; lost only what the killed ones had removed", function()
    -- Without a lock path an item is removed before it is processed (Curator deletes it, then
    -- calls its consumer; zklock's take deletes it before it returns): at most once. A killed
    -- consumer loses the message it had removed and not finished: up to 3 items (one message)
    -- per Curator consumer, 3 per coroutine of a zklock worker.
    local path = "/idq/plain"
    local PER = 150
    assert(c:create(path, "", { parents = true }))
    local stop = os.tmpname()
    os.remove(stop)
    local t0 = util.now()
    local procs, consumers = {}, {}
    local function consumer(kind)
      local p
      if kind == "zklock" then
        p = qp.lua("consume", zk.hosts, path, { format = "curator", cos = 1, poll = 1, stop = stop, work_ms = 50 })
      else
        p = qp.dqueue("consume", zk.hosts, path, { idle = 2, stop = stop, work_ms = 50 })
      end
      p.kind = kind
      procs[#procs + 1], consumers[#consumers + 1] = p, p
      return p
    end
    local victims = { consumer("curator"), consumer("zklock") }
    consumer("curator")
    consumer("zklock")
    assert(util.wait_until(function()
      for _, p in ipairs(consumers) do if not p:log().ready then return false end end
      return true
    end, 120, { c }), "consumers did not connect")
    local producers = {
      qp.lua("produce", zk.hosts, path, { format = "curator", count = PER, prefix = "zkl", cos = 2, multi = 3 }),
      qp.dqueue("produce", zk.hosts, path, { count = PER, prefix = "cur", multi = 3 }),
    }
    for _, p in ipairs(producers) do procs[#procs + 1] = p end
    local function consumed(p)
      local t = p:log()
      return p.kind == "zklock" and t.takes or t.commits
    end
    for i, v in ipairs(victims) do
      local deadline = util.now() + 120
      while #consumed(v) < 10 * i do
        assert(util.now() < deadline, v.name .. " consumed too little: " .. v:output())
        util.drive({ c }, 0.01)
      end
      assert(v:kill())
      consumer(v.kind)
    end
    for _, p in ipairs(producers) do
      assert(util.wait_until(function() return not p:alive() end, 120, { c }), p.name .. ": " .. p:output())
      assert(p:log().done, p.name .. " failed: " .. table.concat(p:log().errors, "; "))
    end
    assert(io.open(stop, "w")):close()
    for _, p in ipairs(consumers) do
      if not p.killed then
        assert(util.wait_until(function() return not p:alive() end, 120, { c }), p.name .. ": " .. p:output())
        assert(p:log().done, p.name .. " failed: " .. table.concat(p:log().errors, "; ") .. p:output())
      end
    end
    os.remove(stop)
    local put, seen, dups, lost, allowed, puts = {}, {}, {}, {}, 0, 0
    for _, p in ipairs(producers) do
      for _, it in ipairs(p:log().puts) do put[it], puts = true, puts + 1 end
    end
    local per = {}
    for _, p in ipairs(consumers) do
      for _, it in ipairs(consumed(p)) do
        if seen[it] then dups[#dups + 1] = it end
        seen[it] = true
      end
      if p.killed then allowed = allowed + 3 end
      per[#per + 1] = ("%s%s=%d"):format(p.kind, p.killed and "(killed)" or "", #consumed(p))
    end
    for it in pairs(put) do if not seen[it] then lost[#lost + 1] = it end end
    table.sort(lost)
    print(("\ndistributed queue interop, plain mode (%.1f s): %d items put, %d consumers (%s), 2 killed,"
      .. " lost %d (allowed %d), consumed twice %d"):format(util.now() - t0, puts, #consumers, table.concat(per, " "),
      #lost, allowed, #dups))
    assert.are.equal(2 * PER, puts)
    assert.are.same({}, dups, "items consumed twice")
    assert.is_true(#lost <= allowed, "lost: " .. table.concat(lost, " "))
    assert.are.equal(0, c:queue(path, { format = "curator" }):size(), "items left in the queue")
    local by = { zklock = 0, curator = 0 }
    for _, p in ipairs(consumers) do by[p.kind] = by[p.kind] + #consumed(p) end
    for k, n in pairs(by) do assert.is_true(n > 0, k .. " consumers consumed nothing") end
  end)
end)
