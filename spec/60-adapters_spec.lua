-- Host adapters: zklock inside a cqueues controller and inside a libuv loop (luv), against a real
-- ZooKeeper. Debian's lua-cqueues and lua-luv ship builds for Lua 5.1 (loaded by LuaJIT) and
-- 5.4, so both describe blocks run in both busted runs; each is pending when its module is
-- missing.
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
    local locks = { [a] = {}, [b] = {} }
    for k = 1, N_LOCKS do
      locks[a][k] = a:mutex(base .. "/lock-" .. k)
      locks[b][k] = b:mutex(base .. "/lock-" .. k)
    end
    local t = new_tally()
    local finished = condition.new()
    local stop_timer = false
    local ticks, max_late, max_at = 0, 0, 0

    -- an unrelated periodic timer in the same controller
    cq:wrap(function()
      local next_at = cqueues.monotime() + TICK
      while not stop_timer do
        cqueues.sleep(math.max(0, next_at - cqueues.monotime()))
        local late = cqueues.monotime() - next_at
        if late > max_late then max_late, max_at = late, now_s() end
        ticks = ticks + 1
        next_at = next_at + TICK
        if late > TICK then next_at = cqueues.monotime() + TICK end
      end
    end)

    local t0 = now_s()
    for i = 1, N_COROUTINES do
      local client = (i % 2 == 0) and a or b
      local k = i % N_LOCKS + 1
      cq:wrap(function()
        local ok, err = pcall(contend, t, client, locks[client][k], k, function() client:sleep(0.001) end)
        if not ok then t.errors[#t.errors + 1] = tostring(err) end
        if t.done + #t.errors == N_COROUTINES then finished:signal() end
      end)
    end
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
    check_tally(t)
    print(("\n  [cqueues %s] %d coroutines, %d locks, 2 clients: %.2f s; timer ticks %d, max lateness %.1f ms at +%.2f s")
      :format(jit and "luajit" or _VERSION, N_COROUTINES, N_LOCKS, elapsed, ticks, max_late * 1000, max_at - t0))
    assert.is_true(max_late < MAX_LATENESS, ("timer %.3f s late"):format(max_late))
    assert.is_true(ticks >= math.floor(elapsed / TICK / 2), "the timer hardly ran: " .. ticks .. " ticks")
    assert_no_nodes(zk.hosts, base)
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

  it("zcq.pollable(client) lets a hand-written loop drive the client", function()
    local a = assert(zklock.connect(zk.hosts))
    local p = zcq.pollable(a)
    assert.are.equal(a:fd(), p:pollfd())
    assert.are.equal("r", p:events())
    local path = base_path("cqueues-pollable")
    local cq = cqueues.new()
    local got
    cq:wrap(function()
      -- the builtin scheduler's coroutine, driven by a cqueues loop through the pollable
      a:spawn(function() got = a:create(path, "x", { parents = true }) end)
      while not got do
        cqueues.poll(p)
        a:process()
      end
    end)
    assert(cq:loop(10))
    assert.are.equal(path, got)
    a:close()
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
    local locks = { [a] = {}, [b] = {} }
    for k = 1, N_LOCKS do
      locks[a][k] = a:mutex(base .. "/lock-" .. k)
      locks[b][k] = b:mutex(base .. "/lock-" .. k)
    end
    local t = new_tally()

    -- an unrelated timer in the same loop, re-armed every TICK; lateness is measured against
    -- the loop time it was armed at (a libuv repeat timer drifts by design)
    local ticks, max_late, max_at = 0, 0, 0
    local timer = uv.new_timer()
    local tick_ms = math.floor(TICK * 1000)
    local due
    local function on_tick()
      uv.update_time()
      local late = (uv.now() - due) / 1000
      if late > max_late then max_late, max_at = late, now_s() end
      ticks = ticks + 1
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
    for i = 1, N_COROUTINES do
      local client = (i % 2 == 0) and a or b
      local k = i % N_LOCKS + 1
      zluv.spawn(client, function()
        local ok, err = pcall(contend, t, client, locks[client][k], k, function() client:sleep(0.001) end)
        if not ok then t.errors[#t.errors + 1] = tostring(err) end
        finish_if_done()
      end)
    end
    assert.is_true(run_loop(180), "the loop did not finish in time")
    local elapsed = now_s() - t0
    assert.are.same({}, errors)
    check_tally(t)
    print(("\n  [luv %s] %d coroutines, %d locks, 2 clients: %.2f s; timer ticks %d, max lateness %.1f ms at +%.2f s")
      :format(jit and "luajit" or _VERSION, N_COROUTINES, N_LOCKS, elapsed, ticks, max_late * 1000, max_at - t0))
    assert.is_true(max_late < MAX_LATENESS, ("timer %.3f s late"):format(max_late))
    assert.is_true(ticks >= math.floor(elapsed / TICK / 2), "the timer hardly ran: " .. ticks .. " ticks")
    assert_no_nodes(zk.hosts, base)
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
