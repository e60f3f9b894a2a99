-- zklock.zookeeper_lock: a lock that shares a directory with ZooKeeper's own lock recipe
-- (org.apache.zookeeper.recipes.lock.WriteLock, zookeeper-recipes-lock), on plain calls.
--
-- Its nodes are <path>/x-<session id in decimal>-<seq10> (EPHEMERAL_SEQUENTIAL, data 0x12 0x34
-- unless opts.data), and it orders the children as WriteLock's ZNodeName does: by the int after
-- the last '-' (one more '-' before it makes it negative), ties by the text before; names
-- without such a number sort after those with one. The first holds; a waiter watches (exists)
-- its immediate predecessor. Both sides pick the same first node, so they exclude each other.
-- Unlike WriteLock, a waiter whose predecessor is already gone lists again instead of stalling,
-- and a waiter that gives up (timeout, error) deletes its node. (docs/design.md)
local core = require("zklock.core")
local check = require("zklock.internal.args")
local Client = require("zklock.client").Client
local R = require("zklock.internal.recipe")
local gc_proxy = require("zklock.internal.hold").gc_proxy
local E = require("zklock.internal.errors")
local watch = require("zklock.internal.watch")

local M = {}

local ZkLock = {}
ZkLock.__index = ZkLock
ZkLock.__name = "zklock.zookeeper_lock"
M.ZkLock = ZkLock

M.DATA = "\18\52" -- WriteLock's default data, bytes 0x12 0x34

-- WriteLock's ZNodeName: name -> prefix, sequence (nil when none)
function M.parse(name)
  local idx
  for i = #name, 1, -1 do
    if name:sub(i, i) == "-" then idx = i break end
  end
  if not idx then return name, nil end
  if idx > 1 and name:sub(idx - 1, idx - 1) == "-" then idx = idx - 1 end
  local prefix, tail = name:sub(1, idx - 1), name:sub(idx + 1)
  local seq = tail:match("^[+-]?%d+$") and tonumber(tail) or nil
  if seq and (seq > 2147483647 or seq < -2147483648) then seq = nil end -- Integer.parseInt fails
  return prefix, seq
end

-- WriteLock's order (ZNodeName.compareTo) as a "less than"
function M.less(a, b)
  local pa, sa = M.parse(a)
  local pb, sb = M.parse(b)
  if sa and sb then
    if sa ~= sb then return sa < sb end
    return pa < pb
  end
  if sa then return true end
  if sb then return false end
  return pa < pb
end

local function zl_check(self, fname)
  check.object(self, ZkLock, "zookeeper_lock", fname)
  check.open(self.client, fname)
end

local function call(self, which)
  local fn = self[which]
  if not fn then return end
  local ok, err = pcall(fn, self)
  if not ok then R.log(self.client, "error", ("zookeeper_lock %s: %s handler failed: %s"):format(self.path, which,
    tostring(err))) end
end

-- the session ended: its ephemeral nodes went with it
local GONE = { ZNONODE = true, ESESSION = true, ECLOSED = true, ZSESSIONEXPIRED = true }
-- a create or delete failed this way: the server may have applied it (its answer was lost:
-- zklock.outcome_unknown) and the session that owns the node lives on. UNKNOWN[name],
-- UNKNOWN_ST[number].
local UNKNOWN = setmetatable({}, { __index = function(_, code)
  return core.outcome_unknown(code) and not GONE[code]
end })
local UNKNOWN_ST = setmetatable({}, { __index = function(_, st)
  return core.outcome_unknown(st) and not GONE[core.errname(st)]
end })

-- Per client: the nodes its zookeeper_lock objects know as theirs (full path -> true), and the
-- creates in flight per directory. A create whose answer was lost is found again by its
-- session prefix among the nodes no object of the client knows (find_lost).
local registry = setmetatable({}, { __mode = "k" })
local function reg_of(client)
  local r = registry[client]
  if not r then
    r = { known = {}, creating = {} }
    registry[client] = r
  end
  return r
end

-- Loss reports: the client's session events, told to the locks held on it (on_lost). SUSPENDED
-- when the connection is lost (the node may still be ours), RECONNECTED when the same session
-- comes back, LOST when it ended (expired, or judged lost before the server could expire it:
-- docs/design.md). A client closed by its owner tells nobody, as for the other locks.
local function report(self, state)
  if self._lost then return end -- LOST is final and told once
  if state == "LOST" then self._lost = true end
  local fn = self._on_lost
  if fn then
    local why = state == "LOST" and (self._lost_max and "max_hold" or self._lost_node and "node" or "session") or nil
    local ok, err = pcall(fn, state, self, why)
    if not ok then
      R.log(self.client, "error", ("zookeeper_lock %s: on_lost handler failed (%s): %s"):format(self.path, state,
        tostring(err)))
    end
  elseif state == "LOST" then
    R.log(self.client, "warn", ("zookeeper_lock %s was lost %s"):format(check.short(self.path), self:_lost_how()))
  end
