-- zklock.cache: a node, its children or the tree below it, held in memory and kept current by
-- ZooKeeper's one-shot watches (client:cache). The ZooKeeper C client 3.8 has no persistent
-- watches, so every node in the cache carries a data watch (armed by its get) and, above the
-- depth limit, a children watch (armed by its listing); a watch that fires is armed again by
-- the read that follows it. A missing root carries an exists watch instead.
--
-- Every answer is judged against what the cache already reported, per node:
--   * another czxid than the cached one: the node was deleted and made again (removed, added;
--     the version alone would miss it: it restarts at 0);
--   * the same czxid and a higher mzxid: updated; the same or a lower mzxid: nothing (a
--     duplicate, or an answer older than one already applied);
--   * ZNONODE, or a parent's listing without it: removed, with everything below it.
-- A node's get and listing are separate requests, so a node deleted and made again between them
-- (a container directory the server reaped and a create made again) can get a listing that found
-- no node and a get that found the new one, or the reverse: a cached node whose listing did not
-- arm a watch is listed again, and a listing answered while its node was not cached is dropped
-- with its watch (the node's next sync lists it again). A get that finds another incarnation than
-- the cached one drops the watches of the listing answered before it and of the reads below it
-- (they stand for what went with the old one): the new one is listed and read below again.
-- One session's answers arrive in the order the server applied them, so the cache never goes
-- back in time. After a connection loss on the same session the watches survive (the client
-- registers them again and the server fires those whose nodes changed meanwhile): the cache
-- sends one barrier read and reports `initialized` once it and the reads the notifications
-- started are answered. After a new session the watches are gone: it reads every node again,
-- arms everything, and reports `initialized` once that round is in.
--
-- The module uses the client's public calls, zklock.internal.watch's callback form (the one recipes use)
-- and the recipe interface (background reads, the log); no other module's fields.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local watch = require("zklock.internal.watch")
local R = require("zklock.internal.recipe")

local M = {}

local ZNONODE = core.errno.ZNONODE
local DEFAULT_MAX_NODES = 100000
-- The watch budget. The C client (3.8) sends every watch it holds again in ONE SetWatches
-- message when it reconnects on the same session, and a server drops a message longer than its
-- jute.maxbuffer (1 MiB by default): the connection closes, the client retries with the same
-- message, for ever. That message is 28 bytes (request header 8, relative zxid 8, three vector
-- lengths 12) and, per watch, 4 + the path's length (with the chroot), listed once per path in
-- each of its three lists (data, exists, children) however many watchers share the path.
-- Every cache of a client draws from one account (the client's max_watch_bytes): a cached node
-- holds its data watch, and above the depth limit a children watch (a node at the limit is not
-- listed: no children watch). A (kind, path) several caches hold counts once. The client's
-- other watches armed through zklock.internal.watch (get/exists/children with watch = true,
-- elections, members, revocation, a missing root's exists watch) count while they are armed;
-- the core's own (a lock waiter's watch on its predecessor, a semaphore's children watch) are
-- not counted: few and short. A cache's own max_watch_bytes caps its share alone. A cache that
-- stops or closes gives its share back: forgetting a watch (watch.forget) has the ZooKeeper
-- client drop its watcher, so the next SetWatches leaves it out too.
local SETWATCHES_HEADER = 28

-- client -> { bytes = counted bytes of the caches' watches, refs = key -> caches holding it }
local accounts = setmetatable({}, { __mode = "k" })
local function account(client)
  local a = accounts[client]
  if not a then
    a = { bytes = 0, refs = {} }
    accounts[client] = a
  end
  return a
end

local Cache = {}
Cache.__index = Cache
Cache.__name = "zklock.cache"
M.Cache = Cache

-- client -> (cache -> true): the caches one session handler serves (weak both ways)
local by_client = setmetatable({}, { __mode = "k" })

local function log(self, level, msg)
  if self.client.state ~= "CLOSED" then R.log(self.client, level, ("cache %s: %s"):format(self.path, msg)) end
end

local function join(parent, name)
  return parent == "/" and "/" .. name or parent .. "/" .. name
end

local function parent_of(path)
  local p = path:match("^(.*)/[^/]*$")
  return (p == nil or p == "") and "/" or p
end

-- how far below the root path is (0: the root)
local function depth_of(self, path)
  if path == self.path then return 0 end
  local rest = self.path == "/" and path or path:sub(#self.path + 1)
  local _, n = rest:gsub("/", "")
  return n
end

local function emit(self, event, path, stat, data)
  self._events = self._events + 1
  local fn = self._fn
  if not fn then return end
  local ok, err = pcall(fn, event, self, path, stat, data)
  if not ok then log(self, "error", ("on_change handler failed (%s %s): %s"):format(event, path, tostring(err))) end
end

-- a stat as reported: a copy of the fields a user needs
local function stat_of(res)
  return { czxid = res.czxid, mzxid = res.mzxid, pzxid = res.pzxid, version = res.version,
           cversion = res.cversion, ephemeral_owner = res.ephemeral_owner,
           num_children = res.num_children, ctime = res.ctime, mtime = res.mtime }
end

local sync, fail

-- the watches node path holds in the account: its data watch, and a children watch when it is
-- above the depth limit -> the bytes of one, listed
local function node_watches(self, path)
  return R.watch_cost(self.client, path), depth_of(self, path) < self._depth
end

-- Count node path's watches (before it is added) -> nil | the error (the budget would pass)
local function charge(self, path)
  local one, listed = node_watches(self, path)
  local own = listed and 2 * one or one
  local a = account(self.client)
  local dk, ck = "d\0" .. path, "c\0" .. path
  local add = (a.refs[dk] and 0 or one) + ((listed and not a.refs[ck]) and one or 0)
  if self._max_watch_bytes and self._wbytes + own > self._max_watch_bytes then
    return ("ERANGE: cache %s: its watches would pass its max_watch_bytes = %d bytes (at %s, %d nodes):"
      .. " the client sends them all in one message when it reconnects, which a server drops past"
      .. " its jute.maxbuffer; the cache stopped following the tree")
      :format(check.short(self.path), self._max_watch_bytes, check.short(path), self._count)
  end
  local limit, other = R.max_watch_bytes(self.client), watch.bytes(self.client)
  if SETWATCHES_HEADER + a.bytes + add + other > limit then
    return ("ERANGE: cache %s: the client's watches would pass its max_watch_bytes = %d bytes (at %s,"
      .. " %d nodes; this cache holds %d bytes, the client's other caches %d, its other watches %d):"
      .. " the client sends them all in one message when it reconnects, which a server drops past"
      .. " its jute.maxbuffer; the cache stopped following the tree")
      :format(check.short(self.path), limit, check.short(path), self._count, self._wbytes,
        math.max(0, a.bytes - self._wbytes), other)
  end
  a.refs[dk] = (a.refs[dk] or 0) + 1
  if listed then a.refs[ck] = (a.refs[ck] or 0) + 1 end
  a.bytes = a.bytes + add
  self._wbytes = self._wbytes + own
end

-- Give node path's watches back (node n: its record)
local function refund(self, path, n)
  if not n.charged then return end
  n.charged = nil
  local one, listed = node_watches(self, path)
  local a = account(self.client)
  for _, k in ipairs(listed and { "d\0" .. path, "c\0" .. path } or { "d\0" .. path }) do
    local r = a.refs[k] - 1
    if r == 0 then
      a.refs[k] = nil
      a.bytes = a.bytes - one
    else
      a.refs[k] = r
    end
  end
  self._wbytes = self._wbytes - (listed and 2 * one or one)
end

-- every node's share back (the cache stopped or closed)
local function refund_all(self)
  for path, n in pairs(self._nodes) do refund(self, path, n) end
end

local function track(self, path, depth)
  local t = self._track[path]
  if not t then
    t = { depth = depth }
    self._track[path] = t
  end
  return t
end

-- forget the tracking record of a path that is neither cached nor watched
local function untrack(self, path)
  local t = self._track[path]
  if t and not t.dw and not t.cw and not self._nodes[path] and path ~= self.path then self._track[path] = nil end
end

local function read_done(self, gen)
  if gen ~= self._gen then return end
  self._inflight = self._inflight - 1
  if self._inflight == 0 and self._syncing and not self._failed and not self._closed then
    self._syncing = false
    self._initialized = true
    emit(self, "initialized", self.path)
    watch.notify(self._changed)
  end
end

-- remove path and everything below it (deepest first), reporting each
local function remove(self, path)
  local n = self._nodes[path]
  if not n then return end
  local names = {}
  for name in pairs(n.children) do names[#names + 1] = name end
  table.sort(names)
  for i = #names, 1, -1 do remove(self, join(path, names[i])) end
  self._nodes[path] = nil
  self._count = self._count - 1
  refund(self, path, n)
  local p = self._nodes[parent_of(path)]
  if p and path ~= self.path then p.children[path:match("([^/]*)$")] = nil end
  emit(self, "removed", path, n.stat, n.data)
  untrack(self, path)
end

local arm_root

-- path is cached as another incarnation than the one its get just found: the listing of it that
-- was answered (applied to the old one, or dropped) and the reads armed below it stand for what
-- goes with the old one. Forget those watches, so that the new one's sync lists it and reads its
-- children again (reads still on their way were sent after this get: they answer for the new one).
local function forget_below(self, path)
  local t = self._track[path]
  if t and t.cw and t.cw.armed then
    watch.forget(self.client, t.cw)
    t.cw = nil
  end
  local n = self._nodes[path]
  if not n then return end
  for name in pairs(n.children) do
    local child = join(path, name)
    local ct = self._track[child]
    if ct and ct.dw and ct.dw.armed then
      watch.forget(self.client, ct.dw)
      ct.dw = nil
    end
    forget_below(self, child)
  end
end

-- a get of path answered (the read that arms its data watch)
local function on_get(self, path, st, res)
  if self._closed or self._failed then return end
  if st == 0 then
    local name = path:match("([^/]*)$")
    local parent = path ~= self.path and self._nodes[parent_of(path)] or nil
    if path ~= self.path and not parent then
      -- its parent left the cache meanwhile: not ours any more (its watch may fire into nothing)
      local t = self._track[path]
      if t and t.dw then watch.forget(self.client, t.dw); t.dw = nil end
      untrack(self, path)
      return
    end
    local n = self._nodes[path]
    if n and res.czxid ~= n.stat.czxid then
      if res.czxid < n.stat.czxid then return end -- an older incarnation: never go back
      forget_below(self, path)
      remove(self, path) -- deleted and made again: removed, then added
      n = nil
    end
    local data = self._keep_data and (res.data or "") or false
    if not n then
      if self._count >= self._max_nodes then
        return fail(self, ("ERANGE: cache %s: more than max_nodes = %d nodes (at %s); the cache stopped"
          .. " following the tree"):format(check.short(self.path), self._max_nodes, check.short(path)))
      end
      local over = charge(self, path)
      if over then return fail(self, over) end
      n = { stat = stat_of(res), data = data, children = {}, charged = true }
      self._nodes[path] = n
      self._count = self._count + 1
      if parent then parent.children[name] = true end
      emit(self, "added", path, n.stat, n.data)
    elseif res.mzxid > n.stat.mzxid then
      n.stat, n.data = stat_of(res), data
      emit(self, "updated", path, n.stat, n.data)
    elseif res.mzxid == n.stat.mzxid and res.pzxid > n.stat.pzxid then
      n.stat = stat_of(res) -- only its children changed: a fresher stat, nothing to report
    end -- else a duplicate or an older answer: dropped
  elseif st == ZNONODE then
    remove(self, path)
    if path == self.path then arm_root(self) else untrack(self, path) end
  elseif st ~= core.errno.ESESSION and st ~= core.errno.ECLOSED then
    log(self, "warn", ("get %s failed: %s (read again at the next resync)"):format(path, core.errname(st)))
  end
end

-- a listing of path answered
local function on_children(self, path, st, res)
  if self._closed or self._failed then return end
  if st ~= 0 then
    if st ~= ZNONODE and st ~= core.errno.ESESSION and st ~= core.errno.ECLOSED then
      log(self, "warn", ("children %s failed: %s (read again at the next resync)"):format(path, core.errname(st)))
    end
    return
  end
  local n = self._nodes[path]
  if not n then return end -- not (or no longer) cached: its get decides
  local listed = {}
  for _, name in ipairs(res.children or {}) do listed[name] = true end
  local gone = {}
  for name in pairs(n.children) do
    if not listed[name] then gone[#gone + 1] = name end
  end
  table.sort(gone)
  for _, name in ipairs(gone) do remove(self, join(path, name)) end
  local depth = depth_of(self, path) + 1
  local names = res.children or {}
  table.sort(names)
  for _, name in ipairs(names) do
    if self._closed or self._failed then return end
    sync(self, join(path, name), depth)
  end
end

-- start a read with a watch: kind "get" or "children"; field "dw" or "cw" of t
local function watched_read(self, path, t, kind, field)
  local gen = self._gen
  local rec
  local handler = kind == "get" and on_get or on_children
  local id, r = watch.start(self.client, kind, kind == "get" and core.OP_GET or core.OP_CHILDREN, path, 0, {
    private = true, counted = true, -- counted by the account (charge)
    on_done = function(st, res)
      if t[field] == rec and st ~= 0 then t[field] = nil end -- nothing armed
      handler(self, path, st, res)
      if st == 0 and t[field] == rec and not self._closed and not self._failed then
        if kind == "children" and not self._nodes[path] then
          -- listed while the node is not cached (deleted and made again between its get and
          -- this listing): the names were not used, so its watch must not stand for them; the
          -- node's next sync lists it again
          watch.forget(self.client, rec)
          t[field] = nil
        elseif kind == "get" and self._nodes[path] then
          -- cached: a listing of it that found no node (sent before it was made again) left no
          -- children watch; list it again (nothing when one is armed or on its way)
          sync(self, path, t.depth)
        end
      end
      read_done(self, gen)
      if st ~= 0 or not t[field] then untrack(self, path) end
    end,
    on_fire = function(st)
      if t[field] ~= rec then return end
      t[field] = nil
      if watch.TYPE_NAMES[st] and not self._closed and not self._failed then
        sync(self, path, t.depth)
      end
      untrack(self, path)
    end,
  })
  if not id then
    log(self, "warn", ("%s %s could not start: %s"):format(kind, path, tostring(r)))
    return
  end
  rec = r
  t[field] = rec
  self._reads = self._reads + 1
  self._inflight = self._inflight + 1
end

-- After a reconnection on the same session: one read without a watch, answered after every
-- notification the server sent for the watches the client registered again (the client sends
-- them first on the new connection, and the server answers one session in order); the reads
-- those notifications started are counted in the round too.
local function barrier(self)
  local gen = self._gen
  local id = R.background(self.client, core.OP_EXISTS, self.path, nil, 0, -1, function() read_done(self, gen) end)
  if not id then return end
  self._reads = self._reads + 1
  self._inflight = self._inflight + 1
end

-- read path (at `depth` below the root) where no watch is armed or being armed
function sync(self, path, depth)
  local t = track(self, path, depth)
  if not t.dw then watched_read(self, path, t, "get", "dw") end
  if depth < self._depth and not t.cw then watched_read(self, path, t, "children", "cw") end
end

-- the root is missing: an exists watch tells when it is made
function arm_root(self)
  if self._rw or self._closed or self._failed then return end
  local gen = self._gen
  local rec
  local id, r = watch.start(self.client, "exists", core.OP_EXISTS, self.path, 0, {
    private = true,
    on_done = function(st)
      if self._rw == rec and st ~= 0 and st ~= ZNONODE then self._rw = nil end
      -- made meanwhile: read it (the exists watch then fires at its next change, harmlessly)
      if st == 0 and not self._closed and not self._failed then sync(self, self.path, 0) end
      read_done(self, gen)
    end,
    on_fire = function(st)
      if self._rw ~= rec then return end
      self._rw = nil
      if watch.TYPE_NAMES[st] and not self._closed and not self._failed then sync(self, self.path, 0) end
    end,
  })
  if not id then return end
  rec = r
  self._rw = rec
  self._reads = self._reads + 1
  self._inflight = self._inflight + 1
end

local function drop_watches(self)
  local c = self.client
  for _, t in pairs(self._track) do
    if t.dw then watch.forget(c, t.dw); t.dw = nil end
    if t.cw then watch.forget(c, t.cw); t.cw = nil end
  end
  if self._rw then watch.forget(c, self._rw); self._rw = nil end
end

-- after a reconnection: new_session: the old watches are gone, read everything and arm them all
-- again; else arm what is missing (a read that failed meanwhile) and wait for the barrier
local function resync(self, new_session)
  if self._closed or self._failed then return end
  self._gen = self._gen + 1
  self._inflight = 0
  self._syncing = true
  self._resyncs = self._resyncs + 1
  if new_session then drop_watches(self) end
  local paths = {}
  for path in pairs(self._nodes) do paths[#paths + 1] = path end
  table.sort(paths)
  sync(self, self.path, 0)
  for _, path in ipairs(paths) do
    if path ~= self.path and self._nodes[path] then sync(self, path, depth_of(self, path)) end
  end
  if not new_session then barrier(self) end
  for path in pairs(self._track) do untrack(self, path) end
end

function fail(self, msg)
  self._failed = msg
  self._syncing = false
  drop_watches(self)
  refund_all(self)
  if self.client.state ~= "CLOSED" then R.log(self.client, "error", msg) end
  emit(self, "failed", self.path, nil, msg)
  watch.notify(self._changed)
end

local function on_session(self, state)
  if self._closed or self._failed then return end
  if state == "SUSPENDED" then
    self._suspended = true
  elseif state == "CONNECTED" then
    local sid = self.client:session()
    if self._sid == nil then
      self._sid = sid -- the first session: the first sync is under way on it
    elseif sid ~= self._sid or self._suspended then
      local new = sid ~= self._sid
      self._sid = sid
      self._suspended = false
      resync(self, new)
    end
  elseif state == "CLOSED" then
    self._closed = true
    watch.notify(self._changed)
  end
end

---------------------------------------------------------------- the cache object

local function cache_check(self, fname)
  check.object(self, Cache, "cache", fname)
  if self._closed then check.raise(("%s: the cache of %s is closed"):format(fname, self.path)) end
end

local function failed(self)
  return nil, self._failed, "ERANGE"
end

local function not_cached(self, fname, path)
  return nil, ("ZNONODE: %s %s: not in the cache of %s"):format(fname, check.short(path), check.short(self.path)),
    "ZNONODE"
end

local function check_key(fname, path)
  check.znode_path(fname, 1, path)
end

-- cache:get(path) -> data (false when the cache keeps no data), stat | nil, msg, code
--   ("ZNONODE": not in the cache; "ERANGE": the cache stopped at max_nodes). From memory.
function Cache:get(path)
  cache_check(self, "get")
  if path == nil then path = self.path end
  check_key("get", path)
  if self._failed then return failed(self) end
  local n = self._nodes[path]
  if not n then return not_cached(self, "get", path) end
  return n.data, n.stat
end

-- cache:children(path) -> sorted names of the cached children | nil, msg, code. From memory.
function Cache:children(path)
  cache_check(self, "children")
  if path == nil then path = self.path end
  check_key("children", path)
  if self._failed then return failed(self) end
  local n = self._nodes[path]
  if not n then return not_cached(self, "children", path) end
  local names = {}
  for name in pairs(n.children) do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- cache:walk() -> iterator over path, stat, data of every cached node, parents before their
-- children, siblings by name (a snapshot taken at the call). From memory.
function Cache:walk()
  cache_check(self, "walk")
  if self._failed then check.raise("walk: " .. self._failed) end
  local list = {}
  local function visit(path)
    local n = self._nodes[path]
    if not n then return end
    list[#list + 1] = { path, n.stat, n.data }
    local names = {}
    for name in pairs(n.children) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do visit(join(path, name)) end
  end
  visit(self.path)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2], e[3] end
  end
end

-- cache:size() -> the number of cached nodes
function Cache:size()
  check.object(self, Cache, "cache", "size")
  return self._count
end

-- cache:is_initialized() -> true once a sync round (the first, or a resync) is complete and no
-- resync is under way
function Cache:is_initialized()
  check.object(self, Cache, "cache", "is_initialized")
  return self._initialized and not self._syncing and not self._failed and not self._closed
end

-- cache:await(timeout) -> true once initialized | nil, msg, code ("ETIMEDOUT", "ECLOSED",
-- "ERANGE"). Suspends a coroutine an adapter owns, otherwise blocks while pumping the client.
function Cache:await(timeout)
  check.object(self, Cache, "cache", "await")
  local ms = check.timeout("await", 1, timeout)
  local function done()
    return self:is_initialized() or self._failed or self._closed or self.client.state == "CLOSED"
  end
  local deadline = ms >= 0 and core.now() + ms or nil
  while not done() do
    local left = -1
    if deadline then
      left = deadline - core.now()
      if left <= 0 then break end
      left = math.ceil(left)
    end
    watch.wait_signal(self._changed, left)
  end
  if self:is_initialized() then return true end
  if self._failed then return failed(self) end
  if self._closed or self.client.state == "CLOSED" then
    return nil, ("ECLOSED: the cache of %s (or its client) was closed"):format(check.short(self.path)), "ECLOSED"
  end
  return nil, ("ETIMEDOUT: the cache of %s was not initialized within %g s"):format(check.short(self.path), ms / 1000),
    "ETIMEDOUT"
end

-- cache:on_change(fn) -> the cache. fn(event, cache, path, stat, data) for every "added",
-- "updated", "removed" (with the last stat and data), "initialized" (path: the root; after the
-- first sync and after every resync) and "failed" (data: the message; max_nodes passed). It
-- runs from the client's event dispatch and must not wait. Replaces the handler; nil removes it.
function Cache:on_change(fn)
  check.object(self, Cache, "cache", "on_change")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_change", 1, "expected a function(event, cache, path, stat, data) or nil, got "
      .. check.describe(fn))
  end
  self._fn = fn
  return self
end

-- cache:stats() -> { nodes, watches (armed at the server now), watch_bytes (this cache's share of
-- the client's watch budget), reads (requests sent), events, resyncs }
function Cache:stats()
  check.object(self, Cache, "cache", "stats")
  local w = 0
  for _, t in pairs(self._track) do
    if t.dw and t.dw.armed then w = w + 1 end
    if t.cw and t.cw.armed then w = w + 1 end
  end
  if self._rw and self._rw.armed then w = w + 1 end
  return { nodes = self._count, watches = w, watch_bytes = self._wbytes, reads = self._reads, events = self._events,
           resyncs = self._resyncs }
end

-- cache:close(): stop following. Its watches are forgotten (one that fires later at the server
-- is dropped by the client); the memory is released. A second close does nothing.
function Cache:close()
  check.object(self, Cache, "cache", "close")
  if self._closed then return true end
  self._closed = true
  drop_watches(self)
  refund_all(self)
  local set = by_client[self.client]
  if set then set[self] = nil end
  self._nodes, self._track, self._count, self._wbytes, self._fn = {}, {}, 0, 0, nil
  watch.notify(self._changed)
  return true
end

function Cache:__tostring()
  return ("zklock.cache(%s, %d nodes%s)"):format(self.path, self._count,
    self._closed and ", closed" or self._failed and ", failed" or "")
end

local function depth_option(v)
  return type(v) == "number" and v >= 0 and (v == math.huge or v == math.floor(v)), "an integer >= 0 or math.huge"
end
local function max_nodes_option(v)
  return type(v) == "number" and v >= 1 and v == math.floor(v) and v < math.huge, "an integer >= 1"
end
local OPTIONS = { depth = depth_option, max_nodes = max_nodes_option, max_watch_bytes = max_nodes_option,
  data = check.is.boolean }

-- client:cache(path, { depth =, max_nodes =, max_watch_bytes =, data = }) -> cache (see docs/api.md)
function M.new(client, path, opts)
  check.open(client, "cache")
  check.znode_path("cache", 1, path)
  opts = check.options("cache", 2, opts, OPTIONS)
  local self = setmetatable({
    client = client, path = path,
    _depth = opts.depth == nil and math.huge or opts.depth,
    _max_nodes = opts.max_nodes or DEFAULT_MAX_NODES,
    _max_watch_bytes = opts.max_watch_bytes, -- this cache's own cap (nil: the client's budget only)
    _keep_data = opts.data ~= false,
    _nodes = {}, _track = {}, _count = 0, _wbytes = 0,
    _gen = 0, _inflight = 0, _syncing = true, _initialized = false,
    _reads = 0, _events = 0, _resyncs = 0,
    _changed = watch.signal(client),
  }, Cache)
  local set = by_client[client]
  if not set then
    set = setmetatable({}, { __mode = "k" })
    by_client[client] = set
    R.on_session(client, function(state)
      local list = {}
      for cache in pairs(set) do list[#list + 1] = cache end
      for _, cache in ipairs(list) do on_session(cache, state) end
    end)
  end
  set[self] = true
  if client.state == "CONNECTED" then self._sid = client:session() end
  sync(self, path, 0)
  return self
end

return M
