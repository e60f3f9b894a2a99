-- examples/kit/app/writer.lua: the application code under test in examples/kit/spec/writer_spec.lua.
-- A worker takes the lock of a job and writes its output while it holds the lock. The contract
-- of a ZooKeeper lock: a holder must stop writing as soon as its lock hears SUSPENDED (the
-- connection is gone; the session, and with it the lock, may expire and go to someone else).
local M = {}

-- run(client, opts): until opts.seconds have passed: take the lock opts.path, then write
-- (opts.write(token, n)) every opts.every seconds for opts.job_seconds, release, repeat.
function M.run(client, opts)
  local m = client:mutex(opts.path)
  local stop
  m:on_lost(function(state)
    if state == "SUSPENDED" or state == "LOST" then stop = true end   -- stop writing at once
  end)
  local deadline = opts.clock() + opts.seconds
  while opts.clock() < deadline do
    if m:acquire(1) then
      stop = false
      local token, n = m:token(), 0
      local job_end = opts.clock() + opts.job_seconds
      while opts.clock() < job_end and not stop and m:is_held() do
        n = n + 1
        opts.write(token, n)
        client:sleep(opts.every)
      end
      if m:is_held() then m:release() end
    end
    client:sleep(opts.every)
  end
end

return M
