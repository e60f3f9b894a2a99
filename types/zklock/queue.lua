---@meta zklock.queue

---A distributed FIFO queue (`client:queue(path)`), on the wire the same as ZooKeeper's queue
---recipe and Curator's `SimpleDistributedQueue`: every item is a persistent sequential node
---`<path>/qn-<seq10>` holding the item's bytes; taking an item deletes its node, so each item
---goes to exactly one consumer. `zklock.type(q)` is `"queue"`.
---@class zklock.Queue
---@field client zklock.Client The client it runs on.
---@field path string The queue node.
local queue = {}

---Put an item at the end of the queue (missing parents are made as containers).
---
---Errors: `nil, msg, code` as `client:create`. Raises on data that is not a string, a closed
---client or a call without a colon.
---@param data string The item's bytes (any bytes, `""` too).
---@return string? name The item's node name (`"qn-0000000042"`).
---@return string? msg
---@return string? code
function queue:put(data) end

---Take the first item, waiting for one while the queue is empty: suspends a coroutine the
---client's scheduler or adapter owns, otherwise blocks while pumping. The waiting takes of one
---client share one children watch on the path. A take that waits on a missing queue node makes
---it (a container).
---
---Errors: `nil, "ETIMEDOUT: ...", "ETIMEDOUT"` when nothing came within `timeout`; ZooKeeper
---errors as `nil, msg, code` (`ETIMEDOUT`, `ZCONNECTIONLOSS` or `ESESSION` during the delete say
---the item may have been taken and lost). Raises on an invalid timeout or a closed client.
---@param timeout? number Seconds (nil: no limit; 0: do not wait).
---@return string? data The item.
---@return string? name Its node name; on error the message.
---@return string? code On error.
function queue:take(timeout) end

---Take the first item if there is one, never waiting.
---
---Errors: `nil, msg, code` on a ZooKeeper error; a plain `nil` means the queue is empty.
---@return string? data
---@return string? name
---@return string? code
function queue:poll() end

---The first item and its node name, without taking it; nil when the queue is empty.
---@return string? data
---@return string? name
---@return string? code
function queue:peek() end

---The number of items (`qn-` children; 0 for a missing queue node).
---@return integer? n
---@return string? msg
---@return string? code
function queue:size() end
