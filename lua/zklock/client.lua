-- zklock.client: a connection to ZooKeeper, its event pump and the builtin coroutine scheduler.
--
-- Every operation of the C core completes through an event. A caller waits for its event in one
-- of two ways:
--   * inside a coroutine run by this client's scheduler (client:spawn), it suspends; the
--     scheduler resumes it when the event arrives, so thousands of waiters share one thread;
--   * anywhere else (the main thread, a busted test body), it blocks, pumping the client
--     (and running every spawned coroutine that becomes ready) until its event arrives.
-- The decision is made here, in Lua, never in C, and we never yield merely because
-- coroutine.isyieldable() is true: an unknown resumer would receive the yield.
local core = require("zklock.core")
local check = require("zklock.check")

local Client = {}
Client.__index = Client
Client.__name = "zklock.client"

local WAIT = setmetatable({}, { __tostring = function() return "zklock.wait" end })
local SWEEP_MS = 100 -- how often waiters of dead coroutines are looked for

local running, yield, resume, status = coroutine.running, coroutine.yield, coroutine.resume, coroutine.status
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

local function warn_(msg)
  if warn then warn("zklock: " .. msg) end
end

-- Lua 5.4: a to-be-closed guard around the yield, so that coroutine.close() on a waiting
-- coroutine withdraws its queue node at once. LuaJIT cannot parse it; there the periodic
-- sweep of dead coroutines does the same, a little later.
local guarded_yield = (load or loadstring)([[
  local yield, on_close = ...
  return function(w)
    local guard <close> = setmetatable({}, { __close = function() on_close(w) end })
    yield(w.token)
    w.consumed = true -- not reached when the coroutine is closed while suspended
  end
]])

local function new(hosts, opts)
  check.hosts("connect", 1, hosts)
  opts = check.options("connect", 2, opts, {
    session_timeout = check.is.positive,
    connect_timeout = check.is.nonneg,
    identity = check.is.string,
    log = check.is.func,
    log_level = check.is.oneof("none", "error", "warn", "info", "debug"),
    keepalive = check.is.boolean,
    wait = check.is.boolean,
  })
  local levels = { none = core.LOG_NONE, error = core.LOG_ERROR, warn = core.LOG_WARN,
                   info = core.LOG_INFO, debug = core.LOG_DEBUG }
  local session_ms = math.floor((opts.session_timeout or 10) * 1000)
  local level = levels[opts.log_level or (opts.log and "warn" or "none")]
  local c, msg, code = core.new(hosts, session_ms, opts.identity, level, opts.keepalive == true)
  if not c then return nil, msg, code end
  local self = setmetatable({
    hosts = hosts,
    _c = c,
    _waiters = {},                      -- op id -> waiter
    _nwaiters = 0,                      -- entries of _waiters
    _holds = setmetatable({}, { __mode = "v" }), -- op id -> hold (weak: a dropped lock can be collected)
    _tasks = {},                        -- spawned coroutine -> true
    _ntasks = 0,
    _ready = {},                        -- queue of { co, args... }
    _timers = {},                       -- sorted by deadline
    _log = opts.log,
    _session_handlers = {},
    _next_sweep = 0,
    state = "CONNECTING",
  }, Client)
  -- wait = false: return at once in state CONNECTING (for hosts whose thread must never block);
  -- operations started meanwhile are sent once the session is up, their timeouts running from
  -- the call. connect_timeout does not apply then.
  if opts.wait ~= false then
    local ok, err, ecode = self:_wait_connected(opts.connect_timeout or (session_ms / 1000))
    if not ok then
      self:close()
      return nil, err, ecode
    end
  end
  return self
end

function Client:_check_open(fname)
  if self.state == "CLOSED" then
    error(("zklock: %s on a closed client"):format(fname), 3)
  end
end

function Client:_wait_connected(timeout)
  local deadline = now() + timeout * 1000
  while self.state ~= "CONNECTED" do
    local left = deadline - now()
    if left <= 0 then
      return nil, ("ETIMEDOUT: could not connect to %s within %g s"):format(self.hosts, timeout), "ETIMEDOUT"
    end
    self:_pump(math.min(left, 100))
  end
  return true
end

---------------------------------------------------------------- event dispatch

