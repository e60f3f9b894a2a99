-- How leader:sleep() and latch:await() wait: woken by the change they wait for (a loss, a close,
-- a handover), never by a clock that looks again every few milliseconds. The waits count how
-- often they look at leadership: a polling wait looks dozens of times per second, an
-- event-driven one a bounded number of times however long it waits. Against a real ZooKeeper.
--   busted --lua=lua5.4 spec/54-leader-waits_spec.lua
--   busted --lua=luajit --run=luajit spec/54-leader-waits_spec.lua
local util = require("support.util")
local fixture = require("support.fixture")

-- Count the calls of obj:method() made through obj (a wait calls self:<method>()).
local function counting(obj, method)
  local orig, n = obj[method], { 0 }
  obj[method] = function(...)
    n[1] = n[1] + 1
    return orig(...)
  end
  return n
end

-- Looks a wait may take however long it lasts: the first, one per change it is woken for, the
-- last, and a few for wake-ups that are not about it (another coroutine's change).
local LOOKS = 6

describe("leader waits", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  it("latch:await blocking the main thread looks at leadership only when something changed", function()
    local c1, c2 = connect("a"), connect("b")
    local l1 = c1:latch("/lw/block", { id = "one" })
    assert.is_true(l1:await(20))
    local l2 = c2:latch("/lw/block", { id = "two" })
    assert.is_true(util.drive_until({ c1, c2 }, function() return util.child_count(c1, "/lw/block") == 2 end, 20))
    local looks = counting(l2, "is_held")
    local t0 = util.now()
    util.assert_code("ETIMEDOUT", util.pack(l2:await(0.6)))
    assert.is_true(util.now() - t0 >= 0.55, "await returned before its timeout")
    assert.is_true(looks[1] <= LOOKS, ("a 0.6 s await looked at leadership %d times"):format(looks[1]))
    l2:close()
    l1:close()
  end)

  it("latch:await in a coroutine wakes on the handover, and on its client's close", function()
    local c1, c2 = connect("a"), connect("b")
    local l1 = c1:latch("/lw/co", { id = "one" })
    assert.is_true(l1:await(20))
    local l2 = c2:latch("/lw/co", { id = "two" })
    local looks = counting(l2, "is_held")
    local res
    c2:spawn(function() res = util.pack(l2:await(60)) end)
    util.drive({ c1, c2 }, 0.6) -- waiting all along: l1 leads
    assert.is_nil(res)
    assert.is_true(looks[1] <= LOOKS, ("a waiting await looked at leadership %d times in 0.6 s"):format(looks[1]))
    assert.is_true(l1:close())
    assert.is_true(util.drive_until({ c1, c2 }, function() return res ~= nil end, 20))
    assert.is_true(res[1], tostring(res[2]))
    assert.is_true(looks[1] <= 2 * LOOKS, ("looked %d times"):format(looks[1]))
    -- a wait with no limit (a new latch on client c, waiting behind l2) ends when end_it() is
    -- called, with ECLOSED and a message naming what was closed
    local function ended_by(c, id, end_it, words)
      local l = c:latch("/lw/co", { id = id })
      local r
      c:spawn(function() r = util.pack(l:await()) end)
      util.drive({ c, c2 }, 0.2)
      assert.is_nil(r)
      end_it(l)
      assert.is_true(util.drive_until({ c2, c }, function() return r ~= nil end, 5))
      util.assert_code("ECLOSED", r)
      assert.matches(words, r[2], 1, true)
    end
    ended_by(c1, "three", function() c1:close() end, "its client was closed while waiting")
    ended_by(connect("c"), "four", function(l) l:close() end, "the latch was closed while waiting")
    l2:close()
  end)

  it("leader:sleep sleeps its whole time without looking, and ends at once on close", function()
    local c = connect("s")
    local looks, slept, started
    local l = c:leader("/lw/sleep", function(ld)
      looks = counting(ld, "is_leader")
      started = util.now()
      slept = { ld:sleep(0.6) } -- the whole time: still leader
      slept[2] = util.now() - started
      slept[3] = ld:sleep(60) -- ended by close() below
    end, { id = "x" })
    assert.is_true(util.drive_until({ c }, function() return slept ~= nil end, 20))
    assert.is_true(slept[1])
    assert.is_true(slept[2] >= 0.55, "sleep returned early")
    assert.is_true(looks[1] <= LOOKS, ("a 0.6 s leader sleep looked %d times"):format(looks[1]))
    util.drive({ c }, 0.2)
    assert.is_nil(slept[3])
    local t0 = util.now()
    l:close()
    assert.is_true(util.drive_until({ c }, function() return slept[3] ~= nil end, 20))
    assert.is_false(slept[3])
    assert.is_true(util.now() - t0 < 30, "the close did not end the sleep")
    assert.is_true(util.drive_until({ c }, function() return util.child_count(c, "/lw/sleep") == 0 end, 20))
  end)
end)
