-- The election observer (client:election) over Apache Curator 5.4 participants: LeaderSelector and
-- LeaderLatch (spec/support/peers/CuratorPeer.java) next to client:leader and client:latch on one
-- real ZooKeeper. The observer must name the leader Curator's own getLeader() names, list the
-- participants in Curator's order, report each Curator term with the czxid Curator logged for it
-- (its B lines), every end, and "none" once everybody left.
--   busted --lua=lua5.4 spec/79-curator-election_spec.lua
local testing = require("zklock.testing")
local util = require("support.util")
local peers = require("support.peers.peer")

local names = peers.names

-- Curator's B lines: { { id =, token = }, ... } in the order written.
local function begun(log)
  local out = {}
  for line in (testing.read_file(log) or ""):gmatch("[^\n]+") do
    local f = {}
    for w in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = w end
    if f[1] == "B" then out[#out + 1] = { id = f[4], token = tonumber(f[5]) } end
  end
  return out
end

-- The reports must be a well-formed history: every "ended" ends the term reported just before,
-- every "leader" or "none" follows an end (or is the first report), tokens rise.
local function well_formed(seen)
  local cur, last_token = nil, -1
  for i, ev in ipairs(seen) do
    local kind, id, token = ev.event, ev.id, ev.token
    if kind == "ended" then
      assert(cur and cur.id == id and cur.token == token, ("report %d: ended %s %s, but %s led"):format(i,
        tostring(id), tostring(token), cur and (cur.id .. " " .. cur.token) or "nobody"))
      cur = false
    else
      assert(i == 1 or cur == false, ("report %d: %s without an end of the term before"):format(i, kind))
      if kind == "leader" then
        assert(token > last_token, ("report %d: token %d after %d"):format(i, token, last_token))
        last_token = token
        cur = { id = id, token = token }
      else
        cur = false
      end
    end
  end
end

describe("election observer over Curator participants #interop", function()
  local zk, cur, c, co

  local function pump(dt) util.drive({ c, co }, dt) end
  local function wait(pred, what) assert(util.wait_until(pred, 20, { c, co }), "timed out waiting for " .. what) end

  local function recorder(path)
    local e, seen = co:election(path), {}
    e:on_change(function(event, _, id, token) seen[#seen + 1] = { event = event, id = id, token = token } end)
    return e, seen
  end

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    cur = peers.curator(zk.hosts, { session_ms = 4000 })
    c = util.connect(zk.hosts, { session_timeout = 4, identity = "zklock-spec" })
    co = util.connect(zk.hosts, { session_timeout = 4, identity = "observer" })
  end)

  teardown(function()
    util.close_all()
    peers.stop_all()
    if zk then zk:stop() end
  end)

  it("LeaderSelector behind client:leader: Curator's leader and order, its term and token, then none", function()
    local path = "/interop/observe/selector"
    local e, seen = recorder(path)
    wait(function() return #seen >= 1 end, "the first view")
    assert.equal("none", seen[1].event)
    local stop = false
    local l = c:leader(path, function(me) while not stop and me:sleep(0.02) do end end, { id = "zk-1" })
    wait(function() return l:is_leader() and #seen >= 2 end, "zk-1's term")
    local log = peers.tmpdir("obs-sel") .. "/cur.log"
    local seq = cur:send("leader", { path = path, id = "cur-1", log = log, hold_ms = 60000, seconds = 60 })
    wait(function() return util.child_count(c, path) == 2 end, "Curator queued")
    local r = cur:call("leader_participants", { kind = "selector", path = path }, 20, pump)
    assert.equal("ok", r.status, r.text)
    assert.equal("zk-1", r.f.leader)
    assert.equal("zk-1", (e:leader()))
    assert.same({ "zk-1", "cur-1" }, e:participants())
    assert.same({ "zk-1:1", "cur-1:0" }, names(r.f.list))
    -- zklock gives up: Curator leads, with the token it logged
    stop = true
    wait(function() return #begun(log) == 1 and #seen >= 4 end, "Curator's term reported")
    local b = begun(log)[1]
    assert.same({ event = "leader", id = "cur-1", token = b.token }, seen[4])
    assert.same({ e:leader() }, { "cur-1", b.token })
    r = cur:call("leader_participants", { kind = "selector", path = path }, 20, pump)
    assert.equal("cur-1", r.f.leader)
    assert.equal("ok", cur:call("leader_stop", { id = "cur-1" }, 20, pump).status)
    assert.equal("ok", cur:wait(seq, 30, pump).status)
    wait(function() return #seen >= 6 end, "the end of Curator's term")
    assert.same({ "none", "leader", "ended", "leader", "ended", "none" },
      { seen[1].event, seen[2].event, seen[3].event, seen[4].event, seen[5].event, seen[6].event })
    assert.equal("cur-1", seen[5].id)
    well_formed(seen)
    assert.is_false(e:leader())
    l:close()
    e:close()
  end)

  it("LeaderLatch and client:latch: Curator's leader and order, each hand-over, then none", function()
    local path = "/interop/observe/latch"
    local e, seen = recorder(path)
    wait(function() return #seen >= 1 end, "the first view")
    assert.equal("none", seen[1].event)
    local l = c:latch(path, { id = "zk-1" })
    assert.is_true(l:await(20))
    wait(function() return #seen >= 2 end, "zk-1's term reported")
    local log = peers.tmpdir("obs-latch") .. "/cur.log"
    local seq = cur:send("latch", { path = path, id = "cur-1", log = log, hold_ms = 60000, seconds = 60 })
    wait(function() return util.child_count(c, path) == 2 end, "Curator's latch queued")
    local r = cur:call("leader_participants", { kind = "latch", path = path }, 20, pump)
    assert.equal("ok", r.status, r.text)
    assert.equal("zk-1", r.f.leader)
    assert.same({ e:leader() }, { "zk-1", l:token() })
    assert.same({ "zk-1", "cur-1" }, e:participants())
    local t1 = l:token()
    assert.is_true(l:close())
    wait(function() return #begun(log) == 1 and #seen >= 4 end, "Curator's latch term reported")
    assert.same({ event = "ended", id = "zk-1", token = t1 }, seen[3])
    assert.same({ event = "leader", id = "cur-1", token = begun(log)[1].token }, seen[4])
    assert.equal("ok", cur:call("leader_stop", { id = "cur-1" }, 20, pump).status)
    assert.equal("ok", cur:wait(seq, 30, pump).status)
    wait(function() return #seen >= 6 end, "the end of Curator's latch term")
    assert.equal("none", seen[6].event)
    well_formed(seen)
    e:close()
  end)

  it("a LeaderSelector with autoRequeue: every term Curator logged is reported, in order", function()
    local path = "/interop/observe/requeue"
    local e, seen = recorder(path)
    wait(function() return #seen >= 1 end, "the first view")
    local log = peers.tmpdir("obs-requeue") .. "/cur.log"
    local seq = cur:send("leader", { path = path, id = "cur-r", log = log, hold_ms = 250, seconds = 2 })
    assert.equal("ok", cur:wait(seq, 60, pump).status)
    local terms = begun(log)
    assert.is_true(#terms >= 3, "Curator led only " .. #terms .. " terms")
    wait(function() return #seen > 0 and seen[#seen].event == "none" end, "none after Curator left")
    well_formed(seen)
    local reported = {}
    for _, ev in ipairs(seen) do
      if ev.event == "leader" then reported[#reported + 1] = ev.token; assert.equal("cur-r", ev.id) end
    end
    local logged = {}
    for _, t in ipairs(terms) do logged[#logged + 1] = t.token end
    assert.same(logged, reported)
    print(("\n  [observer] %d Curator terms logged, %d reported, %d reports in all"):format(#logged, #reported, #seen))
    e:close()
  end)
end)
