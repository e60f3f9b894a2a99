---@meta zklock.adapters.openresty

---zklock in nginx workers (lua-nginx-module + lua-resty-core; zklock.core must be the LuaJIT
---build). One client per worker, made in `init_worker_by_lua*`, driven by a timer pump;
---requests (rewrite, access, content) and timers wait on `ngx.semaphore`. Acquire and release
---in the same handler and set `lua_thread_cache_max_entries 0;`. Loading the module outside
---nginx raises.
---@class zklock.adapters.openresty
---@field _NAME string `"zklock.adapters.openresty"`.
local zngx = {}

---Make this worker's client (`zklock.connect` with `wait = false`, so the worker never waits
---for the session) and start its pump. Call it in `init_worker_by_lua*`.
---
---Errors: `nil, "EEXIST: ...", "EEXIST"` if this worker already has a client; `nil, msg, code`
---from `zklock.connect`; raises, before connecting, if a pump option is bad (naming it).
---@param hosts string As for `zklock.connect`.
---@param connect_opts? zklock.ConnectOptions `wait` is always false here; never set `keepalive`.
---@param pump_opts? zklock.adapters.openresty.PumpOptions
---@return zklock.Client? client
---@return string? msg
---@return string? code
function zngx.start(hosts, connect_opts, pump_opts) end

---Install the adapter and start the pump for a client you made yourself.
---
---Errors: raises if `client` is not a zklock client, a pump option is bad (the error names it)
---or the pump timer cannot start.
---@param client zklock.Client
---@param pump_opts? zklock.adapters.openresty.PumpOptions
---@return zklock.Client client
function zngx.attach(client, pump_opts) end

