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
-- This file: close() while coroutines wait, and the on_session sequence.
--   busted --lua=lua5.4 spec/32-session-close_spec.lua
--   busted --lua=luajit --run=luajit spec/32-session-close_spec.lua
-- The shared server of spec/support/fixture.lua (clean at the start; resumed after each test
-- if a test left it paused); worker processes and proxies are killed after each test. Every wait is bounded.
-- Helpers: spec/support/session.lua; fixture: spec/support/fixture.lua.
local testing = require("zklock.testing")
local util = require("support.util")
local fw = require("support.fault_worker")
local fixture = require("support.fixture")
local H = require("support.session")

local now, pack, assert_code, record_session = H.now, H.pack, H.assert_code, H.record_session
local index_of, names, drive_until, owners = H.index_of, H.names, H.drive_until, H.owners

describe("sessions: close and on_session", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 },
    { workers = true, resume = true, each = true, each_workers = true },
    function(s) zk = s end)

  ------------------------------------------------------------------ close while waiting

  it("close() while 20 coroutines wait: every one ends with ECLOSED before close returns, the client's nodes "
     .. "vanish at once, other clients get the locks", function()
    local px, py = "/sess/close/x", "/sess/close/y"
    local c = util.connect(zk.hosts, { session_timeout = 10, identity = "closing" })
    local o = util.connect(zk.hosts, { session_timeout = 10, identity = "other" })
    local cs = record_session(c)
    for _, p in ipairs({ px, py }) do assert(o:create(p, "", { parents = true })) end
    local mx = o:mutex(px)
    assert(mx:acquire(5))
    local ox = util.basename(mx:node())
    -- a coroutine of c holds y and sleeps (long)
    local hy = {}
    local my = c:mutex(py)
    c:spawn(function()
      hy.res = pack(my:acquire(5))
      hy.node = my:node()
      c:sleep(30)
      hy.woke = now()
      hy.held, hy.token = my:is_held(), my:token()
      hy.release = pack(my:release())
    end)
    assert.is_true(drive_until({ c, o }, function() return hy.res ~= nil end, 5))
    assert.are.equal(my, hy.res[1], tostring(hy.res[2]))
    -- 20 waiters: 10 on x (5 share one object, 5 have their own), 10 on y (behind c's own holder)
    local shared_x, shared_y = c:mutex(px), c:mutex(py)
    local waiters = {}
    for i = 1, 20 do
      local path = i <= 10 and px or py
      local m
      if i % 2 == 0 then m = (i <= 10) and shared_x or shared_y else m = c:mutex(path) end
      local r = { path = path }
      r.co = c:spawn(function()
        r.res = pack(m:acquire(60))
        r.held = m:is_held()
      end)
      waiters[i] = r
    end
    -- o queues on y behind all of them
    local oy = {}
    local omy = o:mutex(py)
    o:spawn(function()
      oy.res = pack(omy:acquire(60))
      oy.at = now()
      if oy.res[1] then
        oy.node = omy:node()
        oy.queue, oy.qerr = o:children(py)
        oy.release = omy:release()
      end
    end)
    assert.is_true(drive_until({ c, o }, function()
      return #util.children(o, px) == 11 and #util.children(o, py) == 12
    end, 10), "the waiters did not all queue")
    local c_sid = c:session()
    local t0 = now()
    c:close()
    local t_close = now()
    -- before close returned, every waiter ended with ECLOSED, and the sleeping holder woke
    for i, r in ipairs(waiters) do
      assert_code("ECLOSED", r.res, "waiter " .. i)
      assert.is_false(r.held, "waiter " .. i)
      assert.are.equal("dead", coroutine.status(r.co), "waiter " .. i)
    end
    assert.truthy(hy.woke, "the sleeping holder was not woken by close")
    assert.is_false(hy.held)
    assert.is_nil(hy.token)
    assert.is_true(hy.release[1])
    assert.are.equal("CLOSED", cs[#cs])
    assert.are.equal("CLOSED", c.state)
    -- the closed session's nodes are gone at once (no session timeout), and o gets y
    local gone = drive_until({ o }, function()
      local x = util.children(o, px)
      return #x == 1 and x[1] == ox and oy.queue ~= nil
    end, 2)
    print(("\n  [close] close() took %.0f ms with 20 waiters and a holder; "
      .. "the other client got y %.0f ms after it"):format(
      t_close - t0, (oy.at or now()) - t0))
    if not gone then
      -- say what is left, whose it is, and when (if at all) it goes
      local left = owners(o, { px, py })
      local desc = {}
      for full, sid in pairs(left) do desc[#desc + 1] = util.basename(full):sub(-10) .. "@" .. tostring(sid) end
      local t_gone
      drive_until({ o }, function()
        local x = util.children(o, px)
        if #x == 1 and oy.queue ~= nil then t_gone = now() return true end
      end, 12)
      assert.is_true(gone, ("the closed client's nodes were left behind (closed session %s): %d nodes {%s}; "
        .. "other client granted: %s; they went %s"):format(tostring(c_sid), #desc, table.concat(desc, " "),
        tostring(oy.res and oy.res[1] ~= nil),
        t_gone and ("%.0f ms after close()"):format(t_gone - t0) or "not within 14 s"))
    end
    assert.are.equal(omy, oy.res[1], tostring(oy.res[2]))
    assert.are.same({ util.basename(oy.node) }, oy.queue, tostring(oy.qerr))  -- alone in the queue when granted
    assert.is_true(oy.at - t0 < 2000)
    assert.is_true(drive_until({ o }, function() return oy.release ~= nil end, 2))
    assert.is_true(mx:release())
    for _, p in ipairs({ px, py }) do
      assert.are.same({}, util.children(o, p))
      assert(o:delete(p))
    end
  end)

  -- The same with replies still in flight: close() a moment after 20 waiters sent their
  -- creates. The session must still end at the server at once (10 rounds, fresh client each).
  it("close() while 20 just-spawned waiters still have replies in flight: ECLOSED for all, and the session ends "
     .. "at the server at once (10 rounds)", function()
    local o = util.connect(zk.hosts, { session_timeout = 10, identity = "other" })
    local results = {}
    for round = 1, 10 do
      local path = "/sess/close-inflight/" .. round
      assert(o:create(path, "", { parents = true }))
      local om = o:mutex(path)
      assert(om:acquire(5))
      local c = util.connect(zk.hosts, { session_timeout = 10, identity = "closing-" .. round })
      local sid = c:session()
      local m = c:mutex(path)
      local res = {}
      for i = 1, 20 do c:spawn(function() res[i] = pack(m:acquire(60)) end) end
      c:process()              -- the coroutines run: their creates (and pipelined lists) go out
      testing.sleep(0.003)     -- the first replies arrive and are not read yet
      c:close()
      for i = 1, 20 do assert_code("ECLOSED", res[i], ("round %d waiter %d"):format(round, i)) end
      local t0 = now()
      local gone = drive_until({ o }, function() return #util.children(o, path) == 1 end, 1)
      local left = #util.children(o, path) - 1
      results[#results + 1] = gone and "ok" or ("%d left"):format(left)
      if not gone then
        local t_gone
        drive_until({ o }, function()
          if #util.children(o, path) == 1 then t_gone = now() return true end
        end, 12)
        assert.is_true(gone, ("round %d: %d nodes of the closed session %s were still there 1 s after close(); "
          .. "they went %s "
          .. "(a session timeout is 10 s: the server never got the closeSession)"):format(round, left, sid,
          t_gone and ("%.0f ms after close()"):format(t_gone - t0) or "not within 13 s"))
      end
      assert.is_true(om:release())
      assert(o:delete(path))
    end
    print("\n  [close in flight] rounds: " .. table.concat(results, " "))
  end)

  ------------------------------------------------------------------ on_session

  it("on_session: one handler (replaced, nil removes), with (state, client): SUSPENDED then CONNECTED on a "
     .. "dropped connection, EXPIRED then CONNECTED with a new session on expiry, CLOSED on close", function()
    local proxy = fw.proxy(zk.hosts)
    local logged = {}
    local c = util.connect(proxy.hosts, { session_timeout = 4, identity = "seq",
                                          log = function(line) logged[#logged + 1] = line end })
    local first, third = {}, {}
    -- a failing handler is logged; the next call replaces it
    assert.are.equal(c, c:on_session(function() error("a failing handler") end))
    assert.are.equal(c, c:on_session(function(state, cl)
      first[#first + 1] = { state = state, same = cl == c, cstate = cl.state,
                            sid = state ~= "CLOSED" and (cl:session()) or nil }
      third[#third + 1] = state
    end))
    local sid1 = c:session()
    local pump = function(s) util.drive({ c }, s) end
    -- a dropped connection, same session
    proxy:send("cut", 5, pump)
    assert.is_true(drive_until({ c }, function() return third[#third] == "CONNECTED" end, 8), names(third))
    local after_cut = #third
    -- expiry: a new session
    assert(testing.expire(c, zk.hosts))
    assert.is_true(drive_until({ c }, function()
      return index_of(third, "EXPIRED") and third[#third] == "CONNECTED"
    end, 8), names(third))
    local sid2 = c:session()
    c:close()
    print(("\n  [on_session] %s"):format(names(third)))
    -- the sequence: SUSPENDED, CONNECTED | (SUSPENDED,) EXPIRED, CONNECTED | CLOSED
    assert.are.equal(2, after_cut, names(third))
    assert.are.same({ "SUSPENDED", "CONNECTED" }, { third[1], third[2] })
    local rest = {}
    for i = after_cut + 1, #third do rest[#rest + 1] = third[i] end
    if rest[1] == "SUSPENDED" then table.remove(rest, 1) end
    assert.are.same({ "EXPIRED", "CONNECTED", "CLOSED" }, rest)
    -- the replaced (failing) handler never ran
    for _, l in ipairs(logged) do assert.is_nil(l:find("a failing handler", 1, true), l) end
    -- nil removes the handler: a second client's close reaches nobody
    local c2 = util.connect(zk.hosts, { identity = "seq2" })
    local heard = {}
    c2:on_session(function(state) heard[#heard + 1] = state end)
    assert.are.equal(c2, c2:on_session(nil))
    c2:close()
    assert.are.same({}, heard)
    assert.are.equal(#third, #first)
    for i, e in ipairs(first) do
      assert.are.equal(third[i], e.state)
      assert.is_true(e.same, "the handler did not get the client")
    end
    -- what the client says inside the handler
    assert.are.equal(sid1, first[2].sid)                 -- CONNECTED again: the same session
    assert.are.equal("CONNECTED", first[2].cstate)
    assert.are.equal("SUSPENDED", first[1].cstate)
    local last = first[#first]
    assert.are.equal("CLOSED", last.cstate)
    local reconnect = first[#first - 1]
    assert.are.equal("CONNECTED", reconnect.state)
    assert.are.equal(sid2, reconnect.sid)                -- the new session is visible in the handler
    assert.are_not.equal(sid1, sid2)
    assert.is_nil(index_of(third, "CONNECTING"))
  end)
end)
