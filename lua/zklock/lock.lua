-- zklock.lock: lock objects (the mutex, and the two sides of a read-write lock).
--
-- A lock object is reentrant per coroutine: the coroutine (or main thread) that holds it may
-- acquire it again at no cost and must release it as many times. Another coroutine using the
-- same object contends like another process, with its own queue node.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local retry = require("zklock.retry")
local hold = require("zklock.internal.hold")
local R = require("zklock.internal.recipe")
local Client = require("zklock.client").Client

local Lock = {}
Lock.__index = Lock

local fail, me = hold.fail, hold.me

-- Record core acquisition `id` (just granted) of lock `l` as held by coroutine `co`.
local function adopt(l, id, co)
  return hold.adopt(l, id, co, l, l.kind, l.path)
end

local KIND_NAMES = { [core.MUTEX] = "mutex", [core.READ] = "read lock", [core.WRITE] = "write lock",
                     [core.LATCH] = "leader latch" } -- the latch: the election engine's queue (zklock.leader)

-- the data option: a string (its size, which needs the client, is checked by hold.check_data)
local DATA_OPTION = check.is.string

-- rw: the read-write lock this object is a side of (nil for a mutex)
local function new(client, recipe, path, fname, opts, rw)
  check.path(fname, 1, path)
  opts = check.options(fname, 2, opts, { acl = check.acl_option, data = DATA_OPTION, metric = check.is.string,
                                         max_hold = check.is.positive })
  hold.check_data(client, fname, 2, path, opts.data)
  local self = setmetatable({
    client = client,
    path = path,
    recipe = recipe,
    kind = KIND_NAMES[recipe],
    metric = opts.metric, -- the `name` label of its metrics (zklock.metrics)
    _rw = rw,
  }, Lock)
  hold.init(self, client, opts.acl, opts.data)
  hold.set_max_hold(self, opts.max_hold)
  hold.gc_proxy(self)
  return self
end

-- acquire(timeout, { retry = policy, max_hold = seconds }) -> self | nil, msg, code
--   timeout: seconds; nil = wait forever; 0 = try once. retry: see zklock.retry. max_hold: this
--   grant is lost (on_lost: "LOST", lock, "max_hold") and its node deleted once held that long
--   (a reentrant acquire keeps the bound of the first).
function Lock:acquire(timeout, opts)
  check.object(self, Lock, "lock", "acquire")
  local client = self.client
  hold.check_open(client, "acquire")
  local ms = check.timeout("acquire", 1, timeout)
  -- no retry policy: one attempt with what was just checked (no closure, no second check)
  if opts == nil then return self:_attempt(timeout, ms) end
  local _, max_hold = retry.option("acquire", 2, opts)
  local r, msg, code = retry.acquire(client, "acquire", 2, timeout, opts,
    function(left) return self:_acquire_once(left) end)
  if r and max_hold then
    local h = hold.of(self, me())
    if h and h.count == 1 then hold.bound(h, max_hold) end
  end
  return r, msg, code
end

-- One attempt of a retried acquire (the client may have been closed while it slept).
function Lock:_acquire_once(timeout)
  hold.check_open(self.client, "acquire")
  return self:_attempt(timeout, check.timeout("acquire", 1, timeout))
end

-- One attempt; timeout: seconds as given (for messages), ms: the same checked, for the core.
function Lock:_attempt(timeout, ms)
  local client = self.client
  hold.refresh(client) -- a hold lost while nobody pumped must not be re-entered
  local co = me()
  local h = hold.of(self, co)
  if h then
    if h.lost then
      return fail(core.errno.ELOST, ("%s %s was lost %s; release it before acquiring again")
        :format(self.kind, self.path, h:lost_how()))
    end
    h.count = h.count + 1
    return self
  end
  local id, msg, code
  local a = R.owner(client) -- a coroutine an adapter owns: the acquire call parks its wait too
  local rw = self._rw
  if rw and self.recipe == core.WRITE and rw.read:is_held() then
    return fail(core.errno.EDEADLK, ("upgrading the read lock of %s to its write lock would deadlock; "
      .. "release the read lock first"):format(self.path))
  elseif rw and self.recipe == core.READ and rw.write:is_held() then
    -- downgrade: granted at once, on a read node that keeps the writer's place in the queue
    id, msg, code = hold.downgrade(self, hold.of(rw.write, co))
  else
    id, msg, code = hold.start(self, self.recipe, self.path, ms, a ~= nil)
  end
  if not id then return nil, msg, code end
  local w = hold.await(self, id, msg == true, a or false)
  if not w.done then
    return fail(core.errno.ECLOSED, "the client was closed while acquiring " .. self.path)
  end
  if w.type ~= core.EV_ACQUIRED then
    local st = w.status
    if st == core.errno.ETIMEDOUT then
      if ms == 0 then
        return fail(st, hold.try_once_message(client, ("%s %s"):format(self.kind, self.path),
          ("%s %s is held by another owner"):format(self.kind, self.path)))
      end
      return fail(st, ("timed out after %g s waiting for %s %s"):format(timeout, self.kind, self.path))
    end
    return fail(st, ("acquiring %s %s: %s%s"):format(self.kind, self.path, core.strerror(st), hold.explain(client, st)))
  end
  local got = adopt(self, id, co)
  if got.lost then -- the session ended as the grant arrived (on_lost heard LOST): nothing is held
    if not got.released then hold.release(got) end -- forgets the core's lost grant (ELOST)
    return fail(core.errno.ELOST, ("%s %s was granted as the session ended: nothing is held")
      :format(self.kind, self.path))
  end
  return self
