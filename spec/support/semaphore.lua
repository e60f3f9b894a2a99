-- spec/support/semaphore.lua: what the semaphore specs (spec/5[01]-semaphore-*_spec.lua) share:
-- the lease node pattern, watch counters and the layout checks of <path>/leases and <path>/locks.
local util = require("support.util")

local UUID = "%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x"
local SEQ10 = ("%d"):rep(10)
local LEASE_NODE = "^_c_" .. UUID .. "%-lease%-" .. SEQ10 .. "$"

local pack, assert_code = util.pack, util.assert_code

-- Watches of every kind on the server (mntr counts child watches too; wchp shows data watches only).
local function watch_count(zk) return util.mntr(zk, "zk_watch_count") end

-- Data watches on paths under `prefix` (from wchp).
local function data_watches_under(zk, prefix)
  local n = 0
  for p, s in pairs(util.watches_by_path(zk)) do
    if p:sub(1, #prefix) == prefix then n = n + #s end
  end
  return n
end

local function leases_of(c, path) return util.children(c, path .. "/leases") end
local function locks_of(c, path) return util.children(c, path .. "/locks") end

-- Wait until <path>/leases holds exactly `names` (a list, any order) and <path>/locks exactly
-- `nlocks` children.
local function wait_layout(c, path, names, nlocks, clients, timeout)
  local want = {}
  for _, n in ipairs(names) do want[n] = true end
  local got_l, got_m
  local ok = util.wait_until(function()
    got_l, got_m = leases_of(c, path), locks_of(c, path)
    if #got_l ~= #names or #got_m ~= nlocks then return false end
    for _, n in ipairs(got_l) do if not want[n] then return false end end
    return true
  end, timeout or 2, clients)
  assert(ok, ("%s: leases {%s} locks {%s}, expected leases {%s} and %d lock node(s)"):format(path,
    table.concat(got_l, " "), table.concat(got_m, " "), table.concat(names, " "), nlocks))
end

return {
  UUID = UUID,
  SEQ10 = SEQ10,
  LEASE_NODE = LEASE_NODE,
  pack = pack,
  assert_code = assert_code,
  watch_count = watch_count,
  data_watches_under = data_watches_under,
  leases_of = leases_of,
  locks_of = locks_of,
  wait_layout = wait_layout,
}