end

-- Evidence that the held node is gone (a release's or a fenced transaction's ZNONODE): LOST now.
local function node_gone(self)
  if not self._held or self._lost then return end
  self._lost_node = true
  reg_of(self.client).held[self] = nil
  report(self, "LOST")
end

function ZkLock:_lost_how()
  if self._lost_max then
    return ("(held for its max_hold of %g s: released by zklock)"):format(self._lost_max)
  end
  if self._lost_node then
    return ("(its node %s was deleted while it was held)"):format(check.short(tostring(self._node)))
  end
  return "with the session"
end

local function held_locks(client)
  local r = reg_of(client)
  if r.held then return r.held end
  local held = setmetatable({}, { __mode = "k" }) -- lock -> true while held and not lost
  r.held = held
  R.on_session(client, function(state, c)
    for lock in pairs(held) do
      if state == "SUSPENDED" then
        if not lock._suspended then
          lock._suspended = true
          report(lock, "SUSPENDED")
        end
      elseif state == "EXPIRED" or (state == "CONNECTED" and c:session() ~= lock._sid) then
        held[lock] = nil
        lock._suspended = nil
        report(lock, "LOST")
      elseif state == "CONNECTED" and lock._suspended then
        lock._suspended = nil
        report(lock, "RECONNECTED")
      end
    end
  end)
  return held
end

-- count self's create on its directory in flight (on = true) or no more (false); idempotent
local function creating(self, on)
  if (self._creating or false) == on then return end
  self._creating = on or nil
  local cr = reg_of(self.client).creating
  local n = (cr[self.path] or 0) + (on and 1 or -1)
  cr[self.path] = n > 0 and n or nil
end

local function set_node(self, node)
  local known = reg_of(self.client).known
  if self._node then known[self._node] = nil end
  if node then known[node] = true end
  self._node = node
end

