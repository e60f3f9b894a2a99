-- Revocation interop with Apache Curator 5.4 (Debian's libcurator-recipes-java), both ways, on
-- one real ZooKeeper server and one Curator JVM (spec/support/peers/CuratorPeer.java):
--   * Curator's Revoker.attemptRevoke against zklock holders (mutex, write side, and a semaphore
--     lease, which Curator's own holders cannot offer): the on_revoke handler runs once per
--     request; a zklock holder without a handler keeps its hold;
--   * zklock's client:revoke against a Curator holder that called makeRevocable (mutex and a
--     read-write lock side): its listener runs once per request; with release_on_revoke the
--     Curator holder lets go and the zklock waiter gets the lock.
--   busted --lua=lua5.4 spec/74-curator-revoke_spec.lua
local testing = require("zklock.testing")
local util = require("support.util")
local peers = require("support.peers.peer")

describe("revocation interop with Apache Curator 5.4 #interop", function()
  local zk, cur, c

  local function pump(dt) util.drive({ c }, dt) end

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    cur = peers.curator(zk.hosts)
    c = util.connect(zk.hosts, { session_timeout = 10, identity = "zklock-revoke" })
  end)

  teardown(function()
    util.close_all()
    peers.stop_all()
    if zk then zk:stop() end
  end)

  -- Curator listener calls so far for hold `id`
  local function revoked(id)
    local r = cur:call("revoked", { id = id }, 10, pump)
    assert.equal("ok", r.status, r.text)
    return tonumber(r.f.n)
  end

  it("Curator's Revoker.attemptRevoke reaches zklock holders' on_revoke, once per request", function()
    local cases = {
      { path = "/interop/revoke/mutex", make = function() return c:mutex("/interop/revoke/mutex") end },
      { path = "/interop/revoke/rw", make = function() return c:rwlock("/interop/revoke/rw").write end },
    }
    for _, case in ipairs(cases) do
      local l = case.make()
      local calls = {}
      l:on_revoke(function(_, t, node) calls[#calls + 1] = { t, node } end)
      assert(l:acquire(5))
      local node = l:node()
      for i = 1, 2 do
        local r = cur:call("revoke", { path = node }, 10, pump)
        assert.equal("ok", r.status, r.text)
        assert.is_true(util.wait_until(function() return #calls == i end, 10, { c }), case.path)
        util.drive({ c }, 0.1)
        assert.are.equal(i, #calls, case.path .. ": more calls than requests")
      end
      assert.are.equal(l, calls[1][1])
      assert.are.equal(node, calls[1][2])
      assert(l:release())
    end
    -- a semaphore lease (Curator cannot revoke its own leases, but can ask a zklock holder)
    local sem = c:semaphore("/interop/revoke/sem", 2)
    local lease = assert(sem:acquire(5))
    local got = 0
    lease:on_revoke(function() got = got + 1 end)
    local r = cur:call("revoke", { path = lease:node() }, 10, pump)
    assert.equal("ok", r.status, r.text)
    assert.is_true(util.wait_until(function() return got == 1 end, 10, { c }))
    assert(lease:release())
    -- a holder without on_revoke: untouched
    local m = c:mutex("/interop/revoke/plain")
    assert(m:acquire(5))
    r = cur:call("revoke", { path = m:node() }, 10, pump)
    assert.equal("ok", r.status, r.text)
    util.drive({ c }, 0.3)
    assert.is_true(m:is_held())
    assert(m:release())
    -- attemptRevoke on a node that is gone succeeds quietly (Curator ignores NoNode)
    r = cur:call("revoke", { path = "/interop/revoke/plain/_c_gone-lock-0000000009" }, 10, pump)
    assert.equal("ok", r.status, r.text)
  end)

  it("zklock's client:revoke reaches a Curator holder's makeRevocable listener, once per request", function()
    for _, recipe in ipairs({ "mutex", "write", "read" }) do
      local path = "/interop/revoke/curator-" .. recipe
      local id = "rv-" .. recipe
      local h = cur:call("hold", { id = id, recipe = recipe, path = path, timeout_ms = 10000, revocable = 1 }, 20, pump)
      assert.equal("ok", h.status, h.text)
      local node = h.f.node
      assert.are.equal(0, revoked(id))
      for i = 1, 2 do
        assert.is_true(c:revoke(node))
        assert.is_true(util.wait_until(function() return revoked(id) == i end, 10, { c }),
          recipe .. ": listener calls " .. revoked(id))
      end
      util.drive({ c }, 0.3)
      assert.are.equal(2, revoked(id), recipe .. ": more listener calls than requests")
      local r = cur:call("release", { id = id }, 10, pump)
      assert.equal("ok", r.status, r.text)
      assert.are.same({}, util.children(c, path))
    end
  end)

  it("a cooperative Curator holder lets go when zklock asks, and the zklock waiter gets the lock", function()
    local path = "/interop/revoke/handover"
    local h = cur:call("hold", { id = "coop", recipe = "mutex", path = path, timeout_ms = 10000, revocable = 1,
                                 release_on_revoke = 1 }, 20, pump)
    assert.equal("ok", h.status, h.text)
    local m = c:mutex(path)
    local got, done
    c:spawn(function()
      got = util.pack(m:acquire(20))
      while not done do c:sleep(0.01) end
      assert(m:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(c, path) == 2 end, 10, { c }))
    util.drive({ c }, 0.2)
    assert.is_nil(got, "zklock acquired while Curator held the mutex")
    assert.is_true(c:revoke(h.f.node))
    assert.is_true(util.wait_until(function() return got ~= nil end, 15, { c }))
    assert.are.equal(m, got[1], tostring(got[2]))
    assert.are.equal(1, revoked("coop"))
    done = true
    assert(c:run(10))
    assert.are.same({}, util.children(c, path))
  end)
end)
