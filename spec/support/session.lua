-- spec/support/session.lua: what the session specs (spec/30-session-*_spec.lua) share: state
-- recorders with times, node owners, and whether the server's `dump` still lists a session.
local core = require("zklock.core")
local util = require("support.util")

local function now() return core.now() end -- monotonic ms

local pack, assert_code = util.pack, util.assert_code
local record_session, index_of = util.record_session, util.index_of
-- lock events of one lock object, as names (t) and with times (t.at)
local function record_lock(m) return util.record_lock(m, true) end

local function count_of(list, v)
  local n = 0
  for _, x in ipairs(list) do if x == v then n = n + 1 end end
  return n
end

local function names(list) return "{" .. table.concat(list, ",") .. "}" end

-- drive_until(clients, pred, timeout): drive `clients` until pred() is true or `timeout` s pass.
local drive_until = util.drive_until

local function owner_of(c, node)
  local _, st = c:get(node)
  return st and st.ephemeral_owner
end

-- Every child of `paths` (full path -> owning session), read through client `c`.
local function owners(c, paths)
  local t = {}
  for _, p in ipairs(paths) do
    for _, name in ipairs(util.children(c, p)) do
      local full = p .. "/" .. name
      t[full] = owner_of(c, full) or "gone"
    end
  end
  return t
end

-- Whether the server's `dump` lists session `sid` (16 hex digits) as owning ephemerals: only
-- its "Sessions with Ephemerals" part counts (the session tracker's and the connections' parts
-- may still name a session whose expiry is done, e.g. a connection the server has not closed).
local function session_in_dump(zk, sid)
  local dump = assert(zk:four("dump"))
  local from = dump:find("Sessions with Ephemerals", 1, true)
  local to = from and dump:find("Connections dump", from, true)
  local part = from and dump:sub(from, (to or #dump + 1) - 1) or dump
  return part:find("0x" .. sid:gsub("^0+", ""), 1, true) ~= nil, dump
end

------------------------------------------------------------------------------------------------

return {
  now = now,
  pack = pack,
  assert_code = assert_code,
  record_session = record_session,
  index_of = index_of,
  record_lock = record_lock,
  count_of = count_of,
  names = names,
  drive_until = drive_until,
  owner_of = owner_of,
  owners = owners,
  session_in_dump = session_in_dump,
}
