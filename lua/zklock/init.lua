-- zklock: distributed locks over ZooKeeper, wire-compatible with Apache Curator.
--
--   local zklock = require("zklock")
--   local client = assert(zklock.connect("127.0.0.1:2181", { session_timeout = 10 }))
--   local m = client:mutex("/locks/orders")
--   do
--     local held <close> = assert(m:acquire(5))
--     -- critical section; m:token() is the fencing token
--   end
--
-- Expected failures return nil, "CODE: message", "CODE" (test `not ok`, not `== nil`);
-- misuse (bad arguments, releasing what you do not hold, a closed client) raises.
local core = require("zklock.core")
local client_mod = require("zklock.client")
local lock_mod = require("zklock.lock")
local sem_mod = require("zklock.semaphore")
local multi_mod = require("zklock.multilock")

local M = {
  _NAME = "zklock",
  _VERSION = core._VERSION,
  errno = core.errno,
  retry = require("zklock.retry"),
}

local Client = client_mod.Client

-- zklock.connect(hosts, opts) -> client | nil, msg, code
--   opts: session_timeout (s, default 10), connect_timeout (s, default session_timeout),
--         identity (data stored in lock nodes, default the host name),
--         log (function(line) for the ZooKeeper client's log), log_level ("error".."debug").
function M.connect(hosts, opts)
  return client_mod.new(hosts, opts)
end

-- client:mutex(path) -> Curator InterProcessMutex-compatible fair reentrant lock.
function Client:mutex(path, opts)
  self:_check_open("mutex")
  return lock_mod.new(self, core.MUTEX, path, "mutex", opts)
end

-- client:rwlock(path) -> { read = lock, write = lock, path = path }
-- (Curator InterProcessReadWriteLock: readers share, writers exclude, FIFO across both).
function Client:rwlock(path, opts)
  self:_check_open("rwlock")
  return lock_mod.new_rw(self, path, opts)
end

-- client:semaphore(path, max_leases) -> Curator InterProcessSemaphoreV2 (leases).
function Client:semaphore(path, max_leases, opts)
  self:_check_open("semaphore")
  return sem_mod.new(self, path, max_leases, opts, "semaphore")
end

-- client:semaphore_mutex(path) -> Curator InterProcessSemaphoreMutex: not reentrant,
-- releasable from any coroutine.
function Client:semaphore_mutex(path, opts)
  self:_check_open("semaphore_mutex")
  return sem_mod.new_mutex(self, path, opts)
end

-- client:multilock(locks, opts) -> all-or-nothing lock over several locks of this client.
--   opts: order = "given" | "path", deadline (s, default for acquire), per_lock_timeout (s),
--         rollback = "reverse" | "given".
function Client:multilock(locks, opts)
  self:_check_open("multilock")
  return multi_mod.new(self, locks, opts)
end

-- zklock.run(clients, timeout) drives several clients' schedulers together until every
-- coroutine spawned on any of them has finished; returns true, or nil, "ETIMEDOUT: ...".
function M.run(clients, timeout)
  local check = require("zklock.check")
  if type(clients) ~= "table" or #clients == 0 then
    check.argerror("run", 1, "expected an array of clients, got " .. check.describe(clients))
  end
  for i, c in ipairs(clients) do
    if getmetatable(c) ~= Client then
      check.argerror("run", 1, ("element %d: expected a client, got %s"):format(i, check.describe(c)))
    end
  end
  local deadline = timeout and core.now() + check.timeout("run", 2, timeout)
  while true do
    local busy, fds, wait = false, {}, 1000
    for _, c in ipairs(clients) do
      if c.state ~= "CLOSED" then
        c:_pump(0)
        if c._ntasks > 0 then busy = true end
        fds[#fds + 1] = c._c:fd()
        local t = c._c:timeout()
        if #c._ready > 0 then t = 0 end
        if c._timers[1] then t = math.min(t < 0 and 1000 or t, math.max(0, c._timers[1].at - core.now())) end
        if t >= 0 and t < wait then wait = t end
      end
    end
    if not busy then return true end
    if deadline and core.now() >= deadline then
      return nil, ("ETIMEDOUT: coroutines still running after %g s"):format(timeout), "ETIMEDOUT"
    end
    if wait > 0 then core.poll(fds, math.ceil(wait)) end
  end
end

-- zklock.type(x) -> "client" | "mutex" | "read lock" | "write lock" | "semaphore" |
--                   "semaphore mutex" | "lease" | nil
function M.type(x)
  local mt = getmetatable(x)
  if mt == Client then return "client" end
  if mt == lock_mod.Lock or mt == sem_mod.Semaphore or mt == sem_mod.SemaphoreMutex then return x.kind end
  if mt == sem_mod.Lease then return "lease" end
  if mt == multi_mod.MultiLock then return "multi-lock" end
  return nil
end

function M.strerror(code)
  if type(code) == "string" then code = core.errno[code] end
  return code and core.strerror(code) or "unknown error"
end

return M
