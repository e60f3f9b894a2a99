-- keepalive = true runs a second thread that drives ZooKeeper while the Lua thread stays away.
-- Everything the two threads share must be guarded: the ZooKeeper client's log lines (written
-- by whichever thread drives it, read by c:logs()), the session state and counters. The same
-- traffic runs under ThreadSanitizer in tests/tsan_keepalive.lua (CI), where an unguarded access
-- is reported as a data race and fails the run.
local zklock = require("zklock")
local testing = require("zklock.testing")
local fixture = require("support.fixture")

describe("keepalive thread and the Lua thread", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, {}, function(s) zk = s end)

  it("share log lines, state and counters without losing any", function()
    local seen = {}
    local c = assert(zklock.connect(zk.hosts, {
      session_timeout = 1.2, keepalive = true, log_level = "debug",
      log = function(line) seen[#seen + 1] = line end,
    }))
    local m = c:mutex("/ka-threads/a")
    assert(m:acquire(5))
    local before = c:stats()
    -- stay away longer than the keepalive's idle threshold, again and again, so that pings (and
    -- their log lines) are sent by the keepalive thread while this thread reads logs and state
    local deadline = testing.now() + 3
    local rounds = 0
    while testing.now() < deadline and rounds < 60 do
      os.execute("sleep 0.15")
      assert.are.equal("CONNECTED", c.state)
      assert.is_true(m:is_held())
      rounds = rounds + 1
    end
    local after = c:stats()
    assert.is_true(rounds >= 5, "too few rounds: " .. rounds)
    assert.are.equal(before.sessions_expired, after.sessions_expired)
    assert.is_true(#seen > 0, "no ZooKeeper log line reached the log function")
    assert.is_true(m:release())
    c:close()
  end)
end)
