-- zklock.txn: transactions (ZooKeeper's multi: create, set, delete, check, all or none) and
-- fenced writes: a transaction from a held lock or lease starts with a check that the holder's
-- own node still exists, so it commits only while the lock is held. A holder whose session
-- ended (paused past its timeout, partitioned) finds its node gone and the whole transaction
-- refused, whatever its clock says; the next holder's writes stand.
--
--   local t = client:transaction()
--   t:create("/jobs/j-", "x", { sequential = true }):set("/jobs/state", "running", 3)
--   local results, err, code = t:commit(5)
--
--   local m = client:mutex("/locks/orders"); assert(m:acquire(5))
--   local ok, err, code = m:transaction():set("/orders/next", "42"):commit()
--   -- code "ELOST": the lock was no longer held, nothing was written
local core = require("zklock.core")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local R = require("zklock.internal.recipe")
local Client = require("zklock.client").Client

local M = {
  -- the words every unknown outcome of a write ends with (zklock.outcome_unknown)
  UNKNOWN = "outcome unknown: the operation may have been applied",
}

local Txn = {}
Txn.__index = Txn
M.Txn = Txn
Txn.__name = "zklock.transaction"

-- Is t a transaction not yet committed (for zklock.queue's lock-safe take)?
function M.is_open(t) return not t._committed end

local NAMES = { [core.OP_CREATE] = "create", [core.OP_SET] = "set", [core.OP_DELETE] = "delete",
                [core.OP_CHECK] = "check" }

local function new(client, guard)
  return setmetatable({ client = client, _ops = {}, _guard = guard, _committed = false }, Txn)
end

local function check_txn(self, fname)
  check.object(self, Txn, "transaction", fname)
  if self._committed then
    check.raise(("zklock: transaction:%s after commit (build a new transaction)"):format(fname))
  end
  check.open(self.client, fname)
end

local function check_path(fname, path) check.znode_path(fname, 1, path) end
local check_version = check.version

local function add(self, fname, op)
  if #self._ops >= 999 then
    check.argerror(fname, 1, "a transaction holds at most 1000 ops (999 of yours with a guard)")
  end
  self._ops[#self._ops + 1] = op
  return self
end

local CREATE_OPTIONS = { ephemeral = check.is.boolean, sequential = check.is.boolean,
                         container = check.is.boolean, acl = check.acl_option }

-- txn:create(path, data, { ephemeral=, sequential=, container=, acl= }) -> txn
function Txn:create(path, data, opts)
  check_txn(self, "create")
  check_path("create", path)
  if data ~= nil and type(data) ~= "string" then
    check.argerror("create", 2, "data: expected a string or nil, got " .. check.describe(data))
  end
  opts = check.options("create", 3, opts, CREATE_OPTIONS)
  if opts.container and (opts.ephemeral or opts.sequential) then
    check.argerror("create", 3, "options: a container cannot be ephemeral or sequential")
  end
  local flags = (opts.ephemeral and core.CREATE_EPHEMERAL or 0) + (opts.sequential and core.CREATE_SEQUENTIAL or 0)
    + (opts.container and core.CREATE_CONTAINER or 0)
  return add(self, "create", { core.OP_CREATE, path, data or "", flags, -1, R.acl_id(self.client, opts.acl) })
end

-- txn:set(path, data, version) -> txn
function Txn:set(path, data, version)
  check_txn(self, "set")
  check_path("set", path)
  if type(data) ~= "string" then check.argerror("set", 2, "data: expected a string, got " .. check.describe(data)) end
  return add(self, "set", { core.OP_SET, path, data, 0, check_version("set", 3, version), 0 })
end

-- txn:delete(path, version) -> txn
function Txn:delete(path, version)
  check_txn(self, "delete")
  check_path("delete", path)
  return add(self, "delete", { core.OP_DELETE, path, nil, 0, check_version("delete", 2, version), 0 })
end

-- txn:check(path, version) -> txn: the node exists (with this version, unless -1 or nil)
function Txn:check(path, version)
  check_txn(self, "check")
  check_path("check", path)
  return add(self, "check", { core.OP_CHECK, path, nil, 0, check_version("check", 2, version), 0 })
end

-- The ops of the transaction as { { op = "create", path = } ... } (the guard first, if any).
function Txn:ops()
  check.object(self, Txn, "transaction", "ops")
  local out = {}
  for _, op in ipairs(self:_all()) do out[#out + 1] = { op = NAMES[op[1]], path = op[2] } end
  return out
end

local function guard_nodes(guard) return guard.nodes or { guard.node } end

function Txn:_all()
  if not self._guard then return self._ops end
  local all = {}
  for i, node in ipairs(guard_nodes(self._guard)) do all[i] = { core.OP_CHECK, node, nil, 0, -1, 0 } end
  for _, op in ipairs(self._ops) do all[#all + 1] = op end
  return all
end

-- txn:commit(timeout) -> results | nil, msg, code, results
--   results[i] = { op =, path =, created = (create: the node made), version = (set) }, one
--   per op of yours (a guard's check is not listed). When the server answered, a failure means
--   nothing was applied: msg names the first failing op and `results` carries every op's own
--   code (`code` field). When no answer came (code in zklock.outcome_unknown: ZCONNECTIONLOSS,
--   ZOPERATIONTIMEOUT, ETIMEDOUT, ESESSION, ECLOSED, ...) the outcome is unknown: all of it may
--   have been applied, or none; msg says so. A guarded transaction whose lock or lease is no
--   longer held fails with code ELOST and writes nothing.
function Txn:commit(timeout)
  check_txn(self, "commit")
  if #self._ops == 0 then check.raise("zklock: transaction:commit with no ops") end
  local client = self.client
  local ms
  if timeout == nil then ms = R.op_ms(client) else ms = check.op_timeout("commit", 1, timeout, "timeout") end
  local guard = self._guard
  if guard and not guard.live() then
    self._committed = true
    return E.fail("ELOST", ("%s is not held (any more): the transaction was not sent"):format(guard.what))
  end
  local all = self:_all()
  local size = 0
  for _, op in ipairs(all) do size = size + #op[2] + (op[3] and #op[3] or 0) + 64 end
  check.fits("commit", 1, size, R.max_data(client), ("the transaction's %d bytes"):format(size))
  self._committed = true
  local id, msg, code = R.txn(client, all, ms > 0 and ms or 0)
  if not id then return nil, msg, code end
  local w = R.await(client, R.waiter(client, id))
  if not w.done then
    return E.fail("ECLOSED", ("transaction of %d op(s): the client was closed before its answer came; %s")
      :format(#self._ops, M.UNKNOWN))
  end
  local r = w.result or { rc = w.status, results = {} }
  local off = guard and #guard_nodes(guard) or 0
  local results = {}
  for i = 1 + off, #all do
    local x = r.results[i] or { rc = w.status }
    results[#results + 1] = { op = NAMES[all[i][1]], path = all[i][2], created = x.path, version = x.version,
                              code = x.rc ~= 0 and E.name(x.rc) or nil }
  end
  if w.status == 0 then return results end
  local st = w.status
  for i = 1, off do
    local x = r.results[i]
    if x and x.rc == core.errno.ZNONODE then
      if guard.gone then guard.gone(i) end -- the holder's node is gone: its hold is LOST now
      return E.fail("ELOST", ("%s is no longer held (its node %s is gone): nothing was written")
        :format(guard.what, check.short(all[i][2])), results)
    end
  end
  if core.outcome_unknown(st) and r.sent == false then
    -- it ended before it could be sent (no connection meanwhile): nothing was applied
    local why = st == core.errno.ETIMEDOUT and ("not sent within %g s (no connection)"):format(ms / 1000)
      or ("%s before it could be sent"):format(E.strerror(st))
    if guard and st == core.errno.ESESSION then
      return E.fail("ELOST", ("%s was lost with the session before the transaction could be sent: nothing was"
        .. " written"):format(guard.what), results)
    end
    return E.fail(st, ("transaction of %d op(s): %s; nothing was applied"):format(#results, why), results)
  end
  if core.outcome_unknown(st) then
    -- no answer of the server: it may have applied all of it (never a part)
    local why = E.strerror(st)
    if st == core.errno.ETIMEDOUT then
      why = ("no answer within %g s"):format(ms / 1000)
    elseif st == core.errno.ESESSION then
      why = "the ZooKeeper session was lost before its answer came"
    elseif st == core.errno.ECLOSED then
      why = "the client was closed before its answer came"
    end
    return E.fail(st, ("transaction of %d op(s): %s; %s"):format(#results, why, M.UNKNOWN), results)
  end
  -- the server answered: a multi is applied all or none, so none of it was
  for i, x in ipairs(results) do
    if x.code and x.code ~= "ZRUNTIMEINCONSISTENCY" then
      return E.fail(x.code, ("transaction op %d (%s %s): %s; nothing was applied")
        :format(i, x.op, check.short(x.path), E.strerror(x.code)), results)
    end
  end
  return E.fail(st, "transaction: " .. E.strerror(st), results)
end

function Txn:__tostring()
  return ("zklock.transaction(%d op(s)%s)"):format(#self._ops, self._guard and ", fenced" or "")
end

-- client:transaction() -> an empty transaction
function Client:transaction()
  check.open(self, "transaction")
  return new(self, nil)
end

-- A fenced transaction for a holder: guard = { node = (or nodes = { ... }: one check each),
-- what =, live = function() -> bool, gone = function(i) (the check of node i found no node:
-- the hold learns it is lost) }.
function M.fenced(client, guard) return new(client, guard) end

return M
