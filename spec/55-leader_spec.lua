-- Leader election (client:leader, Curator LeaderSelector) and the leader latch (client:latch,
-- Curator LeaderLatch) against a real ZooKeeper server: node names and data, one leader at a
-- time over several participants (an interval checker over their terms and fencing tokens),
-- requeue, close, await, on_change, participants, bad input, and no node left by any give-up.
--   busted --lua=lua5.4 spec/55-leader_spec.lua
--   busted --lua=luajit --run=luajit spec/55-leader_spec.lua
local util = require("support.util")
local fixture = require("support.fixture")
local intervals = require("support.intervals")

local LATCH_NODE = "^_c_%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x"
  .. "%-latch%-%d%d%d%d%d%d%d%d%d%d$"

describe("leadership checker", function()
  it("finds overlapping terms and token regressions (it can fail)", function()
    local log = intervals.new()
    log:add({ owner = "a", token = 10, start = 0, finish = 100 })
    log:add({ owner = "b", token = 20, start = 100, finish = 200 }) -- touching: no overlap
    assert.are.equal(0, log:check().overlaps)
    log:add({ owner = "c", token = 15, start = 150, finish = 250 })
    local r = log:check()
    assert.are.equal(1, r.overlaps)
    assert.are.equal(1, r.token_regressions)
    assert.are.equal(3, r.changes)
    local open = intervals.new()
    open:add({ owner = "a", token = 1, start = 0, finish = 1 })
    open:start("b", 2)
    open:start("c", 3) -- two terms still running overlap each other
    assert.are.equal(1, open:check().overlaps)
  end)
end)