end

-- release() -> true | nil, msg, code. Raises if the calling coroutine does not hold the lock.
-- Waits until the queue node is deleted (retried across connection loss while the session lives).
function Lock:release()
  check.object(self, Lock, "lock", "release")
  local h = hold.of(self, me())
  if not h then
    check.raise(("zklock: release of %s %s by a coroutine that does not hold it"):format(self.kind, self.path))
  end
  h.count = h.count - 1
  if h.count > 0 then return true end
  return hold.release(h)
end

Lock.__close = function(self)
  if hold.of(self, me()) then
    local ok, msg = self:release()
    if not ok then
      hold.log(self.client, "error", ("release of %s %s at scope exit failed: %s"):format(self.kind, self.path, msg))
    end
  end
end

-- Held by the calling coroutine (and not lost)?
function Lock:is_held()
  check.object(self, Lock, "lock", "is_held")
  local h = hold.of(self, me())
  return h ~= nil and h:live()
end

-- Fencing token of the calling coroutine's hold: the czxid of its queue node. Tokens of
-- successive holders of one lock path only grow. nil when not held (also once lost or closed).
function Lock:token()
  check.object(self, Lock, "lock", "token")
  local h = hold.of(self, me())
  if h and h:live() then return h.token end
  return nil
end

-- Full path of the calling coroutine's queue node, while held.
function Lock:node()
  check.object(self, Lock, "lock", "node")
  local h = hold.of(self, me())
  if h and h:live() then return h.node end
  return nil
end

-- A fenced transaction: it commits only while the calling coroutine still holds this lock (its
-- first op checks the holder's node). Raises if the caller does not hold it.
function Lock:transaction()
  check.object(self, Lock, "lock", "transaction")
  local h = hold.of(self, me())
  if not h then
    check.raise(("zklock: transaction of %s %s by a coroutine that does not hold it"):format(self.kind, self.path))
  end
  return require("zklock.txn").fenced(self.client, h:guard())
end

-- Withdraw every pending acquire of this object (they return nil, "ECANCELED: ...").
-- Returns the number withdrawn.
function Lock:cancel()
  check.object(self, Lock, "lock", "cancel")
  return hold.cancel(self)
end

-- fn(state, lock) with state "SUSPENDED" | "RECONNECTED" | "LOST" for every hold of this object;
-- replaces the handler (nil removes it). -> the lock
Lock.on_lost = hold.on_lost

-- fn("REVOKE", lock, node) when another process asks the holder to let go (Curator's revocation:
-- client:revoke(node) or Revoker.attemptRevoke); nil stops listening. -> the lock. See hold.on_revoke.
Lock.on_revoke = hold.on_revoke

-- Ordered queue: { { path=, node=, sequence=, data= }, ... }, holder(s) first.
function Lock:participants()
  local client = self.client
  hold.check_open(client, "participants")
  local asked = hold.adopted()
  local names, msg, code = client:children(self.path)
  if not names then
    if code == "ZNONODE" then -- the directory is gone (a reaped container): so is every node in it
      hold.check_listing(self, self.path, {}, asked)
      return {}
    end
    return nil, msg, code
  end
  hold.check_listing(self, self.path, names, asked) -- a holder whose node is not listed lost it
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
Lock.__gc = hold.collected

-- client:rwlock(path): Curator InterProcessReadWriteLock. Two lock objects on one path.
local function new_rw(client, path, opts)
  check.path("rwlock", 1, path)
  opts = check.options("rwlock", 2, opts, { acl = check.acl_option, data = DATA_OPTION, metric = check.is.string,
                                            max_hold = check.is.positive })
  hold.check_data(client, "rwlock", 2, path, opts.data)
  local rw = { path = path }
  rw.read = new(client, core.READ, path, "rwlock", opts, rw)
  rw.write = new(client, core.WRITE, path, "rwlock", opts, rw)
  return rw
end

-- client:mutex(path, { acl =, data = }) -> Curator InterProcessMutex-compatible fair reentrant lock.
function Client:mutex(path, opts)
  check.open(self, "mutex")
  return new(self, core.MUTEX, path, "mutex", opts)
end

-- client:rwlock(path, { acl =, data = }) -> { read = lock, write = lock, path = path }
-- (Curator InterProcessReadWriteLock: readers share, writers exclude, FIFO across both).
function Client:rwlock(path, opts)
  check.open(self, "rwlock")
  return new_rw(self, path, opts)
end

-- new(client, recipe, path, fname, opts): a lock object queueing with any core recipe; the
-- election engine (zklock.leader) queues a latch with core.LATCH through it.
return { Lock = Lock, adopt = adopt, new = new }
