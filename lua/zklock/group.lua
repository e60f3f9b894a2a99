-- zklock.group: the members of a group and their data, with changes (client:group), as
-- Curator's GroupMember keeps them: a cache of the group node's children (client:cache with
-- depth = 1), a member's id being its node's name (the last path element, as GroupMember's
-- idFromPath; for a protected or sequential member that is the whole generated name).
-- Events follow the cache's: a child added is "joined", its data changed "updated", removed
-- "left"; "initialized" after every (re)sync. A member whose node is deleted and made again
-- (its session ended and it came back) is seen as left, then joined.
local check = require("zklock.internal.args")

local M = {}

local Group = {}
Group.__index = Group
Group.__name = "zklock.group"
M.Group = Group

local EVENTS = { added = "joined", updated = "updated", removed = "left", initialized = "initialized" }

local function g_check(self, fname)
  check.object(self, Group, "group", fname)
  if self._closed then check.raise(("%s: the group %s is closed"):format(fname, self.path)) end
end

-- group:members() -> { [id] = data } of the members as last seen | nil, msg, code (the
-- cache's: "ERANGE" past max_members). From memory.
function Group:members()
  g_check(self, "members")
  local names, msg, code = self._cache:children(self.path)
  if not names then
    if code == "ZNONODE" then return {} end -- no group node (yet): no member
    return nil, msg, code
  end
  local out = {}
  for _, id in ipairs(names) do
    local data = self._cache:get(self._prefix .. id)
    if data then out[id] = data end
  end
  return out
end

-- group:ids() -> sorted ids of the members as last seen | nil, msg, code. From memory.
function Group:ids()
  g_check(self, "ids")
  local names, msg, code = self._cache:children(self.path)
  if not names then
    if code == "ZNONODE" then return {} end
    return nil, msg, code
  end
  return names
end

-- group:is_initialized() / group:await(timeout): the cache's (see zklock.cache)
function Group:is_initialized()
  check.object(self, Group, "group", "is_initialized")
  return not self._closed and self._cache:is_initialized()
end

function Group:await(timeout)
  g_check(self, "await")
  return self._cache:await(timeout)
end

-- group:on_change(fn) -> the group. fn(event, group, id, data): "joined", "updated", "left"
-- (with the last data), "initialized" (id nil; after the first sync and every resync),
-- "failed" (data: the message). Runs from the client's event dispatch and must not wait.
-- Replaces the handler; nil removes it.
function Group:on_change(fn)
  check.object(self, Group, "group", "on_change")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_change", 1, "expected a function(event, group, id, data) or nil, got " .. check.describe(fn))
  end
  self._fn = fn
  return self
end

-- group:close(): stop following (the cache closes). A second close does nothing.
function Group:close()
  check.object(self, Group, "group", "close")
  if self._closed then return true end
  self._closed = true
  self._fn = nil
  return self._cache:close()
end

function Group:__tostring()
  return ("zklock.group(%s%s)"):format(self.path, self._closed and ", closed" or "")
end

local OPTIONS = {
  max_members = function(v)
    return type(v) == "number" and v >= 1 and v == math.floor(v) and v < math.huge, "an integer >= 1"
  end,
}

-- client:group(path, { max_members = }) -> group (see docs/api.md)
function M.new(client, path, opts)
  check.open(client, "group")
  check.znode_path("group", 1, path)
  opts = check.options("group", 2, opts, OPTIONS)
  local self = setmetatable({
    client = client, path = path, _prefix = path == "/" and "/" or path .. "/",
  }, Group)
  local cache = client:cache(path, { depth = 1, max_nodes = opts.max_members and opts.max_members + 1 or nil })
  self._cache = cache
  cache:on_change(function(event, _, p, _, data)
    local fn = self._fn
    if not fn or self._closed then return end
    local name = EVENTS[event]
    if event == "failed" then
      name = "failed"
    elseif not name or (p == path and event ~= "initialized") then
      return -- the group node itself
    end
    local id = event ~= "initialized" and event ~= "failed" and p:sub(#self._prefix + 1) or nil
    fn(name, self, id, data)
  end)
  return self
end

return M
