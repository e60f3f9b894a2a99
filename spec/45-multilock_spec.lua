-- Multi-lock (Curator InterProcessMultiLock, all or nothing) and retry policies.
local zklock = require("zklock")
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fixture = require("support.fixture")

local children, wait_empty = util.child_count, util.wait_empty

describe("multilock", function()
  local zk, a, b
  fixture.server({ tick_ms = 500, min_session_ms = 1000, container_check_ms = 3600000 },
    { own = "containers are never reaped here: the rollback-order tests read the parents' pzxid" },
    function(s) zk = s end)
  setup(function()
    a = util.connect(zk.hosts, { session_timeout = 4 })
    b = util.connect(zk.hosts, { session_timeout = 4 })
  end)

  it("holds every component, mixed kinds, and releases them all", function()
    local m, rw, sm = a:mutex("/ml/1/m"), a:rwlock("/ml/1/rw"), a:semaphore_mutex("/ml/1/sm")
    local ml = a:multilock({ m, rw.write, sm })
    assert.are.equal(ml, ml:acquire(5))
    assert.is_true(ml:is_held())
    assert.is_true(m:is_held() and rw.write:is_held() and sm:is_held())
    assert.is_true(m:token() > 0 and rw.write:token() > 0 and sm:token() > 0)
    -- another client sees every component taken
    assert.is_nil((b:mutex("/ml/1/m"):acquire(0)))
    assert.is_nil((b:rwlock("/ml/1/rw").read:acquire(0)))
    assert.is_nil((b:semaphore_mutex("/ml/1/sm"):acquire(0)))
    assert.is_true(ml:release())
    assert.is_false(ml:is_held())
    assert.is_true(wait_empty(a, { "/ml/1/m", "/ml/1/rw", "/ml/1/sm/leases" }, 2))
  end)

  it("is all or none: a failing component releases the ones already taken, and says which failed", function()
    local blocker = b:rwlock("/ml/2/rw")
    assert(blocker.read:acquire(5))
    local m1, m2, rw = a:mutex("/ml/2/a"), a:mutex("/ml/2/b"), a:rwlock("/ml/2/rw")
    local ml = a:multilock({ m1, m2, rw.write })
    local t0 = core.now()
    local ok, msg, code = ml:acquire(0.5)
    local elapsed = core.now() - t0
    assert.is_nil(ok)
    assert.are.equal("ETIMEDOUT", code)
    assert.truthy(msg:find("write lock /ml/2/rw (3 of 3)", 1, true))
    assert.is_true(elapsed >= 450 and elapsed < 2000, ("elapsed %.0f ms: %s"):format(elapsed, msg))
    assert.is_false(m1:is_held())
    assert.is_false(m2:is_held())
    -- nothing of ours is left on any component
    assert.is_true(wait_empty(b, { "/ml/2/a", "/ml/2/b" }, 2))
    assert.are.equal(1, children(b, "/ml/2/rw"))
    -- rollback went in reverse order: /ml/2/b's node was deleted before /ml/2/a's, so the
    -- parents' last child change (pzxid) is older for b than for a
    local sa, sb = assert(b:exists("/ml/2/a")), assert(b:exists("/ml/2/b"))
    assert.is_true(sb.pzxid < sa.pzxid)
    assert(blocker.read:release())
    assert.are.equal(ml, ml:acquire(5))
    assert.is_true(ml:release())
  end)

  it("can roll back in the given order instead", function()
    local blocker = b:mutex("/ml/3/z")
    assert(blocker:acquire(5))
    local ml = a:multilock({ a:mutex("/ml/3/a"), a:mutex("/ml/3/b"), a:mutex("/ml/3/z") }, { rollback = "given" })
    assert.is_nil((ml:acquire(0.3)))
    assert.is_true(wait_empty(b, { "/ml/3/a", "/ml/3/b" }, 2))
    local sa, sb = assert(b:exists("/ml/3/a")), assert(b:exists("/ml/3/b"))
    assert.is_true(sa.pzxid < sb.pzxid)
    assert(blocker:release())
  end)

  it("never deadlocks two multi-locks taking the same locks in opposite given orders with order = 'path'", function()
    local done, held = 0, { a = 0, b = 0 }
    local overlap = false
    local inside = 0
    local function worker(c, tag, paths)
      local locks = {}
      for i, p in ipairs(paths) do locks[i] = c:mutex(p) end
      local ml = c:multilock(locks, { order = "path" })
      for _ = 1, 5 do
        assert(ml:acquire(10))
        inside = inside + 1
        if inside > 1 then overlap = true end
        held[tag] = held[tag] + 1
        c:sleep(0.005)
        inside = inside - 1
        assert(ml:release())
      end
      done = done + 1
    end
    for _ = 1, 3 do
      a:spawn(worker, a, "a", { "/ml/4/x", "/ml/4/y" })
      b:spawn(worker, b, "b", { "/ml/4/y", "/ml/4/x" })
    end
    assert(zklock.run({ a, b }, 60))
    assert.are.equal(6, done)
    assert.is_false(overlap)
    assert.are.equal(15, held.a)
    assert.are.equal(15, held.b)
  end)

  it("counts components the caller already holds (reentrant) and undoes that on failure", function()
    local m1, m2 = a:mutex("/ml/5/a"), a:mutex("/ml/5/b")
    assert(m1:acquire(5))
    local blocker = b:mutex("/ml/5/b")
    assert(blocker:acquire(5))
    local ml = a:multilock({ m1, m2 })
    assert.is_nil((ml:acquire(0.2)))
    assert.is_true(m1:is_held()) -- still ours, count back to one
    assert(m1:release())
    assert.is_false(m1:is_held())
    assert(blocker:release())
    assert(m1:acquire(5))
    assert(ml:acquire(5))
    assert(ml:release())
    assert.is_true(m1:is_held())
    assert(m1:release())
  end)

  it("reports every release failure and keeps going", function()
    local m1, m2 = a:mutex("/ml/6/a"), a:mutex("/ml/6/b")
    local ml = a:multilock({ m1, m2 })
    assert(ml:acquire(5))
    assert(m2:release()) -- released behind the multi-lock's back
    local ok, msg, _, errors = ml:release()
    assert.is_nil(ok)
    assert.truthy(msg:find("1 of 2 failed", 1, true))
    assert.are.equal(1, #errors)
    assert.are.equal(m2, errors[1].lock)
    assert.is_false(m1:is_held()) -- the other one was still released
    assert.is_true(wait_empty(b, { "/ml/6/a", "/ml/6/b" }, 2))
  end)

  it("rejects bad input with clear errors", function()
    local function err_of(fn)
      local ok, e = pcall(fn)
      assert.is_false(ok)
      return e
    end
    assert.truthy(err_of(function() a:multilock({}) end):find("non-empty array", 1, true))
    assert.truthy(err_of(function() a:multilock("x") end):find("locks", 1, true))
    assert.truthy(err_of(function() a:multilock({ a:mutex("/ml/7/a"), 42 }) end):find("locks[2]", 1, true))
    assert.truthy(err_of(function() a:multilock({ a:mutex("/ml/7/a"), b:mutex("/ml/7/b") }) end)
      :find("another client", 1, true))
    local m = a:mutex("/ml/7/a")
    assert.truthy(err_of(function() a:multilock({ m, m }) end):find("listed twice", 1, true))
    assert.truthy(err_of(function() a:multilock({ m, a:mutex("/ml/7/a") }) end):find("already in the list", 1, true))
    assert.truthy(err_of(function() a:multilock({ m }, { order = "random" }) end):find("order", 1, true))
    assert.truthy(err_of(function() a:multilock({ m }, { bogus = 1 }) end):find("unknown option 'bogus'", 1, true))
    assert.truthy(err_of(function() a:multilock({ m }):acquire(-1) end):find("timeout", 1, true))
    assert.truthy(err_of(function() a:multilock({ a:semaphore("/ml/7/s", 2) }) end):find("locks[1]", 1, true))
  end)
end)

describe("retry policies", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, {}, function(s) zk = s end)

  it("retry an acquire that failed with the session, and give the right result", function()
    local c = assert(zklock.connect(zk.hosts, { session_timeout = 4 }))
    local other = assert(zklock.connect(zk.hosts, { session_timeout = 4 }))
    local holder = other:mutex("/retry/a")
    assert(holder:acquire(5))
    local calls = {}
    local policy = function(attempt, code)
      calls[#calls + 1] = { attempt, code }
      return 0.05
    end
    local m = c:mutex("/retry/a")
    local result, err
    c:spawn(function()
      result, err = m:acquire(10, { retry = policy })
      if result then
        assert(m:release())
      end
    end)
    c:sleep(0.2)
    testing.expire(c) -- the waiting acquire fails with ESESSION: the policy retries it
    c:sleep(0.5)
    assert(holder:release())
    assert(c:run(10))
    assert.are.equal(m, result, err)
    assert.are.equal(1, #calls)
    assert.are.same({ 1, "ESESSION" }, calls[1])
    c:close()
    other:close()
  end)

  it("never retry a timeout, and stop after the policy's attempts", function()
    local c = assert(zklock.connect(zk.hosts))
    local other = assert(zklock.connect(zk.hosts))
    assert(other:mutex("/retry/b"):acquire(5))
    local n = 0
    local ok, _, code = c:mutex("/retry/b"):acquire(0.2, { retry = function() n = n + 1; return 0 end })
    assert.is_nil(ok)
    assert.are.equal("ETIMEDOUT", code)
    assert.are.equal(0, n)
    -- the built-in policies
    local fixed = zklock.retry.fixed{ delay = 0.1, attempts = 2 }
    assert.are.equal(0.1, fixed(1, "ESESSION"))
    assert.is_nil(fixed(3, "ESESSION"))
    local exp = zklock.retry.exponential{ base = 0.1, max = 0.3, attempts = 4, jitter = false }
    assert.are.same({ 0.1, 0.2, 0.3, 0.3 }, { exp(1), exp(2), exp(3), exp(4) })
    assert.is_nil(exp(5))
    assert.is_nil(zklock.retry.none()(1, "ESESSION"))
    assert.has_error(function() zklock.retry.exponential{ base = -1 } end)
    assert.has_error(function() c:mutex("/retry/c"):acquire(1, { retry = 5 }) end)
    c:close()
    other:close()
  end)
end)
