-- zklock.adapters.openresty: zklock in nginx workers (lua-nginx-module + lua-resty-core).
--
-- One client per worker, made in init_worker_by_lua*, driven by a timer pump; requests wait on
-- ngx.semaphore, so a waiting request never blocks its worker. zklock.core must be the LuaJIT
-- build (build-jit/zklock/core.so): see examples/openresty/nginx.conf.
--
--   init_worker_by_lua_block {
--     require("zklock.adapters.openresty").start("127.0.0.1:2181", { session_timeout = 10 })
--   }
--   location /orders {
--     content_by_lua_block {
--       local client = require("zklock.adapters.openresty").client()
--       local m = client:mutex("/locks/orders")       -- one lock object per request
--       local ok, err = m:acquire(5)                   -- suspends this request only
--       if not ok then return ngx.exit(503) end
--       ...                                            -- critical section
--       m:release()
--     }
--   }
--
-- API
--   zngx.start(hosts [, connect_opts [, pump_opts]]) -> client | nil, msg, code
--       makes this worker's client and starts its pump. Call it in init_worker_by_lua*. It does
--       not wait for the session (it connects with zklock.connect(hosts, { wait = false }): a
--       waiting connect would block the worker): the client starts in state CONNECTING;
--       acquires made meanwhile are sent once it connects and their timeouts run from the call.
--       connect_opts are zklock.connect's options (`wait` is always false here; never set
--       `keepalive`: the worker's pump keeps the session alive).
--   zngx.attach(client [, pump_opts]) -> client
--       the same for a client you made yourself.
--   zngx.client() -> this worker's client (from start), or nil
--   zngx.stop()   close this worker's client now (its pump ends).
--   pump_opts:
--     wakeup ("fd")            how the pump learns that replies came:
--                              "fd": a thread of the worker (core.waker, one per client, asleep
--                              in poll(2)) watches the client's fd and writes a byte to a unix
--                              socket the pump reads with a cosocket, so nginx's event loop
--                              wakes the pump when a reply arrives: an acquire+release answers
--                              at round-trip speed. Its cost: the thread, a unix socket under
--                              socket_dir (removed once connected) and per wait of the pump
--                              about 4 system calls more (a write and a read each side), no
--                              polls while replies are due: worker CPU per locked request
--                              0.48-0.88x "poll"'s at 1 connection, 0.83-1.06x at 16
--                              (bench/RESULTS.md, "OpenResty"). An operation a request starts
--                              gets its listing sent by a 0 ms timer (one per event-loop turn).
--                              If the waker cannot start, the pump logs a warning and polls.
--                              "poll": no thread; while operations are pending the pump polls
--                              the client every busy_interval, so each round trip waits for a
--                              poll (about 1 ms + 3.3 x busy_interval per acquire+release)
--     socket_dir ($TMPDIR or /tmp)  where "fd" makes its socket (a path of at most 107 bytes)
--     busy_interval (0.001 s)  "poll": the pump period while client:pending() > 0. At least
--                              0.001: nginx without OpenResty's patches runs a 0 ms timer again
--                              in the same round of expired timers, so ngx.sleep(0) never lets
--                              the event loop run (busy_interval = 0 used to starve the worker)
--     idle_interval (0.1 s)    longest pump period when idle (and, with "fd", while waiting for
--                              replies), capped by client:next_timeout_ms(); a new operation
--                              with an earlier deadline wakes the pump at once
--     exit_grace (10 s)        on worker exit (reload, quit) the pump keeps serving in-flight
--                              requests until no operation is pending and no lock is held, at
--                              most this long, then closes the session: the old worker's lock
--                              nodes vanish at once instead of at session expiry
--
-- Bad pump_opts raise an error naming the option.
--
-- Waiting: requests (rewrite, access, content phases) and timers suspend on an ngx.semaphore;
-- other phases (init_worker, set, header/body filter, log, balancer) cannot yield, so a zklock
-- call there falls back to the library's blocking wait, which blocks the worker: do not acquire
-- or release there.
--
-- Ownership: a mutex or read-write lock belongs to the coroutine that took it, and each phase
-- handler of a request runs in its own coroutine: acquire and release in the same handler
-- (pcall the critical section). Set `lua_thread_cache_max_entries 0;`: by default ngx_lua resets
-- a finished request's coroutine and reuses it for a later request, which would then own (and
-- re-enter for free) a lock the first request did not release. With fresh coroutines the pump
-- releases, in the background, every lock whose request ended without releasing it (an error in
-- the critical section), with a warning in the error log. Use one lock object per request.
-- A request that dies while waiting (aborted, worker shutdown timeout) does not keep the lock
-- either: the grant nobody picks up is released in the background.
--
-- One worker across the fleet
--   zngx.one_worker(path, job, opts) -> handle | nil, msg, code
--       keeps `job` running in exactly one nginx worker of all the nginx instances (all the
--       processes) that call it with the same ZooKeeper `path`. Call it in init_worker_by_lua*:
--       it runs zklock.leader's election engine (client:leader's) with suspended = "stop":
--       every worker queues on a mutex at `path` (Curator's LeaderSelector protocol: an
--       InterProcessMutex whose node data is the participant id) under a session of its own;
--       the holder runs job(ctx) in a light thread, releases when it returns, raises or is told
--       to stop, and queues again. opts: hosts (required), id, session_timeout (10 s),
--       stop_grace (5 s), acl, max_watch_bytes (zklock.connect's). ctx: token, node, id, path,
--       pid, worker, client,
--       ctx:stopping() -> nil | "SUSPENDED" | "LOST" | "EXITING" | "CLOSED",
--       ctx:sleep(s) -> true | nil, reason. handle: running() (and is_held(), the same), token(),
--       close().
--       See README ("One worker across the fleet") for what happens on SUSPENDED, LOST,
--       reload, quit and a crashed worker.
--
-- A cache shared by the workers of an instance
--   zngx.shared_cache(dict, path, opts) -> reader | nil, msg, code
--       in init_worker_by_lua* of every worker: one worker (elected with one_worker on
--       <opts.election>/<instance id>) follows `path` with client:cache and publishes it into
--       lua_shared_dict `dict`; every worker reads it: reader:get(path), :children(path),
--       :version(), :info(), :keeping(), :close(). opts: hosts (required), depth, max_nodes,
--       max_watch_bytes, data (as client:cache), election, id, session_timeout, acl.
--   zngx.cache_reader(dict) -> reader (reads only, any phase)
if type(ngx) ~= "table" or not ngx.timer then
  error("zklock.adapters.openresty needs lua-nginx-module (OpenResty): no ngx here", 2)
end
local zklock = require("zklock")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local leader = require("zklock.leader")
local semaphore = require("ngx.semaphore")

local ngx = ngx
local running = coroutine.running

local M = { _NAME = "zklock.adapters.openresty" }

local OWN_PHASES = { rewrite = true, access = true, content = true, timer = true }
local SEMA = setmetatable({}, { __tostring = function() return "zklock.adapters.openresty.sema" end })
local WAIT_SLICE = 1     -- s: a waiter re-checks the client's state at least this often
local ABANDON_AFTER = 0.1 -- s: a grant not picked up for this long (its request is gone) is given back
local REAP_EVERY = 0.1   -- s: how often locks of finished requests are looked for

-- ngx_lua replaces coroutine.status; its own answer for another request's coroutine is not
-- reliable ("running" for a finished one). The raw LuaJIT function is kept as _status.
local raw_status = coroutine._status or coroutine.status

local worker_client
local states = setmetatable({}, { __mode = "k" }) -- client -> pump state

local function log(level, ...)
  ngx.log(level, "zklock: ", ...)
end

local WAKEUPS = { fd = true, poll = true }
local MIN_SLEEP = 0.001  -- s: nginx's timers count whole ms; a 0 ms ngx.sleep does not yield (below)
local waker_seq = 0
local WAKER_SLACK_MS = 5000 -- the waker's thread answers every wait; this long late, it is broken

-- core.waker (csrc/lua/l_waker.c), or nil when the loaded core has none
local function waker_ctor()
  local ok, core = pcall(require, "zklock.core")
  return ok and type(core) == "table" and core.waker or nil
end

-- pump_opts -> pump_opts (a table); raises naming the bad option (fname: the public function,
-- narg: its pump_opts argument)
local function check_pump_opts(opts, fname, narg)
  local where = "zklock.adapters.openresty." .. fname .. ": "
  if opts ~= nil and type(opts) ~= "table" then
    error(("%sbad argument #%d (expected a table of pump options, got %s)"):format(where, narg, type(opts)), 3)
  end
  opts = opts or {}
  for _, k in ipairs({ "busy_interval", "idle_interval", "exit_grace" }) do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v < 0) then
      error(("%sbad pump option %s (expected a number of seconds >= 0, got %s)"):format(where, k, tostring(v)), 3)
    end
  end
  if opts.wakeup ~= nil and not WAKEUPS[opts.wakeup] then
    error(("%sbad pump option wakeup (expected \"fd\" or \"poll\", got %s)"):format(where, tostring(opts.wakeup)), 3)
  end
  if opts.socket_dir ~= nil and (type(opts.socket_dir) ~= "string" or opts.socket_dir == "") then
    error(("%sbad pump option socket_dir (expected a directory path, got %s)"):format(where,
      tostring(opts.socket_dir)), 3)
  end
  return opts
