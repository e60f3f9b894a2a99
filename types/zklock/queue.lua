---@meta zklock.queue

---A distributed FIFO queue (`client:queue(path)`), on the wire the same as ZooKeeper's queue
---recipe and Curator's `SimpleDistributedQueue`: every item is a persistent sequential node
---`<path>/qn-<seq10>` holding the item's bytes; taking an item deletes its node, so each item
---goes to exactly one consumer. `zklock.type(q)` is `"queue"`.
---@class zklock.Queue
---@field client zklock.Client The client it runs on.
---@field path string The queue node.
---@field lock_path? string Curator's lock-safe mode: where the consumers' lock nodes go.
---@field curator? boolean `true` for Curator's DistributedQueue format (`format = "curator"`).
local queue = {}

---Put an item at the end of the queue (missing parents are made as containers).
---
---Errors: `nil, msg, code` as `client:create`. Raises on data that is not a string, a closed
---client or a call without a colon.
---With `format = "curator"`: one item (a string) or a list of items put as one message
---(Curator's `putMulti`), framed as Curator's `ItemSerializer`; the node is `queue-<seq10>` and a
---missing queue node is made persistent, as Curator makes it.
---@param data string|string[] The item's bytes (any bytes, `""` too); Curator's format: a list too.
---@return string? name The item's node name (`"qn-0000000042"`, Curator's: `"queue-0000000042"`).
---@return string? msg
---@return string? code
function queue:put(data) end

---Take the first item, waiting for one while the queue is empty: suspends a coroutine the
---client's scheduler or adapter owns, otherwise blocks while pumping. The waiting takes of one
---client share one children watch on the path. A take that waits on a missing queue node makes
---it (a container), and deletes it again if it ends without an item (the server never reaps a
---container that had no child).
---
---Errors: `nil, "ETIMEDOUT: ...", "ETIMEDOUT"` when nothing came within `timeout`; ZooKeeper
---errors as `nil, msg, code`. When the delete that takes the item got no answer (a code for
---which `zklock.outcome_unknown(code)` is true: `ZOPERATIONTIMEOUT`, `ZCONNECTIONLOSS`,
---`ETIMEDOUT`, `ESESSION`, `ECLOSED`, ...) msg says "outcome unknown: the item may have been
---taken and lost": the server may have removed it, and nobody received it. The item's bytes (as read,
---before any Curator decoding) are then the 4th result when its read was answered, so the caller
---can `put` them back (the item may then be there twice). Raises on an invalid
---timeout or a closed client.
---
---Curator's format: `data` is the list of the message's items. A message that is not Curator's
---framing is removed (as Curator does) and reported as `nil, msg, "EFORMAT", bytes`. With a
---`lock_path` (lock-safe mode) the take first creates the ephemeral `<lock_path>/<item node>`
---(items locked by other consumers are skipped; while every item is locked the take looks again
---at each change of the queue and at least every 0.2 s), reads the item, calls
---`fn(items, message)`, and only then removes item and lock node in one multi that first checks
---the lock node: `ELOST` when the lock went (the session ended), and then nothing was removed or
---written. When that multi got no answer (`zklock.outcome_unknown(code)`) msg says "outcome
---unknown: the item may have been taken (removed, with fn's writes) or may stay for another
---consumer". A lock node create without an answer ends the take with its code and "the item was
---not taken". Writes built on `message:transaction()` in `fn` commit in that same multi. If `fn`
---raises, the lock node is deleted, the item stays in the queue (at its place: no requeue to the
---back), and the error is raised again; if `fn` closes the client, the take returns
---`nil, "ECLOSED: ...", "ECLOSED"` (the item stays). `timeout` bounds the wait for an item, not
---`fn`; the queue's `max_hold` bounds `fn`: once it passes, the message is lost
---(`message:on_lost` hears `("LOST", message, "max_hold")`), its lock node is deleted and the item
---goes to other consumers; `fn`'s fenced writes and the removal are refused, and the take returns
---`nil, "ELOST: ... max_hold ...", "ELOST"`. Raises when `fn` is given without a `lock_path`, and when a lock-safe queue's take has no
---`fn` (the item would be removed before it is processed: use a queue without `lock_path` for
---that).
---@param timeout? number Seconds (nil: no limit; 0: do not wait).
---@param fn? fun(items: string[], message: zklock.QueueMessage) Lock-safe mode: process the item.
---@return (string|string[])? data The item (Curator's format: the list of items).
---@return string? name Its node name; on error the message.
---@return string? code On error.
---@return string? bytes On `EFORMAT`, and on an unknown outcome of the plain take's delete: the item's bytes.
function queue:take(timeout, fn) end

---Take the first item if there is one, never waiting.
---
---Errors: `nil, msg, code` on a ZooKeeper error; a plain `nil` means the queue is empty (or, in
---lock-safe mode, every item is locked by another consumer). `fn` as for `take` (required in
---lock-safe mode).
---@param fn? fun(items: string[], message: zklock.QueueMessage) Lock-safe mode: process the item.
---@return (string|string[])? data
---@return string? name
---@return string? code
function queue:poll(fn) end

---The first item and its node name, without taking it; nil when the queue is empty.
---@return (string|string[])? data
---@return string? name
---@return string? code
function queue:peek() end

---The number of items (`qn-` children; 0 for a missing queue node).
---@return integer? n
---@return string? msg
---@return string? code
function queue:size() end

---What a lock-safe consumer's `fn` gets with the items (Curator's DistributedQueue with a lock path).
---@class zklock.QueueMessage
---@field name string The item's node name (`"queue-0000000042"`).
---@field node string The item's full path.
---@field lock string The full path of this consumer's lock node for the item.
local message = {}

---A fenced transaction that commits together with the item's removal, in one multi whose first op
---checks this consumer's lock node: fn's writes happen exactly when the item is removed, and not
---at all once the lock went (another consumer may have the item then). Ops are added as on any
---transaction; `take` commits it after `fn` returned (commit it yourself and it is sent alone,
---still fenced). Raises when called twice.
---@return zklock.Transaction txn
function message:transaction() end

---While `fn` runs: does this consumer still hold the item's lock node (its session lives, `fn`
---has not returned)? (The hold protocol; the lock node's path is the field `lock`: `node` is
---the item's path, so a message has no `node()` method.)
---@return boolean
function message:is_held() end

---The fencing token of the lock node (its czxid; one `exists` request the first time), nil once
---not held.
---@return integer?
function message:token() end

---Set the handler `fn(state, message, why)` for `"SUSPENDED"`, `"RECONNECTED"` and `"LOST"` (why
---`"session"`: the session ended; `"max_hold"`: `fn` outlasted the queue's `max_hold`, and the lock
---node is deleted after the handler returned; either way the item stays for another consumer)
---while `fn` of the take runs. Replaces the previous handler.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", message: zklock.QueueMessage, why?: "session"|"max_hold") nil removes it.
---@return zklock.QueueMessage message
function message:on_lost(fn) end
