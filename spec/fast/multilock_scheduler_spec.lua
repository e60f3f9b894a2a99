-- The fast tier (no ZooKeeper server): multi-lock ordering and its argument and rollback-policy
-- checks, and the builtin scheduler (spawn, run, sleep). A client made with { wait = false } to a
-- port nobody listens on stays CONNECTING; none of this needs the session.
--   busted --lua=lua5.4 spec/fast/multilock_scheduler_spec.lua
local zklock = require("zklock")
local core = require("zklock.core")

local function raises(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

local function offline()
  return assert(zklock.connect("127.0.0.1:1", { wait = false }))
end

describe("multi-lock policy without a server #fast", function()
  local c, other
  before_each(function() c, other = offline(), offline() end)
  after_each(function() c:close(); other:close() end)

  it("order = 'given' keeps the list; order = 'path' sorts by path, a write side before the read side", function()
    local m, rw, sm = c:mutex("/b/x"), c:rwlock("/a/y"), c:semaphore_mutex("/a/x")
    local given = c:multilock({ m, rw.read, sm, rw.write })
    assert.are.equal("zklock.multilock(mutex /b/x, read lock /a/y, semaphore mutex /a/x, write lock /a/y)",
      tostring(given))
    local by_path = c:multilock({ m, rw.read, sm, rw.write }, { order = "path" })
    assert.are.equal("zklock.multilock(semaphore mutex /a/x, write lock /a/y, read lock /a/y, mutex /b/x)",
      tostring(by_path))
    -- the same locks listed in any order give one global order (no deadlock between two of them)
    local again = c:multilock({ rw.write, m, rw.read, sm }, { order = "path" })
    assert.are.equal(tostring(by_path), tostring(again))
  end)

  it("rejects an empty list, non-locks, duplicates, a lock of another client, "
     .. "a lock that would wait for itself", function()
    local m = c:mutex("/ml/a")
    assert.truthy(raises(c.multilock, c, {})
      :find("bad argument #1 to 'multilock' (locks: expected a non-empty array", 1, true))
    assert.truthy(raises(c.multilock, c, nil):find("non-empty array", 1, true))
    assert.truthy(raises(c.multilock, c, { m, {} }):find("locks[2]: expected a mutex", 1, true))
    assert.truthy(raises(c.multilock, c, { c:semaphore("/ml/s", 2) }):find("locks[1]", 1, true))
    assert.truthy(raises(c.multilock, c, { m, m }):find("locks[2]: listed twice", 1, true))
    assert.truthy(raises(c.multilock, c, { m, other:mutex("/ml/b") })
      :find("locks[2]: belongs to another client", 1, true))
    assert.truthy(raises(c.multilock, c, { m, c:mutex("/ml/a") }):find("it would wait for itself", 1, true))
    -- a read and a write side of one path are two locks (the write side is taken first by path order)
    local rw = c:rwlock("/ml/rw")
    assert.are.equal("multi-lock", c:multilock({ rw.read, rw.write }).kind)
  end)

  it("an acquire the client's close ends returns nil, 'ECLOSED: ...' (it raised a Lua error)", function()
    local ml = c:multilock({ c:mutex("/ml/c1"), c:mutex("/ml/c2") })
    local got
    c:spawn(function() got = { ml:acquire(20) } end) -- (no pcall: Lua 5.1 cannot yield across it)
    c:spawn(function() c:sleep(0.2); c:close() end)
    local ran, err = pcall(c.run, c, 10) -- a raising acquire fails its spawned coroutine, and run
    assert.is_true(ran, tostring(err))
    assert.is_table(got, "the acquire did not end with the client")
    assert.is_nil(got[1])
    assert.are.equal("ECLOSED", got[3], tostring(got[2]))
    assert.matches("^ECLOSED: multi%-lock", got[2])
  end)

  it("validates order, rollback, deadline and per_lock_timeout", function()
    local m = c:mutex("/ml/o")
    assert.truthy(raises(c.multilock, c, { m }, { order = "random" })
      :find("option 'order': expected one of given, path", 1, true))
    assert.truthy(raises(c.multilock, c, { m }, { rollback = "sideways" })
      :find("option 'rollback': expected one of reverse, given", 1, true))
    assert.truthy(raises(c.multilock, c, { m }, { deadline = -1 }):find("option 'deadline'", 1, true))
    assert.truthy(raises(c.multilock, c, { m }, { per_lock_timeout = "1" }):find("option 'per_lock_timeout'", 1, true))
    assert.truthy(raises(c.multilock, c, { m }, { timeout = 1 }):find("unknown option 'timeout'", 1, true))
    for _, rb in ipairs({ "reverse", "given" }) do
      local ml = c:multilock({ m }, { rollback = rb, order = "path", deadline = 1, per_lock_timeout = 0.5 })
      assert.are.equal("multi-lock", ml.kind)
    end
  end)

  it("acquire() checks its timeout before anything is sent", function()
    local ml = c:multilock({ c:mutex("/ml/t") })
    assert.truthy(raises(ml.acquire, ml, -1):find("bad argument #1 to 'acquire' (timeout", 1, true))
    assert.truthy(raises(ml.acquire, ml, 1, { retry = 5 }):find("bad argument #2 to 'acquire'", 1, true))
    assert.are.equal(0, c:pending())
  end)
end)

describe("builtin scheduler without a server #fast", function()
  local c
  before_each(function() c = offline() end)
  after_each(function() c:close() end)

  it("scheduler.pcall: a catching call whose code waits (yields) on every Lua, 5.1 included", function()
    local sched = require("zklock.internal.scheduler")
    for _, ypcall in ipairs({ sched.pcall, sched._yielding_pcall }) do
      local got, failed, order = nil, nil, {}
      c:spawn(function()
        got = { ypcall(function(a, b)
          order[#order + 1] = "in"
          c:sleep(0.02) -- suspends the spawned coroutine, not the caller's thread
          order[#order + 1] = "woke"
          return a + b, "two"
        end, 1, 2) }
        failed = { ypcall(function() c:sleep(0.01) error("boom", 0) end) }
      end)
      c:spawn(function() order[#order + 1] = "other" end)
      assert(c:run(5))
      assert.are.same({ true, 3, "two" }, got)
      assert.are.same({ false, "boom" }, failed)
      assert.are.same({ "in", "other", "woke" }, order)
    end
  end)

  it("spawned coroutines run interleaved at their sleeps; run() returns once all are done", function()
    local log = {}
    for _, name in ipairs({ "a", "b" }) do
      c:spawn(function() for i = 1, 3 do log[#log + 1] = name .. i; c:sleep(0.01) end end)
    end
    assert.is_true((c:run(5)))
    assert.are.equal("a1 b1 a2 b2 a3 b3", table.concat(log, " "))
  end)

  it("spawn passes its arguments; a sleeper wakes in deadline order, not spawn order", function()
    local order = {}
    c:spawn(function(name, s) c:sleep(s); order[#order + 1] = name end, "slow", 0.06)
    c:spawn(function(name, s) c:sleep(s); order[#order + 1] = name end, "fast", 0.01)
    assert.is_true((c:run(5)))
    assert.are.same({ "fast", "slow" }, order)
  end)

  it("sleep blocks outside a scheduled coroutine for at least the time asked", function()
    local t0 = core.now()
    c:sleep(0.05)
    assert.is_true(core.now() - t0 >= 49, ("slept %.1f ms"):format(core.now() - t0))
  end)

  it("next_timeout_ms() follows a sleeping coroutine; pending() counts a ready one", function()
    c:spawn(function() c:sleep(0.2) end)
    assert.are.equal(1, c:pending())            -- spawned, ready to run
    c:process()                                  -- it runs and goes to sleep
    local ms = c:next_timeout_ms()
    assert.is_true(ms >= 0 and ms <= 200, "next_timeout_ms() = " .. ms)
    assert.is_true((c:run(5)))
  end)

  it("a coroutine closed while it sleeps leaves no timer behind #lua54", function()
    -- the scheduler alone (its adapter protocol): the client's own deadline would hide the timer
    local S = require("zklock.internal.scheduler").new()
    local host = { abandon = function() error("nothing waits on an op here") end }
    local woke = false
    local co = S.spawn(function() S.sleep(host, 30); woke = true end)
    S.step(host) -- it runs and goes to sleep
    local ms = S.timeout_ms(host)
    assert.is_true(ms > 29000 and ms <= 30000, "timeout_ms() = " .. ms)
    assert.is_true(coroutine.close(co))
    local deadline = core.now() + 5000
    repeat S.step(host) until S.timeout_ms(host) == -1 or core.now() > deadline -- the sweep, within 0.1 s
    assert.are.equal(-1, S.timeout_ms(host))
    assert.are.equal(0, S.count())
    assert.is_false(woke)
  end)
end)
