-- Group membership (client:member, client:group) and TTL nodes (client:create's ttl) against a
-- real ZooKeeper server:
--   * a member's node, its data and updates, seen by a group on another client (joined,
--     updated, left); close deletes the node;
--   * the node deleted by someone else: made again at once (deleted, created), the group sees
--     left then joined;
--   * the member's session expired at the server: the member is made again on the new session,
--     the group sees left then joined, within bounds; also when the emptied group node (a
--     container) is reaped and made again between the group's reads (own server, delayed proxy,
--     testing.check.cache over a cache of the group node);
--   * a member process killed with SIGKILL: the group sees it leave once its session expires
--     (not before), within bounds;
--   * protected and sequential names (Curator's `_c_<uuid>-<name>` and sequence suffix), made
--     again at the same name;
--   * TTL nodes: reaped by the server after their TTL (a server with extended types), refused
--     with a clear error by a server without them; bad input.
--   busted --lua=lua5.4 spec/49-member_spec.lua
--   busted --lua=luajit --run=luajit spec/49-member_spec.lua
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")
local fw = require("support.fault_worker")

local pack, assert_code = util.pack, util.assert_code

-- the events of a group as "event id=data" strings
local function group_recorder(g)
  local evs = {}
  g:on_change(function(event, _, id, data)
    evs[#evs + 1] = event == "initialized" and "initialized" or ("%s %s=%s"):format(event, tostring(id), tostring(data))
  end)
  return evs
end

local function member_recorder(m)
  local evs = {}
  m:on_change(function(event, _, path) evs[#evs + 1] = event .. " " .. tostring(path) end)
  return evs
end

describe("client:member and client:group", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  it("a member's node, data and updates, seen by a group on another client; close deletes it", function()
    local c, o = connect(), connect()
    local g = o:group("/mem/basic")
    local gevs = group_recorder(g)
    assert.is_true(g:await(10))
    assert.are.same({}, g:members())
    local m = c:member("/mem/basic/alpha", "v1")
    local mevs = member_recorder(m)
    assert.is_true(m:await(10))
    assert.are.equal("/mem/basic/alpha", m:node())
    local data, st = o:get("/mem/basic/alpha")
    assert.are.equal("v1", data)
    assert.are.equal(c:session(), st.ephemeral_owner)
    assert.is_true(util.wait_until(function() return g:members().alpha == "v1" end, 10, { c, o }))
    assert.is_true(m:set("v2") == m)
    assert.is_true(m:await(10))
    assert.are.equal("v2", (o:get("/mem/basic/alpha")))
    assert.is_true(util.wait_until(function() return g:members().alpha == "v2" end, 10, { c, o }))
    assert.is_true(m:close())
    assert.is_true(util.wait_until(function() return g:members().alpha == nil end, 10, { c, o }))
    assert.is_false(o:exists("/mem/basic/alpha"))
    assert.are.same({ "initialized", "joined alpha=v1", "updated alpha=v2", "left alpha=v2" }, gevs)
    assert.are.same({ "created /mem/basic/alpha" }, mevs)
    assert.are.same({ creates = 1, writes = 1 }, m:stats())
    g:close()
  end)

  it("a node deleted by someone else is made again at once; the group sees left, then joined", function()
    local c, o = connect(), connect()
    local g = o:group("/mem/del")
    local gevs = group_recorder(g)
    assert.is_true(g:await(10))
    local m = c:member("/mem/del/beta", "b")
    local mevs = member_recorder(m)
    assert.is_true(m:await(10))
    assert.is_true(util.wait_until(function() return g:members().beta == "b" end, 10, { c, o }))
    local _, st1 = o:get("/mem/del/beta")
    for round = 1, 3 do
      assert(o:delete("/mem/del/beta"))
      assert.is_true(util.wait_until(function() return m:stats().creates == round + 1 and m:is_current() end,
        10, { c, o }), "round " .. round .. ": not made again")
      -- the group sees each round (a node made again within a round trip may be seen as one
      -- removed+added or not at all by a cache: wait for its join before the next delete)
      assert.is_true(util.wait_until(function() return #gevs >= 2 + 2 * round end, 10, { c, o }),
        "round " .. round .. ": " .. table.concat(gevs, ", "))
    end
    local data, st2 = o:get("/mem/del/beta")
    assert.are.equal("b", data)
    assert.is_true(st2.czxid > st1.czxid)
    assert.is_true(util.wait_until(function() return g:members().beta == "b" and #gevs >= 8 end, 10, { c, o }),
      table.concat(gevs, ", "))
    assert.are.same({ "initialized", "joined beta=b", "left beta=b", "joined beta=b", "left beta=b",
                      "joined beta=b", "left beta=b", "joined beta=b" }, gevs)
    assert.are.same({ "created /mem/del/beta", "deleted /mem/del/beta", "created /mem/del/beta",
                      "deleted /mem/del/beta", "created /mem/del/beta", "deleted /mem/del/beta",
                      "created /mem/del/beta" }, mevs)
    m:close()
    g:close()
  end)

  it("the member's session expired: made again on the new session; the group sees left, then joined", function()
    local c = connect({ session_timeout = 4 })
    local o = connect()
    local g = o:group("/mem/exp")
    local gevs = group_recorder(g)
    assert.is_true(g:await(10))
    local m = c:member("/mem/exp/gamma", "g1")
    assert.is_true(m:await(10))
    assert.is_true(util.wait_until(function() return g:members().gamma == "g1" end, 10, { c, o }))
    m:set("g2")
    assert.is_true(m:await(10))
    assert.is_true(util.wait_until(function() return g:members().gamma == "g2" end, 10, { c, o }))
    local sid1 = c:session()
    for round = 1, 2 do
      local t0 = util.now()
      assert(testing.expire(c, zk.hosts))
      local ok = util.wait_until(function()
        local s = c.state == "CONNECTED" and c:session()
        return s and s ~= sid1 and m:is_current()
      end, 15, { c, o })
      assert.is_true(ok, "round " .. round .. ": the member was not made again on a new session")
      local _, st = o:get("/mem/exp/gamma")
      assert.are.equal(c:session(), st.ephemeral_owner)
      assert.are.equal("g2", (o:get("/mem/exp/gamma")))
      local took = util.now() - t0
      print(("\n  [expiry %d] member back on session %s after %.2f s"):format(round, c:session(), took))
      assert.is_true(took < 12, "too slow")
      sid1 = c:session()
      -- the group sees the old node go and the new one come before the next round
      assert.is_true(util.wait_until(function() return #gevs >= 3 + 2 * round end, 10, { c, o }),
        "round " .. round .. ": " .. table.concat(gevs, ", "))
    end
    -- the old node's deletion and the new node's creation, in that order, each round
    assert.are.same({ "initialized", "joined gamma=g1", "updated gamma=g2" }, { gevs[1], gevs[2], gevs[3] })
    local rest = {}
    for i = 4, #gevs do rest[#rest + 1] = gevs[i] end
    assert.are.same({ "left gamma=g2", "joined gamma=g2", "left gamma=g2", "joined gamma=g2" }, rest)
    assert.are.equal(3, m:stats().creates)
    m:close()
    g:close()
  end)

  it("a member process killed with SIGKILL leaves the group once its session expires, not before", function()
    local SESSION = 4
    local o = connect()
    local g = o:group("/mem/kill")
    local gevs = group_recorder(g)
    local left_at
    local rec = g:on_change(nil) -- replaced below (on_change returns the group)
    assert.are.equal(g, rec)
    g:on_change(function(event, _, id, data)
      gevs[#gevs + 1] = event == "initialized" and "initialized"
        or ("%s %s=%s"):format(event, tostring(id), tostring(data))
      if event == "left" then left_at = left_at or util.now() end
    end)
    assert.is_true(g:await(10))
    local w = testing.worker{ lua = fw.interpreter(), args = { zk.hosts, tostring(SESSION) }, code = [[
      local hosts, session = ...
      local zklock = require("zklock")
      local testing = require("zklock.testing")
      local c = assert(zklock.connect(hosts, { session_timeout = tonumber(session) }))
      local m = c:member("/mem/kill/worker", "pid=" .. testing.pid)
      assert(m:await(10))
      io.stdout:write("member ", m:node(), " ", c:session(), "\n")
      io.stdout:flush()
      for _ = 1, 6000 do c:sleep(0.02) end
    ]] }
    finally(function() w:stop() end)
    assert.is_true(util.wait_until(function() return g:members().worker ~= nil end, 20, { o }),
      "the worker's member did not join: " .. w:output())
    local _, st = o:get("/mem/kill/worker")
    assert.is_true(util.wait_until(function()
      return w:output():find("member /mem/kill/worker " .. st.ephemeral_owner, 1, true) ~= nil
    end, 10, { o }), "the worker did not say so: " .. w:output())
    local t_kill = util.now()
    w:signal("KILL")
    assert.is_true(fw.wait_exit(w, 5, function(s) util.drive({ o }, s) end))
    assert.is_true(util.wait_until(function() return left_at ~= nil end, SESSION + 8, { o }),
      "the killed member never left")
    local took = left_at - t_kill
    print(("\n  [kill -9] the group saw the member leave %.2f s after the kill (session %d s)"):format(took, SESSION))
    assert.is_true(took > SESSION - 1.5, "left before its session could have expired")
    assert.is_true(took < SESSION + 6, "left too late")
    assert.are.same({}, g:members())
    assert.are.equal("initialized", gevs[1])
    assert.truthy(gevs[2]:find("^joined worker=pid=%d+$"))
    assert.truthy(gevs[3]:find("^left worker=pid=%d+$"))
    assert.are.equal(3, #gevs)
    g:close()
  end)

  it("protected and sequential names, made again at the same name", function()
    local c, o = connect(), connect()
    local g = o:group("/mem/names")
    assert.is_true(g:await(10))
    local ps = c:member("/mem/names/n-", "ps", { protected = true, sequential = true })
    local p = c:member("/mem/names/p", "p", { protected = true })
    local s = c:member("/mem/names/s-", "s", { sequential = true })
    for _, m in ipairs({ ps, p, s }) do assert.is_true(m:await(10)) end
    local UUID = "_c_%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x%-"
    assert.truthy(util.basename(ps:node()):find("^" .. UUID .. "n%-%d%d%d%d%d%d%d%d%d%d$"), ps:node())
    assert.truthy(util.basename(p:node()):find("^" .. UUID .. "p$"), p:node())
    assert.truthy(util.basename(s:node()):find("^s%-%d%d%d%d%d%d%d%d%d%d$"), s:node())
    assert.is_true(util.wait_until(function()
      local n = 0
      for _ in pairs(g:members()) do n = n + 1 end
      return n == 3
    end, 10, { c, o }))
    assert.are.equal("ps", g:members()[util.basename(ps:node())])
    local before = {}
    for i, m in ipairs({ ps, p, s }) do
      before[i] = m:node()
      assert(o:delete(m:node()))
    end
    assert.is_true(util.wait_until(function()
      return ps:stats().creates == 2 and p:stats().creates == 2 and s:stats().creates == 2
    end, 10, { c, o }))
    for i, m in ipairs({ ps, p, s }) do
      assert.are.equal(before[i], m:node())
      assert.truthy(o:exists(m:node()))
    end
    assert.are.equal(3, #util.children(o, "/mem/names"))
    for _, m in ipairs({ ps, p, s }) do m:close() end
    assert.is_true(util.wait_until(function() return #util.children(o, "/mem/names") == 0 end, 10, { c, o }))
    g:close()
  end)

  it("bad input: clear errors naming the argument", function()
    local c = connect()
    util.assert_words(util.error_of(c.member, c, "nope"), { "member", "#1" })
    util.assert_words(util.error_of(c.member, c, "/"), { "member", "node name" })
    util.assert_words(util.error_of(c.member, c, "/m/x", 5), { "member", "#2", "data" })
    util.assert_words(util.error_of(c.member, c, "/m/x", "", { ephemeral = true }), { "unknown option", "ephemeral" })
    util.assert_words(util.error_of(c.member, c, "/m/x", "", { protected = 1 }), { "protected", "boolean" })
    local m = c:member("/m/x", "")
    util.assert_words(util.error_of(m.set, m, nil), { "set", "data" })
    util.assert_words(util.error_of(m.on_change, m, 1), { "on_change", "function" })
    m:close()
    util.assert_words(util.error_of(m.set, m, "x"), { "set", "closed" })
    util.assert_words(util.error_of(c.group, c, 3), { "group", "#1" })
    util.assert_words(util.error_of(c.group, c, "/g", { depth = 2 }), { "unknown option", "depth" })
    local g = c:group("/g")
    util.assert_words(util.error_of(g.on_change, g, "x"), { "on_change", "function" })
    g:close()
    util.assert_words(util.error_of(g.members, g), { "members", "closed" })
    util.assert_words(util.error_of(c.create, c, "/t", "", { ttl = 0 }), { "ttl", "seconds > 0" })
    util.assert_words(util.error_of(c.create, c, "/t", "", { ttl = 1, ephemeral = true }), { "ttl", "persistent" })
    util.assert_words(util.error_of(c.create, c, "/t", "", { ttl = 1, container = true }), { "ttl", "persistent" })
  end)

  it("a TTL node on a server without extended types: refused with a clear error", function()
    local c = connect()
    local res = pack(c:create("/ttl-refused", "x", { ttl = 1 }))
    assert_code("ZUNIMPLEMENTED", res, "create with ttl")
    util.assert_words(res[2], { "TTL", "zookeeper.extendedTypesEnabled=true" })
    assert.is_false(c:exists("/ttl-refused"))
  end)
end)

describe("TTL nodes", function()
  local fx = fixture.server({ extended_types = true }, { own = "TTL nodes need zookeeper.extendedTypesEnabled" })
  local connect = fx.connect

  it("are reaped by the server after their TTL (its reaper runs every 100 ms here); a child keeps one", function()
    local c = connect()
    local TTL = 1
    local t0 = util.now()
    assert.are.equal("/ttl/a", c:create("/ttl/a", "x", { ttl = TTL, parents = true }))
    local seq = assert(c:create("/ttl/s-", "y", { ttl = TTL, sequential = true }))
    assert.truthy(seq:find("^/ttl/s%-%d%d%d%d%d%d%d%d%d%d$"))
    assert(c:create("/ttl/kept", "z", { ttl = TTL }))
    assert(c:create("/ttl/kept/child", "c"))
    local gone_at
    assert.is_true(util.wait_until(function()
      if not gone_at and c:exists("/ttl/a") == false and c:exists(seq) == false then gone_at = util.now() end
      return gone_at ~= nil
    end, TTL + 10, { c }), "a TTL node was not reaped")
    local took = gone_at - t0
    print(("\n  [ttl] nodes with a TTL of %g s reaped %.2f s after their creation"):format(TTL, took))
    assert.is_true(took >= TTL - 0.05, "reaped before its TTL")
    assert.truthy(c:exists("/ttl/kept"), "a TTL node with a child was reaped")
  end)
end)

-- spec/49's expiry case failed in CI (2 of 7 runs: the group saw left and never joined again)
-- when the group node, a container emptied by the expiry, was reaped by the server and made again
-- by the member between the group's listing and its get. Here the race is made likely: the
-- server reaps every second, the group's client sits behind a proxy that delays everything by
-- DELAY ms each way, and the member's client is driven again only once the group's listing has
-- reached the server (the reap then falls between the group's two reads in most rounds). A plain
-- cache of the group node on the group's client is judged by testing.check.cache at a snapshot
-- after each round.
describe("a group whose container node the server reaps when its only member's session expires", function()
  local zk, net
  local DELAY = 600 -- ms
  fixture.server({ container_check_ms = 1000 },
    { own = "reaps containers every second: the reap falls between the group's delayed reads" },
    function(s) zk = s end)
  after_each(function()
    if net then net:stop() end
    net = nil
    util.close_all()
  end)

  it("sees the member leave and join again each round; the cache history checks (2 rounds)", function()
    local check = require("zklock.testing.check")
    net = testing.proxy(zk.hosts)
    local o = util.connect(net.hosts, { identity = "group" })
    local c = util.connect(zk.hosts, { identity = "member", session_timeout = 4 })
    local g = o:group("/mem/reap")
    local gevs = group_recorder(g)
    assert.is_true(g:await(10))
    local m = c:member("/mem/reap/gamma", "g1")
    assert.is_true(m:await(10))
    local rc, rt = check.recorder(nil, "cache"), check.recorder(nil, "test")
    local cache = o:cache("/mem/reap", { depth = 1 })
    check.record_cache(rc, cache)
    rc:log("session", "-", { sid = (o:session()) })
    assert(cache:await(10))
    local function seen(pred) return util.wait_until(pred, 10, { c, o }) end
    for round = 1, 2 do
      seen(function() return #gevs >= 2 * round end) -- bounded; judged at the end
      local sid = c:session()
      net:delay(DELAY)
      assert(testing.expire(c, zk.hosts))
      util.drive({ o }, 2 * DELAY / 1000 + 0.1) -- the member's client waits
      assert.is_true(util.wait_until(function()
        return c.state == "CONNECTED" and c:session() ~= sid and m:is_current()
      end, 15, { c, o }), "round " .. round .. ": the member was not made again")
      net:delay(0)
      -- the group and the cache catch up (bounded; the checker and the events judge)
      seen(function() return #gevs >= 2 * round + 2 and cache:get("/mem/reap/gamma") end)
      assert(check.snapshot(rt, c, "/mem/reap", round))
    end
    local ok, msg = check.cache(check.load(rc, rt), { window = 2000, settle = 2000 })
    assert(ok, msg)
    assert.are.same({ "initialized", "joined gamma=g1", "left gamma=g1", "joined gamma=g1", "left gamma=g1",
                      "joined gamma=g1" }, gevs)
    cache:close()
    g:close()
    m:close()
  end)
end)
