-- Fault injection, lost create replies (ghost nodes, through the public fault proxy testing.proxy)
-- and a session that expires during the recovery (test catalogue 1H, 1I, 2).
--   busted --lua=lua5.4 spec/87-faults-replies_spec.lua
--   busted --lua=luajit --run=luajit spec/87-faults-replies_spec.lua
-- Shared helpers and the proxy fixture: spec/support/faults.lua (it lists the known bugs these
-- tests exposed). Every server, proxy and worker process is stopped in teardown, also when a
-- test fails; every loop is bounded.
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local H = require("support.faults")

local SESSION, now, pack, assert_code = H.SESSION, H.now, H.pack, H.assert_code
local record_session, record_lock, index_of, drive_until = H.record_session, H.record_lock, H.index_of, H.drive_until
local child_watch, sampler, owner_of, proxied = H.child_watch, H.sampler, H.owner_of, H.proxied

describe("faults: lost create replies and expiry during recovery (SX-05, SX-06) #faults", function()
  local zk, proxy, obs
  local fx = proxied(function(f) zk, proxy, obs = f.zk, f.proxy, f.obs end)
  local connect_proxied, pump_of = fx.connect_proxied, fx.pump_of

  ------------------------------------------------------------------ SX-05 ghost node

  it("SX-05: a lost create reply on a free mutex is adopted by its protected prefix", function()
    local path = "/faults/ghost/free"
    assert(obs:create(path, "", { parents = true })) -- persistent: creates count only our node
    local c = connect_proxied("ghost-free")
    local sessions = record_session(c)
    local m = c:mutex(path)
    local lock_states = record_lock(m)
    local sid = c:session()
    local before = c:stats()
    local w = child_watch(obs, path)

    proxy:send("drop", 5, pump_of({ c }))   -- from now on the server's replies are lost
    local stop = sampler(c, w)
    local t0 = now()
    local res = pack(m:acquire(15))          -- create + list go out now; the server applies them
    local t_done = now()
    stop()
    w.sample()

    local recovery = t_done - t0
    print(("\n  [SX-05] free mutex: reply lost, recovered and granted after %.0f ms"):format(recovery))
    assert.are.equal(m, res[1], tostring(res[2]))
    assert.is_true(recovery > 0.5 * SESSION * 1000, "granted before the connection could have been given up")
    assert.is_true(recovery < 2 * SESSION * 1000, "recovery took too long")
    -- exactly one node, ever: the ghost was adopted, not deleted and re-created
    assert.are.equal(1, w.count(), "nodes seen: " .. table.concat(w.order, " "))
    assert.are.equal(1, w.max)
    assert.are.same({ util.basename(m:node()) }, util.children(obs, path))
    assert.are.equal(w.order[1], util.basename(m:node()))
    assert.matches(util.MUTEX_NODE, w.order[1])
    assert.are.equal(sid, (c:session()))                  -- same session, no expiry
    assert.are.equal(sid, owner_of(obs, m:node()))
    local _, st = obs:get(m:node())
    assert.are.equal(st.czxid, m:token())                  -- token read back after adoption
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(1, d.creates, util.format_stats(d))   -- no second create
    assert.is_true(d.exists >= 1, "no adoption (exists) in stats: " .. util.format_stats(d))
    assert.is_true(d.lists >= 2, util.format_stats(d))     -- the prefix scan, then the queue list
    assert.are.equal(0, d.sessions_expired)
    assert.truthy(index_of(sessions, "SUSPENDED"), table.concat(sessions, ","))
    assert.truthy(index_of(sessions, "CONNECTED", index_of(sessions, "SUSPENDED")))
    assert.is_nil(index_of(sessions, "EXPIRED"))
    assert.are.same({}, lock_states)                       -- it was not held while suspended
    assert.is_true(m:release())
    assert.are.same({}, util.children(obs, path))
  end)

  it("SX-05: an acquire whose timeout ends before the recovery fails and leaves no node", function()
    local path = "/faults/ghost/short"
    assert(obs:create(path, "", { parents = true }))
    local c = connect_proxied("ghost-short")
    local m = c:mutex(path)
    local before = c:stats()
    local w = child_watch(obs, path)
    proxy:send("drop", 5, pump_of({ c }))
    local stop = sampler(c, w)
    local t0 = now()
    local res = pack(m:acquire(1))
    local t_done = now()
    stop()
    assert_code("ETIMEDOUT", res, "acquire(1) with its reply lost")
    assert.is_true(t_done - t0 < 1800, ("the timeout fired late: %.0f ms"):format(t_done - t0))
    -- the ghost is there until the connection is re-established, then cleaned up by prefix
    assert.is_true(drive_until({ c }, function() return w.count() >= 1 end, 2, w.sample),
      "the create never reached the server")
    local t_clean
    assert.is_true(drive_until({ c }, function()
      if #util.children(obs, path) == 0 then t_clean = now() return true end
    end, 3 * SESSION, w.sample), "the ghost node was never deleted: " .. table.concat(util.children(obs, path), " "))
    print(("\n  [SX-05] timed out at %.0f ms; ghost deleted %.0f ms after the acquire started"):format(
      t_done - t0, t_clean - t0))
    assert.are.equal(1, w.count())
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(1, d.creates, util.format_stats(d))
    assert.is_true(d.deletes >= 1, util.format_stats(d))
    assert.are.equal(0, d.acquired)
    -- and the lock is usable afterwards
    assert.are.equal(m, m:acquire(5))
    assert.is_true(m:release())
  end)

  it("SX-05: a waiter's lost create reply: the queued node is adopted, granted in order, no self-deadlock", function()
    local path = "/faults/ghost/queued"
    assert(obs:create(path, "", { parents = true }))
    local holder = util.connect(zk.hosts, { session_timeout = SESSION, identity = "holder" })
    local later = util.connect(zk.hosts, { session_timeout = SESSION, identity = "later" })
    local c = connect_proxied("ghost-waiter")
    local all = { c, holder, later }
    local hm = holder:mutex(path)
    assert(hm:acquire(5))
    local holder_node = util.basename(hm:node())
    local m = c:mutex(path)
    local before = c:stats()
    local w = child_watch(obs, path)
    w.sample()

    proxy:send("drop", 5, pump_of(all))
    local grants = {}
    local res, res_later, t_grant
    local t0 = now()
    c:spawn(function()
      res = pack(m:acquire(30))
      t_grant = now()
      grants[#grants + 1] = "ghost"
      c:sleep(0.05)
      m:release()
    end)
    c:process()
    -- the ghost is queued behind the holder; then a third client queues behind the ghost
    assert.is_true(drive_until(all, function() return w.count() == 2 end, 3, w.sample),
      "the ghost create never arrived")
    local ghost = w.order[2]
    local lm = later:mutex(path)
    later:spawn(function()
      res_later = pack(lm:acquire(30))
      grants[#grants + 1] = "later"
      lm:release()
    end)
    assert.is_true(drive_until(all, function() return w.count() == 3 end, 3, w.sample))
    -- recovery: the waiter reconnects and adopts its queued node (exists), then waits in place
    local t_rec
    assert.is_true(drive_until(all, function()
      local d = util.stats_delta(before, c:stats())
      if d.exists >= 1 and d.gets >= 1 and c.state == "CONNECTED" then t_rec = now() return true end
    end, 3 * SESSION, w.sample),
      "the waiter did not recover: " .. util.format_stats(util.stats_delta(before, c:stats())))
    util.drive(all, 0.3)
    w.sample()
    assert.is_nil(res, "granted while the holder still holds")
    assert.is_nil(res_later)
    assert.are.same({ holder_node, ghost, w.order[3] }, util.children(obs, path))
    -- the holder lets go: the adopted ghost is next, then the later client
    local t_rel = now()
    assert.is_true(hm:release())
    assert.is_true(drive_until(all, function() return res_later ~= nil end, 10, w.sample), "the queue did not drain")
    print(("\n  [SX-05] queued waiter recovered after %.0f ms; granted %.0f ms after the holder released"):format(
      t_rec - t0, t_grant - t_rel))
    assert.are.equal(m, res[1], tostring(res[2]))
    assert.are.equal(lm, res_later[1], tostring(res_later[2]))
    assert.are.same({ "ghost", "later" }, grants)
    assert.are.equal(3, w.count(), "nodes seen: " .. table.concat(w.order, " "))  -- no second node for the ghost
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(1, d.creates, util.format_stats(d))
    assert.is_true(now() - t_rel < 5000)
    assert.is_true(drive_until(all, function() return #util.children(obs, path) == 0 end, 5))
  end)

  ------------------------------------------------------------------ SX-06 ghost + expiry

  it("SX-06: reply lost and the session expires before the reconnect: no adoption, ESESSION, no node left", function()
    local path = "/faults/ghost/expired"
    assert(obs:create(path, "", { parents = true }))
    local c = connect_proxied("ghost-expired")
    local sessions = record_session(c)
    local m = c:mutex(path)
    local old_sid = c:session()
    local before = c:stats()
    local w = child_watch(obs, path)
    proxy:send("drop", 5, pump_of({ c }))
    local res, t_done
    local t0 = now()
    c:spawn(function()
      res = pack(m:acquire(10))
      t_done = now()
    end)
    c:process()
    assert.is_true(drive_until({ c }, function() return w.count() == 1 end, 3, w.sample))
    local ghost = path .. "/" .. w.order[1]
    assert.are.equal(old_sid, owner_of(obs, ghost))
    assert(testing.expire(c, zk.hosts))          -- the server ends the session (and its ghost)
    assert.is_true(drive_until({ c }, function() return res ~= nil end, 3 * SESSION, w.sample))
    assert_code("ESESSION", res, "acquire whose session expired during recovery")
    print(("\n  [SX-06] ESESSION after %.0f ms"):format(t_done - t0))
    assert.is_true(drive_until({ c }, function() return c.state == "CONNECTED" end, 5))
    assert.are_not.equal(old_sid, (c:session()))
    assert.is_false(obs:exists(ghost))
    assert.are.same({}, util.children(obs, path))  -- nothing adopted, nothing re-created
    assert.are.equal(1, w.count())
    assert.are.equal(1, util.stats_delta(before, c:stats()).creates)
    assert.are.equal(0, util.stats_delta(before, c:stats()).exists)
    assert.truthy(index_of(sessions, "EXPIRED"), table.concat(sessions, ","))
    assert.is_false(m:is_held())
  end)

  it("SX-06: the same with a retry policy: one new node in the new session, the dead one not adopted", function()
    local path = "/faults/ghost/expired-retry"
    assert(obs:create(path, "", { parents = true }))
    local c = connect_proxied("ghost-retry")
    local m = c:mutex(path)
    local old_sid = c:session()
    local w = child_watch(obs, path)
    proxy:send("drop", 5, pump_of({ c }))
    local expired
    local stop = sampler(c, w, function()
      if w.count() == 1 and expired == nil then
        expired = testing.expire(c, zk.hosts) or false  -- the ghost's session ends under it
      end
    end)
    local res = pack(m:acquire(15, { retry = zklock.retry.fixed{ delay = 0.1, attempts = 3 } }))
    stop()
    w.sample()
    assert.is_true(expired, "the ghost was not seen in time to expire its session")
    local ghost = w.order[1]
    assert.are.equal(m, res[1], tostring(res[2]))
    local sid = c:session()
    assert.are_not.equal(old_sid, sid)
    local name = util.basename(m:node())
    assert.are_not.equal(ghost, name)
    assert.are.same({ name }, util.children(obs, path))    -- exactly one node of ours
    assert.are.equal(sid, owner_of(obs, m:node()))
    assert.are.equal(2, w.count())                           -- the ghost, then the retry's node
    assert.is_true(m:release())
    assert.are.same({}, util.children(obs, path))
  end)

  it("SX-06: replies lost for longer than the session timeout: LOST locally, ghost expired, no node left", function()
    local path = "/faults/ghost/long-drop"
    assert(obs:create(path, "", { parents = true }))
    local c = connect_proxied("ghost-long")
    local sessions = record_session(c)
    local m = c:mutex(path)
    local old_sid = c:session()
    local w = child_watch(obs, path)
    proxy:send("new blackhole", 5, pump_of({ c }))  -- reconnects reach nothing either
    proxy:send("drop", 5, pump_of({ c }))
    local res, t_done
    local t0 = now()
    c:spawn(function()
      res = pack(m:acquire(20))
      t_done = now()
    end)
    c:process()
    assert.is_true(drive_until({ c }, function() return res ~= nil end, 4 * SESSION, w.sample))
    assert_code("ESESSION", res, "acquire cut off for longer than the session timeout")
    print(("\n  [SX-06] cut off: ESESSION after %.0f ms"):format(t_done - t0))
    -- given up a session timeout (less a tenth) after the last reply, never at the first silence
    assert.is_true(t_done - t0 >= SESSION * 1000 * 0.5, "session given up too early")
    assert.are.equal(1, w.count())
    proxy:send("heal", 5, pump_of({ c }))
    assert.is_true(drive_until({ c }, function() return c.state == "CONNECTED" end, 10))
    assert.are_not.equal(old_sid, (c:session()))
    -- the server expires the old session (it stopped hearing from it): its ghost goes with it
    assert.is_true(drive_until({ c }, function() return #util.children(obs, path) == 0 end, 2 * SESSION, w.sample),
      "ghost of the dead session still there")
    assert.are.equal(1, w.count())
    assert.truthy(index_of(sessions, "EXPIRED"), table.concat(sessions, ","))
  end)
end)