---Options of the pump (`start`, `attach`).
---@class zklock.adapters.openresty.PumpOptions
---@field wakeup? "fd"|"poll" How the pump learns that replies came (default "fd"): "fd", a thread per client watches the client's fd and wakes the pump through a unix socket it reads with a cosocket (an acquire+release at round-trip speed); "poll", no thread, the pump polls every `busy_interval` while operations are pending. "fd" falls back to "poll" (with a warning) if its thread or socket cannot start.
---@field socket_dir? string Where `wakeup = "fd"` makes its unix socket, removed once connected (default `$TMPDIR` or `/tmp`).
---@field busy_interval? number With `wakeup = "poll"`, seconds between pumps while `client:pending() > 0` (default 0.001, at least 0.001: a 0 ms sleep does not yield to nginx's event loop).
---@field idle_interval? number Longest pump period when idle (with `wakeup = "fd"` also while waiting for replies), capped by `next_timeout_ms()` (default 0.1); a new operation with an earlier deadline wakes the pump at once.
---@field exit_grace? number On worker exit, seconds to keep serving in-flight requests before closing the session (default 10).

---This worker's client (from `start`), or nil.
---@return zklock.Client?
function zngx.client() end

---Close this worker's client now (its pump ends).
function zngx.stop() end

---Keep `job` running in exactly one nginx worker of all the nginx instances that call this with
---the same `path` (leader election: every worker queues on a mutex at `path`, Curator's
---LeaderSelector protocol, under a session of its own; node data = `id`). Call it in
---`init_worker_by_lua*`; it never blocks the worker. The holder runs `job(ctx)` in a light
---thread of a timer, releases when the job returns, raises or was told to stop, and queues
---again (a job that raised: after 1 s). The job must return soon after `ctx:stopping()` turns
---non-nil (poll it, or wait with `ctx:sleep`): on `SUSPENDED`, on worker exit (reload, quit)
---and on `handle:close()` it is killed (`ngx.thread.kill`) if it has not returned after
---`stop_grace`; on `LOST` it is killed at once (the server may give the job to another worker
---any moment). A crashed worker's node goes with its session: another worker takes over within
---the session timeout. One more ZooKeeper session per worker.
---
---Errors: bad arguments raise (naming the argument, before anything connects); calling it in
---`init_by_lua*` raises; `nil, msg, code` from `zklock.connect`, or
---`nil, "ESYSTEM: ...", "ESYSTEM"` when the supervisor timer cannot start.
---@param path string The election path, shared by every worker of every instance.
---@param job fun(ctx: zklock.adapters.openresty.Job) Runs while this worker is the one.
---@param opts zklock.adapters.openresty.OneWorkerOptions `hosts` is required.
---@return zklock.adapters.openresty.OneWorker? handle
---@return string? msg
---@return string? code
function zngx.one_worker(path, job, opts) end

---Options of `one_worker`.
---@class zklock.adapters.openresty.OneWorkerOptions
---@field hosts string Required: as for `zklock.connect`.
---@field id? string Participant id, the data of this worker's queue node (default `"<host name>/<worker pid>"`).
---@field session_timeout? number Seconds (default 10): how long a crashed worker keeps the job before another takes over.
---@field stop_grace? number Seconds a job told to stop may take to return before it is killed (default 5; on LOST: none).
---@field acl? zklock.ACL ACL of the queue nodes and the parents made for them (as for `client:mutex`).
---@field max_watch_bytes? integer The watch budget of the job's client, as `zklock.connect`'s (default 900,000).

---What `one_worker` returns, one per worker.
---@class zklock.adapters.openresty.OneWorker
local OneWorker = {}

---This worker runs the job now (and was not told to stop).
---@return boolean
function OneWorker:running() end

---The hold protocol's "do I hold it?": the same answer as `running()`.
---@return boolean
function OneWorker:is_held() end

---The fencing token of the job this worker runs now, or nil.
---@return integer?
function OneWorker:token() end

---Leave the election in this worker for good: a running job is told `"CLOSED"` (killed after
---`stop_grace`), then the mutex is released and the session closed. Returns at once.
function OneWorker:close() end

---The context a job receives. Fields: `token` (the fencing token: the czxid of the queue node;
---it grows from term to term), `node` (the queue node's path), `id`, `path`, `pid`
---(`ngx.worker.pid()`), `worker` (`ngx.worker.id()`), `client` (the election's client).
---@class zklock.adapters.openresty.Job
---@field token integer The fencing token of this term.
---@field node string Full path of this worker's queue node.
---@field id string The participant id.
---@field path string The election path.
---@field pid integer The worker's pid.
---@field worker integer The worker's number (`ngx.worker.id()`).
---@field client zklock.Client The election's client (its own session).
local Job = {}

---nil while the job may run; otherwise why it must return: `"SUSPENDED"` (the connection
---dropped: this worker may no longer be the one), `"LOST"` (the session is gone; the job is
---killed at once), `"EXITING"` (the worker exits: reload or quit), `"CLOSED"` (`handle:close()`).
---Once non-nil it stays so for this term.
---@return ("SUSPENDED"|"LOST"|"EXITING"|"CLOSED")?
function Job:stopping() end

---Sleep `s` seconds unless told to stop meanwhile: `true` after the full time, or
---`nil, reason` (as `stopping()`) as soon as the job must stop.
---@param s number Seconds, >= 0.
---@return true? ok
---@return ("SUSPENDED"|"LOST"|"EXITING"|"CLOSED")? reason
function Job:sleep(s) end

---A tree of ZooKeeper nodes shared by every worker of this nginx instance: one worker (the
---keeper, elected with `one_worker` on a path of this instance) follows it with `client:cache`
---and publishes it into the `lua_shared_dict` `dict`; every worker reads it from there, from any
---phase (balancer, log, ...), without a ZooKeeper call. A snapshot is written whole under a new
---version before it becomes the current one: a reader never sees part of one, and the version
---only grows (also across keepers). A new keeper (the old one crashed, lost its session, was
---told `SUSPENDED`, or its worker exits on a reload) loads the tree again and publishes it;
---meanwhile the readers serve the last snapshot. Call it in `init_worker_by_lua*` of every
---worker. `dict` holds one cache: give it room for two snapshots (`info().bytes`); a snapshot
---that does not fit is not published, and reads return `ERANGE` until one fits.
---
---Errors: bad arguments raise (naming the argument); calling it in `init_by_lua*` raises;
---`nil, msg, code` as `one_worker`.
---@param dict string|table The `lua_shared_dict`'s name, or `ngx.shared.NAME`.
---@param path string The root of the cached tree.
---@param opts zklock.adapters.openresty.SharedCacheOptions `hosts` is required.
---@return zklock.adapters.openresty.SharedCache? cache
---@return string? msg
---@return string? code
function zngx.shared_cache(dict, path, opts) end

---Options of `shared_cache`.
---@class zklock.adapters.openresty.SharedCacheOptions
---@field hosts string Required: as for `zklock.connect`.
---@field depth? integer As for `client:cache` (default: the whole tree below `path`).
---@field max_nodes? integer As for `client:cache` (default 100,000); past it, reads return `ERANGE`.
---@field max_watch_bytes? integer The keeper's watch budget, as `zklock.connect`'s (default 900,000: the watches' SetWatches must stay under the server's `jute.maxbuffer`); past it, reads return `ERANGE`.
---@field data? boolean As for `client:cache`: `false` keeps no data (reads give `false`).
---@field election? string Where the workers of an instance elect their keeper: `<election>/<instance id>` (default `"/zklock/openresty-keepers"`); the instance id (`"<host>-<pid of its first worker>"`) is kept in the dict, which a reload keeps.
---@field id? string The keeper election's participant id (default `"<host name>/<worker pid>"`).
---@field session_timeout? number Seconds (default 10): how long a crashed keeper's worker keeps the election before another takes over.
---@field acl? zklock.ACL ACL of the election's nodes.

---A reader of the cache published in `dict` by the keeper of this instance, for code that does
---not call `shared_cache` itself (any worker, any phase).
---@param dict string|table The `lua_shared_dict`'s name, or `ngx.shared.NAME`.
---@return zklock.adapters.openresty.SharedCache reader
function zngx.cache_reader(dict) end

---What `shared_cache` and `cache_reader` return: reads of the newest published snapshot, from
---the shared dict (parsed once per version in each worker; when nothing changed a read costs two
---dict gets). Errors of the reads: `ECONNECTING` (nothing published yet), `ZNONODE` (not in the
---cache), `ERANGE` (past `max_nodes`, or the snapshot does not fit in the dict), `EFORMAT` (the
---dict holds something else), `EBUSY` (it was replaced three times during one read).
---@class zklock.adapters.openresty.SharedCache
local SharedCache = {}

---A node's data (`false` when the cache keeps no data) and stat `{ czxid, mzxid, version }`.
---@param path? string Default: the root.
---@return string|false|nil data
---@return table|string stat_or_msg
---@return string? code
function SharedCache:get(path) end

---The sorted names of a node's cached children.
---@param path? string Default: the root.
---@return string[]? names
---@return string? msg
---@return string? code
function SharedCache:children(path) end

---The version of the newest snapshot (0: none yet). It grows with every publish: poll it to
---notice a change (one dict get).
---@return integer
function SharedCache:version() end

---`{ version, pid, at, nodes, root, bytes }` of the newest snapshot: the keeper worker's pid
---that published it, `ngx.now()` then, the node count, the root path, the snapshot's size.
---@return table? info
---@return string? msg
---@return string? code
function SharedCache:info() end

---This worker is the keeper now.
---@return boolean
function SharedCache:keeping() end

---Leave the keeper election in this worker (as `OneWorker:close()`); reads go on.
function SharedCache:close() end

return zngx
