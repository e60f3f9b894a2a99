-- zklock.internal.watch: one-shot ZooKeeper watches armed by plain reads (client:get/exists/children with
-- { watch = true }), and the callback form the recipes build on (revocation).
--
-- A read started with a watch registers a record under its core op id before anything can
-- arrive for it; the client's event dispatch hands the read's OP_DONE and the later WATCH event
-- to this module (on_done, on_event), so a watch that fires in the same dispatch round as its
-- read's answer is never missed. Waiting never happens inside the dispatch: wait() suspends the
-- calling coroutine through the client's adapter (or blocks while pumping) like every other wait.
--
-- Sharing: while a watch armed (or being armed) by a read of `kind` on `path` has not fired,
-- another read of the same kind and path on the same client is sent without a watch and returns
-- the same watch object: one ZooKeeper watch, however many coroutines wait on it. (Should the
-- first read arm nothing, e.g. a get that found no node, a later read that found one starts
-- again with a watch of its own.)
local core = require("zklock.core")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local R = require("zklock.internal.recipe")

local M = {}

local now = core.now

local TYPE_NAMES = {
  [core.WATCH_CREATED] = "created",
  [core.WATCH_DELETED] = "deleted",
  [core.WATCH_CHANGED] = "changed",
  [core.WATCH_CHILD] = "child",
}
M.TYPE_NAMES = TYPE_NAMES

local Watch = {}
Watch.__index = Watch
Watch.__name = "zklock.watch"
M.Watch = Watch

-- The client's watch tables (its "watch" slot), made on first use.
local function make_state()
  return {
    ops = {},    -- core op id -> record (a read with a watch in flight, or an armed watch)
    shared = {}, -- kind .. "\0" .. path -> armed, shareable Watch
    timed = {},  -- wait record -> true, for waits with a deadline
    waiting = 0, -- wait records not done (counted by client:pending())
    signals = setmetatable({}, { __mode = "k" }), -- signal -> true while something waits on it
    bytes = 0,   -- what the armed watches add to the client's SetWatches message (see M.bytes)
  }
end
local function state(client) return R.slot(client, "watch", make_state) end
local function peek(client) return R.peek(client, "watch") end

