-- zklock.testing.fenced: a fenced resource for tests, kept in one znode: it takes a write only
-- with a fencing token at least as high as the highest it took before, and refuses a stale one,
-- atomically (a versioned set: two writers cannot both pass the check). It stands for the
-- database or file a lock protects, so a test can show that a paused or cut-off holder's late
-- write is refused.
--
--   local res = testing.fenced(client, "/resources/db", { recorder = rec })
--   local ok, err, code = res:write(m:token(), "payload")   -- nil, "ESTALE: ...", "ESTALE"
--   local value, token = res:read()
--
-- With opts.recorder (a zklock.testing.check recorder), every write logs `accept` or `reject`
-- with token= and, for an accept, zxid= (the znode's mzxid, the order check.fenced uses).
-- zklock.errors needs the C module; the harness itself (servers, processes) must load without it
-- (a test process started without the build's cpath), so it is required when a write is refused
local function fail(code, text) return require("zklock.internal.errors").fail(code, text) end

local M = {}

local Fenced = {}
Fenced.__index = Fenced
M.Fenced = Fenced

local function argerr(fname, n, what, got)
  error(("zklock.testing.%s: bad argument #%d: expected %s, got %s"):format(fname, n, what, tostring(got)), 3)
end

function M.fenced(client, path, opts)
  if type(client) ~= "table" or type(client.get) ~= "function" then argerr("fenced", 1, "a zklock client", client) end
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then argerr("fenced", 2, "a znode path", path) end
  if opts ~= nil and type(opts) ~= "table" then argerr("fenced", 3, "an options table or nil", opts) end
  opts = opts or {}
  if opts.recorder ~= nil and (type(opts.recorder) ~= "table" or type(opts.recorder.log) ~= "function") then
    argerr("fenced", 3, "opts.recorder, a zklock.testing.check recorder", opts.recorder)
  end
  return setmetatable({ client = client, path = path, recorder = opts.recorder, timeout = opts.timeout },
    Fenced)
end

local function decode(data)
  local tok, value = (data or ""):match("^(%-?%d+)\n(.*)$")
  return tonumber(tok), value
end

local function note(self, ev, token, zxid)
  if self.recorder then
    self.recorder:log(ev, self.path, { token = token, zxid = zxid })
  end
end

-- write(token, value) -> true | nil, "ESTALE: ...", "ESTALE" | nil, msg, code (a ZooKeeper error)
function Fenced:write(token, value)
  if type(token) ~= "number" or token ~= token then argerr("Fenced:write", 1, "a fencing token (number)", token) end
  if value ~= nil and type(value) ~= "string" then argerr("Fenced:write", 2, "a string or nil", value) end
  local c, opts = self.client, self.timeout and { timeout = self.timeout } or nil
  local data = ("%.0f\n%s"):format(token, value or "")
  for _ = 1, 50 do
    local cur, stat, code = c:get(self.path, opts)
    if cur == nil and code == "ZNONODE" then
      local ok, msg, ccode = c:create(self.path, data, { parents = true, timeout = self.timeout })
      if ok then
        local st = c:exists(self.path, opts)
        note(self, "accept", token, st and st.mzxid)
        return true
      end
      if ccode ~= "ZNODEEXISTS" then return nil, msg, ccode end
    elseif cur == nil then
      return nil, stat, code
    else
      local have = decode(cur)
      if have and have > token then
        note(self, "reject", token)
        return fail("ESTALE", ("fencing token %.0f is older than %.0f, the newest this resource took"):format(
          token, have))
      end
      local st, msg, scode = c:set(self.path, data, stat.version, opts)
      if st then
        note(self, "accept", token, st.mzxid)
        return true
      end
      if scode ~= "ZBADVERSION" then return nil, msg, scode end
    end
  end
  return fail("EBUSY", "the resource kept changing under 50 attempts")
end

-- read() -> value, token | nil, msg, code (value nil and token nil when never written)
function Fenced:read()
  local cur, stat, code = self.client:get(self.path, self.timeout and { timeout = self.timeout } or nil)
  if cur == nil then
    if code == "ZNONODE" then return nil, nil end
    return nil, stat, code
  end
  local tok, value = decode(cur)
  return value, tok
end

return M
