-- zklock.member: an ephemeral node that stays (client:member), the wire behaviour of Curator's
-- PersistentNode in its ephemeral modes (and so of GroupMember, which is one at
-- <group>/<member id>).
--
-- The node is created with its missing parents as containers; a protected one is named
-- `_c_<uuid>-<name>` (one uuid per member), a sequential one gets the server's sequence suffix at
-- its first creation. It is made again, at the name it got first and without a new sequence
-- number (as PersistentNode does):
--   * when an exists watch on it reports it deleted (someone deleted it, or its session ended),
--   * after every reconnection, on the same session or a new one: the create either makes it
--     again (a new session: the old one took it) or meets ZNODEEXISTS, and then the member's
--     data is written to it (it may have changed while the answer was lost).
-- A create whose answer was lost (connection loss) is sent again after the reconnection; for a
-- protected sequential node the parent is listed first and a child carrying the member's uuid
-- is taken for its own (without protection a lost sequential create may leave a second node
-- until that session ends, as with Curator).
-- member:set(data) keeps the data and writes it (in the background); member:close() deletes the
-- node (in the background, retried while the session lives) and stops.
--
-- The module uses the recipe interface, zklock.internal.recipe (background ops, the log), zklock.internal.watch's
-- callback form and the client's session handlers; no other module's fields.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local watch = require("zklock.internal.watch")
local R = require("zklock.internal.recipe")

local M = {}

local errno = core.errno
local MAX_RETRIES = 10 -- creates refused in a row (a parent reaped each time) before giving up until a reconnection

local Member = {}
Member.__index = Member
Member.__name = "zklock.member"
M.Member = Member

-- client -> (member -> true): the open members one session handler serves (strong: an open
-- member keeps working whether or not its owner keeps a reference)
local by_client = setmetatable({}, { __mode = "k" })

local function log(self, level, msg)
  if self.client.state ~= "CLOSED" then R.log(self.client, level, ("member %s: %s"):format(self.path, msg)) end
end

local function emit(self, event, arg)
  local fn = self._fn
  if not fn then return end
  local ok, err = pcall(fn, event, self, arg)
  if not ok then log(self, "error", ("on_change handler failed (%s): %s"):format(event, tostring(err))) end
end

local function uuid()
  local f = io.open("/dev/urandom", "rb")
  local s = f and f:read(16)
  if f then f:close() end
  local b = {}
  for i = 1, 16 do b[i] = s and s:byte(i) or math.random(0, 255) end
  b[7] = b[7] % 16 + 64  -- version 4
  b[9] = b[9] % 64 + 128 -- variant 10
  local h = {}
  for i = 1, 16 do h[i] = ("%02x"):format(b[i]) end
  local x = table.concat(h)
  return ("%s-%s-%s-%s-%s"):format(x:sub(1, 8), x:sub(9, 12), x:sub(13, 16), x:sub(17, 20), x:sub(21, 32))
end

local function parent_of(path)
  local p = path:match("^(.*)/[^/]*$")
  return (p == nil or p == "") and "/" or p
end

local function join(parent, name)
  return parent == "/" and "/" .. name or parent .. "/" .. name
end

local create, arm

-- the data as it stands now goes to the node (after a create that met ZNODEEXISTS, or a set)
local function write(self)
  if self._closed or not self._node or self._creating then return end
  local ver, node = self._ver, self._node
  self._writes = self._writes + 1
  local id, msg = R.background(self.client, core.OP_SET, node, self._data, 0, -1, function(st)
    if self._closed then return end
    if st == 0 then
      if ver > self._have then self._have = ver end
      watch.notify(self._changed)
    elseif st ~= errno.ZNONODE and not core.outcome_unknown(st) and st ~= errno.ESESSION and st ~= errno.ECLOSED then
      -- ZNONODE: the watch sees it gone and makes it again (with the data); a lost answer: the
      -- reconnection's create writes the data again
      log(self, "warn", ("writing the data to %s failed: %s"):format(node, core.errname(st)))
    end
  end)
  if not id then log(self, "warn", ("writing the data to %s could not start: %s"):format(node, tostring(msg))) end
end

-- the node is gone (its deletion notified, or an exists found nothing): make it again
local function gone(self)
  if self._closed then return end
  emit(self, "deleted", self._node)
  create(self)
end

