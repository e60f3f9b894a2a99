-- zklock.leader: leader election (Curator LeaderSelector) and the leader latch (Curator
-- LeaderLatch), wire-compatible with both on the same paths.
--
-- Election: the election engine below (M.engine): a mutex on the leader path whose node data is
-- the participant id (exactly what Curator's LeaderSelector writes into its InterProcessMutex);
-- a term runs while the mutex is held, where a hook says (client:leader: the participant's
-- function in a coroutine spawned on the client; OpenResty's one_worker: an ngx light thread its
-- supervisor can kill); leadership ends when the term returns or raises, or when the hold is LOST.
--
-- Latch: ZKL_LATCH queue nodes `_c_<uuid>-latch-<seq10>` (data = participant id); leader while
-- first. The core grants leadership only on a node owned by the current session.
--
-- Loss: by default (suspended = "keep", both recipes) SUSPENDED (connection lost, same session
-- may come back) keeps leadership; LOST ends it. zklock reports LOST before the server can
-- expire the session (a session timeout less a margin after the server was last heard from), so
-- no other participant can be made leader while this one still believes it leads; ending
-- leadership on every SUSPENDED, as Curator does, would turn each brief connection cut into a
-- leadership change. An election whose term must stop on SUSPENDED takes suspended = "stop"
-- (one_worker does); every write should carry the fencing token either way.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local hold = require("zklock.internal.hold")
local watch = require("zklock.internal.watch")
local Client = require("zklock.client").Client
local ypcall = require("zklock.internal.scheduler").pcall -- a pcall the code it calls may wait (yield) in, on 5.1 too

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

---------------------------------------------------------------- the election engine
--
-- One LeaderSelector loop for every election that runs a term: client:leader (and so the CLI's
-- `zklock elect`) and OpenResty's one_worker. It queues on a mutex at the path whose node data
-- is the participant id (Curator's LeaderSelector on the wire), runs a term once it holds it,
-- gives the mutex back when the term is over and queues again if asked. What the callers differ
-- in is options, not code:
--   id, acl                      the node data (participant id) and the nodes' ACL
--   suspended = "keep" | "stop"  what a SUSPENDED during a term does: "keep" leaves the term
--                                running (LOST still ends it: see the module comment); "stop"
--                                tells the term to stop (term.why = "SUSPENDED")
--   run(engine, term)            where a term runs (the hook): returns once the term is over;
--                                a true return asks for a pause of retry_delay before queueing again
--   tell(term, why)              a stop reason arrived for the running term: wake it
--   spawn(loop)                  where the engine's own loop runs (default: a client coroutine)
--   pause(engine, s)             wait s before queueing again (default: client:sleep)
--   waiting(engine)              called as an acquire starts; may return a function called when
--                                it ends (one_worker watches for the worker's exit meanwhile)
--   retry_delay                  nil: an acquire failure other than a lost connection ends the
--                                election; seconds: queue again after that pause, whatever failed
--   requeue                      queue again after each term
--   on_state(state, term)        every SUSPENDED / RECONNECTED / LOST of a held term (after the policy)
--   on_exit(engine)              the loop ended for good
--   log(level, msg), what        where messages go, and what they call the election
-- A term (engine.term while it runs) has token, node, id, path, number, why (nil while it may go
-- on, else the first stop reason: "SUSPENDED", "LOST", "CLOSED" or the reason given to close)
-- and lost (true once the session is gone: the server may hand the mutex on any moment).

local Engine = {}
Engine.__index = Engine
Engine.__name = "zklock.election_engine"
M.Engine = Engine

local SUSPENDED_POLICIES = { keep = true, stop = true }

local function elog(e, level, msg)
  local o = e._o
  if o.log then return o.log(level, msg) end
  hold.log(e.client, level, ("%s: %s"):format(o.what, msg))
end

-- Record a stop reason for term (the first one wins) and wake it if it runs.
local function tell(e, term, why)
  if term.why == nil then term.why = why end
  if why == "LOST" then term.lost = true end
  if term.running and e._o.tell then e._o.tell(term, why) end
end

local function transient(code)
  return code == "ESESSION" or code == "ZOPERATIONTIMEOUT" or (code ~= nil and code:match("^ZCONNECTION") ~= nil)
end

-- One turn: queue, run a term, give the mutex back. -> queue again?
local function turn(e)
  local o, client = e._o, e.client
  if e.closed or client.state == "CLOSED" then return false end
  -- a mutex object per turn: nothing of a turn that failed (an expired session) carries over
  local m = client:mutex(e.path, { acl = o.acl, data = o.id, max_hold = o.max_hold })
  m:on_lost(e._on_lost)
  e._mutex = m
  -- the term's record exists before the grant: a SUSPENDED or LOST reported in the same round
  -- as the grant is kept
  local term = { id = e.id, path = e.path }
  e._next = term
  local queued = o.waiting and o.waiting(e)
  local ok, msg, code
  if e.closed then -- closed by the waiting hook itself: do not queue
    ok, code = false, "ECANCELED"
  else
    ok, msg, code = m:acquire(nil)
  end
  if queued then queued() end
  e._next = nil
  if not ok then
    if e.closed or code == "ECANCELED" or code == "ECLOSED" or client.state == "CLOSED" then return false end
    if o.retry_delay then
      elog(e, "warn", ("acquiring failed, queueing again in %g s: %s"):format(o.retry_delay, msg))
      o.pause(e, o.retry_delay)
      return true
    end
    if transient(code) then return true end -- the session went while waiting: queue on the next one
    e.error = msg
    elog(e, "error", "acquiring failed: " .. tostring(msg))
    return false
  end
  term.token, term.node = m:token(), m:node()
  if e.closed then tell(e, term, e.closed) end
  local pause = false
  -- granted as the election closed, with the connection down under "stop", or lost at once:
  -- hand it on without running
  if not (term.why or not m:is_held() or (o.suspended == "stop" and client.state ~= "CONNECTED")) then
    e.terms = e.terms + 1
    term.number = e.terms
    term.running = true
    e.term = term
    local rok, r = ypcall(o.run, e, term)
    term.running = false
    e.term = nil
    if not rok then
      elog(e, "error", "the term failed: " .. tostring(r))
      pause = true
    else
      pause = r and true or false
    end
  end
  if m:is_held() then
    local rok, rmsg = m:release()
    if not rok then elog(e, "warn", "giving leadership back failed: " .. tostring(rmsg)) end
  else
    -- lost with the session (its node goes with it): forget it at once, without a request; a
    -- release would wait for the reconnection, and spec/64 measured the next turn 3 s later
    local h = hold.of(m)
    if h then h:drop() end
  end
  m:on_lost(nil)
  if pause and o.retry_delay and not e.closed then o.pause(e, o.retry_delay) end
  return o.requeue and not e.closed
end

local function run_loop(e)
  while true do
    -- never raise out of the loop (it would surface in whoever pumps the client)
    local ok, more = ypcall(turn, e)
    if not ok then
      if e.client.state ~= "CLOSED" then elog(e, "error", tostring(more)) end
      break
    end
    if not more or e.client.state == "CLOSED" then break end
  end
  e.running = false
  if e._o.on_exit then e._o.on_exit(e) end
end

local ENGINE_OPTIONS = {
  id = check.is.string, acl = check.acl_option, requeue = check.is.boolean,
  suspended = function(v) return SUSPENDED_POLICIES[v] ~= nil, '"keep" or "stop"' end,
  run = check.is.func, tell = check.is.func, spawn = check.is.func,
  pause = check.is.func, retry_delay = check.is.nonneg, on_state = check.is.func,
  on_exit = check.is.func, waiting = check.is.func, log = check.is.func, what = check.is.string,
  max_hold = check.is.positive, -- seconds: a term is lost (why "max_hold") once it lasted this long
}

-- leader.engine(client, path, opts) -> engine (not started: engine:start()). opts: above; run is
-- required, id is the node data.
function M.engine(client, path, opts)
  check.open(client, "engine")
  check.path("engine", 2, path)
  -- an internal call (client:leader and one_worker build on it), checked here rather than
  -- through check.options, which is for the documented API (scripts/apidoc.lua)
  if type(opts) ~= "table" then
    check.argerror("engine", 3, "options: expected a table, got " .. check.describe(opts))
  end
  for k, v in pairs(opts) do
    local valid = ENGINE_OPTIONS[k]
    if not valid then check.argerror("engine", 3, ("unknown option '%s'"):format(tostring(k))) end
    local ok, what = valid(v)
    if not ok then
      check.argerror("engine", 3, ("option '%s': expected %s, got %s"):format(k, what, check.describe(v)))
    end
  end
  if not opts.run then check.argerror("engine", 3, "option 'run' is required (a function(engine, term))") end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.suspended = o.suspended or "keep"
  o.what = o.what or ("election " .. check.short(path))
  o.spawn = o.spawn or function(fn) client:spawn(fn) return true end
  o.pause = o.pause or function(_, s) client:sleep(s) end
  local e = setmetatable({ client = client, path = path, id = o.id, terms = 0, running = false, closed = false,
                           _o = o }, Engine)
  e._on_lost = function(state, _, why)
    local term = e.term or e._next
    if term then
      if state == "LOST" or (state == "SUSPENDED" and o.suspended == "stop") then tell(e, term, state) end
    end
    if o.on_state then o.on_state(state, term, why) end
  end
  return e
end

-- The mutex of the turn in progress (queued or leading), or nil.
function Engine:mutex() return self._mutex end

-- Start the loop (again, after a loop without requeue ended). -> true | false (running, closed)
-- | nil, msg (the spawn hook failed)
function Engine:start()
  if self.running or self.closed or self.client.state == "CLOSED" then return false end
  self.running = true
  local ok, err = self._o.spawn(function() run_loop(self) end)
  if not ok then
    self.running = false
    return nil, err
  end
  return true
end

-- Leave for good: a queued acquire is withdrawn (its node deleted in the background), a running
-- term is told `why` (default "CLOSED"); the mutex is given back once the term is over. Idempotent.
function Engine:close(why)
  if self.closed then return end
  self.closed = why or "CLOSED"
  local term = self.term
  if term then tell(self, term, self.closed) end
  if self._mutex and self.client.state ~= "CLOSED" then self._mutex:cancel() end
end

---------------------------------------------------------------- election

local Leader = {}
Leader.__index = Leader
M.Leader = Leader

-- The term the engine runs now, if it may go on (no stop reason yet).
local function current(self)
  local t = self._engine.term
  if t and t.why == nil then return t end
  return nil
end

-- client:leader(path, fn, { id =, requeue =, acl =, suspended = }) -> leader object
--   Joins the election at `path` at once: the election engine's coroutine, spawned on the
--   client, queues on the path's mutex and, once it holds it, runs fn(leader); leadership ends
--   when fn returns or raises (then the node is deleted) or the hold is LOST. requeue = true
--   queues again after each term (Curator's autoRequeue); default false: one term.
--   suspended = "keep" (default: a SUSPENDED term goes on; LOST ends it) or "stop" (is_leader()
--   turns false and leader:sleep() returns false at SUSPENDED; fn should return then).
function Client:leader(path, fn, opts)
  check.open(self, "leader")
  check.path("leader", 1, path)
  if type(fn) ~= "function" then
    check.argerror("leader", 2, "expected a function (run while leader), got " .. check.describe(fn))
  end
  opts = check.options("leader", 3, opts, { id = id_option, requeue = check.is.boolean, acl = check.acl_option,
                                            suspended = check.is.oneof("keep", "stop"),
                                            max_hold = check.is.positive })
  check_id(self, "leader", 3, path, opts.id)
  local lo = setmetatable({ client = self, path = path, id = opts.id, _running = true,
                            _changed = watch.signal(self) }, Leader) -- notified when the term may have ended
  local what = "leader " .. check.short(path)
  local engine = M.engine(self, path, {
    id = opts.id, acl = opts.acl, requeue = opts.requeue == true, suspended = opts.suspended or "keep", what = what,
    max_hold = opts.max_hold,
    run = function(e)
      lo._mutex = e._mutex -- the mutex of this term (spec helpers read its node)
      local ok, err = ypcall(fn, lo)
      watch.notify(lo._changed) -- another coroutine in leader:sleep() hears the term is over
      if not ok then hold.log(self, "error", ("%s: the leader function raised: %s"):format(what, tostring(err))) end
    end,
    tell = function() watch.notify(lo._changed) end,
    on_state = function(state, _, why)
      local handler = lo._on_lost
      if not handler then return end
      local ok, err = pcall(handler, state, lo, why)
      if not ok then
        hold.log(self, "error", ("on_lost handler of %s failed (%s): %s"):format(what, state, tostring(err)))
      end
    end,
    on_exit = function() lo._running = false end,
  })
  lo._engine = engine
  engine:start()
  return lo
end

-- Leading now (fn is running and was not told to stop: not lost, not SUSPENDED under "stop",
-- not closed)? Drives the client first, so a loss nobody pumped for is noticed.
function Leader:is_leader()
  check.object(self, Leader, "leader", "is_leader")
  if current(self) then hold.refresh(self.client) end
  return current(self) ~= nil and self.client.state ~= "CLOSED"
end

-- The hold protocol (docs/design.md, "One hold protocol") for the current term: is_held is
-- is_leader (kept as the election's own question), node and transaction answer for the term.
function Leader:is_held()
  check.object(self, Leader, "leader", "is_held")
  return self:is_leader()
end

-- The hold record of the current term (its mutex's one hold), or nil.
local function term_hold(self)
  local m = self:is_leader() and self._engine:mutex()
  if not m then return nil end
  for _, h in pairs(hold.holds(m)) do if h:live() then return h end end
  return nil
end

-- Full path of the current term's node, nil when not leading.
function Leader:node()
  check.object(self, Leader, "leader", "node")
  local h = term_hold(self)
  return h and h.node or nil
end

-- A fenced transaction that commits only while this term's node exists. Raises when not leading.
function Leader:transaction()
  check.object(self, Leader, "leader", "transaction")
  local h = term_hold(self)
  if not h then
    check.raise(("zklock: transaction of leader %s while not leading"):format(check.short(self.path)))
  end
  return require("zklock.txn").fenced(self.client, h:guard())
end

-- The fencing token of the current term (czxid of our node), nil when not leading.
function Leader:token()
  check.object(self, Leader, "leader", "token")
  if self:is_leader() then return current(self).token end
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

-- fn(state, leader) for the connection and session events of a term: "SUSPENDED" (under
-- "keep" leadership is kept: see the module comment), "RECONNECTED", "LOST" (the term is over).
-- nil: none.
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
  return self._engine.terms
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
  if self._engine.closed or self._running or self.client.state == "CLOSED" then return false end
  self._running = true
  if self._engine:start() then return true end
  self._running = false
  return false
end

-- Leave the election: a queued participant withdraws at once (its node is deleted in the
-- background); a running term ends as is_leader() turns false, and the node is deleted when fn
-- returns. Idempotent.
function Leader:close()
  check.object(self, Leader, "leader", "close")
  if self._engine.closed then return end
  self._engine:close()
  watch.notify(self._changed) -- a term sleeping in leader:sleep() ends now
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
  local fn = self._on_change
  if fn then
    local ok, err = pcall(fn, state, self)
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
      local h = hold.adopt(self, id, nil, self, "leader latch", self.path)
      if not h.lost then
        self._hold, self._token = h, h.token
        self._joining = false
        set_leader(self, true, "LEADER")
        return
      end
      -- lost before it was adopted (the session ended as it was granted; on_lost heard LOST):
      -- never leading; forget the grant (ELOST) and join again
      hold.release(h)
    elseif w.status ~= core.errno.ESESSION then
      local st = w.status
      if st ~= core.errno.ECANCELED and st ~= core.errno.ECLOSED then
        self._error = ("joining leader latch %s: %s"):format(self.path, core.strerror(st))
        hold.log(client, "error", self._error)
      end
      break
    end
    -- ESESSION (or a grant lost before it was adopted): join again on the new session
  end
  self._joining = false
end

join = function(self)
  if self._joining or self._closed or self.client.state == "CLOSED" then return end
  self._joining = true
  self.client:spawn(function()
    local ok, err = ypcall(joining, self)
    self._joining = false
    if not ok and self.client.state ~= "CLOSED" then
      hold.log(self.client, "error", ("leader latch %s: %s"):format(check.short(self.path), tostring(err)))
    end
  end)
end

-- client:latch(path, { id =, acl =, max_hold = }) -> latch
--   Joins at once (Curator LeaderLatch.start()): a coroutine spawned on the client creates the
--   latch node and waits; the latch leads while its node is first. After LOST it joins again
--   with a new node on the new session (leadership false in between). Lives until close() or
--   the client closes. max_hold (seconds): each leadership lasts at most this long; then the
--   latch reports LOST ("max_hold") through on_lost, its node is deleted, and it joins again at
--   the back, so another participant leads (bounded terms).
function Client:latch(path, opts)
  check.open(self, "latch")
  check.path("latch", 1, path)
  opts = check.options("latch", 2, opts, { id = id_option, acl = check.acl_option,
                                           max_hold = check.is.positive })
  check_id(self, "latch", 2, path, opts.id)
  local self_ = setmetatable({ client = self, path = path, id = opts.id, kind = "leader latch",
                               _is_leader = false, _closed = false,
                               _changed = watch.signal(self) }, Latch) -- notified on every change
  hold.init(self_, self, opts.acl, opts.id)
  hold.set_max_hold(self_, opts.max_hold)
  hold.on_lost(self_, function(state, _, why)
    local fn = self_._on_lost
    if fn then
      local ok, err = pcall(fn, state, self_, why)
      if not ok then
        hold.log(self, "error", ("on_lost handler of leader latch %s failed (%s): %s")
          :format(check.short(path), state, tostring(err)))
      end
    end
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

-- Leading now (the hold protocol's "do I hold it?"; was has_leadership)? Drives the client
-- first, so a loss nobody pumped for is noticed.
function Latch:is_held()
  check.object(self, Latch, "latch", "is_held")
  if self._is_leader then hold.refresh(self.client) end
  return self._is_leader and not self._closed and self.client.state ~= "CLOSED"
end

-- Fencing token (czxid of our latch node) while leading, else nil.
function Latch:token()
  check.object(self, Latch, "latch", "token")
  if self:is_held() then return self._token end
  return nil
end

-- Full path of our latch node while leading, else nil.
function Latch:node()
  check.object(self, Latch, "latch", "node")
  local h = self:is_held() and self._hold
  return h and h.node or nil
end

-- A fenced transaction that commits only while this latch leads on its node. Raises when not
-- leading.
function Latch:transaction()
  check.object(self, Latch, "latch", "transaction")
  local h = self:is_held() and self._hold
  if not h then
    check.raise(("zklock: transaction of leader latch %s while not leading"):format(check.short(self.path)))
  end
  return require("zklock.txn").fenced(self.client, h:guard())
end

-- fn(state, latch, why) for the SUSPENDED, RECONNECTED and LOST of its leadership (after LOST
-- the latch joins again by itself). Replaces the handler; nil removes it. -> the latch
function Latch:on_lost(fn)
  check.object(self, Latch, "latch", "on_lost")
  self._on_lost = hold.check_handler("on_lost", fn)
  return self
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
    return self:is_held() or self._closed or self.client.state == "CLOSED"
  end, self._changed)
  if self:is_held() then return true end
  if ok then
    return fail(core.errno.ECLOSED, ("%s was closed while waiting for leadership of latch %s")
      :format(self._closed and "the latch" or "its client", self.path))
  end
  return fail(core.errno.ETIMEDOUT, ("timed out after %g s waiting for leadership of latch %s")
    :format(timeout, self.path))
end

-- fn(event, latch) on every change of leadership: "LEADER" (it leads now), "LOST" (with the
-- session, its node deleted, or at max_hold), "CLOSED" (by close()). Replaces the handler; nil removes it. -> the latch
function Latch:on_change(fn)
  check.object(self, Latch, "latch", "on_change")
  self._on_change = hold.check_handler("on_change", fn)
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

-- Leave: leadership is given up at once (is_leader false, on_change: "CLOSED") and the
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
