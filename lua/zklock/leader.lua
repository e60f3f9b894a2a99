-- zklock.leader: leader election (Curator LeaderSelector) and the leader latch (Curator
-- LeaderLatch), wire-compatible with both on the same paths.
--
-- Election: a mutex on the leader path whose node data is the participant id (exactly what
-- Curator's LeaderSelector writes into its InterProcessMutex). The participant's function runs
-- in a coroutine spawned on the client while the mutex is held; leadership ends when it returns
-- or raises, or when the hold is LOST.
--
-- Latch: ZKL_LATCH queue nodes `_c_<uuid>-latch-<seq10>` (data = participant id); leader while
-- first. The core grants leadership only on a node owned by the current session.
--
-- Loss (both recipes): SUSPENDED (connection lost, same session may come back) keeps leadership;
-- LOST ends it. zklock reports LOST before the server can expire the session (a session timeout
-- less a margin after the server was last heard from), so no other participant can be made
-- leader while this one still believes it leads; ending leadership on every SUSPENDED, as
-- Curator does, would turn each brief connection cut into a leadership change. Work that must
-- stop on SUSPENDED can watch it with on_lost / on_change's state argument, and every write
-- should carry the fencing token.
local core = require("zklock.core")
local check = require("zklock.check")
local hold = require("zklock.hold")
local watch = require("zklock.watch")
local Client = require("zklock.client").Client

local M = {}

local fail = hold.fail

-- Wait until cond() is true, or `ms` (-1: forever) passes, or the client closes; the recipe
-- notifies signal `sig` whenever cond() may have changed (no polling). -> cond()
local function wait_for(client, ms, cond, sig)
  local deadline = ms >= 0 and core.now() + ms or nil
  while true do
    if cond() then return true end
    if client.state == "CLOSED" then return false end
    local left = -1
    if deadline then
      left = deadline - core.now()
      if left <= 0 then return cond() end
      left = math.ceil(left)
    end
    watch.wait_signal(sig, left)
  end
end
M.wait_for = wait_for

-- Participants of a queue at path ordered by recipe: ids (node data), leader first.
local function participants(client, path, recipe, fname)
  check.open(client, fname)
  local names, msg, code = client:children(path)
  if not names then
    if code == "ZNONODE" then return {} end
    return nil, msg, code
  end
  local out = {}
  for _, name in ipairs(core.sort(names, recipe)) do
    local data = client:get(path .. "/" .. name) -- nil if it went away meanwhile
    if data then out[#out + 1] = data end
  end
  return out
end

local function id_option(v)
  return type(v) == "string", "a string (the participant id, written as node data)"
end

local function check_id(client, fname, argn, path, id)
  return hold.check_data(client, fname, argn, path, id)
end

---------------------------------------------------------------- election

local Leader = {}
Leader.__index = Leader
M.Leader = Leader

local function log(self, level, msg) hold.log(self.client, level, msg) end

-- One turn in the queue: acquire, lead (run fn), give back. -> continue? (false: stop for good)
local function turn(self)
  local m = self._mutex
  if self._closed or self.client.state == "CLOSED" then return false end
  local ok, msg, code = m:acquire(nil)
  if not ok then
    if self._closed or code == "ECANCELED" or code == "ECLOSED" then return false end
    if code == "ESESSION" or (code and code:match("^ZCONNECTION")) or code == "ZOPERATIONTIMEOUT" then
      return true -- the session went while waiting: queue again on the next one
    end
    self._error = msg
    log(self, "error", ("leader %s: acquiring failed: %s"):format(check.short(self.path), msg))
    return false
  end
  if self._closed then m:release() return false end
  self._lost = false
  self._token = m:token()
  self._leading = true
  self._terms = self._terms + 1
  local fok, ferr = pcall(self._fn, self)
  self._leading = false
  self._token = nil
  watch.notify(self._changed) -- another coroutine in leader:sleep() hears the term is over
  if not fok then
    log(self, "error", ("leader %s: the leader function raised: %s"):format(check.short(self.path), tostring(ferr)))
  end
  if hold.of(m) then -- held, or lost: a lost hold is cleared by its release (ELOST)
    local rok, rmsg, rcode = m:release()
    if not rok and rcode ~= "ELOST" then
      log(self, "error", ("leader %s: giving leadership back failed: %s"):format(check.short(self.path), rmsg))
    end
  end
  return self._requeue and not self._closed
end

local function loop(self)
  while true do
    -- never raise out of the scheduler (that would surface in whoever pumps the client)
    local ok, more = pcall(turn, self)
    if not ok then
      if self.client.state ~= "CLOSED" then
        log(self, "error", ("leader %s: %s"):format(check.short(self.path), tostring(more)))
      end
      break
    end
    if not more or self.client.state == "CLOSED" then break end
  end
  self._running = false
end

local function start(self)
  if self._running or self._closed then return end
  self._running = true
  self.client:spawn(loop, self)
end

-- client:leader(path, fn, { id =, requeue =, acl = }) -> leader object
--   Joins the election at `path` at once: a coroutine spawned on the client queues on the
--   path's mutex and, once it holds it, runs fn(leader); leadership ends when fn returns or
--   raises (then the node is deleted) or the hold is LOST. requeue = true queues again after
--   each term (Curator's autoRequeue); default false: one term.
function Client:leader(path, fn, opts)
  check.open(self, "leader")
  check.path("leader", 1, path)
  if type(fn) ~= "function" then
    check.argerror("leader", 2, "expected a function (run while leader), got " .. check.describe(fn))
  end
  opts = check.options("leader", 3, opts, { id = id_option, requeue = check.is.boolean, acl = check.acl_option })
  check_id(self, "leader", 3, path, opts.id)
  local lo = { client = self, path = path, id = opts.id, _fn = fn, _requeue = opts.requeue == true,
               _terms = 0, _leading = false, _closed = false,
               _changed = watch.signal(self) } -- notified when the term may have ended
  local mopts = { acl = opts.acl, data = opts.id }
  lo._mutex = self:mutex(path, mopts)
  lo._mutex:on_lost(function(state)
    if state == "LOST" then
      lo._lost = true
      watch.notify(lo._changed)
    end
    local handler = lo._on_lost
    if handler then
      local ok, err = pcall(handler, state, lo)
      if not ok then
        log(lo, "error", ("on_lost handler of leader %s failed (%s): %s")
          :format(check.short(path), state, tostring(err)))
      end
    end
  end)
  setmetatable(lo, Leader)
  start(lo)
  return lo
end

-- Leading now (fn is running, the hold is not lost, the leader not closed)? Drives the client
-- first, so a loss nobody pumped for is noticed.
function Leader:is_leader()
  check.object(self, Leader, "leader", "is_leader")
  if self._leading and not self._closed and not self._lost then hold.refresh(self.client) end
  return self._leading and not self._closed and not self._lost and self.client.state ~= "CLOSED"
end

-- The fencing token of the current term (czxid of our node), nil when not leading.
function Leader:token()
  check.object(self, Leader, "leader", "token")
  if self:is_leader() then return self._token end
  return nil
end

-- The ids of the participants (node data), leader first. -> array | nil, msg, code
function Leader:participants()
  check.object(self, Leader, "leader", "participants")
  return participants(self.client, self.path, core.MUTEX, "participants")
end

-- The current leader's id (whoever it is), or nil when nobody is queued. -> id | nil[, msg, code]
function Leader:leader()
  check.object(self, Leader, "leader", "leader")
  local p, msg, code = participants(self.client, self.path, core.MUTEX, "leader")
  if not p then return nil, msg, code end
  return p[1]
end

-- fn(state, leader) for the connection and session events of a term: "SUSPENDED" (leadership is
-- kept: see the module comment), "RECONNECTED", "LOST" (the term is over). nil: none.
function Leader:on_lost(fn)
  check.object(self, Leader, "leader", "on_lost")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_lost", 1, "expected a function or nil, got " .. check.describe(fn))
  end
  self._on_lost = fn
  return self
end

-- Terms led so far.
function Leader:terms()
  check.object(self, Leader, "leader", "terms")
  return self._terms
end

-- Sleep up to `seconds` while leading: returns true after the whole time if still leader, false
-- as soon as leadership ended (lost, closed). zklock cannot interrupt a coroutine, so a leader
-- function should wait through this (or check is_leader()) to hear of a loss promptly.
function Leader:sleep(seconds)
  check.object(self, Leader, "leader", "sleep")
  local ms = check.timeout("sleep", 1, seconds)
  local gone = wait_for(self.client, ms, function() return not self:is_leader() end, self._changed)
  return not gone and self:is_leader()
end

-- Re-enter the queue after a term ended without requeue (Curator's requeue()). -> true, or
-- false when already queued or leading, or closed.
function Leader:requeue()
  check.object(self, Leader, "leader", "requeue")
  if self._closed or self._running or self.client.state == "CLOSED" then return false end
  start(self)
  return true
end

-- Leave the election: a queued participant withdraws at once (its node is deleted in the
-- background); a running term ends as is_leader() turns false, and the node is deleted when fn
-- returns. Idempotent.
function Leader:close()
  check.object(self, Leader, "leader", "close")
  if self._closed then return end
  self._closed = true
  watch.notify(self._changed) -- a term sleeping in leader:sleep() ends now
  if self.client.state ~= "CLOSED" then self._mutex:cancel() end
end

function Leader:__tostring()
  return ("zklock.leader(%s)"):format(self.path)
end

---------------------------------------------------------------- latch

local Latch = {}
Latch.__index = Latch
M.Latch = Latch

local function set_leader(self, on, state)
  if self._is_leader == on then return end
  self._is_leader = on
  watch.notify(self._changed)
  for _, fn in ipairs(self._listeners) do
    local ok, err = pcall(fn, on, state)
    if not ok then
      hold.log(self.client, "error", ("on_change handler of leader latch %s failed: %s")
        :format(check.short(self.path), tostring(err)))
    end
  end
end

local join

-- The coroutine of one queue entry: wait for leadership, then hand it to the hold record.
local function joining(self)
  local client = self.client
  local lost = self._lost_hold
  if lost then -- the core keeps a lost acquisition until it is released: forget it (ELOST)
    self._lost_hold = nil
    if not lost.released then hold.release(lost) end
  end
  while not self._closed and client.state ~= "CLOSED" do
    local id, msg = hold.core(client):acquire(core.LATCH, self.path, -1, hold.acl(self), hold.data(self))
    if not id then
      self._error = msg
      hold.log(client, "error", ("leader latch %s: joining failed: %s"):format(check.short(self.path), msg))
      break
    end
    local w = hold.await(self, id)
    if not w.done then break end -- the client closed
    if w.type == core.EV_ACQUIRED then
      if self._closed then -- closed while the grant was on its way: give it straight back
        pcall(hold.core(client).abandon, hold.core(client), id)
        break
      end
      self._hold = hold.adopt(self, id, nil, self, "leader latch", self.path)
      self._token = self._hold.token
      self._joining = false
      set_leader(self, true, "LEADER")
      return
    end
    local st = w.status
    if st ~= core.errno.ESESSION then
      if st ~= core.errno.ECANCELED and st ~= core.errno.ECLOSED then
        self._error = ("joining leader latch %s: %s"):format(self.path, core.strerror(st))
        hold.log(client, "error", self._error)
      end
      break
    end
    -- ESESSION: the session went while we waited; join again on the new one
  end
  self._joining = false
end

join = function(self)
  if self._joining or self._closed or self.client.state == "CLOSED" then return end
  self._joining = true
  self.client:spawn(function()
    local ok, err = pcall(joining, self)
    self._joining = false
    if not ok and self.client.state ~= "CLOSED" then
      hold.log(self.client, "error", ("leader latch %s: %s"):format(check.short(self.path), tostring(err)))
    end
  end)
end

-- client:latch(path, { id =, acl = }) -> latch
--   Joins at once (Curator LeaderLatch.start()): a coroutine spawned on the client creates the
--   latch node and waits; the latch leads while its node is first. After LOST it joins again
--   with a new node on the new session (leadership false in between). Lives until close() or
--   the client closes.
function Client:latch(path, opts)
  check.open(self, "latch")
  check.path("latch", 1, path)
  opts = check.options("latch", 2, opts, { id = id_option, acl = check.acl_option })
  check_id(self, "latch", 2, path, opts.id)
  local self_ = setmetatable({ client = self, path = path, id = opts.id, kind = "leader latch",
                               _listeners = {}, _is_leader = false, _closed = false,
                               _changed = watch.signal(self) }, Latch) -- notified on every change
  hold.init(self_, self, opts.acl, opts.id)
  hold.on_lost(self_, function(state)
    if state == "LOST" then
      self_._lost_hold = self_._hold
      self_._hold, self_._token = nil, nil
      set_leader(self_, false, "LOST")
      join(self_)
    end
  end)
  join(self_)
  return self_
end

-- Leading now? Drives the client first, so a loss nobody pumped for is noticed.
function Latch:has_leadership()
  check.object(self, Latch, "latch", "has_leadership")
  if self._is_leader then hold.refresh(self.client) end
  return self._is_leader and not self._closed and self.client.state ~= "CLOSED"
end

-- Fencing token (czxid of our latch node) while leading, else nil.
function Latch:token()
  check.object(self, Latch, "latch", "token")
  if self:has_leadership() then return self._token end
  return nil
end

-- Wait until this latch leads: true, or nil, "ETIMEDOUT: ...", or nil, "ECLOSED: ..." when the
-- latch or the client is closed. timeout: seconds (nil: forever, 0: look once).
function Latch:await(timeout)
  check.object(self, Latch, "latch", "await")
  local ms = check.timeout("await", 1, timeout)
  if self._closed or self.client.state == "CLOSED" then
    return fail(core.errno.ECLOSED, ("leader latch %s is closed"):format(self.path))
  end
  local ok = wait_for(self.client, ms, function()
    return self:has_leadership() or self._closed or self.client.state == "CLOSED"
  end, self._changed)
  if self:has_leadership() then return true end
  if ok then
    return fail(core.errno.ECLOSED, ("%s was closed while waiting for leadership of latch %s")
      :format(self._closed and "the latch" or "its client", self.path))
  end
  return fail(core.errno.ETIMEDOUT, ("timed out after %g s waiting for leadership of latch %s")
    :format(timeout, self.path))
end

-- fn(is_leader, why) on every change of leadership: true ("LEADER"), false ("LOST" with the
-- session, "CLOSED" by close()). Adds a listener; returns the latch.
function Latch:on_change(fn)
  check.object(self, Latch, "latch", "on_change")
  if type(fn) ~= "function" then
    check.argerror("on_change", 1, "expected a function, got " .. check.describe(fn))
  end
  self._listeners[#self._listeners + 1] = fn
  return self
end

-- The ids of the participants (node data), leader first. -> array | nil, msg, code
function Latch:participants()
  check.object(self, Latch, "latch", "participants")
  return participants(self.client, self.path, core.LATCH, "participants")
end

-- The current leader's id (whoever it is), or nil when nobody is queued.
function Latch:leader()
  check.object(self, Latch, "latch", "leader")
  local p, msg, code = participants(self.client, self.path, core.LATCH, "leader")
  if not p then return nil, msg, code end
  return p[1]
end

-- Leave: leadership is given up at once (is_leader false, on_change(false, "CLOSED")) and the
-- node deleted: waits for the delete when leading (true | nil, msg, code); a waiting entry is
-- withdrawn and its node deleted in the background. Idempotent (true).
function Latch:close()
  check.object(self, Latch, "latch", "close")
  if self._closed then return true end
  self._closed = true
  local h = self._hold
  self._hold, self._token = nil, nil
  set_leader(self, false, "CLOSED")
  watch.notify(self._changed) -- await() returns ECLOSED now (set_leader notified only a leader)
  if self.client.state == "CLOSED" then return true end
  local lost = self._lost_hold
  self._lost_hold = nil
  if lost and not lost.released then hold.release(lost) end
  hold.cancel(self)
  if h and not h.released and not h.lost then return hold.release(h) end
  return true
end

function Latch:__tostring()
  return ("zklock.latch(%s)"):format(self.path)
end

return M
