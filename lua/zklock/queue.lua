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
--     every waiting coroutine of that client (zklock.watch shares reads per path and kind); the
--     watch is armed only by a listing that found the queue empty (listed again with the watch
--     after a plain listing found nothing), so a busy queue costs no watch events.
local core = require("zklock.core")
local check = require("zklock.check")
local R = require("zklock.client").recipe
local Client = require("zklock.client").Client

local now = core.now

local Queue = {}
Queue.__index = Queue
Queue.__name = "zklock.queue"

local PREFIX = "qn-"

local function fail(st, what, path, ms)
  local name = core.errname(st)
  local text = core.strerror(st)
  if st == core.errno.ETIMEDOUT then
    text = ("no answer within %g s"):format(ms / 1000)
  elseif st == core.errno.ESESSION then
    text = "the ZooKeeper session was lost while it waited"
  end
  return nil, ("%s: queue %s %s: %s"):format(name, what, check.short(path), text), name
end

-- Start core op `optype` on path (no watch) -> waiter | nil, msg, code
local function start(client, optype, path, ms, data, flags)
  local id, msg, code = R.core(client):op(optype, path, data, flags or 0, -1, 0, ms > 0 and ms or 0)
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

local function check_self(self, fname)
  check.object(self, Queue, "queue", fname)
  check.open(self.client, fname)
end

-- List the queue (optionally arming the shared children watch) and refill the cache.
-- -> true[, watch] | nil, msg, code. A missing queue path is an empty queue (watch = nil).
function Queue:_list(with_watch)
  local names, wobj, code = self.client:children(self.path, { watch = with_watch or nil })
  if not names then
    if code == "ZNONODE" then
      self._cache, self._next = {}, 1
      return true, nil, true
    end
    return nil, wobj, code
  end
  self._cache, self._next = sorted(names), 1
  return true, wobj
end

-- Take the next cached candidate, or nil when the cache is used up. One round trip per try.
-- -> data, name | false (cache used up) | nil, msg, code
function Queue:_take_cached(ms)
  local client = self.client
  while self._next <= #self._cache do
    local name = self._cache[self._next]
    self._next = self._next + 1
    local node = self.path .. "/" .. name
    local wg, msg, code = start(client, core.OP_GET, node, ms)
    if not wg then return nil, msg, code end
    local wd
    wd, msg, code = start(client, core.OP_DELETE, node, ms)
    if not wd then return nil, msg, code end
    self:_keep_if_orphaned(wg, wd)
    await(client, wg)
    await(client, wd)
    if closed(wg) or closed(wd) then return nil, "ECLOSED: the client was closed", "ECLOSED" end
    if wd.status == 0 then
      -- ours: the get was answered before the delete, so it read this very node
      if wg.status == 0 then return (wg.result and wg.result.data) or "", name end
      return fail(wg.status, "take (the item was removed, its data could not be read)", node, ms)
    elseif wd.status ~= core.errno.ZNONODE then
      local r, m, c = fail(wd.status, "take", node, ms)
      if c == "ETIMEDOUT" or c == "ZCONNECTIONLOSS" or c == "ESESSION" then
        m = m .. " (the item may have been taken and lost)"
      end
      return r, m, c
    end
    -- ZNONODE: another consumer took it; try the next
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
    local id, msg = R.core(client):op(core.OP_CREATE, path .. "/" .. PREFIX, data,
      core.CREATE_SEQUENTIAL + core.CREATE_PARENTS, -1, 0, 0) -- the emptied queue node may be reaped
    if not id then
      R.log(client, "warn", ("queue %s: could not put back an item its taker left: %s"):format(check.short(path),
        tostring(msg)))
      return
    end
    R.orphan(client, id, function(st)
      if st ~= 0 then
        R.log(client, "warn", ("queue %s: could not put back an item its taker left: %s"):format(check.short(path),
          core.strerror(st)))
      end
    end)
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

-- q:poll() -> data, name | nil (the queue is empty) | nil, msg, code
function Queue:poll()
  check_self(self, "poll")
  return self:_poll(R.op_ms(self.client))
end

function Queue:_poll(ms)
  while true do -- ends: each round takes an item, or lists a queue others emptied meanwhile
    local data, name, code = self:_take_cached(ms)
    if data then return data, name end
    if data == nil then return nil, name, code end
    local ok, msg, ecode = self:_list(false)
    if not ok then return nil, msg, ecode end
    if #self._cache == 0 then return nil end
  end
end

-- q:take(timeout) -> data, name | nil, msg, code ("ETIMEDOUT" when nothing came in time)
--   timeout: seconds, nil = no limit, 0 = poll once.
function Queue:take(timeout)
  check_self(self, "take")
  local ms = check.timeout("take", 1, timeout)
  local client = self.client
  local deadline = ms >= 0 and now() + ms or math.huge
  local op_ms = R.op_ms(client)
  local stale = (op_ms > 0 and op_ms or 30000) + 1000 -- a listing this old was given up
  local function timed_out()
    return nil, ("ETIMEDOUT: queue %s: no item within %g s"):format(check.short(self.path), ms / 1000), "ETIMEDOUT"
  end
  while true do
    local data, name, code = self:_take_cached(op_ms)
    if data then return data, name end
    if data == nil then return nil, name, code end
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
      ok, msg, missing = self:_list(false)
      if ok and #self._cache == 0 and not missing then ok, msg, missing = self:_list(true) end
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
        local _, cmsg, ccode = client:create(self.path, nil, { container = true, parents = true })
        if ccode and ccode ~= "ZNODEEXISTS" then return nil, cmsg, ccode end
      elseif wobj then
        local what, wmsg, wcode = wobj:wait(left == math.huge and nil or left / 1000)
        if not what and wcode ~= "ETIMEDOUT" then return nil, wmsg, wcode end
      end
    end
  end
end

-- q:put(data) -> node name ("qn-0000000012") | nil, msg, code
function Queue:put(data)
  check_self(self, "put")
  if type(data) ~= "string" then
    check.argerror("put", 1, "data: expected a string (the item's bytes), got " .. check.describe(data))
  end
  -- one request; only a missing queue node costs the parents' creates (made as containers)
  local node = self.path .. "/" .. PREFIX
  local p, msg, code = self.client:create(node, data, { sequential = true })
  if code == "ZNONODE" then p, msg, code = self.client:create(node, data, { sequential = true, parents = true }) end
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
  for _, name in ipairs(sorted(names)) do
    local data, gmsg, gcode = self.client:get(self.path .. "/" .. name)
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
  return #sorted(names)
end

function Queue:__tostring()
  return ("zklock.queue(%s)"):format(self.path)
end

-- client:queue(path) -> queue
function Client:queue(path)
  check.open(self, "queue")
  if type(path) ~= "string" then
    check.argerror("queue", 1, "queue path: expected a string like \"/queues/name\", got " .. check.describe(path))
  end
  local why = core.path_error(path)
  if why then check.argerror("queue", 1, ("queue path %s, got %s"):format(why, check.describe(path))) end
  return setmetatable({ client = self, path = path, _cache = {}, _next = 1 }, Queue)
end

return { Queue = Queue }
