-- zklock.testing.net: per-client network faults. A fault proxy (proxy.py next to this file, a
-- python3 stdlib program; python3 is in Debian's base system) listens on a free loopback port and
-- forwards to one server; a client connected to net.hosts instead of the server's address can
-- be cut off, delayed, made to lose replies or silenced, alone, while every other client goes on.
--
--   local net = testing.proxy(zk.hosts)          -- or require("zklock.testing.net").proxy(...)
--   local c = zklock.connect(net.hosts, { session_timeout = 4 })
--   net:blackhole(10)                            -- silence for at most 10 s ...
--   net:heal()                                   -- ... or until healed
--
-- Faults (each applies to the connections open now and to the ones made later, until heal();
-- `seconds` bounds it: the proxy heals by itself after that long even if this process is blocked,
-- default testing.config.net_fault_max = 120):
--   net:cut([seconds])            close every connection and refuse new ones (a partition the
--                                 client notices at once: connection refused / reset)
--   net:blackhole([seconds])      forward nothing either way, close nothing, accept new
--                                 connections and swallow them (silence: the client notices only
--                                 by its own timeouts)
--   net:drop_replies([seconds])   requests still reach the server, replies never come back (the
--                                 unknown-outcome case)
--   net:delay(ms [, seconds])     every byte forwarded ms later, both ways (order kept)
--   net:delay_replies(ms [, seconds])  the same towards the client only: requests reach the
--                                 server at once, replies and pushes come back ms late (the
--                                 client's link stays up while what it hears gets old)
--   net:blackhole_after_push(seconds [, armed])
--                                 forward as usual until the server pushes a watch notification
--                                 to a client of this proxy; forward that frame, then blackhole
--                                 at once (silence both ways, no reset; a close by the server is
--                                 not passed on either) and heal by itself `seconds` later.
--                                 Waits for the push at most `armed` seconds (default
--                                 config.net_fault_max), then disarms; heal() disarms.
--                                 net:status().push_ms: when it fired (zklock.core.now() ms).
--   net:reset()                   close every connection once; reconnects pass (no heal needed)
--   net:heal()                    end every fault: broken connections are closed (the client
--                                 reconnects through a clean proxy), delay 0
-- Also: net:status() -> { open =, accepted =, c2s =, s2c =, c2s_dropped =, s2c_dropped =,
-- delay =, new = "pass"|"refuse"|"blackhole"|"drop", pushes =, armed =, push_silenced =,
-- push_ms =, closes_held =, ... }, net:alive(), net:stop() (idempotent),
-- net:send(cmd [, timeout [, pump]]) (a raw proxy command, see proxy.py). net.pump, if set, is
-- called as pump(0.01) while a command waits to be applied (so this process's clients go on).
-- Every proxy exits with the process that started it (and after opts.max_seconds), and
-- testing.stop_all() stops it.
local config = require("zklock.testing.config")
local shell = require("zklock.testing.shell")
local processes = require("zklock.testing.processes")
local registry = require("zklock.testing.registry")

local shq, sh, read_file, write_file = shell.shq, shell.sh, shell.read_file, shell._write_file
local now, sleep = shell.now, shell.sleep
local proc_stat, pid_alive = processes.proc_stat, processes.pid_alive

local M = {}

local function here()
  local src = debug.getinfo(1, "S").source
  local dir = src:match("^@(.*)/[^/]*$") or "."
  if dir:sub(1, 1) ~= "/" then dir = (sh("pwd"):gsub("%s+$", "")) .. "/" .. dir end
  return dir
end
M.script = here() .. "/proxy.py"

local function argerr(fname, n, what, got)
  error(("zklock.testing.%s: bad argument #%d: expected %s, got %s"):format(fname, n, what,
    type(got) == "string" and ("%q"):format(got) or tostring(got)), 3)
end

local function check_seconds(fname, n, v)
  if v ~= nil and (type(v) ~= "number" or v ~= v or v <= 0) then
    argerr(fname, n, "a positive number of seconds or nil", v)
  end
  return v or config.net_fault_max or 120
end

local Net = {}
Net.__index = Net
M.Net = Net

-- Start a proxy in front of `target` ("127.0.0.1:PORT"). opts.max_seconds (900): the proxy
-- exits after that long in any case; opts.start_timeout (30): seconds to wait for it to listen.
-- opts.port: listen on that port (default: any free one). opts.routes = { { port =, target =
-- [, hello = "127.0.0.1:PORT"] }, ... }: more listeners in the same process, each forwarding to
-- its own target and sharing the faults (net.ports[k + 1] is route k's port); `hello` rewrites
-- the address in a ZooKeeper election handshake (see proxy.py; the ensemble's partitions use it).
function M.proxy(target, opts)
  if type(target) ~= "string" or not target:match("^[%w%.%-]+:%d+$") then
    argerr("proxy", 1, "one server address \"HOST:PORT\" (for example zk.hosts)", target)
  end
  local host = target:match("^(.-):")
  if host ~= "127.0.0.1" and host ~= "localhost" then
    argerr("proxy", 1, "a loopback address (127.0.0.1:PORT)", target)
  end
  if opts ~= nil and type(opts) ~= "table" then argerr("proxy", 2, "an options table or nil", opts) end
  opts = opts or {}
  local max_seconds = opts.max_seconds or 900
  if type(max_seconds) ~= "number" or max_seconds <= 0 then
    argerr("proxy", 2, "opts.max_seconds, a positive number", max_seconds)
  end
  local function is_port(p) return type(p) == "number" and p >= 0 and p <= 65535 and p == math.floor(p) end
  if opts.port ~= nil and not is_port(opts.port) then argerr("proxy", 2, "opts.port, a TCP port number", opts.port) end
  if opts.routes ~= nil and type(opts.routes) ~= "table" then argerr("proxy", 2, "opts.routes, a list", opts.routes) end
  local route_args = {}
  for k, r in ipairs(opts.routes or {}) do
    local function loopback(a) return type(a) == "string" and a:match("^127%.0%.0%.1:%d+$") end
    if type(r) ~= "table" or not loopback(r.target) or (r.port ~= nil and not is_port(r.port))
      or (r.hello ~= nil and not loopback(r.hello)) then
      argerr("proxy", 2, ("opts.routes[%d] = { port = n, target = \"127.0.0.1:PORT\" [, hello = \"127.0.0.1:PORT\"] }")
        :format(k), r)
    end
    route_args[#route_args + 1] = " --route " .. shq(("%d,%s%s"):format(r.port or 0, r.target,
      r.hello and ("," .. r.hello) or ""))
  end
  if not processes.pid then error("zklock.testing.proxy: cannot tell this process's pid", 2) end
  local dir = shell.mktemp("zklock-zknet")
  local control = dir .. "/control"
  write_file(control, "")
  local log = dir .. "/proxy.log"
  local cmd = ("env -u LD_PRELOAD %s %s %d %s %s --parent %d --max-seconds %d%s"):format(
    shq(config.python or "python3"), shq(M.script), opts.port or 0, shq(target), shq(control), processes.pid,
    math.floor(max_seconds + 0.5), table.concat(route_args))
  local out = sh("( exec " .. cmd .. " ) >" .. shq(log) .. " 2>&1 </dev/null & echo $!")
  local pid = tonumber(out:match("(%d+)"))
  if not pid then error("zklock.testing.proxy: could not start " .. cmd, 2) end
  local _, start = proc_stat(pid)
  local self = setmetatable({ pid = pid, start = start, dir = dir, control = control, log = log,
                              seq = 0, target = target }, Net)
  local t0 = now()
  local deadline = t0 + (opts.start_timeout or 30)    -- generous: a loaded machine starts python slowly
  while true do
    local p = read_file(control .. ".port")
    local got = {}
    for port in (p or ""):gmatch("(%d+)\n") do got[#got + 1] = tonumber(port) end
    if #got == 1 + #route_args then
      self.port, self.ports = got[1], got
      break
    end
    local alive = pid_alive(pid, start)
    if not alive or now() > deadline then
      local text = read_file(log) or ""
      self:stop()
      error(("zklock.testing.proxy: the proxy did not start (%s after %.1f s; is python3 installed?):\n%s")
        :format(alive and "still starting" or "it exited", now() - t0, shell.tail(text, 20)), 2)
    end
    sleep(0.02)
  end
  self.hosts = "127.0.0.1:" .. self.port
  registry.register(self)
  return self
end

-- Send a raw command and wait (bounded) until the proxy has applied it.
function Net:send(cmd, timeout, pump)
  if self.stopped then error("zklock.testing.net: the proxy was stopped", 2) end
  self.seq = self.seq + 1
  write_file(self.control, ("%d %s\n"):format(self.seq, cmd), "a")
  local deadline = now() + (timeout or 5)
  pump = pump or self.pump
  while true do
    local ack = tonumber((read_file(self.control .. ".ack") or ""):match("%d+"))
    if ack and ack >= self.seq then return true end
    if not pid_alive(self.pid, self.start) then
      error("zklock.testing.net: the proxy died before applying '" .. cmd .. "'", 2)
    end
    if now() > deadline then error("zklock.testing.net: the proxy did not apply '" .. cmd .. "' in time", 2) end
    if pump then pump(0.01) else sleep(0.01) end
  end
end

-- Append a command without waiting -> its sequence number, for wait_ack() (several proxies can
-- then apply their commands together).
function Net:post(cmd)
  if self.stopped then error("zklock.testing.net: the proxy was stopped", 2) end
  self.seq = self.seq + 1
  write_file(self.control, ("%d %s\n"):format(self.seq, cmd), "a")
  return self.seq
end

-- Append a command that a background shell writes after `delay` seconds (for when this process
-- blocks meanwhile); -> its sequence number, for wait_ack().
function Net:send_later(cmd, delay)
  self.seq = self.seq + 1
  shell.execute(("(sleep %.3f; printf '%%d %%s\\n' %d %s >> %s) </dev/null >/dev/null 2>&1 &"):format(
    delay, self.seq, shq(cmd), shq(self.control)))
  return self.seq
end

function Net:wait_ack(seq, timeout, pump)
  local deadline = now() + (timeout or 5)
  pump = pump or self.pump
  while true do
    local ack = tonumber((read_file(self.control .. ".ack") or ""):match("%d+"))
    if ack and ack >= seq then return true end
    if now() > deadline then return false end
    if pump then pump(0.01) else sleep(0.01) end
  end
end

local function fault(self, fname, cmds, seconds)
  seconds = check_seconds(fname, 1, seconds)
  -- bound first: a fault that is applied always has its end scheduled
  self:send(("heal_after %.3f"):format(seconds))
  for _, c in ipairs(cmds) do self:send(c) end
  self.fault = fname
  return true
end

function Net:cut(seconds) return fault(self, "cut", { "new refuse", "cut" }, seconds) end
function Net:blackhole(seconds) return fault(self, "blackhole", { "blackhole" }, seconds) end
function Net:drop_replies(seconds) return fault(self, "drop_replies", { "new drop", "drop" }, seconds) end

function Net:blackhole_after_push(seconds, armed)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0 or seconds == math.huge then
    argerr("Net:blackhole_after_push", 1, "a positive number of seconds (how long the silence lasts)", seconds)
  end
  armed = check_seconds("Net:blackhole_after_push", 2, armed)
  -- the arming is bounded by heal_after; when the push comes the proxy replaces it by `seconds`
  self:send(("heal_after %.3f"):format(armed))
  self:send(("blackhole_after_push %.3f"):format(seconds))
  self.fault = "blackhole_after_push"
  return true
end

function Net:delay(ms, seconds)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 or ms > 600000 then
    argerr("Net:delay", 1, "milliseconds, a number in 0..600000", ms)
  end
  if seconds ~= nil and (type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0) then
    argerr("Net:delay", 2, "a positive number of seconds or nil", seconds)
  end
  self:send(("heal_after %.3f"):format(seconds or config.net_fault_max or 120))
  self:send(("delay %d"):format(math.floor(ms + 0.5)))
  self.fault = ms > 0 and "delay" or nil
  return true
end

function Net:delay_replies(ms, seconds)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 or ms > 600000 then
    argerr("Net:delay_replies", 1, "milliseconds, a number in 0..600000", ms)
  end
  if seconds ~= nil and (type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0) then
    argerr("Net:delay_replies", 2, "a positive number of seconds or nil", seconds)
  end
  self:send(("heal_after %.3f"):format(seconds or config.net_fault_max or 120))
  self:send(("delay_replies %d"):format(math.floor(ms + 0.5)))
  self.fault = ms > 0 and "delay_replies" or nil
  return true
end

function Net:reset()
  self:send("reset")
  return true
end

function Net:heal()
  if self.stopped then return true end
  self:send("heal")
  self.fault = nil
  return true
end

function Net:status()
  local t = {}
  for k, v in (read_file(self.control .. ".status") or ""):gmatch("(%S+) (%S+)") do
    t[k] = tonumber(v) or v
  end
  return t
end

function Net:alive() return pid_alive(self.pid, self.start) end

function Net:_signal(sig)
  if pid_alive(self.pid, self.start) then shell.execute(("kill -%s %d 2>/dev/null"):format(sig, self.pid)) end
end

function Net:stop()
  if self.stopped then return true end
  self.stopped = true
  registry.unregister(self)
  local deadline = now() + 3
  self:_signal("TERM")
  while pid_alive(self.pid, self.start) and now() < deadline do sleep(0.02) end
  self:_signal("KILL")
  deadline = now() + 3
  while pid_alive(self.pid, self.start) and now() < deadline do sleep(0.02) end
  shell.remove_tree(self.dir)
  return not pid_alive(self.pid, self.start)
end

return M
