-- Bounded holds (max_hold, issue 25 part 4) against a real ZooKeeper: a holder that never
-- releases loses its grant once max_hold passes; its on_lost handler hears ("LOST", obj,
-- "max_hold") once, and only then is its node deleted, so the next waiter is granted after the
-- handler ran (checked with zklock.testing.check over a recorded history).
--   busted --lua=lua5.4 spec/43-max-hold_spec.lua
--   busted --lua=luajit --run=luajit spec/43-max-hold_spec.lua
local util = require("support.util")
local fixture = require("support.fixture")
local check = require("zklock.testing.check")
local core = require("zklock.core")

local pack = table.pack or function(...) return { n = select("#", ...), ... } end

describe("max_hold (bounded holds)", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  -- Holder a takes `grant` (made by take(obj)), never releases it; waiter b queues behind it.
  -- The history has a's hold ending in its on_lost handler and b's grant: check.mutex says no
  -- overlap. -> the record of what happened
  local function never_releases(a, b, make, take, max_hold)
    local rec = check.recorder(nil, "spec")
    local seen = {}
    local obj_a = make(a)
    obj_a:on_lost(function(event, obj, why)
      seen[#seen + 1] = { event, obj, why }
      if event == "LOST" then rec:release("k", { who = "a", why = why }) end
    end)
    local g_a = assert(take(obj_a, max_hold))
    local token_a = g_a:token()
    rec:acquire("k", { who = "a", token = token_a })
    local t0 = core.now()
    local obj_b = make(b)
    local res
    b:spawn(function()
      res = pack(take(obj_b, nil))
      if res[1] then
        res.token = res[1]:token()
        rec:acquire("k", { who = "b", token = res.token })
        rec:release("k", { who = "b" })
        res.released = pack(res[1]:release())
      end
    end)
    local function done() return res and (not res[1] or res.released) end
    assert.is_truthy(util.wait_until(done, 30, { a, b }), "the waiter was never granted")
    local waited = (core.now() - t0) / 1000
    util.wait_until(function() return #seen > 0 end, 5, { a, b }) -- a complete history to judge
    assert.is_truthy(res[1], tostring(res[2]))
    assert.is_true(res.released[1], tostring(res.released[2]))
    return { rec = rec, seen = seen, a = obj_a, g_a = g_a, b = obj_b, token_b = res.token, waited = waited,
             token_a = token_a }
  end

  local function judge(r, max_hold)
    -- the waiter was granted only after the holder's handler ran
    local ok, err = check.mutex(check.load(r.rec))
    assert(ok, err)
    -- the handler ran once, with the reason
    assert.are.equal(1, #r.seen)
    assert.are.equal("LOST", r.seen[1][1])
    assert.are.equal(r.g_a, r.seen[1][2]) -- the grant: the lock object, or the lease
    assert.are.equal("max_hold", r.seen[1][3])
    assert.is_true(r.waited >= max_hold * 0.9,
      ("granted after %.3f s, before max_hold %g s"):format(r.waited, max_hold))
    -- the holder sees the loss: not held, release answers ELOST with the reason
    assert.is_false(r.g_a:is_held())
    local rel = pack(r.g_a:release())
    assert.is_nil(rel[1])
    assert.are.equal("ELOST", rel[3])
    assert.matches("max_hold", rel[2])
    assert.are.equal(1, #r.seen) -- still once
    assert.is_true(r.token_b > r.token_a) -- tokens rise across the forced hand-over
  end

  it("a mutex held past max_hold (acquire option) is released; the waiter comes after on_lost", function()
    local a, b = connect("mh-a"), connect("mh-b")
    local r = never_releases(a, b, function(c) return c:mutex("/mh/mutex") end,
      function(m, mh) return m:acquire(30, mh and { max_hold = mh } or nil) end, 0.5)
    judge(r, 0.5)
    assert.are.same({}, util.children(a, "/mh/mutex"))
  end)

  it("a zookeeper_lock held past max_hold (acquire option) is released; the waiter comes after on_lost", function()
    local a, b = connect("mh-a"), connect("mh-b")
    local r = never_releases(a, b, function(c) return c:zookeeper_lock("/mh/zl") end,
      function(l, mh) return l:acquire(30, mh and { max_hold = mh } or nil) end, 0.5)
    judge(r, 0.5)
    assert.are.same({}, util.children(a, "/mh/zl"))
  end)

  it("a semaphore lease bounded by the constructor's max_hold is released; the waiter comes after", function()
    local a, b = connect("mh-a"), connect("mh-b")
    local r = never_releases(a, b,
      function(c) return c:semaphore("/mh/sem", 1, c == a and { max_hold = 0.5 } or nil) end,
      function(s) return s:acquire(30) end, 0.5)
    judge(r, 0.5)
    assert.are.same({}, util.children(a, "/mh/sem/leases"))
  end)

  it("a leader's term ends at max_hold: on_lost says why, sleep returns false, the next one leads", function()
    local a, b = connect("mh-a"), connect("mh-b")
    local rec = check.recorder(nil, "spec")
    local seen, slept = {}, nil
    local la = a:leader("/mh/lead", function(lo)
      rec:log("lead", "k", { who = "a" })
      slept = lo:sleep(30) -- never gives up on its own
    end, { id = "a", max_hold = 0.5 })
    la:on_lost(function(event, obj, why)
      seen[#seen + 1] = { event, obj, why }
      if event == "LOST" then rec:log("unlead", "k", { who = "a" }) end
    end)
    assert.is_truthy(util.wait_until(function() return la:is_held() end, 10, { a }))
    local led
    local lb = b:leader("/mh/lead", function()
      rec:log("lead", "k", { who = "b" })
      led = true
      rec:log("unlead", "k", { who = "b" })
    end, { id = "b" })
    assert.is_truthy(util.wait_until(function() return led end, 30, { a, b }), "b never led")
    assert.is_truthy(util.wait_until(function() return slept ~= nil end, 5, { a, b }))
    local ok, err = check.leader(check.load(rec))
    assert(ok, err)
    assert.is_false(slept)
    assert.are.equal(1, #seen)
    assert.are.same({ "LOST", la, "max_hold" }, seen[1])
    assert.is_false(la:is_held())
    la:close()
    lb:close()
  end)

  -- the hold protocol's calls on a leader's term and a latch's leadership (issue 22 part 1)
  it("leader term and latch: is_held, token, node, a fenced transaction refused after the loss", function()
    local a = connect("hp-a")
    local lo_seen, lt_seen = {}, {}
    local in_term = {}
    local l = a:leader("/hp/lead", function(lo)
      in_term.held, in_term.token, in_term.node = lo:is_held(), lo:token(), lo:node()
      local t = lo:transaction()
      t:create("/hp/fenced-by-term", "x")
      in_term.commit = { t:commit() }
      lo:sleep(30)
    end, { id = "a", max_hold = 0.5 })
    l:on_lost(function(event, obj, why) lo_seen[#lo_seen + 1] = { event, obj, why } end)
    assert.is_truthy(util.wait_until(function() return in_term.commit end, 10, { a }))
    assert.is_true(in_term.held)
    assert.is_number(in_term.token)
    assert.are.equal("/hp/lead/", in_term.node:sub(1, 9))
    assert.is_truthy(in_term.commit[1], tostring(in_term.commit[2]))
    assert.is_truthy(util.wait_until(function() return #lo_seen > 0 end, 10, { a }))
    assert.is_false(l:is_held())
    assert.is_nil(l:node())
    assert.has_error(function() l:transaction() end)
    l:close()
    local lt = a:latch("/hp/latch", { id = "a" })
    lt:on_lost(function(event, obj, why) lt_seen[#lt_seen + 1] = { event, obj, why } end)
    assert(lt:await(10))
    assert.is_true(lt:is_held())
    local node = lt:node()
    assert.are.equal("/hp/latch/", node:sub(1, 10))
    local t = lt:transaction()
    t:set(node, "fenced")
    assert(t:commit())
    -- someone deletes the latch node: the fenced transaction learns it, the latch reports LOST
    assert(a:delete(node))
    t = lt:transaction()
    t:set(node, "again")
    local ok, _, code = t:commit()
    assert.is_nil(ok)
    assert.are.equal("ELOST", code)
    assert.are.same({ "LOST", lt, "node" }, lt_seen[1])
    lt:close()
  end)

  it("a latch leading past max_hold gives leadership up after on_lost and joins at the back", function()
    local a, b = connect("mh-a"), connect("mh-b")
    local rec = check.recorder(nil, "spec")
    local seen, lost_at = {}, nil
    local la = a:latch("/mh/latch", { id = "a", max_hold = 0.5 })
    la:on_change(function(event) if event == "LEADER" then rec:log("lead", "k", { who = "a" }) end end)
    la:on_lost(function(event, obj, why)
      seen[#seen + 1] = { event, obj, why }
      if event == "LOST" then
        lost_at = lost_at or core.now()
        rec:log("unlead", "k", { who = "a" })
      end
    end)
    assert.is_truthy(util.wait_until(function() return la:is_held() end, 10, { a }))
    local t0 = core.now()
    local led_at
    local lb = b:latch("/mh/latch", { id = "b" })
    lb:on_change(function(event)
      if event == "LEADER" then
        led_at = core.now()
        rec:log("lead", "k", { who = "b" })
      end
    end)
    -- a never leaves on its own: b leads once a's max_hold passed
    assert.is_truthy(util.wait_until(function() return led_at end, 30, { a, b }), "b never led")
    rec:log("unlead", "k", { who = "b" })
    local ok, err = check.leader(check.load(rec))
    assert(ok, err)
    assert.is_truthy(#seen >= 1)
    for _, e in ipairs(seen) do assert.are.same({ "LOST", la, "max_hold" }, e) end
    assert.is_truthy(lost_at <= led_at)
    assert.is_true((led_at - t0) / 1000 >= 0.5 * 0.9,
      ("b led after %.3f s, before max_hold"):format((led_at - t0) / 1000))
    -- a joined again at the back: two participants, b leads, a does not
    assert.is_truthy(util.wait_until(function() return #la:participants() == 2 end, 10, { a, b }))
    assert.is_false(la:is_held())
    assert.is_true(lb:is_held())
    assert.are.equal("b", (la:leader()))
    la:close()
    lb:close()
  end)

  it("a lock-safe take whose fn never finishes: the item goes to another consumer, once", function()
    local a, b = connect("mh-a"), connect("mh-b")
    local rec = check.recorder(nil, "spec")
    local qa = a:queue("/mh/q", { format = "curator", lock_path = "/mh/q-locks", max_hold = 0.5 })
    local qb = b:queue("/mh/q", { format = "curator", lock_path = "/mh/q-locks" })
    for i = 1, 3 do
      assert(qa:put("i" .. i))
      rec:log("enqueue", "q", { item = "i" .. i })
    end
    local A = { seen = {} } -- the stuck consumer
    local B = { got = {} }
    a:spawn(function()
      A.res = pack(qa:take(10, function(items, msg)
        A.item, A.name, A.t0 = items[1], msg.name, core.now()
        msg:on_lost(function(event, m, why)
          A.seen[#A.seen + 1] = { event, m == msg, why }
          A.lost_at = A.lost_at or core.now()
        end)
        -- stuck until the other consumer has the item (bounded), then it tries to write
        local t = core.now()
        while not B.in_item and core.now() - t < 20000 do a:sleep(0.05) end
        A.held = msg:is_held()
        local txn = msg:transaction()
        txn:create("/mh/q-applied-" .. items[1], "a")
        A.commit = pack(txn:commit())
      end))
      if A.res[1] then rec:log("dequeue", "q", { item = A.res[1][1], who = "a" }) end
    end)
    assert.is_truthy(util.wait_until(function() return A.name end, 10, { a }))
    b:spawn(function()
      for _ = 1, 6 do -- bounded: three items to take
        if #B.got == 3 then break end
        local items = qb:take(10, function(its, msg)
          if msg.name == A.name then
            B.in_item = { at = core.now(), lost_seen = #A.seen }
            local t = core.now() -- hold it until the stuck consumer tried its write (bounded)
            while not A.commit and core.now() - t < 20000 do b:sleep(0.05) end
          end
          local txn = msg:transaction()
          txn:create("/mh/q-applied-" .. its[1], "b")
        end)
        if items then
          B.got[#B.got + 1] = items[1]
          rec:log("dequeue", "q", { item = items[1], who = "b" })
        end
      end
      B.done = true
    end)
    assert.is_truthy(util.wait_until(function() return B.done and A.res end, 60, { a, b }),
      "the consumers did not finish")
    -- the stuck consumer heard LOST ("max_hold") once, before the other one got its item
    assert.are.same({ { "LOST", true, "max_hold" } }, A.seen)
    assert.is_truthy(B.in_item, "the other consumer never got the stuck item")
    assert.are.equal(1, B.in_item.lost_seen)
    assert.is_true((B.in_item.at - A.t0) / 1000 >= 0.5 * 0.9,
      ("taken over after %.3f s, before max_hold"):format((B.in_item.at - A.t0) / 1000))
    -- its write and its removal were refused
    assert.is_false(A.held)
    assert.is_nil(A.commit[1])
    assert.are.equal("ELOST", A.commit[3])
    assert.is_nil(A.res[1])
    assert.are.equal("ELOST", A.res[3])
    assert.matches("max_hold", A.res[2])
    -- every item delivered exactly once, applied once (by b)
    local ok, err = check.queue(check.load(rec))
    assert(ok, err)
    for i = 1, 3 do assert.are.equal("b", (b:get("/mh/q-applied-i" .. i))) end
    assert.are.same({}, util.children(b, "/mh/q"))
    assert.are.same({}, util.children(b, "/mh/q-locks"))
  end)

  it("rejects a bad max_hold of a latch and a queue naming the option", function()
    local a = connect("mh-a")
    for _, v in ipairs({ 0, -1, 0 / 0, math.huge, "1" }) do
      local ok, err = pcall(a.latch, a, "/mh/badl", { max_hold = v })
      assert.is_false(ok)
      assert.matches("max_hold", err)
      ok, err = pcall(a.queue, a, "/mh/badq", { format = "curator", lock_path = "/mh/badq-l", max_hold = v })
      assert.is_false(ok)
      assert.matches("max_hold", err)
    end
    local ok, err = pcall(a.queue, a, "/mh/badq", { format = "curator", max_hold = 1 })
    assert.is_false(ok)
    assert.matches("max_hold.*lock_path", err)
  end)

  it("a released hold is not touched when max_hold passes later", function()
    local a = connect("mh-a")
    local m = a:mutex("/mh/early")
    local lost = 0
    m:on_lost(function() lost = lost + 1 end)
    assert(m:acquire(5, { max_hold = 0.3 }))
    assert.is_true(m:release())
    assert(m:acquire(5)) -- a second grant without a bound
    util.drive({ a }, 0.6)
    assert.are.equal(0, lost)
    assert.is_true(m:is_held())
    assert.is_true(m:release())
  end)

  it("rejects a bad max_hold naming the option", function()
    local a = connect("mh-a")
    for _, v in ipairs({ 0, -1, 0 / 0, math.huge, "1" }) do
      local ok, err = pcall(a.mutex, a, "/mh/bad", { max_hold = v })
      assert.is_false(ok)
      assert.matches("max_hold", err)
      local m = a:mutex("/mh/bad")
      ok, err = pcall(m.acquire, m, 1, { max_hold = v })
      assert.is_false(ok)
      assert.matches("max_hold", err)
    end
  end)
end)
