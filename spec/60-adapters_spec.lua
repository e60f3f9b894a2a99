-- Host adapters: the client's host API (connect{ wait = false }, next_timeout_ms, pending, the
-- client as a cqueues pollable), zklock inside a cqueues controller and inside a libuv loop
-- (luv), against a real ZooKeeper. Debian's lua-cqueues and lua-luv ship builds for Lua 5.1
-- (loaded by LuaJIT) and 5.4, so every describe block runs in both busted runs; the cqueues and
-- luv blocks are pending when their module is missing.
--   busted --lua=lua5.4 spec/60-adapters_spec.lua
--   busted --lua=luajit --run=luajit spec/60-adapters_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local core = require("zklock.core")

local function try_require(name)
  local ok, mod = pcall(require, name)
  if ok then return mod end
  return nil, mod
end

local function now_s() return core.now() / 1000 end

local N_COROUTINES, N_LOCKS = 1000, 10
local MAX_LATENESS = 0.2 -- s
local TICK = 0.02        -- s: period of the unrelated timer

-- Shared bookkeeping of the contention test: per lock, a counter updated across a yield inside
-- the critical section, the number of holders right now and the most ever seen.
local function new_tally()
  local t = { counter = {}, holders = {}, max_holders = {}, done = 0, errors = {} }
  for k = 1, N_LOCKS do t.counter[k], t.holders[k], t.max_holders[k] = 0, 0, 0 end
  return t
end

