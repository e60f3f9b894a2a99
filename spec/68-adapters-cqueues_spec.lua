-- Host adapters: the client's host API (connect{ wait = false }, next_timeout_ms, pending, the
-- client as a cqueues pollable), zklock inside a cqueues controller and inside a libuv loop
-- (luv), against a real ZooKeeper. Debian's lua-cqueues and lua-luv ship builds for Lua 5.1
-- (loaded by LuaJIT) and 5.4, so every describe block runs in both busted runs; the cqueues and
-- luv blocks are skipped when their module is missing (spec/support/deps.lua: a failure under CI=true).
-- This file: zklock inside a cqueues controller.
--   busted --lua=lua5.4 spec/68-adapters-cqueues_spec.lua
--   busted --lua=luajit --run=luajit spec/68-adapters-cqueues_spec.lua
-- Shared contention test and timer meter: spec/support/adapters.lua.
local zklock = require("zklock")
local fixture = require("support.fixture")
local H = require("support.adapters")
local deps = require("support.deps")

local now_s, N_COROUTINES, TICK = H.now_s, H.N_COROUTINES, H.TICK
local new_tally, base_path = H.new_tally, H.base_path
local lock_objects, start_contenders = H.lock_objects, H.start_contenders
local check_contention, late_meter = H.check_contention, H.late_meter

describe("cqueues adapter #adapters", function()
  local cqueues = deps.require("cqueues", "apt-get install lua-cqueues", pending)
  if not cqueues then return end
  local condition = require("cqueues.condition")
  local zcq = require("zklock.adapters.cqueues")
  local zk

  fixture.server({}, {}, function(s) zk = s end)

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
    local tm = late_meter()

    -- an unrelated periodic timer in the same controller
    cq:wrap(function()
      local next_at = cqueues.monotime() + TICK
      while not stop_timer do
        tm.arm()
        cqueues.sleep(math.max(0, next_at - cqueues.monotime()))
        local late = cqueues.monotime() - next_at
        tm.fire(late)
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
