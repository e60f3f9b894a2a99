-- Request handlers of the nginx used by spec/61-openresty_spec.lua (see nginx.conf.in).
local zngx = require("zklock.adapters.openresty")

local M = {}
local cfg = {}

-- init_by_lua (master): settings, inherited by every worker
function M.config(t)
  cfg = t
end

function M.init_worker()
  local c, err = zngx.start(cfg.hosts, { session_timeout = 10, identity = "nginx-" .. ngx.worker.pid() })
  if not c then ngx.log(ngx.ERR, "zklock: start failed: ", err) end
end

local function read_counter()
  local f = io.open(cfg.counter, "r")
  if not f then return 0 end
  local v = tonumber(f:read("*a")) or 0
  f:close()
  return v
end

local function write_counter(v)
  local f = assert(io.open(cfg.counter .. ".tmp", "w"))
  f:write(tostring(v))
  f:close()
  assert(os.rename(cfg.counter .. ".tmp", cfg.counter))
end

-- GET /locked[?hold=seconds] -> "<new value> <worker pid> <ms waited>"
function M.locked()
  local client = zngx.client()
  local m = client:mutex(cfg.lock)
  ngx.update_time()
  local t0 = ngx.now()
  local ok, err = m:acquire(60)
  ngx.update_time()
  local waited = ngx.now() - t0
  if not ok then
    ngx.status = 503
    ngx.say("ERR ", err)
    return
  end
  local v = read_counter()
  ngx.sleep(0.002) -- a yield inside the critical section: other requests of this worker run
  local hold = tonumber(ngx.var.arg_hold)
  if hold then ngx.sleep(hold) end
  write_counter(v + 1)
  local rok, rerr = m:release()
  if not rok then
    ngx.status = 500
    ngx.say("ERR release ", rerr)
    return
  end
  ngx.say(v + 1, " ", ngx.worker.pid(), " ", math.floor(waited * 1000))
end

function M.locked_error()
  local m = zngx.client():mutex(cfg.lock)
  assert(m:acquire(60))
  error("failure inside the critical section")
end

function M.state()
  local c = zngx.client()
  if not c then
    ngx.say("none ", ngx.worker.pid())
    return
  end
  ngx.say(c.state, " ", ngx.worker.pid(), " ", c.state ~= "CLOSED" and (c:session() or "-") or "-")
end

return M
