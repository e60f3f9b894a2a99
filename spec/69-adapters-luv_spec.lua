-- Host adapters: the client's host API (connect{ wait = false }, next_timeout_ms, pending, the
-- client as a cqueues pollable), zklock inside a cqueues controller and inside a libuv loop
-- (luv), against a real ZooKeeper. Debian's lua-cqueues and lua-luv ship builds for Lua 5.1
-- (loaded by LuaJIT) and 5.4, so every describe block runs in both busted runs; the cqueues and
-- luv blocks are skipped when their module is missing (spec/support/deps.lua: a failure under CI=true).
-- This file: zklock inside a libuv loop (luv).
--   busted --lua=lua5.4 spec/69-adapters-luv_spec.lua
--   busted --lua=luajit --run=luajit spec/69-adapters-luv_spec.lua
-- Shared contention test and timer meter: spec/support/adapters.lua.
local zklock = require("zklock")
local fixture = require("support.fixture")
local H = require("support.adapters")
local deps = require("support.deps")

local now_s, N_COROUTINES, TICK = H.now_s, H.N_COROUTINES, H.TICK
local new_tally, base_path = H.new_tally, H.base_path
local lock_objects, start_contenders = H.lock_objects, H.start_contenders
local check_contention, late_meter = H.check_contention, H.late_meter

describe("luv adapter #adapters", function()
  local uv = deps.require("luv", "apt-get install lua-luv", pending)
  if not uv then return end
  local zluv = require("zklock.adapters.luv")
  local zk

  fixture.server({}, {}, function(s) zk = s end)

  -- uv.run() with a watchdog: stops the loop after `limit` seconds (returns false then)
  local function run_loop(limit)
    local expired = false
    uv.update_time() -- the loop's clock is cached since the last uv.run (another spec's, maybe long ago)
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
    local tm = late_meter()
    local timer = uv.new_timer()
    local tick_ms = math.floor(TICK * 1000)
    local due
    local function on_tick()
      uv.update_time()
      local late = (uv.now() - due) / 1000
      tm.fire(late)
      due = uv.now() + tick_ms
      tm.arm()
      timer:start(tick_ms, 0, on_tick)
    end
    uv.update_time() -- the loop time is cached since the last uv.run()
    due = uv.now() + tick_ms
    tm.arm()
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

  it("a sleep after blocking work in the same loop turn still lasts its time", function()
    local a = assert(zklock.connect(zk.hosts))
    zluv.attach(a, uv)
    local slept
    zluv.spawn(a, function()
      -- 0.5 s of work without yielding: the loop's cached clock falls 0.5 s behind
      local busy = uv.hrtime()
      while uv.hrtime() - busy < 5e8 do end
      local t0 = uv.hrtime()
      zluv.sleep(0.4)
      slept = (uv.hrtime() - t0) / 1e9
      a:close()
    end)
    assert.is_true(run_loop(30))
    assert.is_true(slept >= 0.39, "a 0.4 s sleep ended after " .. tostring(slept) .. " s")
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
