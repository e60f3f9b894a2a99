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
local check = require("zklock.internal.args")
local scheduler = require("zklock.internal.scheduler")
-- each recipe module defines its constructors on the client (client:mutex, client:rwlock, ...)
local lock_mod = require("zklock.lock")
local sem_mod = require("zklock.semaphore")
local multi_mod = require("zklock.multilock")
local txn_mod = require("zklock.txn")
local watch_mod = require("zklock.internal.watch")
local queue_mod = require("zklock.queue")
require("zklock.revoke") -- client:revoke
local shared_mod = require("zklock.counters") -- client:shared_count, client:atomic_long
local barrier_mod = require("zklock.barrier") -- client:double_barrier
local zkl_mod = require("zklock.zookeeper_lock") -- client:zookeeper_lock
local leader_mod = require("zklock.leader")
local cache_mod = require("zklock.cache") -- the cache object (client:cache)
local member_mod = require("zklock.member") -- client:member
local group_mod = require("zklock.group") -- client:group
local election_mod = require("zklock.election") -- client:election (a read-only view)

local M = {
  _NAME = "zklock",
  _VERSION = core._VERSION,
  errno = core.errno,
  retry = require("zklock.retry"),
  -- zklock.metrics.prometheus(), .shared_dict(dict), .set_default(sink): see zklock.metrics
  metrics = require("zklock.metrics"),
}

local Client = client_mod.Client

-- zklock.connect(hosts, opts) -> client | nil, msg, code
--   opts: session_timeout (s, default 10), connect_timeout (s, default session_timeout),
--         identity (data stored in lock nodes, default the host name),
--         log (function(line) for the ZooKeeper client's log), log_level ("error".."debug").
function M.connect(hosts, opts)
  return client_mod.new(hosts, opts)
end

-- zklock.run(clients, timeout) drives several clients' schedulers together until every
-- coroutine spawned on any of them has finished; returns true, or nil, "ETIMEDOUT: ...".
-- It uses only the clients' host API (fd, next_timeout_ms, process, tasks).
function M.run(clients, timeout)
  if type(clients) ~= "table" or #clients == 0 then
    check.argerror("run", 1, "expected an array of clients, got " .. check.describe(clients))
  end
  for i, c in ipairs(clients) do
    if getmetatable(c) ~= Client then
      check.argerror("run", 1, ("element %d: expected a client, got %s"):format(i, check.describe(c)))
    end
  end
  return scheduler.run(clients, timeout, "run", 2)
end

-- zklock.type(x) -> "client" | "mutex" | "read lock" | "write lock" | "semaphore" |
--                   "semaphore mutex" | "lease" | "multi-lock" | "transaction" | "watch" |
--                   "shared count" | "atomic long" | "double barrier" |
--                   "zookeeper lock" | "leader" | "leader latch" | "election" | "queue" | "cache" |
--                   "member" | "group" | nil
function M.type(x)
  local mt = getmetatable(x)
  if mt == Client then return "client" end
  if mt == lock_mod.Lock or mt == sem_mod.Semaphore or mt == sem_mod.SemaphoreMutex then return x.kind end
  if mt == sem_mod.Lease then return "lease" end
  if mt == multi_mod.MultiLock then return "multi-lock" end
  if mt == txn_mod.Txn then return "transaction" end
  if mt == watch_mod.Watch then return "watch" end
  if mt == shared_mod.SharedCount then return "shared count" end
  if mt == shared_mod.AtomicLong then return "atomic long" end
  if mt == barrier_mod.Barrier then return "double barrier" end
  if mt == zkl_mod.ZkLock then return "zookeeper lock" end
  if mt == leader_mod.Leader then return "leader" end
  if mt == leader_mod.Latch then return "leader latch" end
  if mt == election_mod.Election then return "election" end
  if mt == queue_mod.Queue then return "queue" end
  if mt == cache_mod.Cache then return "cache" end
  if mt == member_mod.Member then return "member" end
  if mt == group_mod.Group then return "group" end
  return nil
end

-- zklock.outcome_unknown(code) -> boolean: true when `code` (a name such as "ZOPERATIONTIMEOUT"
-- or a number from zklock.errno; nil -> false) ended a write that may have been applied: the
-- request may have reached the server and its answer never came (ZCONNECTIONLOSS,
-- ZOPERATIONTIMEOUT, ETIMEDOUT, ESESSION, ECLOSED, ...; the list is ZKL_OUTCOME_UNKNOWN_MAP in
-- zklock.h). Any other failure of a write is the server's answer: nothing was applied.
function M.outcome_unknown(code)
  local t = type(code)
  if t ~= "nil" and t ~= "string" and not (t == "number" and code % 1 == 0 and math.abs(code) < 2 ^ 31) then
    check.argerror("outcome_unknown", 1, "code: expected an error code name (\"ZCONNECTIONLOSS\") or number, got "
      .. check.describe(code))
  end
  local r = core.outcome_unknown(code)
  if r == nil then
    check.argerror("outcome_unknown", 1, ("code: %s is not an error code name (see zklock.errno)")
      :format(check.describe(code)))
  end
  return r
end

-- zklock.strerror(code) -> the text of an error code (a name such as "EFORMAT" or a number from
-- zklock.errno); "unknown error" for anything else. Every code a module returns is in zklock.errno.
M.strerror = require("zklock.internal.errors").strerror

return M
