-- Sessions and what the locks report about them (issue 4's checklist; test catalogue SX-01,
-- SX-02, SX-04, SX-08, SX-12, §3.5), against a real ZooKeeper server:
--   * server paused for less than the session timeout: SUSPENDED then RECONNECTED, still held,
--     pending acquires (also ones sent into the paused server) complete afterwards, one node each;
--   * session expired on demand (testing.expire): LOST exactly once per hold, is_held() false,
--     token() nil, pending acquires fail with ESESSION, a new session acquires again, another
--     client gets the lock, nothing of the old session is adopted;
--   * server paused for longer than the session timeout: LOST locally, before the server could
--     hand the lock on;
--   * a Lua thread that does not pump past the session timeout (os.execute("sleep")) while
--     another process takes its lock: LOST on its next call, the stale lock never reported held;
--   * close() while coroutines wait (queued, or with replies still in flight): ECLOSED for all,
--     their nodes gone at once;
--   * the on_session callback sequence.
-- This file: connection loss shorter and longer than the session timeout, expiry on demand.
--   busted --lua=lua5.4 spec/30-session-loss_spec.lua
--   busted --lua=luajit --run=luajit spec/30-session-loss_spec.lua
-- One server for the file (resumed after each test if a test left it paused, stopped in
-- teardown); worker processes and proxies are killed after each test. Every wait is bounded.
-- Helpers: spec/support/session.lua; fixture: spec/support/fixture.lua.
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")
local H = require("support.session")

local now, pack, assert_code, record_session = H.now, H.pack, H.assert_code, H.record_session
local index_of, record_lock, count_of, names = H.index_of, H.record_lock, H.count_of, H.names
local drive_until, owner_of, owners, session_in_dump = H.drive_until, H.owner_of, H.owners, H.session_in_dump