function Client:_on_session(st)
  local name = STATE_NAMES[st] or tostring(st)
  if name == "EXPIRED" then
    self.state = "CONNECTING"
  else
    self.state = name
  end
  for _, fn in ipairs(self._session_handlers) do
    local ok, err = pcall(fn, name, self)
    if not ok then warn_("session handler failed: " .. tostring(err)) end
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
      if hold then hold.lock:_state_changed(hold, LOCK_STATE_NAMES[st]) end
    elseif typ == core.EV_WARNING then
      warn_(("%s (operation %d)"):format(core.strerror(st), id))
    else
      local w = self._waiters[id]
      if w then
        self._waiters[id] = nil
        self._nwaiters = self._nwaiters - 1
        w.done, w.type, w.status = true, typ, st
        if typ == core.EV_OP_DONE then w.result = c:result(id) end
        if w.co then self:_ready_push(w.co, w)
        elseif w.adapter then w.adapter.wake(self, w) end
      elseif typ == core.EV_ACQUIRED then
        c:abandon(id) -- its waiter is gone (coroutine closed or collected): give it back
      end
    end
  end
  if self._log then
    for _, line in ipairs(c:logs()) do pcall(self._log, line) end
  end
end

-- One round of work: wait up to max_ms for I/O (0 = poll), process, dispatch, fire timers,
-- run ready coroutines.
function Client:_pump(max_ms)
  if self.state == "CLOSED" then return end
  local c = self._c
  if #self._ready > 0 then max_ms = 0 end
  local t = self._timers[1]
  if t then
    local left = t.at - now()
    if left < 0 then left = 0 end
    if not max_ms or max_ms < 0 or left < max_ms then max_ms = left end
  end
  if max_ms and max_ms > 0 then max_ms = math.ceil(max_ms) end
  c:wait(max_ms or -1)
  self._pumped_at = now()
  self:_dispatch()
  self:_fire_timers()
  self:_sweep()
  self:_run_ready()
end

-- Before answering "is it held?": if nobody has pumped this client for a while (a Lua thread
-- busy elsewhere), drive the core once so that a session it has lost meanwhile is noticed and
-- reported (LOST) now, instead of a stale hold being reported as held. Runs no coroutine.
local REFRESH_AFTER_MS = 50
function Client:_refresh()
  if self.state == "CLOSED" or now() - (self._pumped_at or 0) < REFRESH_AFTER_MS then return end
  self._pumped_at = now()
  self._c:wait(0)
  self:_dispatch()
end

function Client:_fire_timers()
  local timers, t = self._timers, now()
  while timers[1] and timers[1].at <= t do
    local timer = table.remove(timers, 1)
    timer.done = true
    if timer.co then self:_ready_push(timer.co, timer) end
  end
end

-- Waiters whose coroutine died without being resumed (coroutine.close under LuaJIT, or an
-- error raised around it) withdraw their queue nodes here.
function Client:_sweep()
  local t = now()
  if t < self._next_sweep then return end
  self._next_sweep = t + SWEEP_MS
  for _, w in pairs(self._waiters) do
    if w.co and status(w.co) == "dead" then self:_abandon_waiter(w) end
  end
  for co in pairs(self._tasks) do -- closed (coroutine.close) or killed by a foreign resume
    if status(co) == "dead" then
      self._tasks[co] = nil
      self._ntasks = self._ntasks - 1
    end
  end
end

function Client:_abandon_waiter(w)
  if w.done then
    if w.type == core.EV_ACQUIRED and not w.consumed then
      w.consumed = true
      self._c:abandon(w.id)
    end
    return
  end
  if self._waiters[w.id] == w then
    self._waiters[w.id] = nil
    self._nwaiters = self._nwaiters - 1
    if w.lock and self.state ~= "CLOSED" then self._c:abandon(w.id) end
  end
end

---------------------------------------------------------------- scheduler

