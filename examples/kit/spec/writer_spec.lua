-- A worker must stop writing as soon as its lock hears SUSPENDED. Two worker processes (the app
-- code in app/writer.lua) take turns on one lock, each through its own fault proxy; the test
-- silences the holder's network (a blackhole: no reset, the kind of loss a worker notices only by
-- its own timeout) until its session has expired and the other worker has taken over, then checks
-- from the workers' logs that no two of them ever wrote at once.
--   cd examples/kit && busted spec/writer_spec.lua     (ZKLOCK_EXAMPLE_VARIANT=broken: the buggy app)
local testing = require("zklock.testing")
local check = testing.check

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."
package.path = HERE .. "/?.lua;" .. package.path
local APP = os.getenv("ZKLOCK_EXAMPLE_VARIANT") == "broken" and "app.writer_broken" or "app.writer"

describe("writer (" .. APP .. ")", function()
  it("never writes while another worker holds the lock, even when its network goes silent", function()
    testing.with_server({ tick_ms = 500, min_session_ms = 1000 }, function(zk)
      local dir = (testing.sh("mktemp -d"):gsub("%s+$", ""))
      finally(function() os.execute("rm -rf " .. testing.shq(dir)) end)
      local nets, workers = {}, {}
      for i = 1, 2 do
        nets[i] = testing.proxy(zk.hosts)
        workers[i] = testing.worker{ script = HERE .. "/worker.lua", args = {
          APP, nets[i].hosts, ("%s/w%d.log"):format(dir, i), "w" .. i, "/jobs/report", 18, 13 } }
      end
      -- whoever writes first holds the lock (for a 13 s job): cut it off silently for longer
      -- than its session, so the lock goes to the other worker well within that job
      local first = testing.eventually(function()
        for _, ev in ipairs(check.load(dir).events) do
          if ev.ev == "write" then return ev end
        end
      end, 20, { what = "a first write" })
      local holder = tonumber(first.p:match("%d+"))
      nets[holder]:blackhole(7)
      testing.sleep(7)
      nets[holder]:heal()
      for i, w in ipairs(workers) do
        assert.are.equal(0, w:wait(60), "worker " .. i .. ": " .. w:output())
      end

      local holds = check.spans(check.load(dir), "write")    -- one hold per worker and token
      local ok, violation = check.mutex(holds)
      assert(ok, violation)
      local tokens = {}
      for _, ev in ipairs(holds.events) do if ev.ev == "acquire" then tokens[ev.f.token] = true end end
      assert.is_not_nil(next(tokens, next(tokens)), "the lock never changed hands")
    end)
  end)
end)
