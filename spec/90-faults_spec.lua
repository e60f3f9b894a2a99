-- Fault injection against real ZooKeeper servers (test catalogue 1H, 1I, 2, 3): lost create
-- replies (ghost nodes, through spec/support/proxy.py), session expiry during recovery, connection
-- resets, server restart, leader failover, quorum loss, and a client process that dies between
-- its create and its list.
--   busted --lua=lua5.4 spec/90-faults_spec.lua
--   busted --lua=luajit --run=luajit spec/90-faults_spec.lua     (ensemble tests are #lua54)
-- Every server, proxy and worker process is stopped in teardown, also when a test fails; every
-- loop is bounded. Runtime: ~80 s under Lua 5.4, ~55 s under LuaJIT (2 cores).
--
-- Known zklock bugs these tests expose (they fail until fixed):
--   * SX-04 (two tests): a dead connection first noticed by a request's send is never reported:
--     no SUSPENDED/RECONNECTED, no local LOST, and a request storm while disconnected.
--   * SX-14: a create that fails with ZRUNTIMEINCONSISTENCY leaves its node behind (orphan lock).
--   * pacing: the pump defeats the C client's reconnect delay (thousands of attempts a second).
local zklock = require("zklock")
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")

local SESSION = 4 -- seconds: the C client gives up on a silent connection after 2/3 of it

local function now() return core.now() end -- monotonic ms

local pack = util.pack
-- only the code is checked here (res[3])
local function assert_code(code, res, what) return util.assert_code(code, res, what, true) end

-- Session and lock state names in order, for one client / one lock object.
local record_session, record_lock, index_of = util.record_session, util.record_lock, util.index_of

-- Drive `clients` until pred() is true or `timeout` s pass (0.02 s rounds); calls `sample` between rounds.
local function drive_until(clients, pred, timeout, sample)
  return util.drive_until(clients, pred, timeout, sample, 0.02)
end

-- Keeps every child name ever seen under `path` (with when it was first and last seen) and the
-- largest number of children at once.
local function child_watch(obs, path)
  local w = { seen = {}, first = {}, last = {}, max = 0, order = {} }
  function w.sample()
    local names = util.children(obs, path)
    if #names > w.max then w.max = #names end
    local t = now()
    for _, n in ipairs(names) do
      if not w.seen[n] then
        w.seen[n] = true
        w.first[n] = t
        w.order[#w.order + 1] = n
      end
      w.last[n] = t
    end
    return names
  end
  function w.count() return #w.order end
  return w
end

-- Sample `w` every 20 ms from a coroutine of client `c` (it runs while the main thread blocks
-- in an acquire on c) until the returned stop() is called; `each` runs after every sample.
local function sampler(c, w, each)
  local stop = false
  c:spawn(function()
    for _ = 1, 3000 do
      if stop then return end
      w.sample()
      if each then each() end
      c:sleep(0.02)
    end
  end)
  return function() stop = true end
end

local function owner_of(obs, node)
  local _, st = obs:get(node)
  return st and st.ephemeral_owner
end

local function interval_report(holds, capacity)
  local r = fw.check(holds, capacity)
  local maxo = 0
  for _, v in pairs(r.max_overlap) do if v > maxo then maxo = v end end
  return r, ("holds=%d clean=%d violations=%d interrupted_overlaps=%d token_violations=%d max_overlap=%d %s")
    :format(r.holds, r.clean, r.violations, r.interrupted_overlaps, r.token_violations, maxo,
            table.concat(r.examples, "; "))
end

-- A small concurrent workload on one mutex path: `n` coroutines on each client loop
-- acquire / hold a few ms / release until stop() is called, recording every hold interval
-- (interrupted = the lock or its client saw SUSPENDED/LOST/EXPIRED during the hold).
local function workload(clients, path, n, acquire_timeout)
  local wl = { holds = {}, started = 0, acquired = 0, failed = 0, codes = {}, running = 0, stop = false }
  for ci, c in ipairs(clients) do
    local active = {}
    c:on_session(function(state)
      if state ~= "CONNECTED" then for h in pairs(active) do h.interrupted = true end end
    end)
    for k = 1, n do
      wl.running = wl.running + 1
      local m = c:mutex(path)
      local cur
      m:on_lost(function() if cur then cur.interrupted = true end end)
      local r = fw.rng(ci * 1000 + k)
      c:spawn(function()
        while not wl.stop do
          wl.started = wl.started + 1
          local ok, _, code = m:acquire(acquire_timeout)
          if ok then
            wl.acquired = wl.acquired + 1
            cur = { key = path, owner = ci .. "/" .. k, token = m:token(), start = now() }
            active[cur] = true
            c:sleep(0.002 + r() * 0.015)
            cur.finish = now()
            active[cur] = nil
            wl.holds[#wl.holds + 1] = cur
            cur = nil
            m:release()
          else
            wl.failed = wl.failed + 1
            wl.codes[code] = (wl.codes[code] or 0) + 1
          end
          c:sleep(r() * 0.005)
        end
        wl.running = wl.running - 1
      end)
    end
  end
  return wl
end

------------------------------------------------------------------------------------------------

describe("faults: lost replies, restarts and crashes #faults", function()
  local zk, proxy, obs
  local baseline_ephemerals

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    baseline_ephemerals = util.mntr(zk, "zk_ephemerals_count")
  end)

  teardown(function()
    util.close_all()
    fw.stop_all()
    if zk then zk:stop() end
  end)

  before_each(function()
    proxy = fw.proxy(zk.hosts)
    obs = util.connect(zk.hosts, { session_timeout = 10, identity = "observer" })
  end)

  after_each(function()
    -- let clients reconnect through a healthy proxy, so that close() ends their sessions at once
    if proxy and proxy:alive() then
      pcall(proxy.send, proxy, "heal")
    end
    util.close_all()
    if proxy then proxy:stop() end
    proxy, obs = nil, nil
  end)

  local function connect_proxied(identity)
    return util.connect(proxy.hosts, { session_timeout = SESSION, identity = identity })
  end

  local function pump_of(clients)
    return function(s) util.drive(clients, s) end
  end

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
    assert.is_true(drive_until({ c }, function() return w.count() >= 1 end, 2, w.sample), "the create never reached the server")
    local t_clean
    assert.is_true(drive_until({ c }, function()
      if #util.children(obs, path) == 0 then t_clean = now() return true end
    end, 3 * SESSION, w.sample), "the ghost node was never deleted: " .. table.concat(util.children(obs, path), " "))
    print(("\n  [SX-05] timed out at %.0f ms; ghost deleted %.0f ms after the acquire started"):format(t_done - t0, t_clean - t0))
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
    assert.is_true(drive_until(all, function() return w.count() == 2 end, 3, w.sample), "the ghost create never arrived")
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
    end, 3 * SESSION, w.sample), "the waiter did not recover: " .. util.format_stats(util.stats_delta(before, c:stats())))
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
    assert.is_true(proxy:wait_ack(heal, 5))
    util.drive({ c }, 1)
    local got = other:wait_line("^acquired", 10)
    local t_other = got and tonumber(got:match("^acquired (%S+)"))
    local d = util.stats_delta(before, c:stats())
    local desc = {}
    for _, e in ipairs(events) do desc[#desc + 1] = ("%s@+%.0fms"):format(e.state, e.at - t_reset) end
    print(("\n  [SX-04] cut off %.0f ms: holder events {%s}; other client acquired at +%s ms; %d requests sent meanwhile (%s)"):format(
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
        ("acquire failed with %s and left its node behind: %s"):format(code, table.concat(util.children(obs, path), " ")))
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

  it("CR-03: a client killed right after sending its create: the next waiter gets the lock within its session timeout", function()
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

  it("CR-03: a client stopped after its create, then killed, while queued: the waiter behind it takes over after its session ends", function()
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
    print(("\n  [CR-03] stop+kill while queued: granted %.0f ms after the kill, %.0f ms after the holder released; dead node last seen %.0f ms after the kill"):format(
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

------------------------------------------------------------------------------------------------

describe("faults: server restart within the session timeout (SX-03, SX-04) #faults", function()
  local zk

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
  end)

  teardown(function()
    util.close_all()
    if zk then zk:stop() end
  end)

  it("keeps the holder's lock (SUSPENDED, RECONNECTED), lets waiters proceed, never two holders", function()
    local path, held_path = "/faults/restart/work", "/faults/restart/held"
    -- the holder has a client of its own, idle while it holds (the workload clients have requests
    -- in flight when the server dies, which can hide the disconnect from zklock: see SX-04)
    local c0 = util.connect(zk.hosts, { session_timeout = SESSION, identity = "r0" })
    local c1 = util.connect(zk.hosts, { session_timeout = SESSION, identity = "r1" })
    local c2 = util.connect(zk.hosts, { session_timeout = SESSION, identity = "r2" })
    local s0 = record_session(c0)
    local sid0 = c0:session()
    local hm = c0:mutex(held_path)
    local hstates = record_lock(hm)
    assert(hm:acquire(5))                   -- the main thread holds it through the restart
    local holder_node = hm:node()
    local phase = "held"
    local waiter
    c2:spawn(function()
      local wm = c2:mutex(held_path)
      waiter = pack(wm:acquire(6 * SESSION))
      if waiter[1] then
        waiter.phase = phase
        wm:release()
      end
    end)
    local wl = workload({ c1, c2 }, path, 3, 2 * SESSION)
    local all = { c0, c1, c2 }
    util.drive(all, 1)
    assert.are.equal("held", phase)

    local t_kill = now()
    zk:kill()
    util.drive(all, 0.5)
    zk:restart()
    local t_up = now()
    local t_conn
    assert.is_true(drive_until(all, function()
      if c0.state == "CONNECTED" and c1.state == "CONNECTED" and c2.state == "CONNECTED"
         and index_of(hstates, "RECONNECTED") then
        t_conn = now() return true
      end
    end, 2 * SESSION), "clients did not reconnect: " .. table.concat(s0, ","))
    print(("\n  [restart] server down %.0f ms; clients reconnected %.0f ms after it was up"):format(t_up - t_kill, t_conn - t_up))
    -- the holder kept its lock: same session, same node, still on the server
    assert.are.same({ "SUSPENDED", "RECONNECTED" }, hstates)
    assert.are.same({ "SUSPENDED", "CONNECTED" }, s0)
    assert.are.equal(sid0, (c0:session()))
    assert.are.equal(holder_node, hm:node())
    assert.is_true(hm:is_held())
    local obs = util.connect(zk.hosts, { session_timeout = 10 })
    assert.are.equal(sid0, owner_of(obs, holder_node))
    local acquired_before = wl.acquired
    util.drive({ c0, c1, c2, obs }, 1.5)
    assert.is_true(wl.acquired > acquired_before, "the workload did not resume after the restart")
    assert.is_nil(waiter)                           -- still waiting behind the holder
    phase = "released"
    assert.is_true(hm:release())
    wl.stop = true
    assert.is_true(zklock.run({ c1, c2 }, 6 * SESSION))
    assert.are.equal(0, util.stats_sum({ c1, c2 }).sessions_expired)
    assert.are.equal(held_path, waiter[1] and waiter[1].path, tostring(waiter[2]))
    assert.are.equal("released", waiter.phase)
    local r, text = interval_report(wl.holds, 1)
    local codes = {}
    for k, n in pairs(wl.codes) do codes[#codes + 1] = k .. "=" .. n end
    print("  [restart] workload: " .. text .. (" started=%d acquired=%d failed=%d {%s}"):format(
      wl.started, wl.acquired, wl.failed, table.concat(codes, " ")))
    assert.are.equal(wl.started, wl.acquired + wl.failed)
    assert.are.equal(0, r.violations, text)
    assert.are.equal(0, r.interrupted_overlaps, text)   -- the session survived: no overlap at all
    assert.are.equal(0, r.token_violations, text)
    assert.is_true(wl.acquired > 20)
    assert.are.same({}, util.children(obs, path))
    assert.are.same({}, util.children(obs, held_path))
  end)
end)

------------------------------------------------------------------------------------------------

describe("faults: three-node ensemble (SX-10, SX-11) #faults #lua54", function()
  local ens

  setup(function()
    ens = testing.ensemble{ n = 3, tick_ms = 500, min_session_ms = 1000 }
  end)

  teardown(function()
    util.close_all()
    if ens then ens:stop() end
  end)

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
    print(("\n  [SX-10] leader %d killed; new leader %d; first write %.0f ms after the kill; holder events {%s}; holder client sent %d lists meanwhile"):format(
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
    local t0 = now()
    for _, i in ipairs(victims) do ens.nodes[i]:kill() end
    util.drive(clients, down)
    for _, i in ipairs(victims) do ens.nodes[i]:restart() end
    local t_up = now()
    assert(ens:leader(30))
    return t0, t_up, now()
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
    print(("\n  [SX-11] quorum lost %.0f ms (restarted after %.0f ms); holder reconnected %.0f ms after the quorum returned"):format(
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
    local wres, t_wgrant, old_listed, wreleased
    c2:spawn(function()
      wres = pack(wm:acquire(8 * SESSION, { retry = zklock.retry.fixed{ delay = 0.2, attempts = 10 } }))
      t_wgrant = now()
      if wres[1] then
        old_listed = c2:exists(node) and true or false  -- the old holder's node, seen by the new holder
        wreleased = wm:release()
      end
    end)
    util.drive({ c1, c2 }, 0.2)
    local t_down, t_up, t_quorum = lose_quorum({ c1, c2 }, SESSION + 2)
    assert.is_true(drive_until({ c1, c2 }, function() return c1.state == "CONNECTED" end, 2 * SESSION))
    local obs = util.connect(ens.hosts, { session_timeout = 10 })
    local orphan_seen = obs:exists(node) and true or false
    local t_orphan_gone
    assert.is_true(drive_until({ c1, c2, obs }, function()
      if not obs:exists(node) then t_orphan_gone = now() return true end
    end, 3 * SESSION), "the abandoned session's node never went away")
    print(("\n  [SX-11] quorum lost %.0f ms: LOST %.0f ms after the loss; the old session's node %s, gone %.0f ms after the quorum returned"):format(
      t_quorum - t_down, (t_lost or 0) - t_down, orphan_seen and "survived the outage" or "was already gone", t_orphan_gone - t_quorum))
    assert.are.same({ "SUSPENDED", "LOST" }, hstates)
    -- LOST comes a session timeout (less a tenth) after the server was last heard from, which is
    -- up to a third of the timeout (the ping interval) before the loss: not at the first SUSPENDED
    assert.is_true(t_lost - t_down >= SESSION * 1000 * 0.5, "LOST reported too early")
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
