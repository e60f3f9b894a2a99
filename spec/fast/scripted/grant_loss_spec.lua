-- The scripted tier: a waiter parked in the core (a coroutine of the builtin scheduler) whose
-- grant and the session's expiry arrive in one pump: the grant is on the ready list while the
-- LOST of the same acquisition is on the event queue, dispatched first.
--   busted --lua=lua5.4 spec/fast/scripted/grant_loss_spec.lua
local scripted = require("support.scripted")

local function base(path) return (path:match("[^/]+$")) end

describe("scripted grant and loss dispatched together #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("a mutex granted in the pump that expired its session: acquire fails ELOST, on_lost hears LOST once", function()
    local m = s.client:mutex("/m")
    local states = {}
    m:on_lost(function(state) states[#states + 1] = state end)
    local seen = {}
    local t = s:spawn(function()
      local ok, msg, code = m:acquire(5)
      seen.acquired, seen.msg, seen.code = ok ~= nil, msg, code
      seen.held = m:is_held()
      seen.token = m:token()
      return ok
    end)
    local c = s:expect("create", "/m/_c_")
    local list = s:expect("children", "/m")
    c = c:ok(4, 0x4242)
    -- the listing that grants, then the session's expiry, are both processed by the core before
    -- the Lua side dispatches (as the keepalive thread does): one core round without a dispatch
    assert.is_true(s.fake.children_ok(list.index, { base(c.created) }))
    s.client._c:wait(0)
    s:expire()
    -- the acquire fails with ELOST (nothing is held); on_lost heard LOST once
    assert.is_false(seen.acquired)
    assert.equal("ELOST", seen.code)
    assert.truthy(seen.msg:find("granted as the session ended", 1, true), seen.msg)
    assert.is_false(seen.held)
    assert.is_nil(seen.token)
    assert.same({ "LOST" }, states)
    s:reconnect()
    s:advance(1000)
    assert.is_true(t.done)
  end)

  it("a leader latch granted in the pump that expired its session never leads, and joins again", function()
    local l = s.client:latch("/el", { id = "me" })
    local changes, lost = {}, {}
    l:on_change(function(why) changes[#changes + 1] = why end)
    l:on_lost(function(state) lost[#lost + 1] = state end)
    s:pump()
    local c = s:expect("create", "/el/_c_")
    local list = s:expect("children", "/el")
    c = c:ok(3)
    assert.is_true(s.fake.children_ok(list.index, { base(c.created) }))
    s.client._c:wait(0) -- granted in the core; not dispatched yet
    s:expire()
    assert.is_false(l:is_held())
    assert.same({}, changes) -- never LEADER
    assert.same({ "LOST" }, lost)
    -- on the new session it joins again (and leads once its node is first)
    s:reconnect()
    local c2 = s:expect("create", "/el/_c_")
    local list2 = s:expect("children", "/el")
    c2 = c2:ok(5)
    list2:ok({ base(c2.created) })
    assert.is_true(l:is_held())
    assert.same({ "LEADER" }, changes)
  end)

  it("a multi-lock granted in the pump that expired its session fails ELOST, tells its on_lost", function()
    local a, b = s.client:mutex("/a"), s.client:mutex("/b")
    local ml = s.client:multilock({ a, b })
    local lost = {}
    ml:on_lost(function(state) lost[#lost + 1] = state end)
    local seen = {}
    s:spawn(function()
      local ok, _, code = ml:acquire(5)
      seen.ok, seen.code = ok ~= nil, code
      seen.held = ml:is_held()
    end)
    local ca = s:expect("create", "/a/_c_")
    local la = s:expect("children", "/a")
    ca = ca:ok(1)
    la:ok({ base(ca.created) })
    local cb = s:expect("create", "/b/_c_")
    local lb = s:expect("children", "/b")
    cb = cb:ok(2)
    assert.is_true(s.fake.children_ok(lb.index, { base(cb.created) }))
    s.client._c:wait(0) -- granted in the core; not dispatched yet
    s:expire()
    assert.is_false(seen.ok)
    assert.equal("ELOST", seen.code)
    assert.is_false(seen.held)
    assert.same({ "LOST" }, lost)
  end)

  it("a mutex granted in the pump that lost the connection hears SUSPENDED once, then RECONNECTED", function()
    local m = s.client:mutex("/m")
    local states = {}
    m:on_lost(function(state) states[#states + 1] = state end)
    local t = s:spawn(function()
      assert(m:acquire(5))
      s.client:sleep(1)
      return m:release()
    end)
    local c = s:expect("create", "/m/_c_")
    local list = s:expect("children", "/m")
    c = c:ok(4)
    assert.is_true(s.fake.children_ok(list.index, { base(c.created) }))
    s.client._c:wait(0) -- granted in the core; not dispatched yet
    s:disconnect()
    assert.same({ "SUSPENDED" }, states)
    s:reconnect()
    assert.same({ "SUSPENDED", "RECONNECTED" }, states)
    s:advance(1000)
    s:expect("delete", "/m/_c_"):ok()
    assert.is_true(t:returned())
  end)

  it("an election granted in the pump that expired its session runs no term on the lost grant", function()
    local terms = 0
    s.client:leader("/le", function() terms = terms + 1 end)
    s:pump()
    local c = s:expect("create", "/le/_c_")
    local list = s:expect("children", "/le")
    c = c:ok(3)
    assert.is_true(s.fake.children_ok(list.index, { base(c.created) }))
    s.client._c:wait(0) -- granted in the core; not dispatched yet
    s:expire()
    assert.equal(0, terms)
  end)

  -- serve every pending request from the fake's tree, the core processing the answers without
  -- a dispatch (as the keepalive thread does)
  local function serve_in_core()
    for _ = 1, 100 do
      local reqs = s:pending()
      if #reqs == 0 then return end
      for _, r in ipairs(reqs) do s.fake.serve(r.index) end
      for _ = 1, 10 do s.client._c:wait(0) end
    end
    error("the core did not settle")
  end

  it("a semaphore lease lost before it was adopted: acquire fails ELOST; on_lost may release it", function()
    local sem = s.client:semaphore("/s", 2)
    local heard = {}
    sem:on_lost(function(state, lease)
      heard[#heard + 1] = state
      heard.release = { pcall(lease.release, lease) }
    end)
    local seen = {}
    s:spawn(function()
      local lease, _, code = sem:acquire(5)
      seen.lease, seen.code = lease, code
    end)
    serve_in_core()
    s:expire()
    assert.is_nil(seen.lease) -- the acquire fails: nothing is held
    assert.equal("ELOST", seen.code)
    assert.same({ "LOST" }, { heard[1] })
    -- the handler's release ran on the lease's record: it answers ELOST (no raise)
    assert.is_true(heard.release[1])
    assert.equal("ELOST", heard.release[4])
    assert.same({}, s.log)
  end)
  -- The same loss found at adoption, with an on_lost handler that releases: for every recipe the
  -- handler's release answers ELOST (never raises), the acquire fails ELOST, and nothing is held
  -- after: a later release raises as after any failed acquire.
  local function released_in_handler(obj, later_release_words)
    local heard = {}
    obj:on_lost(function(state, target)
      heard[#heard + 1] = state
      heard.same_target = target == obj
      heard.release = { pcall(target.release, target) }
    end)
    local seen = {}
    s:spawn(function()
      local ok, _, code = obj:acquire(5)
      seen.ok, seen.code = ok ~= nil, code
      seen.held = obj:is_held()
      seen.later = { pcall(obj.release, obj) }
    end)
    serve_in_core()
    s:expire()
    assert.is_false(seen.ok)
    assert.equal("ELOST", seen.code)
    assert.is_false(seen.held)
    assert.same({ "LOST" }, { heard[1] })
    assert.is_true(heard.same_target)
    assert.is_true(heard.release[1], tostring(heard.release[2])) -- no raise
    assert.is_nil(heard.release[2])
    assert.equal("ELOST", heard.release[4])
    assert.is_false(seen.later[1])
    for _, w in ipairs(later_release_words) do
      assert.truthy(tostring(seen.later[2]):find(w, 1, true), tostring(seen.later[2]))
    end
    assert.same({}, s.log)
  end

  it("a mutex lost at adoption: release in on_lost answers ELOST, a later release raises", function()
    released_in_handler(s.client:mutex("/m"), { "does not hold" })
  end)

  it("a write lock lost at adoption: release in on_lost answers ELOST, a later release raises", function()
    released_in_handler(s.client:rwlock("/rw").write, { "does not hold" })
  end)

  it("a semaphore mutex lost at adoption: release in on_lost answers ELOST, a later release raises", function()
    released_in_handler(s.client:semaphore_mutex("/sm"), { "not held" })
  end)
end)
