-- A lock object or lease dropped while held is released in the background when collected
-- (with a warning), never blocking; the next holder gets it.
local core = require("zklock.core")
local util = require("support.util")
local fixture = require("support.fixture")

describe("garbage collection", function()
  local zk, a, b
  fixture.server({}, {}, function(s) zk = s end)
  setup(function()
    a = util.connect(zk.hosts)
    b = util.connect(zk.hosts)
  end)

  local wait_children = util.wait_children

  it("releases a mutex whose object was collected while held", function()
    -- in a function of its own, so no dead stack slot of this frame keeps the object alive
    local function take()
      local m = a:mutex("/gc/m")
      assert(m:acquire(5))
    end
    take()
    assert.is_true(wait_children(b, "/gc/m", 1, 1))
    collectgarbage()
    collectgarbage()
    local t0 = core.now()
    a:process() -- the release goes out with the next pump
    assert.is_true(core.now() - t0 < 500) -- never blocks
    -- collect again while both clients are pumped, should a finalizer run late in a long suite
    assert.is_true(util.wait_until(function()
      collectgarbage()
      return #util.children(b, "/gc/m") == 0
    end, 5, { a, b }))
    local m2 = b:mutex("/gc/m")
    assert(m2:acquire(2))
    assert(m2:release())
  end)

  it("releases a lease whose object was collected while held", function()
    local function take()
      local lease = assert(a:semaphore("/gc/s", 1):acquire(5))
      assert.truthy(lease:node())
    end
    take()
    -- the lease is unreachable now; collect (again, should a finalizer run late in a long suite)
    -- while both clients are pumped, so the background release goes out and is seen
    assert.is_true(util.wait_until(function()
      collectgarbage()
      return #util.children(b, "/gc/s/leases") == 0
    end, 5, { a, b }))
    local l2 = assert(b:semaphore("/gc/s", 1):acquire(2))
    assert(l2:release())
  end)
end)
