-- zklock.adapters.util: helpers shared by the host adapters (cqueues, luv, openresty).
-- Not a public API; it reads a few fields of the client that only the adapters need.
--
--   util.next_ms(client)        how long the host may wait before client:process() must run:
--                               client:timeout_ms() folded with the builtin scheduler's ready
--                               coroutines and sleep timers (client:spawn used next to the host)
--                               -> ms >= 0, or -1 for no deadline; -1 on a closed client
--   util.busy(client)           true while an operation of the client has a waiter (an acquire,
--                               release or znode call is in flight), or a builtin coroutine is
--                               ready to run
--   util.held(client)           true while any lock of the client is held
--   util.connect(hosts, opts)   zklock.connect that does not wait for the session: returns the
--                               client at once in state CONNECTING (operations started meanwhile
--                               are sent when it connects); for hosts whose thread must never block
--   util.install(client, adapter)  client:use(adapter), remembering the adapter (util.adapter)
local zklock = require("zklock")
local core = require("zklock.core")
local client_mod = require("zklock.client")

local M = {}

local now = core.now
local Client = client_mod.Client

function M.next_ms(client)
  if client.state == "CLOSED" then return -1 end
  local ms = client:timeout_ms()
  local ready = client._ready
  if ready and #ready > 0 then return 0 end
  local timers = client._timers
  local t = timers and timers[1]
  if t and t.at then
    local left = t.at - now()
    if left < 0 then left = 0 end
    left = math.ceil(left)
    if ms < 0 or left < ms then ms = left end
  end
  return ms
end

function M.busy(client)
  if client.state == "CLOSED" then return false end
  if client._waiters and next(client._waiters) ~= nil then return true end
  local ready = client._ready
  return ready ~= nil and #ready > 0
end

function M.held(client)
  if client.state == "CLOSED" then return false end
  return client._holds ~= nil and next(client._holds) ~= nil
end

-- zklock.connect without the wait for CONNECTED. The client's constructor waits through the
-- method _wait_connected; it is replaced for the duration of the (synchronous) call only.
function M.connect(hosts, opts)
  local saved = rawget(Client, "_wait_connected")
  Client._wait_connected = function() return true end
  local ok, c, msg, code = pcall(zklock.connect, hosts, opts)
  Client._wait_connected = saved
  if not ok then error(c, 2) end
  return c, msg, code
end

local adapters = setmetatable({}, { __mode = "k" })

function M.install(client, adapter)
  client:use(adapter)
  adapters[client] = adapter
  return adapter
end

function M.adapter(client)
  return adapters[client]
end

-- Release in the background every mutex / read-write lock hold whose owner coroutine is dead
-- (it raised, or returned, without releasing): nobody can release it any more. `status` is the
-- coroutine status function to trust (OpenResty's coroutine.status misreports other requests'
-- coroutines; coroutine._status is the raw one). Returns an array of { kind =, path = }.
function M.reap_dead_owners(client, status)
  local out = {}
  if client.state == "CLOSED" or not client._holds then return out end
  status = status or coroutine.status
  for id, hold in pairs(client._holds) do
    local owner, lock = hold.owner, hold.lock
    if type(owner) == "thread" and type(lock) == "table" and type(lock._holds) == "table"
       and lock._holds[owner] == hold and status(owner) == "dead" then
      lock._holds[owner] = nil
      client._holds[id] = nil
      pcall(client._c.abandon, client._c, id)
      out[#out + 1] = { kind = lock.kind, path = lock.path }
    end
  end
  return out
end

-- Give back what a waiter's op obtained when its coroutine is gone for good (it will never
-- return from adapter.wait): an acquisition nobody will adopt is released in the background.
function M.abandon(client, w)
  if client.state == "CLOSED" then return end
  if client._abandon_waiter then client:_abandon_waiter(w) end
end

return M
