---@meta zklock.transaction

---A transaction (`client:transaction()`, or fenced: `lock:transaction()`,
---`lease:transaction()`, `semaphore_mutex:transaction()`). Ops are added in order and return the
---transaction, so calls chain; `commit` sends them as one ZooKeeper multi request: all are
---applied, or none. A transaction is committed once.
---@class zklock.Transaction
---@field client zklock.Client The client it runs on.
local transaction = {}

---Options of `transaction:create`.
---@class zklock.TxnCreateOptions
---@field ephemeral? boolean Delete the node when the session ends.
---@field sequential? boolean Append a 10-digit sequence number to the name.
---@field container? boolean A container node; not with `ephemeral` or `sequential`.
---@field acl? zklock.ACL ACL of the node, default `"open"`.

---Add a create (no `parents` option: a transaction makes exactly the nodes it lists).
---
---Errors: raises on a non-absolute path, data that is not a string, an unknown or invalid option,
---more than 1000 ops, or after commit.
---@param path string
---@param data? string Node data (default `""`).
---@param opts? zklock.TxnCreateOptions
---@return zklock.Transaction txn
function transaction:create(path, data, opts) end

---Add a set of the node's data, expecting `version` (-1 or nil: any).
---@param path string
---@param data string
---@param version? integer
---@return zklock.Transaction txn
function transaction:set(path, data, version) end

---Add a delete, expecting `version` (-1 or nil: any).
---@param path string
---@param version? integer
---@return zklock.Transaction txn
function transaction:delete(path, version) end

---Add a check: the node exists (with `version`, unless -1 or nil). Writes nothing.
---@param path string
---@param version? integer
---@return zklock.Transaction txn
function transaction:check(path, version) end

---The ops in order as `{ op = "create"|"set"|"delete"|"check", path = }` (a fenced
---transaction's guard first).
---@return {op: string, path: string}[] ops
function transaction:ops() end

---Send the ops as one request and wait for the outcome (suspending under an adapter).
---On success, one result per op of yours: `{ op =, path =, created = (create: the node made,
---with its sequence), version = (set: the new version) }`.
---
---Errors: `nil, msg, code, results`. When the server answered: the first failing op's code
---(`ZBADVERSION`, `ZNONODE`, `ZNODEEXISTS`, ...; msg names the op and ends "nothing was
---applied", `results[i].code` has each op's own). `ELOST` for a fenced transaction whose hold is
---gone (not sent when the client already knows or the session ended before it went out, refused
---by the server otherwise: nothing written). Without the server's answer the code is one for
---which `zklock.outcome_unknown(code)` is true (`ZOPERATIONTIMEOUT`, `ZCONNECTIONLOSS`,
---`ETIMEDOUT`, `ESESSION`, `ECLOSED`, ...) and msg ends "outcome unknown: the operation may have
---been applied": all of it or none may have been applied (never a part); every op's
---`results[i].code` is that code. Such a code says "nothing was applied" instead only when the
---transaction never went out (no connection before its timeout or the session's end). Raises with
---no ops, on a second commit, a bad timeout, a closed client, or a request larger than `max_data`.
---@param timeout? number Seconds (default: the client's `op_timeout`; `math.huge`: none).
---@return {op: string, path: string, created: string?, version: integer?}[]? results
---@return string? msg
---@return string? code
---@return {op: string, path: string, code: string?}[]? results_on_failure
function transaction:commit(timeout) end
