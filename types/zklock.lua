---@meta zklock

-- The documented Lua API of zklock: LuaLS type stubs (point your editor's `workspace.library`
-- at `types/`) and the one source of docs/api.md (`lua5.4 scripts/apidoc.lua` writes it;
-- `lua5.4 scripts/apidoc.lua --check` fails when it is stale or when a public function or
-- option of the code has no entry here). Conventions the generator relies on:
--   * a `---` block before `local x = {}` (or `a.b = {}`) with `---@class` names a class; the
--     local's name is how docs/api.md shows its methods (`client:mutex`, `zklock.connect`);
--   * a `---` block before `function x.f(...) end` / `function x:f(...) end` documents it:
--     free text (markdown), `---@param name[?] type text`, `---@return type [name] # text`;
--     a paragraph starting with `Errors:` is shown as the function's errors;
--   * options tables are classes whose name ends in `Options`, taken by a `---@param opts?`.

---zklock: distributed locks over ZooKeeper, wire-compatible with Apache Curator.
---
---```lua
---local zklock = require("zklock")
---local client = assert(zklock.connect("127.0.0.1:2181", { session_timeout = 10 }))
---```
---
---**Conventions.** Expected failures return `nil, "CODE: message", "CODE"` (test `not ok`,
---not `== nil`); misuse (bad arguments, releasing what you do not hold, a closed client)
---raises an error naming the function and the argument. Durations are seconds unless the
---name ends in `_ms`. Waiting calls (`acquire`, `release`, `sleep`, the znode calls) suspend
---the calling coroutine when an adapter owns it (`client:spawn`, cqueues, luv, OpenResty) and
---block otherwise, driving the client meanwhile.
---@class zklock
---@field errno zklock.errno Error codes by name (`zklock.errno.ETIMEDOUT == -1001`).
---@field retry zklock.retry Retry policies for the `retry` option of every acquire.
---@field metrics zklock.metrics Metrics sinks (`prometheus`, `shared_dict`) and the default sink (`set_default`).
---@field _NAME string `"zklock"`.
---@field _VERSION string The library version (`"X.Y.Z"`, from `ZKL_VERSION` in zklock.h).
local zklock = {}

---Connect to a ZooKeeper ensemble and wait for the session (unless `opts.wait == false`).
---
---Errors: `nil, "ETIMEDOUT: could not connect to ...", "ETIMEDOUT"` when no session is up
---within `connect_timeout`; `nil, msg, code` from the C core for a client it cannot make.
---Raises on a malformed `hosts` string or an unknown or invalid option.
---@param hosts string `"host:port[,host:port...][/chroot]"`.
---@param opts? zklock.ConnectOptions
---@return zklock.Client? client The connected client (state `CONNECTED`, or `CONNECTING` with `wait = false`).
---@return string? msg `"CODE: message"` on failure.
---@return string? code The error code's name on failure.
function zklock.connect(hosts, opts) end

---Drive several clients' builtin schedulers together until every coroutine spawned on any of
---them (`client:spawn`) has finished. Uses only the clients' host API (`fd`, `next_timeout_ms`,
---`process`, `tasks`).
---
---Errors: `nil, "ETIMEDOUT: ...", "ETIMEDOUT"` when `timeout` passes first. Raises if `clients`
---is not a non-empty array of clients.
---@param clients zklock.Client[] The clients to drive.
---@param timeout? number Seconds; nil = until done.
---@return true? ok
---@return string? msg
---@return string? code
function zklock.run(clients, timeout) end

---What kind of zklock object `x` is.
---@param x any
---@return "client"|"mutex"|"read lock"|"write lock"|"semaphore"|"semaphore mutex"|"lease"|"multi-lock"|"transaction"|"watch"|"leader"|"leader latch"|"election"|"shared count"|"atomic long"|"double barrier"|"zookeeper lock"|"queue"|"cache"|"member"|"group"|nil kind `nil` for anything else.
function zklock.type(x) end

---The text of an error code.
---@param code integer|string A code (`-1001`) or its name (`"ETIMEDOUT"`).
---@return string text `"unknown error"` for an unknown code.
function zklock.strerror(code) end

---Whether a write that failed with `code` may have been applied: true when the request may have
---reached the server and no answer of the server came back (`ZCONNECTIONLOSS`,
---`ZOPERATIONTIMEOUT`, `ZRUNTIMEINCONSISTENCY`, `ZAUTHFAILED`, `ZCLOSING`, `ZSYSTEMERROR`,
---`ZSSLCONNECTIONERROR`, and zklock's `ETIMEDOUT`, `ESESSION`, `ECLOSED`: the list is
---`ZKL_OUTCOME_UNKNOWN_MAP` in zklock.h). Then the write (a create, set, delete, transaction, a
---queue take) was applied or not: read before you retry it, or it may be applied twice. Any other
---failure of a write is the server's answer: nothing was applied. Messages say the same: "outcome
---unknown: the operation may have been applied" (a queue take: "the item may have been taken").
---
---```lua
---local ok, err, code = t:commit()
---if not ok and zklock.outcome_unknown(code) then --[[ read back before retrying ]] end
---```
---
---Errors: raises on a string that is not a code name (see `zklock.errno`) or a value that is no
---code.
---@param code string|integer|nil A code's name (`"ZCONNECTIONLOSS"`) or number; `nil` gives false.
---@return boolean unknown
function zklock.outcome_unknown(code) end

