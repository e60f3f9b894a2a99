-- zklock.testing.ensemble: n ZooKeeper servers (QuorumPeerMain) on loopback ports, one quorum;
-- each node is a zklock.testing.servers Server.
--   ensemble(opts) -> Ensemble with hosts, nodes[i], leader(), wait_quorum(), running(), stop()
local shell = require("zklock.testing.shell")
local registry = require("zklock.testing.registry")
local servers = require("zklock.testing.servers")

local shq, execute, read_file, write_file = shell.shq, shell.execute, shell.read_file, shell._write_file
local now, sleep, mktemp, remove_tree = shell.now, shell.sleep, shell.mktemp, shell.remove_tree
local pick_ports = require("zklock.testing.ports").free_ports
local register, unregister = registry.register, registry.unregister
local Server, defaults = servers.Server, servers.defaults
local check_install, write_config = servers.check_install, servers.write_config
local QUORUM_MAIN = servers.QUORUM_MAIN

local M = {}
---------------------------------------------------------------- ensembles

local Ensemble = {}
Ensemble.__index = Ensemble

function Ensemble:_live_nodes()
  local out = {}
  for i, node in ipairs(self.nodes) do
    if not node.paused and node:running() then out[#out + 1] = i end
  end
  return out
end

-- one round: index of the single leader if a quorum serves, plus whether all live nodes serve
function Ensemble:_poll()
  local leaders, serving, live = {}, 0, self:_live_nodes()
  for _, i in ipairs(live) do
    local m = self.nodes[i]:mode(1)
    if m == "leader" then leaders[#leaders + 1] = i end
    if m == "leader" or m == "follower" or m == "standalone" then serving = serving + 1 end
  end
  local quorum = math.floor(#self.nodes / 2) + 1
  if #leaders == 1 and serving >= quorum then
    return leaders[1], serving == #live
  end
  if #self.nodes == 1 and serving == 1 then return 1, true end
  return nil, false, ("%d leader(s), %d of %d nodes serving"):format(#leaders, serving, #self.nodes)
end

function Ensemble:leader(timeout)
  local deadline = now() + (timeout or 10)
  local why
  while true do
    local i, _, w = self:_poll()
    if i then return i end
    why = w
    if now() > deadline then return nil, "no leader: " .. tostring(why) end
    sleep(0.1)
  end
end

function Ensemble:wait_quorum(timeout)
  local deadline = now() + (timeout or 30)
  local why
  while true do
    local i, all, w = self:_poll()
    if i and all then return i end
    why = w or "not every running node serves yet"
    if now() > deadline then return nil, "no quorum: " .. tostring(why) end
    sleep(0.1)
  end
end

function Ensemble:running()
  for _, node in ipairs(self.nodes) do
    if node:running() then return true end
  end
  return false
end

function Ensemble:stop()
  -- terminate all at once, then wait for each
  for _, node in ipairs(self.nodes) do node:_signal("TERM"); node:_signal("CONT") end
  for _, node in ipairs(self.nodes) do node:stop({ keep_dir = true }) end
  if not self.removed then
    remove_tree(self.dir)
    self.removed = true
    for _, node in ipairs(self.nodes) do node.removed = true end
  end
  unregister(self)
  return true
end

function M.ensemble(opts)
  check_install()
  local o = defaults(opts, 30)
  local n = o.n or 3
  if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then
    error("zklock.testing: ensemble option n must be a positive integer, got " .. tostring(n), 2)
  end
  local last
  for _ = 1, 3 do
    local t0 = now()
    local ports = pick_ports(3 * n)
    local root = mktemp("zklock-zk-ens")
    local self = setmetatable({ n = n, dir = root, nodes = {}, opts = o }, Ensemble)
    local quorum, hosts = {}, {}
    for i = 1, n do
      quorum[i] = ("server.%d=127.0.0.1:%d:%d"):format(i, ports[3 * i - 1], ports[3 * i])
      hosts[i] = "127.0.0.1:" .. ports[3 * i - 2]
    end
    self.hosts = table.concat(hosts, ",")
    register(self)
    for i = 1, n do
      local dir = root .. "/node" .. i
      local node = setmetatable({
        opts = o, main = QUORUM_MAIN, owns_dir = false, quorum = quorum, index = i, ensemble = self,
        dir = dir, data_dir = dir .. "/data", cfg = dir .. "/zoo.cfg", log = dir .. "/server.log",
        port = ports[3 * i - 2], hosts = hosts[i],
      }, Server)
      execute("mkdir -p " .. shq(node.data_dir))
      write_file(node.data_dir .. "/myid", i .. "\n")
      write_config(node)
      self.nodes[i] = node
    end
    for i = 1, n do self.nodes[i]:_spawn() end
    local deadline = t0 + o.timeout
    -- a node whose quorum or election port is taken keeps running and logs a BindException
    local function bind_failure()
      for i = 1, n do
        local log = read_file(self.nodes[i].log) or ""
        if log:find("Address already in use", 1, true) then return i end
      end
    end
    local ok, reason, why, bad = true, nil, nil, nil
    for i = 1, n do
      ok, reason, why = self.nodes[i]:_wait_ready(deadline)
      if not ok then bad = i break end
    end
    if ok then
      local leader, err = self:wait_quorum(deadline - now())
      bad = bind_failure()
      if leader and not bad then
        self.start_time = now() - t0
        return self
      end
      if bad then
        reason, why = "a quorum or election port is already in use", "bind"
      else
        reason, bad = err, 1
      end
    end
    last = self.nodes[bad]:_fail("ensemble start (node " .. bad .. ")", reason)
    for i = 1, n do self.nodes[i]:kill() end
    self:stop()
    if why ~= "bind" then break end
  end
  error(last, 2)
end
M.Ensemble = Ensemble

return M
