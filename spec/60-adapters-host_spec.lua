-- Host adapters: the client's host API (connect{ wait = false }, next_timeout_ms, pending, the
-- client as a cqueues pollable), zklock inside a cqueues controller and inside a libuv loop
-- (luv), against a real ZooKeeper. Debian's lua-cqueues and lua-luv ship builds for Lua 5.1
-- (loaded by LuaJIT) and 5.4, so every describe block runs in both busted runs; the cqueues and
-- luv blocks are skipped when their module is missing (spec/support/deps.lua: a failure under CI=true).
-- This file: the client's host API (connect{ wait = false }, next_timeout_ms, pending, pollable).
--   busted --lua=lua5.4 spec/60-adapters-host_spec.lua
--   busted --lua=luajit --run=luajit spec/60-adapters-host_spec.lua
-- Shared contention test and timer meter: spec/support/adapters.lua.
local zklock = require("zklock")
local core = require("zklock.core")
local fixture = require("support.fixture")
local H = require("support.adapters")

local now_s, base_path = H.now_s, H.base_path

describe("client host API #adapters", function()
  local zk

  fixture.server({}, {}, function(s) zk = s end)

  local function raises(fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "expected an error")
    return tostring(err)
  end

  it("connect{ wait = false } returns at once in CONNECTING; "
     .. "operations started meanwhile go out once connected", function()
    local t0 = now_s()
    local c = assert(zklock.connect(zk.hosts, { wait = false, identity = "no-wait" }))
    assert.is_true(now_s() - t0 < 0.5, "connect{ wait = false } waited")
    assert.are.equal("CONNECTING", c.state)
    local seen = {}
    c:on_session(function(state) seen[#seen + 1] = state end)
    local path = base_path("no-wait")
    -- the main thread blocks in create (pumping) until the session is up and the reply is in
    assert.are.equal(path, assert(c:create(path, "x", { parents = true })))
    assert.are.equal("CONNECTED", c.state)
    assert.are.same({ "CONNECTED" }, seen)
    local m = c:mutex(path .. "/lock")
    assert(m:acquire(5))
    assert(m:release())
    c:close()
  end)

  it("connect{ wait = false } to a server that is not there: "
     .. "the client waits, operations time out from the call", function()
    local t0 = now_s()
    local c = assert(zklock.connect("127.0.0.1:1", { wait = false }))
    assert.is_true(now_s() - t0 < 0.5, "connect{ wait = false } waited")
    assert.are.equal("CONNECTING", c.state)
    t0 = now_s()
    local ok, err, code = c:mutex("/host-api/nobody"):acquire(0.3)
    local waited = now_s() - t0
    assert.is_nil(ok)
    assert.are.equal("ETIMEDOUT", code, err)
    assert.is_true(waited >= 0.28 and waited < 1.5, "waited " .. waited .. " s for a 0.3 s timeout")
    assert.are.equal(0, c:pending())
    c:close()
  end)

  it("connect rejects a wait option that is not a boolean, naming it", function()
    for _, v in ipairs({ "no", 0, {}, "false" }) do
      local msg = raises(zklock.connect, zk.hosts, { wait = v })
      assert.is_truthy(msg:find("bad argument #2 to 'connect'", 1, true), msg)
      assert.is_truthy(msg:find("option 'wait': expected a boolean", 1, true), msg)
    end
    -- and names it among the known options
    local msg = raises(zklock.connect, zk.hosts, { wiat = false })
    assert.is_truthy(msg:find("unknown option 'wiat'", 1, true), msg)
    assert.is_truthy(msg:find("(known: ", 1, true) and msg:find("wait", msg:find("(known: ", 1, true), true), msg)
    -- wait = true is the default: connected on return
    local c = assert(zklock.connect(zk.hosts, { wait = true }))
    assert.are.equal("CONNECTED", c.state)
    c:close()
  end)

  it("next_timeout_ms() and pending() follow operations in flight and the builtin scheduler", function()
    local a = assert(zklock.connect(zk.hosts, { session_timeout = 6 }))
    local b = assert(zklock.connect(zk.hosts))
    local path = base_path("host-api")
    local holder = b:mutex(path)
    assert(holder:acquire(5))

    -- idle: nothing pending; the deadline is the core's (pings: within the session timeout)
    assert.are.equal(0, a:pending())
    local ms = a:next_timeout_ms()
    assert.is_true(math.type == nil or math.type(ms) == "integer", "not an integer: " .. tostring(ms))
    assert.is_true(ms >= -1 and ms <= 6000, "next_timeout_ms() = " .. ms)

    -- a spawned coroutine ready to run: pending, and process() is due at once
    local res
    a:spawn(function() res = { a:mutex(path):acquire(30) } end)
    assert.are.equal(1, a:pending())
    assert.are.equal(0, a:next_timeout_ms())
    assert.are.equal(0, a:timeout())

    -- now it waits for the lock: one operation in flight with a waiter, nothing ready
    a:process()
    assert.is_nil(res)
    assert.are.equal(1, a:pending())

    -- a sleeping coroutine bounds the deadline (the core alone would say up to seconds)
    local slept = false
    a:spawn(function() a:sleep(0.05); slept = true end)
    a:process() -- starts it: it sleeps
    assert.are.equal(1, a:pending()) -- a sleep is not an operation
    ms = a:next_timeout_ms()
    assert.is_true(ms >= 0 and ms <= 50, "next_timeout_ms() = " .. ms .. " with a 50 ms sleeper")
    assert.is_true(a:timeout() <= 0.05)

    -- a host-style pump: wait for the fd or the deadline, then process()
    local function pump_until(cond, limit)
      local deadline = now_s() + limit
      while not cond() do
        if now_s() > deadline then return false end
        local wait = a:next_timeout_ms()
        if wait < 0 or wait > 50 then wait = 50 end
        core.poll({ a:fd() }, wait)
        a:process()
      end
      return true
    end
    assert.is_true(pump_until(function() return slept end, 5))
    assert(holder:release())
    assert.is_true(pump_until(function() return res ~= nil end, 10))
    assert.are.equal("table", type(res[1]), tostring(res[2]))
    assert.are.equal(0, a:pending())
    -- the lock is held by a dead coroutine now; pending() counts operations, not holds
    b:close()

    a:close()
    assert.are.equal(0, a:pending())
    assert.are.equal(-1, a:next_timeout_ms())
    assert.is_nil(a:pollfd())
    assert.are.equal(0, a:timeout())
    assert.are.equal("r", a:events())
  end)

  it("the client is a cqueues-style pollable: pollfd(), events(), timeout()", function()
    local a = assert(zklock.connect(zk.hosts))
    assert.are.equal(a:fd(), a:pollfd())
    assert.are.equal("r", a:events())
    local ms, t = a:next_timeout_ms(), a:timeout()
    if ms < 0 then
      assert.is_nil(t)
    else
      assert.is_true(type(t) == "number" and t >= 0 and t <= ms / 1000 + 0.001)
    end
    a:close()
  end)
end)
