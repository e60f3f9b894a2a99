-- zklock.counters: shared values on plain znode calls, on the wire like Apache Curator's recipes.
--
--   client:shared_count(path, seed)  Curator SharedCount: the node's data is a 4-byte big-endian
--                                    signed int; versioned sets; a listener on change.
--   client:atomic_long(path, opts)   Curator DistributedAtomicLong: an 8-byte big-endian signed
--                                    long; optimistic compare-and-set with retries, then
--                                    (opts.lock) the same under a mutex at the lock path.
--
-- 64-bit values: under Lua 5.3+ values are native 64-bit integers and arithmetic wraps like
-- Java's long. Lua 5.1, 5.2 and LuaJIT have only doubles: there a long must lie within
-- +-(2^53 - 1); a stored value beyond that is reported as ERANGE (never rounded), and so is a
-- result (add, increment) that would leave the range. Arguments beyond it raise.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local watch = require("zklock.internal.watch")
local retry = require("zklock.retry")
local Client = require("zklock.client").Client
local R = require("zklock.internal.recipe")

local M = {}

local INT64 = math.type ~= nil and string.pack ~= nil -- Lua 5.3+
M.INT64 = INT64
local SAFE = 2 ^ 53 - 1
M.SAFE = INT64 and math.maxinteger or SAFE

---------------------------------------------------------------- encodings

local function be32(v) -- v: an integer in [-2^31, 2^31)
  if v < 0 then v = v + 4294967296 end
  return string.char(math.floor(v / 16777216) % 256, math.floor(v / 65536) % 256, math.floor(v / 256) % 256, v % 256)
end

