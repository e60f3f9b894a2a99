-- zklock.adapters.util: internals shared by the host adapters. Not a public API.
--
-- Adapters use the client's public host API (zklock.connect{ wait = false }, client:use,
-- client:fd, client:process, client:next_timeout_ms, client:pending, the client as a cqueues
-- pollable). What is left here needs the private state of clients and lock objects, for
-- hosts where a waiting coroutine can vanish without unwinding (an aborted nginx request):
--
--   util.held(client)                    true while any lock of the client is held
--   util.reap_dead_owners(client, status) release the locks of dead owner coroutines
--   util.abandon(client, w)              give back what a vanished waiter's operation obtained
local M = {}

function M.held(client)
  if client.state == "CLOSED" then return false end
  return client._holds ~= nil and next(client._holds) ~= nil
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
