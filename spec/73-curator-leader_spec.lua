-- Leader election interop with Apache Curator 5.4: Curator's LeaderSelector next to
-- client:leader, Curator's LeaderLatch next to client:latch, on the same paths of one real
-- ZooKeeper. Curator runs in spec/support/peers/CuratorPeer.java (its leader/latch commands),
-- zklock in worker processes (spec/support/peers/zklock_leader.lua) and in this process. Every
-- participant logs its terms (CLOCK_MONOTONIC ms, with the fencing token) and
-- spec/support/intervals.lua checks them: no two terms overlap, tokens grow with each term.
--   busted --lua=lua5.4 spec/73-curator-leader_spec.lua          (about 1 min)
--   busted --lua=luajit --run=luajit spec/73-curator-leader_spec.lua
-- ZKLOCK_LEADER_SECONDS (default 8) sets the length of each mixed run.
local testing = require("zklock.testing")
local util = require("support.util")
local peers = require("support.peers.peer")
local leaders = require("support.leaders")
local intervals = require("support.intervals")

local SECONDS = tonumber(os.getenv("ZKLOCK_LEADER_SECONDS") or "") or 8

local names = peers.names

describe("leader election interop with Apache Curator 5.4 #interop", function()
  local zk, cur, c

  local function pump(dt) util.drive({ c }, dt) end

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    cur = peers.curator(zk.hosts, { session_ms = 4000 })
    c = util.connect(zk.hosts, { session_timeout = 4, identity = "zklock-spec" })
  end)

  teardown(function()
    util.close_all()
    leaders.stop_all()
    peers.stop_all()
    if zk then zk:stop() end
  end)

  it("LeaderSelector and client:leader see each other's ids, in queue order, and hand over", function()
    local path = "/interop/leader/visible"
    local stop = false
    local term_of_zk
    local l = c:leader(path, function(me)
      term_of_zk = me:token()
      while not stop and me:sleep(0.02) do end
    end, { id = "zk-1" })
    assert.is_true(util.wait_until(function() return l:is_leader() end, 20, { c }))
    local log = peers.tmpdir("sel") .. "/cur.log"
    local seq = cur:send("leader", { path = path, id = "cur-1", log = log, hold_ms = 300, seconds = 60 })
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 2 end, 20, { c }))
    local r = cur:call("leader_participants", { kind = "selector", path = path }, 20, pump)
    assert.equal("ok", r.status, r.text)
    assert.same({ "zk-1:1", "cur-1:0" }, names(r.f.list))
    assert.equal("zk-1", r.f.leader)
    assert.same({ "zk-1", "cur-1" }, l:participants())
    assert.equal("zk-1", l:leader())
    -- zklock gives up: Curator leads (its B line), with a larger token
    stop = true
    assert.is_true(util.wait_until(function()
      return (testing.read_file(log) or ""):find("^B\t") ~= nil
    end, 20, { c }))
    assert.is_false(l:is_leader())
    assert.equal("cur-1", l:leader())
    local f = {}
    for w in (testing.read_file(log):match("^B\t[^\n]*") .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = w end
    assert.is_true(tonumber(f[5]) > term_of_zk)
    l:close()
    assert.equal("ok", cur:call("leader_stop", { id = "cur-1" }, 20, pump).status)
    assert.equal("ok", cur:wait(seq, 30, pump).status)
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 0 end, 20, { c }))
  end)

  it("LeaderLatch and client:latch see each other's ids and hand over", function()
    local path = "/interop/latch/visible"
    local l = c:latch(path, { id = "zk-1" })
    assert.is_true(l:await(20))
    local log = peers.tmpdir("latch") .. "/cur.log"
    local seq = cur:send("latch", { path = path, id = "cur-1", log = log, hold_ms = 60000, seconds = 60 })
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 2 end, 20, { c }))
    for _, n in ipairs(util.children(c, path)) do assert.matches("%-latch%-%d+$", n) end
    local r = cur:call("leader_participants", { kind = "latch", path = path }, 20, pump)
    assert.equal("ok", r.status, r.text)
    assert.same({ "zk-1:1", "cur-1:0" }, names(r.f.list))
    assert.equal("zk-1", r.f.leader)
    assert.same({ "zk-1", "cur-1" }, l:participants())
    local token = l:token()
    assert.is_true(l:close()) -- Curator's latch leads once our node is gone
    assert.is_true(util.wait_until(function()
      return (testing.read_file(log) or ""):find("^B\t") ~= nil
    end, 20, { c }))
    local l2 = c:latch(path, { id = "zk-2" })
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 2 end, 20, { c }))
    assert.same({ "cur-1", "zk-2" }, l2:participants())
    assert.equal("cur-1", l2:leader())
    util.assert_code("ETIMEDOUT", util.pack(l2:await(0.3)))
    assert.equal("ok", cur:call("leader_stop", { id = "cur-1" }, 20, pump).status)
    assert.is_true(l2:await(20))
    assert.is_true(l2:token() > token)
    assert.equal("ok", cur:wait(seq, 30, pump).status)
    assert.is_true(l2:close())
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 0 end, 20, { c }))
  end)

  local function mixed(kind, label)
    local path = "/interop/" .. kind .. "/mixed"
    local dir = peers.tmpdir(kind .. "-mixed")
    local seqs, workers = {}, {}
    for i = 1, 2 do
      seqs[i] = cur:send(kind, { path = path, id = "cur-" .. i, log = dir .. "/cur.log", hold_ms = 150,
                                 seconds = SECONDS })
      workers[i] = leaders.zklock{ hosts = zk.hosts, mode = kind, path = path, id = "zk-" .. i, hold_ms = 150,
                                   seconds = SECONDS, session = 4 }
    end
    for i = 1, 2 do
      assert.equal("ok", cur:wait(seqs[i], SECONDS + 60, pump).status)
      assert.is_true(workers[i]:wait_exit(60, pump), workers[i]:output())
    end
    local log = intervals.new()
    log:add_file(dir .. "/cur.log")
    for i = 1, 2 do
      log:add_file(workers[i].log)
      assert.is_nil((testing.read_file(workers[i].log) or ""):match("\nX\t[^\n]*"), testing.read_file(workers[i].log))
    end
    local r = log:check()
    print(("\n  [%s] %s"):format(label, r.report))
    assert.are.equal(0, r.overlaps, r.report)
    assert.are.equal(0, r.token_regressions, r.report)
    local by_rt = { curator = 0, zklock = 0 }
    for owner, n in pairs(r.by_owner) do
      local rt = owner:match("^(%a+)%-")
      by_rt[rt] = by_rt[rt] + n
    end
    assert.is_true(by_rt.curator >= 2 and by_rt.zklock >= 2, r.report)
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 0 end, 20, { c }))
    return r
  end

  it("LeaderSelector x2 and client:leader x2 (separate processes): one leader at a time", function()
    mixed("leader", "selector")
  end)

  it("LeaderLatch x2 and client:latch x2 (separate processes): one leader at a time", function()
    mixed("latch", "latch")
  end)
end)