---Options of `zklock.connect`.
---@class zklock.ConnectOptions
---@field session_timeout? number Session timeout requested from the server, in seconds (default 10; the server may bound it).
---@field connect_timeout? number Seconds to wait for the first session (default `session_timeout`; `math.huge`: forever; 0: fail at once unless connected). Not used with `wait = false`.
---@field op_timeout? number Default timeout of the plain znode calls (get, set, create, ...), in seconds (default: the requested `session_timeout`; `math.huge`: none). A call's own `{ timeout = }` overrides it.
---@field max_data? integer Largest data (plus path) a create or set may send, in bytes (default 1047552: the server's jute.maxbuffer, 1 MiB, less overhead). Larger data raises instead of making the server drop the connection.
---@field max_watch_bytes? integer The watch budget of this client's caches (`client:cache`), in bytes (default 900000). The 3.8 C client sends every watch it holds again in ONE SetWatches message when it reconnects, and a server drops a message longer than its `jute.maxbuffer` (1 MiB by default): the client would then reconnect for ever. Counted as that message is: 28 bytes, and per watch 4 + its path's length with the chroot (a path counts once per kind however many caches watch it); the caches' watches (a data watch per node, a children watch per node above the depth limit), plus the watches armed through `get`/`exists`/`children` with `watch = true`, elections, groups' members and revocation while they are armed. Not counted: the watches of lock, semaphore, latch and queue waiters (one short path each). A stopped or closed cache gives its share back (the ZooKeeper client forgets its watchers too). A cache whose growth would pass it stops (`ERANGE`); other watches are counted but never refused. Raise it only with a larger `jute.maxbuffer` on every server.
---@field identity? string Data stored in this client's lock nodes (default: the host name).
---@field log? fun(line: string, level: string) Receives zklock's own events (`zklock <level>: <message>`: a hold released because its owner coroutine ended, an `on_lost` handler that raised, a failed release at the end of a `<close>` scope, a granted session timeout other than the one asked for) and the ZooKeeper client's log lines; `level` is "error", "warn", "info" or "debug". Default: one line each to stderr.
---@field log_level? "none"|"error"|"warn"|"info"|"debug" The least level passed on (default `"warn"`); the ZooKeeper client's own lines are passed on only when `log` or `log_level` is given.
---@field keepalive? boolean A background thread drives the connection while the script's thread blocks (default false; never inside nginx). See docs/openresty.md, "Blocking scripts".
---@field wait? boolean `false`: return at once in state `CONNECTING`; operations started meanwhile are sent once connected, their timeouts running from the call (default true).
---@field metrics? zklock.MetricsSink Receives this client's metrics (default: the sink given to `zklock.metrics.set_default`, if any). See docs/recipes.md, "Metrics and lock events".
---@field metric_label? fun(path: string, recipe: string): string The `name` label of a lock object without a `metric` option, from its path and recipe (e.g. a path template). Default: `"-"` (raw paths never become labels unless this function returns them).
---@field lock_events? "none"|"error"|"warn"|"info"|"debug" Level at which lock events (granted, released, lost, suspended, timed out, failed: one line each with path, token and wait or hold time) go to the `log` function (default `"debug"`; shown only when `log_level` lets that level through).

---Error codes by name: zklock's own (`E...`, below -1000) and ZooKeeper's (`Z...`). Every code a
---zklock module returns is here (one table for C and Lua: `ZKL_ERRNO_MAP` in zklock.h). Failures
---return `nil, "CODE: message", "CODE"`: the name is the third return value, and
---`zklock.strerror` gives the table's text.
---@class zklock.errno
---@field OK integer 0: success
---@field ZSYSTEMERROR integer -1: ZooKeeper system error
---@field ZRUNTIMEINCONSISTENCY integer -2: ZooKeeper runtime inconsistency
---@field ZDATAINCONSISTENCY integer -3: ZooKeeper data inconsistency
---@field ZCONNECTIONLOSS integer -4: connection to the server lost
---@field ZMARSHALLINGERROR integer -5: error while marshalling or unmarshalling data
---@field ZUNIMPLEMENTED integer -6: operation not implemented by the server
---@field ZOPERATIONTIMEOUT integer -7: operation timed out (no answer from the server)
---@field ZBADARGUMENTS integer -8: invalid arguments
---@field ZINVALIDSTATE integer -9: invalid ZooKeeper handle state
---@field ZNEWCONFIGNOQUORUM integer -13: no quorum for new config
---@field ZRECONFIGINPROGRESS integer -14: reconfiguration in progress
---@field ZSSLCONNECTIONERROR integer -15: SSL connection error
---@field ZAPIERROR integer -100: ZooKeeper API error
---@field ZNONODE integer -101: node does not exist
---@field ZNOAUTH integer -102: not authorized
---@field ZBADVERSION integer -103: version conflict
---@field ZNOCHILDRENFOREPHEMERALS integer -108: ephemeral nodes may not have children
---@field ZNODEEXISTS integer -110: node already exists
---@field ZNOTEMPTY integer -111: node has children
---@field ZSESSIONEXPIRED integer -112: session expired
---@field ZINVALIDCALLBACK integer -113: invalid callback
---@field ZINVALIDACL integer -114: invalid ACL
---@field ZAUTHFAILED integer -115: authentication failed
---@field ZCLOSING integer -116: ZooKeeper handle is closing
---@field ZNOTHING integer -117: no server responses to process
---@field ZSESSIONMOVED integer -118: session moved to another server
---@field ZNOTREADONLY integer -119: state-changing request to a read-only server
---@field ZEPHEMERALONLOCALSESSION integer -120: ephemeral node on a local session
---@field ZNOWATCHER integer -121: watcher not found
---@field ZRECONFIGDISABLED integer -123: reconfiguration disabled
---@field ZSESSIONCLOSEDREQUIRESASLAUTH integer -124: session closed: SASL authentication required
---@field ZTHROTTLEDOP integer -127: operation throttled by the server
---@field ETIMEDOUT integer -1001: timed out (an acquire's or a call's timeout passed; never retried).
---@field ECANCELED integer -1002: canceled (`cancel()` withdrew the acquire).
---@field ESESSION integer -1003: the ZooKeeper session expired while waiting (retryable: the client opens a new session by itself).
---@field ECLOSED integer -1004: the client was closed (`client:close()`) while waiting.
---@field ELOST integer -1005: the lock or lease was lost with the session (release, or re-acquire before releasing).
---@field EINVAL integer -1006: invalid argument
---@field ENOMEM integer -1007: out of memory
---@field ENOTHELD integer -1008: not held
---@field ENOTFOUND integer -1009: no such operation
---@field ESEQWRAP integer -1010: sequence counter wrapped: names no longer sort in queue order
---@field ESYSTEM integer -1011: system call failed
---@field EOWNNODE integer -1012: the lock's own queue node disappeared
---@field EDEADLK integer -1013: would deadlock (acquiring the write side while holding the read side).
---@field EFORMAT integer -1014: not in the wire format the recipe expects (a Curator queue item that is no `DistributedQueue` message).
---@field EDATA integer -1015: the node's data is not what the recipe stores there (a shared count's or atomic long's node of the wrong size).
---@field ERANGE integer -1016: value out of the range this Lua represents exactly (a long beyond 2^53 on a Lua without 64-bit integers).
---@field ECONNECTING integer -1017: no session yet: the client is still connecting (`zookeeper_lock` started before the first session).
---@field EEXIST integer -1018: already exists (a second OpenResty client in one worker).
---@field ESTALE integer -1019: stale fencing token: older than one the resource took (`zklock.testing` fenced resource).
---@field EBUSY integer -1020: the resource kept changing: attempts used up (`zklock.testing` fenced resource).
zklock.errno = {}

---A retry policy: called after a failed attempt with the attempt number (1, 2, ...) and the
---error code's name; returns the seconds to wait before trying again, or nil to give up.
---@alias zklock.RetryPolicy fun(attempt: integer, code: string): number?

---Retry policies for the `retry` option of `acquire` and `acquire_many`:
---`m:acquire(5, { retry = zklock.retry.exponential{ base = 0.1, max = 5, attempts = 5 } })`.
---An acquire retries only failures a new attempt can cure (`ESESSION` and connection errors:
---`ZCONNECTIONLOSS`, `ZOPERATIONTIMEOUT`, `ZRUNTIMEINCONSISTENCY`, `ZSESSIONEXPIRED`,
---`ZSESSIONMOVED`), never a timeout, a cancel or a closed client; all attempts stay within the
---acquire's timeout.
---@class zklock.retry
zklock.retry = {}

---A policy that never retries.
---@return zklock.RetryPolicy policy
function zklock.retry.none() end

---Retry up to `attempts` times, waiting `delay` seconds each time.
---
---Errors: raises on an unknown or invalid option.
---@param opts? zklock.retry.FixedOptions
---@return zklock.RetryPolicy policy
function zklock.retry.fixed(opts) end

---Options of `zklock.retry.fixed`.
---@class zklock.retry.FixedOptions
---@field delay? number Seconds between attempts (default 0.5).
---@field attempts? integer Retries after the first attempt (default 3).

---Retry up to `attempts` times, waiting `base * 2^(attempt-1)` seconds, at most `max`, with up
---to 50% random jitter subtracted (so many clients do not retry in step).
---
---Errors: raises on an unknown or invalid option.
---@param opts? zklock.retry.ExponentialOptions
---@return zklock.RetryPolicy policy
function zklock.retry.exponential(opts) end

---Options of `zklock.retry.exponential`.
---@class zklock.retry.ExponentialOptions
---@field base? number First delay in seconds (default 0.1).
---@field max? number Longest delay in seconds (default 5).
---@field attempts? integer Retries after the first attempt (default 5).
---@field jitter? boolean Subtract up to 50% random jitter (default true).

---Whether an acquire retries a failure with this code.
---@param code string An error code's name (`"ESESSION"`).
---@return boolean
function zklock.retry.retryable(code) end

---Internal helper of the lock modules (public for custom recipes): run `attempt(left)` until it
---succeeds, fails for good, or `policy` gives up; `left` is the time remaining of `timeout`.
---@param policy zklock.RetryPolicy?
---@param timeout number? Seconds; nil = no deadline.
---@param now_ms fun(): number Monotonic clock in milliseconds.
---@param sleep fun(seconds: number) Waits between attempts.
---@param attempt fun(left: number?): any, string?, string? Returns `ok, msg, code, ...`.
---@return any ... What the last attempt returned.
function zklock.retry.run(policy, timeout, now_ms, sleep, attempt) end

---Internal helper of the lock modules: validate `{ retry = }` (argument `argn` of `fname`),
---then call `once(timeout)` directly or under the policy, sleeping on `client` between attempts.
---@param client zklock.Client
---@param fname string Function name for error messages.
---@param argn integer Argument position of `opts` for error messages.
---@param timeout number?
---@param opts zklock.AcquireOptions?
---@param once fun(left: number?): any, string?, string?
---@return any ...
function zklock.retry.acquire(client, fname, argn, timeout, opts, once) end

---Internal helper of the lock modules: validate the options of an acquire and return its retry
---policy. Raises on an unknown or invalid option.
---@param fname string
---@param argn integer
---@param opts zklock.AcquireOptions?
---@return zklock.RetryPolicy? policy
function zklock.retry.option(fname, argn, opts) end

---ACL of lock nodes and created znodes: `"open"` (default: everyone may do everything),
---`"creator"` (the creating session's authenticated identities may do everything, everyone may
---read), or a list of entries.
---@alias zklock.ACL "open"|"creator"|zklock.ACLEntry[]

---One entry of an ACL list.
---@class zklock.ACLEntry
---@field scheme string `"digest"`, `"world"`, `"ip"`, ...
---@field id string The identity, e.g. `"alice:<base64 sha1>"` for `digest`.
---@field perms string|integer Letters from `"rwcda"`, or an integer 1..31.

---A connection to ZooKeeper (one session at a time, renewed by itself after an expiry), its
---builtin scheduler, plain znode calls, lock constructors, and the host API that event loops
---use (docs/design.md, "Host API").
---@class zklock.Client
---@field hosts string The `hosts` string given to `zklock.connect`.
---@field state "CONNECTING"|"CONNECTED"|"SUSPENDED"|"AUTH_FAILED"|"CLOSED" The session state as last processed.
local client = {}

---A mutex (Curator `InterProcessMutex`): fair, reentrant per coroutine.
---
---Errors: raises on a closed client, an invalid path or an invalid option.
---@param path string Lock path, e.g. `"/locks/orders"`.
---@param opts? zklock.MutexOptions
---@return zklock.Lock mutex
function client:mutex(path, opts) end

---A read-write lock (Curator `InterProcessReadWriteLock`): two lock objects on one path.
---Readers share; a reader waits only for the first earlier writer; the writer may downgrade
---(acquire `read` while holding `write`); upgrading fails with `EDEADLK`.
---
---Errors: raises on a closed client, an invalid path or an invalid option.
---@param path string
---@param opts? zklock.MutexOptions
---@return zklock.RWLock rwlock
function client:rwlock(path, opts) end

---A counting semaphore (Curator `InterProcessSemaphoreV2`): leases under `<path>/leases`, its
---internal mutex under `<path>/locks`, as Curator lays them out.
---
---Errors: raises on a closed client, an invalid path, `max_leases` not an integer >= 1, or an
---invalid option.
---@param path string
---@param max_leases integer Number of leases (1..2^31-1).
---@param opts? zklock.LockOptions
---@return zklock.Semaphore semaphore
function client:semaphore(path, max_leases, opts) end

---A semaphore mutex (Curator `InterProcessSemaphoreMutex`): one lease, not reentrant, released
---by any coroutine.
---
---Errors: raises on a closed client, an invalid path or an invalid option.
---@param path string
---@param opts? zklock.LockOptions
---@return zklock.SemaphoreMutex mutex
function client:semaphore_mutex(path, opts) end

---Several locks of this client taken as one (Curator `InterProcessMultiLock`), all or nothing.
---
---Errors: raises on a closed client, an empty list, a component that is not a mutex, read or
---write lock or semaphore mutex, one of another client, one listed twice, or an invalid option.
---@param locks (zklock.Lock|zklock.SemaphoreMutex)[] The components.
---@param opts? zklock.MultiLockOptions
---@return zklock.MultiLock multilock
function client:multilock(locks, opts) end

---Options of every lock constructor (`mutex`, `rwlock`, `semaphore`, `semaphore_mutex`).
---@class zklock.LockOptions
---@field max_hold? number Seconds: every grant is bounded to this long; then it is lost (`on_lost` hears `"LOST"` with why `"max_hold"`, once) and its node deleted after the handler ran, so the next waiter comes after it (issue 25 part 4; default: unbounded).
---@field acl? zklock.ACL ACL of the queue nodes and of the parents the lock creates (default `"open"`).
---@field metric? string The `name` label of this object's metrics (default: the client's `metric_label`, else `"-"`).

