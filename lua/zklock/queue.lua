-- zklock.queue: a distributed FIFO queue, on the wire the same as ZooKeeper's queue recipe
-- (org.apache.zookeeper.recipes.queue.DistributedQueue) and Curator's SimpleDistributedQueue.
--
--   local q = client:queue("/queues/jobs")
--   q:put("job 1")                     -- -> "qn-0000000000"
--   local data, name = q:take(5)       -- waits up to 5 s for an item
--
-- Layout: every item is a persistent sequential node <path>/qn-<seq10> holding the item's bytes.
-- Items are ordered by the sequence suffix; children not named qn-<digits> are ignored. Taking
-- an item is deleting its node: of the consumers that compete for a node exactly one delete
-- succeeds (the others get ZNONODE and try the next node), so each item goes to exactly one
-- consumer. The recipe only composes plain calls and watches, so it lives in Lua:
--   * take: the item's data is read and its node deleted in one round trip (the get and the
--     delete are pipelined on the session, which the server answers in order; the delete's
--     success says the data read just before is ours);
--   * the sorted child list is kept per queue object and consumed in order, so a busy queue is
--     listed once per batch, not once per item (a node created after the listing always has a
--     higher sequence number: the server numbers children from the parent's cversion); each
--     coroutine taking through the same queue object gets a different candidate;
--   * an empty queue is waited on through one children watch per client and path, shared by
--     every waiting coroutine of that client (zklock.internal.watch shares reads per path and kind); the
--     watch is armed only by a listing that found the queue empty (listed again with the watch
--     after a plain listing found nothing), so a busy queue costs no watch events.
--
-- With { format = "curator" } the same machinery speaks Curator's DistributedQueue instead (see
-- docs/design.md, "Curator's DistributedQueue"): items are persistent sequential nodes
-- <path>/queue-<seq10> ordered by name, each holding one framed message of one or more items
-- (int32 0x00010001, then per item the byte 0x01, an int32 length and the bytes, then the byte
-- 0x02). Without lock_path a take deletes the node before the caller sees it (at most once, as
-- Curator's plain mode). With lock_path (Curator's lock-safe mode) a consumer first creates the
-- ephemeral <lock_path>/<item node>, reads the item, runs the caller's fn, and only then deletes
-- the item and its lock node in one multi whose first op checks the lock node: a consumer whose
-- session ended (its lock node gone, the item taken over by another consumer) removes nothing
-- and is told ELOST, and fn's own writes can join that multi (msg:transaction()).
local core = require("zklock.core")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local R = require("zklock.internal.recipe")
local ypcall = require("zklock.internal.scheduler").pcall -- fn may wait (yield), also on PUC Lua 5.1
local watch = require("zklock.internal.watch")
local Client = require("zklock.client").Client

local now = core.now

local Queue = {}
Queue.__index = Queue
Queue.__name = "zklock.queue"

local PREFIX = "qn-"
local CPREFIX = "queue-" -- Curator's DistributedQueue
local BLOCKED_WAIT = 200 -- ms: lock-safe take, every item locked by others: look again this often

---------------------------------------------------------------- Curator's message framing

local VERSION = "\0\1\0\1" -- int32 0x00010001, big-endian
local ITEM, EOF = "\1", "\2"

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

