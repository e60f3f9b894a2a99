-- The scripted tier (no ZooKeeper server): leader election and the leader latch against the fake
-- ZooKeeper, with connection loss, reconnection and the loss of the session on the fake clock.
--   busted spec/fast/scripted/leader_spec.lua
-- Runs on PUC Lua 5.1 too: the election engine catches errors with zklock.scheduler's pcall,
-- which may yield there.
local scripted = require("support.scripted")

local OTHER = "_c_11111111-1111-4111-8111-111111111111-"

local function base(path) return (path:match("[^/]+$")) end

describe("scripted leader latch #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  -- join /el behind another participant's node, which then goes: -> latch, changes, own create
  local function lead(changes)
    local l = s.client:latch("/el", { id = "me" })
    l:on_change(function(why) changes[#changes + 1] = tostring(why == "LEADER") .. " " .. why end)
    s:pump()
    local c = s:expect("create", "/el/_c_")
    assert.is_true(c.ephemeral and c.sequential)
    assert.equal("me", c.data)
    local list = s:expect("children", "/el") -- pipelined with the create
    c = c:ok(3)
    list:ok({ OTHER .. "latch-0000000001", base(c.created) })
    local g = s:expect("get", "/el/" .. OTHER .. "latch-0000000001") -- the predecessor, watched
    assert.is_true(g.watch)
    g:ok("other")
    assert.is_false(l:is_held())
    assert.equal(1, s:fire("deleted", "/el/" .. OTHER .. "latch-0000000001"))
    assert.is_true(l:is_held())
    assert.same({ "true LEADER" }, changes)
    return l, c
  end

  it("SUSPENDED keeps leadership; the same session back changes nothing", function()
    local changes = {}
    local l = lead(changes)
    s:disconnect()
    assert.equal("SUSPENDED", s.client.state)
    assert.is_true(l:is_held())
    s:advance(3000)
    s:reconnect()
    assert.is_true(l:is_held())
    assert.same({ "true LEADER" }, changes)
    s:expect_none()
  end)

  it("LOST (no server heard for about a session timeout) ends leadership; it joins again on the new session", function()
    local changes = {}
    local l, own = lead(changes)
    s:disconnect()
    s:advance(8000)
    assert.is_true(l:is_held()) -- the session may still live on the server
    s:advance(2000)                   -- now it may not: LOST before the server could expire it
    assert.is_false(l:is_held())
    assert.same({ "true LEADER", "false LOST" }, changes)
    s:reconnect()
    local c = s:expect("create", "/el/_c_") -- a new node on the new session
    assert.are_not.equal(own.session, c.session)
    local list = s:expect("children", "/el")
    c = c:ok(9)
    list:ok({ base(c.created) })
    assert.is_true(l:is_held())
    assert.same({ "true LEADER", "false LOST", "true LEADER" }, changes)
  end)
end)

describe("scripted leader election #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("a term runs while the mutex is held, outlives SUSPENDED and ends on LOST", function()
    local states, slept = {}, {}
    local ld = s.client:leader("/le", function(self)
      while true do
        local still = self:sleep(1)
        slept[#slept + 1] = still
        if not still then return end
      end
    end, { id = "me" })
    ld:on_lost(function(state) states[#states + 1] = state end)
    s:pump()
    local c = s:expect("create", "/le/_c_")
    assert.equal("me", c.data)
    local list = s:expect("children", "/le")
    c = c:ok(0)
    list:ok({ base(c.created) })
    assert.is_true(ld:is_leader())
    assert.equal(1, ld:terms())
    s:advance(1000)
    assert.same({ true }, slept)
    s:disconnect()
    assert.is_true(ld:is_leader())
    assert.same({ "SUSPENDED" }, states)
    s:expire()
    assert.same({ "SUSPENDED", "LOST" }, states)
    assert.is_false(ld:is_leader())
    assert.equal(false, slept[#slept]) -- the leader function heard it and returned
    s:reconnect()
    s:expect_none() -- one term (requeue not asked for)
  end)
end)