-- an exists watch on the node: fires when it is deleted (made again) or changed (armed again)
function arm(self)
  local c = self.client
  if self._w then watch.forget(c, self._w); self._w = nil end
  if self._closed or not self._node then return end
  local rec
  local id, r = watch.start(c, "exists", core.OP_EXISTS, self._node, 0, {
    private = true,
    on_done = function(st, res)
      if self._w ~= rec or self._closed then return end
      if st == errno.ZNONODE then
        -- gone before the watch was set: the watch armed waits for a creation; drop it
        watch.forget(c, rec)
        self._w = nil
        gone(self)
      elseif st == 0 then
        local sid = c.state == "CONNECTED" and c:session() or nil
        local owner = res and res.ephemeral_owner
        if sid and owner and owner ~= sid then
          log(self, "warn", ("%s belongs to %s (this member's session: %s): made outside this member?")
            :format(self._node, owner == "0000000000000000" and "no session (a persistent node)"
              or "session " .. owner, sid))
        end
      else
        self._w = nil -- nothing armed: the next reconnection arms it again
      end
    end,
    on_fire = function(st)
      if self._w ~= rec then return end
      self._w = nil
      if self._closed then return end
      if st == core.WATCH_DELETED then
        gone(self)
      elseif watch.TYPE_NAMES[st] then
        arm(self) -- changed (our own set, or someone's): watch on
      end -- the session ended or the client closed: the session handler deals with it
    end,
  })
  if not id then
    log(self, "warn", ("the watch on %s could not start: %s"):format(self._node, tostring(r)))
    return
  end
  rec = r
  self._w = rec
end

local function created(self, node, fresh, ver)
  self._node = node
  self._tries = 0
  if fresh then
    self._creates = self._creates + 1
    if ver > self._have then self._have = ver end
    emit(self, "created", node)
  end
  arm(self)
  if not fresh or self._have < self._ver then write(self) end
  watch.notify(self._changed)
end

-- a failed create: try again now (still connected), or at the next reconnection
local function retry(self, st)
  if self.client.state == "CONNECTED" and self._tries < MAX_RETRIES then
    self._tries = self._tries + 1
    return create(self)
  end
  if self._tries >= MAX_RETRIES then
    log(self, "warn", ("create refused %d times (%s); trying again at the next reconnection")
      :format(self._tries, core.errname(st)))
    self._tries = 0
  end
end

local function on_create(self, st, res, target, ver)
  self._creating = false
  if self._closed then
    -- closed while the create was out: what it made goes
    if st == 0 and res and res.data then R.discard(self.client, res.data) end
    return
  end
  if st == 0 then
    return created(self, res.data, true, ver)
  elseif st == errno.ZNODEEXISTS then
    -- the node is there (our create whose answer was lost, or the same session's node): ours
    return created(self, target, false, ver)
  elseif st == errno.ECLOSED then
    return
  elseif st == errno.ESESSION or core.outcome_unknown(st) then
    -- applied or not: a protected sequential first create looks for its node before the next
    if self._protected and self._sequential and not self._node then self._find = true end
    return retry(self, st)
  elseif st == errno.ZNONODE then
    return retry(self, st) -- a parent reaped between its create and ours
  end
  -- refused for good (ZNOAUTH, ZINVALIDACL, a bad path...): say so and stop
  self._error = ("%s: member %s: create %s: %s"):format(core.errname(st), self.path, target, core.strerror(st))
  log(self, "error", self._error)
  emit(self, "failed", self._error)
  watch.notify(self._changed)
end

-- a protected sequential create whose answer was lost: is one of the parent's children ours?
local function find(self)
  local c = self.client
  local parent = parent_of(self._first)
  self._creating = true
  local id = R.background(c, core.OP_CHILDREN, parent, nil, 0, -1, function(st, res)
    self._creating = false
    if self._closed then return end
    if st == 0 then
      self._find = false
      for _, name in ipairs(res and res.children or {}) do
        if name:sub(1, #self._prefix) == self._prefix then
          return created(self, join(parent, name), false, self._ver)
        end
      end
      return create(self)
    elseif st == errno.ZNONODE then
      self._find = false
      return create(self)
    end
    return retry(self, st)
  end)
  if not id then self._creating = false end
end

function create(self)
  local c = self.client
  if self._closed or self._creating or self._error then return end
  if c.state ~= "CONNECTED" then return end -- the session handler calls again once connected
  if self._find then return find(self) end
  local target, flags
  if self._node then
    target, flags = self._node, core.CREATE_EPHEMERAL + core.CREATE_PARENTS
  else
    target = self._first
    flags = core.CREATE_EPHEMERAL + core.CREATE_PARENTS + (self._sequential and core.CREATE_SEQUENTIAL or 0)
  end
  local ver = self._ver
  local id, msg = R.op(c, core.OP_CREATE, target, self._data, flags, -1, self._acl, 0)
  if not id then
    log(self, "warn", ("create %s could not start: %s"):format(target, tostring(msg)))
    return
  end
  self._creating = true
  R.orphan(c, id, function(st, res) on_create(self, st, res, target, ver) end)
end

local function on_session(self, state)
  if self._closed then return end
  if state == "SUSPENDED" then
    self._suspended = true
  elseif state == "CONNECTED" then
    local sid = self.client:session()
    if sid ~= self._sid or self._suspended or not self._node then
      self._sid = sid
      self._suspended = false
      self._error = nil
      create(self)
    end
  elseif state == "CLOSED" then
    self._closed = true
    self._w = nil
    watch.notify(self._changed)
  end
end

---------------------------------------------------------------- the member object

local function m_check(self, fname)
  check.object(self, Member, "member", fname)
  if self._closed then check.raise(("%s: the member %s is closed"):format(fname, self.path)) end
end

-- member:node() -> the node's full path, nil before its first creation
function Member:node()
  check.object(self, Member, "member", "node")
  return self._node
end

-- member:data() -> the member's data (what it writes to the node)
function Member:data()
  check.object(self, Member, "member", "data")
  return self._data
end

-- member:set(data) -> the member. Keeps the data and writes it to the node in the background
-- (and after every re-creation); member:await() tells when it is in.
function Member:set(data)
  m_check(self, "set")
  if type(data) ~= "string" then check.argerror("set", 1, "data: expected a string, got " .. check.describe(data)) end
  check.fits("set", 1, #data + #self.path + 64, R.max_data(self.client), ("data: %d bytes"):format(#data))
  self._data = data
  self._ver = self._ver + 1
  write(self)
  return self
end

-- member:is_current() -> true while the node exists as far as the member knows and holds the
-- member's latest data
function Member:is_current()
  check.object(self, Member, "member", "is_current")
  return not self._closed and self._node ~= nil and not self._creating and self._have >= self._ver
    and self._error == nil and self.client.state == "CONNECTED"
end

-- member:await(timeout) -> true once the node is made and holds the latest data | nil, msg,
-- code ("ETIMEDOUT", "ECLOSED", or the create's refusal, e.g. "ZNOAUTH")
function Member:await(timeout)
  check.object(self, Member, "member", "await")
  local ms = check.timeout("await", 1, timeout)
  local deadline = ms >= 0 and core.now() + ms or nil
  while not (self:is_current() or self._error or self._closed or self.client.state == "CLOSED") do
    local left = -1
    if deadline then
      left = deadline - core.now()
      if left <= 0 then break end
      left = math.ceil(left)
    end
    watch.wait_signal(self._changed, left)
  end
  if self:is_current() then return true end
  if self._error then return nil, self._error, (self._error:match("^(%u+)")) end
  if self._closed or self.client.state == "CLOSED" then
    return nil, ("ECLOSED: the member %s (or its client) was closed"):format(self.path), "ECLOSED"
  end
  return nil, ("ETIMEDOUT: the member %s was not in place within %g s"):format(self.path, ms / 1000), "ETIMEDOUT"
end

-- member:on_change(fn) -> the member. fn(event, member, arg): "created" (arg: the node's path;
-- the first creation and every re-creation), "deleted" (arg: the path; found gone, being made
-- again), "failed" (arg: the message; the server refused the create for good). Runs from the
-- client's event dispatch and must not wait. Replaces the handler; nil removes it.
function Member:on_change(fn)
  check.object(self, Member, "member", "on_change")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_change", 1, "expected a function(event, member, path) or nil, got " .. check.describe(fn))
  end
  self._fn = fn
  return self
end

-- member:stats() -> { creates (nodes made), writes (data writes sent) }
function Member:stats()
  check.object(self, Member, "member", "stats")
  return { creates = self._creates, writes = self._writes }
end

-- member:close() -> true. Stops, and deletes the node in the background (retried while the
-- session lives; a session that ends takes it anyway). A second close does nothing.
function Member:close()
  check.object(self, Member, "member", "close")
  if self._closed then return true end
  self._closed = true
  local c = self.client
  if self._w then watch.forget(c, self._w); self._w = nil end
  local set = by_client[c]
  if set then set[self] = nil end
  if self._node and c.state ~= "CLOSED" then R.discard(c, self._node) end
  self._fn = nil
  watch.notify(self._changed)
  return true
end

function Member:__tostring()
  return ("zklock.member(%s%s)"):format(self._node or self.path, self._closed and ", closed" or "")
end

local OPTIONS = { protected = check.is.boolean, sequential = check.is.boolean, acl = check.acl_option }

-- client:member(path, data, { protected =, sequential =, acl = }) -> member (see docs/api.md)
function M.new(client, path, data, opts)
  check.open(client, "member")
  check.znode_path("member", 1, path)
  if path == "/" then check.argerror("member", 1, "path: a member needs a node name, got \"/\"") end
  if data ~= nil and type(data) ~= "string" then
    check.argerror("member", 2, "data: expected a string or nil, got " .. check.describe(data))
  end
  data = data or ""
  opts = check.options("member", 3, opts, OPTIONS)
  check.fits("member", 2, #data + #path + 64, R.max_data(client), ("data: %d bytes"):format(#data))
  local first, prefix = path, nil
  if opts.protected then
    prefix = "_c_" .. uuid() .. "-"
    first = join(parent_of(path), prefix .. path:match("([^/]*)$"))
  end
  local self = setmetatable({
    client = client, path = path,
    _protected = opts.protected == true, _sequential = opts.sequential == true,
    _acl = R.acl_id(client, opts.acl), _first = first, _prefix = prefix,
    _data = data, _ver = 1, _have = 0, _creates = 0, _writes = 0, _tries = 0,
    _changed = watch.signal(client),
  }, Member)
  local set = by_client[client]
  if not set then
    set = {}
    by_client[client] = set
    R.on_session(client, function(state)
      local list = {}
      for m in pairs(set) do list[#list + 1] = m end
      for _, m in ipairs(list) do on_session(m, state) end
    end)
  end
  set[self] = true
  if client.state == "CONNECTED" then self._sid = client:session() end
  create(self)
  return self
end

return M
