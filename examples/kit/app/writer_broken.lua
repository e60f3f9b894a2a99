-- examples/kit/app/writer_broken.lua: the same worker as writer.lua with the classic bug: it checks
-- the lock once, when it gets it, and then writes for the whole job, whatever the lock hears.
-- examples/kit/spec/writer_spec.lua fails with it (spec/94-kit-examples_spec.lua shows that).
local M = {}

function M.run(client, opts)
  local m = client:mutex(opts.path)
  local deadline = opts.clock() + opts.seconds
  while opts.clock() < deadline do
    if m:acquire(1) then
      local token, n = m:token(), 0
      local job_end = opts.clock() + opts.job_seconds
      while opts.clock() < job_end do          -- BUG: never looks at the lock again
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