local function u32(s, i)
  local a, b, c, d = s:byte(i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- 4 or more bytes -> int (Curator reads the first 4) | nil when shorter
function M.decode_int(s)
  if #s < 4 then return nil end
  local n = u32(s, 1)
  if n >= 2147483648 then n = n - 4294967296 end
  return n
end

function M.encode_int(v) return be32(v) end

-- "" -> 0 (Curator: no data reads 0); 8 or more bytes -> the first 8 as a signed long;
-- 1..7 bytes -> nil, "short"; beyond +-(2^53 - 1) without 64-bit integers -> nil, "range"
function M.decode_long(s)
  if #s == 0 then return 0 end
  if #s < 8 then return nil, "short" end
  if INT64 then return (string.unpack(">i8", s)) end
  local hi, lo = u32(s, 1), u32(s, 5)
  if hi >= 2147483648 then hi = hi - 4294967296 end
  if hi < -2097152 or hi >= 2097152 then return nil, "range" end
  local v = hi * 4294967296 + lo
  if v < -SAFE then return nil, "range" end
  return v
end

function M.encode_long(v)
  if INT64 then return string.pack(">i8", v) end
  local hi = math.floor(v / 4294967296)
  local lo = v - hi * 4294967296
  return be32(hi) .. string.char(math.floor(lo / 16777216) % 256, math.floor(lo / 65536) % 256,
    math.floor(lo / 256) % 256, lo % 256)
end

---------------------------------------------------------------- argument checks

local function check_path(fname, argn, path)
  if type(path) ~= "string" then
    check.argerror(fname, argn, "path: expected a string like \"/counters/name\", got " .. check.describe(path))
  end
  local why = core.path_error(path)
  if why then check.argerror(fname, argn, ("path %s, got %s"):format(why, check.describe(path))) end
  return path
end

local function check_int(fname, argn, what, v)
  if type(v) ~= "number" or v ~= v or math.floor(v) ~= v or v < -2147483648 or v > 2147483647 then
    check.argerror(fname, argn, ("%s: expected an integer from -2^31 to 2^31-1 (a 32-bit int), got %s")
      :format(what, check.describe(v)))
  end
  return INT64 and math.tointeger(v) or v
end

local function check_long(fname, argn, what, v)
  if INT64 then
    local i = type(v) == "number" and math.tointeger(v)
    if not i then
      check.argerror(fname, argn, ("%s: expected an integer (a 64-bit long), got %s"):format(what, check.describe(v)))
    end
    return i
  end
  if type(v) ~= "number" or v ~= v or math.floor(v) ~= v or v > SAFE or v < -SAFE then
    check.argerror(fname, argn, ("%s: expected an integer within +-(2^53 - 1) (this Lua has no 64-bit integers;"
      .. " Lua 5.3+ takes the whole long range), got %s"):format(what, check.describe(v)))
  end
  return v
end

local function check_version(fname, argn, v)
  if type(v) ~= "number" or v ~= v or math.floor(v) ~= v or v < 0 or v > 2147483647 then
    check.argerror(fname, argn, "version: expected the node's version from get() (an integer >= 0), got "
      .. check.describe(v))
  end
  return v
end

local fail = E.fail

---------------------------------------------------------------- SharedCount

local SharedCount = {}
SharedCount.__index = SharedCount
SharedCount.__name = "zklock.shared_count"
M.SharedCount = SharedCount

local function sc_check(self, fname)
  check.object(self, SharedCount, "shared_count", fname)
  if self._closed then check.raise(("zklock: shared_count:%s after close"):format(fname)) end
  check.open(self.client, fname)
end

local function corrupt_int(path, data)
  return fail("EDATA", ("%s holds %d byte(s), not a 4-byte count (a shared count's node holds a big-endian int)")
    :format(check.short(path), #data))
end

-- Make the node with the seed if it is missing (Curator's SharedCount.start): true | nil, msg, code
local function sc_create(self)
  local ok, msg, code = self.client:create(self.path, be32(self.seed), { parents = true })
  if ok or code == "ZNODEEXISTS" then return true end
  return nil, msg, code
end

-- sc:get() -> value, version | nil, msg, code. Creates the node with the seed when missing.
function SharedCount:get()
  sc_check(self, "get")
  for _ = 1, 3 do
    local data, stat, code = self.client:get(self.path)
    if data then
      local v = M.decode_int(data)
      if not v then return corrupt_int(self.path, data) end
      return v, stat.version
    end
    if code ~= "ZNONODE" then return nil, stat, code end
    local ok, msg
    ok, msg, code = sc_create(self)
    if not ok then return nil, msg, code end
  end
  return fail("ZNONODE", ("%s: the node was deleted again each time it was made"):format(check.short(self.path)))
end

-- sc:try_set(value, version) -> true, new version | false (the count changed since `version`)
--   | nil, msg, code (ZNONODE: the node was deleted)
function SharedCount:try_set(value, version)
  sc_check(self, "try_set")
  value = check_int("try_set", 1, "value", value)
  version = check_version("try_set", 2, version)
  local stat, msg, code = self.client:set(self.path, be32(value), version)
  if stat then return true, stat.version end
  if code == "ZBADVERSION" then return false end
  return nil, msg, code
end

-- sc:set(value) -> true, new version | nil, msg, code (whatever the version; makes the node if missing)
function SharedCount:set(value)
  sc_check(self, "set")
  value = check_int("set", 1, "value", value)
  for _ = 1, 3 do
    local stat, msg, code = self.client:set(self.path, be32(value))
    if stat then return true, stat.version end
    if code ~= "ZNONODE" then return nil, msg, code end
    local ok
    ok, msg, code = self.client:create(self.path, be32(value), { parents = true })
    if ok then return true, 0 end
    if code ~= "ZNODEEXISTS" then return nil, msg, code end
  end
  return fail("ZNONODE", ("set %s: the node kept disappearing"):format(check.short(self.path)))
end

local function sc_notify(self, value, version)
  local fn = self._on_change
  if fn then
    local ok, err = pcall(fn, "changed", self, value, version)
    if not ok then
      R.log(self.client, "error",
        ("shared_count %s: on_change handler failed: %s"):format(self.path, tostring(err)))
    end
  end
end

local sc_arm

-- a read of the node (with its watch) answered: report a new value, arm again when needed
local function sc_read(self, rec, st, res)
  if self._watch ~= rec then return end
  if st == core.errno.ZNONODE then
    -- gone: watch for it to come back (an exists watch), then read again
    self._watch = nil
    local erec
    local id, r = watch.start(self.client, "exists", core.OP_EXISTS, self.path, 0, {
      private = true,
      on_fire = function()
        if self._watch == erec then self._watch = nil; sc_arm(self) end
      end,
    })
    if id then erec = r; self._watch = erec end
    return
  end
  if st ~= 0 then self._watch = nil; return end -- the session handler arms again on reconnection
  local v = M.decode_int(res.data or "")
  if v == nil then return end
  if res.mzxid ~= self._seen then
    local first = self._seen == nil
    self._seen = res.mzxid
    if not first or self._notify_first then
      self._notify_first = nil
      sc_notify(self, v, res.version)
    end
  end
end

function sc_arm(self)
  if self._closed or self._watch or not self._on_change or self.client.state == "CLOSED" then return end
  local rec
  local id, r = watch.start(self.client, "get", core.OP_GET, self.path, 0, {
    private = true,
    on_done = function(st, res) sc_read(self, rec, st, res) end,
    on_fire = function(st)
      if self._watch ~= rec then return end
      self._watch = nil
      if watch.TYPE_NAMES[st] then sc_arm(self) end -- changed, deleted: read again, watch again
    end,
  })
  if not id then return end
  rec = r
  self._watch = rec
end

-- sc:on_change(fn) -> sc. fn("changed", sc, value, version) runs whenever the count's node
-- changes (a new write, even of the same value), from the client's event dispatch (while the
-- client is pumped: a blocking call, client:run, or an adapter's loop); it must not wait.
-- Replaces the handler; nil removes it (the watch then lapses at its next firing);
-- sc:close() removes it too. The watch is armed again after every change and after a
-- reconnection (a change missed meanwhile is reported then).
function SharedCount:on_change(fn)
  sc_check(self, "on_change")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_change", 1, "expected a function(event, shared_count, value, version) or nil, got "
      .. check.describe(fn))
  end
  self._on_change = fn
  if fn == nil then return self end
  -- one session handler per client re-arms every listening shared count (weak: a dropped
  -- shared count is not kept alive by it)
  local c = self.client
  local set = R.peek(c, "counters")
  if not set then
    set = R.slot(c, "counters", function() return setmetatable({}, { __mode = "k" }) end)
    R.on_session(c, function(state)
      if state ~= "CONNECTED" then return end
      for sc in pairs(set) do
        if not sc._closed then sc_arm(sc) end
      end
    end)
  end
  set[self] = true
  sc_arm(self)
  return self
end

-- sc:close(): stop listening (the node stays). Calls on a closed shared count raise.
function SharedCount:close()
  check.object(self, SharedCount, "shared_count", "close")
  if self._closed then return true end
  self._closed = true
  self._on_change = nil
  local set = R.peek(self.client, "counters")
  if set then set[self] = nil end
  local rec = self._watch
  self._watch = nil
  if rec and self.client.state ~= "CLOSED" then watch.forget(self.client, rec) end
  return true
end

function SharedCount:__tostring()
  return ("zklock.shared_count(%s%s)"):format(self.path, self._closed and ", closed" or "")
end

-- client:shared_count(path, seed) -> shared count (Curator SharedCount). seed: the value the
-- node is made with when a call finds it missing (default 0). Nothing is sent until a call.
function Client:shared_count(path, seed)
  check.open(self, "shared_count")
  check_path("shared_count", 1, path)
  seed = check_int("shared_count", 2, "seed", seed == nil and 0 or seed)
  return setmetatable({ client = self, path = path, seed = seed }, SharedCount)
end

---------------------------------------------------------------- DistributedAtomicLong

local AtomicLong = {}
AtomicLong.__index = AtomicLong
AtomicLong.__name = "zklock.atomic_long"
M.AtomicLong = AtomicLong

local function al_check(self, fname)
  check.object(self, AtomicLong, "atomic_long", fname)
  check.open(self.client, fname)
end

local function al_corrupt(self, data, why)
  if why == "range" then
    return fail("ERANGE", ("%s holds a long beyond +-(2^53 - 1), which this Lua (no 64-bit integers) cannot"
      .. " represent exactly; use Lua 5.3+"):format(check.short(self.path)))
  end
  return fail("EDATA", ("%s holds %d byte(s), not an 8-byte long (an atomic long's node holds a big-endian"
    .. " long, or nothing)"):format(check.short(self.path), #data))
end

-- read: value, version (-1: no node) | nil, msg, code
local function al_read(self)
  local data, stat, code = self.client:get(self.path)
  if not data then
    if code == "ZNONODE" then return 0, -1 end
    return nil, stat, code
  end
  local v, why = M.decode_long(data)
  if v == nil then return al_corrupt(self, data, why) end
  return v, stat.version
end

-- one attempt of Curator's tryOnce: read, compute, create (node missing) or set at the version
-- read. -> true, pre, post | false, pre (lost a race) | nil, msg, code. A write without an
-- answer is never tried again: its code is one of zklock.outcome_unknown's and the plain call's
-- message says "outcome unknown: the operation may have been applied".
local function try_once(self, make)
  local pre, version, code = al_read(self)
  if pre == nil then return nil, version, code end
  local post, msg
  post, msg, code = make(pre)
  if post == nil then return nil, msg, code end
  local ok
  if version < 0 then
    ok, msg, code = self.client:create(self.path, M.encode_long(post), { parents = true })
  else
    ok, msg, code = self.client:set(self.path, M.encode_long(post), version)
  end
  if ok then return true, pre, post end
  if code == "ZBADVERSION" or code == "ZNODEEXISTS" or code == "ZNONODE" then return false, pre end
  return nil, msg, code
end

-- Curator's loop: optimistic attempts under the retry policy, then (lock configured) attempts
-- holding the mutex under the lock's own policy. -> AtomicValue | nil, msg, code
local function attempt(self, make)
  local result = { succeeded = false, stats = { optimistic_tries = 0, promoted_tries = 0 } }
  local t0 = core.now()
  local n = 0
  while true do
    result.stats.optimistic_tries = result.stats.optimistic_tries + 1
    local ok, pre, post = try_once(self, make)
    if ok == nil then return nil, pre, post end
    result.pre = pre
    if ok then
      result.succeeded, result.post = true, post
      break
    end
    n = n + 1
    local delay = self._retry(n, "ZBADVERSION")
    if type(delay) ~= "number" or delay ~= delay or delay < 0 then break end
    if delay > 0 then self.client:sleep(delay) end
  end
  result.stats.optimistic_ms = core.now() - t0
  if result.succeeded or not self._lock then return result end
  local t1 = core.now()
  local lock = self._lock
  local m = self._mutex
  local held, msg, code = m:acquire(lock.timeout)
  if not held then
    result.stats.promoted_ms = core.now() - t1
    if code == "ETIMEDOUT" then return result end -- Curator: not acquired in time, not succeeded
    return nil, msg, code
  end
  local err
  n = 0
  while true do
    result.stats.promoted_tries = result.stats.promoted_tries + 1
    local ok, pre, post = try_once(self, make)
    if ok == nil then err = { pre, post } break end
    result.pre = pre
    if ok then
      result.succeeded, result.post = true, post
      break
    end
    n = n + 1
    local delay = lock.retry and lock.retry(n, "ZBADVERSION")
    if type(delay) ~= "number" or delay ~= delay or delay < 0 then break end
    if delay > 0 then self.client:sleep(delay) end
  end
  m:release()
  result.stats.promoted_ms = core.now() - t1
  if err then return nil, err[1], err[2] end
  return result
end

local function adder(delta)
  return function(pre)
    local post = pre + delta
    if not INT64 and (post > SAFE or post < -SAFE) then
      return fail("ERANGE", ("%s + %s leaves +-(2^53 - 1), which this Lua (no 64-bit integers) cannot represent"
        .. " exactly; use Lua 5.3+"):format(tostring(pre), tostring(delta)))
    end
    return post
  end
end

-- al:get() -> { succeeded = true, pre = v, post = v } | nil, msg, code (a missing node reads 0)
function AtomicLong:get()
  al_check(self, "get")
  local v, msg, code = al_read(self)
  if v == nil then return nil, msg, code end
  return { succeeded = true, pre = v, post = v }
end

-- al:add(n) -> { succeeded =, pre =, post =, stats = } | nil, msg, code
--   succeeded false: every attempt lost a race (the retry policy, and the lock if configured,
--   gave up); pre is the last value read. Connection loss or a timeout is an error (the write
--   may or may not have been applied; it is never sent twice).
function AtomicLong:add(n)
  al_check(self, "add")
  n = check_long("add", 1, "delta", n)
  return attempt(self, adder(n))
end

function AtomicLong:subtract(n)
  al_check(self, "subtract")
  n = check_long("subtract", 1, "delta", n)
  return attempt(self, adder(-n)) -- the minimum long negates to itself, as in Java
end

function AtomicLong:increment()
  al_check(self, "increment")
  return attempt(self, adder(1))
end

function AtomicLong:decrement()
  al_check(self, "decrement")
  return attempt(self, adder(-1))
end

-- al:try_set(v): set whatever the current value, by the same attempts as add.
function AtomicLong:try_set(v)
  al_check(self, "try_set")
  v = check_long("try_set", 1, "value", v)
  return attempt(self, function() return v end)
end

-- al:compare_and_set(expected, new) -> { succeeded =, pre =, post = } | nil, msg, code
--   One attempt, like Curator: succeeds only if the node exists and holds `expected`.
function AtomicLong:compare_and_set(expected, new)
  al_check(self, "compare_and_set")
  expected = check_long("compare_and_set", 1, "expected", expected)
  new = check_long("compare_and_set", 2, "new", new)
  local pre, version, code = al_read(self)
  if pre == nil then return nil, version, code end
  local result = { succeeded = false, pre = pre }
  if version < 0 or pre ~= expected then return result end
  local ok, msg
  ok, msg, code = self.client:set(self.path, M.encode_long(new), version)
  if ok then
    result.succeeded, result.post = true, new
    return result
  end
  if code == "ZBADVERSION" or code == "ZNONODE" then return result end
  return nil, msg, code
end

-- al:initialize(v) -> true (made with v) | false (the node exists already) | nil, msg, code
function AtomicLong:initialize(v)
  al_check(self, "initialize")
  v = check_long("initialize", 1, "value", v)
  local ok, msg, code = self.client:create(self.path, M.encode_long(v), { parents = true })
  if ok then return true end
  if code == "ZNODEEXISTS" then return false end
  return nil, msg, code
end

-- al:force_set(v) -> true | nil, msg, code: write v whatever the version (Curator's forceSet).
function AtomicLong:force_set(v)
  al_check(self, "force_set")
  v = check_long("force_set", 1, "value", v)
  local data = M.encode_long(v)
  local ok, msg, code = self.client:set(self.path, data)
  if ok then return true end
  if code ~= "ZNONODE" then return nil, msg, code end
  ok, msg, code = self.client:create(self.path, data, { parents = true })
  if ok then return true end
  if code ~= "ZNODEEXISTS" then return nil, msg, code end
  ok, msg, code = self.client:set(self.path, data)
  if ok then return true end
  return nil, msg, code
end

function AtomicLong:__tostring()
  return ("zklock.atomic_long(%s%s)"):format(self.path, self._lock and (", lock " .. self._lock.path) or "")
end

local LOCK_OPTIONS = {
  path = function(v) return type(v) == "string" and not core.path_error(v), "an absolute znode path" end,
  timeout = function(v)
    return v == math.huge or (type(v) == "number" and v == v and v >= 0), "seconds >= 0 (math.huge: no limit)"
  end,
  retry = function(v) return type(v) == "function", "a retry policy (function(attempt, code) -> seconds|nil)" end,
}

local AL_OPTIONS = {
  retry = LOCK_OPTIONS.retry,
  lock = function(v)
    return type(v) == "string" or type(v) == "table", "a lock path or { path =, timeout =, retry = }"
  end,
}

-- client:atomic_long(path, { retry = policy, lock = path | { path =, timeout =, retry = } })
--   Curator DistributedAtomicLong. retry: the policy for optimistic attempts (default
--   zklock.retry.exponential{ base = 0.01, max = 0.5, attempts = 10 }); it is called with
--   (attempt, "ZBADVERSION") after each lost race. lock: Curator's PromotedToLock: when the
--   optimistic attempts all lose, take a mutex (Curator InterProcessMutex) at lock.path and try
--   again holding it, lock.retry more times (default: once). lock.timeout: seconds to wait for
--   the mutex (default 0, try once: Curator's default of -1 ms acts the same way).
function Client:atomic_long(path, opts)
  check.open(self, "atomic_long")
  check_path("atomic_long", 1, path)
  opts = check.options("atomic_long", 2, opts, AL_OPTIONS)
  local lock = opts.lock
  if type(lock) == "string" then lock = { path = lock } end
  if lock then
    check.options("atomic_long", 2, lock, LOCK_OPTIONS)
    if lock.path == nil then check.argerror("atomic_long", 2, "option 'lock': the table needs path = \"/...\"") end
    if lock.path == path then
      check.argerror("atomic_long", 2, "option 'lock': the lock path must differ from the value's path")
    end
    lock = { path = lock.path, timeout = lock.timeout or 0, retry = lock.retry }
  end
  local policy = opts.retry or retry.exponential { base = 0.01, max = 0.5, attempts = 10 }
  local self_ = setmetatable({ client = self, path = path, _lock = lock, _retry = policy }, AtomicLong)
  if lock then self_._mutex = self:mutex(lock.path) end
  return self_
end

return M
