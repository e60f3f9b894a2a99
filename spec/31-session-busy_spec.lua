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
-- This file: a Lua thread that does not pump past the session timeout.
--   busted --lua=lua5.4 spec/31-session-busy_spec.lua
--   busted --lua=luajit --run=luajit spec/31-session-busy_spec.lua
-- The shared server of spec/support/fixture.lua (clean at the start; resumed after each test
-- if a test left it paused); worker processes and proxies are killed after each test. Every wait is bounded.
-- Helpers: spec/support/session.lua; fixture: spec/support/fixture.lua.
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fw = require("support.fault_worker")
local fixture = require("support.fixture")
local H = require("support.session")

local now, pack, assert_code, record_session = H.now, H.pack, H.assert_code, H.record_session
local record_lock, count_of, names, drive_until = H.record_lock, H.count_of, H.names, H.drive_until
local owner_of = H.owner_of

describe("sessions: a thread that does not pump", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 },
    { workers = true, resume = true, each = true, each_workers = true },
    function(s) zk = s end)

  ------------------------------------------------------------------ a thread that does not pump

  -- Common part of the two tests below: c holds `path` from the main thread, a coroutine of c
  -- waits behind it (same lock object), and a worker process queues behind both. Then the Lua
  -- thread blocks in os.execute("sleep") for 2.5 session timeouts: nothing drives c, the server
  -- expires its session and the worker process gets the lock, during the block.
  local BUSY_S = 2
  local function busy_setup(path)
    local c = util.connect(zk.hosts, { session_timeout = BUSY_S, identity = "busy" })
    local obs = util.connect(zk.hosts, { session_timeout = 20, identity = "observer" })
    local t = { c = c, obs = obs, sid = c:session(), sessions = record_session(c) }
    t.m = c:mutex(path)
    t.events = record_lock(t.m)
    assert(t.m:acquire(5))
    t.node, t.token = t.m:node(), t.m:token()
    t.pending = {}
    c:spawn(function() t.pending.res = pack(t.m:acquire(30)) end)
    local log = fw.tmpdir("busy") .. "/other.log"
    t.worker = fw.worker("acquire", { hosts = zk.hosts, path = path, session = 10, timeout = 20, hold = 5,
                                      identity = "other-process", log = log })
    assert.is_true(drive_until({ c, obs }, function() return #util.children(obs, path) == 3 end, 15),
      "the pending acquire and the worker did not queue: " .. t.worker:output())
    assert.is_nil(t.worker:wait_line("^acquired", 0))
    assert.truthy(c:exists("/"))
    t.t_block = now()
    testing.sleep(2.5 * BUSY_S)     -- busy: no call into zklock at all
    t.t_unblock = now()
    -- read the worker's log (a file, no zklock call): it holds the lock now
    local got = t.worker:wait_line("^acquired", 0)
    assert.truthy(got,
      "the other process did not get the lock during the block: " .. table.concat(t.worker:lines(), " | "))
    t.t_other = tonumber(got:match("^acquired (%S+)"))
    t.other_token = tonumber(got:match("^acquired %S+ (%d+)"))
    return t
  end

  it("a holder whose thread was busy past the session timeout learns LOST on its next call while another process "
     .. "holds the lock; pending acquires fail, the new session acquires after the other", function()
    local path = "/sess/busy/next"
    local t = busy_setup(path)
    local c, m = t.c, t.m
    print(("\n  [busy] blocked %.0f ms; the other process got the lock %.0f ms into the block"):format(
      t.t_unblock - t.t_block, t.t_other - t.t_block))
    -- the next call: the release at the end of the work. It must say the lock was lost.
    local rel = pack(m:release())
    local events_at_release = names(t.events)
    assert_code("ELOST", rel, "release after the block")
    assert.is_false(m:is_held())
    assert.is_nil(m:token())
    assert.is_true(drive_until({ c, t.obs }, function() return t.pending.res ~= nil and c.state == "CONNECTED" end, 5))
    assert_code("ESESSION", t.pending.res, "pending acquire of the blocked client")
    assert.are.equal(1, count_of(t.sessions, "EXPIRED"))
    assert.are_not.equal(t.sid, (c:session()))
    -- the old node went with the session; the new session queues behind the other process
    assert.is_false(t.obs:exists(t.node))
    assert.are.equal(m, m:acquire(15))
    local released = t.worker:wait_line("^released", 0)
    assert.truthy(released, "granted while the other process still held the lock")
    assert.is_true(now() >= tonumber(released:match("^released (%S+)")))
    assert.is_true(m:token() > t.other_token and t.other_token > t.token)
    assert.are.equal((c:session()), owner_of(t.obs, m:node()))
    assert.is_true(m:release())
    assert.are.same({}, util.children(t.obs, path))
    -- on_lost must have heard LOST for the lost hold (README: "the next call into zklock reports
    -- the loss (on_lost sees LOST ...)"), once
    assert.are.equal(1, count_of(t.events, "LOST"), "on_lost events: " .. names(t.events)
      .. " (when release returned ELOST: " .. events_at_release .. ")")
  end)

  it("a holder whose thread was busy past the session timeout: is_held(), token(), node() and a reentrant "
     .. "acquire, as the first calls, do not report the stale lock as held", function()
    local path = "/sess/busy/query"
    local t = busy_setup(path)
    local m = t.m
    -- the first calls after the block are queries that need no server round trip. Another
    -- process holds the lock right now (its log says so); the README promises the lock is
    -- "never reported as held when it is not".
    local first = { held = m:is_held(), token = m:token(), node = m:node() }
    local reentrant = pack(m:acquire(0))
    print(("\n  [busy] first calls after a %.0f ms block (another process holds the lock since %.0f ms into it): "
      .. "is_held()=%s token()=%s node()=%s acquire(0)=%s; lock events so far %s"):format(
      t.t_unblock - t.t_block, t.t_other - t.t_block, tostring(first.held), tostring(first.token),
      tostring(first.node and util.basename(first.node)),
      reentrant[1] and "granted (reentrant)" or tostring(reentrant[3]),
      names(t.events)))
    assert.is_false(first.held, "is_held() is true for a lock another process holds")
    assert.is_nil(first.token, "token() still returns the stale token")
    assert.is_nil(first.node, "node() still returns the expired node")
    assert_code("ELOST", reentrant, "reentrant acquire right after the block")
    assert.are.equal("LOST", t.events[#t.events])
  end)

  it("leases of a thread that was busy past the session timeout: the first release says ELOST, each lease hears "
     .. "LOST once, and an on_lost handler that releases its lease gets ELOST; another client gets the leases",
     function()
    local path = "/sess/busy/lease"
    local c = util.connect(zk.hosts, { session_timeout = BUSY_S, identity = "busy-lease" })
    local obs = util.connect(zk.hosts, { session_timeout = 20, identity = "observer" })
    local sem = c:semaphore(path, 3)
    local l1, l2, l3 = assert(sem:acquire(5)), assert(sem:acquire(5)), assert(sem:acquire(5))
    local heard, released_by_handler = {}, {}
    -- the usual handler: give the lease back when it is lost (l3 keeps its own)
    sem:on_lost(function(state, l)
      local i = l == l1 and 1 or l == l2 and 2 or l == l3 and 3 or "?"
      heard[#heard + 1] = state .. ":" .. i
      if state == "LOST" and l ~= l3 then released_by_handler[i] = pack(l:release()) end
    end)
    assert.is_true(l2:is_held())
    testing.sleep(2.5 * BUSY_S)     -- busy: no call into zklock at all
    -- the first call after the block is l1's release: it must report the loss, to l1 as well
    local rel = pack(l1:release())
    local heard_at_release = names(heard)
    assert_code("ELOST", rel, "release of a lease after the block")
    for i = 1, 3 do
      assert.are.equal(1, count_of(heard, "LOST:" .. i),
        ("l%d: %s (at release %s)"):format(i, names(heard), heard_at_release))
    end
    -- the handler's releases: ELOST, not an error (l1's came while l1:release() was running)
    for i = 1, 2 do assert_code("ELOST", released_by_handler[i], "release in on_lost of l" .. i) end
    assert.is_false(l3:is_held())
    assert.is_nil(l3:token())
    assert.is_nil(l3:node())
    assert_code("ELOST", pack(l3:release()), "release of the lost lease the handler kept")
    for _, e in ipairs(heard) do assert.is_nil(e:find("RECONNECTED", 1, true), names(heard)) end
    -- the server expired the session: another client gets all three leases at once
    local other = obs:semaphore(path, 3)
    local got = {}
    for i = 1, 3 do got[i] = other:acquire(i == 1 and 5 or 0) end
    for i = 1, 3 do
      assert.are.equal("lease", zklock.type(got[i]), "lease " .. i .. " was still taken by the expired session")
    end
    for i = 1, 3 do assert.is_true(got[i]:release()) end
    assert.are.same({}, util.children(obs, path .. "/leases"))
  end)
end)
