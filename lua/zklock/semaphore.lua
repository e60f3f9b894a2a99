-- zklock.semaphore: Curator's InterProcessSemaphoreV2 (leases) and InterProcessSemaphoreMutex.
--
-- Layout (shared with Curator): <path>/locks holds the internal mutex, <path>/leases the leases
-- (_c_<uuid>-lease-<seq10>). The core creates our lease(s) while holding the internal mutex, then
-- counts every lease, waiting (still holding the mutex) until the count is within max_leases.
-- acquire_many(n) takes n leases under one hold of the internal mutex: all or none, and two
-- acquire_many calls cannot deadlock each other (unlike Curator's one-at-a-time loop).
local core = require("zklock.core")
local check = require("zklock.check")
local lockmod = require("zklock.lock")
local retry = require("zklock.retry")

local fail, warn_ = lockmod.fail, lockmod.warn

local Lease = {}
Lease.__index = Lease

local function new_lease(sem, id)
  local c = sem.client._c
  local node, token = c:info(id)
  local lease = setmetatable({ semaphore = sem, client = sem.client, id = id, node_path = node or nil,
                               token_value = token }, Lease)
  lease.lock = lease -- the client's state events go to hold.lock:_state_changed
  sem.client._holds[id] = lease
  lockmod.gc_proxy(lease)
  return lease
end

-- release() -> true | nil, msg, code. Any coroutine may release a lease; twice raises.
function Lease:release()
  if self.released then
    -- an on_lost handler told of the loss by this lease's own release: not a second release
    if self.releasing then return lockmod.lost_before_release(self:_what()) end
    error(("zklock: lease %s of semaphore %s already released"):format(tostring(self.node_path), self.semaphore.path), 2)
  end
  self.released = true
  local client = self.client
  client._holds[self.id] = nil
  -- after unlisting: a loss this refresh finds reaches the lease once, from release_hold
  client:_refresh()
  if client.state == "CLOSED" then return true end
  return lockmod.release_hold(client, self)
end

function Lease:_what() return "lease of semaphore " .. self.semaphore.path end

Lease.__close = function(self)
  if not self.released then
    local ok, msg = self:release()
    if not ok then warn_(("lease release at scope exit failed: %s"):format(msg)) end
  end
end

-- Held (not released, not lost)? Like a lock's, these drive the client first, so a thread
-- that was busy past the session timeout does not see a lost lease as held.
function Lease:is_held()
  self.client:_refresh()
  return not self.released and not self.lost and self.client.state ~= "CLOSED"
end
function Lease:token() if self:is_held() then return self.token_value end return nil end
function Lease:node() if self:is_held() then return self.node_path end return nil end

function Lease:_state_changed(_, state)
  if state == "LOST" then self.lost = true end
  self.semaphore:_notify(state, self)
end

function Lease:__gc()
  if not self.released and self.client.state ~= "CLOSED" then
    warn_(("lease of semaphore %s collected while held; releasing in the background"):format(self.semaphore.path))
    pcall(self.client._c.abandon, self.client._c, self.id)
  end
end

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
    check.argerror(fname, 2, "max_leases: expected an integer >= 1, got " .. check.describe(max_leases), 2)
  end
  opts = check.options(fname, 3, opts, { acl = check.acl_option })
  return setmetatable({ client = client, path = path, max_leases = max_leases, kind = "semaphore",
                        _pending = {}, _acl = client:_acl_id(opts.acl) }, Semaphore)
end

-- acquire_many(n, timeout, { retry = policy }) -> array of n leases | nil, msg, code (all or none)
function Semaphore:acquire_many(n, timeout, opts)
  local client = self.client
  client:_check_open("acquire_many")
  if not max_int(n) or n > self.max_leases then
    check.argerror("acquire_many", 1, ("count: expected an integer from 1 to %d (max_leases), got %s")
      :format(self.max_leases, check.describe(n)))
  end
  check.timeout("acquire_many", 2, timeout)
  return retry.acquire(client, "acquire_many", 3, timeout, opts, function(left) return self:_acquire_once(n, left) end)
end

function Semaphore:_acquire_once(n, timeout)
  local client = self.client
  client:_check_open("acquire_many")
  local ms = check.timeout("acquire_many", 2, timeout)
  local id, msg, code = client._c:semaphore(self.path, self.max_leases, n, ms, self._acl)
  if not id then return nil, msg, code end
  local w = client:_waiter(id, self)
  self._pending[id] = w
  client:_await(w)
  self._pending[id] = nil
  if not w.done then return fail(core.errno.ECLOSED, "the client was closed while acquiring " .. self.path) end
  if w.type ~= core.EV_ACQUIRED then
    local st = w.status
    if st == core.errno.ETIMEDOUT then
      if ms == 0 then return fail(st, ("semaphore %s has no free lease"):format(self.path)) end
      return fail(st, ("timed out after %g s waiting for %d lease(s) of semaphore %s"):format(timeout, n, self.path))
    end
    return fail(st, ("acquiring semaphore %s: %s"):format(self.path, core.strerror(st)))
  end
  local leases = {}
  for _, lid in ipairs(client._c:lease_ids(id)) do leases[#leases + 1] = new_lease(self, lid) end
  return leases
end

-- acquire(timeout, { retry = policy }) -> lease | nil, msg, code
function Semaphore:acquire(timeout, opts)
  self.client:_check_open("acquire")
  check.timeout("acquire", 1, timeout)
  retry.option("acquire", 2, opts)
  local leases, msg, code = self:acquire_many(1, timeout, opts)
  if not leases then return nil, msg, code end
  return leases[1]
end

Semaphore.cancel = lockmod.cancel_pending
Semaphore.on_lost = lockmod.set_on_lost

function Semaphore:_notify(state, lease)
  if self._on_lost then
    local ok, err = pcall(self._on_lost, state, lease)
    if not ok then warn_("on_lost handler failed: " .. tostring(err)) end
  elseif state == "LOST" then
    warn_(("lease of semaphore %s was lost with the session"):format(self.path))
  end
end

-- Lease holders (and leases being counted): { { path, node, sequence, data }, ... } by sequence.
function Semaphore:participants()
  local client = self.client
  client:_check_open("participants")
  local dir = self.path .. "/leases"
  local names, msg, code = client:children(dir)
  if not names then
    if code == "ZNONODE" then return {} end
    return nil, msg, code
  end
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

function SemaphoreMutex:acquire(timeout, opts)
  local lease, msg, code = self.semaphore:acquire(timeout, opts)
  if not lease then return nil, msg, code end
  self._lease = lease
  return self
end

function SemaphoreMutex:release()
  local lease = self._lease
  if not lease then
    error(("zklock: release of semaphore mutex %s, which is not held"):format(self.path), 2)
  end
  self._lease = nil
  return lease:release()
end

SemaphoreMutex.__close = function(self)
  if self._lease then
    local ok, msg = self:release()
    if not ok then warn_(("release at scope exit failed: %s"):format(msg)) end
  end
end

function SemaphoreMutex:is_held() return self._lease ~= nil and self._lease:is_held() end
function SemaphoreMutex:token() return self._lease and self._lease:token() or nil end
function SemaphoreMutex:node() return self._lease and self._lease:node() or nil end
function SemaphoreMutex:cancel() return self.semaphore:cancel() end
function SemaphoreMutex:participants() return self.semaphore:participants() end
function SemaphoreMutex:on_lost(fn)
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_lost", 1, "expected a function or nil, got " .. check.describe(fn))
  end
  local this = self
  self.semaphore:on_lost(fn and function(state) return fn(state, this) end or nil)
end
function SemaphoreMutex:__tostring() return ("zklock.semaphore_mutex(%s)"):format(self.path) end

local function new_mutex(client, path, opts)
  check.path("semaphore_mutex", 1, path)
  check.options("semaphore_mutex", 2, opts, { acl = check.acl_option })
  local sem = new(client, path, 1, opts, "semaphore_mutex")
  return setmetatable({ client = client, path = path, semaphore = sem, kind = "semaphore mutex" }, SemaphoreMutex)
end

return { new = new, new_mutex = new_mutex, new_lease = new_lease, Semaphore = Semaphore,
         SemaphoreMutex = SemaphoreMutex, Lease = Lease }
