-- The scripted tier: the ready list's batch (parked waiters whose operations finished, taken from
-- the core in one call by the dispatch) when an adapter's wake raises on one of them: the others
-- of the batch must still be woken (they are out of the core once taken); and when the buffer it
-- is taken into cannot grow (Lua out of memory): the events must stay in the core.
--   busted --lua=lua5.4 spec/fast/scripted/ready_batch_spec.lua
local scripted = require("support.scripted")

local function base(path) return (path:match("[^/]+$")) end

describe("scripted ready batch #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("a wake that raises loses no other waiter of the batch", function()
    local a, b = s.client:mutex("/a"), s.client:mutex("/b")
    local ta = s:spawn(function() return a:acquire(5) end)
    local tb = s:spawn(function() return b:acquire(5) end)
    local reqs = s:pending()
    assert.equal(4, #reqs) -- create and listing of /a, then of /b
    local ca, la, cb, lb = reqs[1], reqs[2], reqs[3], reqs[4]
    ca, cb = ca:ok(1), cb:ok(2)
    -- both granted in the core (one core round each, no dispatch): one batch of two
    assert.is_true(s.fake.children_ok(la.index, { base(ca.created) }))
    assert.is_true(s.fake.children_ok(lb.index, { base(cb.created) }))
    s.client._c:wait(0)
    s.client._c:wait(0)
    local S = s.client._scheduler -- the builtin scheduler: the adapter of both waiters
    local wake, calls = S.wake, 0
    S.wake = function(c, w)
      calls = calls + 1
      if calls == 1 then error("adapter wake failed") end
      return wake(c, w)
    end
    local ok, err = pcall(s.client.process, s.client)
    assert.is_false(ok)
    assert.matches("adapter wake failed", tostring(err), 1, true)
    s:pump()
    S.wake = wake
    -- the waiter whose wake raised is lost with that error; the other one acquired
    local done = (ta.done and 1 or 0) + (tb.done and 1 or 0)
    assert.equal(1, done)
    assert.equal(2, calls)
    local t = ta.done and ta or tb
    assert.is_truthy(t:returned())
  end)

  it("take_ready that cannot grow its buffer leaves the event in the core #lua54", function()
    local m = s.client:mutex("/m")
    local t = s:spawn(function() return m:acquire(5) end)
    local c = s:expect("create", "/m/_c_")
    local list = s:expect("children", "/m")
    local c_core = s.client._c
    local buf = {}
    assert.equal(0, c_core:take_ready({})) -- nothing ready yet (and the call's frame exists)
    c = c:ok(4)
    assert.is_true(s.fake.children_ok(list.index, { base(c.created) }))
    c_core:wait(0) -- granted in the core: on the ready list
    s.fake.lua_alloc_fail(0)
    local ok, err = pcall(c_core.take_ready, c_core, buf)
    s.fake.lua_alloc_fail(-1)
    assert.is_false(ok)
    assert.matches("not enough memory", tostring(err), 1, true)
    -- the grant is still there: the next dispatch resumes its waiter
    s:pump()
    assert.is_truthy(t:returned())
    assert.is_true(t.done)
  end)
end)

