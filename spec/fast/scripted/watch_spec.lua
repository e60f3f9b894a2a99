-- The scripted tier (no ZooKeeper server): plain reads with watches (zklock.internal.watch) against the
-- fake ZooKeeper: one armed watch shared per path and kind, armed again once it fired, and ended
-- by the loss of the session.
--   busted spec/fast/scripted/watch_spec.lua
local scripted = require("support.scripted")

describe("scripted watches #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("a second read shares the armed watch (sent without one); after it fired the next read arms again", function()
    local got = {}
    local function reader(name)
      return function()
        local data, _, w = s.client:get("/w", { watch = true })
        got[name .. " data"] = data
        got[name .. " fired"] = w:wait(5)
        return w
      end
    end
    local a = s:spawn(reader("a"))
    local r = s:expect("get", "/w")
    assert.is_true(r.watch)
    r:ok("v1")
    local b = s:spawn(reader("b"))
    r = s:expect("get", "/w")
    assert.is_false(r.watch) -- shared: no second ZooKeeper watch
    r:ok("v1")
    assert.equal(1, s.fake.armed("/w"))
    assert.equal(1, s:fire("changed", "/w"))
    assert.same({ ["a data"] = "v1", ["b data"] = "v1", ["a fired"] = "changed", ["b fired"] = "changed" }, got)
    assert.equal(a:returned(), b:returned()) -- one watch object
    local c = s:spawn(reader("c"))
    r = s:expect("get", "/w")
    assert.is_true(r.watch) -- armed again
    r:ok("v2")
    assert.equal(1, s.fake.armed("/w"))
    assert.is_false(c.done)
  end)

  it("exists on a missing node arms a watch that a create fires", function()
    local t = s:spawn(function()
      local st, w = s.client:exists("/n", { watch = true })
      return st, w:wait(5)
    end)
    local r = s:expect("exists", "/n")
    assert.is_true(r.watch)
    r:fail("ZNONODE")
    assert.equal(1, s:fire("created", "/n"))
    assert.same({ false, "created" }, { t:returned() })
  end)

  it("the session's loss ends the wait (ESESSION); the next read does not share the dead watch", function()
    local t = s:spawn(function()
      local _, w = s.client:children("/w", { watch = true })
      return w:wait(30)
    end)
    s:expect("children", "/w"):ok({ "a" })
    s:expire()
    local _, code = t:failed()
    assert.equal("ESESSION", code)
    s:reconnect()
    s:spawn(function() return s.client:children("/w", { watch = true }) end)
    local r = s:expect("children", "/w")
    assert.is_true(r.watch)
  end)

  it("a wait times out on the fake clock; the watch stays armed for the next wait", function()
    local t = s:spawn(function()
      local _, _, w = s.client:get("/w", { watch = true })
      local a, _, code = w:wait(2)
      return a, code, w
    end)
    s:expect("get", "/w"):ok("x")
    s:advance(1000)
    assert.is_false(t.done)
    s:advance(1000)
    local a, code, w = t:returned()
    assert.is_nil(a)
    assert.equal("ETIMEDOUT", code)
    assert.is_nil(w:fired())
    s:spawn(function() return s.client:get("/w", { watch = true }) end)
    assert.is_false(s:expect("get", "/w").watch) -- still armed: shared
  end)
end)
