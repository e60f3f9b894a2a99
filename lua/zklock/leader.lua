-- zklock.leader: leader election (Curator LeaderSelector) and the leader latch (Curator
-- LeaderLatch), wire-compatible with both on the same paths.
--
-- Both run on the election engine below (M.engine), as OpenResty's one_worker does.
--
-- Election: a mutex on the leader path whose node data is the participant id (exactly what
-- Curator's LeaderSelector writes into its InterProcessMutex); a term runs while the mutex is
-- held, where a hook says (client:leader: the participant's function in a coroutine spawned on
-- the client; one_worker: the engine's supervised term, an ngx light thread it can kill);
-- leadership ends when the term returns or raises, or when the hold is LOST.
--
-- Latch: ZKL_LATCH queue nodes `_c_<uuid>-latch-<seq10>` (data = participant id); leader while
-- first, until LOST or close(). The core grants leadership only on a node owned by the current
-- session.
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
local lockmod = require("zklock.lock")
local Client = require("zklock.client").Client
local scheduler = require("zklock.internal.scheduler")
local ypcall = scheduler.pcall -- a pcall the code it calls may wait (yield) in, on 5.1 too

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
-- One LeaderSelector/LeaderLatch loop for every election: client:leader (and so the CLI's
-- `zklock elect`), client:latch and OpenResty's one_worker. It queues on the path (a mutex:
-- Curator's LeaderSelector on the wire; or a latch node: Curator's LeaderLatch) with the
-- participant id as node data, runs a term once first in the queue, gives its node back when
-- the term is over and queues again if asked. What the users differ in is options, not code:
--   id, acl                      the node data (participant id) and the nodes' ACL
--   recipe = "mutex" | "latch"   the queue's wire format (default "mutex")
--   term = "run" | "until_close" "run" (default): a term lasts while the run hook runs;
--                                "until_close" (the latch): a term lasts until a stop reason
--                                (LOST, max_hold, close); run, if given, is called as it begins
--                                and must not wait; close() gives the node back at once
--   suspended = "keep" | "stop"  what a SUSPENDED during a term does: "keep" leaves the term
--                                running (LOST still ends it: see the module comment); "stop"
--                                tells the term to stop (term.why = "SUSPENDED")
--   max_hold                     seconds: a term is lost (why "max_hold") once it lasted this
--                                long; with requeue, the participant queues again at the back
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
--   on_state(state, term, why)   every SUSPENDED / RECONNECTED / LOST of a held term (after the policy)
--   on_exit(engine)              the loop ended for good
--   log(level, msg), what        where messages go, and what they call the election
--   host, job, stop_grace        a supervised term (below): job(handle) runs in a thread of the
--                                host's that the engine's loop watches and may kill
-- A term (engine.term while it runs) has token, node, id, path, number, hold (its hold record),
-- why (nil while it may go on, else the first stop reason: "SUSPENDED", "LOST", "CLOSED" or the
-- reason given to close) and lost (true once the session is gone: the server may hand the
-- queue on any moment).

local Engine = {}
Engine.__index = Engine
Engine.__name = "zklock.election_engine"
M.Engine = Engine

local RECIPES = { mutex = core.MUTEX, latch = core.LATCH }

local function elog(e, level, msg)
  local o = e._o
  if o.log then return o.log(level, msg) end
  hold.log(e.client, level, ("%s: %s"):format(o.what, msg))
end

-- Wake a supervised job's threads waiting in job:sleep and its supervisor, once per term: a
-- host signal may keep a wake-up for a wait() that comes later, and waking again from the
-- supervisor's own loop would spin it.
local function wake_job(job)
  if job._told then return end
  job._told = true
  job._bell.wake()
  job._kick.wake()
end

-- Record a stop reason for term (the first one wins) and wake it if it runs.
local function tell(e, term, why)
  if term.why == nil then term.why = why end
  if why == "LOST" then term.lost = true end
  if term.running then
    watch.notify(e._changed)
    if term.job then wake_job(term.job) end
    if e._o.tell then e._o.tell(term, why) end
  end
end

local function transient(code)
  -- ELOST: an acquire granted as the session ended (nothing held): queue on the next session
  return code == "ESESSION" or code == "ELOST" or code == "ZOPERATIONTIMEOUT"
    or (code ~= nil and code:match("^ZCONNECTION") ~= nil)
end

-- The term of an "until_close" election: announced through run, then over at a stop reason.
local function stay(e, term)
  if e._o.run then e._o.run(e, term) end
  wait_for(e.client, -1, function() return term.why ~= nil end, e._changed)
end

---------------------------------------------------------------- supervised terms
--
-- With option host, a term runs opts.job(handle) in a thread the host can kill (one_worker: an
-- ngx light thread), watched by the engine's own loop, the supervisor. Told to stop (a stop
-- reason of the term, or host.stopping(): one_worker's worker is exiting) the job gets
-- stop_grace seconds to return before it is killed; LOST kills it at once (the server may hand
-- the queue on any moment). A job that raised is logged and the engine pauses retry_delay
-- before queueing again; while queued, host.stopping() withdraws the participant for good
-- (engine:close with its reason). The host gives:
--   now() -> seconds          signal() -> { wait = function(s) (up to s, or woken), wake = function() }
--   spawn(fn) -> thread | nil, err;  kill(thread);  stopping() -> a reason | nil
--   who                       how messages name this participant ("worker 1234")
--   fields                    copied into every job handle (one_worker: pid, worker)

local POLL = 0.1 -- s: how often a supervisor, and a job in job:sleep, look at host.stopping()

local Job = {}
Job.__index = Job
Job.__name = "zklock.election_job"
M.Job = Job

-- nil while the job may run; otherwise why it must stop: the term's stop reason ("SUSPENDED"
-- under "stop", "LOST", "CLOSED" or close's reason), the host's ("EXITING"), or "CLOSED" when
-- the client was closed. Sticky: once told, always told.
function Job:stopping()
  if getmetatable(self) ~= Job then check.raise("zklock: use job:stopping() (with a colon)") end
  if not self._why then
    self._why = self._term.why or self._host.stopping() or (self.client.state == "CLOSED" and "CLOSED") or nil
  end
  return self._why
end

-- Sleep `s` seconds unless told to stop meanwhile. -> true, or nil, reason as soon as
-- job:stopping() says so (at once on a stop reason of the term; within POLL on the host's).
function Job:sleep(s)
  if getmetatable(self) ~= Job then check.raise("zklock: use job:sleep(s) (with a colon)") end
  if type(s) ~= "number" or s ~= s or s < 0 then
    check.argerror("sleep", 1, "expected a number of seconds >= 0, got " .. check.describe(s))
  end
  local host = self._host
  local deadline = host.now() + s
  while true do
    local why = self:stopping()
    if why then return nil, why end
    local left = deadline - host.now()
    if left <= 0 then return true end
    self._bell.wait(left < POLL and left or POLL)
  end
end

-- The run hook of a supervised term. -> true (the job raised: pause before queueing again)
local function supervise(e, term)
  local o, host = e._o, e._o.host
  if host.stopping() then return false end -- granted just as the host began to stop: hand it on
  local job = setmetatable({ token = term.token, node = term.node, id = e.id, path = e.path, client = e.client,
                             _term = term, _host = host, _kick = e._kick, _bell = host.signal() }, Job)
  for k, v in pairs(host.fields or {}) do job[k] = v end
  term.job = job
  elog(e, "notice", ("%s runs the job (token %s, id %s)"):format(host.who, tostring(job.token), tostring(e.id)))
  local done, failed = false, nil
  local thread, err = host.spawn(function()
    -- with a traceback where xpcall may yield (every Lua but PUC 5.1)
    local ok, msg
    if scheduler.YIELD_ACROSS_PCALL then
      ok, msg = xpcall(o.job, debug.traceback, job)
    else
      ok, msg = ypcall(o.job, job)
    end
    if not ok then failed = msg end
    done = true
    e._kick.wake()
  end)
  if not thread then failed, done = "cannot spawn the job thread: " .. tostring(err), true end
  local kill_at, outcome
  while not done do
    local why = job:stopping()
    if why then
      wake_job(job)
      local t = host.now()
      kill_at = kill_at or (t + o.stop_grace)
      -- the session gone (LOST, or the client closed under the job): its node too, at once
      local gone = term.lost or e.client.state == "CLOSED"
      if gone or t >= kill_at then
        host.kill(thread)
        outcome = gone and ("killed at once: the session was lost (told to stop: %s)"):format(why)
          or ("killed: it did not return within %g s of being told to stop (%s)"):format(o.stop_grace, why)
        break
      end
    end
    e._kick.wait(POLL)
  end
  if failed then elog(e, "error", ("the job raised in %s: %s"):format(host.who, tostring(failed))) end
  elog(e, outcome and "warn" or "notice", ("%s ended the job (token %s): %s"):format(host.who, tostring(job.token),
    outcome or (job._why and ("told to stop: " .. job._why)) or "it returned"))
  return failed ~= nil
end

-- The waiting hook of a supervised election: while queued, a thread of the host withdraws the
-- acquire once host.stopping() says so (a running job hears of it from job:stopping()).
local function host_waiting(e)
  local host, queued = e._o.host, true
  local bell = host.signal()
  host.spawn(function()
    while queued do
      local why = host.stopping()
      if why then e:close(why) return end
      bell.wait(POLL)
    end
  end)
  return function() queued = false; bell.wake() end -- the watcher ends now, not at its next poll
end

-- The pause of a supervised election: until s passed, the engine closed or the host stops.
local function host_pause(e, s)
  local host = e._o.host
  local until_t = host.now() + s
  while not e.closed and not host.stopping() and host.now() < until_t do e._kick.wait(POLL) end
end

-- One turn: queue, run a term, give the node back. -> queue again?
local function turn(e)
  local o, client = e._o, e.client
  if e.closed or client.state == "CLOSED" then return false end
  -- a queue object per turn: nothing of a turn that failed (an expired session) carries over
  local m = lockmod.new(client, RECIPES[o.recipe], e.path, o.recipe,
    { acl = o.acl, data = o.id, max_hold = o.max_hold })
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
  term.token, term.node, term.hold = m:token(), m:node(), hold.of(m)
  if e.closed then tell(e, term, e.closed) end
  local pause = false
  -- granted as the election closed, with the connection down under "stop", or lost at once:
  -- hand it on without running
  if not (term.why or not m:is_held() or (o.suspended == "stop" and client.state ~= "CONNECTED")) then
    e.terms = e.terms + 1
    term.number = e.terms
    term.running = true
    e.term = term
    local rok, r = ypcall(o.term == "until_close" and stay or o.run, e, term)
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
    -- lost with the session (its node goes with it), or given back by close(): forget it at
    -- once, without a request; a release would wait for the reconnection, and spec/64
    -- measured the next turn 3 s later
    local h = hold.of(m)
    if h then h:drop() end
  end
  -- m keeps its handler: a release close() started for an until_close term may still report
  -- LOST (the node was deleted meanwhile) to the participant's on_lost, as it did before
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
  recipe = check.is.oneof("mutex", "latch"), term = check.is.oneof("run", "until_close"),
  suspended = check.is.oneof("keep", "stop"),
  run = check.is.func, tell = check.is.func, spawn = check.is.func,
  pause = check.is.func, retry_delay = check.is.nonneg, on_state = check.is.func,
  on_exit = check.is.func, waiting = check.is.func, log = check.is.func, what = check.is.string,
  max_hold = check.is.positive, -- seconds: a term is lost (why "max_hold") once it lasted this long
  host = function(v) return type(v) == "table", "a table" end, job = check.is.func, stop_grace = check.is.nonneg,
}

-- leader.engine(client, path, opts) -> engine (not started: engine:start()). opts: above; run is
-- required unless term = "until_close"; id is the node data.
function M.engine(client, path, opts)
  check.open(client, "engine")
  check.path("engine", 2, path)
  -- an internal call (client:leader, client:latch and one_worker build on it), checked here
  -- rather than through check.options, which is for the documented API (scripts/apidoc.lua)
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
  if opts.host and not opts.job then check.argerror("engine", 3, "option 'job' is required with 'host'") end
  if not opts.run and not opts.host and opts.term ~= "until_close" then
    check.argerror("engine", 3, "option 'run' is required (a function(engine, term))")
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.recipe = o.recipe or "mutex"
  o.term = o.term or "run"
  o.suspended = o.suspended or "keep"
  o.what = o.what or ("election " .. check.short(path))
  o.spawn = o.spawn or function(fn) client:spawn(fn) return true end
  o.pause = o.pause or (o.host and host_pause) or function(_, s) client:sleep(s) end
  if o.host then
    o.run = o.run or supervise
    o.waiting = o.waiting or host_waiting
    o.stop_grace = o.stop_grace or 5
  end
  local e = setmetatable({ client = client, path = path, id = o.id, terms = 0, running = false, closed = false,
                           _o = o, _changed = watch.signal(client), _kick = o.host and o.host.signal() }, Engine)
  e._on_lost = function(state, _, why)
    local term = e.term or e._next
    if term then
      if state == "LOST" or (state == "SUSPENDED" and o.suspended == "stop") then tell(e, term, state) end
    end
    if o.on_state then o.on_state(state, term, why) end
  end
  return e
end

-- The queue object (a lock of the engine's recipe) of the turn in progress (queued or
-- leading), or nil.
function Engine:mutex() return self._mutex end

-- The hold record of the current term while it may go on and its node is held, or nil. Drives
-- the client first (a loss nobody pumped for, a max_hold that passed, is noticed).
function Engine:hold()
  local t = self.term
  local h = t and t.why == nil and t.hold
  if h and h:live() and t.why == nil then return h end
  return nil
end

-- The job of a supervised term while it runs and was not told to stop, or nil.
function Engine:job()
  local t = self.term
  local job = t and t.job
  if job and not t.why and not job._why then return job end
  return nil
end

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
-- term is told `why` (default "CLOSED"). Under term = "run" the node is given back once the term
-- is over; under "until_close" it is given back now, and close waits for the delete. Idempotent.
-- -> true | nil, msg, code (the delete failed)
function Engine:close(why)
  if self.closed then return true end
  self.closed = why or "CLOSED"
  local term = self.term
  if term then tell(self, term, self.closed) end
  if self._kick then self._kick.wake() end -- a supervisor (or its pause) hears of it now
  if self.client.state == "CLOSED" then return true end
  if self._mutex then self._mutex:cancel() end
  local h = term and term.hold
  if self._o.term == "until_close" and h and not h.released and not h.lost and not h.closed then
    return hold.release(h)
  end
  return true
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

-- The hold record of the current term, or nil.
local function term_hold(self)
  return self:is_leader() and self._engine:hold() or nil
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
--
-- The latch is the election engine with recipe = "latch" (Curator LeaderLatch nodes) and
-- term = "until_close": a term is the latch's leadership, from its grant until LOST (with the
-- session, its node deleted, max_hold) or close(); after a loss the engine queues again with a
-- new node (at the back, on the new session after an expiry).

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

