-- Fault injection on the give-up paths of the recipes built on plain calls (the double barrier
-- here; zookeeper_lock's give-up delete is the same code): a member whose create answer is lost,
-- and a member whose give-up delete meets a connection loss, leave no node behind while their
-- session lives (before, the node stayed until the session ended and counted as a member).
-- Through the public fault proxy (testing.proxy); every loop bounded.
--   busted --lua=lua5.4 spec/90-faults-giveup_spec.lua
--   busted --lua=luajit --run=luajit spec/90-faults-giveup_spec.lua
local util = require("support.util")
local H = require("support.faults")

local pack = H.pack

describe("faults: give-up paths of the plain-call recipes leave no node #faults", function()
  local proxy, obs
  local fx = H.proxied(function(f) proxy, obs = f.proxy, f.obs end)
  local pump_of = fx.pump_of

  it("a barrier member whose create answer is lost deletes its node once reconnected", function()
    local path = "/faults/giveup/barrier"
    assert(obs:create(path, "", { parents = true }))
    -- a session that outlives the fault by far: the node can only go by the member's own delete
    local c = util.connect(proxy.hosts, { session_timeout = 10, identity = "gb-1" })
    local bar = c:double_barrier(path, 2)
    proxy:send("delay 600", 5, pump_of({ c })) -- every request and answer 0.6 s late
    local res
    c:spawn(function() res = pack(bar:enter(30)) end)
    -- the create is applied: its answer is still on its way through the proxy; lose it
    assert.is_truthy(util.wait_until(function() return #util.children(obs, path) == 1 end, 10, { c }),
      "the member's create never reached the server")
    assert.is_nil(bar:node(), "the create's answer was read too early")
    proxy:send("drop", 5, pump_of({ c }))
    proxy:send("heal", 5, pump_of({ c })) -- closes the connection: a reconnect, the same session
    assert.is_truthy(util.wait_until(function() return res end, 20, { c }))
    assert.is_nil(res[1])
    assert.are.equal("ZCONNECTIONLOSS", res[3], tostring(res[2]))
    assert.is_truthy(util.wait_until(function() return #util.children(obs, path) == 0 end, 10, { c }),
      "the node of the member that gave up stayed")
    assert.are.equal("CONNECTED", c.state)
    -- its background delete is answered: nothing left in flight
    assert.is_truthy(util.wait_until(function() return c:pending() == 0 end, 5, { c }))
    assert.truthy(tostring(bar):find("idle", 1, true), tostring(bar))
  end)

  it("a barrier member whose give-up delete meets a connection loss deletes its node once reconnected", function()
    local path = "/faults/giveup/timeout"
    local c = util.connect(proxy.hosts, { session_timeout = 10, identity = "gt-1" })
    local bar = c:double_barrier(path, 2)
    local res
    c:spawn(function() res = pack(bar:enter(2)) end)
    assert.is_truthy(util.wait_until(function() return #util.children(obs, path) == 1 end, 10, { c }))
    util.drive({ c }, 0.4) -- its listing answered: it waits for "ready" (no request in flight)
    -- its timeout comes while nothing gets through: the delete of its node is lost with the
    -- connection (the C client gives up on it after 2/3 of the session timeout)
    proxy:send("blackhole", 5, pump_of({ c }))
    assert.is_truthy(util.wait_until(function() return res end, 20, { c }))
    assert.are.equal("ETIMEDOUT", res[3], tostring(res[2]))
    assert.are.equal(1, #util.children(obs, path)) -- the delete did not get through
    proxy:send("heal", 5, pump_of({ c }))
    assert.is_truthy(util.wait_until(function() return #util.children(obs, path) == 0 end, 10, { c }),
      "the node of the member that gave up stayed")
    assert.are.equal("CONNECTED", c.state)
    assert.is_nil(bar:node())
    -- its background delete is answered: nothing left in flight
    assert.is_truthy(util.wait_until(function() return c:pending() == 0 end, 5, { c }))
  end)
end)