function Client:_ready_push(co, value)
  local q = self._ready
  q[#q + 1] = { co, value }
end

function Client:_run_ready()
  local q = self._ready
  if #q == 0 then return end
  self._ready = {}
  for i = 1, #q do
    local co, value = q[i][1], q[i][2]
    if status(co) == "suspended" then
      self:_step(co, value)
    elseif status(co) ~= "dead" then
      self:_ready_push(co, value) -- busy (it resumed us): later
    end
  end
end

function Client:_step(co, ...)
  local ok, res = resume(co, ...)
  if status(co) == "dead" then
    if self._tasks[co] then
      self._tasks[co] = nil
      self._ntasks = self._ntasks - 1
    end
    if not ok then
      error(debug.traceback(co, "zklock: spawned coroutine failed: " .. tostring(res)), 0)
    end
  elseif res ~= WAIT then
    self:_ready_push(co) -- a plain yield: run it again on the next round
  end
end

-- Run fn(...) in a new coroutine managed by this client. It starts on the next pump.
function Client:spawn(fn, ...)
  self:_check_open("spawn")
  if type(fn) ~= "function" then check.argerror("spawn", 1, "expected a function, got " .. check.describe(fn)) end
  local n, args = select("#", ...), { ... }
  local unpack_ = table.unpack or unpack
  local co = coroutine.create(function() return fn(unpack_(args, 1, n)) end)
  self._tasks[co] = true
  self._ntasks = self._ntasks + 1
  self:_ready_push(co)
  return co
end

-- Drive the scheduler until every spawned coroutine has finished (or `timeout` seconds pass:
-- then returns nil, "ETIMEDOUT: ...", "ETIMEDOUT").
function Client:run(timeout)
  local deadline = timeout and (now() + check.timeout("run", 1, timeout))
  while self._ntasks > 0 do
    if self.state == "CLOSED" then break end
    local max = 1000
    if deadline then
      local left = deadline - now()
      if left <= 0 then
        return nil, ("ETIMEDOUT: %d coroutines still running after %g s"):format(self._ntasks, timeout), "ETIMEDOUT"
      end
      max = math.min(max, left)
    end
    self:_pump(max)
  end
  return true
end

-- Is the calling coroutine one this client schedules?
function Client:_scheduled()
  local co, main = running()
  if main or not co then return nil end
  return self._tasks[co] and co or nil
end

-- Wait for w.done: suspend in a scheduled coroutine (ours, or one of a host adapter's), else
-- block while pumping.
function Client:_await(w)
  local co = self:_scheduled()
  local ad = self._adapter
  if co then
    w.co = co
    w.token = WAIT
    if guarded_yield then
      guarded_yield(w)
    else
      yield(WAIT)
    end
    w.consumed = true
  elseif ad and ad.owns(self) then
    w.adapter = ad
    ad.wait(self, w)
    w.consumed = true
  else
    while not w.done do
      if self.state == "CLOSED" then break end
      self:_pump(-1)
    end
    w.consumed = true
  end
  return w
end

-- Host adapters (lua/zklock/adapters/*.lua) let coroutines of another scheduler wait:
--   adapter.owns(client)          -> true if the calling coroutine may be suspended by it
--   adapter.wait(client, w)       suspends until adapter.wake(client, w) (w.done is then true)
--   adapter.wake(client, w)       called from the pump when w's event arrived
--   adapter.sleep(client, s)      sleeps a suspendable coroutine
-- The adapter also drives the pump: it calls client:process() when client:fd() is readable or
-- client:next_timeout_ms() has passed (see "Driving the client from a host event loop" below).
function Client:use(adapter)
  self:_check_open("use")
  if type(adapter) ~= "table" or type(adapter.owns) ~= "function" or type(adapter.wait) ~= "function"
     or type(adapter.wake) ~= "function" then
    check.argerror("use", 1, "expected an adapter with owns, wait and wake functions, got " .. check.describe(adapter))
  end
  self._adapter = adapter
  return self
end

if guarded_yield then
  local raw = guarded_yield
  guarded_yield = raw(yield, function(w)
    if not w.consumed and w.client then w.client:_abandon_waiter(w) end
  end)
end

-- Register a waiter for core operation `id`.
function Client:_waiter(id, lock)
  local w = { id = id, client = self, lock = lock }
  if self._waiters[id] == nil then self._nwaiters = self._nwaiters + 1 end
  self._waiters[id] = w
  return w
end

-- Sleep `seconds`: suspends a scheduled coroutine, otherwise blocks while pumping.
function Client:sleep(seconds)
  self:_check_open("sleep")
  local ms = check.timeout("sleep", 1, seconds)
  local timer = { at = now() + ms }
  local timers = self._timers
  local i = #timers + 1
  while i > 1 and timers[i - 1].at > timer.at do i = i - 1 end
  table.insert(timers, i, timer)
  local co = self:_scheduled()
  local ad = self._adapter
  if co then
    timer.co = co
    repeat yield(WAIT) until timer.done
  elseif ad and ad.owns(self) and ad.sleep then
    table.remove(timers, i)
    ad.sleep(self, ms / 1000)
  else
    while not timer.done and self.state ~= "CLOSED" do self:_pump(-1) end
  end
end

---------------------------------------------------------------- plain znode operations

local function op_result(self, w, what, path)
  if not w.done then return nil, "ECLOSED: the client was closed", "ECLOSED" end
  local st = w.status
  if st ~= 0 then
    local name = core.errname(st)
    return nil, ("%s: %s %s: %s"):format(name, what, path, core.strerror(st)), name
  end
  return w.result
end

local function check_path(self, fname, path)
  self:_check_open(fname)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    check.argerror(fname, 1, "path: expected an absolute znode path, got " .. check.describe(path))
  end
end

local function plain(self, fname, optype, path, data, flags, version)
  check_path(self, fname, path)
  local id, msg, code = self._c:op(optype, path, data, flags, version)
  if not id then return nil, msg, code end
  return op_result(self, self:_await(self:_waiter(id)), fname, path)
end

-- client:get(path) -> data, stat | nil, msg, code
function Client:get(path)
  local r, msg, code = plain(self, "get", core.OP_GET, path)
  if not r then return nil, msg, code end
  return r.data or "", r
end

-- client:children(path) -> array of names (unsorted) | nil, msg, code
function Client:children(path)
  local r, msg, code = plain(self, "children", core.OP_CHILDREN, path)
  if not r then return nil, msg, code end
  return r.children or {}
end

function Client:exists(path)
  local r, msg, code = plain(self, "exists", core.OP_EXISTS, path)
  if r then return r end
  if code == "ZNONODE" then return false end
  return nil, msg, code
end

-- Creates each missing ancestor of `path` as a container. -> true | nil, msg, code (the first
-- failure other than "exists")
local function make_parents(self, path)
  local at = 1
  while true do
    local slash = path:find("/", at + 1, true)
    if not slash then return true end
    local ok, msg, code = plain(self, "create", core.OP_CREATE, path:sub(1, slash - 1), "", 4)
    if not ok and code ~= "ZNODEEXISTS" then return nil, msg, code end
    at = slash
  end
end

-- client:create(path, data, { ephemeral=, sequential=, container=, parents= }) -> created path
--   parents = true creates missing ancestors first (as containers, like lock parents).
function Client:create(path, data, opts)
  opts = check.options("create", 3, opts, { ephemeral = check.is.boolean, sequential = check.is.boolean,
                                            container = check.is.boolean, parents = check.is.boolean })
  if data ~= nil and type(data) ~= "string" then
    check.argerror("create", 2, "data: expected a string or nil, got " .. check.describe(data))
  end
  check_path(self, "create", path)
  local flags = (opts.ephemeral and 1 or 0) + (opts.sequential and 2 or 0) + (opts.container and 4 or 0)
  -- An ancestor made as a container can be reaped by the server between our creating it and
  -- creating what goes under it (it was empty for a moment): ZNONODE then means "make the
  -- parents again", whether the child's create or a deeper parent's got it.
  local ok, msg, code
  for _ = 1, opts.parents and 5 or 1 do
    ok, msg, code = true, nil, nil
    if opts.parents then ok, msg, code = make_parents(self, path) end
    if ok then
      local r
      r, msg, code = plain(self, "create", core.OP_CREATE, path, data or "", flags)
      if r then return r.data end
    end
    if code ~= "ZNONODE" then break end
  end
  return nil, msg, code
end

-- client:set(path, data, version) -> stat
function Client:set(path, data, version)
  if type(data) ~= "string" then
    check.argerror("set", 2, "data: expected a string, got " .. check.describe(data))
  end
  return plain(self, "set", core.OP_SET, path, data, 0, version or -1)
end

function Client:delete(path, version)
  local r, msg, code = plain(self, "delete", core.OP_DELETE, path, nil, 0, version or -1)
  if not r then return nil, msg, code end
  return true
end

---------------------------------------------------------------- session

-- fn(state, client) on every session change: "CONNECTED", "SUSPENDED", "EXPIRED", "CLOSED".
function Client:on_session(fn)
  if type(fn) ~= "function" then check.argerror("on_session", 1, "expected a function, got " .. check.describe(fn)) end
  local hs = self._session_handlers
  hs[#hs + 1] = fn
end

-- session id (16 hex digits) and password, while a session exists.
function Client:session()
  self:_check_open("session")
  return self._c:session()
end

function Client:session_timeout()
  self:_check_open("session_timeout")
  return self._c:session_timeout() / 1000
end

-- The core's id for an ACL option value (registered once per distinct list).
function Client:_acl_id(v)
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

-- Counters of requests sent and grants made by this client (see zkl_stats in zklock.h).
function Client:stats()
  self:_check_open("stats")
  return self._c:stats()
end

function Client:add_auth(scheme, credentials)
  self:_check_open("add_auth")
  if type(scheme) ~= "string" or scheme == "" then
    check.argerror("add_auth", 1, "scheme: expected a string such as \"digest\", got " .. check.describe(scheme))
  end
  if type(credentials) ~= "string" then
    check.argerror("add_auth", 2, "credentials: expected a string such as \"user:password\", got " .. check.describe(credentials))
  end
  return self._c:add_auth(scheme, credentials)
end

---------------------------------------------------------------- driving the client from a host event loop
--
-- A host loop (cqueues, libuv, nginx, a hand-written poll loop) drives the client with one pump:
-- wait until client:fd() is readable or client:next_timeout_ms() has passed, then call
-- client:process(); repeat until the client is closed. One pump per client.

-- client:fd() -> the client's pollable fd (readable when process() has work). Stable for the
-- client's life; closed by client:close().
function Client:fd() self:_check_open("fd"); return self._c:fd() end

-- client:timeout_ms() -> ms until the C core needs process() (-1: none). The core's deadline only:
-- a host should wait for next_timeout_ms(), which also covers client:spawn and client:sleep.
function Client:timeout_ms() self:_check_open("timeout_ms"); return self._c:timeout() end

-- client:next_timeout_ms() -> ms until client:process() must run, >= 0, or -1 for no deadline:
-- the core's timeout_ms() folded with the builtin scheduler (0 while a spawned coroutine is
-- ready to run, else at most the first client:sleep deadline). -1 on a closed client.
function Client:next_timeout_ms()
  if self.state == "CLOSED" then return -1 end
  if #self._ready > 0 then return 0 end
  local ms = self._c:timeout()
  local t = self._timers[1]
  if t then
    local left = math.ceil(t.at - now())
    if left < 0 then left = 0 end
    if ms < 0 or left < ms then ms = left end
  end
  return ms
end

-- client:pending() -> number of operations in flight that something waits for (an acquire,
-- release or znode call of any coroutine or thread), plus the spawned coroutines ready to run.
-- 0 when idle (locks may still be held) and on a closed client. A host pump that cannot watch
-- fd() (nginx) polls often while this is > 0 and sleeps up to next_timeout_ms() otherwise.
function Client:pending()
  if self.state == "CLOSED" then return 0 end
  return self._nwaiters + #self._ready
end

-- The client is a cqueues pollable (cqueues.poll(client) returns when process() should run):
--   client:pollfd() -> fd(), or nil once closed
--   client:events() -> "r"
--   client:timeout() -> next_timeout_ms() in seconds, nil for no deadline; 0 once closed (a poll
--                       on a closed client returns at once)
-- cqueues keeps a polled fd registered after the poll returns: in a loop of your own, call
-- cqueues.cancel(client:fd()) before client:close() (zklock.adapters.cqueues does it).
function Client:pollfd()
  if self.state == "CLOSED" then return nil end
  return self._c:fd()
end
function Client:events() return "r" end
function Client:timeout()
  if self.state == "CLOSED" then return 0 end
  local ms = self:next_timeout_ms()
  if ms < 0 then return nil end
  return ms / 1000
end

-- client:process(): one round of work without waiting: read what the fd has, dispatch events,
-- fire client:sleep timers, run ready spawned coroutines and wake adapter waiters.
function Client:process()
  self:_check_open("process")
  self:_pump(0)
end

-- Close the session: pending acquires fail with ECLOSED, held locks vanish with the session.
function Client:close()
  if self.state == "CLOSED" then return end
  self._c:close()
  self:_dispatch()
  self.state = "CLOSED"
  for id, w in pairs(self._waiters) do
    self._waiters[id] = nil
    self._nwaiters = self._nwaiters - 1
    if not w.done then
      w.done, w.type, w.status = true, core.EV_FAILED, core.errno.ECLOSED
      if w.co then self:_ready_push(w.co, w)
      elseif w.adapter then w.adapter.wake(self, w) end
    end
  end
  for _, hold in pairs(self._holds) do hold.closed = true end
  for _, timer in ipairs(self._timers) do -- sleepers wake up (and find the client closed)
    timer.done = true
    if timer.co then self:_ready_push(timer.co, timer) end
  end
  self._timers = {}
  self:_run_ready()
  self._c:free()
end

function Client:__tostring()
  return ("zklock.client(%s, %s)"):format(self.hosts, self.state)
end

return { new = new, Client = Client, WAIT = WAIT }