describe("leader election", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  it("runs fn while leading, one participant at a time, with growing fencing tokens", function()
    local clients, log = {}, intervals.new()
    local leaders, closing = {}, false
    for i = 1, 3 do
      local c = connect("web-" .. i)
      clients[i] = c
      leaders[i] = c:leader("/el/basic", function(l)
        assert.is_true(l:is_leader())
        local term = log:start("p" .. i, l:token())
        -- the node carries the participant id
        local p = assert(l:participants())
        assert.are.equal("p" .. i, p[1])
        assert.are.equal("p" .. i, l:leader())
        local slept = l:sleep(0.1)
        assert(slept or closing, "a term ended early without a loss or a close")
        log:stop(term)
      end, { id = "p" .. i, requeue = true })
    end
    assert.is_true(util.drive_until(clients, function() return log:count() >= 9 end, 60))
    -- between terms a participant has no node for a moment: wait for all three queued
    local nodes
    assert.is_true(util.drive_until(clients, function()
      nodes = util.children(clients[1], "/el/basic")
      return #nodes == 3
    end, 20))
    for _, n in ipairs(nodes) do assert.matches(util.MUTEX_NODE, n) end
    closing = true
    for i = 1, 3 do leaders[i]:close() end
    assert.is_true(util.drive_until(clients, function() return util.child_count(clients[1], "/el/basic") == 0 end, 20))
    local r = log:check()
    assert.are.equal(0, r.overlaps, r.report)
    assert.is_true(r.terms >= 9)
    assert.are.equal(0, r.token_regressions, r.report)
    -- every participant led (fair queue)
    for i = 1, 3 do assert.is_true(r.by_owner["p" .. i] >= 2, r.report) end
  end)

  it("without requeue leads once; requeue() queues again; a raising fn ends the term", function()
    local c = connect("one")
    local runs, lines = 0, {}
    local c2 = connect({ log = function(line) lines[#lines + 1] = line end })
    local l = c:leader("/el/once", function() runs = runs + 1 end, { id = "once" })
    assert.is_true(util.drive_until({ c }, function() return runs == 1 and not l._running end, 20))
    assert.is_false(l:is_leader())
    assert.are.same({}, util.children(c, "/el/once"))
    assert.is_true(l:requeue())
    assert.is_true(util.drive_until({ c }, function() return runs == 2 and not l._running end, 20))
    local bad = c2:leader("/el/once", function() error("boom") end)
    assert.is_true(util.drive_until({ c2 }, function() return bad:terms() == 1 and not bad._running end, 20))
    assert.are.same({}, util.children(c, "/el/once"))
    local found = false
    for _, line in ipairs(lines) do if line:find("boom", 1, true) then found = true end end
    assert.is_true(found, "the raised error was not logged")
  end)

  it("close() withdraws a queued participant (no node left) and ends a term", function()
    local c1, c2 = connect("a"), connect("b")
    local stop = false
    local l1 = c1:leader("/el/close", function(l) while not stop and l:sleep(0.05) do end end, { id = "a" })
    assert.is_true(util.drive_until({ c1 }, function() return l1:is_leader() end, 20))
    local l2 = c2:leader("/el/close", function() error("must not lead") end, { id = "b" })
    assert.is_true(util.drive_until({ c1, c2 }, function() return util.child_count(c1, "/el/close") == 2 end, 20))
    assert.are.same({ "a", "b" }, l2:participants())
    l2:close()
    assert.is_true(util.drive_until({ c1, c2 }, function() return util.child_count(c1, "/el/close") == 1 end, 20))
    l1:close()
    assert.is_false(l1:is_leader())
    assert.is_nil(l1:token())
    assert.is_true(util.drive_until({ c1, c2 }, function() return util.child_count(c1, "/el/close") == 0 end, 20))
    assert.are.equal(0, l2:terms())
    l1:close() -- idempotent
  end)

  it("a participant whose client closes leaves no node; is_leader turns false", function()
    local c1, c2 = connect("a"), connect("b")
    local l1 = c1:leader("/el/cl", function(l) while l:sleep(0.05) do end end, { id = "a" })
    assert.is_true(util.drive_until({ c1 }, function() return l1:is_leader() end, 20))
    local led2 = false
    local l2 = c2:leader("/el/cl", function(l) led2 = true; while l:sleep(0.05) do end end, { id = "b" })
    assert.is_true(util.drive_until({ c1, c2 }, function() return util.child_count(c1, "/el/cl") == 2 end, 20))
    c1:close()
    assert.is_false(l1:is_leader())
    assert.is_true(util.drive_until({ c2 }, function() return led2 and l2:is_leader() end, 20))
    l2:close()
    assert.is_true(util.drive_until({ c2 }, function() return util.child_count(c2, "/el/cl") == 0 end, 20))
  end)

  it("a client closed before its participants ever ran closes cleanly", function()
    local c = connect("early")
    local l = c:leader("/el/early", function() error("must not run") end, { requeue = true })
    local t = c:latch("/el/early-latch")
    c:close() -- the spawned coroutines first run here: they must stop quietly
    assert.is_false(l:is_leader())
    assert.is_false(t:is_held())
    util.assert_code("ECLOSED", util.pack(t:await(1)))
    assert.is_true(t:close())
    l:close()
  end)

  it("rejects bad input naming the argument", function()
    local c = connect("bad")
    local f = function() end
    assert.matches("bad argument #1 to 'leader' (lock path", util.error_of(c.leader, c, "rel", f), 1, true)
    assert.matches("bad argument #1 to 'leader' (lock path", util.error_of(c.leader, c, 42, f), 1, true)
    assert.matches("bad argument #2 to 'leader' (expected a function", util.error_of(c.leader, c, "/x", "f"), 1, true)
    assert.matches("bad argument #3 to 'leader' (option 'id': expected a string",
      util.error_of(c.leader, c, "/x", f, { id = 5 }), 1, true)
    assert.matches("bad argument #3 to 'leader' (option 'requeue': expected a boolean",
      util.error_of(c.leader, c, "/x", f, { requeue = "yes" }), 1, true)
    assert.matches("bad argument #3 to 'leader' (unknown option 'idd'",
      util.error_of(c.leader, c, "/x", f, { idd = "a" }), 1, true)
    assert.matches("bad argument #3 to 'leader' (options: expected a table",
      util.error_of(c.leader, c, "/x", f, "a"), 1, true)
    assert.matches("max_data", util.error_of(c.leader, c, "/x", f, { id = ("x"):rep(2 * 1024 * 1024) }), 1, true)
    assert.matches("bad argument #3 to 'leader' (option 'acl'",
      util.error_of(c.leader, c, "/x", f, { acl = 3 }), 1, true)
    assert.matches("use client:leader", util.error_of(c.leader, "/x", f), 1, true)
    local l = c:leader("/el/bad", function(x) while x:sleep(0.05) do end end)
    assert.matches("bad argument #1 to 'sleep'", util.error_of(l.sleep, l, -1), 1, true)
    assert.matches("use leader:is_leader", util.error_of(l.is_leader, {}), 1, true)
    assert.matches("bad argument #1 to 'on_lost' (expected a function or nil", util.error_of(l.on_lost, l, 5), 1, true)
    assert.matches("use leader:requeue", util.error_of(l.requeue, "x"), 1, true)
    assert.matches("use leader:close", util.error_of(l.close), 1, true)
    assert.are.equal(l, l:on_lost(nil))
    l:close()
    assert.is_true(util.drive_until({ c }, function() return util.child_count(c, "/el/bad") == 0 end, 20))
    c:close()
    assert.matches("on a closed client", util.error_of(c.leader, c, "/x", f), 1, true)
  end)
end)

describe("leader latch", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  it("Curator's node name and data; first leads; close hands over at once, node removed", function()
    local c1, c2 = connect("a"), connect("b")
    local l1 = c1:latch("/lt/basic", { id = "one" })
    assert.is_true(l1:await(20))
    assert.is_true(l1:is_held())
    local nodes = util.children(c1, "/lt/basic")
    assert.are.equal(1, #nodes)
    assert.matches(LATCH_NODE, nodes[1])
    local data, stat = c1:get("/lt/basic/" .. nodes[1])
    assert.are.equal("one", data)
    assert.are.equal(c1:session(), stat.ephemeral_owner)
    assert.are.equal(stat.czxid, l1:token())
    local changes = {}
    local l2 = c2:latch("/lt/basic", { id = "two" })
    l2:on_change(function(why, obj)
      assert(obj == l2)
      changes[#changes + 1] = tostring(why == "LEADER") .. ":" .. why
    end)
    assert.is_true(util.drive_until({ c1, c2 }, function() return util.child_count(c1, "/lt/basic") == 2 end, 20))
    assert.are.same({ "one", "two" }, l2:participants())
    assert.are.equal("one", l2:leader())
    util.assert_code("ETIMEDOUT", util.pack(l2:await(0.2)))
    util.assert_code("ETIMEDOUT", util.pack(l2:await(0)))
    assert.is_false(l2:is_held())
    assert.is_nil(l2:token())
    local t1 = l1:token()
    assert.is_true(l1:close())
    assert.is_false(l1:is_held())
    assert.are.equal(1, util.child_count(c1, "/lt/basic")) -- removed before close returned
    assert.is_true(l2:await(20))
    assert.is_true(l2:token() > t1)
    assert.are.same({ "true:LEADER" }, changes)
    util.assert_code("ECLOSED", util.pack(l1:await(1)))
    assert.is_true(l2:close())
    assert.are.same({ "true:LEADER", "false:CLOSED" }, changes)
    assert.are.equal(0, util.child_count(c1, "/lt/basic"))
  end)

  it("after its session expires, a latch rejoins with a new node on the new session", function()
    local c = connect("exp")
    local changes = {}
    local l = c:latch("/lt/exp", { id = "e" })
    l:on_change(function(why) changes[#changes + 1] = tostring(why == "LEADER") .. ":" .. why end)
    assert.is_true(l:await(20))
    local sid, t1 = c:session(), l:token()
    assert(require("zklock.testing").expire(c))
    assert.is_true(util.wait_until(function() return #changes >= 3 end, 30, { c }))
    assert.are.same({ "true:LEADER", "false:LOST", "true:LEADER" }, changes)
    assert.is_true(l:is_held())
    assert.are_not.equal(sid, c:session())
    assert.is_true(l:token() > t1)
    local nodes = util.children(c, "/lt/exp")
    assert.are.equal(1, #nodes)
    local _, st = c:get("/lt/exp/" .. nodes[1])
    assert.are.equal(c:session(), st.ephemeral_owner)
    assert.is_true(l:close())
    assert.is_false(c:held()) -- the lost acquisition was forgotten too
    assert.are.equal(0, util.child_count(c, "/lt/exp"))
  end)

  it("a waiting latch closed (or its client closed) leaves no node", function()
    local c1, c2, c3 = connect("a"), connect("b"), connect("c")
    local l1 = c1:latch("/lt/gone", { id = "1" })
    assert.is_true(l1:await(20))
    local l2 = c2:latch("/lt/gone", { id = "2" })
    local l3 = c3:latch("/lt/gone", { id = "3" })
    assert.is_true(util.drive_until({ c1, c2, c3 }, function() return util.child_count(c1, "/lt/gone") == 3 end, 20))
    assert.is_true(l2:close())
    c3:close()
    assert.is_true(util.drive_until({ c1, c2 }, function() return util.child_count(c1, "/lt/gone") == 1 end, 20))
    assert.is_false(l3:is_held())
    assert.is_true(l1:close())
    assert.are.equal(0, util.child_count(c1, "/lt/gone"))
  end)

  it("many latches on one path: exactly one leads at any time", function()
    local clients, latches, log = {}, {}, intervals.new()
    for i = 1, 4 do
      clients[i] = connect("l" .. i)
      local l = clients[i]:latch("/lt/many", { id = "l" .. i })
      latches[i] = l
      l:on_change(function(event)
        if event == "LEADER" then latches[i]._term = log:start("l" .. i, l:token())
        elseif latches[i]._term then log:stop(latches[i]._term) end
      end)
    end
    -- the leader closes, the next leads; then the closed one rejoins as a new latch
    for _ = 1, 8 do
      local leader
      assert.is_true(util.drive_until(clients, function()
        for i, l in ipairs(latches) do if l:is_held() then leader = i return true end end
      end, 20))
      assert.is_true(latches[leader]:close())
      local i = leader
      latches[i] = clients[i]:latch("/lt/many", { id = "l" .. i })
      local l = latches[i]
      l:on_change(function(event)
        if event == "LEADER" then l._term = log:start("l" .. i, l:token()) elseif l._term then log:stop(l._term) end
      end)
    end
    for _, l in ipairs(latches) do l:close() end
    local r = log:check()
    assert.are.equal(0, r.overlaps, r.report)
    assert.are.equal(0, r.token_regressions, r.report)
    assert.is_true(r.terms >= 8)
    -- waiting latches' nodes are deleted in the background
    assert.is_true(util.drive_until(clients, function() return util.child_count(clients[1], "/lt/many") == 0 end, 20))
  end)

  it("rejects bad input naming the argument", function()
    local c = connect("bad")
    assert.matches("bad argument #1 to 'latch' (lock path", util.error_of(c.latch, c, "x/y"), 1, true)
    assert.matches("bad argument #2 to 'latch' (option 'id': expected a string",
      util.error_of(c.latch, c, "/x", { id = {} }), 1, true)
    assert.matches("bad argument #2 to 'latch' (unknown option 'requeue'",
      util.error_of(c.latch, c, "/x", { requeue = true }), 1, true)
    assert.matches("max_data", util.error_of(c.latch, c, "/x", { id = ("x"):rep(2 * 1024 * 1024) }), 1, true)
    assert.matches("use client:latch", util.error_of(c.latch, "/x"), 1, true)
    local l = c:latch("/lt/bad")
    assert.matches("bad argument #1 to 'await' (timeout", util.error_of(l.await, l, -1), 1, true)
    assert.matches("bad argument #1 to 'await' (timeout", util.error_of(l.await, l, "1"), 1, true)
    assert.matches("bad argument #1 to 'on_change' (expected a function", util.error_of(l.on_change, l, 1), 1, true)
    assert.matches("use latch:is_held", util.error_of(l.is_held, nil), 1, true)
    assert.matches("use latch:close", util.error_of(l.close, {}), 1, true)
    assert.is_true(l:await(20))
    -- the identity is the data without an id
    assert.are.same({ "bad" }, l:participants())
    assert.is_true(l:close())
    assert.is_true(l:close())
    assert.are.equal(0, util.child_count(c, "/lt/bad"))
    c:close()
    assert.matches("on a closed client", util.error_of(c.latch, c, "/x"), 1, true)
  end)
end)

describe("leader SUSPENDED policies", function()
  local zk
  local fx = fixture.server({}, { own = "pauses its server", each = true }, function(s) zk = s end)

  it('"stop" ends leadership at SUSPENDED and gives it back; "keep" (default) leads on', function()
    local S = 6 -- s: SUSPENDED after 2/3 S of silence (4 s), LOST only after 0.9 S (5.4 s)
    local ck = fx.connect({ identity = "keep", session_timeout = S })
    local cs = fx.connect({ identity = "stop", session_timeout = S })
    local all = { ck, cs }
    local keep, stop = { states = {} }, { states = {} }
    local function lead(st)
      return function(l)
        st.token = l:token()
        while l:sleep(0.02) do end
        st.ended_at = util.now()
        st.leader_after = l:is_leader()
      end
    end
    local kl = ck:leader("/el/keep", lead(keep), { id = "k" })
    local sl = cs:leader("/el/stop", lead(stop), { id = "s", suspended = "stop" })
    kl:on_lost(function(state) keep.states[#keep.states + 1] = state end)
    sl:on_lost(function(state)
      stop.states[#stop.states + 1] = state
      if state == "SUSPENDED" then stop.suspended_at = util.now() end
    end)
    assert.is_true(util.drive_until(all, function() return kl:is_leader() and sl:is_leader() end, 20))
    assert.truthy(ck:exists("/") and cs:exists("/")) -- fresh contact: the silence starts now
    local t0 = util.now()
    zk:pause()
    local suspended = util.drive_until(all, function() return #keep.states >= 1 and #stop.states >= 1 end, S)
    local t_resume = util.now()
    zk:resume()
    assert.is_true(suspended, "no SUSPENDED within the session timeout")
    assert.is_true(t_resume - t0 < 0.85 * S, "resumed too late to expect RECONNECTED")
    assert.is_true(util.drive_until(all, function() return #keep.states >= 2 and stop.ended_at ~= nil end, 2 * S))
    -- "stop": leadership ended at SUSPENDED (sleep returned false at once), the node is given back
    assert.are.equal("SUSPENDED", stop.states[1])
    assert.is_false(stop.leader_after)
    assert.is_true(stop.ended_at - stop.suspended_at < 1, ("the term ended %.2f s after SUSPENDED")
      :format(stop.ended_at - stop.suspended_at))
    assert.is_false(sl:is_leader())
    assert.is_true(util.drive_until(all, function() return util.child_count(cs, "/el/stop") == 0 end, 20))
    assert.are.equal(1, sl:terms())
    -- "keep": the same term leads on through the cut
    assert.are.same({ "SUSPENDED", "RECONNECTED" }, keep.states)
    assert.is_nil(keep.ended_at)
    assert.is_true(kl:is_leader())
    assert.are.equal(keep.token, kl:token())
    assert.matches("bad argument #3 to 'leader' (option 'suspended': expected one of keep, stop",
      util.error_of(ck.leader, ck, "/x", function() end, { suspended = "drop" }), 1, true)
    kl:close()
    assert.is_true(util.drive_until(all, function() return util.child_count(ck, "/el/keep") == 0 end, 20))
  end)
end)
