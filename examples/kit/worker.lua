-- examples/kit/worker.lua: the worker process of the example specs (started with testing.worker).
-- It runs one of the app modules against a real server, recording what the app does (each write
-- or tick, with its fencing token) in its own log file for zklock.testing.check.
--   worker.lua MODULE HOSTS LOG NAME LOCK_PATH SECONDS JOB_SECONDS
local zklock = require("zklock")
local testing = require("zklock.testing")
local core = require("zklock.core")

local module, hosts, log, name, path, seconds, job_seconds = ...
local app = require(module)
local rec = testing.check.recorder(log, name)

local c = assert(zklock.connect(hosts, { session_timeout = 4, identity = name }))
local running = true
-- the test process gone (a failed or killed test run): exit too
testing.exit_with_parent(c, tonumber(os.getenv("ZKLOCK_TEST_PARENT")), 0.5, function() return running end)
rec:log("connected", "-")

local function record(event)
  return function(token, n) rec:log(event, path, { token = token, n = n }) end
end

c:spawn(function()
  app.run(c, {
    path = path, seconds = tonumber(seconds), job_seconds = tonumber(job_seconds), every = 0.05,
    clock = function() return core.now() / 1000 end,
    write = record("write"), tick = record("tick"),
  })
  running = false
end)
assert(c:run(tonumber(seconds) + 60))
rec:log("done", "-")
rec:close()
c:close()
os.exit(0)
