---@meta zklock.recipes_plain
-- Shared counts and atomic longs (lua/zklock/counters.lua), the double barrier and zookeeper_lock:
-- the recipes built on plain znode calls.

---A shared count (`client:shared_count(path, seed)`), Curator `SharedCount` on the wire.
---`zklock.type(sc)` is `"shared count"`.
---@class zklock.SharedCount
---@field client zklock.Client The client it runs on.
---@field path string The node holding the count.
---@field seed integer The value a missing node is made with.
local shared_count = {}

---The count and the node's version (makes the node with the seed when missing).
---
---Errors: `nil, msg, code`: `EDATA` (the node holds fewer than 4 bytes), the plain-call codes
---(`ZCONNECTIONLOSS`, `ETIMEDOUT`, `ESESSION`, ...). Raises after `close` or on a closed client.
---@return integer|nil value
---@return integer|string version The node's version (or the message).
---@return string? code
function shared_count:get() end

---Set the count if the node still has `version` (from `get`): Curator's `trySetCount`.
---
---Returns `true, new_version`; `false` when the version is stale (nothing written); `nil, msg,
---code` on errors (`ZNONODE`: the node was deleted). Raises on a value that is not a 32-bit
---integer or a version that is not an integer >= 0.
---@param value integer
---@param version integer
---@return boolean|nil ok
---@return integer|string|nil version_or_msg
---@return string? code
function shared_count:try_set(value, version) end

---Set the count whatever the version (makes the node when missing): Curator's `setCount`.
---@param value integer
---@return true|nil ok
---@return integer|string version_or_msg
---@return string? code
function shared_count:set(value) end

---Set the handler: `fn("changed", sc, value, version)` for every change of the node made after this call (any write,
---also of the same value; a deletion and recreation). Runs from the client's event dispatch,
---i.e. while the client is pumped (a blocking call, `client:run`, an adapter's loop); it must not
---wait. The watch is armed again after each change and after a reconnection, so a change made
---meanwhile is reported then (several changes in between are reported once, with the latest
---value). Replaces the previous handler; an error in it is logged.
---@param fn? fun(event: "changed", sc: zklock.SharedCount, value: integer, version: integer) nil removes it.
---@return zklock.SharedCount sc
function shared_count:on_change(fn) end

---Stop listening (the node stays). Later calls other than `close` raise.
---@return true
function shared_count:close() end

---The outcome of an atomic long operation, shaped like Curator's `AtomicValue`.
---@class zklock.AtomicValue
---@field succeeded boolean Whether the change was made (`false`: every attempt lost a race and the retry policy, and the lock if configured, gave up).
---@field pre integer The value before (the last value read).
---@field post? integer The value written (nil when not succeeded).
---@field stats? {optimistic_tries: integer, promoted_tries: integer, optimistic_ms: number, promoted_ms?: number} Attempts made (not for `get` and `compare_and_set`).

---Options of `client:atomic_long`.
---@class zklock.AtomicLongOptions
---@field retry? fun(attempt: integer, code: string): number|nil Policy for optimistic attempts after a lost race (called with code `"ZBADVERSION"`); default `zklock.retry.exponential{ base = 0.01, max = 0.5, attempts = 10 }`.
---@field lock? string|{path: string, timeout?: number, retry?: fun(attempt: integer, code: string): number|nil} Curator's `PromotedToLock`: a mutex at `path` taken when the optimistic attempts lose; `timeout` seconds to wait for it (default 0: try once, as Curator's default of -1 ms does); `retry`: attempts while holding it (default: one).

---A shared long (`client:atomic_long(path, opts)`), Curator `DistributedAtomicLong` on the wire.
---`zklock.type(al)` is `"atomic long"`. Errors of every operation: `nil, msg, code`: `EDATA` (the
---node holds 1 to 7 bytes), `ERANGE` (without 64-bit integers: a value or result beyond
---+-(2^53 - 1)), the plain-call codes. A write whose answer is lost (`ZCONNECTIONLOSS`,
---`ETIMEDOUT`, `ESESSION`) is reported, never sent again: it may or may not have been applied.
---@class zklock.AtomicLong
---@field client zklock.Client The client it runs on.
---@field path string The node holding the value.
local atomic_long = {}

