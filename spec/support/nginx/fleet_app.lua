-- The job of the nginx used by spec/64-openresty-fleet_spec.lua (see fleet.conf.in): every
-- worker of every instance calls zngx.one_worker on one path; the job appends its start, a beat
-- every `beat` seconds and its stop to one shared log (O_APPEND: the file's order is the order
-- of the writes across all processes), each line with its fencing token and pid:
--   start <token> <pid> <instance> <ngx.now()>
--   beat <token> <pid>
--   stop <token> <pid> <reason> <ngx.now()>
-- A stubborn job (STUBBORN=yes) ignores stopping() and only sleeps: the supervisor must kill it.
local zngx = require("zklock.adapters.openresty")

local M = {}
local cfg = {}
local handle

function M.config(t)
  cfg = t
end

local function append(line)
  local f = io.open(cfg.log, "a")
  if not f then
    ngx.log(ngx.ERR, "fleet_app: cannot open ", cfg.log)
    return
  end
  f:setvbuf("no")
  f:write(line, "\n")
  f:close()
end

local function job(ctx)
  ngx.update_time()
  append(("start %s %d %s %.3f"):format(tostring(ctx.token), ctx.pid, cfg.instance, ngx.now()))
  if cfg.stubborn then
    while true do
      ngx.sleep(cfg.beat)
      append(("beat %s %d"):format(tostring(ctx.token), ctx.pid))
    end
  end
  while true do
    local ok, why = ctx:sleep(cfg.beat)
    if not ok then
      ngx.update_time()
      append(("stop %s %d %s %.3f"):format(tostring(ctx.token), ctx.pid, why, ngx.now()))
      return
    end
    append(("beat %s %d"):format(tostring(ctx.token), ctx.pid))
  end
end

function M.init_worker()
  local err
  handle, err = zngx.one_worker(cfg.path, job, {
    hosts = cfg.hosts, session_timeout = cfg.session_timeout, stop_grace = 2,
    id = cfg.instance .. "/" .. ngx.worker.pid(),
  })
  if not handle then ngx.log(ngx.ERR, "fleet_app: one_worker failed: ", err) end
end

function M.state()
  if handle and handle:running() then
    ngx.say("running ", ngx.worker.pid(), " ", tostring(handle:token()))
  else
    ngx.say("idle ", ngx.worker.pid())
  end
end

return M