-- A create of a node named prefix<seq> in self.path failed without an answer: it may have been
-- applied. List the directory (in order after the create on the session, so the listing shows
-- it if the server applied it) and delete the nodes with this session's prefix that no object
-- of this client knows. When another create of this client on the directory is in flight, its
-- node cannot be told from ours: leave them (they go with the session) and say so. A listing
-- that gets no answer while the session lives is tried again in a task of its own, up to
-- FIND_TRIES listings (a node left behind would block every other contender until the session
-- ends).
local FIND_TRIES = 10
local function find_lost(self, prefix, tries)
  tries = tries or 1
  local c = self.client
  if c.state == "CLOSED" then return end
  local r = reg_of(c)
  local kids, msg, code = c:children(self.path)
  if not kids then
    if UNKNOWN[code] and tries < FIND_TRIES then
      c:spawn(find_lost, self, prefix, tries + 1)
      return
    end
    if GONE[code] then return end -- the session ended: its nodes went with it
    R.log(c, "warn", ("zookeeper_lock %s: a create's answer was lost and the directory cannot be listed (%s): a"
      .. " node of this session may stay until it ends"):format(check.short(self.path), msg))
    return
  end
  local lost = {}
  for _, k in ipairs(kids) do
    local full = self.path .. "/" .. k
    if k:sub(1, #prefix) == prefix and k:sub(#prefix + 1):match("^%d+$") and not r.known[full] then
      lost[#lost + 1] = full
    end
  end
  if #lost == 0 then return end
  if (r.creating[self.path] or 0) > 0 then
    R.log(c, "warn", ("zookeeper_lock %s: a create's answer was lost while another create of this client was in"
      .. " flight: %d node(s) of this session stay until it ends"):format(check.short(self.path), #lost))
    return
  end
  for _, full in ipairs(lost) do
    local ok, _, dcode = c:delete(full)
    if not ok and not GONE[dcode] and c.state ~= "CLOSED" then R.discard(c, full) end
  end
end

-- Delete the node of an acquire that gives up. A delete that fails (a connection loss) is handed
-- to the client, which sends it again in the background while the session lives.
local function give_up(self, msg, code)
  if self._node and self.client.state == "CLOSED" then
    set_node(self, nil) -- closed while it waited: the node went with the session
  elseif self._node then
    local ok, _, c = self.client:delete(self._node)
    if not ok and not GONE[c] then R.discard(self.client, self._node) end
    set_node(self, nil)
  end
  return nil, msg, code
end

local acquire

-- lock:acquire(timeout, { max_hold = s }) -> lock | nil, msg, code (ETIMEDOUT, ECANCELED, ELOST, ...)
--   max_hold (or the constructor's): once held that long the lock is lost (on_lost: "LOST",
--   lock, "max_hold"), then its node is deleted in the background; release answers ELOST.
--   timeout: seconds, nil = wait forever, 0 = try once. Before the first session it waits for
--   one (within the timeout). On failure the node is deleted, and so it is when the calling
--   coroutine dies while it waits (closed, killed by its host, collected).
function ZkLock:acquire(timeout, opts)
  zl_check(self, "acquire")
  local ms = check.timeout("acquire", 1, timeout)
  opts = check.options("acquire", 2, opts, { max_hold = check.is.positive })
  if self._held and not self:is_held() then -- lost and not released yet
    return E.fail("ELOST", ("zookeeper_lock %s was lost %s; release it before acquiring again")
      :format(check.short(self.path), self:_lost_how()))
  end
  if self._node or self._waiting_co then
    check.raise("zklock: zookeeper_lock:acquire while held or acquiring (not reentrant)")
  end
  self._cancelled = nil
  local c = self.client
  local rec
  rec = R.waiting(c, "zookeeper_lock", self.path, function()
    -- the coroutine died while it waited: its node goes in the background
    if self._waiting ~= rec then return end
    self._waiting, self._waiting_co = nil, nil
    creating(self, false) -- its create, if in flight, is deleted by the orphan function below
    if self._node and not self._held then
      R.discard(c, self._node)
      set_node(self, nil)
    end
  end, function(st, res)
    if st == 0 and res and res.data then
      R.discard(c, res.data) -- the node its create made
    elseif UNKNOWN_ST[st] and self._prefix then
      -- its outcome is unknown: look for it as a waiter does (it must list: in a task of its own)
      c:spawn(find_lost, self, self._prefix)
    end
  end)
  self._waiting = rec
  self._waiting_co = true
  local ok, msg, code = acquire(self, timeout, ms)
  self._waiting_co = nil
  R.done_waiting(c, rec)
  if self._waiting == rec then self._waiting = nil end
  if ok then
    local mh = opts.max_hold or self.max_hold
    if mh then -- bounded: LOST ("max_hold") told first, then the node deleted in the background
      local node = self._node
      self._mh_timer = watch.timer(c, mh * 1000, function()
        self._mh_timer = nil
        if not self._held or self._lost or self._node ~= node then return end
        self._lost_max = mh
        reg_of(c).held[self] = nil
        R.log(c, "warn", ("zookeeper_lock %s held for its max_hold of %g s: releasing it"):format(
          check.short(self.path), mh))
        report(self, "LOST")
        R.discard(c, node)
      end)
    end
    return self
  end
  return nil, msg, code
end

local SLICE = 0.2 -- s: a waiter looks at cancel() this often (no request: a local wait)

local function cancelled(self)
  return E.message("ECANCELED", ("zookeeper_lock %s: the acquire was cancelled"):format(check.short(self.path))),
    "ECANCELED"
end

local function timed_out(self, timeout)
  if timeout == 0 then
    return E.message("ETIMEDOUT", ("zookeeper_lock %s is held by another owner"):format(check.short(self.path))),
      "ETIMEDOUT"
  end
  return E.message("ETIMEDOUT", ("zookeeper_lock %s: not acquired within %g s"):format(check.short(self.path),
    timeout)), "ETIMEDOUT"
end

function acquire(self, timeout, ms)
  local deadline = ms >= 0 and core.now() + ms or nil
  local c = self.client
  -- the session id as Java prints a long (the C side's decimal); nil without a session
  local dec = R.session_decimal(c)
  -- no session yet (connecting): wait for one, as the core does for a mutex's first request;
  -- a try-once as long as a plain call waits (its create and listing are plain calls)
  local op_ms = R.op_ms(c)
  local wait_until = deadline
  if timeout == 0 then wait_until = op_ms >= 0 and core.now() + op_ms or nil end
  while not dec do
    if c.state == "CLOSED" then
      return E.fail("ECLOSED", ("the client was closed while acquiring %s"):format(check.short(self.path)))
    end
    if self._cancelled then return nil, cancelled(self) end
    local left = wait_until and (wait_until - core.now()) / 1000
    if left and left <= 0 and timeout == 0 then
      return E.fail("ETIMEDOUT", ("no answer from ZooKeeper trying zookeeper_lock %s once (the client is %s: "
        .. "is the server up?)"):format(check.short(self.path), c.state))
    end
    if left and left <= 0 then return nil, timed_out(self, timeout) end
    c:sleep(math.min(left or SLICE, 0.05))
    dec = R.session_decimal(c)
  end
  local sid = c:session() -- the session the node belongs to (a loss check compares it)
  local prefix = "x-" .. dec .. "-"
  self._prefix = prefix
  creating(self, true)
  local node, msg, code = R.create(c, self.path .. "/" .. prefix, self.data, { ephemeral = true, sequential = true,
                                                                              parents = true }, self._waiting)
  creating(self, false)
  if not node then
    if UNKNOWN[code] then
      find_lost(self, prefix)
      msg = msg .. " (the lock was not acquired: a node the server may have made is looked for and deleted)"
    end
    return nil, msg, code
  end
  set_node(self, node)
  self._token = msg and msg.czxid -- create's second result: the stat of the node made
  local mine = node:match("[^/]+$")
  for _ = 1, 1e9 do
    local kids
    if self._cancelled then return give_up(self, cancelled(self)) end
    kids, msg, code = c:children(self.path)
    if not kids then return give_up(self, msg, code) end
    table.sort(kids, M.less)
    local idx
    for i, k in ipairs(kids) do if k == mine then idx = i break end end
    if not idx then
      set_node(self, nil)
      return E.fail("ELOST", ("zookeeper_lock %s: its node %s is gone (the session ended)"):format(
        check.short(self.path), mine))
    end
    if idx == 1 then
      self._held, self._sid, self._suspended, self._lost, self._lost_node = true, sid, nil, nil, nil
      self._lost_max = nil
      held_locks(c)[self] = true
      call(self, "on_acquired")
      return true
    end
    local stat, w
    stat, w, code = c:exists(self.path .. "/" .. kids[idx - 1], { watch = true })
    if stat == nil then return give_up(self, w, code) end
    while stat do
      if self._cancelled then return give_up(self, cancelled(self)) end
      local left = deadline and math.max(0, (deadline - core.now()) / 1000) or nil
      if left and left <= 0 then return give_up(self, timed_out(self, timeout)) end
      local fired
      fired, msg, code = w:wait(math.min(left or SLICE, SLICE))
      if fired then break end
      if code ~= "ETIMEDOUT" then return give_up(self, msg, code) end
    end
  end
  return give_up(self, E.message("ETIMEDOUT", "zookeeper_lock: gave up"), "ETIMEDOUT")
end

-- The session that took the lock is gone (expired, or the client closed): so is the node.
local function lost(self)
  return self.client.state == "CLOSED" or self.client:session() ~= self._sid
end

-- lock:release() -> true | nil, msg, code. Raises when not held. ELOST when the session that took
-- the lock ended meanwhile (its node went with it: somebody else may hold the lock since).
function ZkLock:release()
  check.object(self, ZkLock, "zookeeper_lock", "release")
  if not self._held then check.raise("zklock: zookeeper_lock:release while not held") end
  reg_of(self.client).held[self] = nil -- nothing more to report, whatever the outcome
  if self._mh_timer then watch.cancel_timer(self.client, self._mh_timer) self._mh_timer = nil end
  if self.client.state == "CLOSED" then -- the node went with the session
    set_node(self, nil)
    self._held = false
    call(self, "on_released")
    return true
  end
  if self._lost_node or self._lost_max then
    set_node(self, nil)
    self._held = false
    call(self, "on_released")
    return E.fail("ELOST", ("zookeeper_lock %s was lost %s before this release"):format(check.short(self.path),
      self:_lost_how()))
  end
  if lost(self) then
    local node = self._node
    set_node(self, nil)
    self._held = false
    call(self, "on_released")
    return E.fail("ELOST", ("zookeeper_lock %s: the session that held %s ended; the lock was lost before"
      .. " this release"):format(check.short(self.path), tostring(node)))
  end
  local ok, msg, code = self.client:delete(self._node)
  if not ok and code == "ZNONODE" then
    -- someone else deleted the node while it was held (a delete resent after a connection loss
    -- may also meet ZNONODE: then the node was gone all the same, and nobody could be told)
    local how = lost(self) and "with the session" or nil
    if not how then
      self._held = true -- node_gone reports to held locks only
      node_gone(self)
    end
    local why = how or self:_lost_how()
    set_node(self, nil)
    self._held = false
    call(self, "on_released")
    return E.fail("ELOST", ("zookeeper_lock %s was lost %s before this release"):format(check.short(self.path), why))
  end
  if not ok then return nil, msg, code end
  set_node(self, nil)
  self._held = false
  call(self, "on_released")
  return true
end

-- Withdraw a pending acquire of this lock (it returns nil, "ECANCELED: ..." within 0.2 s). ->
-- the number withdrawn (0 or 1)
function ZkLock:cancel()
  check.object(self, ZkLock, "zookeeper_lock", "cancel")
  if not self._waiting_co then return 0 end
  self._cancelled = true
  return 1
end

-- Fencing token while held: the czxid of its node (tokens of successive holders only grow).
function ZkLock:token()
  check.object(self, ZkLock, "zookeeper_lock", "token")
  if self:is_held() then return self._token end
  return nil
end

-- A fenced transaction: it commits only while this lock's node exists. Raises when not held.
function ZkLock:transaction()
  check.object(self, ZkLock, "zookeeper_lock", "transaction")
  if not self._held then
    check.raise(("zklock: transaction of zookeeper_lock %s, which is not held"):format(self.path))
  end
  local this = self
  return require("zklock.txn").fenced(self.client, {
    node = self._node, what = "zookeeper_lock " .. check.short(self.path),
    live = function() return this:is_held() end,
    gone = function() node_gone(this) end,
  })
end

ZkLock.__close = function(self)
  if self._held then
    local ok, msg = self:release()
    if not ok then
      R.log(self.client, "error", ("release of zookeeper_lock %s at scope exit failed: %s"):format(self.path, msg))
    end
  end
end

-- Collected while held: its node goes in the background (as a mutex's), with a warning.
function ZkLock:__gc()
  if self._held and self._node and self.client.state ~= "CLOSED" and not self._lost then
    R.log(self.client, "warn", ("zookeeper_lock %s collected while held; releasing in the background")
      :format(self.path))
    R.discard(self.client, self._node)
  end
end

-- true while held by this session (false once the session that took it ended)
function ZkLock:is_held()
  check.object(self, ZkLock, "zookeeper_lock", "is_held")
  if self._held and not self._lost and self.client.state ~= "CLOSED" then R.refresh(self.client) end
  return self._held == true and not self._lost and not lost(self)
end

-- the full path of this lock's node while held, else nil
function ZkLock:node()
  check.object(self, ZkLock, "zookeeper_lock", "node")
  if self:is_held() then return self._node end
  return nil
end

function ZkLock:__tostring()
  return ("zklock.zookeeper_lock(%s%s)"):format(self.path, self._held and ", held" or "")
end

-- fn(state, lock) on "SUSPENDED", "RECONNECTED" and "LOST" while held (nil: none; without one
-- a LOST is logged as a warning). Returns the lock.
function ZkLock:on_lost(fn)
  check.object(self, ZkLock, "zookeeper_lock", "on_lost")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_lost", 1, "expected a function (or nil to remove the handler), got " .. check.describe(fn))
  end
  self._on_lost = fn -- not `on_lost`: that would hide this method
  return self
end

local OPTIONS = { on_acquired = check.is.func, on_released = check.is.func, on_lost = check.is.func,
                  data = check.is.string, max_hold = check.is.positive }

-- client:zookeeper_lock(path, { on_acquired = fn(lock), on_released = fn(lock),
--                              on_lost = fn(state, lock), data = })
--   A lock compatible with ZooKeeper's WriteLock recipe on the same directory (LockListener's
--   lockAcquired / lockReleased as callbacks). Not reentrant; one hold per object.
function Client:zookeeper_lock(path, opts)
  check.open(self, "zookeeper_lock")
  if type(path) ~= "string" then
    check.argerror("zookeeper_lock", 1, "lock path: expected a string like \"/locks/name\", got "
      .. check.describe(path))
  end
  local why = core.path_error(path)
  if why or path == "/" then
    check.argerror("zookeeper_lock", 1, ("lock path %s, got %s"):format(why or "must not be the root",
      check.describe(path)))
  end
  opts = check.options("zookeeper_lock", 2, opts, OPTIONS)
  local self_ = setmetatable({ client = self, path = path, kind = "zookeeper_lock", data = opts.data or M.DATA,
                               on_acquired = opts.on_acquired, on_released = opts.on_released,
                               _on_lost = opts.on_lost, max_hold = opts.max_hold }, ZkLock)
  gc_proxy(self_)
  return self_
end

return M