---The current value (a missing node reads 0 and is not made): `{ succeeded = true, pre = v, post = v }`.
---@return zklock.AtomicValue|nil result
---@return string? msg
---@return string? code
function atomic_long:get() end

---Add `delta` (wrapping like Java's long under Lua 5.3+). Makes the node when missing.
---@param delta integer
---@return zklock.AtomicValue|nil result
---@return string? msg
---@return string? code
function atomic_long:add(delta) end

---Subtract `delta`.
---@param delta integer
---@return zklock.AtomicValue|nil result
---@return string? msg
---@return string? code
function atomic_long:subtract(delta) end

---Add 1.
---@return zklock.AtomicValue|nil result
---@return string? msg
---@return string? code
function atomic_long:increment() end

---Subtract 1.
---@return zklock.AtomicValue|nil result
---@return string? msg
---@return string? code
function atomic_long:decrement() end

---Set `value` whatever the current value, by the same attempts as `add` (Curator's `trySet`).
---@param value integer
---@return zklock.AtomicValue|nil result
---@return string? msg
---@return string? code
function atomic_long:try_set(value) end

---One attempt: set `new` if the node exists and holds `expected` (Curator's `compareAndSet`).
---@param expected integer
---@param new integer
---@return zklock.AtomicValue|nil result
---@return string? msg
---@return string? code
function atomic_long:compare_and_set(expected, new) end

---Make the node holding `value` if it does not exist: `true`, or `false` when it exists.
---@param value integer
---@return boolean|nil ok
---@return string? msg
---@return string? code
function atomic_long:initialize(value) end

---Write `value` whatever the version, making the node when missing (Curator's `forceSet`).
---@param value integer
---@return true|nil ok
---@return string? msg
---@return string? code
function atomic_long:force_set(value) end

---A double barrier (`client:double_barrier(path, member_qty)`), Curator
---`DistributedDoubleBarrier` on the wire. `zklock.type(b)` is `"double barrier"`.
---@class zklock.DoubleBarrier
---@field client zklock.Client The client it runs on.
---@field path string The barrier's node.
---@field member_qty integer Members needed to enter.
---@field id string This member's UUID (the name of its node).
---@field own string This member's node path.
---@field ready string The ready node's path (`path .. "/ready"`).
local double_barrier = {}

---Join and wait until `member_qty` members are in (or the ready node exists already). Suspends
---under an adapter, blocks while pumping otherwise.
---
---Errors: `nil, msg, code`: `ETIMEDOUT`, `ESESSION`, `ECLOSED`, the plain-call codes; this
---member's node is deleted on every failure (also after a create whose answer was lost, and in
---the background when its delete meets a connection loss), and when the calling coroutine dies
---while it waits (`coroutine.close`, killed by its host: the client's reaper of dead owners).
---Raises on a bad timeout or when already entered.
---@param timeout? number Seconds; nil waits forever.
---@return true|nil ok
---@return string? msg
---@return string? code
function double_barrier:enter(timeout) end

---Leave and wait until every member has left, in Curator's order (the lowest-named member
---deletes its node last; the others delete theirs first and wait for the lowest).
---
---Errors: `nil, msg, code`: `ETIMEDOUT` (this member's node and the ready node are deleted, as
---Curator deletes the ready node), `ELOST` (this member's node vanished: its session ended),
---`ESESSION`, `ECLOSED`. A coroutine that dies while it waits here gives up as on a timeout.
---Raises on a bad timeout or when not entered.
---@param timeout? number Seconds; nil waits forever.
---@return true|nil ok
---@return string? msg
---@return string? code
function double_barrier:leave(timeout) end

---This member's node path while it is in (or entering), else nil.
---@return string|nil node
function double_barrier:node() end

---Options of `client:zookeeper_lock`.
---@class zklock.ZookeeperLockOptions
---@field on_acquired? fun(lock: zklock.ZookeeperLock) Called when acquired (WriteLock's `LockListener.lockAcquired`).
---@field on_released? fun(lock: zklock.ZookeeperLock) Called after release (`LockListener.lockReleased`).
---@field on_lost? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", lock: zklock.ZookeeperLock, why?: "session"|"node"|"max_hold") Called while held when the connection is lost, comes back on the same session, or the session ended (see `zookeeper_lock:on_lost`).
---@field data? string Node data (default the bytes 0x12 0x34, as WriteLock writes).
---@field max_hold? number Seconds every grant is bounded to: then it is lost (`on_lost` hears `("LOST", lock, "max_hold")` once) and its node deleted in the background; `release` answers `ELOST`.

---A lock on ZooKeeper's WriteLock protocol (`client:zookeeper_lock(path, opts)`). It answers like
---every other grant (docs/design.md, "One hold protocol"). Lua 5.4: `<close>` releases it; an
---object collected while held has its node deleted in the background.
---`zklock.type(l)` is `"zookeeper lock"`.
---@class zklock.ZookeeperLock
---@field client zklock.Client The client it runs on.
---@field path string The lock directory (WriteLock's `dir`).
---@field kind "zookeeper_lock"
---@field data string The data of its nodes.
local zookeeper_lock = {}

---Create the node and wait until it is first (watching the immediate predecessor). Unlike
---WriteLock, a waiter whose predecessor is already gone lists again rather than stall.
---
---Before the client's first session it waits for one (within the timeout). The timeout bounds
---the wait in the queue; the create and listing are plain calls, bounded by `op_timeout`.
---
---Errors: `nil, msg, code`: `ETIMEDOUT`, `ECANCELED` (`cancel()`), `ELOST` (its node vanished,
---or re-acquiring a lost hold before releasing it), `ECLOSED`, the plain calls' codes; the node
---is deleted on every failure (a node whose create answer was lost is found by its session
---prefix, as WriteLock does), and when the calling coroutine dies while it waits
---(`coroutine.close`, killed by its host: the client's reaper of dead owners). Raises when held
---or on a bad timeout.
---@param timeout? number Seconds; nil waits forever, 0 tries once.
---@param opts? { max_hold?: number } `max_hold`: bound this grant (overrides the constructor's), as `zklock.ZookeeperLockOptions.max_hold`.
---@return zklock.ZookeeperLock? lock The lock itself (for `<close>`).
---@return string? msg
---@return string? code
function zookeeper_lock:acquire(timeout, opts) end

---Delete the node and call `on_released`. Raises when not held. `ELOST` when the hold was lost
---first: the session that took the lock ended, or its node was deleted by someone else (found by
---this delete or a fenced transaction; `LOST` is reported then, once); `on_released` is still
---called. `true` after `client:close()`.
---@return true|nil ok
---@return string? msg
---@return string? code
function zookeeper_lock:release() end

---Whether this object holds the lock: false once the hold was lost (the session that took it
---ended, or its node was found deleted).
---@return boolean held
function zookeeper_lock:is_held() end

---The node's full path while held, else nil.
---@return string|nil node
function zookeeper_lock:node() end

---The fencing token while held (the czxid of its node; successive holders' tokens only grow),
---else nil.
---@return integer? token
function zookeeper_lock:token() end

---A fenced transaction: its first op checks that this lock's node still exists, so it commits
---only while held (a check that finds no node makes the hold `LOST`). Add ops and `commit` as
---for `client:transaction()`.
---
---Errors: raises when not held.
---@return zklock.Transaction txn
function zookeeper_lock:transaction() end

---Withdraw a pending acquire of this lock: it returns `nil, "ECANCELED: ...", "ECANCELED"` within
---0.2 s (its node deleted).
---@return integer withdrawn 0 or 1
function zookeeper_lock:cancel() end

---Set the handler called while the lock is held on `"SUSPENDED"` (connection lost, ownership
---uncertain), `"RECONNECTED"` (the same session is back: still held) and `"LOST"` (the session
---ended, or its node was found deleted: `is_held()` is false and `release()` answers `ELOST`;
---told once). Replaces the handler; nil removes it. WriteLock has
---no such report. Without a handler a LOST is logged as a warning. The handler runs from the
---client's event dispatch: it must not wait (set a flag, wake the owner).
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", lock: zklock.ZookeeperLock, why?: "session"|"node"|"max_hold") nil removes it.
---@return zklock.ZookeeperLock lock
function zookeeper_lock:on_lost(fn) end