---Options of `client:mutex` and `client:rwlock`.
---@class zklock.MutexOptions
---@field max_hold? number Seconds: every grant is bounded to this long; then it is lost (`on_lost` hears `"LOST"` with why `"max_hold"`, once) and its node deleted after the handler ran, so the next waiter comes after it (issue 25 part 4; default: unbounded).
---@field acl? zklock.ACL ACL of the queue nodes and of the parents the lock creates (default `"open"`).
---@field metric? string The `name` label of this object's metrics (default: the client's `metric_label`, else `"-"`).
---@field data? string The data of this lock's queue nodes (default: the client's `identity`), e.g. a participant id as Curator's LeaderSelector writes it. Path and data together must fit the client's `max_data`.
---@field metric? string The `name` label of this object's metrics (default: the client's `metric_label`, else `"-"`).

---Join the leader election at `path` (Curator `LeaderSelector`; the participants queue on a
---mutex at `path` whose node data is their `id`). A coroutine spawned on the client queues and,
---while it holds the mutex, runs `fn(leader)`; the term ends when `fn` returns or raises (the
---node is deleted) or when the hold is `LOST` (`is_leader()` turns false at once; zklock cannot
---interrupt a coroutine, so `fn` should wait through `leader:sleep` or check `is_leader()`).
---By default (`suspended = "keep"`) `SUSPENDED` keeps leadership (LOST is reported before the
---server can expire the session); `suspended = "stop"` ends it for `is_leader()` and
---`leader:sleep()` at once, as OpenResty's `one_worker` does (the same election engine runs
---both); see docs/recipes.md, "Leader election". With `requeue = true` it queues again after each term.
---
---```lua
---local l = client:leader("/election/jobs", function(l)
---  while l:sleep(1) do run_job(l:token()) end
---end, { id = "worker-1", requeue = true })
---```
---
---Errors: raises on a closed client, an invalid path, `fn` not a function or an invalid option.
---@param path string The election path.
---@param fn fun(leader: zklock.Leader) Run while leader.
---@param opts? zklock.LeaderOptions
---@return zklock.Leader leader
function client:leader(path, fn, opts) end

