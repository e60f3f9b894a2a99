-- Many lock waiters of one client across connection resets (real server, the testing kit's proxy).
-- The 3.8 C client, on every session event (a connection lost, a connection made again), builds
-- the list of its distinct (watcher, context) pairs with a linear search per pair, the whole
-- process stopped meanwhile (bench/CACHE-RESULTS.md, "The restart gap: its cause"). Each waiter
-- watches its predecessor: with a context per waiter, 10,000 waiters of one client meant 10,000
-- pairs. The core registers every waiter's watch under the client's one pair (docs/design.md,
-- "Plain-op watches"); this bounds the CPU of RESETS resets with WAITERS waiters queued.
--   busted --lua=lua5.4 spec/19-mutex-waiter-reset_spec.lua
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

local WAITERS = tonumber(os.getenv("ZKL_WAITERS")) or 10000
-- CPU seconds for RESETS resets: a context per waiter took 0.77 s (longest pump gap 133 ms), one
-- context 0.06 s (14 ms), 0.13 s under ASan, on a loaded 2-core machine
local RESETS, BOUND = 3, tonumber(os.getenv("ZKL_WAITERS_CPU")) or 0.4

describe("10,000 waiters of one client across connection resets", function()
  local fx = fixture.server({ jvm_opts = { "-Xmx512m" } }, { own = "10,000 waiters of one lock" })

  it("cost their process a small share of a second of CPU, and still get the lock", function()
    local net = testing.proxy(fx.zk.hosts)
    finally(function() util.close_all(); net:stop() end)
    local a = util.connect(net.hosts, { session_timeout = 30, identity = "waiters" })
    local b = fx.connect("holder", { session_timeout = 30 })
    net.pump = function(s) util.drive({ a, b }, s) end
    local path = "/ww"
    local hm = b:mutex(path)
    assert(hm:acquire(10))
    local m = a:mutex(path)
    local granted = 0
    for _ = 1, WAITERS do
      a:spawn(function()
        assert(m:acquire(300))
        granted = granted + 1
        assert(m:release())
      end)
    end
    local queued = function() return a:stats().gets >= WAITERS end
    assert.is_true(util.wait_until(queued, 240, { a, b }), "the waiters did not all queue")
    assert.are.equal(WAITERS + 1, #util.children(b, path))
    local suspended, connected = 0, 0
    a:on_session(function(state)
      if state == "SUSPENDED" then suspended = suspended + 1 end
      if state == "CONNECTED" then connected = connected + 1 end
    end)
    local sid = a:session()
    local gap, last = 0, util.now()
    local function sampled(pred)
      return function()
        local t = util.now()
        gap = math.max(gap, t - last)
        last = t
        return pred()
      end
    end
    local cpu0 = os.clock()
    -- Each reset starts from CONNECTED: a client that had been SUSPENDED already (queueing 10,000
    -- waiters can starve the process past its silence bound on a loaded machine, ASan more so)
    -- reports no second SUSPENDED for a reset that comes meanwhile.
    local function is_connected() return a.state == "CONNECTED" end
    assert.is_true(util.wait_until(is_connected, 60, { a, b }), "not connected before the resets")
    for _ = 1, RESETS do
      local s0, c0 = suspended, connected
      net:reset() -- the connection closed once: SUSPENDED, then the same session again
      last = util.now()
      assert(util.wait_until(sampled(function() return suspended > s0 end), 30, { a, b }),
        "the reset went unnoticed")
      assert(util.wait_until(sampled(function() return connected > c0 and is_connected() end), 60, { a, b }),
        "not connected again within 60 s")
    end
    local cpu = os.clock() - cpu0
    assert.are.equal(sid, (a:session()))
    assert.are.equal(0, granted)
    print(("  [waiters] %d waiters, %d resets: %.3f s of CPU (%.3f per reset, bound %.2f),"
      .. " longest pump gap %.0f ms"):format(WAITERS, RESETS, cpu, cpu / RESETS, BOUND, gap * 1000))
    -- the watches came through the resets: the release wakes the first waiter
    assert(hm:release())
    assert.is_true(util.wait_until(function() return granted >= 1 end, 30, { a, b }),
      "no waiter got the lock after the resets")
    assert.is_true(cpu < BOUND, ("%d resets with %d waiters took %.3f s of CPU"):format(RESETS, WAITERS, cpu))
  end)
end)
