-- The job of the fleet example (see fleet.conf next to this file): once a second, append a line
-- to a shared report file, fenced with the job's token, in exactly one worker of all instances.
local zngx = require("zklock.adapters.openresty")

local M = {}
local handle

-- Append `line` unless a newer holder already wrote (its token is larger): the fencing token
-- keeps a worker that was paused past its session from writing after its successor.
local function write_fenced(file, token, line)
  local f = io.open(file .. ".token", "r")
  local newest = f and tonumber(f:read("*l")) or 0
  if f then f:close() end
  if token < newest then return false end
  f = assert(io.open(file .. ".token", "w"))
  f:write(tostring(token), "\n")
  f:close()
  f = assert(io.open(file, "a"))
  f:write(line, "\n")
  f:close()
  return true
end

function M.init_worker(cfg)
  local err
  handle, err = zngx.one_worker("/zklock-examples/openresty/report", function(job)
    ngx.log(ngx.NOTICE, "report job: starting in worker ", job.pid, " with token ", job.token)
    local n = 0
    while true do
      local ok, why = job:sleep(1) -- returns early as soon as the job must stop
      if not ok then
        ngx.log(ngx.NOTICE, "report job: stopping (", why, ")")
        return
      end
      n = n + 1
      ngx.update_time()
      write_fenced(cfg.log, job.token, ("%s tick %d by %s worker %d, token %d")
        :format(ngx.localtime(), n, cfg.instance, job.pid, job.token))
    end
  end, { hosts = cfg.hosts, session_timeout = 5, id = cfg.instance .. "/" .. ngx.worker.pid() })
  if not handle then ngx.log(ngx.ERR, "one_worker: ", err) end
end

function M.status()
  if handle and handle:running() then
    ngx.say("worker ", ngx.worker.pid(), " runs the job (token ", handle:token(), ")")
  else
    ngx.say("worker ", ngx.worker.pid(), " does not run the job")
  end
end

return M