---Options of `client:leader`.
---@class zklock.LeaderOptions
---@field id? string The participant id, written as the node data (default: the client's `identity`).
---@field requeue? boolean Queue again after each term (Curator's `autoRequeue`; default false).
---@field acl? zklock.ACL ACL of the nodes (default `"open"`).
---@field suspended? "keep"|"stop" What `SUSPENDED` does to a term: `"keep"` (default) leaves it leading (`LOST` ends it); `"stop"` makes `is_leader()` false and `leader:sleep()` return false at once (`fn` should return then; the node is deleted when it does).
---@field max_hold? number Seconds a term may last: then it is lost (`on_lost` hears `("LOST", leader, "max_hold")` once, `is_leader()` turns false, `leader:sleep()` returns false) and the node is deleted, so the next participant leads; `fn` should return then (zklock cannot interrupt it).

---A read-only view of the leader election at `path`: who leads (the participant id and the
---fencing token of the head node), that nobody does, and every change, without joining (it
---creates no node and is not among the participants). It sees zklock's and Curator's
---participants alike: `LeaderSelector` / `client:leader` (mutex nodes) and `LeaderLatch` /
---`client:latch` (latch nodes), ordered as they order themselves. One children watch on the
---election dir, armed again after every change (an exists watch while the dir is missing);
---reports run from the client's event dispatch, so the client must be pumped (a blocking call,
---`client:run`, a host adapter).
---
---```lua
---local e = client:election("/election/jobs")
---e:on_change(function(event, _, id, token) print(event, id, token) end) -- "leader" | "ended" | "none"
---local id, token = e:leader()                                        -- false: nobody leads
---```
---
---Errors: raises on a closed client or an invalid path.
---@param path string The election path (of a `client:leader` / `client:latch` / Curator election).
---@return zklock.Election election
function client:election(path) end

---Join the leader latch at `path` (Curator `LeaderLatch`: `_c_<uuid>-latch-<seq10>` nodes whose
---data is the `id`; the first leads, on a node the core checked to be owned by the current
---session). Joins at once through a coroutine spawned on the client; after `LOST` it joins
---again with a new node on the new session (leadership false in between). `SUSPENDED` keeps
---leadership. Lives until `latch:close()` or the client closes.
---
---```lua
---local latch = client:latch("/election/cron", { id = "host-a" })
---latch:on_change(function(event) print("leader:", event == "LEADER") end)
---if latch:await(10) then ... end
---```
---
---Errors: raises on a closed client, an invalid path or an invalid option.
---@param path string The latch path.
---@param opts? zklock.LatchOptions
---@return zklock.Latch latch
function client:latch(path, opts) end

---Options of `client:latch`.
---@class zklock.LatchOptions
---@field id? string The participant id, written as the node data (default: the client's `identity`).
---@field acl? zklock.ACL ACL of the nodes (default `"open"`).
---@field max_hold? number Seconds each leadership may last (bounded terms): then the latch reports it lost (`on_lost` hears `("LOST", latch, "max_hold")` once, `on_change` hears `"LOST"`), deletes its node after the handler ran, and joins again at the back, so another participant leads (default: unbounded).

---Options of `client:multilock`.
---@class zklock.MultiLockOptions
---@field max_hold? number Seconds: every grant is bounded to this long; then it is lost (`on_lost` hears `"LOST"` with why `"max_hold"`, once) and its node deleted after the handler ran, so the next waiter comes after it (issue 25 part 4; default: unbounded).
---@field order? "given"|"path" Acquire in the given order (default) or sorted by path (a global order: two multi-locks over the same locks never deadlock).
---@field deadline? number Seconds shared by all components: the default timeout of `acquire`.
---@field per_lock_timeout? number Seconds each component may wait at most.
---@field rollback? "reverse"|"given" Order in which components already taken are released when one fails (default `"reverse"`).
---@field metric? string The `name` label of the multi-lock's own metrics (its components report under their own).

---Run `fn(...)` in a new coroutine under the client's builtin scheduler; it starts on the next
---`process()` (`client:run`, `zklock.run`, a blocking wait, or a host pump).
---
---Errors: raises on a closed client or if `fn` is not a function.
---@param fn function
---@param ... any Arguments for `fn`.
---@return thread co
function client:spawn(fn, ...) end

---Number of coroutines spawned on this client that have not finished.
---@return integer
function client:tasks() end

---Drive the client until every spawned coroutine has finished.
---
---Errors: `nil, "ETIMEDOUT: ...", "ETIMEDOUT"` when `timeout` passes first.
---@param timeout? number Seconds; nil = until done.
---@return true? ok
---@return string? msg
---@return string? code
function client:run(timeout) end

---Sleep: suspends a coroutine an adapter owns, otherwise blocks while driving the client.
---
---Errors: raises on a closed client or an invalid duration.
---@param seconds number Seconds (fractions allowed).
function client:sleep(seconds) end

---Read a znode. With `{ watch = true }` the read also arms a one-shot ZooKeeper watch on the
---node and returns a `zklock.Watch` as its third value (only when the read found the node: a
---missing node returns the ZNONODE error and arms nothing).
---
---Errors: `nil, "ZNONODE: get /x: node does not exist", "ZNONODE"` and other ZooKeeper codes;
---`ECLOSED` if the client is closed while waiting. Raises on a closed client, a path that is
---not absolute, or an unknown or invalid option.
---@param path string Absolute znode path.
---@param opts? zklock.ReadOptions
---@return string? data The node's data (`""` if none).
---@return zklock.Stat|string stat The node's stat, or the error message.
---@return zklock.Watch|string|nil watch With `watch = true`: the watch; on error: the code.
function client:get(path, opts) end

---List a znode's children. With `{ watch = true }` also returns a `zklock.Watch` that fires
---`"child"` when a child is added or removed (`"deleted"` when the node itself goes).
---
---Errors: as `client:get`.
---@param path string
---@param opts? zklock.ReadOptions
---@return string[]? names Child names, unsorted.
---@return string|zklock.Watch|nil msg The error message, or with `watch = true` the watch.
---@return string? code
function client:children(path, opts) end

---Whether a znode exists. With `{ watch = true }` also returns a `zklock.Watch`, also for a
---missing node: then it fires `"created"` when the node is made.
---
---Errors: as `client:get`, except that a missing node returns `false`.
---@param path string
---@param opts? zklock.ReadOptions
---@return zklock.Stat|false|nil stat The stat, `false` if there is no such node, nil on error.
---@return string|zklock.Watch|nil msg The error message, or with `watch = true` the watch.
---@return string? code
function client:exists(path, opts) end

---Options of the reads `get`, `children` and `exists`.
---@class zklock.ReadOptions
---@field timeout? number Seconds before the call gives up with `ETIMEDOUT` (default: the client's `op_timeout`; `math.huge`: never).
---@field watch? boolean Arm a one-shot watch and return it (a `zklock.Watch`). While a watch armed by an earlier read of the same kind on the same path of this client has not fired, the read goes without a watch of its own and returns that same watch: one ZooKeeper watch, however many coroutines wait on it.

---Ask the holder of a lock or lease node to let it go (Curator's cooperative revocation, as
---`Revoker.attemptRevoke`): writes `"__REVOKE__"` into the node's data. A holder that set
---`on_revoke` (zklock) or called `makeRevocable` (Curator) is told and decides; any other holder
---is unaffected. Works from any client, for mutexes, read-write lock sides, semaphore leases and
---semaphore mutexes.
---
---Errors: `nil, "ZNONODE: revoke /x: no such node ...", "ZNONODE"` when the node is gone (its
---holder released it); `nil, "EINVAL: ...", "EINVAL"` for a node that is not ephemeral (not a
---lock or lease node: its data is left alone); other ZooKeeper codes as `nil, msg, code`. Raises
---on a closed client, a node that is not an absolute path, or an unknown option.
---@param node string Full path of the holder's node (`lock:node()`, `lease:node()`, `participants()`).
---@param opts? zklock.CallOptions
---@return true? ok
---@return string? msg
---@return string? code
function client:revoke(node, opts) end

---Create a znode.
---
---Errors: `nil, msg, code` with a ZooKeeper code (`ZNODEEXISTS`, `ZNONODE` without `parents`,
---`ZNOAUTH`, ...) or `ECLOSED`. Raises on a closed client, a non-absolute path, data that is not
---a string, numeric flags (`opts` must be a table), a container that is ephemeral or
---sequential, or an unknown or invalid option.
---@param path string
---@param data? string Node data (default `""`).
---@param opts? zklock.CreateOptions Named options only.
---@return string? path The created path (with the sequence suffix for `sequential`).
---@return string? msg
---@return string? code
function client:create(path, data, opts) end

---A new, empty transaction (ZooKeeper's multi): ops added with `create`, `set`, `delete` and
---`check` are applied by `commit` in order, all or none, in one request.
---
---```lua
---local res = assert(client:transaction():create("/jobs/j-", "x", { sequential = true })
---  :set("/jobs/state", "running", 3):commit())
---print(res[1].created)
---```
---
---Errors: raises on a closed client.
---@return zklock.Transaction txn
function client:transaction() end

---A node, its children or the tree below it (`opts.depth`) held in memory and kept current by
---one-shot watches, armed again after each change (see `zklock.Cache`). Returns at once; the
---first sync runs while the client is pumped (`cache:await(timeout)` waits for it). Costs one
---get and one watch per node, one listing and one more watch per node above the depth limit.
---
---Errors: raises on a bad path, a bad option or a closed client.
---@param path string
---@param opts? zklock.CacheOptions
---@return zklock.Cache cache
function client:cache(path, opts) end

---An ephemeral node that stays: made at `path` (its missing parents as containers), and made
---again whenever it is found deleted (someone deleted it, its session ended) and after every
---reconnection, at the name it got first; its data can be changed (`member:set`). On the wire
---this is Curator's `PersistentNode` in an ephemeral mode, and `GroupMember` when `path` is
---`<group>/<member id>` (see `zklock.Member`). Returns at once; `member:await(timeout)` waits
---for the node.
---
---Errors: raises on a bad path (`"/"` included), data that is not a string, a bad option or a
---closed client.
---@param path string The node (with `protected`/`sequential`: the name the generated one is made from).
---@param data? string Its data (default `""`).
---@param opts? zklock.MemberOptions
---@return zklock.Member member
function client:member(path, data, opts) end

---The members of a group (the children of `path`) and their data, kept current with a cache
---of depth 1 (`client:cache`), as Curator's `GroupMember` keeps them: a member's id is its
---node's name. Returns at once; `group:await(timeout)` waits for the first sync.
---
---Errors: raises on a bad path, a bad option or a closed client.
---@param path string
---@param opts? zklock.GroupOptions
---@return zklock.Group group
function client:group(path, opts) end

---A shared count on the wire like Curator's `SharedCount`: the node's data is a 4-byte big-endian
---signed int. Nothing is sent until a call; the first call that finds the node missing makes it
---(and its missing parents, as containers) holding `seed`.
---
---Errors: raises on a bad path, a seed that is not a 32-bit integer, or a closed client.
---@param path string
---@param seed? integer The value the node is made with (default 0).
---@return zklock.SharedCount sc
function client:shared_count(path, seed) end

---A shared long on the wire like Curator's `DistributedAtomicLong`: the node's data is an 8-byte
---big-endian signed long (no data reads 0). Every change is an optimistic read and versioned
---write, repeated under `opts.retry` after a lost race; with `opts.lock`, lost races are then
---promoted to a mutex at the lock path (Curator's `PromotedToLock`, an `InterProcessMutex` at
---that path) and tried again while holding it. Without 64-bit integers (Lua 5.1, 5.2, LuaJIT)
---values must lie within +-(2^53 - 1); see docs/recipes.md, "Shared values".
---
---Errors: raises on a bad path or option, or a closed client.
---@param path string
---@param opts? zklock.AtomicLongOptions
---@return zklock.AtomicLong al
function client:atomic_long(path, opts) end

---A double barrier on the wire like Curator's `DistributedDoubleBarrier`: members are ephemeral
---nodes named by a random UUID under `path`, plus a `ready` node once `member_qty` are in.
---
---Errors: raises on a bad path, a `member_qty` that is not an integer >= 1, or a closed client.
---@param path string
---@param member_qty integer
---@return zklock.DoubleBarrier barrier
function client:double_barrier(path, member_qty) end

---A lock that shares a directory with ZooKeeper's own lock recipe
---(`org.apache.zookeeper.recipes.lock.WriteLock`): nodes `<path>/x-<session id in decimal>-<seq10>`,
---ordered by their sequence as WriteLock's `ZNodeName` does, so the two exclude each other.
---Not reentrant; one hold per object. Not for directories shared with Curator or zklock mutexes
---(they order names differently; docs/design.md).
---
---Errors: raises on a bad lock path (not the root) or option, or a closed client.
---@param path string The lock directory (WriteLock's `dir`).
---@param opts? zklock.ZookeeperLockOptions
---@return zklock.ZookeeperLock lock
function client:zookeeper_lock(path, opts) end

---A distributed FIFO queue on `path` (ZooKeeper's queue recipe and Curator's
---`SimpleDistributedQueue` protocol: `qn-` persistent sequential nodes). Nothing is sent until a
---call on it.
---
---```lua
---local q = client:queue("/queues/jobs")
---q:put("job 1")
---local job = q:take(30)
---```
---
---With `{ format = "curator" }` the queue is Curator's `DistributedQueue` instead (`queue-`
---nodes, framed messages of one or more items); `lock_path` adds its lock-safe mode (an item is
---removed only after its consumer's `fn` finished; see `queue:take`):
---
---```lua
---local q = client:queue("/queues/mail", { format = "curator", lock_path = "/queues/mail-locks" })
---q:put({ "to:a", "to:b" })                         -- one message, two items
---q:take(30, function(items, msg) send(items) end)   -- removed after send returned
---```
---
---Errors: raises on a path that is not an absolute znode path, a bad option, or a closed client.
---@param path string
---@param opts? zklock.QueueOptions
---@return zklock.Queue queue
function client:queue(path, opts) end

---Options of `client:queue`.
---@class zklock.QueueOptions
---@field format? "zookeeper"|"curator" `"zookeeper"` (default): ZooKeeper's queue recipe and Curator's `SimpleDistributedQueue` (`qn-` nodes, raw bytes); `"curator"`: Curator's `DistributedQueue` (`queue-` nodes, framed messages).
---@field lock_path? string Curator's format only: lock-safe mode, lock nodes `<lock_path>/<item node>` (not under the queue path); made persistent when missing, as Curator does.
---@field max_hold? number With `lock_path` only: seconds one take's `fn` may hold an item's lock; then the message is lost (`message:on_lost` hears `("LOST", message, "max_hold")` once), its lock node deleted after the handler ran, the item goes to other consumers, and `fn`'s fenced writes and the removal are refused (`ELOST`) (default: unbounded).

---Options of `client:create`.
---@class zklock.CreateOptions
---@field ephemeral? boolean Delete the node when the session ends.
---@field sequential? boolean Append a 10-digit sequence number to the name.
---@field container? boolean A container node (the server removes it once its last child goes); not with `ephemeral` or `sequential`.
---@field parents? boolean Make missing ancestors first, as containers with the same ACL (again if the server reaps one before the node is made).
---@field acl? zklock.ACL ACL of the node (and of the parents made), default `"open"`.
---@field ttl? number A TTL node (ZooKeeper's `PERSISTENT_WITH_TTL`, or `PERSISTENT_SEQUENTIAL_WITH_TTL` with `sequential`): the server deletes it once it has had no child and no change for this many seconds (its container reaper, every `znode.container.checkIntervalMs`, default 60 s, does it: it may stay that much longer). Not with `ephemeral` or `container`. The server must run with `-Dzookeeper.extendedTypesEnabled=true` (`zklock.testing` servers: `extended_types = true`); without it the create fails with `ZUNIMPLEMENTED` and a message that says so.
---@field timeout? number Seconds before the call gives up with `ETIMEDOUT` (default: the client's `op_timeout`; `math.huge`: never). A create that timed out may still be applied.

---Options of the znode calls `set`, `delete` and `revoke`.
---@class zklock.CallOptions
---@field timeout? number Seconds before the call gives up with `ETIMEDOUT` (default: the client's `op_timeout`; `math.huge`: never). A set or delete that timed out may still be applied.

---Write a znode's data.
---
---Errors: `ZNONODE`, `ZBADVERSION`, `ZNOAUTH`, ... as `nil, msg, code`. Raises on a closed
---client, a non-absolute path or data that is not a string.
---@param path string
---@param data string
---@param version? integer Expected version (default -1: any).
---@param opts? zklock.CallOptions
---@return zklock.Stat? stat The result (its stat fields).
---@return string? msg
---@return string? code
function client:set(path, data, version, opts) end

---Delete a znode.
---
---Errors: `ZNONODE`, `ZBADVERSION`, `ZNOTEMPTY`, ... as `nil, msg, code`.
---@param path string
---@param version? integer Expected version (default -1: any).
---@param opts? zklock.CallOptions
---@return true? ok
---@return string? msg
---@return string? code
function client:delete(path, version, opts) end

---The stat of a znode (and the raw result of a znode call).
---@class zklock.Stat
---@field czxid integer zxid of the create.
---@field mzxid integer zxid of the last change.
---@field pzxid integer zxid of the last change of the children.
---@field version integer Data version.
---@field num_children integer Number of children.
---@field ephemeral_owner string Session id of the owner of an ephemeral node (16 hex digits; zeros if not ephemeral).
---@field ctime integer Creation time, ms since the epoch (the server's clock).
---@field mtime integer Time of the last data change, ms since the epoch (the server's clock).
---@field cversion integer Changes to the children so far (0: the node never had a child).
---@field data? string The data (get).
---@field children? string[] The children (children).
---@field rc integer Result code (0).

---Set the handler `fn(state, client)`, called on every session change: `"CONNECTED"`,
---`"SUSPENDED"`, `"EXPIRED"` (a new session is opened by itself), `"CLOSED"`. Replaces the
---previous handler (the recipes' own session hooks are not affected); errors raised by `fn` are
---logged.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(state: "CONNECTED"|"SUSPENDED"|"EXPIRED"|"CLOSED", client: zklock.Client) nil removes it.
---@return zklock.Client client
function client:on_session(fn) end

---The current session's id and password (for tools that must act as this session, such as
---`zklock.testing.expire`).
---
---Errors: raises on a closed client.
---@return string? id 16 hex digits; nil while there is no session (connecting).
---@return string? password 16 bytes.
function client:session() end

---The session timeout in seconds: negotiated with the server once connected, the requested one
---before.
---
---Errors: raises on a closed client.
---@return number seconds
function client:session_timeout() end

---Seconds from now until the client reports the session LOST if the server answers nothing
---more. Counted from what the server last heard: the issue time of the newest request it
---answered (while connected the client sends a cheap request of its own, `exists("/")`, after a
---quarter of the session timeout without one), plus the negotiated session timeout, less a
---margin of a tenth of it (at most 1 s). The server cannot expire the session earlier, so work
---done under a lock that stops by this deadline ends before anyone else can be granted it;
---nothing bounds a paused or starved process or a clock that jumps (use the fencing token).
---
---Errors: raises on a closed client.
---@return number? seconds >= 0 (0: the next `process()` reports LOST); nil while there is no session (connecting, or after an expiry until the next session).
function client:loss_deadline() end

---Counters since the client was created: requests this client sent by kind, grants, watches.
---
---Errors: raises on a closed client.
---@return zklock.Stats
function client:stats() end

---Counters returned by `client:stats()` (zkl_stats in zklock.h).
---@class zklock.Stats
---@field creates integer Lock-recipe creates sent.
---@field lists integer Lock-recipe child listings sent.
---@field gets integer Lock-recipe gets sent.
---@field deletes integer Lock-recipe deletes sent.
---@field exists integer Lock-recipe exists calls sent.
---@field ops integer Plain znode operations sent.
---@field watch_events integer Node watches that fired (not session events).
---@field acquired integer Grants.
---@field handoffs integer Grants straight from a watch (no second listing).
---@field sessions_expired integer Sessions that expired.

---Authenticate this client; re-sent after every new session.
---
---Errors: `nil, msg, code` from the core; raises on a closed client or if `scheme` or
---`credentials` is not a string.
---@param scheme string `"digest"`, ...
---@param credentials string `"user:password"` for `digest`.
---@return true? ok
---@return string? msg
---@return string? code
function client:add_auth(scheme, credentials) end

---Close the session: pending acquires fail with `ECLOSED`, held locks vanish with the session,
---adapters end their pumps. Idempotent.
function client:close() end

---Host API: the client's pollable fd (readable when `process()` has work). Stable for the
---client's life; closed by `client:close()`.
---
---Errors: raises on a closed client.
---@return integer fd
function client:fd() end

---Host API: one round of work that never waits: read what the fd has, dispatch events (waking
---adapter waiters), fire `sleep` timers and run ready spawned coroutines.
---
---Errors: raises on a closed client.
function client:process() end

---Host API: milliseconds until `process()` must run (the core's deadline, ready spawned
---coroutines, `sleep` timers), or -1 for none (also on a closed client).
---@return integer ms
function client:next_timeout_ms() end

---Host API: operations in flight that something waits for, plus spawned coroutines ready to run;
---0 when idle (locks may still be held) and on a closed client.
---@return integer
function client:pending() end

---cqueues pollable: the fd to poll, or nil once closed.
---@return integer? fd
function client:pollfd() end

---cqueues pollable: always `"r"`.
---@return "r"
function client:events() end

---cqueues pollable: `next_timeout_ms()` in seconds, nil for no deadline, 0 once closed.
---@return number?
function client:timeout() end

---Host API: install a host adapter (docs/design.md, "Host API"). It is asked after the builtin
---scheduler whether it owns the calling coroutine; a second `use` replaces the first.
---
---Errors: raises on a closed client or if `adapter` lacks `owns`, `wait`, `wake` or `sleep`.
---@param adapter zklock.Adapter
---@return zklock.Client client
function client:use(adapter) end

---Host API: the coroutine waiting in `w` is gone for good (it will never return from
---`adapter.wait`): forget the wait and give back, in the background, what its operation
---obtained.
---
---Errors: raises if `w` is not a waiter record.
---@param w zklock.Waiter
function client:abandon(w) end

---Host API: whether a lock or lease of this client is held (false once closed).
---@return boolean
function client:held() end

---Host API: release, in the background, every mutex or read-write lock hold whose owner
---coroutine is dead (it raised or returned without releasing), and give up every double barrier
---or zookeeper_lock wait whose coroutine died while it waited (its node is deleted).
---@param status? fun(co: thread): string The coroutine status function to trust (default `coroutine.status`; OpenResty passes the raw one).
---@return zklock.ReapedHold[] released
function client:reap_dead_owners(status) end

---A hold released by `client:reap_dead_owners`.
---@class zklock.ReapedHold
---@field kind string `"mutex"`, `"read lock"` or `"write lock"` (`"double barrier"` or `"zookeeper_lock"` for a wait).
---@field path string The lock path.
---@field collected boolean Its owner coroutine was collected (rather than ended).
---@field waiting? boolean A wait given up (its node is deleted), not a hold.

---A host adapter, given to `client:use` (docs/design.md, "Host API"). Every function receives
---the client first.
---@class zklock.Adapter
---@field owns fun(client: zklock.Client): boolean True if the calling coroutine may be suspended by this adapter.
---@field wait fun(client: zklock.Client, w: zklock.Waiter) Suspend until `wake` was called and `w.done` is true (or the client is closed).
---@field wake fun(client: zklock.Client, w: zklock.Waiter) Called from `process()`/`close()` when `w`'s event arrived; only schedules the resume.
---@field sleep fun(client: zklock.Client, seconds: number) Suspend the owned caller.
---@field step? fun(client: zklock.Client) Run from every `process()` after dispatch.
---@field timeout_ms? fun(client: zklock.Client): integer Ms until `step` must run, -1 none.
---@field pending? fun(client: zklock.Client): integer Work ready to run, counted in `pending()`.
---@field close? fun(client: zklock.Client) The client closed (waiters were woken with `ECLOSED` first).

---A wait record handed to adapters. An adapter may keep its own keys in it (use a private table
---as the key).
---@class zklock.Waiter
---@field id integer The core operation's id.
---@field done boolean The operation's event arrived.
---@field type integer The event type.
---@field status integer The result code.
---@field result? table The operation's result.
---@field consumed? boolean Set once the caller has taken the result.

---A lock object: a mutex (`client:mutex`) or one side of a read-write lock (`rw.read`,
---`rw.write`). Reentrant per coroutine: the holder may acquire again (no ZooKeeper traffic) and
---releases as many times; another coroutine using the same object contends like another
---process. Lua 5.4: `local held <close> = assert(lock:acquire(5))` releases at scope exit.
---A lock object collected while held gives its nodes back in the background.
---@class zklock.Lock
---@field client zklock.Client The client it belongs to.
---@field path string The lock path.
---@field kind "mutex"|"read lock"|"write lock"
---@field recipe integer The core's recipe constant (MUTEX, READ or WRITE).
local lock = {}

---Acquire for the calling coroutine.
---
---Errors: `nil, "CODE: message", "CODE"` with CODE `ETIMEDOUT`, `ECANCELED` (`cancel()`),
---`ESESSION` (the session expired while waiting), `ECLOSED`, `ELOST` (re-acquiring a hold lost
---with the session before releasing it), `EDEADLK` (write while holding read) or a ZooKeeper
---code (`ZNOAUTH`, ...). Raises on a closed client, an invalid timeout or an invalid option.
---@param timeout? number Seconds; nil = wait forever; 0 = try once.
---@param opts? zklock.AcquireOptions
---@return zklock.Lock? lock The lock itself (for `<close>`).
---@return string? msg
---@return string? code
function lock:acquire(timeout, opts) end

---Options of every acquire (`lock:acquire`, `semaphore:acquire`, `semaphore:acquire_many`,
---`semaphore_mutex:acquire`, `multilock:acquire`).
---@class zklock.AcquireOptions
---@field retry? zklock.RetryPolicy Retry failures a new attempt can cure (see `zklock.retry`).
---@field max_hold? number Seconds: bound this grant (overrides the object's `max_hold`; a reentrant acquire keeps the first grant's bound). When it passes the grant is lost: `on_lost` hears `("LOST", obj, "max_hold")` once, then the node is deleted; the owner's `release` answers `ELOST`.

---Release one level of the calling coroutine's hold; the last one deletes the queue node (retried
---across connection loss while the session lives).
---
---Errors: `nil, "ELOST: ...", "ELOST"` if the hold was lost first: the session ended, or its node
---was deleted by someone else (found by this release's delete, a fenced transaction, the
---revocation watch or `participants()`; `LOST` is reported then, once). Raises if the calling
---coroutine does not hold the lock.
---@return true? ok
---@return string? msg
---@return string? code
function lock:release() end

---Held by the calling coroutine (and not lost)?
---@return boolean
function lock:is_held() end

---The fencing token of the calling coroutine's hold (the czxid of its queue node; successive
---holders' tokens only grow), nil when not held.
---@return integer?
function lock:token() end

---The full path of the calling coroutine's queue node, nil when not held.
---@return string?
function lock:node() end

---A fenced transaction: its first op checks that this hold's node still exists, so it commits
---only while the lock is held (a holder whose session ended, or whose node was removed, gets
---`ELOST` and writes nothing, whatever it believes). Add ops and `commit` as for
---`client:transaction()`.
---
---Errors: raises if the calling coroutine does not hold this lock.
---@return zklock.Transaction txn
function lock:transaction() end

---Withdraw every pending acquire on this object (they return `ECANCELED`).
---@return integer withdrawn
function lock:cancel() end

---Set the handler called for each hold of this object on `"SUSPENDED"` (connection lost,
---ownership uncertain), `"RECONNECTED"` and `"LOST"` (session gone, or the hold's node found
---deleted; told once per hold). Replaces the previous handler.
---
---Errors: raises if `fn` is neither a function nor nil, or on a call without a colon.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", lock: zklock.Lock, why?: "session"|"node"|"max_hold") nil removes it.
---@return zklock.Lock lock
function lock:on_lost(fn) end

---Listen for revocation requests (`client:revoke`, Curator's `Revoker.attemptRevoke`) on every
---hold of this object, current and future: while held, the hold watches its own node and
---`fn("REVOKE", lock, node)` runs once per request. A request made while the holder still waited in the
---queue, or while no handler was set, is reported when the hold (or the handler) starts. The
---watch also reports the node's deletion at once (`LOST` through `on_lost`). `fn`
---runs from the client's event dispatch, like `on_lost` handlers: it must not wait (set a flag
---or wake the owner, which decides whether to release). Errors it raises are logged.
---
---Errors: raises if `fn` is neither a function nor nil, or on a call without a colon.
---@param fn? fun(event: "REVOKE", lock: zklock.Lock, node: string) nil stops listening.
---@return zklock.Lock lock
function lock:on_revoke(fn) end

---The queue in order, holder(s) first.
---
---Errors: `nil, msg, code` from the listing. Raises on a closed client.
---@return zklock.Participant[]? participants
---@return string? msg
---@return string? code
function lock:participants() end

---A queue node, as listed by `participants()`.
---@class zklock.Participant
---@field path string Full path of the node.
---@field node string Its name.
---@field sequence integer? Its sequence number.
---@field data string Its data (the owner's identity).

---A read-write lock (`client:rwlock`): two lock objects on one path.
---@class zklock.RWLock
---@field path string The lock path.
---@field read zklock.Lock The read side (shared).
---@field write zklock.Lock The write side (exclusive).
local rwlock = {}

---A counting semaphore (`client:semaphore`).
---@class zklock.Semaphore
---@field client zklock.Client
---@field path string
---@field max_leases integer
---@field kind "semaphore"
local semaphore = {}

---Acquire one lease.
---
---Errors: as `lock:acquire` (`ETIMEDOUT`, `ECANCELED`, `ESESSION`, `ECLOSED`, ZooKeeper codes).
---Raises on a closed client, an invalid timeout or an invalid option.
---@param timeout? number Seconds; nil = wait forever; 0 = try once.
---@param opts? zklock.AcquireOptions
---@return zklock.Lease? lease
---@return string? msg
---@return string? code
function semaphore:acquire(timeout, opts) end

---Acquire `n` leases under one hold of the internal mutex: all or none, and two `acquire_many`
---calls cannot deadlock each other.
---
---Errors: as `semaphore:acquire`. Raises if `n` is not an integer from 1 to `max_leases`.
---@param n integer
---@param timeout? number Seconds; nil = wait forever; 0 = try once.
---@param opts? zklock.AcquireOptions
---@return zklock.Lease[]? leases
---@return string? msg
---@return string? code
function semaphore:acquire_many(n, timeout, opts) end

---Withdraw every pending acquire (they return `ECANCELED`).
---@return integer withdrawn
function semaphore:cancel() end

---Set the handler called for each lease on `"SUSPENDED"`, `"RECONNECTED"` and `"LOST"`.
---
---Replaces the previous handler (a lease's own `lease:on_lost` takes precedence for that lease).
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", lease: zklock.Lease, why?: "session"|"node"|"max_hold") nil removes it.
---@return zklock.Semaphore semaphore
function semaphore:on_lost(fn) end

---Listen for revocation requests on every lease of this semaphore, current and future: as
---`lock:on_revoke`, with `fn("REVOKE", lease, node)`. (Curator's semaphores cannot be revoked.)
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(event: "REVOKE", lease: zklock.Lease, node: string) nil stops listening.
---@return zklock.Semaphore semaphore
function semaphore:on_revoke(fn) end

---The lease holders (and leases being counted), by sequence.
---
---Errors: `nil, msg, code` from the listing. Raises on a closed client.
---@return zklock.Participant[]? participants
---@return string? msg
---@return string? code
function semaphore:participants() end

---One granted lease of a semaphore; any coroutine may release it. Lua 5.4: `<close>` releases it.
---@class zklock.Lease
---@field semaphore zklock.Semaphore
---@field client zklock.Client
---@field id integer The core acquisition's id.
---@field node_path string Full path of the lease node.
---@field token_value integer The lease's fencing token (use `lease:token()`).
local lease = {}

---Release the lease (delete its node).
---
---Errors: `nil, "ELOST: ...", "ELOST"` if the lease was lost first (the session ended, or its
---node was found deleted: as `lock:release`); `true` also after `client:close()`. Raises if
---released twice.
---@return true? ok
---@return string? msg
---@return string? code
function lease:release() end

---Held (not released, not lost)?
---@return boolean
function lease:is_held() end

---The lease node's czxid while held, else nil.
---@return integer?
function lease:token() end

---The lease node's full path while held, else nil.
---@return string?
function lease:node() end

---A fenced transaction: its first op checks that this hold's node still exists, so it commits
---only while the lock is held (a holder whose session ended, or whose node was removed, gets
---`ELOST` and writes nothing, whatever it believes). Add ops and `commit` as for
---`client:transaction()`.
---
---Errors: raises after the lease was released.
---@return zklock.Transaction txn
function lease:transaction() end

---Listen for revocation requests on this lease alone (it takes precedence over the semaphore's
---handler): as `lock:on_revoke`, with `fn("REVOKE", lease, node)`.
---
---Errors: raises if `fn` is neither a function nor nil, or on a call without a colon.
---@param fn? fun(event: "REVOKE", lease: zklock.Lease, node: string) nil stops listening (unless the semaphore has a handler).
---@return zklock.Lease lease
function lease:on_revoke(fn) end

---Set the handler called on this lease's `"SUSPENDED"`, `"RECONNECTED"` and `"LOST"` (it takes
---precedence over the semaphore's `on_lost` for this lease). Replaces the previous one.
---
---Errors: raises if `fn` is neither a function nor nil, or on a call without a colon.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", lease: zklock.Lease, why?: "session"|"node"|"max_hold") nil: the semaphore's handler again.
---@return zklock.Lease lease
function lease:on_lost(fn) end

---A semaphore mutex (`client:semaphore_mutex`): one lease, not reentrant, releasable from any
---coroutine. Lua 5.4: `<close>` releases it.
---@class zklock.SemaphoreMutex
---@field client zklock.Client
---@field path string
---@field semaphore zklock.Semaphore The one-lease semaphore behind it.
---@field kind "semaphore mutex"
local semaphore_mutex = {}

---Acquire the lease.
---
---Errors: as `semaphore:acquire`.
---@param timeout? number Seconds; nil = wait forever; 0 = try once.
---@param opts? zklock.AcquireOptions
---@return zklock.SemaphoreMutex? mutex
---@return string? msg
---@return string? code
function semaphore_mutex:acquire(timeout, opts) end

---Release the lease.
---
---Errors: as `lease:release`. Raises if not held.
---@return true? ok
---@return string? msg
---@return string? code
function semaphore_mutex:release() end

---Held (and not lost)?
---@return boolean
function semaphore_mutex:is_held() end

---The lease's fencing token while held, else nil.
---@return integer?
function semaphore_mutex:token() end

---A fenced transaction: its first op checks that this hold's node still exists, so it commits
---only while the lock is held (a holder whose session ended, or whose node was removed, gets
---`ELOST` and writes nothing, whatever it believes). Add ops and `commit` as for
---`client:transaction()`.
---
---Errors: raises when the semaphore mutex is not held.
---@return zklock.Transaction txn
function semaphore_mutex:transaction() end

---The lease node's full path while held, else nil.
---@return string?
function semaphore_mutex:node() end

---Withdraw every pending acquire (they return `ECANCELED`).
---@return integer withdrawn
function semaphore_mutex:cancel() end

---The lease holders, as `semaphore:participants()`.
---@return zklock.Participant[]? participants
---@return string? msg
---@return string? code
function semaphore_mutex:participants() end

---Set the handler called on `"SUSPENDED"`, `"RECONNECTED"` and `"LOST"` of the lease.
---
---Replaces the previous handler.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", mutex: zklock.SemaphoreMutex, why?: "session"|"node"|"max_hold") nil removes it.
---@return zklock.SemaphoreMutex mutex
function semaphore_mutex:on_lost(fn) end

---Listen for revocation requests on the held lease: as `lock:on_revoke`, with
---`fn("REVOKE", semaphore_mutex, node)`.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(event: "REVOKE", mutex: zklock.SemaphoreMutex, node: string) nil stops listening.
---@return zklock.SemaphoreMutex mutex
function semaphore_mutex:on_revoke(fn) end

---A one-shot ZooKeeper watch armed by `client:get`, `children` or `exists` with
---`{ watch = true }`. It fires once; every wait after that returns the same outcome at once.
---A connection loss does not end it (the ZooKeeper client sets it again on reconnect); a session
---expiry or `client:close()` does. `zklock.type(w)` is `"watch"`.
---@class zklock.Watch
---@field client zklock.Client
---@field kind "get"|"exists"|"children" The read that armed it.
---@field path string The watched path.
local watch = {}

---Wait until the watch fires: suspends a coroutine the client's scheduler or adapter owns,
---otherwise blocks while pumping the client. Many coroutines may wait on one watch.
---
---Errors: `nil, "ETIMEDOUT: ...", "ETIMEDOUT"` when `timeout` passes first (the watch stays
---armed: wait again); `"ESESSION"` when the session expired (the server dropped the watch:
---read again to arm a new one); `"ECLOSED"` when the client is closed. Raises on an invalid
---timeout or a call without a colon.
---@param timeout? number Seconds (0: just look; nil: no limit).
---@return "created"|"deleted"|"changed"|"child"|nil event What happened to the path.
---@return string? msg
---@return string? code
function watch:wait(timeout) end

---What the watch fired with, without waiting: `"created"`, `"deleted"`, `"changed"`, `"child"`,
---`"ESESSION"` or `"ECLOSED"` when it ended without firing, nil while armed.
---@return string?
function watch:fired() end

---A multi-lock (`client:multilock`): all components or none. Components the calling coroutine
---already holds (reentrant locks) are counted, not queued for again.
---@class zklock.MultiLock
---@field client zklock.Client
---@field locks (zklock.Lock|zklock.SemaphoreMutex)[] The components in acquisition order.
---@field opts zklock.MultiLockOptions The options given.
---@field kind "multi-lock"
local multilock = {}

---Acquire every component. When one fails, those already taken are released and the error
---names the component: `ETIMEDOUT: multi-lock timed out waiting for write lock /x (2 of 3); the
---others were released`.
---
---Errors: `nil, msg, code` as `lock:acquire`. Raises on a closed client, an invalid timeout or
---an invalid option.
---@param timeout? number Seconds shared by all components (default: the `deadline` option; none: no deadline).
---@param opts? zklock.AcquireOptions
---@return zklock.MultiLock? multilock
---@return string? msg
---@return string? code
function multilock:acquire(timeout, opts) end

---Release every component in reverse order, going on past failures.
---
---Errors: `nil, msg, code, errors`: `msg` (`"CODE: releasing multi-lock: ..."`) lists every
---failure, `code` is the first one's (`ELOST` for a component lost first). Raises when the calling
---coroutine holds none of the components.
---@return true? ok
---@return string? msg
---@return string? code
---@return zklock.ReleaseError[]? errors
function multilock:release() end

---A component that failed to release (`multilock:release`).
---@class zklock.ReleaseError
---@field lock zklock.Lock|zklock.SemaphoreMutex
---@field msg string
---@field code string

---Held when the calling coroutine holds every component.
---@return boolean
function multilock:is_held() end

---The fencing token: the largest of the components' tokens (it rises from one holder to the
---next, as each component's does), nil when not held.
---@return integer?
function multilock:token() end

---A multi-lock has no node of its own: always nil (see `multilock:nodes()`).
---@return nil
function multilock:node() end

---The components' nodes (component order) while held, else nil.
---@return string[]?
function multilock:nodes() end

---A fenced transaction: one check per component node first, so it commits only while every
---component is held (a check that finds no node makes that component, and the multi-lock, `LOST`).
---
---Errors: raises if the calling coroutine does not hold the multi-lock.
---@return zklock.Transaction txn
function multilock:transaction() end

---Set the handler called on the components' `"SUSPENDED"`, `"RECONNECTED"` (each once per
---change) and `"LOST"` (once per grant). Replaces the previous one.
---
---Errors: raises if `fn` is neither a function nor nil, or on a call without a colon.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", multilock: zklock.MultiLock, why?: "session"|"node"|"max_hold") nil removes it.
---@return zklock.MultiLock multilock
function multilock:on_lost(fn) end

---Withdraw a pending acquire of this multi-lock (it returns `ECANCELED`).
---@return integer withdrawn
function multilock:cancel() end

---A participant of a leader election (`client:leader`).
---@class zklock.Leader
---@field client zklock.Client
---@field path string The election path.
---@field id string? The participant id (nil: the client's identity is the node data).
local leader = {}

---Leading now (`fn` runs, the hold is not lost, not closed)? Drives the client first, so a loss
---nobody pumped for is noticed.
---@return boolean
function leader:is_leader() end

---The fencing token of the current term (the czxid of its node; it grows from term to term
---across every participant, Curator's included), nil when not leading.
---@return integer?
function leader:token() end

---The hold protocol's "do I hold it?" for the current term: the same answer as `is_leader()`
---(which stays, as the election's own question).
---@return boolean
function leader:is_held() end

---Full path of the current term's node, nil when not leading.
---@return string?
function leader:node() end

---A fenced transaction that commits only while the current term's node exists.
---
---Errors: raises when not leading.
---@return zklock.Transaction txn
function leader:transaction() end

---The ids (node data) of the participants in queue order, the leader first.
---
---Errors: `nil, msg, code` from the listing (`ZNONODE` gives `{}`). Raises on a closed client.
---@return string[]? ids
---@return string? msg
---@return string? code
function leader:participants() end

---The current leader's id (whoever leads), nil when nobody is queued.
---
---Errors: as `participants`.
---@return string? id
---@return string? msg
---@return string? code
function leader:leader() end

---Terms this participant has led so far.
---@return integer
function leader:terms() end

---Sleep up to `seconds` while leading: true after the whole time if still leader, false as soon
---as leadership ended (lost, closed): woken by the end itself, not by polling. The way for
---`fn` to hear of a loss promptly.
---
---Errors: raises on an invalid duration.
---@param seconds? number nil = until leadership ends.
---@return boolean still_leader
function leader:sleep(seconds) end

---Queue again after a term ended without `requeue` (Curator's `requeue()`).
---@return boolean queued false when already queued or leading, or closed.
function leader:requeue() end

---`fn(state, leader)` for the connection and session events of a term: `SUSPENDED` (leadership
---kept under `suspended = "keep"`, ended under `"stop"`), `RECONNECTED`, `LOST` (the term is
---over). Replaces the previous handler.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", leader: zklock.Leader, why?: "session"|"node"|"max_hold")
---@return zklock.Leader leader
function leader:on_lost(fn) end

---Leave the election: a queued participant withdraws at once (its node is deleted in the
---background); a running term ends as `is_leader()` turns false, and its node is deleted when
---`fn` returns. Idempotent.
function leader:close() end

---A read-only view of a leader election (`client:election`).
---@class zklock.Election
---@field client zklock.Client
---@field path string The election path.
local election = {}

---The leader as last listed: its participant id and token (the czxid of its node), or `false`
---when nobody leads. Waits (up to the client's `op_timeout`) only for the first listing; drives
---the client first.
---
---Errors: `nil, msg, code` when there is no view yet (the first read failed: its code, or
---`ETIMEDOUT`) or the election is closed (`ECLOSED`).
---@return string|false|nil id
---@return integer|string|nil token_or_msg The token when a leader is known, else the message.
---@return string? code
function election:leader() end

---`fn(event, election, id, token)` for each change, in order: `"leader", id, token` (a term
---began; also the first view when someone leads), `"ended", id, token` (the term seen before
---ended: resigned, lost or its node deleted; always reported before the next `"leader"` or
---`"none"`) and `"none"` (nobody leads; also the first view of an empty or missing election).
---Runs from the client's dispatch; it must not wait. Replaces the previous handler; nil removes it.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(event: "leader"|"ended"|"none", election: zklock.Election, id?: string, token?: integer)
---@return zklock.Election election
function election:on_change(fn) end

---Wait until a change is reported after this call.
---
---Errors: `nil, "ETIMEDOUT: ...", "ETIMEDOUT"`; `nil, "ECLOSED: ...", "ECLOSED"` when the
---election or its client is (or gets) closed. Raises on an invalid timeout.
---@param timeout? number Seconds; nil = forever.
---@return true? ok
---@return string? msg
---@return string? code
function election:wait(timeout) end

---The participants' ids (node data), leader first: a fresh read (a listing and a read per
---node), not the watched view.
---
---Errors: `nil, msg, code` from the listing (`ZNONODE` gives `{}`). Raises on a closed client.
---@return string[]? ids
---@return string? msg
---@return string? code
function election:participants() end

---Stop watching: no more reports, the watch is forgotten. Idempotent.
---@return true
function election:close() end

---A participant of a leader latch (`client:latch`).
---@class zklock.Latch
---@field client zklock.Client
---@field path string The latch path.
---@field id string? The participant id (nil: the client's identity is the node data).
---@field kind "leader latch"
local latch = {}

---Leading now (the hold protocol's "do I hold it?"; formerly `has_leadership`)? Drives the
---client first, so a loss nobody pumped for is noticed.
---@return boolean
function latch:is_held() end

---Full path of our latch node while leading, else nil.
---@return string?
function latch:node() end

---A fenced transaction that commits only while this latch leads on its node.
---
---Errors: raises when not leading.
---@return zklock.Transaction txn
function latch:transaction() end

---Set the handler `fn(state, latch, why)` for the `SUSPENDED`, `RECONNECTED` and `LOST` of its
---leadership (after `LOST` the latch joins again by itself). Replaces the previous handler.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(state: "SUSPENDED"|"RECONNECTED"|"LOST", latch: zklock.Latch, why?: "session"|"node"|"max_hold") nil removes it.
---@return zklock.Latch latch
function latch:on_lost(fn) end

---The fencing token (the czxid of our latch node) while leading, else nil.
---@return integer?
function latch:token() end

---Wait until this latch leads: woken when leadership changes (no polling).
---
---Errors: `nil, "ETIMEDOUT: ...", "ETIMEDOUT"`; `nil, "ECLOSED: ...", "ECLOSED"` when the latch
---or the client is (or gets) closed. Raises on an invalid timeout.
---@param timeout? number Seconds; nil = forever; 0 = look once.
---@return true? ok
---@return string? msg
---@return string? code
function latch:await(timeout) end

---Set the handler: `fn(event, latch)` on every change of leadership, `event` being `"LEADER"`
---(it leads now), `"LOST"` (with the session, its node deleted, or at `max_hold`) or `"CLOSED"`
---(by `close()`). Replaces the previous handler.
---
---Errors: raises if `fn` is neither a function nor nil.
---@param fn? fun(event: "LEADER"|"LOST"|"CLOSED", latch: zklock.Latch) nil removes it.
---@return zklock.Latch latch
function latch:on_change(fn) end

---The ids (node data) of the participants in latch order, the leader first.
---
---Errors: `nil, msg, code` from the listing (`ZNONODE` gives `{}`). Raises on a closed client.
---@return string[]? ids
---@return string? msg
---@return string? code
function latch:participants() end

---The current leader's id, nil when nobody is queued.
---
---Errors: as `participants`.
---@return string? id
---@return string? msg
---@return string? code
function latch:leader() end

---Leave: leadership is given up at once (`on_change` hears `"CLOSED"`) and the node deleted
---(when leading, this waits for the delete; a waiting entry's node is deleted in the
---background). Idempotent.
---
---Errors: `nil, msg, code` if the delete failed (e.g. `ELOST`: the session ended first).
---@return true? ok
---@return string? msg
---@return string? code
function latch:close() end

return zklock
