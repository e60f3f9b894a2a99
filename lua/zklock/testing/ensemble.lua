-- zklock.testing.ensemble: n ZooKeeper servers (QuorumPeerMain) on loopback ports, one quorum;
-- each node is a zklock.testing.servers Server.
--   ensemble(opts) -> Ensemble with hosts, nodes[i], leader(), wait_quorum(), running(), stop()
--
-- Partitions between members (opts.partitions = true). Every member gets a zoo.cfg of its own:
-- its own server line names its real quorum and election ports, and each other member's line
-- names a link of the kit: one fault proxy (zklock.testing.net) per ordered pair i -> j, with
-- two listeners on 127.0.0.1 forwarding to j's quorum and election ports. So whatever i sends to
-- j (the learner's connection to its leader, leader-election messages) passes link i -> j, and
-- cutting both links of a pair parts the two members; no root, no firewall, loopback only.
-- One detail keeps every path on a link: a member that receives an election connection from a
-- member with a lower id closes it and connects back to the address the other member wrote in its
-- handshake (its real election port). The election listener of link i -> j therefore rewrites
-- that address to link j -> i's election listener (proxy.py, "HELLO"). Reconfig stays disabled
-- (ZooKeeper's default), so no member adopts another member's view of the addresses.
--   ens:partition(group, ... [, opts])  members in different groups cannot talk; members named
--                                       in no group form one more group together
--   ens:isolate(i [, opts])             member i cut from every other member
--   ens:isolate_leader([opts])          the leader isolated -> its index | nil, err
--   ens:heal()                          every link passes again
--   opts: seconds (testing.config.net_fault_max = 120: each link heals by itself after that long
--   even if this process is blocked), how = "cut" (connections closed, new ones refused: the
--   members notice at once) | "blackhole" (silence: they notice by their own timeouts).
local shell = require("zklock.testing.shell")
local registry = require("zklock.testing.registry")
local servers = require("zklock.testing.servers")

local shq, execute, read_file, write_file = shell.shq, shell.execute, shell.read_file, shell._write_file
local now, sleep, mktemp, remove_tree = shell.now, shell.sleep, shell.mktemp, shell.remove_tree
local pick_ports = require("zklock.testing.ports").free_ports
local config = require("zklock.testing.config")
local net = require("zklock.testing.net")
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

---------------------------------------------------------------- partitions

local function zerr(fname, n, what, got)
  error(("zklock.testing: ens:%s(): bad argument #%d: expected %s, got %s"):format(fname, n, what,
    type(got) == "string" and ("%q"):format(got) or tostring(got)), 4)
end

function Ensemble:_need_links(fname)
  if not self.links then
    error(("zklock.testing: ens:%s(): this ensemble has no links between its members; start it "
      .. "with testing.ensemble{ partitions = true }"):format(fname), 3)
  end
end

local function fault_opts(fname, n, opts)
  if opts == nil then opts = {} end
  if type(opts) == "number" then opts = { seconds = opts } end
  if type(opts) ~= "table" then zerr(fname, n, "an options table { seconds =, how = } or nil", opts) end
  local seconds = opts.seconds or config.net_fault_max or 120
  if type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0 then
    zerr(fname, n, "opts.seconds, a positive number", opts.seconds)
  end
  local how = opts.how or "cut"
  if how ~= "cut" and how ~= "blackhole" then zerr(fname, n, 'opts.how, "cut" or "blackhole"', opts.how) end
  return seconds, how
end

-- Post one command list to many links at once, then wait (bounded) until each has applied its last.
local function apply_links(self, cmds_for)
  local waits = {}
  for i = 1, self.n do
    for j = 1, self.n do
      local cmds = i ~= j and cmds_for(i, j)
      if cmds then
        local link = self.links[i][j]
        local seq
        for _, c in ipairs(cmds) do seq = link:post(c) end
        waits[#waits + 1] = { link, seq, cmds[#cmds], i, j }
      end
    end
  end
  for _, w in ipairs(waits) do
    if not w[1]:wait_ack(w[2], 10) then
      error(("zklock.testing: the link %d -> %d did not apply '%s' in time (its proxy is %s)"):format(
        w[4], w[5], w[3], w[1]:alive() and "alive" or "gone"), 3)
    end
  end
end

function Ensemble:_partition(fname, groups, opts)
  self:_need_links(fname)
  local seconds, how = fault_opts(fname, #groups + 1, opts)
  local side = {}
  for g, group in ipairs(groups) do
    if type(group) ~= "table" or #group == 0 then
      zerr(fname, g, "a group: a non-empty list of member indexes", group)
    end
    for _, i in ipairs(group) do
      if type(i) ~= "number" or i ~= math.floor(i) or i < 1 or i > self.n then
        zerr(fname, g, ("member indexes in 1..%d"):format(self.n), i)
      end
      if side[i] then zerr(fname, g, "each member in one group at most", ("member %d twice"):format(i)) end
      side[i] = g
    end
  end
  local rest = #groups + 1
  local shown = {}
  for g, group in ipairs(groups) do
    local copy = {}
    for k, i in ipairs(group) do copy[k] = i end
    table.sort(copy)
    shown[g] = copy
  end
  local others = {}
  for i = 1, self.n do
    if not side[i] then side[i] = rest; others[#others + 1] = i end
  end
  if #others > 0 then shown[#shown + 1] = others end
  local bound = ("heal_after %.3f"):format(seconds)
  apply_links(self, function(i, j)
    if side[i] ~= side[j] then
      self.blocked[i][j] = how
      if how == "cut" then return { bound, "new refuse", "cut" } end
      return { bound, "blackhole" }
    elseif self.blocked[i][j] then
      self.blocked[i][j] = nil
      return { "heal" }
    end
  end)
  self.groups = #shown > 1 and shown or nil
  return true
end

function Ensemble:partition(...)
  local args = { ... }
  local opts
  local last = args[#args]
  if type(last) == "number" or (type(last) == "table" and last[1] == nil and next(last) ~= nil) then
    opts = table.remove(args)
  end
  if #args == 0 then zerr("partition", 1, "at least one group of member indexes", nil) end
  return self:_partition("partition", args, opts)
end

function Ensemble:isolate(i, opts)
  self:_need_links("isolate")
  if type(i) ~= "number" or i ~= math.floor(i) or i < 1 or i > self.n then
    zerr("isolate", 1, ("a member index in 1..%d"):format(self.n), i)
  end
  return self:_partition("isolate", { { i } }, opts)
end

function Ensemble:isolate_leader(opts)
  self:_need_links("isolate_leader")
  fault_opts("isolate_leader", 1, opts)
  local timeout = type(opts) == "table" and opts.timeout or 30
  local i, err = self:leader(timeout)
  if not i then return nil, err end
  self:_partition("isolate_leader", { { i } }, opts)
  return i
end

function Ensemble:heal()
  if not self.links then return true end
  apply_links(self, function(i, j)
    if self.blocked[i][j] then
      self.blocked[i][j] = nil
      return { "heal" }
    end
  end)
  self.groups = nil
  return true
end

function Ensemble:_stop_links()
  for i = 1, self.n do
    for j = 1, self.n do
      local link = self.links and self.links[i] and self.links[i][j]
      if link then pcall(link.stop, link) end
    end
  end
end

function Ensemble:stop()
  -- terminate all at once, then wait for each
  for _, node in ipairs(self.nodes) do node:_signal("TERM"); node:_signal("CONT") end
  for _, node in ipairs(self.nodes) do node:stop({ keep_dir = true }) end
  self:_stop_links()
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
  if o.partitions ~= nil and type(o.partitions) ~= "boolean" then
    error("zklock.testing: ensemble option partitions must be a boolean, got " .. tostring(o.partitions), 2)
  end
  if o.partitions then
    -- a member that was cut off backs off its election messages up to this interval (ZooKeeper's
    -- default is 60 s); kept short so a healed member rejoins within seconds (opts.jvm_opts
    -- come later on the command line and win)
    local jvm = { "-Dzookeeper.fastleader.maxNotificationInterval=2000" }
    for _, a in ipairs(o.jvm_opts or {}) do jvm[#jvm + 1] = a end
    o.jvm_opts = jvm
  end
  local last
  for _ = 1, 3 do
    local self, err, why = M._start(o, n)
    if self then return self end
    last = err
    if why ~= "bind" then break end
  end
  error(last, 2)
end

-- One attempt at starting the ensemble -> self | nil, message, why ("bind": try other ports)
function M._start(o, n)
  do
    local t0 = now()
    local links = o.partitions and n > 1
    local ports = pick_ports(3 * n + (links and 2 * n * (n - 1) or 0))
    local root = mktemp("zklock-zk-ens")
    local self = setmetatable({ n = n, dir = root, nodes = {}, opts = o }, Ensemble)
    local quorum, hosts = {}, {}
    for i = 1, n do
      quorum[i] = ("server.%d=127.0.0.1:%d:%d"):format(i, ports[3 * i - 1], ports[3 * i])
      hosts[i] = "127.0.0.1:" .. ports[3 * i - 2]
    end
    self.hosts = table.concat(hosts, ",")
    register(self)
    local views = {}                    -- views[i]: the server lines in member i's zoo.cfg
    for i = 1, n do views[i] = quorum end
    local link_err
    if links then
      -- link i -> j listens on lq[i][j] (to j's quorum port) and le[i][j] (to j's election port)
      local lq, le, k = {}, {}, 3 * n
      for i = 1, n do
        lq[i], le[i] = {}, {}
        for j = 1, n do
          if i ~= j then lq[i][j], le[i][j], k = ports[k + 1], ports[k + 2], k + 2 end
        end
      end
      self.links, self.blocked = {}, {}
      for i = 1, n do
        self.links[i], self.blocked[i], views[i] = {}, {}, {}
        for j = 1, n do
          if i == j then
            views[i][j] = quorum[i]
          else
            views[i][j] = ("server.%d=127.0.0.1:%d:%d"):format(j, lq[i][j], le[i][j])
            local ok, link = pcall(net.proxy, ("127.0.0.1:%d"):format(ports[3 * j - 1]), {
              port = lq[i][j], max_seconds = 86400,
              routes = { { port = le[i][j], target = ("127.0.0.1:%d"):format(ports[3 * j]),
                           hello = ("127.0.0.1:%d"):format(le[j][i]) } },
            })
            if not ok then link_err = link break end
            self.links[i][j] = link
          end
        end
        if link_err then break end
      end
    end
    if link_err then
      self:stop()
      return nil, "zklock.testing: ensemble start: a link between members did not start: "
        .. tostring(link_err), "bind"
    end
    for i = 1, n do
      local dir = root .. "/node" .. i
      local node = setmetatable({
        opts = o, main = QUORUM_MAIN, owns_dir = false, quorum = views[i], index = i, ensemble = self,
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
    local msg = self.nodes[bad]:_fail("ensemble start (node " .. bad .. ")", reason)
    for i = 1, n do self.nodes[i]:kill() end
    self:stop()
    return nil, msg, why
  end
end
M.Ensemble = Ensemble

return M
