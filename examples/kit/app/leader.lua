-- examples/kit/app/leader.lua: the application code under test in examples/kit/spec/leader_spec.lua.
-- A leader-only job: several processes campaign for leadership (the holder of the mutex opts.path
-- is the leader) and only the leader runs the job's ticks. A leader steps down as soon as its lock
-- hears SUSPENDED or LOST, and checks is_held() before every tick (after a long pause of the
-- process, the next call into zklock reports the loss), then campaigns again.
local M = {}

-- run(client, opts): for opts.seconds: campaign; while leader, opts.tick(token, n) every
-- opts.every seconds.
function M.run(client, opts)
  local m = client:mutex(opts.path)
  local down
  m:on_lost(function(state)
    if state == "SUSPENDED" or state == "LOST" then down = true end
  end)
  local deadline = opts.clock() + opts.seconds
  while opts.clock() < deadline do
    if m:acquire(1) then
      down = false
      local token, n = m:token(), 0
      while opts.clock() < deadline and not down and m:is_held() do
        n = n + 1
        opts.tick(token, n)
        client:sleep(opts.every)
      end
      if m:is_held() then m:release() end
    end
  end
end

return M