describe("sessions: connection loss and expiry", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 },
    { workers = true, resume = true, each = true, each_workers = true, own = "pauses the server" },
    function(s) zk = s end)

  ------------------------------------------------------------------ connection loss < session

  it("server paused for less than the session timeout: holders hear SUSPENDED then RECONNECTED and keep their "
     .. "locks; pending acquires complete afterwards, in order, one node each", function()
    local S = 6 -- SUSPENDED after 2/3 S without the server (4 s), LOST only after 0.9 S (5.4 s)
    local pa, pb, pc = "/sess/pause/a", "/sess/pause/b", "/sess/pause/c"
    local h = util.connect(zk.hosts, { session_timeout = S, identity = "holder" })
    local w = util.connect(zk.hosts, { session_timeout = S, identity = "waiter" })
    local all = { h, w }
    local hs, ws = record_session(h), record_session(w)
    local sid, wsid = h:session(), w:session()
    -- the main thread holds a; a coroutine holds b
    local ma = h:mutex(pa)
    local la = record_lock(ma)
    assert(ma:acquire(5))
    local node_a, token_a = ma:node(), ma:token()
    local mb = h:mutex(pb)
    local lb = record_lock(mb)
    local b, release_b = {}, false
    h:spawn(function()
      assert(mb:acquire(5))
      b.node, b.token = mb:node(), mb:token()
      for _ = 1, 3000 do
        if release_b then break end
        h:sleep(0.01)
      end
      b.held, b.token_after, b.node_after = mb:is_held(), mb:token(), mb:node()
      b.released = pack(mb:release())
    end)
    assert.is_true(drive_until(all, function() return b.node ~= nil end, 5))
    -- waiters of another client; each records the queue it sees when granted
    local grants = {}
    local function waiter(path, tag)
      local m = w:mutex(path)
      local r = { tag = tag }
      w:spawn(function()
        r.res = pack(m:acquire(60))
        r.at = now()
        if r.res[1] then
          r.node, r.token = m:node(), m:token()
          r.queue = w:children(path)
          grants[#grants + 1] = tag
          w:sleep(0.05)
          r.released = m:release()
        end
      end)
      return r
    end
    local w1 = waiter(pa, "a1")
    local w2 = waiter(pb, "b1")
    assert.is_true(drive_until(all, function()
      return #util.children(h, pa) == 2 and #util.children(h, pb) == 2
    end, 5), "the waiters did not queue")
    local w1_node = util.children(h, pa)[2]

    -- fresh contact just before the pause, so that the server's session clocks start now
    assert.truthy(h:exists("/"))
    assert.truthy(w:exists("/"))
    local wstats = w:stats()
    local t_pause = now()
    zk:pause()
    -- acquires started while the server is silent: on a free lock (its create is written into
    -- the paused server's socket) and behind a holder
    local w3 = waiter(pc, "c1")
    local w4 = waiter(pa, "a2")
    w:process()
    -- resume as soon as both holds heard SUSPENDED
    local suspended = drive_until(all, function()
      return index_of(la, "SUSPENDED") and index_of(lb, "SUSPENDED")
    end, S)
    local t_resume = now()
    zk:resume()
    assert.is_true(suspended, "no SUSPENDED within the session timeout: a " .. names(la) .. " b " .. names(lb))
    assert.is_true(t_resume - t_pause < 0.85 * S * 1000, "the test resumed the server too late to expect RECONNECTED")
    local reconnected = drive_until(all, function()
      return index_of(la, "RECONNECTED") and index_of(lb, "RECONNECTED")
    end, S)
    local t_rec = now()
    assert.is_true(drive_until(all, function() return w3.res ~= nil end, 2 * S),
      "the acquire of the free lock never completed")
    util.drive(all, 0.3)
    print(("\n  [pause] SUSPENDED %.0f ms after the pause; resumed at %.0f ms; RECONNECTED %.0f ms after the resume; "
      .. "free-lock acquire sent into the pause granted %.0f ms after the resume; "
      .. "the waiters' client meanwhile: %s"):format(
      la.at[1] - t_pause, t_resume - t_pause, t_rec - t_resume, (w3.at or 0) - t_resume,
      util.format_stats(util.stats_delta(wstats, w:stats()))))
    assert.is_true(reconnected, "holders: a " .. names(la) .. " b " .. names(lb))
    -- the holders: told, and still holding: same session, node and token
    assert.are.same({ "SUSPENDED", "RECONNECTED" }, { la[1], la[2], la[3] })
    assert.are.same({ "SUSPENDED", "RECONNECTED" }, { lb[1], lb[2], lb[3] })
    assert.are.same({ "SUSPENDED", "CONNECTED" }, hs)
    assert.is_nil(index_of(ws, "EXPIRED"))
    assert.is_true(la.at[1] - t_pause >= 0.5 * S * 1000, "SUSPENDED too early")
    assert.are.equal(sid, (h:session()))
    assert.are.equal(wsid, (w:session()))
    assert.is_true(ma:is_held())
    assert.are.equal(token_a, ma:token())
    assert.are.equal(node_a, ma:node())
    local obs = util.connect(zk.hosts, { session_timeout = 10, identity = "observer" })
    assert.are.equal(sid, owner_of(obs, node_a))
    assert.are.equal(sid, owner_of(obs, b.node))
    -- the free lock: granted after the resume, with exactly one node (no ghost, no duplicate)
    assert.truthy(w3.res[1], tostring(w3.res[2]))
    assert.are.equal(pc, w3.res[1].path)
    assert.is_true(w3.at > t_resume)
    assert.are.same({ util.basename(w3.node) }, w3.queue)
    assert.matches(util.MUTEX_NODE, util.basename(w3.node))
    -- the waiters behind the holders still wait, each with one node, in arrival order
    assert.is_nil(w1.res)
    assert.is_nil(w2.res)
    assert.is_nil(w4.res)
    local qa = util.children(obs, pa)
    assert.are.equal(3, #qa, "queue of a: " .. table.concat(qa, " "))
    assert.are.same({ util.basename(node_a), w1_node }, { qa[1], qa[2] })
    assert.are.equal(2, #util.children(obs, pb))
    -- now the holders let go: the waiters follow in queue order
    release_b = true
    assert.is_true(ma:release())
    assert.is_true(drive_until(all, function()
      return w1.released and w2.released and w4.released and b.released
    end, 10),
      "the waiters did not all get their locks")
    assert.are.equal(w1_node, util.basename(w1.node))
    assert.is_true(w4.at > w1.at)
    assert.is_true(index_of(grants, "a1") < index_of(grants, "a2"))
    assert.is_true(w1.token > token_a and w4.token > w1.token)
    assert.is_true(w2.token > b.token)
    assert.is_true(b.held)
    assert.are.equal(b.token, b.token_after)
    assert.are.equal(b.node, b.node_after)
    assert.is_true(b.released[1])
    assert.are.equal("{SUSPENDED,RECONNECTED}", names(la))   -- nothing more was reported
    for _, p in ipairs({ pa, pb, pc }) do assert.are.same({}, util.children(obs, p)) end
  end)

  ------------------------------------------------------------------ expiry on demand

  it("session expired on demand: each hold hears LOST once, is_held() false, token() nil, pending acquires fail "
     .. "with ESESSION; another client gets the lock; a new session acquires again and adopts nothing of the old one",
     function()
    local S = 4
    local pa, pb, pc, pd = "/sess/expire/a", "/sess/expire/b", "/sess/expire/c", "/sess/expire/d"
    local c = util.connect(zk.hosts, { session_timeout = S, identity = "victim" })
    local o = util.connect(zk.hosts, { session_timeout = S, identity = "other" })
    local all = { c, o }
    local cs = record_session(c)
    local old_sid = c:session()
    -- holds: the main thread (a), two coroutines (b, c)
    local ma = c:mutex(pa)
    local la = record_lock(ma)
    assert(ma:acquire(5))
    local token_a = ma:token()
    local told = false
    local function holder(path, r)
      local m = c:mutex(path)
      r.events = record_lock(m)
      c:spawn(function()
        assert(m:acquire(5))
        r.node, r.token = m:node(), m:token()
        for _ = 1, 2000 do
          if told then break end
          c:sleep(0.01)
        end
        r.held, r.token_after, r.node_after = m:is_held(), m:token(), m:node()
        r.reentrant = pack(m:acquire(0))       -- a lost hold cannot be re-entered
        r.release = pack(m:release())          -- and its release says it was lost
        r.held_after_release = m:is_held()
        r.again = pack(m:acquire(5))           -- a fresh acquisition, in the new session
        if r.again[1] then
          r.node2, r.token2 = m:node(), m:token()
          r.owner2 = owner_of(c, r.node2)
          r.release2 = m:release()
        end
        r.done = true
      end)
    end
    local hb, hc = {}, {}
    holder(pb, hb)
    holder(pc, hc)
    -- pending acquires of the victim: behind the other client (d), and behind its own main thread (a)
    local md = o:mutex(pd)
    assert(md:acquire(5))
    local p1, p2 = {}, {}
    c:spawn(function() p1.res = pack(c:mutex(pd):acquire(30)); p1.at = now() end)
    c:spawn(function() p2.res = pack(ma:acquire(30)); p2.at = now() end)
    assert.is_true(drive_until(all, function() return #util.children(o, pa) == 2 and #util.children(o, pd) == 2 end, 5))
    -- the other client queues behind both of the victim's nodes on a
    local ow = {}
    local oma = o:mutex(pa)
    o:spawn(function()
      ow.res = pack(oma:acquire(30))
      ow.at = now()
      if ow.res[1] then
        ow.node, ow.token = oma:node(), oma:token()
        ow.queue, ow.qerr = o:children(pa)
        o:sleep(0.2)
        ow.release = oma:release()
        ow.released_at = now()
      end
    end)
    assert.is_true(drive_until(all, function()
      return #util.children(o, pa) == 3 and hb.node and hc.node
    end, 5), "not all queued")
    local old_nodes = {}
    for full in pairs(owners(o, { pa, pb, pc, pd })) do old_nodes[util.basename(full)] = true end
    local before = owners(o, { pa, pb, pc, pd })
    local n_old = 0
    for _, sid in pairs(before) do if sid == old_sid then n_old = n_old + 1 end end
    assert.are.equal(5, n_old)   -- a (main), a (pending), b, c, d (pending)

    local t_exp = now()
    assert(testing.expire(c, zk.hosts))
    local done = drive_until(all, function()
      return count_of(la, "LOST") > 0 and count_of(hb.events, "LOST") > 0 and count_of(hc.events, "LOST") > 0
        and p1.res and p2.res and ow.queue and c.state == "CONNECTED" and (c:session()) ~= old_sid
    end, 3 * S)
    local t_done = now()
    print(("\n  [expire] LOST %.0f ms after the expiry; pending acquires failed after %.0f/%.0f ms; another client "
      .. "granted after %.0f ms; new session after %.0f ms; session events %s"):format(
      (la.at[#la.at] or t_exp) - t_exp, (p1.at or t_exp) - t_exp, (p2.at or t_exp) - t_exp, (ow.at or t_exp) - t_exp,
      t_done - t_exp, names(cs)))
    assert.is_true(done, ("expiry not completed: a %s b %s c %s p1 %s p2 %s other %s state %s"):format(names(la),
      names(hb.events), names(hc.events), tostring(p1.res and p1.res[3]), tostring(p2.res and p2.res[3]),
      tostring(ow.res and ow.res[1] ~= nil), c.state))
    -- every hold heard LOST, once (a SUSPENDED may come first: the server moves the session away)
    for name, ev in pairs({ a = la, b = hb.events, c = hc.events }) do
      assert.are.equal(1, count_of(ev, "LOST"), name .. ": " .. names(ev))
      assert.are.equal("LOST", ev[#ev], name .. ": " .. names(ev))
      assert.is_nil(index_of(ev, "RECONNECTED"), name .. ": " .. names(ev))
      assert.is_true(#ev == 1 or (#ev == 2 and ev[1] == "SUSPENDED"), name .. ": " .. names(ev))
    end
    -- the main thread's hold: gone, and says so
    assert.is_false(ma:is_held())
    assert.is_nil(ma:token())
    assert.is_nil(ma:node())
    assert_code("ELOST", pack(ma:acquire(0)), "re-entering a lost hold")
    -- pending acquires failed with the session error
    assert_code("ESESSION", p1.res, "pending acquire behind the other client")
    assert_code("ESESSION", p2.res, "pending acquire behind the victim's own hold")
    -- a new session, announced
    local new_sid = c:session()
    assert.are_not.equal(old_sid, new_sid)
    assert.are.equal(1, count_of(cs, "EXPIRED"))
    assert.are.equal("CONNECTED", cs[#cs])
    assert.are.equal("EXPIRED", cs[#cs - 1])
    assert.is_nil(index_of(cs, "CLOSED"))
    -- the other client got the lock, and it was alone in the queue when granted
    assert.are.equal(oma, ow.res[1], tostring(ow.res[2]))
    assert.are.same({ util.basename(ow.node) }, ow.queue, tostring(ow.qerr))
    assert.is_true(ow.token > token_a)
    assert.is_true(ow.at - t_exp < S * 1000, "the other client waited as if the session had to time out")
    -- the coroutines that held: told, then able to acquire in the new session
    told = true
    assert.is_true(drive_until(all, function() return hb.done and hc.done end, 10))
    for name, r in pairs({ b = hb, c = hc }) do
      assert.is_false(r.held, name)
      assert.is_nil(r.token_after, name)
      assert.is_nil(r.node_after, name)
      assert_code("ELOST", r.reentrant, name .. ": re-entering a lost hold")
      assert_code("ELOST", r.release, name .. ": releasing a lost hold")
      assert.is_false(r.held_after_release, name)
      assert.truthy(r.again[1], name .. ": " .. tostring(r.again[2]))
      assert.are.equal(new_sid, r.owner2, name)
      assert.is_false(old_nodes[util.basename(r.node2)] or false, name .. ": an old node was adopted")
      assert.is_true(r.token2 > r.token, name)
      assert.is_true(r.release2, name)
    end
    -- the main thread's release says lost; then the client queues again, now behind the other
    -- client (a coroutine of c, so that both clients are driven while it waits)
    assert_code("ELOST", pack(ma:release()), "main thread's release of a lost hold")
    local again = {}
    c:spawn(function()
      again.res = pack(ma:acquire(10))
      if again.res[1] then
        again.node, again.token = ma:node(), ma:token()
        again.owner = owner_of(c, again.node)
        again.other_exists = pack(c:exists(ow.node))
        again.release = ma:release()
      end
    end)
    assert.is_true(drive_until(all, function() return again.release ~= nil and ow.released_at ~= nil end, 10),
      "the new session did not get the lock")
    assert.are.equal(ma, again.res[1], tostring(again.res[2]))
    assert.truthy(ow.released_at, "granted before the other client released")
    assert.is_false(again.other_exists[1],
      "granted while the other client's node existed: " .. tostring(again.other_exists[2]))
    assert.is_nil(old_nodes[util.basename(again.node)])
    assert.are.equal(new_sid, again.owner)
    assert.is_true(again.token > ow.token)
    assert.is_true(again.release)
    -- nothing of the old session anywhere; nothing more reported
    util.drive(all, 0.3)
    for full, sid in pairs(owners(o, { pa, pb, pc, pd })) do
      assert.are_not.equal(old_sid, sid, "a node of the expired session remains: " .. full)
    end
    local listed, dump = session_in_dump(zk, old_sid)
    assert.is_false(listed, "the expired session still owns ephemerals:\n" .. dump)
    for name, ev in pairs({ a = la, b = hb.events, c = hc.events }) do
      assert.are.equal(1, count_of(ev, "LOST"), name .. " heard LOST again: " .. names(ev))
    end
    assert.is_true(md:release())
    for _, p in ipairs({ pa, pb, pc, pd }) do assert.are.same({}, util.children(o, p)) end
  end)

  ------------------------------------------------------------------ connection loss > session

  it("server paused for longer than the session timeout: SUSPENDED, then LOST before the server could expire the "
     .. "session; after the resume a new session, and the waiter gets the lock only once the old node is gone",
     function()
    local S = 3
    local pa, pb = "/sess/long/a", "/sess/long/b"
    local c = util.connect(zk.hosts, { session_timeout = S, identity = "cut-off" })
    local o = util.connect(zk.hosts, { session_timeout = 20, identity = "other" })
    local all = { c, o }
    local cs = record_session(c)
    local old_sid = c:session()
    local m = c:mutex(pa)
    local lm = record_lock(m)
    assert(m:acquire(5))
    local node, token = m:node(), m:token()
    -- a pending acquire of c (behind o), and a waiter of o behind c
    local omb = o:mutex(pb)
    assert(omb:acquire(5))
    local p = {}
    c:spawn(function() p.res = pack(c:mutex(pb):acquire(60)); p.at = now() end)
    local ow = {}
    local om = o:mutex(pa)
    o:spawn(function()
      ow.res = pack(om:acquire(60))
      ow.at = now()
      if ow.res[1] then
        ow.old_node_exists = o:exists(node) and true or false
        ow.token = om:token()
        ow.release = om:release()
        ow.released_at = now()
      end
    end)
    assert.is_true(drive_until(all, function() return #util.children(o, pa) == 2 and #util.children(o, pb) == 2 end, 5))
    assert.truthy(c:exists("/"))
    assert.truthy(o:exists("/"))
    local t_last = now()     -- the server last heard from c (and c from the server) about now
    zk:pause()
    local lost = drive_until(all, function() return index_of(lm, "LOST") and p.res ~= nil end, 2 * S)
    local t_lost = now()
    util.drive(all, 0.7)     -- paused longer than the session timeout in any case
    local t_resume = now()
    zk:resume()
    assert.is_true(lost, "no local LOST while the server was paused for " .. (t_lost - t_last) .. " ms: " .. names(lm))
    assert.is_true(drive_until(all, function() return ow.released_at ~= nil and c.state == "CONNECTED" end, 4 * S),
      "after the resume the waiter did not get the lock, or the client no new session")
    local susp_at, lost_at = lm.at[1], lm.at[index_of(lm, "LOST")]
    print(("\n  [long pause] SUSPENDED %.0f ms, LOST %.0f ms after the last contact (session %d s); paused %.0f ms; "
      .. "the waiter granted %.0f ms after the resume"):format(susp_at - t_last, lost_at - t_last, S,
      t_resume - t_last, ow.at - t_resume))
    assert.are.same({ "SUSPENDED", "LOST" }, { lm[1], lm[2], lm[3] })
    -- SUSPENDED after about 2/3 of the session timeout; LOST before a whole one (README: less a tenth)
    assert.is_true(susp_at - t_last >= 0.5 * S * 1000 and susp_at - t_last < 0.85 * S * 1000,
      "SUSPENDED at an odd time")
    assert.is_true(lost_at - t_last >= 0.8 * S * 1000, "LOST reported too early")
    assert.is_true(lost_at - t_last < S * 1000, "LOST reported only after the server could have expired the session")
    assert.is_true(t_resume - t_last > S * 1000)
    assert.is_false(m:is_held())
    assert.is_nil(m:token())
    assert_code("ESESSION", p.res, "pending acquire")
    assert.is_true(p.at <= lost_at + 100, "the pending acquire failed long after LOST")
    assert.are.equal(1, count_of(cs, "EXPIRED"))
    assert.are_not.equal(old_sid, (c:session()))
    -- the waiter: granted only after the resume, once the old node was gone
    assert.are.equal(om, ow.res[1], tostring(ow.res[2]))
    assert.is_true(ow.at > t_resume)
    assert.is_true(ow.at - t_resume < (S + 2) * 1000, "the waiter was granted too late after the resume")
    assert.is_false(ow.old_node_exists, "granted while the old holder's node existed")
    assert.is_true(ow.token > token)
    assert.is_false(o:exists(node))
    -- the cut-off client can take its lock again in its new session
    assert_code("ELOST", pack(m:release()), "release of the lost hold")
    assert.are.equal(m, m:acquire(5))
    assert.are.equal((c:session()), owner_of(o, m:node()))
    assert.is_true(m:token() > ow.token)
    assert.is_true(m:release())
    assert.are.equal(1, count_of(lm, "LOST"))
    assert.is_true(omb:release())
    for _, path in ipairs({ pa, pb }) do assert.are.same({}, util.children(o, path)) end
  end)
end)
