-- The scripted tier (no ZooKeeper server): a mutex's hold (zklock.internal.hold, the plumbing of the lock,
-- semaphore and multi-lock objects) against the fake ZooKeeper: its token, its loss reports and
-- its release after the session ended. Also the scripted module's own guard.
--   busted spec/fast/scripted/hold_spec.lua
local scripted = require("support.scripted")

local function base(path) return (path:match("[^/]+$")) end

describe("scripted mutex hold #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  -- a task that acquires /m, holds it for 2 s (fake clock) and releases it (a hold belongs to its
  -- coroutine: one that ends holding is reaped); -> the task, the lock, what it saw
  local function hold()
    local m = s.client:mutex("/m")
    local seen = { states = {} }
    m:on_lost(function(state) seen.states[#seen.states + 1] = state end)
    local t = s:spawn(function()
      assert(m:acquire(5))
      seen.token = m:token()
      s.client:sleep(2)
      return m:release()
    end)
    local c = s:expect("create", "/m/_c_")
    assert.is_true(c.ephemeral and c.sequential)
    local list = s:expect("children", "/m")
    c = c:ok(4, 0x4242)
    list:ok({ base(c.created) })
    assert.equal(0x4242, seen.token) -- the fencing token: the node's czxid
    return t, m, seen
  end

  it("SUSPENDED then RECONNECTED keep the hold; the release deletes the node", function()
    local t, m, seen = hold()
    s:disconnect()
    assert.same({ "SUSPENDED" }, seen.states)
    s:reconnect()
    assert.same({ "SUSPENDED", "RECONNECTED" }, seen.states)
    s:advance(2000)
    assert.is_true(m:is_held() == false) -- held by the task's coroutine, not by the main thread
    local d = s:expect("delete", "/m/_c_")
    assert.is_false(t.done)
    d:ok()
    assert.is_true(t:returned())
  end)

  it("LOST when the session expires; the release then says ELOST and sends nothing", function()
    local t, _, seen = hold()
    s:expire()
    assert.same({ "LOST" }, seen.states)
    s:reconnect()
    s:advance(2000)
    local msg, code = t:failed()
    assert.equal("ELOST", code)
    assert.is_string(msg)
    s:expect_none()
  end)

  it("the main thread waiting for an answer raises a clear error instead of hanging", function()
    local ok, err = pcall(s.client.get, s.client, "/x")
    assert.is_false(ok)
    assert.matches("the main thread waits", tostring(err), 1, true)
  end)
end)
