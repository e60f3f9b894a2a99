-- Service discovery from a shared cache (see upstreams.conf next to this file): every worker
-- calls zngx.shared_cache; one of them (the keeper) follows the ZooKeeper directory of backends,
-- one child per backend named "<host>:<port>", and publishes it in lua_shared_dict `services`;
-- every worker reads the set from there.
local zngx = require("zklock.adapters.openresty")

local M = {}
local cfg = {}
local services -- this worker's reader (and its part in the keeper election)

function M.config(t)
  cfg = t
end

function M.init_worker()
  local err
  services, err = zngx.shared_cache("services", cfg.services, {
    hosts = cfg.hosts,
    depth = 1,                     -- the directory and its children (their data: a backend's notes)
    election = cfg.election,
    session_timeout = cfg.session_timeout,
  })
  if not services then ngx.log(ngx.ERR, "shared_cache: ", err) end
end

-- the backends, sorted | nil, msg
local function backends()
  if not services then return nil, "no shared cache in this worker" end
  return services:children(cfg.services)
end

function M.list()
  local list, err, code = backends()
  if not list then
    if code == "ZNONODE" then list = {} else
      ngx.status = 503
      ngx.say("error ", err)
      return
    end
  end
  local info = services:info() or {}
  ngx.say(ngx.worker.pid(), " ", services:version(), " ", info.pid or 0, " ", #list)
  for _, addr in ipairs(list) do ngx.say(addr) end
end

-- one backend's node: "<worker pid> <czxid> <mzxid> <version> <data>", or 404
function M.node()
  local data, stat = services:get(cfg.services .. "/" .. (ngx.var.arg_addr or ""))
  if not data then return ngx.exit(404) end
  ngx.say(ngx.worker.pid(), " ", stat.czxid, " ", stat.mzxid, " ", stat.version, " ", data)
end

function M.keeper()
  ngx.say(services and services:keeping() and "keeper " or "reader ", ngx.worker.pid())
end

-- access_by_lua: 503 when there is no backend to pick
function M.any()
  local list = backends()
  if not list or #list == 0 then return ngx.exit(503) end
end

-- balancer_by_lua: round-robin over the current set (per worker), from memory
local turn = 0
function M.balance()
  local balancer = require("ngx.balancer")
  local list = backends()
  if not list or #list == 0 then return ngx.exit(ngx.ERROR) end -- 500 (the set emptied since access)
  turn = turn % #list + 1
  local host, port = list[turn]:match("^(.+):(%d+)$")
  if not host then return ngx.exit(ngx.ERROR) end
  local ok, err = balancer.set_current_peer(host, tonumber(port))
  if not ok then ngx.log(ngx.ERR, "set_current_peer ", list[turn], ": ", err) return ngx.exit(ngx.ERROR) end
end

return M
