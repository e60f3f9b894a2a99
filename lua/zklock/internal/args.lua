-- zklock.internal.args: argument validation shared by the public API. Misuse raises an error that names
-- the function, the argument and what was expected, at the caller's level.
local core = require("zklock.core")

local M = {}

-- Errors point at the first caller outside zklock's own Lua files, however deep inside the
-- library the check ran.
local here = debug.getinfo(1, "S").source
local libdir = here:match("^@(.*[/\\])internal[/\\][^/\\]*$") -- lua/zklock/, this file's parent

local function caller_level()
  local level = 3 -- the caller of argerror's caller
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return 2 end
    local src = info.source
    if not (libdir and src:sub(1, 1) == "@" and src:sub(2, #libdir + 1) == libdir) and info.what ~= "C"
       and info.what ~= "tail" then -- PUC 5.1: the frame a tail call replaced
      return level - 1 -- error()'s level counts from argerror
    end
    level = level + 1
  end
end

local function argerror(fname, argn, msg)
  error(("bad argument #%d to '%s' (%s)"):format(argn, fname, msg), caller_level())
end
M.argerror = argerror

-- Misuse that is not about one argument (a closed client, releasing what is not held): raised,
-- like argerror, at the first caller outside the library.
function M.raise(msg)
  error(msg, caller_level())
end

-- Cut a long value for a message: its first 100 characters, then "... (N bytes)".
local MAX_SHOWN = 100
local function short(s)
  s = tostring(s)
  if #s <= MAX_SHOWN then return s end
  return s:sub(1, MAX_SHOWN) .. ("... (%d bytes)"):format(#s)
end
M.short = short

-- `self` of a client method must be a client: client.mutex(...) (a dot) passes the first
-- argument as self. Raises "zklock: use client:<fname>(...) (with a colon)".
local function is_client(v)
  local mt = type(v) == "table" and getmetatable(v)
  return mt and rawget(mt, "__name") == "zklock.client"
end
function M.client(self, fname)
  if not is_client(self) then
    error(("zklock: use client:%s(...) (with a colon), not client.%s(...): got %s as the client")
      :format(fname, fname, short(type(self) == "string" and ("%q"):format(self) or tostring(self))), caller_level())
  end
end

-- fname called on a closed client (or not on a client): raises "zklock: <fname> on a closed client".
function M.open(client, fname)
  M.client(client, fname)
  if client.state == "CLOSED" then
    error(("zklock: %s on a closed client"):format(fname), caller_level())
  end
end

-- `self` of a method of a zklock object (a lock, a semaphore, a multi-lock) must be that object.
function M.object(self, mt, what, fname)
  if getmetatable(self) ~= mt then
    error(("zklock: use %s:%s(...) (with a colon): got %s as the %s")
      :format(what, fname, short(tostring(self)), what), caller_level())
  end
end

local function describe(v)
  if type(v) == "string" then
    if #v > MAX_SHOWN then return ("%q"):format(v:sub(1, MAX_SHOWN)) .. ("... (%d bytes)"):format(#v) end
    return ("%q"):format(v)
  end
  if type(v) == "number" and v ~= v then return "NaN" end
  return tostring(v) .. " (" .. type(v) .. ")"
end
M.describe = describe

-- The longest wait the core can time (its deadlines are int milliseconds); anything longer is
-- forever.
local MAX_MS = 2147483647
M.MAX_MS = MAX_MS

-- Seconds as given by users -> milliseconds for the core: nil, math.huge and anything beyond
-- MAX_MS ms = -1 (forever); 0 = 0; a positive fraction of a millisecond = 1. NaN, negative and
-- non-numbers raise an error naming the argument (`what`, default "timeout").
function M.timeout(fname, argn, t, what)
  if t == nil then return -1 end
  if type(t) ~= "number" or t ~= t or t < 0 then
    argerror(fname, argn, ("%s: expected nil (forever) or a number of seconds >= 0, got %s")
      :format(what or "timeout", describe(t)))
  end
  if t * 1000.0 > MAX_MS then return -1 end -- math.huge, 1e300, math.maxinteger: forever
  return math.ceil(t * 1000.0)
end

-- The timeout of a plain znode call (or the op_timeout option): like M.timeout, but 0 is
-- rejected (a request cannot be answered in no time).
function M.op_timeout(fname, argn, t, what)
  -- not M.timeout's message: 0 is no "try once" here, and nil is no "forever" but the default
  if t ~= nil and (type(t) ~= "number" or t ~= t or t <= 0) then
    argerror(fname, argn, ("%s: expected a number of seconds > 0 (math.huge: forever), got %s")
      :format(what, describe(t)))
  end
  return M.timeout(fname, argn, t, what)
end

function M.path(fname, argn, path)
  if type(path) ~= "string" then
    argerror(fname, argn, "lock path: expected a string like \"/locks/name\", got " .. describe(path))
  end
  local why = core.path_error(path)
  if why then argerror(fname, argn, ("lock path %s, got %s"):format(why, describe(path)), 2) end
  return path
end

-- A plain call's znode path: any absolute path (the server judges the rest). -> path
function M.znode_path(fname, argn, path)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    argerror(fname, argn, "path: expected an absolute znode path, got " .. describe(path))
  end
  return path
end

-- A znode version: nil or -1 (any version), or an integer up to 2^31-1. -> version (-1 for nil)
function M.version(fname, argn, version)
  if version ~= nil and not (type(version) == "number" and version >= -1 and version <= 2147483647
                             and math.floor(version) == version) then
    argerror(fname, argn, "version: expected an integer (-1 or nil: any version), got " .. describe(version))
  end
  return version or -1
end

-- One request's size against the client option max_data (the server's jute.maxbuffer, 1 MiB by
-- default, less overhead; a larger request makes the server drop the connection). `what` says
-- what was counted, e.g. "data: 2000000 bytes (with the path)".
function M.fits(fname, argn, size, max, what)
  if size > max then
    argerror(fname, argn, ("%s is more than the server accepts in one request (client option max_data,"
      .. " %d bytes: the server's jute.maxbuffer less overhead; a larger request would make it drop the"
      .. " connection)"):format(what, max))
  end
end

-- opts must be nil or a table whose keys all appear in `known` (name -> validator(v) -> ok, what).
function M.options(fname, argn, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    argerror(fname, argn, "options: expected a table, got " .. describe(opts))
  end
  for k, v in pairs(opts) do
    local validate = known[k]
    if not validate then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      table.sort(names)
      argerror(fname, argn, ("unknown option '%s' (known: %s)"):format(tostring(k), table.concat(names, ", ")))
    end
    local ok, what = validate(v)
    if not ok then
      argerror(fname, argn, ("option '%s': expected %s, got %s"):format(k, what, describe(v)))
    end
  end
  return opts
end

M.is = {
  positive = function(v)
    return type(v) == "number" and v == v and v > 0 and v < math.huge, "a number > 0"
  end,
  nonneg = function(v)
    return type(v) == "number" and v == v and v >= 0, "a number >= 0"
  end,
  string = function(v) return type(v) == "string", "a string" end,
  func = function(v) return type(v) == "function", "a function" end,
  boolean = function(v) return type(v) == "boolean", "a boolean" end,
  oneof = function(...)
    local set, list = {}, {...}
    for _, v in ipairs(list) do set[v] = true end
    return function(v) return set[v] == true, "one of " .. table.concat(list, ", ") end
  end,
}

-- ACL option of the lock constructors: "open" (default), "creator" (the creating session's
-- authenticated identities may do everything, everyone may read), or a list of
-- { scheme = "digest", id = "user:base64sha1", perms = "rwcda" | integer }.
local PERM = { r = 1, w = 2, c = 4, d = 8, a = 16 }

function M.acl_option(v)
  if v == nil or v == "open" then return true end
  if v == "creator" then return true end
  if type(v) ~= "table" or #v == 0 then return false, '"open", "creator" or a list of { scheme, id, perms }' end
  for _, e in ipairs(v) do
    if type(e) ~= "table" or type(e.scheme) ~= "string" or e.scheme == "" or type(e.id) ~= "string" then
      return false, "ACL entries { scheme = string, id = string, perms = \"rwcda\" or integer }"
    end
    local p = e.perms
    if type(p) == "string" then
      if p == "" or p:find("[^rwcda]") then return false, 'perms as letters from "rwcda"' end
    elseif not (type(p) == "number" and p >= 1 and p <= 31 and math.floor(p) == p) then
      return false, 'perms as letters from "rwcda" or an integer 1..31'
    end
  end
  return true
end

-- Normalized entries { {perms, scheme, id}, ... } for the core, or nil for the open ACL.
function M.acl_entries(v)
  if v == nil or v == "open" then return nil end
  if v == "creator" then return { { 31, "auth", "" }, { 1, "world", "anyone" } } end
  local out = {}
  for i, e in ipairs(v) do
    local p = e.perms
    if type(p) == "string" then
      local n = 0
      for ch in p:gmatch(".") do if n % (2 * PERM[ch]) < PERM[ch] then n = n + PERM[ch] end end
      p = n
    end
    out[i] = { p, e.scheme, e.id }
  end
  return out
end

-- "host:port[,host:port...][/chroot]"
function M.hosts(fname, argn, hosts)
  local expected = 'hosts: expected "host:port[,host:port...]"'
  if type(hosts) ~= "string" or hosts == "" then
    argerror(fname, argn, expected .. ", got " .. describe(hosts))
  end
  local list, chroot = hosts:match("^([^/]*)(.*)$")
  if chroot ~= "" and core.path_error(chroot) then
    argerror(fname, argn, ("hosts: chroot %s, got %s"):format(core.path_error(chroot), describe(chroot)))
  end
  for entry in (list .. ","):gmatch("([^,]*),") do
    local v6, v6port = entry:match("^%s*%[([^%]]*)%]:?(%d*)%s*$")
    if v6 then
      argerror(fname, argn, ("hosts: IPv6 literals in brackets are not supported (the ZooKeeper client splits"
        .. " host and port at the last colon): write %s:%s, got %s"):format(v6, v6port ~= "" and v6port or "2181",
        describe(hosts)))
    end
    local host, port = entry:match("^%s*([%w%.%-_:]-):(%d+)%s*$")
    port = tonumber(port)
    if not host or host == "" or not port or port < 1 or port > 65535 then
      argerror(fname, argn, expected .. ", got " .. describe(hosts))
    end
  end
  return hosts
end

return M
