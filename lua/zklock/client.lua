-- zklock.client: a connection to ZooKeeper, its event pump, plain znode calls, and the host API
-- that schedulers plug into (docs/design.md, "Host API").
--
-- Every operation of the C core completes through an event. A caller waits for its event in one
-- of two ways:
--   * inside a coroutine that an adapter owns (the builtin scheduler's client:spawn, or a host
--     adapter's: cqueues, luv, OpenResty), it suspends; the adapter resumes it when the event
--     arrives, so thousands of waiters share one thread;
--   * anywhere else (the main thread, a busted test body), it blocks, pumping the client
--     (and running every spawned coroutine that becomes ready) until its event arrives.
-- The decision is made here, in Lua, never in C, and we never yield merely because
-- coroutine.isyieldable() is true: an unknown resumer would receive the yield.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local scheduler = require("zklock.internal.scheduler")
local watch = require("zklock.internal.watch")
local metrics = require("zklock.internal.report")

local Client = {}
Client.__index = Client
Client.__name = "zklock.client"

local now = core.now

local STATE_NAMES = {
  [core.STATE_CONNECTING] = "CONNECTING",
  [core.STATE_CONNECTED] = "CONNECTED",
  [core.STATE_SUSPENDED] = "SUSPENDED",
  [core.STATE_EXPIRED] = "EXPIRED",
  [core.STATE_CLOSED] = "CLOSED",
  [core.STATE_AUTH_FAILED] = "AUTH_FAILED",
}
local LOCK_STATE_NAMES = {
  [core.LOCK_SUSPENDED] = "SUSPENDED",
  [core.LOCK_RECONNECTED] = "RECONNECTED",
  [core.LOCK_LOST] = "LOST",
}

---------------------------------------------------------------- logging
--
-- One sink per client for both the library's own events and the ZooKeeper client's lines:
-- opts.log(line, level), level one of "error", "warn", "info", "debug". The library's lines read
-- "zklock <level>: <message>" (one line); the ZooKeeper client's are passed as it writes them.
-- Default sink: one line to stderr.
local LEVELS = { none = 0, error = 1, warn = 2, info = 3, debug = 4 }
local LEVEL_NAMES = { "error", "warn", "info", "debug" }
local CORE_LEVELS = { [0] = core.LOG_NONE, core.LOG_ERROR, core.LOG_WARN, core.LOG_INFO, core.LOG_DEBUG }
local ZOO_LEVELS = { ERROR = 1, WARN = 2, INFO = 3, DEBUG = 4 }

local function stderr_log(line)
  io.stderr:write(line, "\n")
  io.stderr:flush()
end

local function write_log(self, line, level)
  local ok, err = pcall(self._log, line, level)
  if not ok and self._log ~= stderr_log then
    stderr_log(line)
    stderr_log("zklock error: the log function failed: " .. check.short(tostring(err):gsub("[\r\n]+", " ")))
  end
end

-- Report a library event at `level` through the client's log function (if log_level lets it).
function Client:_emit(level, msg)
  if LEVELS[level] > self._log_level then return end
  write_log(self, ("zklock %s: %s"):format(level, (tostring(msg):gsub("[\r\n]+", " "))), level)
end

-- "host:port,host:port/chroot" -> { {host, port}, ... }, chroot ("" for none)
local function split_hosts(hosts)
  local list, chroot = hosts:match("^([^/]*)(.*)$")
  local out = {}
  for entry in (list .. ","):gmatch("([^,]*),") do
    local host, port = entry:match("^%s*(.-):(%d+)%s*$")
    if host then out[#out + 1] = { host, port } end
  end
  return out, chroot
end

local function numeric_host(h)
  return h:match("^%d+%.%d+%.%d+%.%d+$") or h:find(":", 1, true)
end

-- Why core.new failed, in words: the hosts that could not be resolved.
local function new_failed(hosts, msg, code)
  if code ~= "ESYSTEM" then return nil, msg, code end
  local names = {}
  for _, e in ipairs((split_hosts(hosts))) do
    if not numeric_host(e[1]) then names[#names + 1] = e[1] end
  end
  if #names == 0 then return nil, msg, code end
  return E.fail(code, ("could not resolve %s %s (DNS or /etc/hosts; hosts %s)")
    :format(#names == 1 and "host" or "any of the hosts", table.concat(names, ", "), check.describe(hosts)))
end

local function new(hosts, opts)
  check.hosts("connect", 1, hosts)
  opts = check.options("connect", 2, opts, {
    session_timeout = check.is.positive,
    connect_timeout = check.is.nonneg,
    op_timeout = check.is.positive,
    max_data = function(v)
      return type(v) == "number" and v >= 0 and v <= 2147483647 and math.floor(v) == v, "an integer of bytes >= 0"
    end,
    max_watch_bytes = function(v)
      return type(v) == "number" and v >= 1 and v < math.huge and math.floor(v) == v, "an integer of bytes >= 1"
    end,
    identity = check.is.string,
    log = check.is.func,
    log_level = check.is.oneof("none", "error", "warn", "info", "debug"),
    keepalive = check.is.boolean,
    wait = check.is.boolean,
    metrics = function(v) return true, v end, -- checked below, with a message of its own
    metric_label = check.is.func,
    lock_events = check.is.oneof("none", "error", "warn", "info", "debug"),
  })
  if opts.metrics ~= nil then metrics.check_sink("connect", 2, opts.metrics, "option 'metrics'") end
  local session_ms = math.floor((opts.session_timeout or 10) * 1000)
  local connect_ms = check.timeout("connect", 2, opts.connect_timeout, "option 'connect_timeout'")
  local op_ms = check.op_timeout("connect", 2, opts.op_timeout, "option 'op_timeout'")
  if opts.op_timeout == nil then op_ms = session_ms end
  -- the library's events: log_level, default warn; the ZooKeeper client's lines go to the log
  -- function when one or a log_level is given; its errors are always kept for diagnostics
  local threshold = LEVELS[opts.log_level or "warn"]
  local zk_level = (opts.log or opts.log_level) and threshold or 0
  local c, msg, code = core.new(hosts, session_ms, opts.identity, CORE_LEVELS[math.max(zk_level, 1)],
                                opts.keepalive == true)
  if not c then return new_failed(hosts, msg, code) end
  local sched = scheduler.new()
  sched.on_died = function(self) self:_reap() end
  local self = setmetatable({
    hosts = hosts,
    _c = c,
    _waiters = {},                      -- op id -> waiter
    _nwaiters = 0,                      -- entries of _waiters
    _ready = {},                        -- c:take_ready's buffer: id, type, status, id, ...
    _nparked = 0,                       -- waits parked in the core (at least the ready ones)
    _ready_at = nil, _ready_end = nil,  -- a taken batch not yet dispatched to its end (a wake raised)
    _holds = setmetatable({}, { __mode = "v" }), -- op id -> hold record (weak: a dropped lock can be collected)
    _giveups = {},                      -- give-up record -> true: a recipe on plain calls waits (recipe.waiting)
    _made = {},                         -- token -> path: a container a call in progress made (recipe.made)
    _slots = {},                        -- key -> a recipe module's per-client table (recipe.slot)
    _orphans = {},                      -- op id -> fn(status, result): an op nobody waits for any more
    _norphans = 0,                      -- entries of _orphans
    _scheduler = sched,                 -- the builtin scheduler (client:spawn/run/sleep)
    _adapters = { sched },              -- asked in order who owns the calling coroutine
    _log = opts.log or stderr_log,
    _log_level = threshold,
    _zk_log_level = zk_level,
    _session_ms = session_ms,            -- asked for
    _op_ms = op_ms,                      -- plain calls' default timeout (-1: none)
    _max_data = opts.max_data or 1047552, -- 1 MiB (jute.maxbuffer) less 1 KiB of request overhead
    _max_watch_bytes = opts.max_watch_bytes or 900000, -- the caches' budget (zklock.cache)
    _chroot = select(2, split_hosts(hosts)),
    _session_handlers = {},
    state = "CONNECTING",
  }, Client)
  -- metrics and lock events (zklock.metrics): nil when neither a sink nor event lines are wanted
  local events = opts.lock_events or "debug"
  if LEVELS[events] > threshold then events = "none" end -- the log level would drop every line
  self._metrics = metrics.reporter(opts.metrics or metrics.default(), opts.metric_label, events,
    function(level, text) self:_emit(level, text) end)
  -- wait = false: return at once in state CONNECTING (for hosts whose thread must never block);
  -- operations started meanwhile are sent once the session is up, their timeouts running from
  -- the call. connect_timeout does not apply then.
  if opts.wait ~= false then
    if opts.connect_timeout == nil then connect_ms = session_ms end
    local ok, err, ecode = self:_wait_connected(connect_ms)
    if not ok then
      self:close()
      return nil, err, ecode
    end
  end
  return self
end

-- Below this many ms, a session or connect timeout that ran out is named as the likely cause of
-- a failed connect (a server's minimum session timeout is 2 ticks; 1 s with tickTime 500 ms).
local SHORT_MS = 1000

-- Wait up to ms (-1: forever) for the first session.
function Client:_wait_connected(ms)
  local deadline = ms >= 0 and now() + ms or math.huge
  while self.state ~= "CONNECTED" do
    if self.state == "AUTH_FAILED" or self.state == "CLOSED" then
      return E.fail("ECLOSED", ("could not connect to %s: %s"):format(check.short(self.hosts), self.state))
    end
    local left = deadline - now()
    if left <= 0 then
      local why = self._last_zk_error or ""
      local hint = "server down, wrong port or firewall?"
      if why:find("refused", 1, true) then
        hint = "connection refused: is a server listening there?"
      elseif self._session_ms < SHORT_MS then
        -- the ZooKeeper client gives each connection attempt a share of the session timeout
        hint = ("session_timeout %g s is too short: a connection attempt gets a share of it, less than a"
          .. " round trip to the server and its reply take; the server raises any session timeout to at"
          .. " least 2 of its ticks anyway (tickTime, 2 s by default: 4 s)"):format(self._session_ms / 1000)
      elseif ms < SHORT_MS then
        hint = ("connect_timeout %g s is shorter than a round trip to the server and the session's set-up"
          .. " may take"):format(ms / 1000)
      elseif why:find("timed out", 1, true) or why:find("timeout", 1, true) then
        hint = "connection attempts timed out: host unreachable or firewalled?"
      end
      return E.fail("ETIMEDOUT", ("could not connect to %s within %g s (%s)")
        :format(check.short(self.hosts), ms / 1000, hint))
    end
    self:_pump(math.min(left, 100))
  end
  return true
end

---------------------------------------------------------------- event dispatch

function Client:_on_session(st)
  local name = STATE_NAMES[st] or tostring(st)
  if self._metrics then metrics.session(self._metrics, name, self.state) end
  if name == "EXPIRED" then
    self.state = "CONNECTING"
  else
    self.state = name
  end
  if name == "CONNECTED" then self:_check_session_timeout() end
  -- the recipes' hooks (recipe.on_session) first, then the user's handler (client:on_session)
  for _, fn in ipairs(self._session_handlers) do
    local ok, err = pcall(fn, name, self)
    if not ok then self:_emit("error", "session hook failed: " .. tostring(err)) end
  end
  local fn = self._session_fn
  if fn then
    local ok, err = pcall(fn, name, self)
    if not ok then self:_emit("error", "on_session handler failed: " .. tostring(err)) end
  end
end

-- Once per session: say so when the server gave another session timeout than the one asked for
-- (it clamps it to its minSessionTimeout..maxSessionTimeout, by default 2 to 20 ticks).
function Client:_check_session_timeout()
  local sid = self._c:session()
  if not sid or sid == self._timeout_logged then return end
  self._timeout_logged = sid
  local got = self._c:session_timeout()
  if got ~= self._session_ms then
    self:_emit("warn", ("the server gave session %s a timeout of %g s instead of the %g s asked for "
      .. "(it allows only its minSessionTimeout..maxSessionTimeout, by default 2..20 ticks)")
      :format(sid, got / 1000, self._session_ms / 1000))
  end
end

function Client:_dispatch()
  local c = self._c
  while true do
    local id, typ, st = c:next_event()
    if not id then break end
    if typ == core.EV_SESSION then
      self:_on_session(st)
    elseif typ == core.EV_LOCK_STATE then
      local hold = self._holds[id]
      if hold then hold:on_state(LOCK_STATE_NAMES[st]) end
    elseif typ == core.EV_WATCH then
      watch.on_event(self, id, st)
    elseif typ == core.EV_WARNING then
      self:_emit("warn", ("%s (operation %d)"):format(E.message(st), id))
    else
      local w = self._waiters[id]
      if w then
        self._waiters[id] = nil
        self._nwaiters = self._nwaiters - 1
        w.done, w.type, w.status = true, typ, st
        if typ == core.EV_OP_DONE then
          w.result = c:result(id)
          if watch.active(self) then watch.on_done(self, id, st) end
        end
        if w.adapter then w.adapter.wake(self, w) end
      elseif typ == core.EV_ACQUIRED then
        c:abandon(id) -- its waiter is gone (coroutine closed or collected): give it back
      elseif typ == core.EV_OP_DONE and self._orphans[id] then
        -- an op whose waiter went away, or a background delete: its follow-up (recipe.orphan)
        local fn = self._orphans[id]
        self._orphans[id] = nil
        self._norphans = self._norphans - 1
        local ok, err = pcall(fn, st, st == 0 and c:result(id) or nil)
        if not ok then self:_emit("error", "clean-up after an abandoned operation failed: " .. tostring(err)) end
      elseif typ == core.EV_OP_DONE and watch.active(self) then
        watch.on_done(self, id, st) -- a recipe's own read with a watch (no waiter)
      end
    end
  end
  -- then the parked waiters whose operation finished, all in one call (after the events above,
  -- so that a session change is seen before the waiters it failed run)
  -- The batch is out of the core once taken: should an adapter's wake raise, the rest of it
  -- stays in the buffer (from _ready_at on) and the next dispatch goes on with it before taking
  -- more, so that no other waiter is lost with the one whose wake failed.
  local buf, i, last = self._ready, self._ready_at, self._ready_end
  if not i then
    local n = self._nparked > 0 and c:take_ready(buf) or 0
    if n > 0 then
      self._nparked = self._nparked - n
      i, last = 1, 3 * n
      self._ready_end = last
    end
  end
  if i then
    local waiters = self._waiters
    while i <= last do
      local id, typ, st = buf[i], buf[i + 1], buf[i + 2]
      i = i + 3
      local w = waiters[id]
      if w then
        waiters[id] = nil
        self._nwaiters = self._nwaiters - 1
        w.done, w.type, w.status = true, typ, st
        self._ready_at = i -- where a dispatch goes on should this wake raise
        w.adapter.wake(self, w)
      elseif typ == core.EV_ACQUIRED then
        c:abandon(id) -- its waiter is gone (coroutine closed or collected): give it back
      end
    end
    self._ready_at, self._ready_end = nil, nil
  end
  local logs = c:logs() -- nil when the core has no line (no table per pump)
  if not logs then return end
  for _, line in ipairs(logs) do
    local lvl = ZOO_LEVELS[line:match("ZOO_(%u+)@") or ""] or 1
    if lvl == 1 then self._last_zk_error = line end
    if lvl <= self._zk_log_level then write_log(self, line, LEVEL_NAMES[lvl]) end
  end
end

-- The adapters' deadline folded into max_ms (-1: none).
function Client:_fold_timeout(max_ms)
  if watch.active(self) then
    local t = watch.timeout_ms(self)
    if t >= 0 and (max_ms < 0 or t < max_ms) then max_ms = t end
  end
  local adapters = self._adapters -- numeric loops: this runs on every pump
  for i = 1, #adapters do
    local a = adapters[i]
    if a.timeout_ms then
      local t = a.timeout_ms(self)
      if t >= 0 and (max_ms < 0 or t < max_ms) then max_ms = t end
    end
  end
  return max_ms
end

-- One round of work: wait up to max_ms for I/O (0 = poll, -1 = until something happens),
-- dispatch events, then let every adapter with a run queue take its step.
function Client:_pump(max_ms)
  if self.state == "CLOSED" then return end
  max_ms = self:_fold_timeout(max_ms or -1)
  if max_ms > 0 then max_ms = math.ceil(max_ms) end
  self._c:wait(max_ms)
  return self:_after_wait()
end

-- The rest of a pump, after its wait: dispatch events, then the adapters' steps.
function Client:_after_wait()
  self._pumped_at = now()
  self:_dispatch()
  if watch.active(self) then watch.expire(self) end
  local adapters = self._adapters
  for i = 1, #adapters do
    local a = adapters[i]
    if a.step and self.state ~= "CLOSED" then a.step(self) end
  end
  if self._pumped_at >= (self._next_reap or 0) then self:_reap() end
  -- what the coroutines just run asked for goes out now, so that the host's next wait on the fd
  -- ends with its replies (instead of a process() at once that only sends it)
  if self.state ~= "CLOSED" then self._c:flush() end
end

-- Release the holds whose owner coroutine ended (or was collected) without releasing them, as
-- the server would a crashed process's ephemeral node, and say so in the log. Runs from every
-- pump at most every REAP_MS, and at once after a spawned coroutine died.
local REAP_MS = 100
function Client:_reap()
  self._next_reap = now() + REAP_MS
  if self._metrics then metrics.requests(self._metrics, self._c:stats()) end
  if next(self._holds) == nil and next(self._giveups) == nil then return end
  local status = coroutine.status
  for _, a in ipairs(self._adapters) do
    if a.status then status = a.status end
  end
  for _, r in ipairs(self:reap_dead_owners(status)) do
    if r.waiting then
      self:_emit("warn", ("%s %s: its coroutine %s while it waited; its node is removed in the background")
        :format(r.kind, check.short(r.path), r.collected and "was collected" or "ended"))
    else
      self:_emit("warn", ("%s %s released: its owner coroutine %s without releasing it")
        :format(r.kind, check.short(r.path), r.collected and "was collected" or "ended"))
    end
  end
end

-- Before answering "is it held?": if nobody has pumped this client for a while (a Lua thread
-- busy elsewhere), drive the core once so that a session it has lost meanwhile is noticed and
-- reported (LOST) now, instead of a stale hold being reported as held. Runs no coroutine.
local REFRESH_AFTER_MS = 50
function Client:_refresh()
  local t = now()
  if self.state == "CLOSED" or t - (self._pumped_at or 0) < REFRESH_AFTER_MS then return end
  self._pumped_at = t
  self._c:wait(0)
  self:_dispatch()
end

-- The adapter that owns the calling coroutine (may suspend it), or nil: the caller blocks.
function Client:_owner()
  local adapters = self._adapters
  for i = 1, #adapters do
    local a = adapters[i]
    if a.owns(self) then return a end
  end
  return nil
end

-- Wait for w.done: suspend through the adapter that owns the caller, else block while pumping.
-- A waiter of an adapter is parked in the core (its grant or failure comes through c:take_ready,
-- with no event of its own to dispatch): by the call that started its operation (c:acquire and
-- c:release take a park flag; then `parked` is true), or here.
function Client:_await(w, a, parked)
  if a == nil then a = self:_owner() end -- false: the caller looked, no adapter owns it
  if a then
    w.adapter = a
    if parked then
      self._nparked = self._nparked + 1
    elseif w.grant and self._waiters[w.id] == w and self._c:park(w.id) then
      self._nparked = self._nparked + 1
    end
    a.wait(self, w)
  else
    self:_block(w)
  end
  w.consumed = true
  return w
end

-- Block the caller (no adapter owns it) until w.done, driving the client. The fast path: while
-- nothing else is due (no run queue ready, no other event), one C call waits and hands back w's
-- own event (c:wait_for), with none of the pump's dispatch; anything else goes through _pump.
function Client:_block(w)
  local c, id = self._c, w.id
  while not w.done and self.state ~= "CLOSED" do
    local max_ms = self:_fold_timeout(-1)
    local typ, st
    if max_ms == 0 or self._waiters[id] ~= w then
      -- a wait on a watch or a signal (not an op's waiter), or something due now: the full pump,
      -- blocking as long as nothing is due
      self:_pump(-1)
    else
      if max_ms > 0 then max_ms = math.ceil(max_ms) end
      typ, st = c:wait_for(id, max_ms)
      if not typ then self:_after_wait() end -- other events, or the wait ended without w's
    end
    if typ then
      local t = now()
      self._pumped_at = t
      if t >= (self._next_reap or 0) then self:_reap() end
      self._waiters[id] = nil
      self._nwaiters = self._nwaiters - 1
      w.done, w.type, w.status = true, typ, st
      if typ == core.EV_OP_DONE then
        w.result = c:result(id)
        if watch.active(self) then watch.on_done(self, id, st) end
      end
    end
  end
end

-- Register a waiter for core operation `id`; grant = true when the op acquires something that
-- must be given back if nobody picks it up.
function Client:_waiter(id, grant)
  -- every field the dispatch and the wait set later is there from the start: the table is made
  -- at its final size instead of growing (and being rehashed) twice per wait
  local w = { id = id, grant = grant or false, done = false, type = false, status = false, adapter = false,
              consumed = false }
  if self._waiters[id] == nil then self._nwaiters = self._nwaiters + 1 end
  self._waiters[id] = w
  return w
end

---------------------------------------------------------------- host API: scheduling

-- client:use(adapter): install a host adapter (see docs/design.md, "Host API"). It is asked after
-- the builtin scheduler whether it owns the calling coroutine; a second use replaces the first.
function Client:use(adapter)
  check.open(self, "use")
  if type(adapter) ~= "table" or type(adapter.owns) ~= "function" or type(adapter.wait) ~= "function"
     or type(adapter.wake) ~= "function" or type(adapter.sleep) ~= "function" then
    check.argerror("use", 1, "expected an adapter with owns, wait, wake and sleep functions, got "
      .. check.describe(adapter))
  end
  self._adapters = { self._scheduler, adapter }
  return self
end

-- client:abandon(w): the coroutine waiting in w is gone for good (it will never return from
-- adapter.wait): forget the wait and give back what its operation obtained, in the background.
function Client:abandon(w)
  check.client(self, "abandon")
  if type(w) ~= "table" or type(w.id) ~= "number" then
    check.argerror("abandon", 1, "expected a waiter record, got " .. check.describe(w))
  end
  self._next_reap = 0 -- its coroutine may have been a recipe's (recipe.waiting): reap at the next pump
  if w.watch then return watch.drop_wait(self, w) end -- a wait on a watch (zklock.internal.watch)
  if w.done then
    if w.type == core.EV_ACQUIRED and not w.consumed then
      w.consumed = true
      if self.state ~= "CLOSED" then self._c:abandon(w.id) end
    elseif w.orphan and not w.consumed then -- its answer came, nobody took it: the follow-up
      w.consumed = true
      if self.state ~= "CLOSED" then w.orphan(w.status, w.result) end
    end
    return
  end
  if self._waiters[w.id] == w then
    self._waiters[w.id] = nil
    self._nwaiters = self._nwaiters - 1
    if w.grant and self.state ~= "CLOSED" then self._c:abandon(w.id) end
    if watch.active(self) then watch.abandoned(self, w.id) end
    if w.orphan and self.state ~= "CLOSED" then self:_orphan(w.id, w.orphan) end
  end
end

-- fn(status, result) runs from the dispatch when op `id` is done (nobody waits for it).
function Client:_orphan(id, fn)
  if self._orphans[id] == nil then self._norphans = self._norphans + 1 end
  self._orphans[id] = fn
end

-- Start core op `optype` on path in the background: nobody waits for it; fn(status, result)
-- runs from the dispatch when it is done. version: -1 (any) when nil. -> id | nil, msg, code
function Client:_background(optype, path, data, flags, version, fn)
  local id, msg, code = self._c:op(optype, path, data, flags or 0, version or -1, 0, 0)
  if id then self:_orphan(id, fn) end
  return id, msg, code
end

-- Delete `path` in the background (a recipe's node given up by a coroutine that cannot wait
-- for it any more, or whose delete failed on a connection loss): sent as soon as the client is
-- connected, sent again after a connection loss (the outcome of a delete in flight then is
-- unknown) while the session lives, up to DISCARD_TRIES times (then a warning: the node stays
-- until the session ends). A session that ends takes the node (ephemeral) with it.
local DISCARD_TRIES = 10
local DISCARD_DONE = { [0] = true, [core.errno.ZNONODE] = true, [core.errno.ESESSION] = true,
                       [core.errno.ECLOSED] = true, [core.errno.ZSESSIONEXPIRED] = true }
-- again: no answer (zklock.outcome_unknown) while the session lives
local DISCARD_AGAIN = setmetatable({}, { __index = function(_, st)
  return core.outcome_unknown(st) and not DISCARD_DONE[st]
end })
function Client:_discard(path, tries)
  tries = tries or 1
  if self.state == "CLOSED" then return end
  local id, msg = self:_background(core.OP_DELETE, path, nil, 0, -1, function(st)
    if DISCARD_AGAIN[st] and tries < DISCARD_TRIES then return self:_discard(path, tries + 1) end
    if not DISCARD_DONE[st] then
      self:_emit("warn", ("could not delete %s in the background: %s"):format(check.short(path), E.message(st)))
    end
  end)
  if not id then
    self:_emit("warn", ("could not delete %s in the background: %s"):format(check.short(path), tostring(msg)))
  end
end

-- client:held() -> true while a lock or lease of this client is held.
function Client:held()
  check.client(self, "held")
  if self.state == "CLOSED" then return false end
  return next(self._holds) ~= nil
end

-- client:reap_dead_owners([status]) -> { { kind =, path =, collected = }, ... }: releases, in
-- the background, every mutex or read-write lock hold whose owner coroutine is dead (it raised,
-- returned or was closed without releasing; nobody can release it any more) or was collected.
-- `status` is the coroutine status function to trust (OpenResty's coroutine.status misreports
-- other requests' coroutines). The client runs it by itself (see Client:_reap); this call
-- reports nothing, the caller does.
function Client:reap_dead_owners(status)
  check.client(self, "reap_dead_owners")
  local out = {}
  if self.state == "CLOSED" then return out end
  status = status or coroutine.status
  local dead = {}
  for _, hold in pairs(self._holds) do
    if hold.owned then
      local owner = hold:owner()
      if owner == nil or (type(owner) == "thread" and status(owner) == "dead") then
        dead[#dead + 1] = hold
      end
    end
  end
  for _, hold in ipairs(dead) do
    hold:drop()
    out[#out + 1] = { kind = hold.kind, path = hold.path, collected = hold:owner() == nil }
  end
  -- recipes on plain calls whose coroutine died while it waited (recipe.waiting): they give up
  local gone = {}
  for rec in pairs(self._giveups) do
    local owner = rec.owner_ref[1]
    if owner == nil or status(owner) == "dead" then gone[#gone + 1] = rec end
  end
  for _, rec in ipairs(gone) do
    local collected = rec.owner_ref[1] == nil
    self:_give_up(rec)
    out[#out + 1] = { kind = rec.kind, path = rec.path, collected = collected, waiting = true }
  end
  return out
end

-- A give-up record's coroutine is gone: its create in flight (if any) is abandoned (the node it
-- makes is deleted when the answer comes, through the create's orphan function), then the
-- recipe's own drop() deletes the node it knows of, in the background.
function Client:_give_up(rec)
  self._giveups[rec] = nil
  if rec.create_w then
    self:abandon(rec.create_w)
    rec.create_w = nil
  end
  local ok, err = pcall(rec.drop)
  if not ok then self:_emit("error", ("%s %s: giving up failed: %s"):format(rec.kind, rec.path, tostring(err))) end
end

---------------------------------------------------------------- builtin scheduler

-- client:spawn(fn, ...) -> coroutine: run fn(...) under this client's builtin scheduler. It
-- starts on the next process() (client:run, zklock.run, a blocking wait, or a host pump).
function Client:spawn(fn, ...)
  check.open(self, "spawn")
  if type(fn) ~= "function" then check.argerror("spawn", 1, "expected a function, got " .. check.describe(fn)) end
  return self._scheduler.spawn(fn, ...)
end

-- client:tasks() -> number of coroutines spawned on this client that have not finished.
function Client:tasks()
  check.client(self, "tasks")
  return self._scheduler.count()
end

-- Drive the client until every spawned coroutine has finished (or `timeout` seconds pass:
-- then returns nil, "ETIMEDOUT: ...", "ETIMEDOUT").
function Client:run(timeout)
  check.client(self, "run")
  local ms = check.timeout("run", 1, timeout) -- -1: forever
  local deadline = ms >= 0 and now() + ms or nil
  local S = self._scheduler
  -- one client: each round is one pump that waits (in the core's own wait, folded with every
  -- deadline, at most 1 s) and runs what became ready; zklock.run (several clients) polls their
  -- fds between non-blocking pumps instead
  local wait = 0
  while self.state ~= "CLOSED" do
    self:_pump(wait)
    if self.state == "CLOSED" then break end
    local left_tasks = S.count()
    if left_tasks == 0 then break end
    local msg, code
    wait, msg, code = scheduler.next_wait(1000, deadline, left_tasks, timeout)
    if not wait then return nil, msg, code end
  end
  return true
end

-- Sleep `seconds` (nil or math.huge: until the client is closed): suspends a coroutine an
-- adapter owns, otherwise blocks while pumping.
local FOREVER_CHUNK = 1 -- s: a host adapter's forever sleep looks at the client this often
function Client:sleep(seconds)
  check.open(self, "sleep")
  local ms = check.timeout("sleep", 1, seconds)
  local a = self:_owner()
  if a then
    if ms >= 0 then return a.sleep(self, ms / 1000) end
    if a == self._scheduler then return a.sleep(self, math.huge) end -- woken by close()
    while self.state ~= "CLOSED" do a.sleep(self, FOREVER_CHUNK) end
    return
  end
  local deadline = ms >= 0 and now() + ms or math.huge
  while self.state ~= "CLOSED" do
    local left = deadline - now()
    if left <= 0 then return end
    self:_pump(left == math.huge and -1 or left)
  end
end

---------------------------------------------------------------- plain znode operations

-- With a chroot in the hosts string ("host:port/app"), a ZNONODE at the top of it may mean the
-- chroot node itself is missing: then say so. -> extra text for a message, or ""
function Client:_explain(status)
  if status ~= core.errno.ZNONODE or self._chroot == "" or self.state == "CLOSED" then return "" end
  local ok, there = pcall(self.exists, self, "/", { timeout = math.min(5, math.max(self._op_ms, 1) / 1000) })
  if ok and there == false then
    return ("; the chroot %s does not exist (create it first, through a client connected without it)")
      :format(check.short(self._chroot))
  end
  return ""
end

local function op_result(self, w, what, path, ms)
  if not w.done then
    if what ~= "get" and what ~= "children" and what ~= "exists" then
      return E.fail("ECLOSED", ("%s %s: the client was closed before its answer came; outcome unknown: the"
        .. " operation may have been applied"):format(what, check.short(path)))
    end
    return E.fail("ECLOSED", "the client was closed")
  end
  local st = w.status
  if st ~= 0 then
    local text = E.strerror(st)
    if st == core.errno.ETIMEDOUT then
      text = ("no answer within %g s (client option op_timeout, or the call's timeout option)"):format(ms / 1000)
    elseif st == core.errno.ESESSION then
      text = "the ZooKeeper session was lost while it waited"
    end
    if what == "create" then text = text .. self:_explain(st) end
    if w.ttl and st == core.errno.ZUNIMPLEMENTED then
      text = text .. "; the server refused a TTL node: it must run with -Dzookeeper.extendedTypesEnabled=true"
    end
    if what ~= "get" and what ~= "children" and what ~= "exists" and core.outcome_unknown(st) then
      -- a write without the server's answer (zklock.outcome_unknown): it may have been applied
      text = text .. "; outcome unknown: the operation may have been applied"
    end
    return E.fail(st, ("%s %s: %s"):format(what, check.short(path), text))
  end
  return w.result
end

-- The core's id for an ACL option value (registered once per distinct list; 0 = open).
local function recipe_acl_id(self, v)
  local entries = check.acl_entries(v)
  if not entries then return 0 end
  local parts = {}
  for _, e in ipairs(entries) do parts[#parts + 1] = table.concat(e, "\0") end
  local key = table.concat(parts, "\1")
  self._acls = self._acls or {}
  local id = self._acls[key]
  if not id then
    id = assert(self._c:acl(entries))
    self._acls[key] = id
  end
  return id
end

local function check_path(self, fname, path)
  check.open(self, fname)
  check.znode_path(fname, 1, path)
  check.fits(fname, 1, #path, self._max_data, ("path: %d bytes (%s)"):format(#path, check.describe(path)))
end

-- The { timeout = s } option of a plain call -> ms for the core (-1: none). Absent: op_timeout.
local PLAIN_OPTIONS = { timeout = function() return true end }
local READ_OPTIONS = { timeout = PLAIN_OPTIONS.timeout, watch = check.is.boolean }
local function plain_timeout(self, fname, argn, opts, checked)
  if opts ~= nil and type(opts) ~= "table" then
    check.argerror(fname, argn, "options: expected a table such as { timeout = 5 }, got " .. check.describe(opts))
  end
  if not checked then check.options(fname, argn, opts, PLAIN_OPTIONS) end
  return self:_plain_ms(fname, argn, opts)
end

function Client:_plain_ms(fname, argn, opts)
  if opts == nil or opts.timeout == nil then
    return self._op_ms
  end
  return check.op_timeout(fname, argn, opts.timeout, "option 'timeout'")
end

local check_version = check.version

local function check_size(self, fname, path, data)
  if data then
    check.fits(fname, 2, #data + #path, self._max_data, ("data: %d bytes (with the path)"):format(#data + #path))
  end
end

-- giveup: a give-up record (recipe.waiting) whose create this is: its waiter carries the
-- record's orphan function and is known to the record while it waits.
-- ttl_ms: a create's TTL (a TTL node), else nil.
local function plain(self, fname, optype, path, ms, data, flags, version, acl, giveup, ttl_ms)
  local id, msg, code = self._c:op(optype, path, data, flags, version, acl, ms > 0 and ms or 0, false, ttl_ms)
  if not id then return nil, msg, code end
  local w = self:_waiter(id)
  w.ttl = ttl_ms
  if giveup then
    w.orphan = giveup.orphan
    giveup.create_w = w
  end
  self:_await(w)
  if giveup then giveup.create_w = nil end
  return op_result(self, w, fname, path, ms)
end

-- A read: { timeout = s, watch = true }. -> result, watch (when armed) | nil, msg, code
local function read(self, fname, optype, path, opts)
  check_path(self, fname, path)
  if opts ~= nil and type(opts) ~= "table" then
    check.argerror(fname, 2, "options: expected a table such as { timeout = 5, watch = true }, got "
      .. check.describe(opts))
  end
  check.options(fname, 2, opts, READ_OPTIONS)
  local ms = self:_plain_ms(fname, 2, opts)
  if not (opts and opts.watch) then return plain(self, fname, optype, path, ms) end
  local r, msg, code
  for _ = 1, 2 do
    local id, wobj, shared
    id, wobj, shared = watch.start(self, fname, optype, path, ms)
    if not id then return nil, wobj, shared end
    local w = self:_waiter(id)
    w.grant = true -- a waiter that goes away gives the watch back (Client:abandon)
    r, msg, code = op_result(self, self:_await(w), fname, path, ms)
    local ok = r or (code == "ZNONODE" and fname == "exists")
    -- read on a shared watch whose own read armed nothing (a get that found no node): once more
    if not (ok and shared and wobj.unarmed) then
      if r then return r, wobj end
      if ok then return false, wobj end
      return nil, msg, code
    end
  end
  return nil, msg, code
end

-- client:get(path, { timeout = s, watch = true }) -> data, stat[, watch] | nil, msg, code
function Client:get(path, opts)
  local r, wobj, code = read(self, "get", core.OP_GET, path, opts)
  if not r then return nil, wobj, code end
  return r.data or "", r, wobj
end

-- client:children(path, { timeout = s, watch = true }) -> array of names (unsorted)[, watch]
--   | nil, msg, code
function Client:children(path, opts)
  local r, wobj, code = read(self, "children", core.OP_CHILDREN, path, opts)
  if not r then return nil, wobj, code end
  return r.children or {}, wobj
end

-- client:exists(path, { timeout = s, watch = true }) -> stat | false[, watch] | nil, msg, code
--   (with watch, a missing node's watch fires when it is created)
function Client:exists(path, opts)
  local r, wobj, code = read(self, "exists", core.OP_EXISTS, path, opts)
  if r then return r, wobj end
  if r == false then return false, wobj end
  if code == "ZNONODE" then return false end
  return nil, wobj, code
end

local CREATE_OPTIONS = { ephemeral = check.is.boolean, sequential = check.is.boolean, container = check.is.boolean,
                         parents = check.is.boolean, acl = check.acl_option, timeout = PLAIN_OPTIONS.timeout,
                         ttl = function(v)
                           return type(v) == "number" and v > 0 and v * 1000 < 2 ^ 53, "a number of seconds > 0"
                         end }

-- client:create(path, data, { ephemeral=, sequential=, container=, parents=, acl=, ttl= }) -> created path
--   ttl = s: a TTL node (persistent; the server deletes it once it has been childless and
--   unchanged for that long; the server needs -Dzookeeper.extendedTypesEnabled=true).
--   parents = true creates missing ancestors first (as containers, like lock parents, with the
--   same ACL). acl: "open" (default), "creator" or a list of { scheme, id, perms }, as for locks.
function Client:create(path, data, opts)
  local created, msg, code = self:_create(path, data, opts)
  return created, msg, code
end

function Client:_create(path, data, opts, giveup)
  check.open(self, "create")
  if opts ~= nil and type(opts) ~= "table" then
    check.argerror("create", 3, "options: expected a table such as { ephemeral = true, sequential = true }"
      .. " (numeric flags are not accepted), got " .. check.describe(opts))
  end
  opts = check.options("create", 3, opts, CREATE_OPTIONS)
  if opts.container and (opts.ephemeral or opts.sequential) then
    check.argerror("create", 3, "options: a container cannot be ephemeral or sequential")
  end
  if opts.ttl and (opts.ephemeral or opts.container) then
    check.argerror("create", 3, "options: a TTL node (option 'ttl') is persistent: not ephemeral or a container")
  end
  if data ~= nil and type(data) ~= "string" then
    check.argerror("create", 2, "data: expected a string or nil, got " .. check.describe(data))
  end
  check_path(self, "create", path)
  check_size(self, "create", path, data)
  local ms = plain_timeout(self, "create", 3, opts, true)
  -- parents: the core makes the missing ancestors as containers (same ACL), pipelined ahead of
  -- the node, and again when the server reaps one before the node is in (ZKL_CREATE_PARENTS)
  local flags = (opts.ephemeral and core.CREATE_EPHEMERAL or 0) + (opts.sequential and core.CREATE_SEQUENTIAL or 0)
    + (opts.container and core.CREATE_CONTAINER or 0) + (opts.parents and core.CREATE_PARENTS or 0)
  local r, msg, code = plain(self, "create", core.OP_CREATE, path, ms, data or "", flags, -1,
                             recipe_acl_id(self, opts.acl), giveup, opts.ttl and math.ceil(opts.ttl * 1000))
  if r then
    if r.data then return r.data, r end -- r: the stat of the node made (czxid, ...), for recipes
    -- made, but the core ran out of memory copying its name: a plain node's name is its path
    if not opts.sequential then return path, r end
    return nil, ("create %s: the node was made (czxid %d), but its sequential name was lost (out of memory)")
      :format(path, r.czxid or 0), "ENOMEM"
  end
  return nil, msg, code
end

-- client:set(path, data, version, { timeout = s }) -> stat
function Client:set(path, data, version, opts)
  check_path(self, "set", path)
  if type(data) ~= "string" then
    check.argerror("set", 2, "data: expected a string, got " .. check.describe(data))
  end
  version = check_version("set", 3, version)
  check_size(self, "set", path, data)
  return plain(self, "set", core.OP_SET, path, plain_timeout(self, "set", 4, opts), data, 0, version)
end

-- client:delete(path, version, { timeout = s }) -> true
function Client:delete(path, version, opts)
  check_path(self, "delete", path)
  version = check_version("delete", 2, version)
  local r, msg, code = plain(self, "delete", core.OP_DELETE, path, plain_timeout(self, "delete", 3, opts), nil, 0,
                             version)
  if not r then return nil, msg, code end
  return true
end

-- client:cache(path, opts) -> a node or tree held in memory, kept current by watches (zklock.cache)
function Client:cache(path, opts) return require("zklock.cache").new(self, path, opts) end

-- client:member(path, data, opts) -> an ephemeral node made again after a session loss (zklock.member)
function Client:member(path, data, opts) return require("zklock.member").new(self, path, data, opts) end

-- client:group(path, opts) -> the members under path and their data, with changes (zklock.group)
function Client:group(path, opts) return require("zklock.group").new(self, path, opts) end

---------------------------------------------------------------- session

-- fn(state, client) on every session change: "CONNECTED", "SUSPENDED", "EXPIRED", "CLOSED".
-- Replaces the handler; nil removes it. -> the client
function Client:on_session(fn)
  check.client(self, "on_session")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_session", 1, "expected a function (or nil to remove the handler), got " .. check.describe(fn))
  end
  self._session_fn = fn
  return self
end

-- session id (16 hex digits) and password, while a session exists.
function Client:session()
  check.open(self, "session")
  return self._c:session()
end

function Client:session_timeout()
  check.open(self, "session_timeout")
  return self._c:session_timeout() / 1000
end

-- Seconds from now until the client reports LOST if the server answers nothing more (>= 0), or
-- nil while there is no session. See zkl_client_loss_ms in zklock.h.
function Client:loss_deadline()
  check.open(self, "loss_deadline")
  local ms = self._c:loss_ms()
  if ms < 0 then return nil end
  return ms / 1000
end

-- Counters of requests sent and grants made by this client (see zkl_stats in zklock.h).
function Client:stats()
  check.open(self, "stats")
  return self._c:stats()
end

function Client:add_auth(scheme, credentials)
  check.open(self, "add_auth")
  if type(scheme) ~= "string" or scheme == "" then
    check.argerror("add_auth", 1, "scheme: expected a string such as \"digest\", got " .. check.describe(scheme))
  end
  if type(credentials) ~= "string" then
    check.argerror("add_auth", 2, "credentials: expected a string such as \"user:password\", got "
      .. check.describe(credentials))
  end
  return self._c:add_auth(scheme, credentials)
end

---------------------------------------------------------------- host API: driving the client
--
-- A host loop (cqueues, libuv, nginx, a hand-written poll loop, zklock.run) drives the client
-- with one pump: wait until client:fd() is readable or client:next_timeout_ms() has passed, then
-- call client:process(); repeat until the client is closed. One pump per client.

-- client:fd() -> the client's pollable fd (readable when process() has work). Stable for the
-- client's life; closed by client:close().
function Client:fd() check.open(self, "fd"); return self._c:fd() end

-- client:next_timeout_ms() -> ms until client:process() must run, >= 0, or -1 for no deadline:
-- the core's deadline folded with the adapters' (0 while a spawned coroutine is ready to run,
-- else at most the first client:sleep deadline of the builtin scheduler). -1 on a closed client.
function Client:next_timeout_ms()
  check.client(self, "next_timeout_ms")
  if self.state == "CLOSED" then return -1 end
  return self:_fold_timeout(self._c:timeout())
end

-- client:pending() -> number of operations in flight that something waits for (an acquire,
-- release or znode call of any coroutine or thread), plus the spawned coroutines ready to run.
-- 0 when idle (locks may still be held) and on a closed client. A host pump that cannot watch
-- fd() (nginx) polls often while this is > 0 and sleeps up to next_timeout_ms() otherwise.
function Client:pending()
  check.client(self, "pending")
  if self.state == "CLOSED" then return 0 end
  local n = self._nwaiters + self._norphans + watch.pending(self)
  for _, a in ipairs(self._adapters) do
    if a.pending then n = n + a.pending(self) end
  end
  return n
end

-- The client is a cqueues pollable (cqueues.poll(client) returns when process() should run):
--   client:pollfd() -> fd(), or nil once closed
--   client:events() -> "r"
--   client:timeout() -> next_timeout_ms() in seconds (cqueues wants seconds), nil for no
--                       deadline; 0 once closed (a poll on a closed client returns at once)
-- cqueues keeps a polled fd registered after the poll returns: in a loop of your own, call
-- cqueues.cancel(client:fd()) before client:close() (zklock.adapters.cqueues does it).
function Client:pollfd()
  check.client(self, "pollfd")
  if self.state == "CLOSED" then return nil end
  return self._c:fd()
end
function Client:events() return "r" end
function Client:timeout()
  check.client(self, "timeout")
  if self.state == "CLOSED" then return 0 end
  local ms = self:next_timeout_ms()
  if ms < 0 then return nil end
  return ms / 1000
end

-- client:process(): one round of work without waiting: read what the fd has, dispatch events
-- (waking adapter waiters), and let the builtin scheduler fire client:sleep timers and run
-- ready spawned coroutines.
function Client:process()
  check.open(self, "process")
  self:_pump(0)
end

-- Close the session: pending acquires fail with ECLOSED, held locks vanish with the session.
function Client:close()
  check.client(self, "close")
  if self.state == "CLOSED" then return end
  -- containers that calls in progress made for their own waits: the server never reaps one that
  -- had no child. The deletes go out ahead of the session's close (a non-empty one is refused).
  for tok, path in pairs(self._made) do
    self._made[tok] = nil
    self:_background(core.OP_DELETE, path, nil, 0, -1, function() end)
  end
  self._c:close()
  self:_dispatch()
  if self._metrics then metrics.requests(self._metrics, self._c:stats()) end
  self.state = "CLOSED"
  for _, hold in pairs(self._holds) do hold:on_state("CLOSED") end
  self._orphans, self._norphans, self._giveups = {}, 0, {} -- the session took every node with it
  for id, w in pairs(self._waiters) do
    self._waiters[id] = nil
    self._nwaiters = self._nwaiters - 1
    if not w.done then
      w.done, w.type, w.status = true, core.EV_FAILED, core.errno.ECLOSED
      if w.adapter then w.adapter.wake(self, w) end
    end
  end
  if watch.active(self) then watch.close(self) end -- Lua-side waits (signals) end too
  for _, a in ipairs(self._adapters) do
    if a.close then a.close(self) end
  end
  self._c:free()
end

function Client:__tostring()
  return ("zklock.client(%s, %s)"):format(self.hosts, self.state)
end

-- The recipe interface (what recipes use of a client) is zklock.internal.recipe.
function Client:_acl_id(v) return recipe_acl_id(self, v) end
require("zklock.internal.recipe").bind(Client)

return { new = new, Client = Client }
