-- Fault injection on leader election, zklock and Curator 5.4 participants mixed on one path:
-- the leader's process killed with SIGKILL (zklock's and Curator's in turn), connection cuts and a
-- partition longer than the session timeout (the server expires the cut-off sessions), a session
-- expired from outside, and the ZooKeeper leader killed in a three-node ensemble. Every
-- participant logs its terms with their fencing tokens (spec/support/peers/zklock_leader.lua,
-- CuratorPeer.java's leader/latch commands); spec/support/intervals.lua checks that no two
-- terms overlap and that tokens grow, a killed participant's open term ending at its kill.
--   busted --lua=lua5.4 spec/92-faults-leader_spec.lua          (about 5 min)
--   busted --lua=luajit --run=luajit spec/92-faults-leader_spec.lua
-- #slow (not in the ASan run). The ensemble tests and the latch variants of the kill and cut
-- tests are #lua54 (the LuaJIT run has the election variants; its time budget is tight).
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")
local peers = require("support.peers.peer")
local leaders = require("support.leaders")
local intervals = require("support.intervals")

local function now() return core.now() end
local SESSION = 4 -- s, every participant

-- A participant: a zklock worker process or a Curator JVM of its own, running `kind` ("leader"
-- or "latch") on path, logging to its own file.
-- peer: a Curator JVM started before (peers.curator), so that several participants start together
local function participant(rt, kind, hosts, path, id, hold_ms, seconds, peer)
  if rt == "zklock" then
    local w = leaders.zklock{ hosts = hosts, mode = kind, path = path, id = id, hold_ms = hold_ms, seconds = seconds,
                              session = SESSION }
    return { rt = rt, id = id, log = w.log, proc = w }
  end
  local p = peer or peers.curator(hosts, { session_ms = SESSION * 1000 })
  local log = p.dir .. "/terms.log"
  local seq = p:send(kind, { path = path, id = id, log = log, hold_ms = hold_ms, seconds = seconds })
  return { rt = rt, id = id, log = log, proc = p, seq = seq }
end

local function kill(p)
  local at = now()
  if p.proc.kill then
    at = p.proc:kill()
  else
    os.execute(("kill -KILL %d 2>/dev/null"):format(p.proc.pid))
    local deadline = now() + 5000
    while p.proc:alive() and now() < deadline do testing.sleep(0.02) end
  end
  p.killed_at = at
  return at
end

-- Terms begun and not ended in p's log
local function open_terms(p)
  local begun = {}
  for f in fw.log_records(p.log) do
    if f[1] == "B" then begun[f[6]] = f elseif f[1] == "H" then begun[f[6]] = nil end
  end
  local out = {}
  for _, f in pairs(begun) do out[#out + 1] = { start = tonumber(f[6]), token = tonumber(f[5]) } end
  return out
end

local function check_all(list, label)
  local log = intervals.new()
  for _, p in ipairs(list) do log:add_file(p.log, p.killed_at or now()) end
  local r = log:check()
  print(("\n  [%s] %s"):format(label, r.report))
  assert.are.equal(0, r.overlaps, r.report)
  assert.are.equal(0, r.token_regressions, r.report)
  return r
end

describe("faults: leader election, zklock and Curator mixed #faults #slow", function()
  local zk, c
  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    c = util.connect(zk.hosts, { session_timeout = SESSION, identity = "spec" })
  end)
  teardown(function()
    util.close_all()
    leaders.stop_all()
    peers.stop_all()
    fw.stop_all()
    if zk then zk:stop() end
  end)

  for _, kind in ipairs({ "leader", "latch" }) do
    -- the latch variants are #lua54: the LuaJIT suite runs the election ones (time budget)
    local tag = kind == "latch" and " #lua54" or ""
    it(kind .. ": the leader's process killed with SIGKILL, 3 times, zklock's and Curator's" .. tag, function()
      local path = "/faults/" .. kind .. "/kill"
      local all, live = {}, {}
      local order = { "zklock", "curator", "zklock", "curator" }
      for i, rt in ipairs(order) do
        local p = participant(rt, kind, zk.hosts, path, rt .. "-" .. i, 600000, 300)
        all[#all + 1], live[#live + 1] = p, p
        -- queue in this order: wait for its node before starting the next
        assert.is_true(util.wait_until(function() return util.child_count(c, path) == i end, 60, { c }))
      end
      local kills, handovers = {}, {}
      for round = 1, 3 do
        local leader
        assert.is_true(util.wait_until(function()
          local n = 0
          for _, p in ipairs(live) do
            if #open_terms(p) > 0 then leader = p; n = n + 1 end
          end
          return n == 1
        end, 60, { c }), "no single leader in round " .. round)
        local at = kill(leader)
        kills[#kills + 1] = leader.rt
        for i, p in ipairs(live) do if p == leader then table.remove(live, i) break end end
        -- the next leader starts only after the killed one's session expired at the server
        local nxt
        assert.is_true(util.wait_until(function()
          for _, p in ipairs(live) do
            local o = open_terms(p)
            if #o > 0 then nxt = o[1] return true end
          end
        end, 60, { c }), "nobody took over in round " .. round)
        handovers[#handovers + 1] = ("%s->%.0fms"):format(leader.rt, nxt.start - at)
        assert.is_true(nxt.start - at > 0)
        -- a replacement joins at the end of the queue
        local rt = leader.rt
        local p = participant(rt, kind, zk.hosts, path, rt .. "-r" .. round, 600000, 300)
        all[#all + 1], live[#live + 1] = p, p
      end
      print(("\n  [%s kill -9] killed: %s; kill to next leader: %s"):format(kind, table.concat(kills, ","),
        table.concat(handovers, " ")))
      for _, p in ipairs(live) do kill(p) end
      local r = check_all(all, kind .. " kill -9")
      assert.is_true(r.terms >= 4)
      assert.is_true(util.wait_until(function() return util.child_count(c, path) == 0 end, 4 * SESSION, { c }))
    end)
  end

  for _, kind in ipairs({ "leader", "latch" }) do
    local tag = kind == "latch" and " #lua54" or ""
    it(kind .. ": connection cuts, then a partition beyond the session timeout (sessions expire)" .. tag, function()
      local path = "/faults/" .. kind .. "/cuts"
      local proxy = fw.proxy(zk.hosts)
      local seconds = 22
      -- the JVMs first: their start takes seconds, and the schedule below needs everyone running
      local j1 = peers.curator(zk.hosts, { session_ms = SESSION * 1000 })
      local j2 = peers.curator(proxy.hosts, { session_ms = SESSION * 1000 })
      local list = {
        participant("curator", kind, zk.hosts, path, "curator-direct", 150, seconds, j1),
        participant("curator", kind, proxy.hosts, path, "curator-proxied", 150, seconds, j2),
        participant("zklock", kind, zk.hosts, path, "zklock-direct", 150, seconds),
        participant("zklock", kind, proxy.hosts, path, "zklock-proxied", 150, seconds),
      }
      local t0 = now()
      local function at(s) util.wait_until(function() return now() - t0 >= s * 1000 end, s + 5, { c }) end
      at(3); proxy:send("cut")
      at(5); proxy:send("cut")
      at(7); proxy:send("new blackhole"); proxy:send("drop_both")
      at(7 + 1.7 * SESSION); proxy:send("heal")
      for _, p in ipairs(list) do
        if p.rt == "zklock" then
          assert.is_true(p.proc:wait_exit(seconds + 60, function(dt) util.drive({ c }, dt) end), p.proc:output())
        else
          assert.equal("ok", p.proc:wait(p.seq, seconds + 60, function(dt) util.drive({ c }, dt) end).status)
        end
      end
      local r = check_all(list, kind .. " cuts+partition")
      -- the proxied zklock participant's session expired (LOST) and it led again afterwards
      local log = testing.read_file(list[4].log) or ""
      local ev = {}
      for line in log:gmatch("E\t[^\n]*") do ev[#ev + 1] = line end
      assert.truthy(log:find("\nE\tEXPIRED\t") or log:find("^E\tEXPIRED\t"), table.concat(ev, "\n"))
      local expired_at = tonumber(log:match("E\tEXPIRED\t([%d%.]+)"))
      local led_after = false
      for _, t in ipairs(r.all) do
        if t.owner:find("zklock-proxied", 1, true) and t.start > expired_at then led_after = true end
      end
      assert.is_true(led_after, r.report)
      for _, rt in ipairs({ "zklock", "curator" }) do
        local n = 0
        for owner, k in pairs(r.by_owner) do if owner:find(rt .. "-", 1, true) then n = n + k end end
        assert.is_true(n >= 4, rt .. " led too rarely: " .. r.report)
      end
      proxy:stop()
    end)
  end

  it("a zklock leader whose session is expired from outside hears LOST, requeues on the new session, "
    .. "and its next term has a larger token than the Curator term in between", function()
    local path = "/faults/leader/expire"
    -- Curator queues first (its JVM start is slow): zklock leads after its first term
    local cur = participant("curator", "leader", zk.hosts, path, "cur", 300, 60)
    local terms, lost = {}, 0
    local l = c:leader(path, function(me)
      terms[#terms + 1] = { token = me:token(), session = c:session(), start = now() }
      while me:sleep(0.02) do end
    end, { id = "zk", requeue = true })
    l:on_lost(function(st) if st == "LOST" then lost = lost + 1 end end)
    assert.is_true(util.wait_until(function() return l:is_leader() end, 20, { c }))
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 2 end, 30, { c }))
    local sid = c:session()
    local exp_at = now()
    assert(testing.expire(c))
    assert.is_true(util.wait_until(function() return lost == 1 and not l:is_leader() end, 30, { c }))
    -- Curator leads, then zklock again on its new session
    assert.is_true(util.wait_until(function() return #terms == 2 end, 30, { c }))
    assert.are_not.equal(sid, terms[2].session)
    local cur_terms = intervals.new()
    cur_terms:add_file(cur.log, now())
    local r = cur_terms:check()
    local between = 0
    for _, t in ipairs(r.all) do
      if t.start > exp_at and t.start < terms[2].start then
        between = between + 1
        assert.is_true(t.token > terms[1].token and t.token < terms[2].token)
      end
    end
    assert.is_true(between >= 1, r.report)
    l:close()
    kill(cur)
    assert.is_true(util.wait_until(function() return util.child_count(c, path) == 0 end, 4 * SESSION, { c }))
  end)
end)

describe("faults: leader election across a ZooKeeper leader kill in a 3-node ensemble #faults #slow #lua54",
  function()
  local ens
  setup(function()
    ens = testing.ensemble{ n = 3, tick_ms = 500, min_session_ms = 1000 }
    assert(ens:wait_quorum(60))
  end)
  teardown(function()
    util.close_all()
    leaders.stop_all()
    peers.stop_all()
    if ens then ens:stop() end
  end)

  for _, kind in ipairs({ "leader", "latch" }) do
    it(kind .. ": zklock and Curator participants, the ZooKeeper leader killed and restarted", function()
      local path = "/faults/ens/" .. kind
      local seconds = 20
      local j1 = peers.curator(ens.hosts, { session_ms = SESSION * 1000 })
      local j2 = peers.curator(ens.hosts, { session_ms = SESSION * 1000 })
      local list = {
        participant("curator", kind, ens.hosts, path, "curator-1", 150, seconds, j1),
        participant("zklock", kind, ens.hosts, path, "zklock-1", 150, seconds),
        participant("curator", kind, ens.hosts, path, "curator-2", 150, seconds, j2),
        participant("zklock", kind, ens.hosts, path, "zklock-2", 150, seconds),
      }
      local t0 = now()
      util.sleep(5)
      local li = assert(ens:leader(30))
      local killed = ens.nodes[li]
      local kill_at = now()
      killed:kill()
      assert(ens:wait_quorum(60))
      util.sleep(3)
      killed:restart(60)
      assert(ens:wait_quorum(60))
      for _, p in ipairs(list) do
        if p.rt == "zklock" then
          assert.is_true(p.proc:wait_exit(seconds + 90), p.proc:output())
        else
          assert.equal("ok", p.proc:wait(p.seq, seconds + 90).status)
        end
      end
      local r = check_all(list, kind .. " ensemble leader kill")
      local after = 0
      for _, t in ipairs(r.all) do if t.start > kill_at then after = after + 1 end end
      assert.is_true(after >= 4, r.report)
      assert.is_true(now() - t0 > 0)
    end)
  end
end)
