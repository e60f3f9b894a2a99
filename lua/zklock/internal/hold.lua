-- zklock.internal.hold: the hold/acquire plumbing the lock, semaphore and multi-lock modules share.
--
-- An object that acquires (a mutex, one side of a read-write lock, a semaphore) is set up with
-- hold.init(obj, client, acl): its hold state lives under a key only this module knows
-- (obj[STATE]): the client, the core's ACL id, its holds by owner, its pending acquires and its
-- on_lost handler. A granted core acquisition becomes a hold record (hold.adopt): the client
-- routes the acquisition's state events to it (hold:on_state) and may drop it (hold:drop) when
-- its owner coroutine is dead. Waiting goes through the client's recipe interface
-- (zklock.internal.recipe), so it suspends or blocks as the client's adapters decide.
--
-- The hold protocol (docs/design.md, "One hold protocol") rests on these records, so a recipe
-- that grants something (a leader's term, latch leadership, a lock-safe queue message) adopts it
-- by making its grant a hold record (M.adopt) and answering from it:
--   is_held  -> hold:live()              token/node -> hold.token / hold.node while live
--   release  -> M.release(hold)          (true | nil, "ELOST: ...", "ELOST" | nil, msg, code)
--   transaction -> txn.fenced(client, hold:guard())   (the guard reports ZNONODE: hold:gone())
--   on_lost  -> M.on_lost(obj, fn) for every hold of obj, or hold.on_lost = M.check_handler(...)
--               for one grant; hold.listener for a composite grant (the multi-lock)
--   <close>, __gc -> M.release / M.collected_hold
-- and by calling hold:gone() on any evidence of its own that the node no longer exists.
--
-- Grants start here, never on the raw core in the recipe module (docs/design.md, "Module
-- boundaries"; spec/fast/boundaries_spec.lua checks it). Each takes the object set up by M.init
-- and answers like the core: a core acquisition id | nil, msg, code; its waiting is M.await(obj, id).
--   M.start(obj, kind, path, ms, park)  a lock queue node of core kind (core.MUTEX, READ, WRITE)
--                                        on path, with obj's ACL and node data; park: the caller
--                                        is a coroutine an adapter owns (its wait parks in the core)
--   M.downgrade(obj, write_hold)        a read acquisition granted at once in place of a held
--                                        write lock (the node keeps the writer's queue place)
--   M.start_semaphore(obj, max, n, ms)  n leases of obj's semaphore (obj.path, max leases)
--   M.lease_ids(obj, id) -> { lease acquisition id, ... } of a granted semaphore acquisition
--   M.start_multi(obj, items, ms, flags) all of items ({ kind, path, max, per, acl } each) or none
--   M.multi_result(obj, id) -> component ids | nil, the index of the component that failed
-- No module outside this one gets the raw core handle (the latch queues through a lock object
-- of the LATCH recipe, zklock.leader's election engine).
local core = require("zklock.core")
local check = require("zklock.internal.args")
local R = require("zklock.internal.recipe")
local watch = require("zklock.internal.watch")
local metrics = require("zklock.internal.report")

local M = {}

local running = coroutine.running
local now = core.now -- monotonic milliseconds

local STATE = setmetatable({}, { __tostring = function() return "zklock.internal.hold.state" end })

local arm_revoke, disarm_revoke -- revocation (below)

-- Report msg at `level` ("error", "warn", ...) through the client's log function.
local function log(client, level, msg) return R.log(client, level, msg) end
M.log = log

-- nil, "NAME: text", "NAME" for an error code (zklock.internal.errors: the one formatter)
local fail = require("zklock.internal.errors").fail
M.fail = fail

-- The owner key of the caller: its coroutine, or a fixed key for the main thread (LuaJIT's
-- coroutine.running() returns nil there).
local MAIN = setmetatable({}, { __tostring = function() return "main thread" end })
M.MAIN = MAIN
function M.me()
  return running() or MAIN
end

-- LuaJIT (Lua 5.1) runs no __gc for tables: a userdata proxy owned by the object runs it instead.
local GC_PROXY = setmetatable({}, { __tostring = function() return "zklock.internal.hold.gc_proxy" end })
function M.gc_proxy(obj)
  if newproxy then
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = function() local mt = getmetatable(obj); if mt and mt.__gc then mt.__gc(obj) end end
    rawset(obj, GC_PROXY, proxy)
  end
end

---------------------------------------------------------------- objects that acquire

-- Set obj up to acquire through `client` with ACL option `acl` (already validated).
function M.init(obj, client, acl, data)
  obj[STATE] = {
    client = client,
    data = data,
    acl = R.acl_id(client, acl),
    core = R.core(client), -- the client's core handle (fixed for its life): the grants start on it
    -- owner -> hold (mutex and read-write lock sides: one hold per owner). Weak keys: the
    -- library keeps no owner coroutine alive; a collected owner's hold is reaped (Client:_reap).
    holds = setmetatable({}, { __mode = "k" }),
    owned = {},    -- hold -> true: keeps the owned holds alive while their owner may be gone
    pending = {},  -- op id -> waiter, while acquiring
    on_lost = nil,
    on_revoke = nil,
    max_hold = nil, -- seconds: every grant of obj is released once held this long (M.bound)
    live = setmetatable({}, { __mode = "k" }), -- every hold of obj not yet released (leases too)
  }
  return obj
end

-- The node data option of a constructor: nil, or a string that fits in one request with the
-- path (the client's max_data). Raises naming the option otherwise. -> data
function M.check_data(client, fname, argn, path, data)
  if data == nil then return nil end
  if type(data) ~= "string" then
    check.argerror(fname, argn, "option 'data': expected a string (the node data), got " .. check.describe(data))
  end
  local size = #data + #path + 64
  check.fits(fname, argn, size, R.max_data(client),
    ("option 'data': %d bytes (with the path and node name)"):format(size))
  return data
end

-- The max_hold option (seconds, nil: unbounded) of a constructor or an acquire. Raises naming
-- the option otherwise. -> seconds | nil
function M.check_max_hold(fname, argn, v)
  if v == nil then return nil end
  if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
    check.argerror(fname, argn, "option 'max_hold': expected a number of seconds > 0 (finite), got "
      .. check.describe(v))
  end
  return v
end

-- Bound every later grant of obj to `seconds` (nil: unbounded), as opts.max_hold of its
-- constructor does (already validated).
function M.set_max_hold(obj, seconds) obj[STATE].max_hold = seconds end

-- The node data of obj's acquisitions (nil: the client's identity).
function M.data(obj) return obj[STATE].data end

-- The core's ACL id of obj.
function M.acl(obj) return obj[STATE].acl end

-- The hold of `owner` (default: the caller) on obj, or nil.
function M.of(obj, owner)
  return obj[STATE].holds[owner or M.me()]
end

-- Every hold of obj (owner -> hold), for iteration.
function M.holds(obj) return obj[STATE].holds end

-- Raises "<fname> on a closed client" at the caller.
M.check_open = check.open

-- Drive the client once if nobody has for a while (see Client:_refresh).
M.refresh = R.refresh

-- The grant helpers (header). No Lua call beyond themselves: the handle and the ACL id are the
-- object's state, read from there.
function M.start(obj, kind, path, ms, park)
  local st = obj[STATE]
  return st.core:acquire(kind, path, ms, st.acl, st.data, park)
end
function M.downgrade(obj, write_hold)
  return obj[STATE].core:downgrade(write_hold.id)
end
function M.start_semaphore(obj, max, n, ms)
  local st = obj[STATE]
  return st.core:semaphore(obj.path, max, n, ms, st.acl)
end
function M.lease_ids(obj, id) return obj[STATE].core:lease_ids(id) end
function M.start_multi(obj, items, ms, flags) return obj[STATE].core:multi(items, ms, flags) end
function M.multi_result(obj, id) return obj[STATE].core:multi_result(id) end

-- Extra words for an acquire that failed with `status` (a missing chroot), or "".
M.explain = R.explain

-- The message of a try-once acquire (timeout 0) that failed with ETIMEDOUT: `busy` ("mutex /x is
-- held by another owner") when the server answered, else that no answer came (the core gives a
-- try-once up after the session timeout when there is no session to end it: never connected,
-- or between sessions), so a dead server is not reported as a busy lock.
function M.try_once_message(client, what, busy)
  if client.state == "CONNECTED" then return busy end
  return ("no answer from ZooKeeper trying %s once (the client is %s: is the server up?)")
    :format(what, client.state)
end

-- The metric labels of obj (cached), for reporter rep.
local function labels_of(st, obj, rep)
  local l = st.labels
  if not l then
    l = metrics.labels(rep, obj.kind, obj.path, obj.metric)
    st.labels = l
  end
  return l
end

local function what_of(obj)
  return obj.path and (obj.kind .. " " .. check.short(obj.path)) or obj.kind
end

-- Wait for acquisition `id` started for obj; cancel(obj) withdraws it meanwhile. -> waiter
-- parked: the call that started op id parked its waiter in the core (c:acquire's park flag),
-- adapter: the adapter owning the caller when the caller looked it up already (false: none)
function M.await(obj, id, parked, adapter)
  local st = obj[STATE]
  local client = st.client
  local rep = R.metrics(client)
  local t0 = rep and now()
  local w = R.waiter(client, id, true)
  st.pending[id] = w
  R.await(client, w, adapter, parked)
  st.pending[id] = nil
  if rep then
    local acquired = w.done and w.type == core.EV_ACQUIRED
    local token, ahead
    if acquired then
      local _, t, _, _, a = st.core:info(id) -- a multi-lock has none: nil
      token, ahead = t, a
    end
    local what = rep.events ~= "none" and what_of(obj) -- built only for an event line
    metrics.acquire_done(rep, labels_of(st, obj, rep), what, (now() - t0) / 1000, acquired,
      w.done and w.status or core.errno.ECLOSED, token, ahead)
  end
  return w
end

-- Withdraw every pending acquire of obj (they return nil, "ECANCELED: ..."). -> number withdrawn
function M.cancel(obj)
  local st = obj[STATE]
  local c = st.core
  local n = 0
  for id in pairs(st.pending) do
    if c:cancel(id) then n = n + 1 end
  end
  if n > 0 then R.poll(st.client) end
  return n
end

-- A handler argument of on_x(fn): a function, or nil (remove). Raises naming the argument.
function M.check_handler(fname, fn)
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror(fname, 1, "expected a function (or nil to remove the handler), got " .. check.describe(fn))
  end
  return fn
end

-- obj:on_lost(fn): fn(state, target) for SUSPENDED, RECONNECTED, LOST of every hold of obj;
-- replaces the previous handler, nil removes it. -> obj
function M.on_lost(obj, fn)
  if type(obj) ~= "table" or rawget(obj, STATE) == nil then
    check.raise("zklock: use obj:on_lost(fn) (with a colon), got " .. check.describe(obj))
  end
  obj[STATE].on_lost = M.check_handler("on_lost", fn)
  return obj
end

---------------------------------------------------------------- hold records

local Hold = {}
Hold.__index = Hold

local WEAK_V = { __mode = "v" }

-- Grants are numbered in the order they are adopted: a listing judges only the holds adopted
-- before it was asked for (a grant adopted while the listing was in flight may be missing from it).
local adopted = 0
function M.adopted() return adopted end

-- Record core acquisition `id` (just granted) of obj. owner: the owning coroutine (or MAIN) for
-- locks that belong to one, nil for leases. target: what on_lost handlers receive with the state.
-- kind, path: describe it in messages ("mutex", "/a"; "lease of semaphore", "/s").
-- The core may have ended the grant already (the session expired in the pump that granted it,
-- or before the waiter's coroutine ran): its LOST (or SUSPENDED) event was dispatched while no
-- hold record existed to hear it. The new hold then reports that state itself, once set up, so
-- that its handler hears the loss and is_held() says false (the core keeps a lost grant until it
-- is released: the release answers ELOST). bind(hold), when given, runs before that report: the
-- caller records the hold where its handlers look for it (a lease's own record).
function M.adopt(obj, id, owner, target, kind, path, bind)
  local st = obj[STATE]
  local node, token, held, suspended = st.core:info(id)
  adopted = adopted + 1
  local hold = setmetatable({ id = id, client = st.client, obj = obj, owned = owner ~= nil, target = target,
                              kind = kind, path = path, count = 1, token = token, node = node or nil,
                              seq = adopted }, Hold)
  if owner then
    hold.owner_ref = setmetatable({ owner }, WEAK_V) -- weak: see STATE.holds
    st.holds[owner] = hold
    st.owned[hold] = true
  end
  R.track(st.client, id, hold)
  st.live[hold] = true
  if R.metrics(st.client) then hold.granted_at = now() end
  if bind then bind(hold) end
  if held == false then -- lost before it was adopted (info answered: a boolean)
    hold:on_state("LOST")
    return hold
  end
  if st.on_revoke then arm_revoke(hold) end
  if st.max_hold then M.bound(hold, st.max_hold) end
  if suspended then hold:on_state("SUSPENDED") end
  return hold
end

-- Report the end of a hold once (released, dropped, or lost): its hold time and an event line.
local function hold_done(hold, how)
  local rep = R.metrics(hold.client)
  if not rep or not hold.granted_at or hold.reported then return end
  hold.reported = true
  local st = hold.obj[STATE]
  metrics.hold_done(rep, labels_of(st, hold.obj, rep), rep.events ~= "none" and hold:what(),
    (now() - hold.granted_at) / 1000, hold.token, how)
end

-- "mutex /a" (built only for messages)
function Hold:what() return self.kind .. " " .. check.short(self.path) end

-- The owner coroutine (or M.MAIN) of an owned hold; nil for a lease, or once the owner was
-- collected.
function Hold:owner() return self.owner_ref and self.owner_ref[1] end

-- Held (not lost, not closed with the client, not released)? Drives the client first.
function Hold:live()
  R.refresh(self.client)
  if self.max_hold_at and not self.lost and now() >= self.max_hold_at then self:max_hold_passed() end
  return not self.lost and not self.closed and not self.released and self.client.state ~= "CLOSED"
end

-- The client tells the hold of its acquisition's state: SUSPENDED, RECONNECTED, LOST, or CLOSED
-- (the client was closed: the node went with the session; nobody is told).
function Hold:on_state(state)
  if self.lost then return end -- LOST is final and reported once (the session's end after a node's)
  if state == "SUSPENDED" and self.suspended then return end -- told already (by M.adopt)
  if state == "CLOSED" or state == "LOST" then self:unbound() end
  if state == "CLOSED" then self.closed = true hold_done(self, "closed with the client") return end
  if state == "LOST" then self.lost = self.lost_why or "session"
  elseif state == "SUSPENDED" then self.suspended = true
  elseif state == "RECONNECTED" then self.suspended = false end
  local rep = R.metrics(self.client)
  if rep and self.granted_at then
    metrics.hold_state(rep, labels_of(self.obj[STATE], self.obj, rep), self:what(), state, self.token,
      (now() - self.granted_at) / 1000)
    if state == "LOST" then hold_done(self, "lost") end
  end
  local fn = self.on_lost or self.obj[STATE].on_lost
  if fn then
    -- fn(event, target, why): why (LOST only) is "session", "node" or "max_hold"
    local ok, err = pcall(fn, state, self.target, state == "LOST" and self.lost or nil)
    if not ok then
      log(self.client, "error", ("on_lost handler of %s failed (%s): %s"):format(self:what(), state, tostring(err)))
    end
  elseif state == "LOST" and not self.listener then
    log(self.client, "warn", ("%s was lost %s"):format(self:what(), self:lost_how()))
  end
  -- a composite grant (a multi-lock) hears its components' states too
  if self.listener then
    local ok, err = pcall(self.listener, state, self)
    if not ok then log(self.client, "error", ("on_lost handler over %s failed (%s): %s")
      :format(self:what(), state, tostring(err))) end
  end
end

-- How the hold was lost, for messages: "with the session", or "(its node ... was deleted)".
function Hold:lost_how()
  if self.lost == "node" then
    return ("(its node %s was deleted while it was held)"):format(check.short(self.node or "?"))
  elseif self.lost == "max_hold" then
    return ("(held for its max_hold of %g s: released by zklock)"):format(self.max_hold)
  end
  return "with the session"
end

-- Evidence that the hold's node no longer exists (a fenced transaction's check, a release's
-- delete, the revocation watch, a listing): the hold is LOST at once, reported once. The core
-- still counts the grant as held: its release (or the session's end) finishes it.
function Hold:gone()
  if self.lost or self.closed then return end
  if self.released and not self.releasing then return end
  self.lost_why = "node"
  self:on_state("LOST")
  self.lost_why = nil
end

---------------------------------------------------------------- bounded holds (max_hold)
--
-- A hold bounded to `max_hold` seconds is lost when they pass while it is held: its on_lost
-- handler hears ("LOST", target, "max_hold") once, and only then is its node deleted (in the
-- background), so the next waiter is granted after the handler ran. The owner's release then
-- answers ELOST, as after any loss. The time is kept by a client timer (zklock.watch): it fires
-- when the client is driven; is_held/token/node look at the clock themselves.

-- Bound hold h to `seconds` from now (replacing an earlier bound).
function M.bound(h, seconds)
  h:unbound()
  if h.lost or h.closed or h.released then return end
  h.max_hold, h.max_hold_at = seconds, now() + seconds * 1000
  h.max_hold_timer = watch.timer(h.client, seconds * 1000, function() h:max_hold_passed() end)
end

-- Drop the hold's bound (released, lost, closed).
function Hold:unbound()
  local t = self.max_hold_timer
  if t then
    self.max_hold_timer = nil
    watch.cancel_timer(self.client, t)
  end
end

-- The hold's max_hold passed: LOST (why "max_hold") reported once, then its node given back.
function Hold:max_hold_passed()
  if self.lost or self.closed or self.released then return end
  self.max_hold_at = nil
  log(self.client, "warn", ("%s held for its max_hold of %g s: releasing it"):format(self:what(), self.max_hold))
  self.lost_why = "max_hold"
  self:on_state("LOST")
  self.lost_why = nil
  hold_done(self, "max_hold")
  -- the handler has run: give the node back now; the owner's release answers ELOST
  disarm_revoke(self)
  R.track(self.client, self.id, nil)
  self.abandoned = true
  if self.client.state ~= "CLOSED" then local c = self.obj[STATE].core; pcall(c.abandon, c, self.id) end
end

-- What a fenced transaction (zklock.txn) checks before and while it commits: the hold's node.
function Hold:guard()
  local h = self
  return { node = h.node, what = h:what(), live = function() return h:live() end,
           gone = function() h:gone() end }
end

-- Whether listing `names` of the directory `dir`, asked for when M.adopted() was `asked`, shows
-- that the hold's node is gone (and then report it): a listing of its own directory without it.
function Hold:check_listing(dir, names, asked)
  local node = self.node
  if not node or self.lost or self.released or self.closed or self.seq > asked then return end
  if node:sub(1, #dir + 1) ~= dir .. "/" then return end
  local base = node:sub(#dir + 2)
  for _, n in ipairs(names) do if n == base then return end end
  self:gone()
end

-- Tell every live hold of obj what a listing of `dir` showed (see Hold:check_listing).
function M.check_listing(obj, dir, names, asked)
  for h in pairs(obj[STATE].live) do h:check_listing(dir, names, asked) end
end

---------------------------------------------------------------- revocation
--
-- Curator's cooperative revocation: another process asks a holder to let go by setting the data
-- of the holder's node to "__REVOKE__" (client:revoke, Curator's Revoker.attemptRevoke). A hold
-- whose object (or lease) has an on_revoke handler keeps a getData watch on its own node from
-- the grant on, re-armed after every data change; when the data reads "__REVOKE__" the handler
-- runs, once per request (a request is told apart by the node's mzxid). The first read happens
-- at the grant, so a request made while the holder still waited in the queue is reported then.

local REVOKE = "__REVOKE__"
M.REVOKE = REVOKE

local function revoke_fn(hold)
  return hold.on_revoke or hold.obj[STATE].on_revoke
end

function disarm_revoke(hold)
  local rec = hold.revoke_watch
  if rec then
    hold.revoke_watch = nil
    watch.forget(hold.client, rec)
  end
end

local function revoke_read(hold, st, res)
  if st ~= 0 then
    hold.revoke_watch = nil
    if st == core.errno.ZNONODE then hold:gone() end
    if st ~= core.errno.ZNONODE and st ~= core.errno.ESESSION and st ~= core.errno.ECLOSED then
      log(hold.client, "warn", ("%s: cannot watch its node for revocation requests: %s")
        :format(hold:what(), core.strerror(st)))
    end
    return
  end
  local fn = revoke_fn(hold)
  if not fn or hold.released or not res or res.data ~= REVOKE or res.mzxid == hold.revoke_seen then return end
  hold.revoke_seen = res.mzxid
  local rep = R.metrics(hold.client)
  if rep then
    metrics.revoked(rep, labels_of(hold.obj[STATE], hold.obj, rep), rep.events ~= "none" and hold:what(), hold.token)
  end
  local ok, err = pcall(fn, "REVOKE", hold.target, hold.node)
  if not ok then
    log(hold.client, "error", ("on_revoke handler of %s failed: %s"):format(hold:what(), tostring(err)))
  end
end

function arm_revoke(hold)
  if hold.revoke_watch or hold.released or hold.lost or hold.closed or not hold.node then return end
  if not revoke_fn(hold) or hold.client.state == "CLOSED" then return end
  local rec
  local id, r = watch.start(hold.client, "get", core.OP_GET, hold.node, 0, {
    private = true,
    on_done = function(st, res)
      if hold.revoke_watch == rec then revoke_read(hold, st, res) end
    end,
    on_fire = function(st)
      if hold.revoke_watch ~= rec then return end
      hold.revoke_watch = nil
      if st == core.WATCH_CHANGED then arm_revoke(hold) -- read again, watch again
      elseif st == core.WATCH_DELETED then hold:gone() end
    end,
  })
  if not id then return end -- the client cannot start anything (closed): nothing to watch
  rec = r
  hold.revoke_watch = rec
end

-- Set (fn) or clear (nil) the revocation handler of hold `h` alone (a lease), or of every hold
-- of obj (current and future) with on_revoke(obj, fn). fn("REVOKE", target, node) runs from the client's
-- event dispatch, like on_lost handlers: it must not wait (set a flag, wake the owner).
local function set_revoke(h)
  if revoke_fn(h) then arm_revoke(h) else disarm_revoke(h) end
end

function M.on_revoke(obj, fn)
  if type(obj) ~= "table" or rawget(obj, STATE) == nil then
    check.raise("zklock: use obj:on_revoke(fn) (with a colon) on a lock, semaphore or lease, got "
      .. check.describe(obj))
  end
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_revoke", 1, "expected a function or nil, got " .. check.describe(fn))
  end
  local st = obj[STATE]
  st.on_revoke = fn
  for h in pairs(st.live) do set_revoke(h) end
  return obj
end

function M.on_revoke_hold(h, fn)
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_revoke", 1, "expected a function or nil, got " .. check.describe(fn))
  end
  h.on_revoke = fn
  set_revoke(h)
end

-- Unlist the hold from its object and its client (it is being released or dropped).
local function unlist(hold)
  disarm_revoke(hold)
  hold:unbound()
  local st = hold.obj[STATE]
  st.live[hold] = nil
  local owner = hold:owner()
  if owner ~= nil and st.holds[owner] == hold then st.holds[owner] = nil end
  st.owned[hold] = nil
  R.track(hold.client, hold.id, nil)
end

-- Give the node back in the background, never blocking (owner dead, object collected).
function Hold:drop()
  unlist(self)
  self.released = true
  hold_done(self, "dropped")
  if not self.closed and self.client.state ~= "CLOSED" then
    local c = self.obj[STATE].core
    pcall(c.abandon, c, self.id)
  end
end

-- The error of releasing what was lost (with the session, or its node deleted).
local function lost_before_release(hold)
  return fail(core.errno.ELOST, ("%s was lost %s before release"):format(hold:what(), hold:lost_how()))
end
M.lost_before_release = lost_before_release

-- Release the hold (its last count): unlist it, then delete its node and wait for the reply.
-- A loss the hold has not heard of yet is reported to it first: the LOST event may still be
-- queued, and the hold no longer receives it. -> true | nil, msg, code
function M.release(hold)
  local client = hold.client
  unlist(hold)
  hold.released = true
  -- after unlisting: a loss this refresh finds reaches the hold once, from here, and an on_lost
  -- handler cannot release it a second time under this call
  R.refresh(client)
  if hold.closed or client.state == "CLOSED" then
    return true -- the session was closed: every node of ours went with it
  end
  if hold.abandoned then return lost_before_release(hold) end -- max_hold gave the node back
  local a = R.owner(client) -- a coroutine an adapter owns: its wait is parked by the release call
  local ok, msg, code = hold.obj[STATE].core:release(hold.id, a ~= nil) -- ok: true, msg: parked
  local status
  if ok then
    local w = R.await(client, R.waiter(client, hold.id), a or false, msg)
    if not w.done or w.status == 0 then hold_done(hold, "released") return true end
    status = w.status
  elseif code == "ELOST" then
    status = core.errno.ELOST
  else
    return nil, msg, code
  end
  if hold.lost then return lost_before_release(hold) end -- known before, or told meanwhile
  if status == core.errno.ELOST or status == core.errno.ZNONODE then
    -- ZNONODE: the release's only delete found no node: it was deleted while held
    hold.releasing = true -- a release called from the on_lost handler answers ELOST
    if status == core.errno.ZNONODE then hold:gone() else hold:on_state("LOST") end
    hold.releasing = nil
    return lost_before_release(hold)
  end
  return fail(status, ("releasing %s: %s"):format(hold:what(), core.strerror(status)))
end

-- obj was collected while holding: give every node back in the background, with a warning.
function M.collected(obj)
  local st = rawget(obj, STATE)
  if not st then return end
  for hold in pairs(st.owned) do M.collected_hold(hold) end
end

function M.collected_hold(hold)
  if not hold.released and not hold.closed and hold.client.state ~= "CLOSED" then
    log(hold.client, "warn", ("%s collected while held; releasing in the background"):format(hold:what()))
    hold:drop()
  end
end

return M