-- client:latch(path, { id =, acl =, max_hold = }) -> latch
--   Joins at once (Curator LeaderLatch.start()): the election engine's coroutine, spawned on the
--   client, creates the latch node and waits; the latch leads while its node is first. After
--   LOST it joins again with a new node on the new session (leadership false in between). Lives
--   until close() or the client closes. max_hold (seconds): each leadership lasts at most this
--   long; then the latch reports LOST ("max_hold") through on_lost, its node is deleted, and it
--   joins again at the back, so another participant leads (bounded terms).
function Client:latch(path, opts)
  check.open(self, "latch")
  check.path("latch", 1, path)
  opts = check.options("latch", 2, opts, { id = id_option, acl = check.acl_option,
                                           max_hold = check.is.positive })
  check_id(self, "latch", 2, path, opts.id)
  local la = setmetatable({ client = self, path = path, id = opts.id, kind = "leader latch",
                            _is_leader = false, _closed = false,
                            _changed = watch.signal(self) }, Latch) -- notified on every change
  local what = "leader latch " .. check.short(path)
  la._engine = M.engine(self, path, {
    id = opts.id, acl = opts.acl, max_hold = opts.max_hold, recipe = "latch", term = "until_close",
    requeue = true, what = what,
    run = function() set_leader(la, true, "LEADER") end, -- the term begins: it lasts until a stop reason
    on_state = function(state, _, why)
      local fn = la._on_lost
      if fn then
        local ok, err = pcall(fn, state, la, why)
        if not ok then
          hold.log(self, "error", ("on_lost handler of %s failed (%s): %s"):format(what, state, tostring(err)))
        end
      end
      if state == "LOST" then set_leader(la, false, "LOST") end
    end,
  })
  la._engine:start()
  return la
end

-- Leading now (the hold protocol's "do I hold it?"; was has_leadership)? Drives the client
-- first, so a loss nobody pumped for is noticed.
function Latch:is_held()
  check.object(self, Latch, "latch", "is_held")
  return self._is_leader and self._engine:hold() ~= nil and not self._closed and self.client.state ~= "CLOSED"
end

-- Fencing token (czxid of our latch node) while leading, else nil.
function Latch:token()
  check.object(self, Latch, "latch", "token")
  if self:is_held() then return self._engine.term.token end
  return nil
end

-- Full path of our latch node while leading, else nil.
function Latch:node()
  check.object(self, Latch, "latch", "node")
  local h = self:is_held() and self._engine:hold()
  return h and h.node or nil
end

-- A fenced transaction that commits only while this latch leads on its node. Raises when not
-- leading.
function Latch:transaction()
  check.object(self, Latch, "latch", "transaction")
  local h = self:is_held() and self._engine:hold()
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
  set_leader(self, false, "CLOSED")
  watch.notify(self._changed) -- await() returns ECLOSED now (set_leader notified only a leader)
  return self._engine:close("CLOSED")
end

function Latch:__tostring()
  return ("zklock.latch(%s)"):format(self.path)
end

return M
