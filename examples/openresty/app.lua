-- Request handlers of the OpenResty example (see nginx.conf next to this file).
local zngx = require("zklock.adapters.openresty")
local metrics = require("zklock.metrics")

local M = {}
local counter_file

function M.init_worker(hosts, file)
  counter_file = file
  -- metrics into the shared dict: every worker adds to the same numbers
  local client, err = zngx.start(hosts, { session_timeout = 10,
                                          metrics = metrics.shared_dict(ngx.shared.zklock_metrics) })
  if not client then ngx.log(ngx.ERR, "zklock: ", err) end
end

local function bump()
  local f = io.open(counter_file, "r")
  local v = f and tonumber(f:read("*a")) or 0
  if f then f:close() end
  ngx.sleep(0.01) -- a yield: other requests of this worker run meanwhile, the lock keeps them out
  f = assert(io.open(counter_file, "w"))
  f:write(tostring(v + 1))
  f:close()
  return v + 1
end

function M.counter()
  -- one object per request; `metric` names it in the metrics (never the raw path by default)
  local m = zngx.client():mutex("/zklock-examples/openresty/counter", { metric = "counter" })
  local ok, err = m:acquire(5) -- suspends this request only
  if not ok then
    ngx.status = 503
    ngx.say(err)
    return
  end
  local token = m:token()
  local done, value = pcall(bump) -- release on every path
  m:release()
  if not done then error(value) end
  ngx.say("counter ", value, "  worker ", ngx.worker.pid(), "  fencing token ", token)
end

function M.metrics()
  ngx.header["Content-Type"] = "text/plain; version=0.0.4"
  ngx.print(metrics.shared_dict(ngx.shared.zklock_metrics):render())
end

return M
