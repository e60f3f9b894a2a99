-- The OpenResty adapter's pump wake-up (zklock.adapters.openresty, pump_opts.wakeup) in a real
-- nginx (1 worker, zklock.core from build-jit/, a real ZooKeeper; spec/support/nginx/pump.conf.in
-- and pump_app.lua). Every request attaches a client of its own with busy_interval 0.3 s and
-- idle_interval 1 s, so a pump that waits for its period instead of the reply shows in seconds:
--   busted --lua=lua5.4 spec/44-openresty-pump_spec.lua
-- Skipped when nginx, the Lua module, lua-resty-core, curl or build-jit are missing, and failed
-- instead under CI=true (spec/support/deps.lua).
local testing = require("zklock.testing")
local harness = require("support.nginx.harness")
local deps = require("support.deps")
local fixture = require("support.fixture")

local ROOT = harness.ROOT

describe("openresty pump wake-up #openresty #lua54 #nosan", function()
  local why = harness.unavailable(ROOT)
  if why then deps.skip(why, pending) return end

  local zk, srv
  fixture.server({}, {}, function(s) zk = s end)

  setup(function()
    srv = harness.start{ root = ROOT, workers = 1, template = ROOT .. "/spec/support/nginx/pump.conf.in",
      vars = { ZK_HOSTS = zk.hosts, LOCK_BASE = ("/openresty-pump/%d"):format(math.random(1, 1e9)) } }
  end)

  teardown(function()
    if srv then
      local log = srv:error_log()
      srv:stop()
      for line in log:gmatch("[^\n]+") do
        assert(not (line:find("[error]", 1, true) or line:find("falls back", 1, true)
          or line:find("waker failed", 1, true)), "nginx error log: " .. line)
      end
    end
  end)

  local function get(path)
    local code, body = srv:get(path, 120)
    assert(code == 200, ("GET %s -> %s %s\n%s"):format(path, tostring(code), tostring(body), srv:log_tail(20)))
    return body
  end

  -- Each cycle is three round trips (create, list, delete). Polled every 0.3 s that is ~0.9 s a
  -- cycle; woken by the reply, milliseconds even on a loaded machine.
  it("wakeup=fd answers at round-trip speed, not at the poll period", function()
    local n = 20
    local secs = tonumber(get("/cycles?wakeup=fd&n=" .. n))
    print(("\n  [openresty] wakeup=fd: %d acquire+release cycles in %.3f s (polling at 0.3 s: ~%d s)"):format(
      n, secs, math.floor(n * 0.9)))
    assert.is_true(secs < n * 0.3, ("%d cycles took %.3f s: the pump waited for its period"):format(n, secs))
  end)

  it("wakeup=poll still works and polls (the slow path this spec would catch)", function()
    local n = 3
    local secs = tonumber(get("/cycles?wakeup=poll&n=" .. n))
    print(("\n  [openresty] wakeup=poll: %d cycles in %.3f s"):format(n, secs))
    -- at least one wait of a period per cycle: fd's bound above would fail here
    assert.is_true(secs >= n * 0.3, ("%d polled cycles in %.3f s: faster than the period"):format(n, secs))
  end)

  -- Replies come 2 s late (a proxy): only the pump's own deadline can end the acquire's wait.
  -- The pump has just begun an idle wait of 1 s when the acquire starts; the acquire must wake it.
  it("wakeup=fd: a new operation's earlier deadline wakes the pump", function()
    local net = testing.proxy(zk.hosts)
    local ok, body = pcall(function()
      net:delay_replies(2000, 60)
      return get("/deadline?wakeup=fd&hosts=" .. net.hosts)
    end)
    net:stop()
    assert(ok, body)
    local err, secs = body:match("^(%u+).- ([%d%.]+)%s*$")
    assert(secs, "unexpected answer: " .. body)
    secs = tonumber(secs)
    print(("\n  [openresty] wakeup=fd: acquire(0.3), replies 2 s late, ended after %.3f s (%s)"):format(
      secs, tostring(err)))
    assert.are.equal("ETIMEDOUT", err)
    assert.is_true(secs >= 0.29 and secs < 0.7, ("acquire(0.3) ended after %.3f s"):format(secs))
  end)

  -- The flush timer (wakeup=fd): an acquire started in a request while the pump waits on its
  -- waker has a listing that waits for a process() round. One 0 ms timer for the event-loop turn
  -- runs that round for every request of the turn: it finds work due (next_timeout_ms() 0) and
  -- leaves none (the listings sent with the creates), rather than waking the pump. Replies
  -- come 0.4 s late (a proxy), so none wakes the pump first, and an acquire (of a read lock whose
  -- dir another read lock keeps) costs one delayed round trip (listing sent with the creates),
  -- not two (listing sent on a create's reply).
  it("wakeup=fd: one flush timer per event-loop turn sends the listings of its requests", function()
    local n, DELAY = 4, 0.4
    local net = testing.proxy(zk.hosts)
    local ok, body = pcall(function()
      net:delay_replies(DELAY * 1000, 60)
      return get(("/flush?n=%d&hosts=%s"):format(n, net.hosts))
    end)
    net:stop()
    assert(ok, body)
    local timers, before, after, granted, slowest, secs =
      body:match("^timers=(%d+) before=(%S+) after=(%S+) granted=(%d+) ([%d%.]+) ([%d%.]+)")
    assert(timers, "unexpected answer: " .. body)
    slowest = tonumber(slowest)
    print(("\n  [openresty] wakeup=fd: %d acquires in one turn, replies %.1f s late: %s flush timer(s),"
      .. " next_timeout_ms %s -> %s, granted %s, the last after %.3f s (all released after %s s)")
      :format(n, DELAY, timers, before, after, granted, slowest, secs))
    assert.are.equal(n, tonumber(granted))
    -- two round trips take 2 * DELAY at the least: 0.35 s of slack for a busy machine
    assert.is_true(slowest >= DELAY - 0.01 and slowest < 2 * DELAY - 0.05,
      ("the last grant came after %.3f s: not one round trip of %.1f s"):format(slowest, DELAY))
    assert.are.equal(1, tonumber(timers), "one 0 ms timer for the turn")
    assert.are.equal("0", before, "the flush round found nothing due")
    assert.are_not.equal("0", after, "the flush round left the listings unsent")
    assert.are_not.equal("nil", after)
  end)

  it("a bad wakeup option is refused with its name", function()
    local body = get("/badopt")
    assert.truthy(body:find("openresty.attach: bad pump option wakeup", 1, true), body)
    assert.truthy(body:find("openresty.start: bad pump option busy_interval", 1, true), body)
    assert.truthy(body:find("client=nil", 1, true), body)
  end)
end)
