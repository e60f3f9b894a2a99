-- client:loss_deadline() on a real server: the LOST deadline counts from the issue time of the last
-- request the server answered, so an idle client must keep sending requests of its own (the
-- heartbeat, every quarter of the session timeout) for the deadline to stay fresh, in the
-- owner-driven path (client:sleep) and in the keepalive path (a blocked owner thread). The
-- ZooKeeper client's own pings are invisible: without the heartbeat, these clients would report
-- LOST after one session timeout less the margin however healthy the link.
local util = require("support.util")
local fixture = require("support.fixture")

local now = util.now
local S = 2 -- requested session timeout, seconds

local function record(c)
  local events = {}
  c:on_session(function(state) events[#events + 1] = state end)
  return events
end

-- the lowest deadline seen between calls of step(), which returns false to stop
local function lowest(c, step)
  local low = math.huge
  while step() do
    local d = c:loss_deadline()
    assert.is_number(d)
    if d < low then low = d end
  end
  return low
end

describe("loss deadline", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, {}, function(s) zk = s end)
  after_each(util.close_all)

  it("nil without a session, then at most a session timeout less the margin", function()
    local c = util.connect(zk.hosts, { session_timeout = S, wait = false })
    assert.are.equal("CONNECTING", c.state)
    assert.is_nil(c:loss_deadline())
    assert.is_true(util.wait_until(function() return c.state == "CONNECTED" end, 10, { c }))
    local T = c:session_timeout()
    local margin = math.min(T / 10, 1)
    local d = c:loss_deadline()
    assert.is_number(d)
    assert.is_true(d > 0 and d <= T - margin, ("deadline %.3f s with T = %.3f s"):format(d, T))
    c:close()
    assert.has_error(function() c:loss_deadline() end)
  end)

  it("owner-driven: an idle client's heartbeats keep the deadline fresh for 4 session timeouts", function()
    local c = util.connect(zk.hosts, { session_timeout = S })
    local events = record(c)
    local m = c:mutex("/loss-deadline/a")
    assert(m:acquire(5))
    local T = c:session_timeout()
    local margin = math.min(T / 10, 1)
    local t_end = now() + 4 * T
    local low = lowest(c, function() c:sleep(0.02); return now() < t_end end)
    print(("\n  [owner-driven] T = %.1f s: lowest deadline %.0f ms over %.0f s idle (full: %.0f ms; "
      .. "a heartbeat every %.0f ms)"):format(T, low * 1000, 4 * T, (T - margin) * 1000, T / 4 * 1000))
    -- a heartbeat after T/4 idle, answered within a round trip: the deadline stays near
    -- T - margin - T/4 (1.3 s); without heartbeats it would run down to 0 (LOST). A quarter of the
    -- timeout leaves room for a busy machine.
    assert.is_true(low > T / 4, ("the deadline fell to %.3f s (T = %.3f s)"):format(low, T))
    assert.are.same({}, events)
    assert.is_true(m:is_held())
    assert.is_true(m:release())
  end)

  it("keepalive: the thread's heartbeats keep the deadline fresh while the owner blocks", function()
    local c = util.connect(zk.hosts, { session_timeout = S, keepalive = true })
    local events = record(c)
    local m = c:mutex("/loss-deadline/b")
    assert(m:acquire(5))
    local T = c:session_timeout()
    -- the owner stays out of the library (a blocking shell sleep) for 3 session timeouts, looking
    -- only at the deadline now and then
    local low = math.huge
    for _ = 1, 6 do
      os.execute(("sleep %g"):format(T / 2))
      local d = c:loss_deadline()
      assert.is_number(d)
      if d < low then low = d end
    end
    print(("\n  [keepalive] T = %.1f s: lowest deadline %.0f ms while the owner blocked %.0f s")
      :format(T, low * 1000, 3 * T))
    assert.is_true(low > T / 4, ("the deadline fell to %.3f s (T = %.3f s)"):format(low, T))
    c:process()
    assert.are.same({}, events)
    assert.is_true(m:is_held())
    assert.is_true(m:release())
  end)
end)

-- H1 (review of issue 21): when the core declares LOST by its own timer while the ZooKeeper
-- client still counts the link as up, nothing may tell the server to end the session
-- (closeSession): the server must expire it on its own clock, a margin after LOST, so that an
-- owner that reads the LOST a little late (a keepalive client's owner, away from the library
-- for up to 100 ms) still learns it before anyone else is granted. Each round: the holder, a
-- keepalive client in a worker process behind a proxy, takes a mutex; a waiter on a direct
-- client queues; then the proxy
--   drops every reply (requests still reach the server): the ZooKeeper client gives the silent
--     link up itself (2T/3 after it last heard anything) before the LOST deadline, so no
--     closeSession could go out anyway; or
--   delays the replies more and more (requests reach the server at once): replies keep coming,
--     so the ZooKeeper client keeps the link up, but each is older than the last, and the LOST
--     deadline passes on a link that is up (the ZooKeeper client's state is CONNECTED then): the
--     case where a closeSession could reach the server.
-- The waiter must be granted only after the holder's owner saw is_held() false. ZKLOCK_H1_ROUNDS
-- (3) rounds per fault. Known weakness: with the read side shut only (the old code) this passed
-- too (11 delay rounds); the grant followed LOST within a few ms in only 1 of them, so the ZooKeeper
-- client seldom got the closeSession out here, and the check is weaker than it should be.
local testing = require("zklock.testing")
local core = require("zklock.core")
local loss = require("support.loss")

describe("LOST by the timer sends no closeSession (keepalive owner, replies dropped) #faults #slow", function()
  local zk
  fixture.server(loss.SERVER, { own = "a 200 ms tick: the server expires sessions within 200 ms of their "
    .. "deadline" }, function(s) zk = s end)
  after_each(util.close_all)

  it("the waiter is granted only after the owner learned LOST, in every round", function()
    local rounds = tonumber(os.getenv("ZKLOCK_H1_ROUNDS") or "") or 3
    local net = testing.proxy(zk.hosts)
    local wc = util.connect(zk.hosts, { session_timeout = 10, identity = "h1-waiter" })
    local shell = require("zklock.testing.shell")
    local dir = shell.mktemp("zklock-h1")
    local margins, bad = {}, {}
    local faults = {
      drop_replies = function() net:drop_replies(20) end,
      -- raised 250 ms every 0.5 s up to 2 s: the replies keep coming (never 2T/3 apart, so the
      -- ZooKeeper client keeps the link), each older than the last
      delay_replies = function()
        for step = 1, 8 do
          net:delay_replies(250 * step, 20)
          util.drive({ wc }, 0.5)
        end
      end,
    }
    local ok, err = pcall(function()
      for k, fault in ipairs({ "drop_replies", "delay_replies" }) do
        margins[fault] = {}
        for r = 1, rounds do
          local path = ("/h1/%d/%s/%d"):format(testing.pid, fault, r)
          local out = ("%s/holder-%s-%d.out"):format(dir, fault, r)
          local worker = testing.worker{ script = "spec/support/keepalive_holder.lua",
                                         args = { net.hosts, path, out, 30, 100 * k + r } }
          local function line(tag)
            local t = testing.read_file(out) or ""
            return t:match("\n" .. tag .. " ([%d%.]+)") or t:match("^" .. tag .. " ([%d%.]+)")
          end
          assert(util.wait_until(function() return line("H") or not worker:alive() end, 20, { wc }),
            "the holder did not take the lock")
          assert(line("H"), "the holder failed: " .. (testing.read_file(out) or "") .. worker:output())
          local granted_at
          local m = wc:mutex(path)
          wc:spawn(function()
            local got = m:acquire(30)
            if got then granted_at = core.now() m:release() end
          end)
          assert(util.wait_until(function() return #(wc:children(path) or {}) >= 2 end, 20, { wc }),
            "the waiter did not queue")
          faults[fault]()
          util.drive_until({ wc }, function() return granted_at and line("L") end, 15, nil, 0.002)
          net:heal()
          if not worker:wait(10) then worker:stop() end
          local learned = tonumber(line("L"))
          assert(granted_at, ("%s round %d: the waiter was never granted"):format(fault, r))
          assert(learned, ("%s round %d: the holder never learned of the loss: %s"):format(fault, r,
            testing.read_file(out) or ""))
          local margin = granted_at - learned
          local ms = margins[fault]
          ms[#ms + 1] = margin
          if margin < 0 then
            bad[#bad + 1] = ("%s round %d: granted %.0f ms before the owner learned LOST"):format(fault, r, -margin)
          end
        end
      end
    end)
    pcall(net.stop, net)
    shell.remove_tree(dir)
    assert(ok, err)
    for _, fault in ipairs({ "drop_replies", "delay_replies" }) do
      local ms = margins[fault] or {}
      table.sort(ms)
      print(("\n  [H1 %s] %d rounds, grant - owner's LOST: min %.0f ms, max %.0f ms"):format(fault, #ms,
        ms[1] or 0, ms[#ms] or 0))
    end
    assert(#bad == 0, table.concat(bad, "\n"))
  end)
end)