end

function M.attach(client, opts)
  if type(client) ~= "table" or type(client.use) ~= "function" then
    error("zklock.adapters.openresty.attach: bad argument #1 (expected a zklock client)", 2)
  end
  opts = check_pump_opts(opts, "attach", 2)
  local busy_interval = math.max(opts.busy_interval or 0.001, MIN_SLEEP)
  local idle_interval = math.max(opts.idle_interval or 0.1, MIN_SLEEP)
  local exit_grace = opts.exit_grace or 10
  local wakeup = opts.wakeup or "fd"

  local st = {
    kick = assert(semaphore.new(0)), -- posted when an operation starts: wakes an idle pump
    woken = {},                      -- { w, sema, at }: grants posted, not yet picked up
    pump_co = nil,
    stopped = false,
    waker = nil,                     -- core.waker while the pump waits on its socket
    wake_at = nil,                   -- when the pump's wait on the waker's socket ends
    flushing = false,                -- a flush round (a 0 ms timer) is due
  }

  -- wakeup = "fd": what an operation started outside the pump (in a request) still needs done
  -- by a process() round: a listing waits for the next flush (it is shared by the listings asked
  -- for until then). One 0 ms timer per event-loop turn runs that round for every request resumed
  -- in the turn, cheaper than waking the pump through the waker's thread.
  local function flush_round(premature)
    st.flushing = false
    if premature or st.stopped or client.state == "CLOSED" or not st.wake_at then return end
    local ok, err = pcall(client.process, client)
    if not ok then log(ngx.ERR, "process failed: ", tostring(err)) end
    -- the pump sleeps until a reply comes or its own deadline: wake it if one came earlier
    local ms, at, waker = client:next_timeout_ms(), st.wake_at, st.waker
    if waker and at and ms >= 0 and ngx.now() + ms / 1000 < at - MIN_SLEEP then
      st.wake_at = nil
      waker:kick()
    end
  end

  local function kick()
    local waker = st.waker
    if waker then
      local at = st.wake_at
      if not at then return end -- the pump is awake: its next wait counts this operation in
      local ms = client:next_timeout_ms()
      if ms == 0 then
        if not st.flushing then
          st.flushing = true
          local ok = ngx.timer.at(0, flush_round)
          if not ok then
            st.flushing = false
            st.wake_at = nil
            waker:kick()
          end
        end
      elseif ms > 0 and ngx.now() + ms / 1000 < at - MIN_SLEEP then
        -- an earlier deadline than the pump's wait: wake it
        st.wake_at = nil
        waker:kick()
      end
      return
    end
    -- at most one pending post: a burst of operations wakes the pump once
    if st.kick:count() < 1 then st.kick:post(1) end
  end

  local adapter = { name = "openresty" }

  function adapter.owns()
    if st.stopped or not ngx or not OWN_PHASES[ngx.get_phase()] then return false end
    return running() ~= st.pump_co
  end

  function adapter.wait(c, w)
    local sema = assert(semaphore.new(0))
    w[SEMA] = sema
    kick()
    while not w.done and c.state ~= "CLOSED" do
      local ok, err = sema:wait(WAIT_SLICE)
      if not ok and err ~= "timeout" then
        log(ngx.WARN, "semaphore wait failed: ", tostring(err))
        if not w.done then ngx.sleep(0.001) end
      end
    end
    w[SEMA] = nil
  end

  function adapter.wake(_, w)
    local sema = w[SEMA]
    if sema then
      sema:post(1)
      local woken = st.woken
      woken[#woken + 1] = { w = w, sema = sema, at = ngx.now() }
    end
  end

  function adapter.sleep(_, s)
    ngx.sleep(s)
  end

  -- Grants whose request never came back for them: it was aborted while waiting (the posted
  -- semaphore kept its resource, nobody consumed the wake-up).
  local function reap_abandoned(t)
    local woken = st.woken
    if #woken == 0 then return end
    local keep = {}
    for i = 1, #woken do
      local e = woken[i]
      local w = e.w
      if not w.consumed then
        if t - e.at < ABANDON_AFTER then
          keep[#keep + 1] = e
        elseif e.sema:count() > 0 then
          log(ngx.INFO, "a request waiting on operation ", tostring(w.id), " is gone; giving back its result")
          client:abandon(w)
        end
      end
    end
    st.woken = keep
  end

  client:use(adapter)

  -- Locks held by requests that ended without releasing them (an error in the critical
  -- section): their coroutine is dead, nobody can release them; give them back.
  local next_reap = 0
  local function reap_dead_owners(t)
    if t < next_reap then return end
    next_reap = t + REAP_EVERY
    for _, r in ipairs(client:reap_dead_owners(raw_status)) do
      log(ngx.WARN, "a request ended while ", r.waiting and "waiting in " or "holding ", tostring(r.kind), " ",
        tostring(r.path), r.waiting and "; its node is deleted in the background" or "; released in the background")
    end
  end

  -- wakeup = "fd": a core.waker thread watches the client's fd and writes a byte to a unix
  -- socket the pump reads with a cosocket, so nginx's event loop wakes the pump when a reply
  -- arrives. -> sock | nil, why
  local function open_waker()
    local new = waker_ctor()
    if not new then return nil, "the loaded zklock.core has no waker" end
    local dir = opts.socket_dir or os.getenv("TMPDIR") or "/tmp"
    waker_seq = waker_seq + 1
    local path = ("%s/zklock-pump-%d-%d-%d.sock"):format(dir, ngx.worker.pid(), waker_seq, math.random(1, 1e9))
    local w, err = new(client:fd(), path)
    if not w then return nil, err end
    local sock = ngx.socket.tcp()
    local ok, cerr = sock:connect("unix:" .. path)
    if not ok then
      w:close()
      return nil, "cannot connect to " .. path .. ": " .. tostring(cerr)
    end
    st.waker = w
    return sock
  end

  local function close_waker(sock)
    local w = st.waker
    st.waker, st.wake_at = nil, nil
    if sock then sock:close() end -- the thread reads EOF and ends
    if w then w:close() end       -- joins it
  end

  local function pump(premature)
    st.pump_co = running()
    local exit_deadline
    local sock
    if wakeup == "fd" then
      local why
      sock, why = open_waker()
      if not sock then
        log(ngx.WARN, "pump falls back to polling every ", busy_interval, " s: ", tostring(why))
      end
    end
    while not st.stopped and client.state ~= "CLOSED" do
      local ok, err = pcall(client.process, client)
      if not ok then log(ngx.ERR, "process failed: ", tostring(err)) end
      if client.state == "CLOSED" then break end
      ngx.update_time()
      local t = ngx.now()
      reap_abandoned(t)
      reap_dead_owners(t)
      local busy = client:pending() > 0 or #st.woken > 0
      if premature or ngx.worker.exiting() then
        exit_deadline = exit_deadline or (t + exit_grace)
        if (not busy and not client:held()) or t >= exit_deadline then
          if busy or client:held() then
            log(ngx.WARN, "worker exiting with zklock operations or locks still held; closing the session")
          end
          st.stopped = true
          client:close()
          break
        end
      end
      local d
      if busy and not sock then
        d = busy_interval
      else
        d = idle_interval
        local ms = client:next_timeout_ms()
        if ms >= 0 and ms / 1000 < d then d = ms / 1000 end
        if exit_deadline and d > 0.01 then d = 0.01 end
      end
      if d < 0 then d = 0 end
      if sock then
        -- the waker's thread ends the wait: a reply (the fd is readable), d passed, or a kick
        local ms = math.ceil(d * 1000)
        local data, werr = sock:send(ms .. "\n")
        if data then
          st.wake_at = t + d
          sock:settimeout(ms + WAKER_SLACK_MS)
          data, werr = sock:receive(1)
          st.wake_at = nil
        end
        if not data then
          log(ngx.WARN, "pump's waker failed (", tostring(werr), "); polling every ", busy_interval, " s")
          close_waker(sock)
          sock = nil
        end
      else
        -- never below 1 ms: nginx (without OpenResty's patches) runs a 0 ms timer again in the
        -- same round of expired timers, so ngx.sleep(0) in a loop never lets the event loop (or
        -- the requests this pump wakes) run
        if d < MIN_SLEEP then d = MIN_SLEEP end
        if busy then ngx.sleep(d) else st.kick:wait(d) end
      end
    end
    if sock then close_waker(sock) end
    st.pump_co = nil
  end

  local ok, err = ngx.timer.at(0, pump)
  if not ok then
    error("zklock.adapters.openresty: cannot start the pump timer: " .. tostring(err), 2)
  end
  st.stop = function()
    st.stopped = true
    if st.waker then st.waker:kick() else kick() end
  end
  states[client] = st
  return client
end

function M.start(hosts, connect_opts, pump_opts)
  check_pump_opts(pump_opts, "start", 3) -- before connecting: nothing to undo
  if worker_client and worker_client.state ~= "CLOSED" then
    return E.fail("EEXIST", "zklock.adapters.openresty.start: this worker already has a client")
  end
  local opts = connect_opts
  if type(connect_opts) == "table" then
    opts = {}
    for k, v in pairs(connect_opts) do opts[k] = v end
    opts.wait = false
  elseif connect_opts == nil then
    opts = { wait = false }
  end
  local c, msg, code = zklock.connect(hosts, opts)
  if not c then return nil, msg, code end
  M.attach(c, pump_opts)
  worker_client = c
  return c
end

function M.client()
  return worker_client
end

function M.stop()
  local c = worker_client
  worker_client = nil
  if c and c.state ~= "CLOSED" then
    local st = states[c]
    if st then st.stop() end
    c:close()
  end
end

---------------------------------------------------------------- one worker across the fleet
--
-- The ngx glue of the election engine (zklock.leader's M.engine): every worker's supervisor (a
-- timer) runs the engine under a client of its own, with suspended = "stop" and the engine's
-- supervised terms (stop_grace, kill on LOST, retry after a failure) on an ngx host: the job
-- runs in a light thread the supervisor can kill, and the worker's exit is a stop reason (a
-- queued worker leaves the queue; a running job hears it from job:stopping()).

local function host_name() return require("zklock.core").hostname() end -- the one source (zkl_host_name)

local RETRY_DELAY = 1   -- s: before queueing again after a failed acquire or a job that raised

local Fleet = {}
Fleet.__index = Fleet
Fleet.__name = "zklock.adapters.openresty.OneWorker"

-- A wake-up for the engine: every waiter wakes; at most one wake-up is kept for a later wait().
local function ngx_signal()
  local sema = assert(semaphore.new(0))
  return {
    wait = function(s) sema:wait(s) end,
    wake = function()
      local n = sema:count()
      if n < 1 then sema:post(n < 0 and -n or 1) end
    end,
  }
end

local NGX_HOST = {
  now = function() ngx.update_time() return ngx.now() end,
  signal = ngx_signal,
  spawn = function(fn) return ngx.thread.spawn(fn) end,
  kill = function(thread) ngx.thread.kill(thread) end,
  stopping = function() return ngx.worker.exiting() and "EXITING" or nil end,
}

local ONE_WORKER_OPTS = {
  hosts = check.is.string,
  id = check.is.string,
  session_timeout = check.is.positive,
  stop_grace = check.is.nonneg,
  acl = check.acl_option,
  max_watch_bytes = function(v) return type(v) == "number" and v >= 1 and v == math.floor(v) and v < math.huge,
    "an integer >= 1" end,
}

local NGX_LEVEL = { error = ngx.ERR, warn = ngx.WARN, notice = ngx.NOTICE, info = ngx.INFO, debug = ngx.DEBUG }

function M.one_worker(path, fn, opts)
  check.path("one_worker", 1, path)
  if type(fn) ~= "function" then
    check.argerror("one_worker", 2, "job: expected a function, got " .. check.describe(fn))
  end
  opts = check.options("one_worker", 3, opts, ONE_WORKER_OPTS)
  if opts.hosts == nil then
    check.argerror("one_worker", 3, 'option \'hosts\' is required: "host:port[,host:port...][/chroot]"')
  end
  check.hosts("one_worker", 3, opts.hosts)
  if opts.stop_grace and opts.stop_grace * 1000 > check.MAX_MS then
    check.argerror("one_worker", 3, "option 'stop_grace': expected a number of seconds >= 0 (finite), got "
      .. check.describe(opts.stop_grace))
  end
  if ngx.get_phase() == "init" then
    check.raise("zklock: one_worker must be called in init_worker_by_lua* (or later), not in init_by_lua*:"
      .. " the master process runs no job")
  end
  local stop_grace = opts.stop_grace or 5
  local pid = ngx.worker.pid()
  local id = opts.id or (host_name() .. "/" .. pid)
  local client, msg, code = zklock.connect(opts.hosts, {
    wait = false, session_timeout = opts.session_timeout or 10, identity = id,
    max_watch_bytes = opts.max_watch_bytes,
  })
  if not client then return nil, msg, code end
  -- the pump closes the session at worker exit only if the supervisor did not (it releases as
  -- soon as the job returned, at most stop_grace after the exit began)
  M.attach(client, { exit_grace = stop_grace + 5 })
  local host = setmetatable({ who = "worker " .. pid, fields = { pid = pid, worker = ngx.worker.id() } },
    { __index = NGX_HOST })
  local engine
  engine = leader.engine(client, path, {
    id = id, acl = opts.acl, requeue = true, suspended = "stop", retry_delay = RETRY_DELAY,
    host = host, job = fn, stop_grace = stop_grace,
    log = function(level, text) ngx.log(NGX_LEVEL[level] or ngx.WARN, "zklock: one_worker ", path, ": ", text) end,
    -- the supervisor: a timer running the engine's loop
    spawn = function(loop)
      return ngx.timer.at(0, function(premature)
        if premature then engine:close("EXITING") end
        loop()
        -- closing the session deletes our queue node at once: the next worker does not wait
        -- for the session to expire
        if client.state ~= "CLOSED" then client:close() end
      end)
    end,
  })
  local ok, err = engine:start()
  if not ok then
    client:close()
    return E.fail("ESYSTEM", "one_worker: cannot start the supervisor timer: " .. tostring(err))
  end
  return setmetatable({ _engine = engine }, Fleet)
end

local function method(name, fn)
  Fleet[name] = function(self)
    if getmetatable(self) ~= Fleet then check.raise(("zklock: use handle:%s() (with a colon)"):format(name)) end
    return fn(self._engine)
  end
end

-- running(): this worker runs the job now; is_held(): the hold protocol's name for it.
method("running", function(e) return e:job() ~= nil end)
method("is_held", function(e) return e:job() ~= nil end)
-- The fencing token of the job this worker runs now, or nil.
method("token", function(e) local job = e:job() return job and job.token end)
-- This worker leaves the election for good: a running job is told "CLOSED" (killed after
-- stop_grace), the mutex is released and the session closed. Returns at once.
method("close", function(e) e:close("CLOSED") end)

---------------------------------------------------------------- a cache shared by the workers
--
-- One worker of an nginx instance (the keeper) follows a tree with client:cache and publishes
-- it into a lua_shared_dict; every worker reads it from there, without a ZooKeeper call.
-- The keeper is chosen by one_worker on an election path of this instance only (the instance id
-- is kept in the dict, which a reload keeps: old and new workers of one instance share it).
--
-- The dict (dedicated to one cache) holds:
--   "instance"     the instance id (the first worker's "<host>-<pid>")
--   "version"      the counter of published snapshots (incr: it only grows, across keepers)
--   "current"      the version of the snapshot to read
--   "s:<version>"  a snapshot: the whole tree serialized in one value (at most two kept)
--   "error"        why the newest view could not be published (ERANGE), until one could
-- A snapshot is written whole under a new key (safe_set: it never evicts) before "current"
-- points at it, so a reader never sees part of one; a reader that finds the key it was pointed
-- at gone (two publishes between its two reads) reads "current" again. Each worker keeps the
-- parsed snapshot of the version it read last: when nothing changed a read costs two dict gets
-- ("error", "current").

local function post_once(sema)
  if sema:count() < 1 then sema:post(1) end
end

local SNAP_MAGIC = "zklock-cache 1"
local KEEP_POLL = 0.1 -- s: how often a keeper looks at stopping() while nothing changes

-- "%.0f" keeps a zxid (< 2^53) exact where tostring may not (LuaJIT: 14 digits)
local function num(v)
  if type(v) == "number" then return ("%.0f"):format(v) end
  return (tostring(v or 0):gsub("U?LL$", ""))
end

-- The whole cache in one string: a header line, then per node (parents before their children,
-- siblings by name) "<path bytes> <data bytes or -1> <czxid> <mzxid> <version>\n<path><data>".
local function serialize(cache, version, pid)
  ngx.update_time()
  local parts = { ("%s\n%d %d %.3f %s\n"):format(SNAP_MAGIC, version, pid, ngx.now(), cache.path) }
  for path, stat, data in cache:walk() do
    parts[#parts + 1] = ("%d %d %s %s %d\n"):format(#path, data and #data or -1, num(stat.czxid), num(stat.mzxid),
      stat.version or 0)
    parts[#parts + 1] = path
    if data then parts[#parts + 1] = data end
  end
  return table.concat(parts)
end

local function parse(blob)
  local pos = #SNAP_MAGIC + 2
  if blob:sub(1, pos - 1) ~= SNAP_MAGIC .. "\n" then return nil, "not a zklock cache snapshot" end
  local v, pid, at, root, e = blob:match("^(%d+) (%d+) ([%d%.]+) ([^\n]*)\n()", pos)
  if not v then return nil, "bad snapshot header" end
  local snap = { version = tonumber(v), pid = tonumber(pid), at = tonumber(at), root = root, nodes = {}, count = 0,
                 bytes = #blob }
  local nodes = snap.nodes
  pos = e
  local find, sub, match = string.find, string.sub, string.match
  local n = 0
  -- per node one find and the subs: stats stay text until a get asks for one
  while pos <= #blob do
    local _, e1, plen, dlen, stat = find(blob, "^(%d+) (%-?%d+) ([^\n]*)\n", pos)
    if not e1 then return nil, "bad snapshot entry at byte " .. pos end
    plen, dlen = tonumber(plen), tonumber(dlen)
    local path = sub(blob, e1 + 1, e1 + plen)
    pos = e1 + 1 + plen
    local data = false
    if dlen >= 0 then
      data = sub(blob, pos, pos + dlen - 1)
      pos = pos + dlen
    end
    nodes[path] = { data, stat }
    n = n + 1
    if path ~= root then
      local name = match(path, "[^/]*$")
      local p = nodes[plen == #name + 1 and "/" or sub(path, 1, plen - #name - 1)]
      if p then
        local kids = p[3]
        if not kids then kids = {}; p[3] = kids end
        kids[#kids + 1] = name
      end
    end
  end
  snap.count = n
  return snap
end

local Shared = {}
Shared.__index = Shared
Shared.__name = "zklock.adapters.openresty.SharedCache"

local function dict_of(fname, argn, dict)
  if type(dict) == "string" then
    local d = ngx.shared[dict]
    if not d then
      check.argerror(fname, argn, ("dict: no lua_shared_dict named %q in nginx.conf"):format(dict))
    end
    return d, dict
  end
  if type(dict) ~= "table" and type(dict) ~= "userdata" or type(dict.get) ~= "function" then
    check.argerror(fname, argn, "dict: expected the name of a lua_shared_dict or ngx.shared.NAME, got "
      .. check.describe(dict))
  end
  return dict, "?"
end

local function reader(d, name, handle) -- handle: the keeper election's (shared_cache), or nil
  return setmetatable({ _dict = d, _name = name, _v = nil, _snap = nil, _handle = handle }, Shared)
end

-- The newest published snapshot (parsed once per version per worker) | nil, msg, code
local function load(self)
  local d = self._dict
  local err = d:get("error")
  if err then return nil, err, "ERANGE" end
  for _ = 1, 3 do
    local v = d:get("current")
    if not v then
      return nil, ("ECONNECTING: shared cache in lua_shared_dict %s: nothing published yet (no keeper has"
        .. " loaded the tree)"):format(self._name), "ECONNECTING"
    end
    if v == self._v then return self._snap end
    local blob = d:get("s:" .. v)
    if blob then
      local snap, perr = parse(blob)
      if not snap then
        return nil, ("EFORMAT: shared cache in lua_shared_dict %s: %s"):format(self._name, perr), "EFORMAT"
      end
      self._v, self._snap = v, snap
      return snap
    end
    -- replaced between the two reads: read "current" again
  end
  return nil, ("EBUSY: shared cache in lua_shared_dict %s: the snapshot kept changing"):format(self._name), "EBUSY"
end

local function reader_check(self, fname)
  if getmetatable(self) ~= Shared then check.raise(("zklock: use cache:%s(...) (with a colon)"):format(fname)) end
end

-- shared:get(path) -> data (false when data = false), stat { czxid, mzxid, version } | nil, msg, code
function Shared:get(path)
  reader_check(self, "get")
  local snap, msg, code = load(self)
  if not snap then return nil, msg, code end
  if path == nil then path = snap.root end
  check.znode_path("get", 1, path)
  local n = snap.nodes[path]
  if not n then
    return nil, ("ZNONODE: get %s: not in the shared cache of %s"):format(check.short(path), check.short(snap.root)),
      "ZNONODE"
  end
  local cz, mz, ver = n[2]:match("^(%d+) (%d+) (%-?%d+)$")
  return n[1], { czxid = tonumber(cz), mzxid = tonumber(mz), version = tonumber(ver) }
end

-- shared:children(path) -> sorted names (a new table) | nil, msg, code
function Shared:children(path)
  reader_check(self, "children")
  local snap, msg, code = load(self)
  if not snap then return nil, msg, code end
  if path == nil then path = snap.root end
  check.znode_path("children", 1, path)
  local n = snap.nodes[path]
  if not n then
    return nil, ("ZNONODE: children %s: not in the shared cache of %s"):format(check.short(path),
      check.short(snap.root)), "ZNONODE"
  end
  local out = {}
  for i, name in ipairs(n[3] or out) do out[i] = name end
  return out
end

-- shared:version() -> the published version (an integer that grows with every publish; 0: none
-- yet). One dict read: poll it to notice changes.
function Shared:version()
  reader_check(self, "version")
  return self._dict:get("current") or 0
end

-- shared:info() -> { version, pid (the keeper that published it), at (ngx.now() then), nodes,
-- root, bytes } of the newest snapshot | nil, msg, code
function Shared:info()
  reader_check(self, "info")
  local snap, msg, code = load(self)
  if not snap then return nil, msg, code end
  return { version = snap.version, pid = snap.pid, at = snap.at, nodes = snap.count, root = snap.root,
           bytes = snap.bytes }
end

-- This worker keeps the cache now.
function Shared:keeping()
  reader_check(self, "keeping")
  return self._handle ~= nil and self._handle:running()
end

-- Leave the keeper election in this worker (see OneWorker:close()).
function Shared:close()
  reader_check(self, "close")
  if self._handle then self._handle:close() end
end

-- Publish the cache's view: a new version under a new key, then "current". -> true | nil, msg
local function publish(d, name, cache)
  local function full(what, err)
    local msg = ("ERANGE: shared cache %s: %s does not fit in lua_shared_dict %s (%s): give the dict room for"
      .. " two snapshots"):format(cache.path, what, name, tostring(err))
    d:safe_set("error", msg)
    return nil, msg
  end
  local version, verr = d:incr("version", 1, 0)
  if not version then return full("the version counter", verr) end
  local blob = serialize(cache, version, ngx.worker.pid())
  local old, older = d:get("current"), d:get("previous")
  -- at most two snapshots at once: the one readers may be reading and the new one
  if older and older ~= old then d:delete("s:" .. older) end
  -- safe_set: a full dict fails the publish instead of evicting the snapshot being read
  local ok, err = d:safe_set("s:" .. version, blob)
  if not ok then return full(("the snapshot of %d bytes (%d nodes)"):format(#blob, cache:size()), err) end
  ok, err = d:safe_set("current", version)
  if not ok then return full("the current version", err) end
  d:safe_set("previous", old)
  d:delete("error")
  return true
end

local SHARED_OPTS = {
  hosts = check.is.string,
  election = check.is.string,
  id = check.is.string,
  session_timeout = check.is.positive,
  acl = check.acl_option,
  depth = function(v)
    return type(v) == "number" and v >= 0 and (v == math.huge or v == math.floor(v)), "an integer >= 0 or math.huge"
  end,
  max_nodes = function(v) return type(v) == "number" and v >= 1 and v == math.floor(v) and v < math.huge,
    "an integer >= 1" end,
  max_watch_bytes = function(v) return type(v) == "number" and v >= 1 and v == math.floor(v) and v < math.huge,
    "an integer >= 1" end,
  data = check.is.boolean,
}

-- zngx.shared_cache(dict, path, opts) -> cache reader (this worker takes part in the keeper
-- election) | nil, msg, code. Call it in init_worker_by_lua* of every worker.
function M.shared_cache(dict, path, opts)
  local d, name = dict_of("shared_cache", 1, dict)
  check.znode_path("shared_cache", 2, path)
  opts = check.options("shared_cache", 3, opts, SHARED_OPTS)
  if opts.hosts == nil then
    check.argerror("shared_cache", 3, 'option \'hosts\' is required: "host:port[,host:port...][/chroot]"')
  end
  check.hosts("shared_cache", 3, opts.hosts)
  if opts.election ~= nil then check.path("shared_cache", 3, opts.election) end
  if ngx.get_phase() == "init" then
    check.raise("zklock: shared_cache must be called in init_worker_by_lua* (or later), not in init_by_lua*")
  end
  -- the instance's id: the first worker to get here names it; a reload keeps the dict
  local mine = (host_name() .. "-" .. ngx.worker.pid()):gsub("[/%s]", "_")
  d:safe_add("instance", mine) -- safe_*: never evict another key (a snapshot, or this one)
  local instance = d:get("instance") or mine
  local election = (opts.election or "/zklock/openresty-keepers") .. "/" .. instance
  local cache_opts = { depth = opts.depth, max_nodes = opts.max_nodes, max_watch_bytes = opts.max_watch_bytes,
                       data = opts.data }
  local current -- the cache of this worker's term (closed at the next term if the job was killed)
  local handle, msg, code = M.one_worker(election, function(job)
    if current then current:close() end
    local cache = job.client:cache(path, cache_opts)
    current = cache
    local bell = assert(semaphore.new(0))
    local dirty = false
    -- the arguments are not used: the handler works whichever order they come in
    cache:on_change(function()
      if job:stopping() then
        -- the job was killed (LOST) and its cache lives on with the client's next session:
        -- close it (not from inside its own event)
        if current == cache then current = nil end
        ngx.timer.at(0, function() cache:close() end)
        return
      end
      dirty = true
      post_once(bell)
    end)
    local failed_said = false
    while not job:stopping() do
      local _, fmsg, fcode = cache:get()
      if fcode == "ERANGE" then -- past max_nodes: the cache stopped for good
        if not failed_said then failed_said = true; d:safe_set("error", fmsg) end
      elseif dirty and cache:is_initialized() then
        dirty = false
        local ok, perr = publish(d, name, cache)
        if not ok then ngx.log(ngx.ERR, "zklock: ", perr) end
      end
      bell:wait(KEEP_POLL)
    end
    cache:close()
    if current == cache then current = nil end
  end, { hosts = opts.hosts, id = opts.id, session_timeout = opts.session_timeout, acl = opts.acl,
         max_watch_bytes = opts.max_watch_bytes })
  if not handle then return nil, msg, code end
  return reader(d, name, handle)
end

-- zngx.cache_reader(dict) -> a reader of the shared cache published in `dict` (a worker that
-- does not take part in the keeper election; any phase, any worker)
function M.cache_reader(dict)
  local d, name = dict_of("cache_reader", 1, dict)
  return reader(d, name)
end

-- the classes, for scripts/apidoc.lua (not an API)
M._Job, M._OneWorker, M._SharedCache = leader.Job, Fleet, Shared

return M
