-- The shared ZooKeeper of spec/support/fixture.lua: every describe that shares it gets it as clean
-- as a fresh server (no znode but /zookeeper, no watch, no ephemeral, no client connection), even
-- after a describe that dropped a client without closing it (collected: its finalizer ends its
-- session); one that was killed is replaced; options other than the shared server's need o.own.
--   busted --lua=lua5.4 spec/02-fixture_spec.lua
--   busted --lua=luajit --run=luajit spec/02-fixture_spec.lua
local zklock = require("zklock")
local util = require("support.util")
local fixture = require("support.fixture")

-- What the describes below hand on to each other (a module upvalue: the describes of one file
-- run in order).
local seen = {}

local function assert_clean(zk)
  local c = util.connect(zk.hosts)
  assert.are.same({ "zookeeper" }, util.children(c, "/"))
  c:close()
  assert.is_true(util.wait_until(function()
    local m = assert(zk:mntr())
    return m.zk_watch_count == 0 and m.zk_ephemerals_count == 0
  end, 2), "watches or ephemerals at the start of a describe")
end

describe("fixture: a describe that leaves things behind", function()
  local zk
  fixture.server({}, {}, function(s) zk = s end)

  it("makes nodes, ephemerals and a watch, and drops a client without closing it", function()
    seen.port, seen.pid = zk.port, zk.pid
    local c = util.connect(zk.hosts)
    assert(c:create("/fixture/a/b/c", "x", { parents = true }))
    local h = c:mutex("/fixture/held")
    assert(h:acquire(5))
    -- d is dropped below without close(); until then `keep` holds it, so that it cannot be
    -- collected (its finalizer ends its session) before its nodes are counted
    local keep = {}
    local function leak() -- in a function of its own, so no stack slot keeps the client alive
      local d = assert(zklock.connect(zk.hosts, { session_timeout = 30 }))
      keep[1] = d
      assert(d:mutex("/fixture/lock"):acquire(5))
      assert(d:create("/fixture/eph", "", { ephemeral = true }))
    end
    leak()
    -- a waiter behind h: a watch on h's node (c is closed after the test, as a spec's clients are)
    local w = c:mutex("/fixture/held")
    c:spawn(function() w:acquire(30) end)
    local m
    assert.is_true(util.wait_until(function()
      m = assert(zk:mntr())
      return m.zk_watch_count >= 1 and m.zk_ephemerals_count >= 3
    end, 20, { c }), ("no watch or ephemerals to clean up: %d watches, %d ephemerals")
      :format(m.zk_watch_count, m.zk_ephemerals_count))
    assert.are.same({ "fixture", "zookeeper" }, util.children(c, "/"))
    assert.are.equal("client", zklock.type(keep[1]))
    keep[1] = nil -- dropped, never closed
  end)
end)

describe("fixture: the next describe", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, {}, function(s) zk = s end)

  it("gets the same server, clean", function()
    assert.are.equal(seen.port, zk.port)
    assert.are.equal(seen.pid, zk.pid)
    assert_clean(zk)
  end)

  it("(which this describe then kills)", function()
    zk:kill()
    assert.is_false(zk:running())
  end)
end)

describe("fixture: after a describe that killed the shared server", function()
  local zk
  fixture.server({}, {}, function(s) zk = s end)

  it("gets a fresh one, clean", function()
    assert.is_true(zk:running())
    assert.are_not.equal(seen.pid, zk.pid)
    assert_clean(zk)
  end)
end)

describe("fixture: options", function()
  it("other than the shared server's, without o.own, raise naming the option", function()
    local err = util.error_of(fixture.server, { container_check_ms = 50 }, {})
    util.assert_words(err, { "container_check_ms", "o.own" })
    err = util.error_of(fixture.server, {}, { own = true })
    util.assert_words(err, { "o.own", "string" })
  end)
end)