-- {item, ...} -> one framed message
local function encode(items)
  local out = { VERSION }
  for _, it in ipairs(items) do
    out[#out + 1] = ITEM .. be32(#it) .. it
  end
  out[#out + 1] = EOF
  return table.concat(out)
end

-- framed message -> {item, ...} | nil, why (byte offsets in it are 0-based)
local function decode(s)
  if #s < 4 then return nil, ("%d bytes, shorter than the 4-byte version header"):format(#s) end
  if s:sub(1, 4) ~= VERSION then
    local a, b, c, d = s:byte(1, 4)
    return nil, ("version header %02x%02x%02x%02x, expected 00010001"):format(a, b, c, d)
  end
  local items, pos = {}, 5
  while true do
    local op = s:byte(pos)
    if op == nil then return nil, "no end marker (0x02)" end
    if op == 2 then return items end -- bytes after it are ignored, as Curator does
    if op ~= 1 then return nil, ("opcode 0x%02x at byte %d, expected 0x01 (item) or 0x02 (end)"):format(op, pos - 1) end
    if pos + 4 > #s then return nil, ("item length cut short at byte %d"):format(pos) end
    local a, b, c, d = s:byte(pos + 1, pos + 4)
    if a >= 128 then return nil, ("negative item length at byte %d"):format(pos) end
    local n = ((a * 256 + b) * 256 + c) * 256 + d
    if pos + 4 + n > #s then return nil, ("item of %d bytes cut short at byte %d"):format(n, pos + 4) end
    items[#items + 1] = s:sub(pos + 5, pos + 4 + n)
    pos = pos + 5 + n
  end
end

-- The words a take ends with when the delete that takes an item got no answer (its code is in
-- zklock.outcome_unknown): the server may have removed it, and then nobody received it.
local TAKEN = "outcome unknown: the item may have been taken and lost (removed, but not handed out;"
  .. " its bytes are the 4th result)"

-- nil, msg, code for a failed request; `tail` is appended when its outcome is unknown
local function fail(st, what, path, ms, tail)
  local text = E.strerror(st)
  if st == core.errno.ETIMEDOUT then
    text = ("no answer within %g s"):format(ms / 1000)
  elseif st == core.errno.ESESSION then
    text = "the ZooKeeper session was lost while it waited"
  end
  if tail and core.outcome_unknown(st) then text = text .. "; " .. tail end
  return E.fail(st, ("queue %s %s: %s"):format(what, check.short(path), text))
end

-- Start core op `optype` on path (no watch) -> waiter | nil, msg, code
local function start(client, optype, path, ms, data, flags)
  local id, msg, code = R.op(client, optype, path, data, flags or 0, -1, 0, ms > 0 and ms or 0)
  if not id then return nil, msg, code end
  return R.waiter(client, id)
end

local function await(client, w)
  if not w.done then R.await(client, w) end
  return w
end

local function closed(w)
  if not w.done then return true end
end

-- The qn- children of the listing, sorted by sequence number.
local function sorted(names)
  local items = {}
  for _, n in ipairs(names) do
    local digits = n:sub(1, #PREFIX) == PREFIX and n:match("^%-?%d+$", #PREFIX + 1)
    if digits then items[#items + 1] = { name = n, seq = tonumber(digits) } end
  end
  table.sort(items, function(a, b) return a.seq < b.seq end)
  local out = {}
  for i, it in ipairs(items) do out[i] = it.name end
  return out
end

-- The queue- children of the listing in Curator's order: by name (the 10-digit sequence, or for
-- Curator's priority and id queues the text before it: they share the prefix).
local function csorted(names)
  local out = {}
  for _, n in ipairs(names) do
    if n:sub(1, #CPREFIX) == CPREFIX then out[#out + 1] = n end
  end
  table.sort(out)
  return out
end

local function check_self(self, fname)
  check.object(self, Queue, "queue", fname)
  check.open(self.client, fname)
end

-- List the queue (optionally arming the shared children watch) and refill the cache.
-- -> true[, watch] | nil, msg, code. A missing queue path is an empty queue (watch = nil).
-- bound_s: seconds the listing may wait for its answer (nil: the client's op_timeout)
function Queue:_list(with_watch, bound_s)
  local names, wobj, code = self.client:children(self.path, { watch = with_watch or nil, timeout = bound_s })
  if not names then
    if code == "ZNONODE" then
      self._cache, self._next = {}, 1
      return true, nil, true
    end
    return nil, wobj, code
  end
  self._cache, self._next = (self.curator and csorted or sorted)(names), 1
  return true, wobj
end

-- One candidate of the plain forms (qn- items, and Curator's DistributedQueue without a lock
-- path): its data is read and its node deleted in one round trip.
-- -> data (the bytes; Curator's: the list of items), name | false (another consumer took it) | nil, msg, code
function Queue:_try_plain(name, ms)
  local client = self.client
  local node = self.path .. "/" .. name
  local wg, msg, code = start(client, core.OP_GET, node, ms)
  if not wg then return nil, msg, code end
  local wd
  wd, msg, code = start(client, core.OP_DELETE, node, ms)
  if not wd then await(client, wg) return nil, msg, code end
  self:_keep_if_orphaned(wg, wd)
  await(client, wg)
  await(client, wd)
  if closed(wd) then
    return E.fail("ECLOSED", ("queue take %s: the client was closed before the answer came; %s"):format(
      check.short(node), TAKEN))
  end
  if closed(wg) then return E.fail("ECLOSED", "the client was closed") end
  if wd.status == 0 then
    -- ours: the get was answered before the delete, so it read this very node
    if wg.status ~= 0 then
      return fail(wg.status, "take (the item was removed, its data could not be read)", node, ms)
    end
    local data = (wg.result and wg.result.data) or ""
    if not self.curator then return data, name end
    local items, why = decode(data)
    if items then return items, name end
    return E.fail("EFORMAT", ("queue item %s is not a Curator DistributedQueue message (%s); it was removed"
      .. " (its bytes are the 4th result)"):format(check.short(node), why), data)
  elseif wd.status ~= core.errno.ZNONODE then
    local a, m, c = fail(wd.status, "take", node, ms, TAKEN)
    -- the delete may have been applied: hand back the bytes the get read, so the caller can put
    -- them back instead of losing the item
    if core.outcome_unknown(wd.status) and wg.status == 0 then
      return a, m, c, (wg.result and wg.result.data) or ""
    end
    return a, m, c
  end
  return false -- ZNONODE: another consumer took it
end

---------------------------------------------------------------- lock-safe mode

-- What a lock-safe consumer's fn gets besides the items: the item's names and a fenced
-- transaction that commits only while this consumer still holds the item's lock node.
local Message = {}
Message.__index = Message
Message.__name = "zklock.queue_message"

function Message:transaction()
  check.object(self, Message, "message", "transaction")
  if self._txn then
    check.raise("zklock: message:transaction() called twice (build all writes in the one transaction)")
  end
  self._txn = require("zklock.txn").fenced(self._client, self._guard)
  return self._txn
end

function Message:__tostring() return ("zklock.queue_message(%s)"):format(self.node) end

-- The hold protocol (docs/design.md, "One hold protocol") while fn runs: the grant is this
-- consumer's lock node of the item. is_held: the lock node is still this session's (and fn has
-- not returned); token: its czxid (one exists request, the first time); the lock node's path is
-- the field `lock` (`node`, a field older than the protocol, is the item's path, so there is no
-- node() method); on_lost(fn): fn(state, message, why) for SUSPENDED, RECONNECTED and LOST (why
-- "session": the session ended; "max_hold": fn outlasted the queue's max_hold) while fn runs.
-- release, <close> and collection do not apply: the take removes the item and the lock node when
-- fn returns (or only the lock node when it raises).
function Message:is_held()
  check.object(self, Message, "message", "is_held")
  return not self._done and not self._lost and self._guard.live()
end

function Message:token()
  check.object(self, Message, "message", "token")
  if not self:is_held() then return nil end
  if not self._token then
    local st = self._client:exists(self.lock)
    self._token = st and st.czxid or nil
  end
  return self._token
end

function Message:on_lost(fn)
  check.object(self, Message, "message", "on_lost")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_lost", 1, "expected a function (or nil to remove the handler), got " .. check.describe(fn))
  end
  self._on_lost = fn
  return self
end

-- Messages whose fn runs, per client, told of the session's states by one hook per client.
local running_msgs = setmetatable({}, { __mode = "k" }) -- client -> { [message] = true }
local function tell_msg(m, state, why)
  if m._lost or m._done then return end
  if state == "LOST" then m._lost = why or "session" end
  local fn = m._on_lost
  if not fn then return end
  local ok, err = pcall(fn, state, m, state == "LOST" and m._lost or nil)
  if not ok then R.log(m._client, "error", ("on_lost handler of %s failed (%s): %s"):format(tostring(m), state,
    tostring(err))) end
end
local function track_msg(client, m)
  local set = running_msgs[client]
  if not set then
    set = setmetatable({}, { __mode = "k" })
    running_msgs[client] = set
    R.on_session(client, function(state)
      for msg in pairs(set) do
        if state == "SUSPENDED" then tell_msg(msg, "SUSPENDED")
        elseif state == "EXPIRED" then tell_msg(msg, "LOST")
        elseif state == "CONNECTED" then
          tell_msg(msg, client:session() == msg._sid and "RECONNECTED" or "LOST")
        end
      end
    end)
  end
  set[m] = true
end

-- Lua 5.4: fn runs under a to-be-closed guard, so that coroutine.close() on a coroutine suspended
-- inside fn removes the lock node at once (a delete sent without waiting for its answer; the
-- item stays). LuaJIT cannot parse it: there the lock node goes with the session.
local guarded_pcall = (loadstring or load)([[
  local pcall, setmetatable = ...
  return function(fn, items, m, on_close)
    local finished = false
    local guard <close> = setmetatable({}, { __close = function() if not finished then on_close() end end })
    local ok, err = pcall(fn, items, m)
    finished = true
    return ok, err
  end
]])
guarded_pcall = guarded_pcall and guarded_pcall(pcall, setmetatable)

-- In the background: delete `lock` if (and only if) it is session `sid`'s ephemeral, sent as
-- soon as the client is connected and again after a connection loss, up to CLEAN_TRIES times.
-- (After a create whose answer was lost the node may be another consumer's: never delete that.)
local CLEAN_TRIES = 10
-- again: no answer (zklock.outcome_unknown) while the session lives (else the node went with it)
local CLEAN_AGAIN = setmetatable({}, { __index = function(_, st)
  return core.outcome_unknown(st) and st ~= core.errno.ESESSION and st ~= core.errno.ECLOSED
end })
local function clean_lock(client, lock, sid, tries)
  tries = tries or 1
  if client.state == "CLOSED" or not sid then return end
  local function again(st)
    if CLEAN_AGAIN[st] and tries < CLEAN_TRIES then return clean_lock(client, lock, sid, tries + 1) end
    if CLEAN_AGAIN[st] then
      R.log(client, "warn", ("queue lock node %s could not be removed; it goes with the session"):format(lock))
    end
  end
  R.background(client, core.OP_EXISTS, lock, nil, 0, -1, function(st, res)
    if st ~= 0 then return again(st) end
    if not (res and res.ephemeral_owner == sid) or client.state == "CLOSED" then return end -- not ours
    R.background(client, core.OP_DELETE, lock, nil, 0, res.version or -1, function(dst)
      if dst ~= 0 then again(dst) end
    end)
  end)
end

-- Delete our own lock node: only when it is this session's ephemeral (after a create whose
-- answer was lost it may be someone else's). When that cannot be done now (no answer), it is
-- done in the background; a lost session takes the node anyway.
function Queue:_unlock(lock)
  local client = self.client
  if client.state == "CLOSED" then return end
  local sid = client:session()
  local st, _, code = client:exists(lock)
  if st and sid and st.ephemeral_owner == sid then
    local ok, _, dcode = client:delete(lock, st.version)
    if ok or dcode == "ZNONODE" or dcode == "ZBADVERSION" then return end
  elseif st ~= nil or code == "ZNONODE" then
    return -- gone, or not ours
  end
  clean_lock(client, lock, sid)
end

-- One candidate in lock-safe mode: lock it (ephemeral <lock_path>/<name>), read it, run fn,
-- then remove item and lock node in one fenced multi.
-- -> items, name | false (locked or taken by another consumer) | "again" | nil, msg, code[, data]
function Queue:_try_locked(name, ms, fn)
  local client = self.client
  local node = self.path .. "/" .. name
  local lock = self.lock_path .. "/" .. name
  local sid = client:session()
  local wc, msg, code = start(client, core.OP_CREATE, lock, ms, "", core.CREATE_EPHEMERAL)
  if not wc then return nil, msg, code end
  -- a coroutine that goes away while the create is in flight leaves no lock node behind
  wc.orphan = function(st) if st == 0 then R.discard(client, lock) end end
  local wg
  wg, msg, code = start(client, core.OP_GET, node, ms)
  if wg then
    wg.orphan = function() -- gone while waiting for the get: the lock (made, or in flight) goes too
      if not wc.done then client:abandon(wc)
      elseif wc.status == 0 then R.discard(client, lock) end
    end
  end
  await(client, wc)
  if wg then await(client, wg) end
  if closed(wc) or (wg and closed(wg)) then return E.fail("ECLOSED", "the client was closed") end
  if wc.status == core.errno.ZNODEEXISTS then return "locked" end -- another consumer has it
  if wc.status == core.errno.ZNONODE then
    -- no lock path yet: make it (persistent, as Curator's consumers expect it to stay)
    local _, cmsg, ccode = client:create(self.lock_path, nil, { parents = true })
    if ccode and ccode ~= "ZNODEEXISTS" then return nil, cmsg, ccode end
    return "again"
  end
  if wc.status ~= 0 then
    -- unknown outcome (no answer): the node may be ours; remove it if so, and give up. The item
    -- itself was not touched: it stays for the next take.
    local r, m, c = fail(wc.status, "take (locking " .. lock .. ")", node, ms,
      "the item was not taken (this lock node, if the server made it, is removed in the background)")
    if c ~= "ESESSION" then clean_lock(client, lock, sid) end -- in the background: no answer now
    return r, m, c
  end
  if not wg then self:_unlock(lock) return nil, msg, code end
  if wg.status == core.errno.ZNONODE then self:_unlock(lock) return false end -- consumed meanwhile
  if wg.status ~= 0 then
    self:_unlock(lock)
    return fail(wg.status, "take", node, ms)
  end
  local m = setmetatable({ name = name, node = node, lock = lock, _client = client, _sid = sid }, Message)
  m._guard = { node = lock, what = "the lock of queue item " .. name, live = function()
    R.refresh(client)
    if client.state == "CLOSED" or m._lost == "max_hold" then return false end
    return client:session() == sid
  end }
  local data = (wg.result and wg.result.data) or ""
  local items, why = decode(data)
  local t
  if items and fn then
    local ok, err
    track_msg(client, m)
    local timer
    if self.max_hold then
      -- bounded: once max_hold passes, LOST ("max_hold") is reported, then the lock node goes and
      -- the item is free for the other consumers; fn's fenced writes and the removal are refused
      timer = watch.timer(client, self.max_hold * 1000, function()
        if m._done or m._lost then return end
        R.log(client, "warn", ("the lock of queue item %s held for its max_hold of %g s: releasing it")
          :format(check.short(node), self.max_hold))
        tell_msg(m, "LOST", "max_hold")
        if client.state ~= "CLOSED" then clean_lock(client, lock, sid) end
      end)
    end
    if guarded_pcall then
      ok, err = guarded_pcall(fn, items, m, function()
        if client.state ~= "CLOSED" then start(client, core.OP_DELETE, lock, ms, nil, 0) end
      end)
    else
      ok, err = ypcall(fn, items, m)
    end
    m._done = true
    running_msgs[client][m] = nil
    if timer then watch.cancel_timer(client, timer) end
    if not ok then
      -- the item stays where it is (for the next consumer); only our lock goes
      pcall(self._unlock, self, lock)
      error(err, 0)
    end
    if client.state == "CLOSED" then
      -- fn closed the client: nothing can be removed any more; the lock node went with the session
      return E.fail("ECLOSED", ("queue item %s: the client was closed inside fn; the item was not removed (it"
        .. " stays for another consumer)"):format(check.short(node)))
    end
    if m._txn and require("zklock.txn").is_open(m._txn) then t = m._txn end
  end
  t = t or require("zklock.txn").fenced(client, m._guard)
  t:delete(node):delete(lock)
  local r, em, ec = t:commit(ms > 0 and ms / 1000 or nil)
  if not r then
    if ec == "ELOST" then
      em = E.message("ELOST", ("queue item %s: this consumer's lock node %s went (%s) before"
        .. " the item was removed; the item stays for another consumer, and nothing of this transaction was"
        .. " written"):format(check.short(node), check.short(lock), m._lost == "max_hold"
          and ("fn held it past the queue's max_hold of %g s"):format(self.max_hold) or "its session ended"))
    elseif core.outcome_unknown(ec) then
      -- the removal got no answer: the server may have applied it (item gone, fn's writes
      -- made), or not (the item stays, and its lock goes: here, or with the session)
      em = E.message(ec, ("queue item %s: the removal got no answer (%s); outcome unknown: the item may have"
        .. " been taken (removed, with fn's writes) or may stay for another consumer"):format(check.short(node),
        E.strerror(ec)))
    end
    -- (ELOST, ESESSION, ECLOSED: the lock node went with the session)
    if ec ~= "ELOST" and ec ~= "ESESSION" and ec ~= "ECLOSED" then pcall(self._unlock, self, lock) end
    return nil, em, ec
  end
  if not items then
    return E.fail("EFORMAT", ("queue item %s is not a Curator DistributedQueue message (%s); it was removed"
      .. " (its bytes are the 4th result)"):format(check.short(node), why), data)
  end
  return items, name
end

-- Take the next cached candidate, or false when the cache is used up.
-- -> data, name | false (cache used up) | nil, msg, code[, data]
function Queue:_take_cached(ms, fn)
  while self._next <= #self._cache do
    local name = self._cache[self._next]
    self._next = self._next + 1
    local a, b, c, d
    if self.lock_path then
      a, b, c, d = self:_try_locked(name, ms, fn)
      if a == "again" then -- the lock path was just made: once more
        a, b, c, d = self:_try_locked(name, ms, fn)
        if a == "again" then a = false end
      end
    else
      a, b, c, d = self:_try_plain(name, ms)
    end
    if a == "locked" then
      self._blocked = true
    elseif a ~= false then
      return a, b, c, d
    end
  end
  return false
end

-- A take whose coroutine dies (closed, killed by its host, collected) while its get+delete are
-- in flight would lose the item: the delete removes it and nobody receives it. The waiters'
-- orphan functions (run once both answers came, only for a coroutine that went away: see
-- Client:abandon) put such an item back, at the tail of the queue, in the background.
function Queue:_keep_if_orphaned(wg, wd)
  local client, path = self.client, self.path
  local got, del, done
  local function settle()
    if got == nil and wg.done then got = { wg.status, wg.result } end
    if del == nil and wd.done then del = wd.status end
    if done or got == nil or del == nil then return end
    done = true
    if del ~= 0 then return end -- not ours (another consumer took it), or not removed
    if got[1] ~= 0 then
      R.log(client, "warn", ("queue %s: an item taken by a coroutine that went away could not be read; it is"
        .. " lost"):format(check.short(path)))
      return
    end
    local data = (got[2] and got[2].data) or ""
    local function warn(why)
      R.log(client, "warn", ("queue %s: could not put back an item its taker left: %s"):format(check.short(path), why))
    end
    -- CREATE_PARENTS: the emptied queue node may have been reaped meanwhile
    local id, msg = R.background(client, core.OP_CREATE, path .. "/" .. (self.curator and CPREFIX or PREFIX), data,
      core.CREATE_SEQUENTIAL + core.CREATE_PARENTS, -1, function(st)
        if st ~= 0 then warn(E.message(st)) end
      end)
    if not id then warn(tostring(msg)) end
  end
  wg.orphan = function(st, res)
    got = { st, res }
    client:abandon(wd) -- its answer then reaches settle() too
    settle()
  end
  wd.orphan = function(st)
    del = st
    settle()
  end
end

local function check_fn(self, fname, argn, fn)
  if fn == nil then
    if self.lock_path then
      check.argerror(fname, argn, "fn: a lock-safe queue (lock_path) needs fn(items, message): the item is removed"
        .. " only after fn returned; without fn it would be removed before it is processed (use a queue without"
        .. " lock_path for that)")
    end
    return
  end
  if type(fn) ~= "function" then
    check.argerror(fname, argn, "fn: expected nil or a function(items, message), got " .. check.describe(fn))
  end
  if not self.lock_path then
    check.argerror(fname, argn, "fn: needs a queue made with { format = \"curator\", lock_path = ... } (without a"
      .. " lock path an item is removed before it is processed: take it and process it yourself)")
  end
end

-- q:poll([fn]) -> data, name | nil (the queue is empty) | nil, msg, code
function Queue:poll(fn)
  check_self(self, "poll")
  check_fn(self, "poll", 1, fn)
  return self:_poll(R.op_ms(self.client), fn)
end

function Queue:_poll(ms, fn)
  while true do -- ends: each round takes an item, or lists a queue others emptied meanwhile
    local data, name, code, raw = self:_take_cached(ms, fn)
    if data then return data, name end
    if data == nil then return nil, name, code, raw end
    if self._blocked then self._blocked = nil return nil end -- the items left are locked by others
    local ok, msg, ecode = self:_list(false)
    if not ok then return nil, msg, ecode end
    if #self._cache == 0 then return nil end
  end
end

-- q:take(timeout[, fn]) -> data, name | nil, msg, code ("ETIMEDOUT" when nothing came in time)
--   timeout: seconds, nil = no limit, 0 = poll once. fn(items, message): lock-safe queues only,
--   runs while the item is locked; the item is removed after it returned.
function Queue:take(timeout, fn)
  check_self(self, "take")
  local ms = check.timeout("take", 1, timeout)
  check_fn(self, "take", 2, fn)
  local made = {}
  local a, b, c, d = self:_take(ms, fn, made)
  R.unmade(self.client, made.token)
  R.done_waiting(self.client, made.rec)
  if a == nil and made.token and self.client.state ~= "CLOSED" then
    -- the server reaps a container only once it had a child: one made for this take that got
    -- nothing would stay forever. Delete it (in the background; refused if an item came in).
    -- client:close deletes it while the take waits (recipe.made), the reaper of dead owners when
    -- the take's coroutine dies (recipe.waiting).
    R.background(self.client, core.OP_DELETE, self.path, nil, 0, -1, function() end)
  end
  return a, b, c, d
end

function Queue:_take(ms, fn, made)
  local client = self.client
  local deadline = ms >= 0 and now() + ms or math.huge
  local op_ms = R.op_ms(client)
  local stale = (op_ms > 0 and op_ms or 30000) + 1000 -- a listing this old was given up
  local function timed_out()
    return E.fail("ETIMEDOUT", ("queue %s: no item within %g s"):format(check.short(self.path), ms / 1000))
  end
  -- a take with a timeout waits for a listing's answer no longer than the timeout leaves (a
  -- silent server held take(1) for the whole op_timeout); take(0) and take() wait op_timeout
  local function bound()
    if ms <= 0 then return nil end
    local left = deadline - now()
    if op_ms < 0 or left < op_ms then return math.max(left, 1) / 1000 end
    return nil
  end
  local function list(with_watch)
    local ok, msg, code = self:_list(with_watch, bound())
    if not ok and code == "ETIMEDOUT" and now() >= deadline then return timed_out() end
    return ok, msg, code
  end
  while true do
    local data, name, code, raw = self:_take_cached(op_ms, fn)
    if data then return data, name end
    if data == nil then return nil, name, code, raw end
    if self._blocked then
      -- lock-safe: the items left are locked by other consumers. Wait for a change of the queue
      -- (its children watch), but at most BLOCKED_WAIT: a consumer that dies leaves its item in
      -- place (its lock node goes, the queue's children do not change).
      self._blocked = nil
      if now() >= deadline then return timed_out() end
      local ok, wobj, wcode = list(true)
      if not ok then return nil, wobj, wcode end
      data, name, code, raw = self:_take_cached(op_ms, fn)
      if data then return data, name end
      if data == nil then return nil, name, code, raw end
      local left = deadline - now()
      if self._blocked and left <= 0 then return timed_out() end
      if self._blocked and wobj then
        local what, wmsg, wc = wobj:wait(math.min(left, BLOCKED_WAIT) / 1000)
        if not what and wc ~= "ETIMEDOUT" then return nil, wmsg, wc end
      end
    end
    local wobj, missing = self._empty, false
    if self._listing and now() - self._listing < stale then
      -- another coroutine of this queue object is listing: use its listing, not one more
      -- (the coroutines woken by one watch would otherwise all list at once)
      if now() >= deadline then return timed_out() end
      client:sleep(0.002)
      wobj = false
    elseif not (wobj and wobj:fired() == nil) then
      -- used up: list again; only an empty listing is repeated with the shared watch (a watch
      -- armed by a listing that has items would only fire at our own next delete)
      self._listing, self._empty = now(), nil
      local ok, msg
      ok, msg, missing = list(false)
      if ok and #self._cache == 0 and not missing then ok, msg, missing = list(true) end
      self._listing = nil
      if not ok then return nil, msg, missing end
      wobj = msg
      if #self._cache == 0 and wobj then self._empty = wobj end
    end
    -- else: the last listing of this queue object found it empty and its watch has not fired
    if wobj ~= false and #self._cache < self._next then
      local left = deadline - now()
      if left <= 0 then return timed_out() end
      if missing then
        -- no queue node to watch yet: make it (a container, as Curator does) and list again
        -- (Curator's format: persistent, as Curator's consumers keep a watch on it). A container
        -- this take made is deleted again if the take ends without an item (see Queue:take).
        -- Registered before the create is sent: a close or a dying coroutine while it is in flight
        -- still deletes it (the delete goes out after the create on the same session).
        local path, tok, rec = self.path, nil, nil
        if not self.curator and not made.token then
          local function discard() R.background(client, core.OP_DELETE, path, nil, 0, -1, function() end) end
          tok = R.made(client, path)
          rec = R.waiting(client, "queue take", path, function()
            R.unmade(client, tok)
            discard()
          end, function(st) if st == 0 then discard() end end)
        end
        local p, cmsg, ccode = R.create(client, path, nil, { container = not self.curator, parents = true }, rec)
        if p and tok then
          made.token, made.rec = tok, rec
        elseif tok then
          R.unmade(client, tok)
          R.done_waiting(client, rec)
        end
        if ccode and ccode ~= "ZNODEEXISTS" then return nil, cmsg, ccode end
      elseif wobj then
        local what, wmsg, wcode = wobj:wait(left == math.huge and nil or left / 1000)
        if not what and wcode ~= "ETIMEDOUT" then return nil, wmsg, wcode end
      end
    end
  end
end

-- q:put(data) -> node name ("qn-0000000012") | nil, msg, code
--   Curator's format: data is one item (a string) or a list of items (one message).
function Queue:put(data)
  check_self(self, "put")
  local node = self.path .. "/" .. PREFIX
  if self.curator then
    if type(data) == "table" then
      if #data == 0 then check.argerror("put", 1, "items: expected a non-empty list of strings, got an empty table") end
      for i, it in ipairs(data) do
        if type(it) ~= "string" then
          check.argerror("put", 1, ("items: expected a list of strings, item %d is %s"):format(i, check.describe(it)))
        end
      end
      data = encode(data)
    elseif type(data) == "string" then
      data = encode({ data })
    else
      check.argerror("put", 1, "data: expected a string (one item) or a list of strings (one message), got "
        .. check.describe(data))
    end
    node = self.path .. "/" .. CPREFIX
  elseif type(data) ~= "string" then
    check.argerror("put", 1, "data: expected a string (the item's bytes), got " .. check.describe(data))
  end
  -- one request; only a missing queue node costs the parents' creates (made as containers;
  -- Curator's format: the queue node itself persistent, as Curator makes it)
  local p, msg, code = self.client:create(node, data, { sequential = true })
  if code == "ZNONODE" then
    if self.curator then
      local _, cmsg, ccode = self.client:create(self.path, nil, { parents = true })
      if ccode and ccode ~= "ZNODEEXISTS" then return nil, cmsg, ccode end
      p, msg, code = self.client:create(node, data, { sequential = true })
    else
      p, msg, code = self.client:create(node, data, { sequential = true, parents = true })
    end
  end
  if not p then return nil, msg, code end
  return (p:match("([^/]*)$"))
end

-- q:peek() -> data, name of the first item | nil (empty) | nil, msg, code. Removes nothing.
function Queue:peek()
  check_self(self, "peek")
  local names, msg, code = self.client:children(self.path)
  if not names then
    if code == "ZNONODE" then return nil end
    return nil, msg, code
  end
  for _, name in ipairs((self.curator and csorted or sorted)(names)) do
    local data, gmsg, gcode = self.client:get(self.path .. "/" .. name)
    if data and self.curator then
      local items, why = decode(data)
      if items then return items, name end
      return E.fail("EFORMAT", ("queue item %s/%s is not a Curator DistributedQueue message (%s)")
        :format(check.short(self.path), name, why), data)
    end
    if data then return data, name end
    if gcode ~= "ZNONODE" then return nil, gmsg, gcode end
  end
  return nil
end

-- q:size() -> number of items | nil, msg, code
function Queue:size()
  check_self(self, "size")
  local names, msg, code = self.client:children(self.path)
  if not names then
    if code == "ZNONODE" then return 0 end
    return nil, msg, code
  end
  return #(self.curator and csorted or sorted)(names)
end

function Queue:__tostring()
  if self.curator then
    return ("zklock.queue(%s, curator%s)"):format(self.path, self.lock_path and ", lock " .. self.lock_path or "")
  end
  return ("zklock.queue(%s)"):format(self.path)
end

local OPTIONS = { format = check.is.oneof("zookeeper", "curator"), lock_path = check.is.string,
                  max_hold = check.is.positive }

-- client:queue(path[, { format = "zookeeper" | "curator", lock_path =, max_hold = }]) -> queue
--   max_hold (seconds, lock-safe queues only): how long one take's fn may hold the item's lock;
--   then the message is lost (its on_lost hears "LOST", msg, "max_hold"), its lock node deleted,
--   and the item goes back to the other consumers; fn's fenced writes are refused (ELOST).
function Client:queue(path, opts)
  check.open(self, "queue")
  if type(path) ~= "string" then
    check.argerror("queue", 1, "queue path: expected a string like \"/queues/name\", got " .. check.describe(path))
  end
  local why = core.path_error(path)
  if why then check.argerror("queue", 1, ("queue path %s, got %s"):format(why, check.describe(path))) end
  opts = check.options("queue", 2, opts, OPTIONS)
  local curator = opts.format == "curator"
  local lock_path = opts.lock_path
  if lock_path ~= nil then
    if not curator then
      check.argerror("queue", 2, "option 'lock_path': only with format = \"curator\" (Curator's DistributedQueue)")
    end
    local lwhy = core.path_error(lock_path)
    if lwhy then
      check.argerror("queue", 2, ("option 'lock_path': lock path %s, got %s"):format(lwhy, check.describe(lock_path)))
    end
    if lock_path == path or lock_path:sub(1, #path + 1) == path .. "/" then
      check.argerror("queue", 2, ("option 'lock_path': must not be the queue path or under it, got %s")
        :format(check.describe(lock_path)))
    end
  end
  if opts.max_hold ~= nil and lock_path == nil then
    check.argerror("queue", 2, "option 'max_hold': only with lock_path (a lock-safe queue: it bounds how long fn"
      .. " holds an item's lock)")
  end
  return setmetatable({ client = self, path = path, curator = curator or nil, lock_path = lock_path, _cache = {},
                        _next = 1, max_hold = opts.max_hold }, Queue)
end

return { Queue = Queue, Message = Message, encode = encode, decode = decode }