-- The body of one contending coroutine. `pause` yields to the host loop inside the critical
-- section (client:sleep goes through the adapter's sleep).
local function contend(t, client, lock, k, pause)
  assert(lock:acquire(60))
  t.holders[k] = t.holders[k] + 1
  if t.holders[k] > t.max_holders[k] then t.max_holders[k] = t.holders[k] end
  local v = t.counter[k]
  pause()
  t.counter[k] = v + 1
  t.holders[k] = t.holders[k] - 1
  assert(lock:release())
  t.done = t.done + 1
end

local function check_tally(t)
  assert.are.same({}, t.errors)
  assert.are.equal(N_COROUTINES, t.done)
  for k = 1, N_LOCKS do
    assert.are.equal(N_COROUTINES / N_LOCKS, t.counter[k], "counter of lock " .. k)
    assert.are.equal(1, t.max_holders[k], "simultaneous holders of lock " .. k)
  end
end

local function assert_no_nodes(hosts, base)
  local c = assert(zklock.connect(hosts))
  for k = 1, N_LOCKS do
    local names, _, code = c:children(base .. "/lock-" .. k)
    if names then
      assert.are.same({}, names, "nodes left under lock " .. k)
    else
      assert.are.equal("ZNONODE", code)
    end
  end
  c:close()
end

local run_id = 0
local function base_path(name)
  run_id = run_id + 1
  return ("/adapters/%s-%d-%d"):format(name, os.time(), run_id)
end

-- The contention test's N_LOCKS mutexes under `base`, one object per lock for each of a and b.
local function lock_objects(a, b, base)
  local locks = { [a] = {}, [b] = {} }
  for k = 1, N_LOCKS do
    locks[a][k] = a:mutex(base .. "/lock-" .. k)
    locks[b][k] = b:mutex(base .. "/lock-" .. k)
  end
  return locks
end

-- Start the N_COROUTINES contenders with spawn(client, fn), alternately on a and b; each calls
-- after_each_one() when it is done (or failed).
local function start_contenders(t, a, b, locks, spawn, after_each_one)
  for i = 1, N_COROUTINES do
    local client = (i % 2 == 0) and a or b
    local k = i % N_LOCKS + 1
    spawn(client, function()
      local ok, err = pcall(contend, t, client, locks[client][k], k, function() client:sleep(0.001) end)
      if not ok then t.errors[#t.errors + 1] = tostring(err) end
      after_each_one()
    end)
  end
end

-- The contention test's checks: the tally, the unrelated timer (tm: ticks, max_late, max_at) and
-- no node left behind.
local function check_contention(label, t, tm, t0, elapsed, hosts, base)
  check_tally(t)
  print(("\n  [%s %s] %d coroutines, %d locks, 2 clients: %.2f s; timer ticks %d, max lateness %.1f ms at +%.2f s")
    :format(label, jit and "luajit" or _VERSION, N_COROUTINES, N_LOCKS, elapsed, tm.ticks, tm.max_late * 1000,
      tm.max_at - t0))
  assert.is_true(tm.max_late < MAX_LATENESS, ("timer %.3f s late"):format(tm.max_late))
  assert.is_true(tm.ticks >= math.floor(elapsed / TICK / 2), "the timer hardly ran: " .. tm.ticks .. " ticks")
  assert_no_nodes(hosts, base)
end

----------------------------------------------------------------------------- host API

describe("client host API #adapters", function()
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() if zk then zk:stop() end end)

  local function raises(fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "expected an error")
    return tostring(err)
  end

  it("connect{ wait = false } returns at once in CONNECTING; operations started meanwhile go out once connected", function()
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

  it("connect{ wait = false } to a server that is not there: the client waits, operations time out from the call", function()
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

----------------------------------------------------------------------------- cqueues

describe("cqueues adapter #adapters", function()
  local cqueues, why = try_require("cqueues")
  if not cqueues then
    pending("lua-cqueues is not installed (apt-get install lua-cqueues): " .. tostring(why))
    return
  end
  local condition = require("cqueues.condition")
  local zcq = require("zklock.adapters.cqueues")
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() if zk then zk:stop() end end)

  it("1,000 coroutines on 10 locks: exact counters, one holder at a time, an unrelated timer on time", function()
    local cq = cqueues.new()
    local a = assert(zklock.connect(zk.hosts, { identity = "cq-a" }))
    local b = assert(zklock.connect(zk.hosts, { identity = "cq-b" }))
    zcq.attach(a, cq)
    zcq.attach(b, cq)
    local base = base_path("cqueues")
    local locks = lock_objects(a, b, base)
    local t = new_tally()
    local finished = condition.new()
    local stop_timer = false
    local tm = { ticks = 0, max_late = 0, max_at = 0 }

    -- an unrelated periodic timer in the same controller
    cq:wrap(function()
      local next_at = cqueues.monotime() + TICK
      while not stop_timer do
        cqueues.sleep(math.max(0, next_at - cqueues.monotime()))
        local late = cqueues.monotime() - next_at
        if late > tm.max_late then tm.max_late, tm.max_at = late, now_s() end
        tm.ticks = tm.ticks + 1
        next_at = next_at + TICK
        if late > TICK then next_at = cqueues.monotime() + TICK end
      end
    end)

    local t0 = now_s()
    start_contenders(t, a, b, locks, function(_, fn) cq:wrap(fn) end, function()
      if t.done + #t.errors == N_COROUTINES then finished:signal() end
    end)
    cq:wrap(function()
      if t.done + #t.errors < N_COROUTINES then finished:wait(120) end
      stop_timer = true
      a:close()
      b:close()
    end)
    local ok, err = cq:loop(180)
    local elapsed = now_s() - t0
    assert(ok, err)
    assert.is_true(cq:empty(), "the pumps did not end with their clients")
    check_contention("cqueues", t, tm, t0, elapsed, zk.hosts, base)
  end)

  it("acquire timeouts fire on time; the main thread and nested coroutines still block", function()
    local cq = cqueues.new()
    local a = assert(zklock.connect(zk.hosts))
    local b = assert(zklock.connect(zk.hosts))
    zcq.attach(a, cq)
    local path = base_path("cqueues-timeout")
    local holder = b:mutex(path)
    assert(holder:acquire(5)) -- b is not attached: the main thread blocks while it acquires
    local res, waited
    local nested_ok
    cq:wrap(function()
      local t0 = cqueues.monotime()
      res = { a:mutex(path):acquire(0.3) }
      waited = cqueues.monotime() - t0
      -- a plain coroutine inside a cq coroutine is not the controller's: owns() is false, it blocks
      local co = coroutine.create(function() return a:exists(path) end)
      local ok, v = coroutine.resume(co)
      nested_ok = ok and v ~= nil and coroutine.status(co) == "dead"
      a:close()
    end)
    assert(cq:loop(30))
    assert.is_nil(res[1])
    assert.are.equal("ETIMEDOUT", res[3])
    assert.is_true(waited >= 0.28 and waited < 1.5, "waited " .. waited .. " s for a 0.3 s timeout")
    assert.is_true(nested_ok)
    assert(holder:release())
    b:close()
  end)

  it("close() wakes waiting coroutines with ECLOSED and ends the pump", function()
    local cq = cqueues.new()
    local a = assert(zklock.connect(zk.hosts))
    local b = assert(zklock.connect(zk.hosts))
    zcq.attach(a, cq)
    local path = base_path("cqueues-close")
    local holder = b:mutex(path)
    assert(holder:acquire(5))
    local codes = {}
    for i = 1, 5 do
      cq:wrap(function()
        local ok, _, code = a:mutex(path):acquire(30)
        codes[i] = ok and "acquired" or code
      end)
    end
    cq:wrap(function()
      cqueues.sleep(0.3)
      a:close()
    end)
    local t0 = now_s()
    assert(cq:loop(10))
    assert.is_true(now_s() - t0 < 5)
    assert.are.same({ "ECLOSED", "ECLOSED", "ECLOSED", "ECLOSED", "ECLOSED" }, codes)
    assert(holder:release())
    b:close()
  end)

  it("cqueues.poll(client) lets a hand-written loop drive the client; a closed client does not block it", function()
    local a = assert(zklock.connect(zk.hosts))
    local path = base_path("cqueues-pollable")
    local cq = cqueues.new()
    local got, polls, after_close
    cq:wrap(function()
      -- the builtin scheduler's coroutine, driven by a cqueues loop: the client is the pollable
      a:spawn(function() got = a:create(path, "x", { parents = true }) end)
      polls = 0
      while not got do
        cqueues.poll(a)
        polls = polls + 1
        a:process()
      end
      -- cqueues must forget the fd before the client closes it (zcq.attach does this for you);
      -- then a poll on the closed client returns at once
      cqueues.cancel(a:fd())
      a:close()
      local t0 = cqueues.monotime()
      cqueues.poll(a)
      after_close = cqueues.monotime() - t0
    end)
    assert(cq:loop(10))
    assert.are.equal(path, got)
    assert.is_true(polls >= 1)
    assert.is_true(after_close < 0.5, "a poll on a closed client took " .. tostring(after_close) .. " s")
  end)

  it("an attached client polls through its own pollable (no wrapper) and counts waiters in pending()", function()
    local cq = cqueues.new()
    local a = assert(zklock.connect(zk.hosts))
    local b = assert(zklock.connect(zk.hosts))
    zcq.attach(a, cq)
    local path = base_path("cqueues-pending")
    local holder = b:mutex(path)
    assert(holder:acquire(5))
    local seen, res = nil, {}
    for _ = 1, 3 do
      cq:wrap(function()
        local m = a:mutex(path)
        local r = { m:acquire(10) }
        res[#res + 1] = r
        if r[1] then m:release() end
      end)
    end
    cq:wrap(function()
      cqueues.sleep(0.3)
      seen = a:pending() -- three coroutines wait on the lock
      b:close()          -- the holder's session ends: its node goes, the waiters get the lock in turn
      while #res < 3 do cqueues.sleep(0.01) end
      a:close()
    end)
    assert(cq:loop(20))
    assert.are.equal(3, seen)
    for i = 1, 3 do assert.are.equal("table", type(res[i][1]), tostring(res[i][2])) end
    assert.are.equal(0, a:pending())
  end)
end)

----------------------------------------------------------------------------- luv

describe("luv adapter #adapters", function()
  local uv, why = try_require("luv")
  if not uv then
    pending("lua-luv is not installed (apt-get install lua-luv): " .. tostring(why))
    return
  end
  local zluv = require("zklock.adapters.luv")
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() if zk then zk:stop() end end)

  -- uv.run() with a watchdog: stops the loop after `limit` seconds (returns false then)
  local function run_loop(limit)
    local expired = false
    local dog = uv.new_timer()
    dog:start(math.floor(limit * 1000), 0, function() expired = true; uv.stop() end)
    dog:unref()
    uv.run()
    if not dog:is_closing() then dog:close() end
    uv.run("nowait") -- let the close callbacks run
    return not expired
  end

  it("1,000 coroutines on 10 locks: exact counters, one holder at a time, an unrelated timer on time", function()
    local a = assert(zklock.connect(zk.hosts, { identity = "uv-a" }))
    local b = assert(zklock.connect(zk.hosts, { identity = "uv-b" }))
    local errors = {}
    local on_error = function(err) errors[#errors + 1] = err end
    zluv.attach(a, uv, { on_error = on_error })
    zluv.attach(b, uv, { on_error = on_error })
    local base = base_path("luv")
    local locks = lock_objects(a, b, base)
    local t = new_tally()

    -- an unrelated timer in the same loop, re-armed every TICK; lateness is measured against
    -- the loop time it was armed at (a libuv repeat timer drifts by design)
    local tm = { ticks = 0, max_late = 0, max_at = 0 }
    local timer = uv.new_timer()
    local tick_ms = math.floor(TICK * 1000)
    local due
    local function on_tick()
      uv.update_time()
      local late = (uv.now() - due) / 1000
      if late > tm.max_late then tm.max_late, tm.max_at = late, now_s() end
      tm.ticks = tm.ticks + 1
      due = uv.now() + tick_ms
      timer:start(tick_ms, 0, on_tick)
    end
    uv.update_time() -- the loop time is cached since the last uv.run()
    due = uv.now() + tick_ms
    timer:start(tick_ms, 0, on_tick)

    local t0 = now_s()
    local function finish_if_done()
      if t.done + #t.errors == N_COROUTINES then
        timer:stop()
        timer:close()
        a:close()
        b:close()
      end
    end
    start_contenders(t, a, b, locks, zluv.spawn, finish_if_done)
    assert.is_true(run_loop(180), "the loop did not finish in time")
    local elapsed = now_s() - t0
    assert.are.same({}, errors)
    check_contention("luv", t, tm, t0, elapsed, zk.hosts, base)
  end)

  it("acquire timeouts fire on time; coroutines not made by spawn block instead", function()
    local a = assert(zklock.connect(zk.hosts))
    local b = assert(zklock.connect(zk.hosts))
    zluv.attach(a, uv)
    local path = base_path("luv-timeout")
    local holder = b:mutex(path)
    assert(holder:acquire(5))
    local res, waited, foreign_ok
    zluv.spawn(a, function()
      local t0 = uv.hrtime()
      res = { a:mutex(path):acquire(0.3) }
      waited = (uv.hrtime() - t0) / 1e9
      -- a coroutine of our own, resumed from a uv callback, is not the adapter's: it blocks
      local co = coroutine.create(function() return a:exists(path) end)
      local ok, v = coroutine.resume(co)
      foreign_ok = ok and v ~= nil and coroutine.status(co) == "dead"
      a:close()
    end)
    assert.is_true(run_loop(30))
    assert.is_nil(res[1])
    assert.are.equal("ETIMEDOUT", res[3])
    assert.is_true(waited >= 0.28 and waited < 1.5, "waited " .. waited .. " s for a 0.3 s timeout")
    assert.is_true(foreign_ok)
    assert(holder:release())
    b:close()
  end)

  it("close() wakes waiting coroutines with ECLOSED and closes the uv handles", function()
    local a = assert(zklock.connect(zk.hosts))
    local b = assert(zklock.connect(zk.hosts))
    zluv.attach(a, uv)
    local path = base_path("luv-close")
    local holder = b:mutex(path)
    assert(holder:acquire(5))
    local codes = {}
    for i = 1, 5 do
      zluv.spawn(a, function()
        local ok, _, code = a:mutex(path):acquire(30)
        codes[i] = ok and "acquired" or code
      end)
    end
    zluv.spawn(a, function()
      zluv.sleep(0.3)
      a:close()
    end)
    local t0 = now_s()
    assert.is_true(run_loop(10), "uv.run() did not return: handles left open")
    assert.is_true(now_s() - t0 < 5)
    assert.are.same({ "ECLOSED", "ECLOSED", "ECLOSED", "ECLOSED", "ECLOSED" }, codes)
    assert(holder:release())
    b:close()
  end)

  it("an error in a spawned coroutine goes to on_error; the others carry on", function()
    local a = assert(zklock.connect(zk.hosts))
    local errors = {}
    zluv.attach(a, uv, { on_error = function(err) errors[#errors + 1] = err end })
    local path = base_path("luv-error")
    local got
    zluv.spawn(a, function()
      a:exists(path)
      error("boom after a wait")
    end)
    zluv.spawn(a, function()
      got = a:create(path, "x", { parents = true })
      zluv.sleep(0.05)
      a:close()
    end)
    assert.is_true(run_loop(10))
    assert.are.equal(path, got)
    assert.are.equal(1, #errors)
    assert.is_truthy(errors[1]:find("boom after a wait", 1, true))
  end)
end)