-- Has anything on client used watches or signals yet? (The client's dispatch asks first.)
function M.active(client) return peek(client) ~= nil end

local function arms(kind, status)
  return status == 0 or (kind == "exists" and status == core.errno.ZNONODE)
end

-- An armed watch is counted in ws.bytes (its share of the SetWatches message) until it fires or
-- is forgotten; a watch its owner counts itself (opts.counted, the caches) is not.
local function charge(ws, rec)
  if rec.cost and not rec.charged then
    rec.charged = true
    ws.bytes = ws.bytes + rec.cost
  end
end
local function refund(ws, rec)
  if rec.charged then
    rec.charged = false
    ws.bytes = ws.bytes - rec.cost
  end
end

-- The bytes the client's armed watches add to the SetWatches message its ZooKeeper client sends
-- on a reconnection (4 + the path with the chroot, each), those started with opts.counted left out.
function M.bytes(client)
  local ws = peek(client)
  return ws and ws.bytes or 0
end

---------------------------------------------------------------- the dispatch hooks

-- OP_DONE of op `id` (status st): called by the client's dispatch for every OP_DONE.
function M.on_done(client, id, st)
  local ws = peek(client)
  local rec = ws and ws.ops[id]
  if not rec then return end
  if arms(rec.kind, st) then
    rec.armed = true
    charge(ws, rec)
  else
    ws.ops[id] = nil
    rec.unarmed = true
    if rec.key and ws.shared[rec.key] == rec then ws.shared[rec.key] = nil end
  end
  if rec.on_done then rec.on_done(st, st == 0 and R.result(client, id) or nil) end
end

-- End every wait on obj (a watch or a signal): they return as woken.
local function wake_all(client, ws, obj)
  local waits = obj.waits
  obj.waits = {}
  for _, w in ipairs(waits) do
    if not w.done then
      w.done = true
      ws.timed[w] = nil
      ws.waiting = ws.waiting - 1
      if w.adapter then w.adapter.wake(client, w) end
    end
  end
end

local function finish(client, rec, status)
  local ws = state(client)
  if ws.ops[rec.id] == rec then ws.ops[rec.id] = nil end
  if rec.key and ws.shared[rec.key] == rec then ws.shared[rec.key] = nil end
  refund(ws, rec)
  rec._status, rec.armed = status, false
  if rec.on_fire then rec.on_fire(status) end
  wake_all(client, ws, rec)
end

-- The WATCH event of op `id`: status is a ZKL_WATCH_* type or an error (ESESSION, ECLOSED).
function M.on_event(client, id, status)
  local ws = peek(client)
  local rec = ws and ws.ops[id]
  if rec then finish(client, rec, status) end
end

-- Waits whose deadline passed end (ETIMEDOUT), and timers whose time came run (M.timer); run by
-- every pump after the dispatch.
function M.expire(client)
  local ws = peek(client)
  if not ws or next(ws.timed) == nil then return end
  local t = now()
  local due
  for w in pairs(ws.timed) do
    if t >= w.deadline then
      ws.timed[w] = nil
      if w.fn then
        due = due or {}
        due[#due + 1] = w
      elseif not w.done then
        w.done, w.timed_out = true, true
        ws.waiting = ws.waiting - 1
        if w.adapter then w.adapter.wake(client, w) end
      end
    end
  end
  if not due then return end
  -- after the traversal: a timer's function may start or cancel timers
  table.sort(due, function(a, b) return a.deadline < b.deadline end)
  for _, w in ipairs(due) do
    local ok, err = pcall(w.fn)
    if not ok then R.log(client, "error", "a timer of the client failed: " .. tostring(err)) end
  end
end

-- A timer: fn() runs from the pump (it must not wait) once `ms` milliseconds have passed, if
-- the client is driven then (a pump, client:run, a sleep, any wait). Not counted by
-- client:pending(): a timer alone does not keep client:run going. -> the timer (for cancel_timer)
function M.timer(client, ms, fn)
  local t = { deadline = now() + ms, fn = fn }
  state(client).timed[t] = true
  return t
end

-- Cancel timer t (made by M.timer); nothing if it ran already.
function M.cancel_timer(client, t)
  local ws = peek(client)
  if ws then ws.timed[t] = nil end
end

-- ms until the first wait deadline (-1: none): folded into the client's timeout.
function M.timeout_ms(client)
  local ws = peek(client)
  if not ws or next(ws.timed) == nil then return -1 end
  local first = math.huge
  for w in pairs(ws.timed) do
    if w.deadline < first then first = w.deadline end
  end
  local left = math.ceil(first - now())
  return left < 0 and 0 or left
end

-- Wait record w is given up (its coroutine was closed or collected while waiting).
function M.drop_wait(client, w)
  if w.done then return end
  local ws = state(client)
  w.done = true
  ws.timed[w] = nil
  ws.waiting = ws.waiting - 1
  local waits = w.watch.waits
  for i, x in ipairs(waits) do
    if x == w then table.remove(waits, i) break end
  end
end

-- Waits not done (for client:pending()).
function M.pending(client)
  local ws = peek(client)
  return ws and ws.waiting or 0
end

---------------------------------------------------------------- starting reads with a watch

-- Start a read of `kind` ("get", "exists", "children", core op type optype) on path with a
-- watch. -> core op id, the Watch its answer arms | nil, msg, code. A watch of the same kind
-- on the same path that is armed and shared is reused: the read then goes without a watch.
-- opts.private: never share this watch (a recipe's own); opts.counted: its owner counts its
-- bytes (left out of M.bytes); opts.on_done(status, result),
-- opts.on_fire(status): callbacks run from the dispatch (they must not wait).
function M.start(client, kind, optype, path, ms, opts)
  local ws = state(client)
  local key = not (opts and opts.private) and (kind .. "\0" .. path) or nil
  local shared = key and ws.shared[key]
  if shared then
    local id, msg, code = R.op(client, optype, path, nil, 0, -1, 0, ms > 0 and ms or 0)
    if not id then return nil, msg, code end
    return id, shared, true
  end
  local id, msg, code = R.op(client, optype, path, nil, 0, -1, 0, ms > 0 and ms or 0, true)
  if not id then return nil, msg, code end
  local rec = setmetatable({ id = id, client = client, kind = kind, path = path, key = key, waits = {},
                             on_done = opts and opts.on_done, on_fire = opts and opts.on_fire,
                             cost = not (opts and opts.counted) and R.watch_cost(client, path) or nil }, Watch)
  ws.ops[id] = rec
  if key then ws.shared[key] = rec end
  return id, rec, false
end

-- Forget watch `rec` (a recipe's private one it no longer needs): no event reaches it any more.
function M.forget(client, rec)
  local ws = peek(client)
  if not ws or ws.ops[rec.id] ~= rec then return end
  ws.ops[rec.id] = nil
  if rec.key and ws.shared[rec.key] == rec then ws.shared[rec.key] = nil end
  refund(ws, rec)
  rec.on_done, rec.on_fire = nil, nil
  R.abandon(client, rec.id)
end

-- The waiter of a read with a watch was abandoned (its coroutine is gone): nobody will see the
-- watch object, so forget it unless it is shared with others.
function M.abandoned(client, id)
  local ws = peek(client)
  local rec = ws and ws.ops[id]
  if rec and not rec.armed then M.forget(client, rec) end
end

---------------------------------------------------------------- waiting

-- Wait on obj (a watch or a signal: it has a `waits` list) until it wakes its waits, `ms` pass
-- (-1: no limit) or the client closes: suspends a coroutine an adapter owns, otherwise blocks
-- while pumping. id: the core op a watch belongs to (0 for a signal). -> true when woken
local function wait_on(client, obj, id, ms)
  local ws = state(client)
  local w = { id = id, watch = obj }
  obj.waits[#obj.waits + 1] = w
  ws.waiting = ws.waiting + 1
  if ms > 0 then
    w.deadline = now() + ms
    ws.timed[w] = true
  end
  R.await(client, w) -- suspends through the caller's adapter, or blocks while pumping
  if not w.done then M.drop_wait(client, w) end -- woken otherwise (client closed, foreign resume)
  return not w.timed_out and client.state ~= "CLOSED"
end

---------------------------------------------------------------- signals
--
-- A signal is a condition a recipe keeps in Lua (a latch's leadership, a leader's term) that
-- callers wait on with a deadline, woken when the recipe says it changed: no polling. Waits
-- share the watches' machinery (deadlines folded into the pump's timeout, give-up on a closed
-- coroutine, client:pending()); the client's close wakes them all.

-- A new signal of `client`.
function M.signal(client)
  return { client = client, waits = {} }
end

-- Wait up to ms (-1: no limit; 0: not at all) for sig to be notified. -> true when notified,
-- false on the deadline or when the client closed meanwhile. The caller checks its condition
-- again either way: a notification says that something changed, not what.
function M.wait_signal(sig, ms)
  local client = sig.client
  if ms == 0 or client.state == "CLOSED" then return false end
  state(client).signals[sig] = true
  return wait_on(client, sig, 0, ms)
end

-- Wake every wait on sig (from anywhere, the dispatch included: the woken resume later).
function M.notify(sig)
  local ws = peek(sig.client)
  if ws and sig.waits[1] then wake_all(sig.client, ws, sig) end
end

-- The client closed: every signal's waits end (watches end through their ECLOSED events).
function M.close(client)
  local ws = peek(client)
  if not ws then return end
  for sig in pairs(ws.signals) do wake_all(client, ws, sig) end
end

---------------------------------------------------------------- the watch object

-- watch:wait(timeout) -> "created" | "deleted" | "changed" | "child"
--                      | nil, msg, code ("ETIMEDOUT", "ESESSION", "ECLOSED")
-- Suspends a coroutine an adapter owns, otherwise blocks while pumping the client. Once the
-- watch has fired every wait returns its outcome at once. timeout: seconds, nil = no limit.
function Watch:wait(timeout)
  check.object(self, Watch, "watch", "wait")
  local ms = check.timeout("wait", 1, timeout)
  local client = self.client
  if self._status == nil and client.state == "CLOSED" then
    self._status = core.errno.ECLOSED
  end
  if self._status == nil and ms ~= 0 then wait_on(client, self, self.id, ms) end
  local st = self._status
  if st == nil then
    if client.state == "CLOSED" then
      return E.fail("ECLOSED", ("the client was closed while waiting for the watch on %s")
        :format(check.short(self.path)))
    end
    return E.fail("ETIMEDOUT", ("the watch on %s did not fire within %g s"):format(check.short(self.path), ms / 1000))
  end
  local name = TYPE_NAMES[st]
  if name then return name end
  local text = st == core.errno.ESESSION and "the ZooKeeper session was lost (its watches went with it)"
    or E.strerror(st)
  return E.fail(st, ("watch on %s: %s"):format(check.short(self.path), text))
end

-- watch:fired() -> the type it fired with ("changed", ...), the error code name when it ended
-- without firing ("ESESSION", "ECLOSED"), or nil while armed. Never waits.
function Watch:fired()
  check.object(self, Watch, "watch", "fired")
  local st = self._status
  if st == nil then return nil end
  return TYPE_NAMES[st] or E.name(st)
end

function Watch:__tostring()
  return ("zklock.watch(%s %s, %s)"):format(self.kind, self.path, self._status == nil and "armed"
    or (TYPE_NAMES[self._status] or E.name(self._status)))
end

return M
