-- jobs.lua: the "user code" of examples/busted-user: run a job while holding a zklock mutex, so
-- that two workers never run the same job at once.
local M = {}

-- run(client, name, fn [, timeout]) -> fn(token)'s results, or nil, "CODE: message", "CODE" if
-- the lock was not had within timeout seconds (default 5). The lock is released however fn ends.
function M.run(client, name, fn, timeout)
  local m = client:mutex("/jobs/" .. name)
  local ok, err, code = m:acquire(timeout or 5)
  if not ok then return nil, err, code end
  local res = table.pack(pcall(fn, m:token()))
  m:release()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

return M
