-- Request handlers of the OpenResty benchmark (bench/drivers/openresty_bench.lua, nginx.conf.in
-- next to this file). Every location does the same work (a per-worker count and a short body);
-- /lock and /shared do it between a zklock mutex's acquire and release.
local zngx = require("zklock.adapters.openresty")

local M = {}
local cfg = {}
local served = 0

-- init_by_lua (master): settings, inherited by every worker
function M.config(t)
  cfg = t
end

function M.init_worker()
  -- busy: the pump's period while operations are pending when it polls; wakeup: "fd" or "poll"
  -- (nil: the adapter's defaults)
  local c, err = zngx.start(cfg.hosts, { session_timeout = 10 }, { busy_interval = cfg.busy, wakeup = cfg.wakeup })
  if not c then ngx.log(ngx.ERR, "zklock: start failed: ", err) end
end

local function work()
  served = served + 1
  ngx.say("ok ", served)
end

function M.free()
  work()
end

local function locked(path)
  local m = zngx.client():mutex(path) -- one lock object per request, as the adapter asks
  local ok, err = m:acquire(30)
  if not ok then
    ngx.status = 503
    ngx.say("acquire: ", err)
    return
  end
  local done, werr = pcall(work)
  local rok, rerr = m:release()
  if not done then error(werr) end
  if not rok then ngx.log(ngx.ERR, "release: ", rerr) end
end

-- the connection's serial number is unique across the workers (nginx counts connections in
-- shared memory): one uncontended mutex per client connection
function M.lock()
  locked(cfg.base .. "/c" .. ngx.var.connection)
end

function M.shared()
  locked(cfg.base .. "/one")
end

function M.ready()
  local c = zngx.client()
  if c and c.state == "CONNECTED" then
    ngx.say("ready")
  else
    ngx.status = 503
    ngx.say(c and c.state or "no client")
  end
end

return M
