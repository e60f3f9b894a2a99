-- Cooperative revocation (Curator's protocol: "__REVOKE__" written into the holder's node)
-- between zklock clients on a real ZooKeeper server: client:revoke(node) from any client;
-- on_revoke(fn) on mutexes, both read-write lock sides, semaphore leases (which Curator cannot
-- revoke) and the semaphore mutex; the handler runs exactly once per request; a holder without
-- a handler is left alone; a request made while the holder still waited is reported at the
-- grant; no watch and no node is left behind; bad input raises or returns a clear error.
--   busted --lua=lua5.4 spec/52-revocation_spec.lua
local util = require("support.util")
local fixture = require("support.fixture")

local pack, assert_code = util.pack, util.assert_code

-- watches of any session on `path` (the server's wchp)
local function watches_on(zk, path)
  return #(util.watches_by_path(zk)[path] or {})
end

describe("revocation", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  -- A holder coroutine on client `c`: acquires with acquire(), then waits until its on_revoke
  -- handler ran, then releases. Records the handler's calls and the hold interval.
  local function revocable_holder(c, obj, acquire, release)
    local rec = { calls = {}, released = false }
    obj:on_revoke(function(_, target, node)
      rec.calls[#rec.calls + 1] = { target = target, node = node }
    end)
    c:spawn(function()
      rec.held = acquire()
      rec.node = rec.held and rec.held:node()
      while #rec.calls == 0 do c:sleep(0.01) end
      rec.released = assert(release(rec.held))
    end)
    return rec
  end

  it("mutex: another client's revoke reaches the holder's on_revoke once; it releases and the asker gets it", function()
    local a, b = connect("rv-a"), connect("rv-b")
    local ma, mb = a:mutex("/rv/m"), b:mutex("/rv/m")
    local rec = revocable_holder(a, ma, function() return assert(ma:acquire(10)) end,
      function() return ma:release() end)
    assert.is_true(util.wait_until(function() return rec.node ~= nil end, 10, { a, b }))
    -- the holder watches its own node (one data watch there), nobody else does
    assert.is_true(util.wait_until(function() return watches_on(zk, rec.node) == 1 end, 10, { a, b }))
    assert.is_nil(b:get(rec.node) == "__REVOKE__" or nil)
    assert.is_true(b:revoke(rec.node))
    assert.are.equal("__REVOKE__", (b:get(rec.node)))
    local got, done
    b:spawn(function() -- b queues while a is told and lets go
      got = pack(mb:acquire(10))
      while not done do b:sleep(0.01) end
      assert(mb:release())
    end)
    -- the asker may be granted (on the watch event of a's node, with nothing left to ask) before
    -- a's coroutine has read the answer to its delete: wait for both
    assert.is_true(util.wait_until(function() return got ~= nil and rec.released end, 15, { a, b }))
    assert.are.equal(mb, got[1])
    assert.are.equal(1, #rec.calls)
    assert.are.equal(ma, rec.calls[1].target)
    assert.are.equal(rec.node, rec.calls[1].node)
    assert.is_true(rec.released)
    done = true
    assert(b:run(10))
    util.drive({ a, b }, 0.2)
    assert.are.equal(1, #rec.calls, "the handler ran again without a new request")
    assert.are.same({}, util.children(b, "/rv/m"))
  end)

  it("the handler runs exactly once per request, also for several requests while held; on_revoke(nil) stops it",
    function()
    local a, b = connect("once-a"), connect("once-b")
    local m = a:mutex("/rv/once")
    local calls = 0
    m:on_revoke(function() calls = calls + 1 end)
    assert(m:acquire(5))
    local node = m:node()
    for i = 1, 5 do
      assert.is_true(b:revoke(node))
      assert.is_true(util.wait_until(function() return calls == i end, 10, { a, b }),
        ("request %d: %d calls"):format(i, calls))
      util.drive({ a, b }, 0.1) -- a second call for the same request would come now
      assert.are.equal(i, calls)
    end
    -- other data changes are not requests
    assert(b:set(node, "something else"))
    util.drive({ a, b }, 0.2)
    assert.are.equal(5, calls)
    assert.is_true(m:is_held())
    m:on_revoke(nil)
    assert.is_true(b:revoke(node))
    util.drive({ a, b }, 0.3)
    assert.are.equal(5, calls)
    -- set again while held: watches again, and a request reaches it
    -- listening again: the request made meanwhile is reported now (once), then new ones
    m:on_revoke(function() calls = calls + 1 end)
    assert.is_true(util.wait_until(function() return calls == 6 end, 10, { a, b }))
    util.drive({ a, b }, 0.1)
    assert.are.equal(6, calls)
    assert.is_true(b:revoke(node))
    assert.is_true(util.wait_until(function() return calls == 7 end, 10, { a, b }))
    assert.is_true(m:release())
  end)

  it("read and write sides of a read-write lock", function()
    local a, b = connect("rw-a"), connect("rw-b")
    local rwa = a:rwlock("/rv/rw")
    local seen = {}
    rwa.read:on_revoke(function(_, t) seen[#seen + 1] = t end)
    rwa.write:on_revoke(function(_, t) seen[#seen + 1] = t end)
    assert(rwa.write:acquire(5))
    assert.is_true(b:revoke(rwa.write:node()))
    assert.is_true(util.wait_until(function() return #seen == 1 end, 10, { a, b }))
    assert.are.equal(rwa.write, seen[1])
    assert(rwa.write:release())
    assert(rwa.read:acquire(5))
    assert.is_true(b:revoke(rwa.read:node()))
    assert.is_true(util.wait_until(function() return #seen == 2 end, 10, { a, b }))
    assert.are.equal(rwa.read, seen[2])
    assert(rwa.read:release())
  end)

  it("semaphore leases (per semaphore and per lease) and the semaphore mutex", function()
    local a, b = connect("se-a"), connect("se-b")
    local sem = a:semaphore("/rv/sem", 3)
    local by_sem, by_lease = {}, {}
    sem:on_revoke(function(_, lease, node) by_sem[#by_sem + 1] = { lease, node } end)
    local leases = assert(sem:acquire_many(2, 5))
    local other = assert(a:semaphore("/rv/sem", 3):acquire(5))
    other:on_revoke(function(_, lease) by_lease[#by_lease + 1] = lease end)
    assert.is_true(b:revoke(leases[2]:node()))
    assert.is_true(b:revoke(other:node()))
    assert.is_true(util.wait_until(function() return #by_sem == 1 and #by_lease == 1 end, 10, { a, b }))
    assert.are.equal(leases[2], by_sem[1][1])
    assert.are.equal(leases[2]:node(), by_sem[1][2])
    assert.are.equal(other, by_lease[1])
    util.drive({ a, b }, 0.2)
    assert.are.equal(1, #by_sem)
    for _, l in ipairs(leases) do assert(l:release()) end
    assert(other:release())
    -- the semaphore mutex: fn(semaphore_mutex, node)
    local sm = a:semaphore_mutex("/rv/smx")
    local got
    sm:on_revoke(function(_, t, node) got = { t, node } end)
    assert(sm:acquire(5))
    assert.is_true(b:revoke(sm:node()))
    assert.is_true(util.wait_until(function() return got ~= nil end, 10, { a, b }))
    assert.are.equal(sm, got[1])
    assert.are.equal(sm:node(), got[2])
    assert(sm:release())
    util.drive({ a, b }, 0.2)
    assert.are.same({}, util.children(b, "/rv/sem/leases"))
  end)

  it("a holder without on_revoke is unaffected: still held, no watch, the waiter behind it still waits", function()
    local a, b = connect("no-a"), connect("no-b")
    local ma, mb = a:mutex("/rv/plain"), b:mutex("/rv/plain")
    assert(ma:acquire(5))
    local node = ma:node()
    assert.are.equal(0, watches_on(zk, node))
    local res
    b:spawn(function() res = pack(mb:acquire(1)) end)
    util.drive({ a, b }, 0.2)
    assert.is_true(b:revoke(node))
    assert.is_true(util.wait_until(function() return res ~= nil end, 10, { a, b }))
    assert_code("ETIMEDOUT", res) -- the data change woke the waiter, which found a still first
    assert.is_true(ma:is_held())
    assert.is_true(ma:release())
  end)

  it("a request made while the holder still waited in the queue is reported once at the grant", function()
    local a, b, c = connect("q-a"), connect("q-b"), connect("q-c")
    local mc = c:mutex("/rv/q")
    assert(mc:acquire(5))
    local ma = a:mutex("/rv/q")
    local calls = 0
    ma:on_revoke(function() calls = calls + 1 end)
    local got, done
    a:spawn(function()
      got = assert(ma:acquire(20))
      while not done do a:sleep(0.01) end
      assert(ma:release())
    end)
    local parts
    assert.is_true(util.wait_until(function()
      parts = b:mutex("/rv/q"):participants()
      return #parts == 2
    end, 10, { a, b, c }))
    assert.is_true(b:revoke(parts[2].path)) -- a's node, still waiting
    util.drive({ a, b, c }, 0.2)
    assert.are.equal(0, calls) -- not held yet: nobody to tell
    assert(mc:release())
    assert.is_true(util.wait_until(function() return got ~= nil end, 10, { a, b, c }), "not granted")
    assert.is_true(util.wait_until(function() return calls == 1 end, 10, { a, b, c }),
      "the handler was not called at the grant")
    util.drive({ a, b, c }, 0.2)
    assert.are.equal(1, calls)
    done = true
    assert(a:run(10))
  end)

  it("a failing handler is logged and the hold goes on; the watch ends with the session", function()
    local lines = {}
    local a = connect({ identity = "err-a", log = function(line) lines[#lines + 1] = line end })
    local b = connect("err-b")
    local m = a:mutex("/rv/err")
    m:on_revoke(function() error("handler bug") end)
    assert(m:acquire(5))
    local node = m:node()
    assert.is_true(b:revoke(node))
    assert.is_true(util.wait_until(function()
      for _, l in ipairs(lines) do if l:find("handler bug", 1, true) then return true end end
      return false
    end, 10, { a, b }))
    assert.is_true(m:is_held())
    a:close()
    assert.are.equal(0, watches_on(zk, node))
    assert_code("ZNONODE", pack(b:revoke(node)))
  end)

  it("give-up paths with a handler set leave no node and no watch: timeout, cancel, owner gone, close", function()
    local a, b = connect("gu-a"), connect("gu-b")
    local mb = b:mutex("/rv/gu")
    assert(mb:acquire(5))
    local ma = a:mutex("/rv/gu")
    local calls = 0
    ma:on_revoke(function() calls = calls + 1 end)
    assert_code("ETIMEDOUT", pack(ma:acquire(0.2)))
    assert.is_true(util.wait_until(function() return #util.children(b, "/rv/gu") == 1 end, 10, { a, b }))
    local res
    a:spawn(function() res = pack(ma:acquire(30)) end)
    assert.is_true(util.wait_until(function() return #util.children(b, "/rv/gu") == 2 end, 10, { a, b }))
    assert.are.equal(1, ma:cancel())
    assert.is_true(util.wait_until(function() return res ~= nil end, 10, { a, b }))
    assert_code("ECANCELED", res)
    assert.is_true(util.wait_until(function() return #util.children(b, "/rv/gu") == 1 end, 10, { a, b }))
    -- granted, then its owner coroutine ends without releasing: reaped, the watch forgotten
    local node
    a:spawn(function() assert(ma:acquire(30)); node = ma:node() end)
    assert(mb:release())
    assert.is_true(util.wait_until(function() return node ~= nil end, 10, { a, b }))
    assert.is_true(util.wait_until(function() return #util.children(b, "/rv/gu") == 0 end, 10, { a, b }))
    assert.are.equal(0, watches_on(zk, node))
    -- held with a handler when the client closes: the node goes with the session
    assert(ma:acquire(5))
    node = ma:node()
    a:close()
    assert.are.same({}, util.children(b, "/rv/gu"))
    assert.are.equal(0, watches_on(zk, node))
    assert.are.equal(0, calls)
  end)

  it("rejects bad input: revoke's node and options, on_revoke's handler; missing and non-lock nodes", function()
    local a = connect("bad")
    util.assert_words(util.error_of(a.revoke, a, nil), { "revoke", "node" })
    util.assert_words(util.error_of(a.revoke, a, 42), { "revoke", "node" })
    util.assert_words(util.error_of(a.revoke, a, "relative/node"), { "revoke", "node" })
    util.assert_words(util.error_of(a.revoke, a, "/x", 5), { "revoke", "options" })
    util.assert_words(util.error_of(a.revoke, a, "/x", { tmeout = 1 }), { "revoke", "tmeout" })
    local res = pack(a:revoke("/rv/none/_c_x-lock-0000000001"))
    assert_code("ZNONODE", res)
    assert.is_truthy(res[2]:find("no such node", 1, true))
    assert(a:create("/rv/persistent", "data", { parents = true }))
    res = pack(a:revoke("/rv/persistent"))
    assert_code("EINVAL", res)
    assert.are.equal("data", (a:get("/rv/persistent"))) -- left alone
    local m = a:mutex("/rv/bad")
    util.assert_words(util.error_of(m.on_revoke, m, "fn"), { "on_revoke", "function" })
    util.assert_words(util.error_of(m.on_revoke, function() end), { "on_revoke", "colon" })
    local sem = a:semaphore("/rv/badsem", 2)
    util.assert_words(util.error_of(sem.on_revoke, sem, 1), { "on_revoke", "function" })
    local lease = assert(sem:acquire(5))
    util.assert_words(util.error_of(lease.on_revoke, lease, {}), { "on_revoke", "function" })
    util.assert_words(util.error_of(lease.on_revoke, {}, nil), { "lease:on_revoke" })
    local smx = a:semaphore_mutex("/rv/badsmx")
    util.assert_words(util.error_of(smx.on_revoke, smx, true), { "on_revoke", "function" })
    assert(lease:release())
    a:close()
    util.assert_words(util.error_of(a.revoke, a, "/x"), { "revoke", "closed" })
  end)
end)
