-- Fault injection on the give-up paths of the recipes built on plain calls (double barrier,
-- zookeeper_lock): a member or waiter whose create answer is lost (the lock finds its node by
-- its session prefix, also for a waiter closed meanwhile), and a member whose give-up delete
-- meets a connection loss, leave no node while their session lives (before, the node stayed
-- until the session ended: it counted as a barrier member, it held up the WriteLock queue); a
-- member whose create of "ready" loses its answer is through instead of giving up with "ready"
-- left behind. Through the public fault proxy (testing.proxy); every loop bounded.
--   busted --lua=lua5.4 spec/86-faults-giveup_spec.lua
--   busted --lua=luajit --run=luajit spec/86-faults-giveup_spec.lua
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

  it("a zookeeper_lock waiter whose create answer is lost finds its node by its session prefix and deletes it",
    function()
    local dir = "/faults/giveup/zl"
    local holder = obs:zookeeper_lock(dir)
    assert.are.equal(holder, holder:acquire(5))
    local c = util.connect(proxy.hosts, { session_timeout = 10, identity = "gz-1" })
    local other = c:zookeeper_lock("/faults/giveup/zl")
    local l = c:zookeeper_lock(dir)
    -- another object of the same client (same session prefix) already waits: its node is kept
    local ores
    c:spawn(function() ores = pack(other:acquire(60)) end)
    assert.is_truthy(util.wait_until(function() return #util.children(obs, dir) == 2 end, 10, { c }))
    proxy:send("delay 600", 5, pump_of({ c }))
    local res
    c:spawn(function() res = pack(l:acquire(30)) end)
    assert.is_truthy(util.wait_until(function() return #util.children(obs, dir) == 3 end, 10, { c }),
      "the waiter's create never reached the server")
    assert.is_nil(l:node(), "the create's answer was read too early")
    proxy:send("drop", 5, pump_of({ c }))
    proxy:send("heal", 5, pump_of({ c }))
    assert.is_truthy(util.wait_until(function() return res end, 20, { c }))
    assert.is_nil(res[1])
    assert.are.equal("ZCONNECTIONLOSS", res[3], tostring(res[2]))
    assert.is_truthy(util.wait_until(function() return #util.children(obs, dir) == 2 end, 10, { c }),
      "the node of the waiter whose create answer was lost stayed")
    assert.is_nil(l:node())
    -- the other waiter kept its node and gets the lock when the holder lets go
    assert.is_nil(ores)
    local kids = util.children(obs, dir) -- the holder's node and the other waiter's (node() is nil while waiting)
    assert.are.equal(2, #kids)
    local mine = util.basename(holder:node())
    assert.is_truthy(kids[1] == mine or kids[2] == mine)
    assert(holder:release())
    assert.is_truthy(util.wait_until(function() return ores end, 10, { c }))
    assert.are.equal(other, ores[1], tostring(ores[2]))
    assert(other:release())
    assert.are.same({}, util.children(obs, dir))
  end)

  it("a zookeeper_lock waiter closed while its create is in flight, whose answer is then lost, leaves no node #lua54",
    function()
    local dir = "/faults/giveup/zl-closed"
    local holder = obs:zookeeper_lock(dir)
    assert.are.equal(holder, holder:acquire(5))
    local c = util.connect(proxy.hosts, { session_timeout = 10, identity = "gc-1" })
    local l = c:zookeeper_lock(dir)
    proxy:send("delay 600", 5, pump_of({ c }))
    local co = c:spawn(function() l:acquire(30) end)
    assert.is_truthy(util.wait_until(function() return #util.children(obs, dir) == 2 end, 10, { c }),
      "the waiter's create never reached the server")
    assert.is_nil(l:node(), "the create's answer was read too early")
    assert(coroutine.close(co))
    proxy:send("drop", 5, pump_of({ c }))
    proxy:send("heal", 5, pump_of({ c }))
    assert.is_truthy(util.wait_until(function() return #util.children(obs, dir) == 1 end, 15, { c }),
      "the node of the closed waiter whose create answer was lost stayed")
    assert.are.equal("CONNECTED", c.state)
    assert.is_truthy(util.wait_until(function() return c:tasks() == 0 and c:pending() == 0 end, 5, { c }))
    assert(holder:release())
    assert.are.same({}, util.children(obs, dir))
  end)

  it("a barrier member whose create of 'ready' loses its answer is through, not given up with 'ready' left", function()
    local path = "/faults/giveup/ready"
    assert(obs:create(path, "", { parents = true }))
    local c = util.connect(proxy.hosts, { session_timeout = 10, identity = "gr-1" })
    local bar = c:double_barrier(path, 1) -- the member completes the count itself: it makes "ready"
    proxy:send("delay 600", 5, pump_of({ c }))
    local res
    c:spawn(function() res = pack(bar:enter(30)) end)
    assert.is_truthy(util.wait_until(function() return obs:exists(path .. "/ready") end, 15, { c }),
      "'ready' never reached the server")
    assert.is_nil(res, "the create's answer was read too early")
    proxy:send("drop", 5, pump_of({ c }))
    proxy:send("heal", 5, pump_of({ c }))
    assert.is_truthy(util.wait_until(function() return res end, 20, { c }))
    assert.is_true(res[1], tostring(res[2]))
    assert.are.equal(2, #util.children(obs, path)) -- the member and "ready"
    local out
    c:spawn(function() out = pack(bar:leave(10)) end)
    assert.is_truthy(util.wait_until(function() return out end, 20, { c }))
    assert.is_true(out[1], tostring(out[2]))
    assert.are.same({}, util.children(obs, path))
  end)
end)
