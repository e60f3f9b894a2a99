-- examples/kit/app/leader_broken.lua: leader.lua with the classic bug: once elected, it runs the
-- job until the end and never asks whether it is still the leader. examples/kit/spec/leader_spec.lua
-- fails with it (spec/94-kit-examples_spec.lua shows that).
local M = {}

function M.run(client, opts)
  local m = client:mutex(opts.path)
  local deadline = opts.clock() + opts.seconds
  while opts.clock() < deadline do
    if m:acquire(1) then
      local token, n = m:token(), 0
      while opts.clock() < deadline do         -- BUG: leads until the end, whatever happens
        n = n + 1
        opts.tick(token, n)
        client:sleep(opts.every)
      end
      if m:is_held() then m:release() end
    end
  end
end

return M
