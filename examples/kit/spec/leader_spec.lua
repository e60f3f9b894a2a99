-- A leader-only job runs on one process at a time. Three candidates (the app code in
-- app/leader.lua; the holder of a mutex is the leader) run the job's ticks while a seeded nemesis
-- pauses the server for longer than their session timeout, again and again, so leadership moves.
-- From the candidates' logs: never two leaders at once.
--   cd examples/kit && busted spec/leader_spec.lua     (ZKLOCK_EXAMPLE_VARIANT=broken: the buggy app)
--   ZKLOCK_EXAMPLE_SEED=7 ...                           replays one schedule
local testing = require("zklock.testing")
local check = testing.check

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."
package.path = HERE .. "/?.lua;" .. package.path
local APP = os.getenv("ZKLOCK_EXAMPLE_VARIANT") == "broken" and "app.leader_broken" or "app.leader"
local SEED = tonumber(os.getenv("ZKLOCK_EXAMPLE_SEED") or "") or os.time()

describe("leader-only job (" .. APP .. ")", function()
  it("has one leader at a time through server pauses longer than the session", function()
    testing.with_server({ tick_ms = 500, min_session_ms = 1000 }, function(zk)
      local dir = (testing.sh("mktemp -d"):gsub("%s+$", ""))
      finally(function() os.execute("rm -rf " .. testing.shq(dir)) end)
      local workers = {}
      for i = 1, 3 do
        workers[i] = testing.worker{ script = HERE .. "/worker.lua", args = {
          APP, zk.hosts, ("%s/c%d.log"):format(dir, i), "c" .. i, "/jobs/leader", 22, 0 } }
      end
      testing.eventually(function()
        for _, ev in ipairs(check.load(dir).events) do if ev.ev == "tick" then return true end end
      end, 20, { what = "a first leader" })

      local nem = testing.nemesis{ seed = SEED, server = zk, faults = { "pause" },
                                   gap = { 1, 2 }, duration = { 5, 6 }, quiet = 1, log = print }
      local report = nem:run(16)
      print("nemesis: " .. report.summary)
      assert.is_true(report.faults >= 1)
      for i, w in ipairs(workers) do
        assert.are.equal(0, w:wait(60), "candidate " .. i .. ": " .. w:output())
      end

      local terms = check.spans(check.load(dir), "tick", { as = "lead" })   -- one term per leader and token
      local ok, violation = check.leader(terms)
      assert(ok, violation)
      local n = 0
      for _, ev in ipairs(terms.events) do if ev.ev == "lead" then n = n + 1 end end
      assert.is_true(n >= 2, "leadership never moved")
    end)
  end)
end)
