-- Fault injection, dead connections first noticed by a send (SX-04), reconnect pacing, a create
-- failed with ZRUNTIMEINCONSISTENCY (SX-14), and a client process that dies between its create and
-- its list (CR-03).
--   busted --lua=lua5.4 spec/90-faults-connection_spec.lua
--   busted --lua=luajit --run=luajit spec/90-faults-connection_spec.lua
-- Shared helpers and the proxy fixture: spec/support/faults.lua (it lists the known bugs these
-- tests exposed). Every server, proxy and worker process is stopped in teardown, also when a
-- test fails; every loop is bounded.
local testing = require("zklock.testing")
local util = require("support.util")
local fw = require("support.fault_worker")
local H = require("support.faults")

local SESSION, now, pack, record_session = H.SESSION, H.now, H.pack, H.record_session
local record_lock, index_of, drive_until, child_watch = H.record_lock, H.index_of, H.drive_until, H.child_watch
local sampler, proxied = H.sampler, H.proxied

describe("faults: connection resets, refused reconnects and crashed clients (SX-04, SX-14, CR-03) #faults", function()
  local zk, proxy, obs
  local baseline_ephemerals
  local fx = proxied(function(f)
    zk, proxy, obs, baseline_ephemerals = f.zk, f.proxy, f.obs, f.baseline_ephemerals
  end)
  local connect_proxied = fx.connect_proxied

  ------------------------------------------------------------------ SX-04 loss noticed by a send

  -- The ZooKeeper C client (3.8.0) has a second way to notice a dead connection: when a request's
  -- immediate send fails (ECONNRESET), zoo_a*() closes the socket and sets the handle to
  -- NOTCONNECTED without any session event. zklock learns of connection changes only from
  -- session events, so it must not miss this one. Made deterministic here: the proxy resets the
  -- connection while nobody pumps the client, then the client sends a request.
  it("SX-04: a connection reset first noticed by a request's send is reported (SUSPENDED, RECONNECTED)", function()
    local path = "/faults/reset/short"
    local c = connect_proxied("reset-short")
    local sessions = record_session(c)
    local m = c:mutex(path)
    local states = record_lock(m)
    assert(m:acquire(5))
    local sid = c:session()
    local accepted = proxy:status().accepted
    proxy:send("reset")
    testing.sleep(0.05)                  -- the RST arrives while the client is not pumped
    assert.truthy(c:exists("/"))         -- this request's send hits the reset connection
    util.drive({ c }, 0.5)
    assert.is_true(drive_until({ c }, function() return (proxy:status().accepted or 0) > accepted end, 5),
      "the client never reconnected")
    util.drive({ c }, 0.2)
    print(("\n  [SX-04] reset seen by a send: session events {%s}, lock events {%s}"):format(
      table.concat(sessions, ","), table.concat(states, ",")))
    assert.are.equal(sid, (c:session()))
    assert.is_true(m:is_held())
    assert.are.same({ "SUSPENDED", "CONNECTED" }, sessions)
    assert.are.same({ "SUSPENDED", "RECONNECTED" }, states)
    assert.is_true(m:release())
  end)

  it("SX-04: a holder cut off that way is told SUSPENDED, then LOST, before another client gets its lock", function()
    local path = "/faults/reset/long"
    assert(obs:create(path, "", { parents = true }))
    local c = connect_proxied("reset-long")
    local m = c:mutex(path)
    local t_reset
    local events = {}
    m:on_lost(function(state) events[#events + 1] = { state = state, at = now() } end)
    assert(m:acquire(5))
    local before = c:stats()
    proxy:send("new refuse")             -- and it cannot reconnect for a while
    proxy:send("reset")
    t_reset = now()
    testing.sleep(0.05)
    -- another client (a separate process) waits for the lock meanwhile
    local log = fw.tmpdir("other") .. "/other.log"
    local other = fw.worker("acquire", { hosts = zk.hosts, path = path, session = SESSION, timeout = 20,
                                         hold = 0.5, log = log })
    assert.truthy(other:wait_line("^connected", 10), "worker did not connect: " .. other:output())
    local heal = proxy:send_later("heal", 2 * SESSION)
    -- blocks (pumping c) until the request completes: after the heal at the latest
    local t_call = now()
    c:exists("/")
    local t_back = now()
    -- exists() returns once the holder's session is lost locally (a session timeout less a tenth
    -- after the reset), which can be well before the heal is due: wait for the heal itself
    assert.is_true(proxy:wait_ack(heal, 2 * SESSION + 5))
    util.drive({ c }, 1)
    local got = other:wait_line("^acquired", 10)
    local t_other = got and tonumber(got:match("^acquired (%S+)"))
    local d = util.stats_delta(before, c:stats())
    local desc = {}
    for _, e in ipairs(events) do desc[#desc + 1] = ("%s@+%.0fms"):format(e.state, e.at - t_reset) end
    print(("\n  [SX-04] cut off %.0f ms: holder events {%s}; other client acquired at +%s ms; "
      .. "%d requests sent meanwhile (%s)"):format(
      t_back - t_call, table.concat(desc, " "), t_other and ("%.0f"):format(t_other - t_reset) or "never",
      d.ops + d.lists + d.gets + d.creates + d.deletes + d.exists, util.format_stats(d)))
    assert.truthy(t_other, "the other client never got the lock: " .. table.concat(other:lines(), " | "))
    -- the contract: the holder hears SUSPENDED when the link drops and LOST once the session is
    -- gone, in any case before anyone else can hold the lock
    assert.truthy(events[1], "the holder was never told anything")
    assert.are.equal("SUSPENDED", events[1].state)
    assert.is_true(events[1].at - t_reset < SESSION * 1000, "SUSPENDED came too late")
    local lost
    for _, e in ipairs(events) do if e.state == "LOST" then lost = e end end
    assert.truthy(lost, "LOST never reported")
    assert.is_true(lost.at < t_other, "another client held the lock before the holder was told LOST")
    -- and it does not hammer the connection while it is down
    assert.is_true(d.ops + d.lists + d.gets < 100, "request storm while disconnected: " .. util.format_stats(d))
    assert.is_false(m:is_held())
  end)

  -- While no server can be reached, the C client paces its reconnects: after trying every host it
  -- asks (through zookeeper_interest's timeout) for a pause of 1/60 of the session timeout. The
  -- pump must honour it instead of calling zookeeper_interest again at once.
  it("reconnect attempts are paced while the server refuses connections", function()
    local c = connect_proxied("pacing")
    local m = c:mutex("/faults/pacing")
    assert(m:acquire(5))
    local a0 = proxy:status().accepted
    proxy:send("new refuse")
    proxy:send("cut")
    local t0 = now()
    local cpu0 = os.clock()
    util.drive({ c }, 2)
    local cpu = os.clock() - cpu0
    local elapsed = (now() - t0) / 1000
    proxy:send("new pass")
    testing.sleep(0.1)
    local attempts = (proxy:status().accepted or 0) - a0
    assert.is_true(drive_until({ c }, function() return c.state == "CONNECTED" end, SESSION))
    print(("\n  [pacing] %d connection attempts in %.1f s while refused (%.0f/s), %.2f s of CPU"):format(
      attempts, elapsed, attempts / elapsed, cpu))
    assert.is_true(m:is_held())
    -- one host, a 4 s session: about 1 attempt per 67 ms expected; allow 5x that
    assert.is_true(attempts / elapsed < 75, ("%.0f reconnect attempts per second"):format(attempts / elapsed))
    assert.is_true(m:release())
  end)

  -- After that silent close the C client keeps the requests it had sent on the dead connection
  -- as outstanding; the first reply on the new connection then mismatches and it fails every
  -- outstanding request with ZRUNTIMEINCONSISTENCY. For a create that outcome is as unknown as
  -- after ZCONNECTIONLOSS, so protected-mode cleanup must run: otherwise the node stays, owned by
  -- a live session that believes it has none, and nobody gets the lock until that session ends.
  it("SX-14: a create failed with ZRUNTIMEINCONSISTENCY after a reconnect leaves no orphan node", function()
    local path = "/faults/reset/orphan"
    assert(obs:create(path, "", { parents = true }))
    local c = connect_proxied("orphan")
    local m = c:mutex(path)
    local w = child_watch(obs, path)
    proxy:send("drop")                   -- the create is applied, its reply lost
    local res, finish
    c:spawn(function() -- holds are per coroutine: this one also releases what it got
      res = pack(m:acquire(10))
      for _ = 1, 1000 do if finish then break end c:sleep(0.01) end
      if res[1] then m:release() end
    end)
    c:process()
    assert.is_true(drive_until({ obs }, function() return w.count() == 1 end, 3, w.sample), "the create never arrived")
    proxy:send("reset")                  -- then the connection is reset ...
    testing.sleep(0.05)
    local ex = pack(c:exists("/"))       -- ... and first noticed by this request's send
    assert.is_true(drive_until({ c }, function() return res ~= nil end, 3 * SESSION, w.sample))
    local code = res[1] and "granted" or tostring(res[3])
    print(("\n  [SX-14] exists -> %s; acquire -> %s; nodes now: %s"):format(
      ex[1] and "ok" or tostring(ex[3]), code, table.concat(util.children(obs, path), " ")))
    if res[1] then
      -- granted: the adopted node is the only one, and it is ours
      assert.are.same({ w.order[1] }, util.children(obs, path))
      finish = true
      assert.is_true(c:run(5))
    else
      -- failed: it must leave nothing behind (the protected-prefix cleanup)
      assert.is_true(drive_until({ c }, function() return #util.children(obs, path) == 0 end, 2 * SESSION),
        ("acquire failed with %s and left its node behind: %s"):format(
          code, table.concat(util.children(obs, path), " ")))
      finish = true
      assert.is_true(c:run(5))
    end
    -- in any case another client can take the lock now
    local other = util.connect(zk.hosts, { session_timeout = SESSION, identity = "other" })
    local om = other:mutex(path)
    local got = pack(om:acquire(3))
    assert.are.equal(om, got[1], "the lock is blocked: " .. tostring(got[2]))
    assert.is_true(om:release())
    -- a read is safe to retry and must not fail for a connection problem the client recovered from
    assert.truthy(ex[1], "exists failed: " .. tostring(ex[2]))
  end)

  ------------------------------------------------------------------ CR-03 client crash

  local function crash_worker(path, after, identity)
    local log = fw.tmpdir("crash") .. "/crash.log"
    local wk = fw.worker("crash", { hosts = zk.hosts, path = path, session = SESSION, identity = identity,
                                    log = log, after = after })
    return wk
  end

  it("CR-03: a client killed right after sending its create: "
     .. "the next waiter gets the lock within its session timeout", function()
    local path = "/faults/crash/kill"
    assert(obs:create(path, "", { parents = true }))
    local wk = crash_worker(path, "kill", "crash-kill")
    assert.truthy(wk:wait_line("^sent", 15), "worker did not send: " .. wk:output())
    assert.is_true(wk:wait_exit(5), "worker still alive")
    local t_dead = now()
    local names = util.children(obs, path)
    local created = #names == 1
    if created then
      local data = obs:get(path .. "/" .. names[1])
      assert.are.equal("crash-kill", data)
    end
    local c = util.connect(zk.hosts, { session_timeout = SESSION, identity = "next" })
    local m = c:mutex(path)
    local w = child_watch(obs, path)
    local stop = sampler(c, w)
    local res = pack(m:acquire(3 * SESSION))
    local t_grant = now()
    stop()
    assert.are.equal(m, res[1], tostring(res[2]))
    local takeover = t_grant - t_dead
    print(("\n  [CR-03] kill after send: node %s; next waiter granted %.0f ms after the crash"):format(
      created and "created" or "not created", takeover))
    assert.is_true(takeover < (SESSION + 2) * 1000, "takeover too slow")
    if created then
      assert.is_true(takeover > (SESSION - 1.5) * 1000, "granted before the dead session could have expired")
      assert.is_nil(index_of(util.children(obs, path), names[1]))
    end
    assert.is_true(m:release())
    assert.are.same({}, util.children(obs, path))
    assert.is_true(util.wait_until(function()
      return util.mntr(zk, "zk_ephemerals_count") <= baseline_ephemerals + 1 -- the observer's session
    end, 2 * SESSION), "ephemerals not back to baseline")
  end)

  it("CR-03: a client stopped after its create, then killed, while queued: "
     .. "the waiter behind it takes over after its session ends", function()
    local path = "/faults/crash/stop"
    assert(obs:create(path, "", { parents = true }))
    local holder = util.connect(zk.hosts, { session_timeout = SESSION, identity = "holder" })
    local hm = holder:mutex(path)
    assert(hm:acquire(5))
    local wk = crash_worker(path, "stop", "crash-stop")
    local pump = function(s) util.drive({ holder, obs }, s) end
    assert.truthy(wk:wait_line("^sent", 15, pump), "worker did not send: " .. wk:output())
    assert.is_true(drive_until({ holder, obs }, function() return wk:state() == "T" end, 5), "worker not stopped")
    local w = child_watch(obs, path)
    assert.is_true(drive_until({ holder, obs }, function() return w.count() == 2 end, 3, w.sample),
      "the worker's create did not reach the server")
    local dead = w.order[2]
    assert.are.equal("crash-stop", (obs:get(path .. "/" .. dead)))
    wk:signal("KILL")
    assert.is_true(wk:wait_exit(5, pump))
    local t_kill = now()
    local c = util.connect(zk.hosts, { session_timeout = SESSION, identity = "next" })
    local m = c:mutex(path)
    local res, t_grant, dead_listed, released
    c:spawn(function()
      res = pack(m:acquire(3 * SESSION))
      t_grant = now()
      if res[1] then
        -- the grant's own client no longer sees the dead client's node
        dead_listed = c:exists(path .. "/" .. dead) and true or false
        released = m:release()
      end
    end)
    assert.is_true(drive_until({ c, holder }, function() return w.count() == 3 end, 3, w.sample))
    assert.is_true(hm:release())   -- now the dead client's node is at the head of the queue
    local t_rel = now()
    assert.is_true(drive_until({ c, obs }, function() return released ~= nil end, 3 * SESSION, w.sample))
    assert.are.equal(m, res[1], tostring(res[2]))
    w.sample()
    print(("\n  [CR-03] stop+kill while queued: granted %.0f ms after the kill, %.0f ms after the holder released; "
      .. "dead node last seen %.0f ms after the kill"):format(
      t_grant - t_kill, t_grant - t_rel, w.last[dead] - t_kill))
    assert.is_true(t_grant - t_kill < (SESSION + 2) * 1000, "takeover too slow")
    assert.is_false(dead_listed, "granted while the dead client's node still existed")
    assert.is_nil(index_of(util.children(obs, path), dead))
    assert.is_true(released)
    assert.are.same({}, util.children(obs, path))
    assert.is_true(util.wait_until(function()
      return util.mntr(zk, "zk_ephemerals_count") <= baseline_ephemerals + 1
    end, 2 * SESSION), "ephemerals not back to baseline")
  end)
end)
