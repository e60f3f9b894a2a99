-- zklock.lock: lock objects (the mutex, and the two sides of a read-write lock).
--
-- A lock object is reentrant per coroutine: the coroutine (or main thread) that holds it may
-- acquire it again at no cost and must release it as many times. Another coroutine using the
-- same object contends like another process, with its own queue node.
local core = require("zklock.core")
local check = require("zklock.check")
local retry = require("zklock.retry")

local Lock = {}
Lock.__index = Lock

local running = coroutine.running

local function warn_(msg)
  if warn then warn("zklock: " .. msg) end
end

local function fail(code, text)
  local name = core.errname(code)
  return nil, ("%s: %s"):format(name, text), name
end

-- LuaJIT (Lua 5.1) runs no __gc for tables: a userdata proxy owned by the object runs it instead.
local function gc_proxy(obj)
  if newproxy then
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = function() local mt = getmetatable(obj); if mt and mt.__gc then mt.__gc(obj) end end
    rawset(obj, "_gc_proxy", proxy)
  end
end

-- The error of releasing what the session took with it; `what` names the lock or lease.
local function lost_before_release(what)
  return fail(core.errno.ELOST, what .. " was lost with the session before release")
end

-- Deletes the node of `hold` (a lock hold or a lease, already unlisted from the client) and
-- waits for the reply. A loss the hold has not heard of yet is reported to it first: the LOST
-- event may still be queued, and the hold no longer receives it. hold.lock:_what() names it in
-- an error (built only then: release is on every hold's path). -> true | nil, msg, code
local function release_hold(client, hold)
  local ok, msg, code = client._c:release(hold.id)
  local status
  if ok then
    local w = client:_await(client:_waiter(hold.id))
    if not w.done or w.status == 0 then return true end
    status = w.status
  elseif code == "ELOST" then
    status = core.errno.ELOST
  else
    return nil, msg, code
  end
  if status == core.errno.ELOST then
    if not hold.lost then
      hold.releasing = true -- a release called from the on_lost handler answers ELOST
      hold.lock:_state_changed(hold, "LOST")
      hold.releasing = nil
    end
    return lost_before_release(hold.lock:_what())
  end
  return fail(status, ("releasing %s: %s"):format(hold.lock:_what(), core.strerror(status)))
end

local KIND_NAMES = { [core.MUTEX] = "mutex", [core.READ] = "read lock", [core.WRITE] = "write lock" }

local function new(client, recipe, path, fname, opts)
  check.path(fname, 1, path)
  opts = check.options(fname, 2, opts, { acl = check.acl_option })
  local self = setmetatable({
    _acl = client:_acl_id(opts.acl),
    client = client,
    path = path,
    recipe = recipe,
    kind = KIND_NAMES[recipe],
    _holds = {},     -- coroutine -> hold { id, count, token, node, lost, suspended }
    _pending = {},   -- op id -> waiter, while acquiring
    _on_lost = nil,
  }, Lock)
  gc_proxy(self)
  return self
end

-- The owner key of the caller: its coroutine, or a fixed key for the main thread (LuaJIT's
-- coroutine.running() returns nil there).
local MAIN = setmetatable({}, { __tostring = function() return "main thread" end })
local function me()
  return running() or MAIN
end

-- acquire(timeout, { retry = policy }) -> self | nil, msg, code
--   timeout: seconds; nil = wait forever; 0 = try once. retry: see zklock.retry.
function Lock:acquire(timeout, opts)
  local client = self.client
  client:_check_open("acquire")
  check.timeout("acquire", 1, timeout)
  return retry.acquire(client, "acquire", 2, timeout, opts, function(left) return self:_acquire_once(left) end)
end

function Lock:_acquire_once(timeout)
  local client = self.client
  client:_check_open("acquire")
  local ms = check.timeout("acquire", 1, timeout)
  client:_refresh() -- a hold lost while nobody pumped must not be re-entered
  local co = me()
  local hold = self._holds[co]
  if hold then
    if hold.lost then
      return fail(core.errno.ELOST, ("%s %s was lost with the session; release it before acquiring again"):format(self.kind, self.path))
    end
    hold.count = hold.count + 1
    return self
  end
  local id, msg, code
  local rw = self._rw
  if rw and self.recipe == core.WRITE and rw.read:is_held() then
    return fail(core.errno.EDEADLK, ("upgrading the read lock of %s to its write lock would deadlock; "
      .. "release the read lock first"):format(self.path))
  elseif rw and self.recipe == core.READ and rw.write:is_held() then
    -- downgrade: granted at once, on a read node that keeps the writer's place in the queue
    id, msg, code = client._c:downgrade(rw.write._holds[co].id)
  else
    id, msg, code = client._c:acquire(self.recipe, self.path, ms, self._acl)
  end
  if not id then return nil, msg, code end
  local w = client:_waiter(id, self)
  self._pending[id] = w
  client:_await(w)
  self._pending[id] = nil
  if not w.done then
    return fail(core.errno.ECLOSED, "the client was closed while acquiring " .. self.path)
  end
  if w.type ~= core.EV_ACQUIRED then
    local st = w.status
    if st == core.errno.ETIMEDOUT then
      if ms == 0 then return fail(st, ("%s %s is held by another owner"):format(self.kind, self.path)) end
      return fail(st, ("timed out after %g s waiting for %s %s"):format(timeout, self.kind, self.path))
    end
    return fail(st, ("acquiring %s %s: %s"):format(self.kind, self.path, core.strerror(st)))
  end
  self:_adopt(id, co)
  return self
end

-- Record core acquisition `id` (just granted) as held by coroutine `co`.
function Lock:_adopt(id, co)
  local node, token = self.client._c:info(id)
  local hold = { id = id, count = 1, token = token, node = node, lock = self, owner = co }
  self._holds[co] = hold
  self.client._holds[id] = hold
  return hold
end

-- release() -> true | nil, msg, code. Raises if the calling coroutine does not hold the lock.
-- Waits until the queue node is deleted (retried across connection loss while the session lives).
function Lock:release()
  local co = me()
  local hold = self._holds[co]
  if not hold then
    error(("zklock: release of %s %s by a coroutine that does not hold it"):format(self.kind, self.path), 2)
  end
  hold.count = hold.count - 1
  if hold.count > 0 then return true end
  self._holds[co] = nil
  local client = self.client
  client._holds[hold.id] = nil
  -- after unlisting: a loss this refresh finds reaches the hold once, from release_hold, and an
  -- on_lost handler cannot release it a second time under this call
  client:_refresh()
  if hold.closed or client.state == "CLOSED" then
    return true -- the session was closed: every node of ours went with it
  end
  return release_hold(client, hold)
end

function Lock:_what() return self.kind .. " " .. self.path end

Lock.__close = function(self, err)
  if self._holds[me()] then
    local ok, msg = self:release()
    if not ok then warn_(("release at scope exit failed: %s"):format(msg)) end
  end
end

-- Held by the calling coroutine (and not lost)?
function Lock:is_held()
  self.client:_refresh()
  local hold = self._holds[me()]
  return hold ~= nil and not hold.lost and not hold.closed
end

-- Fencing token of the calling coroutine's hold: the czxid of its queue node. Tokens of
-- successive holders of one lock path only grow.
function Lock:token()
  self.client:_refresh()
  local hold = self._holds[me()]
  if hold and not hold.lost and not hold.closed then return hold.token end
  return nil
end

-- Full path of the calling coroutine's queue node, while held.
function Lock:node()
  self.client:_refresh()
  local hold = self._holds[me()]
  if hold and not hold.lost and not hold.closed then return hold.node end
  return nil
end

-- Withdraw every pending acquire of this object (they return nil, "ECANCELED: ...").
-- Returns the number withdrawn. (Shared with semaphores.)
local function cancel_pending(self)
  local n = 0
  for id in pairs(self._pending) do
    if self.client._c:cancel(id) then n = n + 1 end
  end
  if n > 0 then self.client:_pump(0) end
  return n
end
Lock.cancel = cancel_pending

-- fn(state, lock) with state "SUSPENDED" | "RECONNECTED" | "LOST" for every hold of this object.
local function set_on_lost(self, fn)
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_lost", 1, "expected a function or nil, got " .. check.describe(fn))
  end
  self._on_lost = fn
end
Lock.on_lost = set_on_lost

function Lock:_state_changed(hold, state)
  if state == "LOST" then hold.lost = true
  elseif state == "SUSPENDED" then hold.suspended = true
  elseif state == "RECONNECTED" then hold.suspended = false end
  if not self._on_lost and state == "LOST" then
    warn_(("%s %s was lost with the session"):format(self.kind, self.path))
  end
  if self._on_lost then
    local ok, err = pcall(self._on_lost, state, self)
    if not ok then warn_("on_lost handler failed: " .. tostring(err)) end
  end
end

-- Ordered queue: { { path=, node=, sequence=, data= }, ... }, holder(s) first.
function Lock:participants()
  local client = self.client
  client:_check_open("participants")
  local names, msg, code = client:children(self.path)
  if not names then
    if code == "ZNONODE" then return {} end
    return nil, msg, code
  end
  local sorted = core.sort(names, self.recipe)
  local out = {}
  for _, name in ipairs(sorted) do
    local full = self.path .. "/" .. name
    local data = client:get(full) -- nil if it went away meanwhile
    local key = core.sort_key(name, self.recipe)
    out[#out + 1] = { path = full, node = name, sequence = tonumber(key), data = data }
  end
  -- drop nodes that vanished while we read them
  local live = {}
  for _, p in ipairs(out) do if p.data then live[#live + 1] = p end end
  return live
end

function Lock:__tostring()
  return ("zklock.%s(%s)"):format(self.kind:gsub(" ", "_"), self.path)
end

-- A lock object collected while held: give the nodes back in the background, never blocking.
function Lock:__gc()
  for _, hold in pairs(self._holds) do
    if not hold.closed and self.client.state ~= "CLOSED" then
      warn_(("%s %s collected while held; releasing in the background"):format(self.kind, self.path))
      pcall(self.client._c.abandon, self.client._c, hold.id)
    end
  end
end

-- client:rwlock(path): Curator InterProcessReadWriteLock. Two lock objects on one path.
local function new_rw(client, path, opts)
  check.path("rwlock", 1, path)
  opts = check.options("rwlock", 2, opts, { acl = check.acl_option })
  local rw = { path = path }
  rw.read = new(client, core.READ, path, "rwlock", opts)
  rw.write = new(client, core.WRITE, path, "rwlock", opts)
  rw.read._rw, rw.write._rw = rw, rw
  return rw
end

return { new = new, new_rw = new_rw, Lock = Lock, fail = fail, warn = warn_, MAIN = MAIN, me = me,
         gc_proxy = gc_proxy, release_hold = release_hold,
         lost_before_release = lost_before_release, cancel_pending = cancel_pending, set_on_lost = set_on_lost }
