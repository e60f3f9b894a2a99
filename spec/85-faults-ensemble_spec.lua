-- Fault injection, a three-node ensemble: leader failover and quorum loss (SX-10, SX-11).
-- #lua54: the ensemble tests run under Lua 5.4 only.
--   busted --lua=lua5.4 spec/85-faults-ensemble_spec.lua
--   busted --lua=luajit --run=luajit spec/85-faults-ensemble_spec.lua
-- Shared helpers and the proxy fixture: spec/support/faults.lua (it lists the known bugs these
-- tests exposed). Every server, proxy and worker process is stopped in teardown, also when a
-- test fails; every loop is bounded.
local zklock = require("zklock")
local util = require("support.util")
local fixture = require("support.fixture")
local H = require("support.faults")

local SESSION, now, pack, record_session = H.SESSION, H.now, H.pack, H.record_session
local record_lock, index_of, drive_until, interval_report = H.record_lock, H.index_of, H.drive_until, H.interval_report

describe("faults: three-node ensemble (SX-10, SX-11) #faults #lua54", function()
  local ens
  fixture.ensemble({ n = 3, tick_ms = 500, min_session_ms = 1000 }, {}, function(e) ens = e end)

  after_each(function()
    util.close_all()
    -- every node back and serving for the next test
    for _, node in ipairs(ens.nodes) do
      if node.paused then node:resume() end
      if not node:running() then node:restart() end
    end
    assert(ens:wait_quorum(30))
  end)

  -- Does the leader's `cons` list this client's session?
  local function connected_to(node, c)
    local sid = c:session()
    local s = node:four("cons") or ""
    return sid ~= nil and s:find("sid=0x" .. sid:gsub("^0+", ""), 1, true) ~= nil
  end

  it("SX-10: leader killed while one holds and 10 coroutines on 2 clients wait: lock and sessions survive", function()
    local path = "/faults/ens/leader"
    local leader = assert(ens:leader())
    -- make the holder's client talk to the leader, so that the kill really cuts it off
    local c1
    for _ = 1, 12 do
      c1 = util.connect(ens.hosts, { session_timeout = SESSION, identity = "e1" })
      if connected_to(ens.nodes[leader], c1) then break end
      c1:close()
      c1 = nil
    end
    assert.truthy(c1, "could not get a session on the leader")
    local c2 = util.connect(ens.hosts, { session_timeout = SESSION, identity = "e2" })
    local clients = { c1, c2 }
    local s1, s2 = record_session(c1), record_session(c2)
    local sid1, sid2 = c1:session(), c2:session()
    local hm = c1:mutex(path)
    local hstates = record_lock(hm)
    assert(hm:acquire(5))
    local holder_node, holder_token = hm:node(), hm:token()
    local holds = {}
    local results = {}
    for i = 1, 10 do
      local c = clients[(i - 1) % 2 + 1]
      c:spawn(function()
        local m = c:mutex(path)
        local interrupted = false
        m:on_lost(function() interrupted = true end)
        local r = pack(m:acquire(8 * SESSION))
        results[#results + 1] = r
        if r[1] then
          local h = { key = path, owner = i, token = m:token(), start = now() }
          c:sleep(0.05)
          h.finish = now()
          h.interrupted = interrupted
          holds[#holds + 1] = h
          m:release()
        end
      end)
    end
    local obs = util.connect(ens.hosts, { session_timeout = 10 })
    assert.is_true(drive_until({ c1, c2 }, function() return #util.children(obs, path) == 11 end, 10),
      "waiters did not all queue")
    obs:close()

    local t_kill = now()
    ens.nodes[leader]:kill()
    -- ops resume: a write through the holder's client succeeds again
    local t_write
    c1:spawn(function()
      for _ = 1, 400 do
        local ok = c1:create("/faults/ens/probe-", "x", { ephemeral = true, sequential = true, parents = true })
        if ok then t_write = now() return end
        c1:sleep(0.05)
      end
    end)
    local st0 = c1:stats()
    assert.is_true(drive_until(clients, function() return t_write ~= nil end, 4 * SESSION),
      "no write succeeded after the leader was killed")
    local new_leader = assert(ens:leader(10))
    local d = util.stats_delta(st0, c1:stats())
    print(("\n  [SX-10] leader %d killed; new leader %d; first write %.0f ms after the kill; holder events {%s}; "
      .. "holder client sent %d lists meanwhile"):format(
      leader, new_leader, t_write - t_kill, table.concat(hstates, ","), d.lists))
    assert.is_true(t_write - t_kill < 3 * SESSION * 1000)
    -- the holder kept its lock across the failover
    assert.is_true(hm:is_held())
    assert.are.equal(holder_node, hm:node())
    assert.are.equal(holder_token, hm:token())
    assert.are.equal(sid1, (c1:session()))
    assert.are.equal(sid2, (c2:session()))
    -- SUSPENDED/RECONNECTED are expected here, but about half the runs see none: the bug the
    -- SX-04 "reset first noticed by a request's send" test pins down deterministically
    if #hstates > 0 then
      assert.are.same({ "SUSPENDED", "RECONNECTED" }, hstates)
    end
    assert.is_nil(index_of(hstates, "LOST"))
    assert.is_nil(index_of(s1, "EXPIRED"))
    assert.is_nil(index_of(s2, "EXPIRED"))
    assert.are.equal(0, #results)                    -- nobody got in while the holder holds
    local t_rel = now()
    assert.is_true(hm:release())
    assert.is_true(zklock.run(clients, 8 * SESSION), "waiters did not all finish")
    print(("  [SX-10] 10 waiters granted in turn within %.0f ms of the release"):format(now() - t_rel))
    assert.are.equal(10, #results)
    for _, r in ipairs(results) do assert.truthy(r[1], tostring(r[2])) end
    local r, text = interval_report(holds, 1)
    print("  [SX-10] " .. text)
    assert.are.equal(0, r.violations, text)
    assert.are.equal(0, r.interrupted_overlaps, text)
    assert.are.equal(0, r.token_violations, text)
    for _, h in ipairs(holds) do assert.is_true(h.token > holder_token) end
    -- the old leader rejoins as a follower
    local t_restart = now()
    ens.nodes[leader]:restart()
    assert(ens:wait_quorum(30))
    print(("  [SX-10] old leader serving again %.0f ms after its restart, as %s"):format(
      now() - t_restart, tostring(ens.nodes[leader]:mode())))
    local mode = ens.nodes[leader]:mode()
    assert.truthy(mode == "follower" or mode == "leader", tostring(mode))
  end)

  -- kill two nodes (the leader among them) for `down` seconds, then restart them
  local function lose_quorum(clients, down)
    local leader = assert(ens:leader())
    local victims = { leader }
    for i = 1, #ens.nodes do if i ~= leader and #victims < 2 then victims[#victims + 1] = i end end
    -- a request of the first client answered just before the loss: the servers heard from it
    -- at t_heard or later (on busy cores its last heartbeat may be much older)
    local t_heard = now()
    assert(clients[1]:exists("/"))
    local t0 = now()
    for _, i in ipairs(victims) do ens.nodes[i]:kill() end
    util.drive(clients, down)
    for _, i in ipairs(victims) do ens.nodes[i]:restart() end
    local t_up = now()
    assert(ens:leader(30))
    return t0, t_up, now(), t_heard
  end

  it("SX-11: quorum lost for less than the session timeout: the holder keeps its lock, no double holder", function()
    local path = "/faults/ens/quorum-short"
    local LONG = 10 -- s: the outage (~1 s + restart + election) stays well inside it
    local c1 = util.connect(ens.hosts, { session_timeout = LONG, identity = "q1" })
    local c2 = util.connect(ens.hosts, { session_timeout = LONG, identity = "q2" })
    local sid1 = c1:session()
    local hm = c1:mutex(path)
    local hstates = record_lock(hm)
    assert(hm:acquire(5))
    local node = hm:node()
    local wres, t_wgrant, wreleased
    local wm = c2:mutex(path)
    c2:spawn(function()
      wres = pack(wm:acquire(6 * LONG))
      t_wgrant = now()
      if wres[1] then wreleased = wm:release() end
    end)
    util.drive({ c1, c2 }, 0.3)
    local t_down, t_up, t_quorum = lose_quorum({ c1, c2 }, 1)
    local t_conn
    assert.is_true(drive_until({ c1, c2 }, function()
      if index_of(hstates, "RECONNECTED") then t_conn = now() return true end
    end, LONG), "holder not reconnected: " .. table.concat(hstates, ","))
    print(("\n  [SX-11] quorum lost %.0f ms (restarted after %.0f ms); "
      .. "holder reconnected %.0f ms after the quorum returned"):format(
      t_quorum - t_down, t_up - t_down, t_conn - t_quorum))
    assert.are.same({ "SUSPENDED", "RECONNECTED" }, hstates)
    assert.is_true(hm:is_held())
    assert.are.equal(node, hm:node())
    assert.are.equal(sid1, (c1:session()))
    assert.is_nil(wres)                          -- the waiter did not get in meanwhile
    local t_rel = now()
    assert.is_true(hm:release())
    assert.is_true(drive_until({ c1, c2 }, function() return wreleased ~= nil end, 10))
    assert.are.equal(wm, wres[1], tostring(wres[2]))
    assert.is_true(t_wgrant >= t_rel)
    assert.is_true(wreleased)
  end)

  -- The catalogue (§2.2, §2.5) measured that servers re-arm session timers, so a quorum lost for
  -- longer than the session timeout does not expire sessions. zklock nevertheless reports LOST
  -- once it has been cut off for a whole session timeout (docs/design.md decision 9, like
  -- Curator's simulated expiry) and opens a new session; the old session's node then stays until
  -- the servers expire it, a session timeout after the quorum is back. This test pins down that
  -- documented behaviour and its safety: nobody else gets the lock before the old node is gone.
  it("SX-11: quorum lost for longer than the session timeout: SUSPENDED then LOST, never two holders", function()
    local path = "/faults/ens/quorum-long"
    local c1 = util.connect(ens.hosts, { session_timeout = SESSION, identity = "q1" })
    local c2 = util.connect(ens.hosts, { session_timeout = SESSION, identity = "q2" })
    local s1 = record_session(c1)
    local sid1 = c1:session()
    local hm = c1:mutex(path)
    local hstates = {}
    local t_lost
    hm:on_lost(function(state)
      hstates[#hstates + 1] = state
      if state == "LOST" then t_lost = now() end
    end)
    assert(hm:acquire(5))
    local node = hm:node()
    local wm = c2:mutex(path)
    local wres, old_listed, wreleased
    c2:spawn(function()
      wres = pack(wm:acquire(8 * SESSION, { retry = zklock.retry.fixed{ delay = 0.2, attempts = 10 } }))
      if wres[1] then
        old_listed = c2:exists(node) and true or false  -- the old holder's node, seen by the new holder
        wreleased = wm:release()
      end
    end)
    util.drive({ c1, c2 }, 0.2)
    local t_down, _, t_quorum, t_heard = lose_quorum({ c1, c2 }, SESSION + 2)
    assert.is_true(drive_until({ c1, c2 }, function() return c1.state == "CONNECTED" end, 2 * SESSION))
    local obs = util.connect(ens.hosts, { session_timeout = 10 })
    local orphan_seen = obs:exists(node) and true or false
    local t_orphan_gone
    assert.is_true(drive_until({ c1, c2, obs }, function()
      if not obs:exists(node) then t_orphan_gone = now() return true end
    end, 3 * SESSION), "the abandoned session's node never went away")
    -- LOST comes a session timeout less a tenth (at most 1 s) after the servers last answered,
    -- not at the first SUSPENDED: never before that after the answer just before the loss
    -- (less 1 ms: the core's clock is whole milliseconds, so its deadline may fall up to 1 ms before
    -- this fractional reading: CI saw "3600 ms after ..., before 3600 ms" twice in one run)
    local lost_at = t_heard + SESSION * 1000 - math.min(SESSION * 100, 1000) - 1
    print(("\n  [SX-11] quorum lost %.0f ms: LOST %.0f ms after the loss, %.0f ms after its earliest due time; the"
      .. " old session's node %s, gone %.0f ms after the quorum returned"):format(t_quorum - t_down,
      (t_lost or 0) - t_down, (t_lost or 0) - lost_at, orphan_seen and "survived the outage" or "was already gone",
      t_orphan_gone - t_quorum))
    assert.are.same({ "SUSPENDED", "LOST" }, hstates)
    assert.is_true(t_lost >= lost_at, ("LOST reported too early: %.0f ms after the servers last answered (%.0f ms"
      .. " before the loss), before %.0f ms"):format(t_lost - t_heard, t_down - t_heard, lost_at - t_heard))
    assert.is_false(hm:is_held())
    assert.is_nil(hm:node())
    assert.truthy(index_of(s1, "EXPIRED"))
    assert.are_not.equal(sid1, (c1:session()))
    local ok, _, code = hm:release()
    assert.is_nil(ok)
    assert.are.equal("ELOST", code)
    -- the waiter never holds while the old holder's node exists; it gets the lock after
    assert.is_true(drive_until({ c1, c2 }, function() return wreleased ~= nil end, 4 * SESSION))
    assert.are.equal(wm, wres[1], tostring(wres[2]))
    assert.is_false(old_listed, "the waiter was granted while the old holder's node existed")
    assert.is_false(obs:exists(node))
    assert.is_true(wreleased)
    -- and the old holder can take it again in its new session
    assert.are.equal(hm, hm:acquire(5))
    assert.is_true(hm:release())
  end)
end)
