-- zklock.semaphore: Curator's InterProcessSemaphoreV2 (leases) and InterProcessSemaphoreMutex.
--
-- Layout (shared with Curator): <path>/locks holds the internal mutex, <path>/leases the leases
-- (_c_<uuid>-lease-<seq10>). The core creates our lease(s) while holding the internal mutex, then
-- counts every lease, waiting (still holding the mutex) until the count is within max_leases.
-- acquire_many(n) takes n leases under one hold of the internal mutex: all or none, and two
-- acquire_many calls cannot deadlock each other (unlike Curator's one-at-a-time loop).
local core = require("zklock.core")
local check = require("zklock.internal.args")
local hold = require("zklock.internal.hold")
local retry = require("zklock.retry")
local Client = require("zklock.client").Client

local fail = hold.fail

-- A lease: one granted lease of a semaphore, released by any coroutine. Its hold record (no
-- owner) receives the acquisition's state events; sem:on_lost(fn) hears them as fn(state, lease).
local Lease = {}
Lease.__index = Lease

-- bind: the lease's caller records it (before a loss found at adoption is reported)
local function new_lease(sem, id, bind)
  local self = setmetatable({ semaphore = sem, client = sem.client, id = id }, Lease)
  hold.adopt(sem, id, nil, self, "lease of semaphore", sem.path, function(h)
    self._hold, self.node_path, self.token_value = h, h.node, h.token
    if bind then bind(self) end
  end)
  hold.gc_proxy(self)
  return self
end

-- release() -> true | nil, msg, code. Any coroutine may release a lease; twice raises.
function Lease:release()
  check.object(self, Lease, "lease", "release")
  local h = self._hold
  if h.released then
    -- an on_lost handler told of the loss by this lease's own release: not a second release
    if h.releasing then return hold.lost_before_release(h) end
    check.raise(("zklock: lease %s of semaphore %s already released")
      :format(tostring(self.node_path), check.short(self.semaphore.path)))
  end
  return hold.release(h)
end

Lease.__close = function(self)
  if not self._hold.released then
    local ok, msg = self:release()
    if not ok then hold.log(self.client, "error", ("lease release at scope exit failed: %s"):format(msg)) end
  end
end

-- Held (not released, not lost)? Like a lock's, these drive the client first, so a thread
-- that was busy past the session timeout does not see a lost lease as held.
function Lease:is_held()
  check.object(self, Lease, "lease", "is_held")
  return self._hold:live()
end
-- fn("REVOKE", lease, node) when another process asks this lease's holder to give it back (nil: stop).
-- -> the lease
function Lease:on_revoke(fn)
  check.object(self, Lease, "lease", "on_revoke")
  hold.on_revoke_hold(self._hold, fn)
  return self
end
-- fn(state, lease) for this lease's SUSPENDED, RECONNECTED, LOST; replaces the semaphore's
-- handler for this lease (nil: the semaphore's again). -> the lease
function Lease:on_lost(fn)
  check.object(self, Lease, "lease", "on_lost")
  self._hold.on_lost = hold.check_handler("on_lost", fn)
  return self
end
function Lease:token()
  check.object(self, Lease, "lease", "token")
  if self._hold:live() then return self.token_value end
  return nil
end
function Lease:node()
  check.object(self, Lease, "lease", "node")
  if self._hold:live() then return self.node_path end
  return nil
end

-- A fenced transaction: it commits only while this lease is held (its first op checks the
-- lease's node). Raises after release.
function Lease:transaction()
  check.object(self, Lease, "lease", "transaction")
  if self._hold.released then
    check.raise(("zklock: transaction of lease %s, which was released"):format(tostring(self.node_path)))
  end
  return require("zklock.txn").fenced(self.client, self._hold:guard())
end

function Lease:__gc() hold.collected_hold(self._hold) end

function Lease:__tostring()
  return ("zklock.lease(%s)"):format(tostring(self.node_path))
end

local Semaphore = {}
Semaphore.__index = Semaphore

local function max_int(v)
  return type(v) == "number" and v == v and v >= 1 and v <= 2147483647 and math.floor(v) == v
end

local function new(client, path, max_leases, opts, fname)
  check.path(fname, 1, path)
  if not max_int(max_leases) then
    check.argerror(fname, 2, "max_leases: expected an integer >= 1, got " .. check.describe(max_leases))
  end
  opts = check.options(fname, 3, opts, { acl = check.acl_option, metric = check.is.string,
                                         max_hold = check.is.positive })
  local self = setmetatable({ client = client, path = path, max_leases = max_leases, kind = "semaphore",
                              metric = opts.metric }, Semaphore)
  hold.init(self, client, opts.acl)
  hold.set_max_hold(self, opts.max_hold)
  return self
end

-- acquire_many(n, timeout, { retry = policy }) -> array of n leases | nil, msg, code (all or none)
-- bind (internal: the semaphore mutex): bind(lease) as each lease is made, before a loss found
-- at adoption is reported to the handlers.
function Semaphore:acquire_many(n, timeout, opts, bind)
  check.object(self, Semaphore, "semaphore", "acquire_many")
  local client = self.client
  hold.check_open(client, "acquire_many")
  if not max_int(n) or n > self.max_leases then
    check.argerror("acquire_many", 1, ("count: expected an integer from 1 to %d (max_leases), got %s")
      :format(self.max_leases, check.describe(n)))
  end
  check.timeout("acquire_many", 2, timeout)
  if opts == nil then return self:_acquire_once(n, timeout, bind) end -- no retry policy: no closure per call
  local _, max_hold = retry.option("acquire_many", 3, opts)
  local leases, msg, code = retry.acquire(client, "acquire_many", 3, timeout, opts,
    function(left) return self:_acquire_once(n, left, bind) end)
  if leases and max_hold then
    for _, l in ipairs(leases) do hold.bound(l._hold, max_hold) end
  end
  return leases, msg, code
end

function Semaphore:_acquire_once(n, timeout, bind)
  local client = self.client
  hold.check_open(client, "acquire_many")
  local ms = check.timeout("acquire_many", 2, timeout)
  local id, msg, code = hold.start_semaphore(self, self.max_leases, n, ms)
  if not id then return nil, msg, code end
  local w = hold.await(self, id)
  if not w.done then return fail(core.errno.ECLOSED, "the client was closed while acquiring " .. self.path) end
  if w.type ~= core.EV_ACQUIRED then
    local st = w.status
    if st == core.errno.ETIMEDOUT then
      if ms == 0 then
        return fail(st, hold.try_once_message(client, "semaphore " .. self.path,
          ("semaphore %s has no free lease"):format(self.path)))
      end
      return fail(st, ("timed out after %g s waiting for %d lease(s) of semaphore %s"):format(timeout, n, self.path))
    end
    return fail(st, ("acquiring semaphore %s: %s%s"):format(check.short(self.path), core.strerror(st),
      hold.explain(client, st)))
  end
  local leases, lost = {}, false
  for _, lid in ipairs(hold.lease_ids(self, id)) do
    local lease = new_lease(self, lid, bind)
    leases[#leases + 1] = lease
    lost = lost or lease._hold.lost ~= nil
  end
  if lost then -- the session ended as the leases were granted (on_lost heard LOST): none is held
    for _, lease in ipairs(leases) do -- lost ones answer ELOST; a handler may have released one
      if not lease._hold.released then hold.release(lease._hold) end
    end
    return fail(core.errno.ELOST, ("%d lease(s) of semaphore %s were granted as the session ended: nothing is held")
      :format(n, self.path))
  end
  return leases
end

-- acquire(timeout, { retry = policy }) -> lease | nil, msg, code
function Semaphore:acquire(timeout, opts)
  check.object(self, Semaphore, "semaphore", "acquire")
  hold.check_open(self.client, "acquire")
  check.timeout("acquire", 1, timeout)
  retry.option("acquire", 2, opts)
  local leases, msg, code = self:acquire_many(1, timeout, opts)
  if not leases then return nil, msg, code end
  return leases[1]
end

-- Withdraw every pending acquire (they return nil, "ECANCELED: ..."). -> number withdrawn
function Semaphore:cancel()
  check.object(self, Semaphore, "semaphore", "cancel")
  return hold.cancel(self)
end

-- fn(state, lease) with state "SUSPENDED" | "RECONNECTED" | "LOST" for every lease.
Semaphore.on_lost = hold.on_lost
-- fn("REVOKE", lease, node) for a revocation request on any lease of this semaphore (current and future).
Semaphore.on_revoke = hold.on_revoke

-- Lease holders (and leases being counted): { { path, node, sequence, data }, ... } by sequence.
function Semaphore:participants()
  local client = self.client
  hold.check_open(client, "participants")
  local dir = self.path .. "/leases"
  local asked = hold.adopted()
  local names, msg, code = client:children(dir)
  if not names then
    if code == "ZNONODE" then -- the directory is gone (a reaped container): so is every node in it
      hold.check_listing(self, dir, {}, asked)
      return {}
    end
    return nil, msg, code
  end
  hold.check_listing(self, dir, names, asked) -- a lease whose node is not listed is lost
  local out = {}
  for _, name in ipairs(names) do
    local data = client:get(dir .. "/" .. name)
    if data then
      out[#out + 1] = { path = dir .. "/" .. name, node = name,
                        sequence = tonumber(name:match("lease%-(%-?%d+)$")), data = data }
    end
  end
  table.sort(out, function(a, b)
    if a.sequence and b.sequence and a.sequence ~= b.sequence then return a.sequence < b.sequence end
    return a.node < b.node
  end)
  return out
end

function Semaphore:__tostring() return ("zklock.semaphore(%s, %d)"):format(self.path, self.max_leases) end

-- Semaphore mutex: one lease, not reentrant, released by any coroutine.
local SemaphoreMutex = {}
SemaphoreMutex.__index = SemaphoreMutex

-- The lease is this mutex's as soon as it is made: an on_lost handler told of a loss found at
-- adoption (the grant lost as it arrived) may release() it, which answers ELOST as a mutex's
-- does; the acquire then fails ELOST and nothing is held.
function SemaphoreMutex:acquire(timeout, opts)
  check.object(self, SemaphoreMutex, "semaphore_mutex", "acquire")
  local sem = self.semaphore
  hold.check_open(sem.client, "acquire")
  check.timeout("acquire", 1, timeout)
  retry.option("acquire", 2, opts)
  local prev, made = self._lease, nil
  local leases, msg, code = sem:acquire_many(1, timeout, opts, function(lease)
    made = lease
    self._lease = lease
  end)
  if not leases then
    if made and (self._lease == made or self._lease == nil) then self._lease = prev end
    return nil, msg, code
  end
  self._lease = leases[1]
  return self
end

function SemaphoreMutex:release()
  check.object(self, SemaphoreMutex, "semaphore_mutex", "release")
  local lease = self._lease
  if not lease then
    check.raise(("zklock: release of semaphore mutex %s, which is not held"):format(self.path))
  end
  self._lease = nil
  return lease:release()
end

SemaphoreMutex.__close = function(self)
  if self._lease then
    local ok, msg = self:release()
    if not ok then hold.log(self.client, "error", ("release at scope exit failed: %s"):format(msg)) end
  end
end

function SemaphoreMutex:is_held()
  check.object(self, SemaphoreMutex, "semaphore_mutex", "is_held")
  return self._lease ~= nil and self._lease:is_held()
end
function SemaphoreMutex:token()
  check.object(self, SemaphoreMutex, "semaphore_mutex", "token")
  return self._lease and self._lease:token() or nil
end
function SemaphoreMutex:node()
  check.object(self, SemaphoreMutex, "semaphore_mutex", "node")
  return self._lease and self._lease:node() or nil
end
function SemaphoreMutex:cancel()
  check.object(self, SemaphoreMutex, "semaphore_mutex", "cancel")
  return self.semaphore:cancel()
end
function SemaphoreMutex:transaction()
  check.object(self, SemaphoreMutex, "semaphore_mutex", "transaction")
  if not self._lease then
    check.raise(("zklock: transaction of semaphore mutex %s, which is not held"):format(self.path))
  end
  return self._lease:transaction()
end
function SemaphoreMutex:participants() return self.semaphore:participants() end
-- fn(state, semaphore_mutex); replaces the handler (nil removes it). -> the semaphore mutex
function SemaphoreMutex:on_lost(fn)
  check.object(self, SemaphoreMutex, "semaphore_mutex", "on_lost")
  hold.check_handler("on_lost", fn)
  local this = self
  hold.on_lost(self.semaphore, fn and function(state, _, why) return fn(state, this, why) end or nil)
  return self
end
-- fn("REVOKE", semaphore_mutex, node) when another process asks the holder to let go (nil: stop).
-- -> the semaphore mutex
function SemaphoreMutex:on_revoke(fn)
  check.object(self, SemaphoreMutex, "semaphore_mutex", "on_revoke")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_revoke", 1, "expected a function or nil, got " .. check.describe(fn))
  end
  local this = self
  hold.on_revoke(self.semaphore, fn and function(event, _, node) return fn(event, this, node) end or nil)
  return self
end
function SemaphoreMutex:__tostring() return ("zklock.semaphore_mutex(%s)"):format(self.path) end

local function new_mutex(client, path, opts)
  check.path("semaphore_mutex", 1, path)
  check.options("semaphore_mutex", 2, opts, { acl = check.acl_option, metric = check.is.string,
                                              max_hold = check.is.positive })
  local sem = new(client, path, 1, opts, "semaphore_mutex")
  return setmetatable({ client = client, path = path, semaphore = sem, kind = "semaphore mutex" }, SemaphoreMutex)
end

-- A multi-lock took the lease of semaphore mutex `self` as core acquisition `id`.
local function adopt_mutex(self, id)
  new_lease(self.semaphore, id, function(lease) self._lease = lease end)
end

-- client:semaphore(path, max_leases, { acl = }) -> Curator InterProcessSemaphoreV2 (leases).
function Client:semaphore(path, max_leases, opts)
  check.open(self, "semaphore")
  return new(self, path, max_leases, opts, "semaphore")
end

-- client:semaphore_mutex(path, { acl = }) -> Curator InterProcessSemaphoreMutex: not reentrant,
-- releasable from any coroutine.
function Client:semaphore_mutex(path, opts)
  check.open(self, "semaphore_mutex")
  return new_mutex(self, path, opts)
end

-- The hold record of a lease (for the multi-lock).
local function hold_of(lease) return lease._hold end

-- The hold record of a semaphore mutex's current lease, or nil (for the multi-lock).
local function mutex_hold(m)
  local lease = m._lease
  return lease and lease._hold
end

return { Semaphore = Semaphore, SemaphoreMutex = SemaphoreMutex, Lease = Lease, adopt_mutex = adopt_mutex,
         mutex_hold = mutex_hold, hold_of = hold_of }
