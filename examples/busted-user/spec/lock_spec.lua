-- A user's own spec against an installed zklock: docs/testing.md's "Testing your own code with busted"
-- runs it (cd examples/busted-user, then the recipe's commands); so does CI, on the rock it builds.
local zklock = require("zklock")
local testing = require("zklock.testing")
local jobs = require("jobs")

describe("jobs.run", function()
  local zk, a, b

  setup(function()
    zk = testing.server()                                  -- a real ZooKeeper on 127.0.0.1
    a = assert(zklock.connect(zk.hosts, { identity = "worker-a" }))
    b = assert(zklock.connect(zk.hosts, { identity = "worker-b" }))
  end)

  teardown(function()
    if a then a:close() end
    if b then b:close() end
    if zk then zk:stop() end
  end)

  it("runs the job under the lock and returns its result", function()
    local held
    local result = jobs.run(a, "report", function(token)
      held = a:mutex("/jobs/report"):participants()[1]
      assert.is_number(token)
      return "done"
    end)
    assert.are.equal("done", result)
    assert.are.equal("worker-a", held.data)                 -- worker-a held the lock meanwhile
  end)

  it("keeps a second worker out while the first one runs", function()
    local inner = { jobs.run(a, "report", function()
      return jobs.run(b, "report", function() return "ran twice at once" end, 0.5)
    end) }
    assert.are.same({ nil, "ETIMEDOUT" }, { inner[1], inner[3] })
  end)
end)
