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
