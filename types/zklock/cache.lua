---@meta zklock.cache

---Options of `client:cache`.
---@class zklock.CacheOptions
---@field depth? integer How far below the path to follow: `0` the node alone, `1` the node and its children, `math.huge` (default) the whole tree.
---@field max_nodes? integer At most this many nodes (default 100000). One more makes the cache stop: it forgets its watches, reports `"failed"` once, and its reads return `nil, msg, "ERANGE"`; make a new cache with a larger bound (or a smaller depth).
---@field max_watch_bytes? integer At most this many bytes of watches for this cache alone (default: no bound of its own; each node counts 4 + its path's length for its data watch, and as much again for its children watch above the depth limit). Every cache of a client also draws from the client's `max_watch_bytes` (`zklock.connect`, default 900000), which counts all of them together: see that option. Past either bound the cache stops as past `max_nodes` (`ERANGE`, the message naming the bound and what the client's other caches and watches hold).
---@field data? boolean Keep each node's data (default `true`); `false` keeps stats only (`get` returns `false` as the data). The reads still carry the data: an `exists` watch on a deleted child would stay at the server.

---What a cache costs (`cache:stats()`).
---@class zklock.CacheStats
---@field nodes integer Nodes cached.
---@field watches integer Watches this cache holds at the server now: a data watch per node, a children watch per node above the depth limit (an exists watch while the root is missing).
---@field reads integer Reads sent since the cache was made (every change costs one, a listing's change one more per new child).
---@field events integer Events reported.
---@field watch_bytes integer This cache's share of the client's watch budget (`max_watch_bytes`): 4 + the path's length (with the chroot) per watch its nodes hold; 0 once it stopped or closed.
---@field resyncs integer Resync rounds (after a reconnection: a barrier read; after a new session: every node read again).

---A node, its children or the tree below it held in memory and kept current by ZooKeeper's
---one-shot watches (`client:cache(path, opts)`; `zklock.type(c)` is `"cache"`). Reads come from
---memory. Per node, another `czxid` than the cached one is reported as `removed` then `added`
---(a delete and re-create: the version alone cannot tell), an `mzxid` not above the cached one is
---dropped (a duplicate or an older answer), so the events never go back in time. After a
---connection loss on the same session (the watches survive; one barrier read) and after a new
---session (every node read and watched again) the cache reports `initialized` again.
---@class zklock.Cache
---@field client zklock.Client The client it runs on.
---@field path string The root of the cache.
local cache = {}

---The cached data and stat of `path` (default the root), from memory.
---
---Errors: `nil, msg, "ZNONODE"` when the node is not in the cache; `nil, msg, "ERANGE"` after
---the cache stopped at `max_nodes`. Raises on a bad path or a closed cache.
---@param path? string
---@return string|false|nil data `false` with `{ data = false }`.
---@return zklock.Stat|string|nil stat_or_msg
---@return string? code
function cache:get(path) end

---The names of the cached children of `path` (default the root), sorted, from memory.
---
---Errors: as `get`.
---@param path? string
---@return string[]|nil names
---@return string? msg
---@return string? code
function cache:children(path) end

---An iterator over `path, stat, data` of every cached node, parents before their children,
---siblings by name: a snapshot taken at the call (changes meanwhile do not disturb it).
---
---Errors: raises after the cache stopped at `max_nodes` or was closed.
---@return fun(): string?, zklock.Stat?, (string|false)?
function cache:walk() end

---The number of cached nodes.
---@return integer
function cache:size() end

---Whether the last sync round (the first, or a resync) is complete.
---@return boolean
function cache:is_initialized() end

---Wait until the cache is initialized: suspends a coroutine the client's scheduler or adapter
---owns, otherwise blocks while pumping the client.
---
---Errors: `nil, msg, code`: `ETIMEDOUT`, `ECLOSED` (the cache or its client closed), `ERANGE`
---(`max_nodes` or a `max_watch_bytes` passed). Raises on a bad timeout.
---@param timeout? number Seconds (nil: no limit).
---@return true|nil ok
---@return string? msg
---@return string? code
function cache:await(timeout) end

---Set the handler: `fn(event, cache, path, stat, data)` for `"added"`, `"updated"`, `"removed"`
---(with the last stat and data), `"initialized"` (path: the root; after the first sync and after
---each resync) and `"failed"` (data: the message; `max_nodes` or a `max_watch_bytes` passed). It
---runs from the client's event dispatch and must not wait; an error in it is logged. Replaces the
---handler; `nil` removes it.
---@param fn? fun(event: "added"|"updated"|"removed"|"initialized"|"failed", cache: zklock.Cache, path: string, stat?: zklock.Stat, data?: string|false)
---@return zklock.Cache self
function cache:on_change(fn) end

---What the cache holds and has cost.
---@return zklock.CacheStats
function cache:stats() end

---Stop following: the cache forgets its watches (one that fires later at the server is dropped by
---the client; the server drops the rest with the session), frees its nodes and calls no handler
---again. A second close does nothing; other calls after it raise.
---@return true
function cache:close() end
