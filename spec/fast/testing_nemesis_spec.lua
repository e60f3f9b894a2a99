-- The fast tier (no ZooKeeper server): the nemesis's schedule is a pure function of its seed and
-- options (same seed, same schedule), honours gap, duration, quiet and the fault mix, and bad
-- options raise naming the option.
--   busted --lua=lua5.4 spec/fast/testing_nemesis_spec.lua
local testing = require("zklock.testing")

-- stand-ins: plan() only counts targets
local function targets()
  return { server = {}, nets = { {}, {} }, clients = { {}, {}, {} } }
end

local function nem(seed, extra)
  local o = targets()
  o.seed = seed
  for k, v in pairs(extra or {}) do o[k] = v end
  return testing.nemesis(o)
end

describe("zklock.testing.nemesis schedule #fast", function()
  it("the same seed gives the same schedule; another seed another one", function()
    local faults = { "pause", "restart", "kill", "expire", "cut", "blackhole", "drop_replies", "delay", "reset" }
    local a = nem(12345, { faults = faults }):plan(120)
    local b = nem(12345, { faults = faults }):plan(120)
    assert.is_true(#a >= 15)
    assert.are.same(a, b)
    local c = nem(12346, { faults = faults }):plan(120)
    assert.are_not.same(a, c)
    -- the generator itself is the same under every Lua (Park-Miller in doubles)
    local r = testing.rng(1)
    local first = { r(), r(1, 6), r(1, 6) }
    local r2 = testing.rng(1)
    assert.are.same(first, { r2(), r2(1, 6), r2(1, 6) })
    assert.is_true(first[1] >= 0 and first[1] < 1)
  end)

  it("steps keep to gap, duration, quiet, the mix and the target counts", function()
    local steps = nem(7, { faults = { cut = 1, expire = 3 }, gap = { 1, 2 }, duration = { 0.5, 1 }, quiet = 5 })
      :plan(60)
    assert.is_true(#steps > 10)
    local prev_end, seen = 0, {}
    for _, st in ipairs(steps) do
      seen[st.fault] = (seen[st.fault] or 0) + 1
      assert.is_true(st.fault == "cut" or st.fault == "expire")
      assert.is_true(st.at >= prev_end + 1 - 1e-9, "gap kept")
      assert.is_true(st.seconds >= 0.5 and st.seconds <= 1)
      assert.is_true(st.at + st.seconds <= 55 + 1e-9, "quiet tail kept")
      assert.is_true(st.target >= 1 and st.target <= (st.fault == "cut" and 2 or 3))
      prev_end = st.at + (st.fault == "expire" and 0.5 or st.seconds)
    end
    assert.is_true(seen.expire > seen.cut, "the weights count")
  end)

  it("partition steps: a minority drawn from the seed, the same for the same seed; other faults' draws unchanged",
    function()
    -- a stand-in ensemble with links (what ensemble{ partitions = true } sets)
    local function ens(n)
      local e = { nodes = {}, links = {} }
      for i = 1, n do e.nodes[i] = {}; e.links[i] = {} end
      return e
    end
    local five = ens(5)
    local function plan(seed) return testing.nemesis{ seed = seed, ensemble = five,
      faults = { "partition", "isolate_leader", "pause" } }:plan(300) end
    local a, b = plan(3), plan(3)
    assert.are.same(a, b)
    assert.are_not.same(a, plan(4))
    local sizes = {}
    for _, st in ipairs(a) do
      if st.fault == "partition" then
        local g1, g2 = st.groups[1], st.groups[2]
        sizes[#g1] = true
        assert.is_true(#g1 >= 1 and #g1 <= 2)              -- a minority of five
        assert.are.equal(5, #g1 + #g2)
        assert.truthy(g1[1] == st.target or g1[2] == st.target)
        local seen = {}
        for _, i in ipairs(g1) do seen[i] = true end
        for _, i in ipairs(g2) do assert.is_nil(seen[i]); seen[i] = true end
      end
    end
    assert.is_true(sizes[1] and sizes[2])
    -- the default mix of an ensemble with links offers both; one without links refuses them
    local names = {}
    for _, m in ipairs(testing.nemesis{ seed = 1, ensemble = five }.mix) do names[m.name] = true end
    assert.is_true(names.partition and names.isolate_leader)
    local plain = { nodes = { {}, {}, {} } }
    local msg = select(2, pcall(testing.nemesis, { seed = 1, ensemble = plain, faults = { "partition" } }))
    assert.truthy(tostring(msg):find("partitions = true", 1, true), msg)
    -- a schedule without partition faults is what it was before they existed
    local p1 = testing.nemesis{ seed = 9, ensemble = five, faults = { "pause", "kill_leader" } }:plan(100)
    local p2 = testing.nemesis{ seed = 9, ensemble = { nodes = five.nodes }, faults = { "pause", "kill_leader" } }
      :plan(100)
    assert.are.same(p1, p2)
  end)

  it("a fixed schedule is used as given", function()
    local sched = { { at = 1, fault = "cut", target = 2, seconds = 1.5 }, { at = 4, fault = "pause" } }
    local steps = nem(1, { schedule = sched }):plan(10)
    assert.are.same({ at = 1, fault = "cut", target = 2, seconds = 1.5 }, steps[1])
    assert.are.equal("pause", steps[2].fault)
    assert.are.equal(1, steps[2].target)
  end)

  it("bad options raise naming the option", function()
    local function msg(fn)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      return tostring(err)
    end
    assert.truthy(msg(function() testing.nemesis({}) end):find("seed", 1, true))
    assert.truthy(msg(function() nem(1, { faults = { "nosuch" } }) end):find("faults", 1, true))
    assert.truthy(msg(function() testing.nemesis({ seed = 1, faults = { "cut" } }) end):find("needs nets", 1, true))
    assert.truthy(msg(function() nem(1, { gap = { 3, 1 } }) end):find("gap", 1, true))
    assert.truthy(msg(function() nem(1, { faults = { kill_leader = 1 } }) end):find("ensemble", 1, true))
    assert.truthy(msg(function() nem(1):plan(0) end):find("plan", 1, true))
    assert.truthy(msg(function() testing.nemesis({ seed = 1, server = {}, schedule = { { fault = "cut" } } }) end)
      :find("schedule", 1, true))
  end)
end)
