-- The read-write lock (Curator InterProcessReadWriteLock) against a real ZooKeeper: the shared
-- server of spec/support/fixture.lua (clean at each describe's start). Runs under Lua 5.4 and LuaJIT
-- (tests tagged #lua54 are 5.4 only).
-- This file: downgrade and upgrade, reentrancy and ownership, bad input, <close>.
--   busted --lua=lua5.4 spec/41-rwlock-downgrade_spec.lua
--   busted --lua=luajit --run=luajit spec/41-rwlock-downgrade_spec.lua
--
-- Test catalogue: RW-01 (readers share), RW-02/RW-09 (writer excludes; interval checker),
-- RW-03 (upgrade refused), RW-04/RW-05/RW-06 (downgrade), RW-07/RW-08 (FIFO, no writer
-- starvation), RW-10 (participants), RE-01/RE-02 (reentrancy per coroutine), HE-01 (herd).
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")
local fixture = require("support.fixture")
local H = require("support.rwlock")

local READ_NODE, WRITE_NODE, REQUEST_KEYS, pack = H.READ_NODE, H.WRITE_NODE, H.REQUEST_KEYS, H.pack
local assert_code, seq10, uuid_of = H.assert_code, H.seq10, H.uuid_of

describe("rwlock: downgrade, upgrade, reentrancy", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  ------------------------------------------------------------------ downgrade and upgrade

  it("downgrade: the write holder takes the read lock at once, one create and no listing", function()
    local c = connect("dg")
    local path = "/rw/downgrade"
    local rw = c:rwlock(path)
    assert(rw.write:acquire(5))
    local wname = util.basename(rw.write:node())
    local before = c:stats()
    local t0 = util.now()
    assert.are.equal(rw.read, rw.read:acquire(0))     -- try-once is enough: granted on create
    assert.is_true(util.now() - t0 < 1)
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(1, d.creates, util.format_stats(d))
    assert.are.equal(0, d.lists, util.format_stats(d))
    assert.are.equal(0, d.gets, util.format_stats(d))
    assert.is_true(rw.read:is_held() and rw.write:is_held())
    local rname = util.basename(rw.read:node())
    assert.matches(READ_NODE, rname)
    assert.are.equal(seq10(wname), seq10(rname))      -- the writer's sequence, not a new one
    assert.are_not.equal(uuid_of(wname), uuid_of(rname))
    local _, stat = c:get(rw.read:node())
    assert.are.equal(c:session(), stat.ephemeral_owner)
    assert.is_true(rw.write:release())
    assert.is_true(rw.read:is_held())
    assert.is_false(rw.write:is_held())
    assert.are.same({ rname }, util.children(c, path))
    assert.is_true(rw.read:release())
    assert.are.same({}, util.children(c, path))
  end)

  it("downgrade with a queued writer: the writer never gets in while the downgraded read is held", function()
    local a, b, r = connect("T1"), connect("T2"), connect("R3")
    local all = { a, b, r }
    local path = "/rw/downgrade-queued"
    local rwa, rwb, rwr = a:rwlock(path), b:rwlock(path), r:rwlock(path)
    assert(rwa.write:acquire(5))
    local wname = util.basename(rwa.write:node())
    local t2 = {}
    b:spawn(function()
      t2.res = pack(rwb.write:acquire(20))
      t2.start = core.now()
      t2.node = util.basename(rwb.write:node())
      b:sleep(0.02)
      t2.finish = core.now()
      assert(rwb.write:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(a, path) == 2 end, 3, all))
    local w2name = util.children(a, path)[2]
    assert.matches(WRITE_NODE, w2name)
    -- a reader queued behind the waiting writer (it must keep waiting for that writer too)
    local r3 = {}
    r:spawn(function()
      r3.res = pack(rwr.read:acquire(20))
      r3.start = core.now()
      r3.finish = core.now()
      assert(rwr.read:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(a, path) == 3 end, 3, all))

    -- RW-06: the downgrade belongs to the coroutine holding the write lock, not to the object
    local other
    a:spawn(function() other = pack(rwa.read:acquire(0.2)) end)
    assert.is_true(a:run(3))
    assert_code("ETIMEDOUT", other, "read by another coroutine of the write holder's object")
    assert.is_true(util.wait_until(function() return #util.children(a, path) == 3 end, 2, all),
      "the timed-out read node was not removed")

    assert(rwa.read:acquire(5))                    -- downgrade ...
    local t1 = { key = "rw", owner = "T1-read", start = core.now() }
    local dname = util.basename(rwa.read:node())
    assert.are.equal(seq10(wname), seq10(dname))
    assert.is_true(rwa.write:release())            -- ... and let the write lock go
    -- the queued writer wakes, lists again and now waits behind the downgraded read node
    assert.is_true(util.wait_until(function()
      local watchers = util.watches_by_path(zk)[path .. "/" .. dname]
      return watchers and #watchers == 1
    end, 3, all), "the queued writer does not watch the downgraded read node")
    local names = util.children(a, path)
    assert.are.equal(3, #names)
    local sorted = core.sort(names, core.WRITE)
    assert.are.same({ dname, w2name }, { sorted[1], sorted[2] })
    util.drive(all, 0.3)                           -- give the writer every chance to get in
    assert.is_nil(t2.res, "the queued writer got the lock while the downgraded read was held")
    assert.is_nil(r3.res)
    t1.finish = core.now()
    assert.is_true(rwa.read:release())
    assert.is_true(zklock.run(all, 10))
    assert.are.equal(rwb.write, t2.res[1], tostring(t2.res[2]))
    assert.are.equal(w2name, t2.node)
    assert.are.equal(rwr.read, r3.res[1], tostring(r3.res[2]))
    local report = fw.check({
      t1,
      { key = "rw", owner = "T2-write", start = t2.start, finish = t2.finish },
      { key = "rw", owner = "R3-read", start = r3.start, finish = r3.finish },
    }, 1)
    assert.are.equal(0, report.violations, table.concat(report.examples, "\n"))
    assert.is_true(t2.start >= t1.finish)
    assert.is_true(r3.start >= t2.finish)          -- the later reader still came after the writer
    assert.are.same({}, util.children(a, path))
  end)

  it("upgrade: a read holder asking for the write lock fails at once with EDEADLK", function()
    local c, other = connect("up"), connect("other-reader")
    local path = "/rw/upgrade"
    local rw = c:rwlock(path)
    assert(rw.read:acquire(5))
    assert(rw.read:acquire(5))                     -- reentrant read: still no upgrade
    local node = rw.read:node()
    local before = c:stats()
    for _, timeout in ipairs({ 5, 0 }) do
      local t0 = util.now()
      local res = pack(rw.write:acquire(timeout))
      assert.is_true(util.now() - t0 < 0.5, "EDEADLK was not immediate")
      assert_code("EDEADLK", res, "write acquire by a read holder")
      assert.truthy(util.has_words(res[2], path, "upgrad", "deadlock", "release the read lock first"), res[2])
    end
    local d = util.stats_delta(before, c:stats())
    for _, k in ipairs(REQUEST_KEYS) do assert.are.equal(0, d[k], "request sent: " .. k) end
    assert.is_true(rw.read:is_held())
    assert.is_false(rw.write:is_held())
    assert.are.equal(node, rw.read:node())
    assert.are.same({ util.basename(node) }, util.children(c, path))
    -- another coroutine of the same client is not the read holder: it simply waits
    local res
    c:spawn(function() res = pack(rw.write:acquire(0.2)) end)
    assert.is_true(c:run(3))
    assert_code("ETIMEDOUT", res, "write by another coroutine while read is held")
    assert.is_true(rw.read:release())
    assert_code("EDEADLK", pack(rw.write:acquire(1)), "write while the read lock is still held once")
    assert.is_true(rw.read:release())
    -- with the read lock gone, the write lock is granted
    assert.are.equal(rw.write, rw.write:acquire(5))
    assert.is_true(rw.write:release())
    -- the check is per coroutine: another client's reader does not make our write fail fast
    local orw = other:rwlock(path)
    assert(orw.read:acquire(5))
    assert_code("ETIMEDOUT", pack(rw.write:acquire(0.2)), "write while another client reads")
    assert.is_true(orw.read:release())
    assert.is_true(util.wait_until(function() return #util.children(c, path) == 0 end, 2, { c, other }))
  end)

  ------------------------------------------------------------------ reentrancy

  it("each side is reentrant per coroutine: one node, no requests, held until the last release", function()
    local c = connect("re")
    local path = "/rw/reentrant"
    local rw = c:rwlock(path)
    for _, side in ipairs({ "read", "write" }) do
      local lock = rw[side]
      assert.are.equal(lock, lock:acquire(5))
      local node, token = lock:node(), lock:token()
      local before = c:stats()
      assert.are.equal(lock, lock:acquire(5))
      assert.are.equal(lock, lock:acquire(0))
      local d = util.stats_delta(before, c:stats())
      for _, k in ipairs(REQUEST_KEYS) do assert.are.equal(0, d[k], side .. ": nested acquire sent " .. k) end
      assert.are.equal(node, lock:node())
      assert.are.equal(token, lock:token())
      assert.are.same({ util.basename(node) }, util.children(c, path))
      assert.is_true(lock:release())
      assert.is_true(lock:release())
      assert.is_true(lock:is_held(), side .. " released before its last release")
      assert.are.same({ util.basename(node) }, util.children(c, path))
      assert.is_true(lock:release())
      assert.is_false(lock:is_held())
      assert.are.same({}, util.children(c, path))
      local msg = util.error_of(lock.release, lock)
      assert.truthy(util.has_words(msg, path, "does not hold"), tostring(msg))
    end
  end)

  it("ownership is per coroutine: another coroutine shares the read side and waits on the write side", function()
    local c = connect("owner")
    local path = "/rw/owner"
    local rw = c:rwlock(path)
    -- read side: a second coroutine on the same object gets its own node and holds at once
    assert(rw.read:acquire(5))
    local main_node = rw.read:node()
    local co_node, co_held
    c:spawn(function()
      assert.is_false(rw.read:is_held())
      assert(rw.read:acquire(0))
      co_node, co_held = rw.read:node(), rw.read:is_held()
      assert(rw.read:release())
    end)
    assert.is_true(c:run(5))
    assert.is_true(co_held)
    assert.matches(READ_NODE, util.basename(co_node))
    assert.are_not.equal(main_node, co_node)
    assert.are.equal(main_node, rw.read:node())
    assert.is_true(rw.read:release())
    -- write side: a second coroutine waits (and times out), the holder keeps it
    assert(rw.write:acquire(5))
    local res, msg
    c:spawn(function()
      res = pack(rw.write:acquire(0.2))
      msg = util.error_of(rw.write.release, rw.write)   -- not its lock to release
    end)
    assert.is_true(c:run(5))
    assert_code("ETIMEDOUT", res, "second coroutine on the write side")
    assert.truthy(util.has_words(msg, path, "does not hold"), tostring(msg))
    assert.is_true(rw.write:is_held())
    assert.is_true(rw.write:release())
    assert.is_true(util.wait_until(function() return #util.children(c, path) == 0 end, 2, { c }))
  end)

  it("rejects bad input with errors that name the argument", function()
    local c = connect("bad")
    local function raises(words, fn, ...)
      local msg = util.error_of(fn, ...)
      assert(msg, "expected an error mentioning " .. table.concat(words, ", "))
      for _, w in ipairs(words) do assert(msg:find(w, 1, true), ("error %q does not mention %q"):format(msg, w)) end
    end
    raises({ "bad argument #1 to 'rwlock'", "lock path", "42" }, c.rwlock, c, 42)
    raises({ "bad argument #1 to 'rwlock'", "lock path", "no-slash" }, c.rwlock, c, "no-slash")
    raises({ "bad argument #1 to 'rwlock'", "lock path" }, c.rwlock, c, "/rw/bad/")
    raises({ "bad argument #2 to 'rwlock'", "unknown option 'bogus'", "acl" }, c.rwlock, c, "/rw/bad", { bogus = 1 })
    raises({ "bad argument #2 to 'rwlock'", "option 'acl'" }, c.rwlock, c, "/rw/bad", { acl = 5 })
    local rw = c:rwlock("/rw/bad")
    for _, side in ipairs({ "read", "write" }) do
      local lock = rw[side]
      raises({ "bad argument #1 to 'acquire'", "timeout", "-1" }, lock.acquire, lock, -1)
      raises({ "bad argument #1 to 'acquire'", "timeout", "\"soon\"" }, lock.acquire, lock, "soon")
      raises({ "bad argument #2 to 'acquire'", "retry" }, lock.acquire, lock, 1, { retry = 5 })
      raises({ "bad argument #1 to 'on_lost'", "function" }, lock.on_lost, lock, "x")
      raises({ side .. " lock", "/rw/bad", "does not hold" }, lock.release, lock)
    end
    assert.is_false(c:exists("/rw/bad"))               -- nothing was created
  end)

  it("a <close> guard releases each side at scope exit, also on error #lua54", function()
    local c = connect("guard")
    local path = "/rw/guard"
    local rw = c:rwlock(path)
    local chunk = assert(load([[
      local rw = ...
      local r = {}
      r.ok, r.err = pcall(function()
        local w <close> = assert(rw.write:acquire(5))
        local rd <close> = assert(rw.read:acquire(5))      -- downgrade inside the write hold
        r.both = rw.write:is_held() and rw.read:is_held()
        error("boom")
      end)
      r.after = rw.write:is_held() or rw.read:is_held()
      return r
    ]], "=guard"))
    local r = chunk(rw)
    assert.is_true(r.both)
    assert.is_false(r.ok)
    assert.matches("boom", r.err)
    assert.is_false(r.after)
    assert.are.same({}, util.children(c, path))
  end)
end)
