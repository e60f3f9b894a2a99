-- zklock.multilock: several locks taken as one (Curator's InterProcessMultiLock), all or nothing.
--
-- The core acquires the components one after another and, when one fails, releases those it
-- already took before reporting which one failed. The policy lives here: the order (as given, or
-- sorted by path so that every multi-lock over the same locks takes them in one global order and
-- none can deadlock another), one shared deadline or a timeout per component, the rollback order,
-- and retries. Components the calling coroutine already holds (reentrant locks) are counted, not
-- queued for again.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local retry = require("zklock.retry")
local hold = require("zklock.internal.hold")
local lockmod = require("zklock.lock")
local semmod = require("zklock.semaphore")
local Client = require("zklock.client").Client
local E = require("zklock.internal.errors")

local fail, me = hold.fail, hold.me

local MultiLock = {}
MultiLock.__index = MultiLock

local KIND_RANK = { ["write lock"] = 1, mutex = 2, ["semaphore mutex"] = 3, ["read lock"] = 4 }

local function component_kind(x)
  local mt = getmetatable(x)
  if mt == lockmod.Lock or mt == semmod.SemaphoreMutex then return x.kind end
  return nil
end

local function new(client, locks, opts)
  if type(locks) ~= "table" or #locks == 0 then
    check.argerror("multilock", 1, "locks: expected a non-empty array of lock objects, got "
      .. check.describe(locks))
  end
  opts = check.options("multilock", 2, opts, {
    order = check.is.oneof("given", "path"),
    deadline = check.is.nonneg,
    per_lock_timeout = check.is.nonneg,
    rollback = check.is.oneof("reverse", "given"),
    metric = check.is.string,
    max_hold = check.is.positive,
  })
  local seen, seen_path = {}, {}
  for i, l in ipairs(locks) do
    local kind = component_kind(l)
    if not kind then
      check.argerror("multilock", 1, ("locks[%d]: expected a mutex, read or write lock or semaphore mutex, got %s")
        :format(i, check.describe(l)))
    end
    if l.client ~= client then
      check.argerror("multilock", 1, ("locks[%d]: belongs to another client; all locks of a multi-lock must share one")
        :format(i))
    end
    if seen[l] then check.argerror("multilock", 1, ("locks[%d]: listed twice"):format(i), 2) end
    local key = l.path .. "\0" .. (kind == "read lock" and "r" or "x")
    if seen_path[key] then
      check.argerror("multilock", 1, ("locks[%d]: %s is already in the list (it would wait for itself)")
        :format(i, l.path))
    end
    seen[l], seen_path[key] = true, true
  end
  local ordered = {}
  for i, l in ipairs(locks) do ordered[i] = l end
  if opts.order == "path" then
    table.sort(ordered, function(a, b)
      if a.path ~= b.path then return a.path < b.path end
      return KIND_RANK[a.kind] < KIND_RANK[b.kind]
    end)
  end
  local self = setmetatable({ client = client, locks = ordered, opts = opts, kind = "multi-lock",
                              metric = opts.metric }, MultiLock)
  return hold.init(self, client, nil)
end

local function describe(l) return ("%s %s"):format(l.kind, check.short(l.path)) end

-- The hold records of the components, as held by `co` (component order), or nil when one is
-- not held.
local function holds_of(self, co)
  local out = {}
  for i, l in ipairs(self.locks) do
    local h
    if getmetatable(l) == lockmod.Lock then h = hold.of(l, co) else h = semmod.mutex_hold(l) end
    if not h then return nil end
    out[i] = h
  end
  return out
end

-- The components' state reports reach the multi-lock's on_lost handler as one grant's: each
-- state once when it changes, LOST once (whichever component lost first).
local function listen(self, holds)
  if not holds then return end
  local g = {}
  local function on(state, h)
    if g.lost or state == g.last then return end
    g.last, g.lost = state, state == "LOST"
    local fn = self._on_lost
    if fn then
      local ok, err = pcall(fn, state, self, state == "LOST" and h and h.lost or nil)
      if not ok then
        hold.log(self.client, "error", ("on_lost handler of %s failed (%s): %s"):format(tostring(self), state,
          tostring(err)))
      end
    elseif state == "LOST" then
      hold.log(self.client, "warn", ("%s was lost"):format(tostring(self)))
    end
  end
  for _, h in ipairs(holds) do h.listener = on end
  -- a component lost (or suspended) before it was adopted told only itself (hold.adopt)
  for _, h in ipairs(holds) do
    if h.lost then return on("LOST", h) end
  end
  for _, h in ipairs(holds) do
    if h.suspended then return on("SUSPENDED", h) end
  end
end

-- acquire(timeout, { retry = policy }) -> self | nil, msg, code
--   timeout (s): one deadline shared by all components (default: the `deadline` option; nil
--   and no option: no deadline). Each component also waits at most `per_lock_timeout`.
function MultiLock:acquire(timeout, opts)
  check.object(self, MultiLock, "multilock", "acquire")
  local client = self.client
  hold.check_open(client, "acquire")
  if timeout == nil then timeout = self.opts.deadline end
  check.timeout("acquire", 1, timeout)
  local max_hold = self.opts.max_hold
  if opts ~= nil then max_hold = select(2, retry.option("acquire", 2, opts)) or max_hold end
  local r, msg, code
  if opts == nil and not max_hold then return self:_acquire_once(timeout) end -- no closure per call
  if opts == nil then r, msg, code = self:_acquire_once(timeout)
  else
    r, msg, code = retry.acquire(client, "acquire", 2, timeout, opts,
      function(left) return self:_acquire_once(left) end)
  end
  if r and max_hold then
    -- every component bounded alike: the first to pass reports the grant LOST ("max_hold")
    for _, h in ipairs(holds_of(self, me()) or {}) do
      if h.count == 1 then hold.bound(h, max_hold) end
    end
  end
  return r, msg, code
end

function MultiLock:_acquire_once(timeout)
  local client = self.client
  local ms = check.timeout("acquire", 1, timeout)
  local per = self.opts.per_lock_timeout and check.timeout("acquire", 1, self.opts.per_lock_timeout) or -1
  local once = ms == 0
  if once then ms, per = -1, 0 end -- 0: try each component once, as for every other acquire
  local co = me()
  local items, pending, reentered = {}, {}, {}
  for _, l in ipairs(self.locks) do
    local h = getmetatable(l) == lockmod.Lock and hold.of(l, co)
    if h and not h.lost then
      h.count = h.count + 1 -- reentrant: ours already
      reentered[#reentered + 1] = h
    else
      local max = l.kind == "semaphore mutex" and 1 or 0
      items[#items + 1] = { l.recipe or core.MUTEX, l.path, max, per, hold.acl(l.semaphore or l) }
      pending[#pending + 1] = l
    end
  end
  if #items == 0 then return self end
  local function undo()
    for _, h in ipairs(reentered) do h.count = h.count - 1 end
  end
  local flags = self.opts.rollback == "given" and 1 or 0
  local id, msg, code = hold.start_multi(self, items, ms, flags)
  if not id then undo(); return nil, msg, code end
  local w = hold.await(self, id)
  if not w.done then
    undo()
    return fail(core.errno.ECLOSED, "the client was closed while acquiring a multi-lock")
  end
  local ids, failed = hold.multi_result(self, id)
  if not ids and type(failed) ~= "number" then failed = nil end -- no result (the client closed): nil, msg
  if w.type ~= core.EV_ACQUIRED or not ids then
    undo()
    local st = w.status
    local which = failed and pending[failed]
    local where = which and ("%s (%d of %d)"):format(describe(which), failed, #pending) or "a component"
    -- what the caller should know about the rest: those taken before the failure were released
    local taken = failed and failed - 1
    local rest
    if taken == 0 then
      rest = "nothing was held"
    elseif taken == 1 then
      rest = "the one taken before it was released"
    elseif taken then
      rest = ("the %d taken before it were released"):format(taken)
    else
      rest = "the others were released"
    end
    if #reentered > 0 then
      rest = rest .. ("; the %d this coroutine held before stay held"):format(#reentered)
    end
    if st == core.errno.ETIMEDOUT and once then
      return fail(st, ("multi-lock: %s; %s"):format(hold.try_once_message(client, where,
        where .. " is held by another owner"), rest))
    elseif st == core.errno.ETIMEDOUT then
      return fail(st, ("multi-lock timed out waiting for %s; %s"):format(where, rest))
    end
    return fail(st, ("multi-lock failed on %s: %s%s; %s")
      :format(where, core.strerror(st), hold.explain(client, st), rest))
  end
  local adopted, lost = {}, false
  for i, l in ipairs(pending) do
    if getmetatable(l) == lockmod.Lock then
      adopted[i] = lockmod.adopt(l, ids[i], co)
    else
      semmod.adopt_mutex(l, ids[i])
      adopted[i] = semmod.mutex_hold(l)
    end
    lost = lost or adopted[i].lost ~= nil
  end
  listen(self, holds_of(self, co))
  if lost then -- the session ended as the components were granted (on_lost heard LOST)
    for i = #pending, 1, -1 do
      local l = pending[i]
      if not adopted[i].released then -- (a handler may have released it already)
        if getmetatable(l) == lockmod.Lock then hold.release(adopted[i]) else l:release() end -- ELOST
      end
    end
    undo()
    local rest = #reentered > 0 and ("; the %d this coroutine held before stay held"):format(#reentered) or ""
    return fail(core.errno.ELOST, "multi-lock: granted as the session ended: the new components are not held" .. rest)
  end
  return self
end

-- release() -> true | nil, msg, code, errors. Releases every component in reverse order, going on
-- past failures; msg ("CODE: ...") lists every failure, code is the first one's, errors = { {lock, msg, code} }.
-- Raises, like a mutex, when the caller holds none of the components (never acquired, or
-- released already). A component released on its own behind the multi-lock's back is reported
-- among the failures (code ENOTHELD) while the others are released. No pcall around the
-- components' releases: PUC Lua 5.1 cannot yield across one (a release suspends a scheduled
-- coroutine until the delete is answered), and a held component's release raises nothing.
local function held_by_caller(l, co)
  if getmetatable(l) == lockmod.Lock then return hold.of(l, co) ~= nil end
  return l:is_held() -- a semaphore mutex: held by whoever took it
end

function MultiLock:release()
  check.object(self, MultiLock, "multilock", "release")
  local co, held, any = me(), {}, false
  for i, l in ipairs(self.locks) do
    held[i] = held_by_caller(l, co)
    any = any or held[i]
  end
  if not any then
    check.raise(("zklock: release of %s by a coroutine that does not hold it"):format(tostring(self)))
  end
  local errors = {}
  for i = #self.locks, 1, -1 do
    local l = self.locks[i]
    if held[i] then
      local r, msg, code = l:release()
      if not r then
        errors[#errors + 1] = { lock = l, msg = msg, code = code }
      end
    else
      local text = ("%s was not held (released on its own?)"):format(describe(l))
      errors[#errors + 1] = { lock = l, code = "ENOTHELD", msg = E.message("ENOTHELD", text) }
    end
  end
  if #errors == 0 then return true end
  local parts = {}
  for _, e in ipairs(errors) do parts[#parts + 1] = e.msg end
  -- "CODE: ..." like every release's message (the first failure's code), each failure's own after
  return E.fail(errors[1].code, ("releasing multi-lock: %d of %d failed: %s"):format(#errors, #self.locks,
    table.concat(parts, "; ")), errors)
end

-- Held when the calling coroutine holds every component.
function MultiLock:is_held()
  check.object(self, MultiLock, "multilock", "is_held")
  for _, l in ipairs(self.locks) do
    if not l:is_held() then return false end
  end
  return true
end

-- The grant's live holds, or nil (not held by the caller, or one component lost).
local function live_holds(self)
  local hs = holds_of(self, me())
  if not hs then return nil end
  for _, h in ipairs(hs) do if not h:live() then return nil end end
  return hs
end

-- Fencing token: the largest of the components' tokens (each component's only grows from one
-- holder to the next, so the largest does too). nil when not held.
function MultiLock:token()
  check.object(self, MultiLock, "multilock", "token")
  local hs = live_holds(self)
  if not hs then return nil end
  local t
  for _, h in ipairs(hs) do if h.token and (not t or h.token > t) then t = h.token end end
  return t
end

-- A multi-lock has no node of its own: node() is nil; nodes() lists the components' nodes
-- (component order) while held.
function MultiLock:node()
  check.object(self, MultiLock, "multilock", "node")
  return nil
end
function MultiLock:nodes()
  check.object(self, MultiLock, "multilock", "nodes")
  local hs = live_holds(self)
  if not hs then return nil end
  local out = {}
  for i, h in ipairs(hs) do out[i] = h.node end
  return out
end

-- A fenced transaction: it commits only while every component's node exists (one check each).
-- Raises when the caller does not hold the multi-lock.
function MultiLock:transaction()
  check.object(self, MultiLock, "multilock", "transaction")
  local hs = holds_of(self, me())
  if not hs then
    check.raise(("zklock: transaction of %s by a coroutine that does not hold it"):format(tostring(self)))
  end
  local nodes = {}
  for i, h in ipairs(hs) do nodes[i] = h.node end
  return require("zklock.txn").fenced(self.client, {
    nodes = nodes, what = tostring(self),
    live = function()
      for _, h in ipairs(hs) do if not h:live() then return false end end
      return true
    end,
    gone = function(i) if hs[i] then hs[i]:gone() end end,
  })
end

-- fn(state, multilock) for SUSPENDED, RECONNECTED, LOST of its components (each state once per
-- change, LOST once per grant); replaces the handler, nil removes it. -> the multi-lock
function MultiLock:on_lost(fn)
  check.object(self, MultiLock, "multilock", "on_lost")
  self._on_lost = hold.check_handler("on_lost", fn)
  return self
end

-- Withdraw a pending acquire of this multi-lock (it returns nil, "ECANCELED: ..."). -> number
function MultiLock:cancel()
  check.object(self, MultiLock, "multilock", "cancel")
  return hold.cancel(self)
end

MultiLock.__close = function(self)
  if self:is_held() then
    local ok, msg = self:release()
    if not ok then hold.log(self.client, "error", ("release at scope exit failed: %s"):format(msg)) end
  end
end

function MultiLock:__tostring()
  local parts = {}
  for _, l in ipairs(self.locks) do parts[#parts + 1] = describe(l) end
  return ("zklock.multilock(%s)"):format(table.concat(parts, ", "))
end

-- client:multilock(locks, opts) -> all-or-nothing lock over several locks of this client.
--   opts: order = "given" | "path", deadline (s, default for acquire), per_lock_timeout (s),
--         rollback = "reverse" | "given".
function Client:multilock(locks, opts)
  check.open(self, "multilock")
  return new(self, locks, opts)
end

return { MultiLock = MultiLock }
