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

  it("a mutex granted in the pump that expired its session is not held", function()
    local m = s.client:mutex("/m")
    local states = {}
    m:on_lost(function(state) states[#states + 1] = state end)
    local seen = {}
    local t = s:spawn(function()
      local ok, msg, code = m:acquire(5)
      seen.acquired, seen.msg, seen.code = ok ~= nil, msg, code
      seen.held = m:is_held()
      seen.token = m:token()
      s.client:sleep(1)
      return m:release()
    end)
    local c = s:expect("create", "/m/_c_")
    local list = s:expect("children", "/m")
    c = c:ok(4, 0x4242)
    -- the listing that grants, then the session's expiry, are both processed by the core before
    -- the Lua side dispatches (as the keepalive thread does): one core round without a dispatch
    assert.is_true(s.fake.children_ok(list.index, { base(c.created) }))
    s.client._c:wait(0)
    s:expire()
    -- either the acquire failed, or its hold knows it is lost (and said so once)
    if seen.acquired then
      assert.is_false(seen.held)
      assert.is_nil(seen.token)
      assert.same({ "LOST" }, states)
    end
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
end)
