-- spec/support/rwlock.lua: what the read-write lock specs (spec/4[012]-rwlock-*_spec.lua) share:
-- Curator's node name patterns, request counter keys, and the read/write interval checker.
local util = require("support.util")
local fw = require("support.fault_worker")

local UUID = "%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x"
local SEQ10 = ("%d"):rep(10)
local READ_NODE = "^_c_" .. UUID .. "%-__READ__" .. SEQ10 .. "$"
local WRITE_NODE = "^_c_" .. UUID .. "%-__WRIT__" .. SEQ10 .. "$"

local REQUEST_KEYS = { "creates", "lists", "gets", "deletes", "exists", "ops", "acquired" }

local pack, assert_code = util.pack, util.assert_code

-- "_c_<uuid>-__WRIT__0000000007" -> "0000000007"
local function seq10(name)
  return name:match("(%d%d%d%d%d%d%d%d%d%d)$")
end

local function uuid_of(name)
  return name:match("^_c_(" .. UUID .. ")%-")
end

-- Union of overlapping reader intervals: a writer that overlaps any reader overlaps the epoch
-- that contains it, so "writers and epochs never overlap" (capacity 1) is "a write hold overlaps
-- nothing". Touching intervals do not overlap (as in fw.check).
local function reader_epochs(reads)
  local sorted = {}
  for i, h in ipairs(reads) do sorted[i] = h end
  table.sort(sorted, function(a, b) return a.start < b.start end)
  local epochs, cur = {}, nil
  for _, h in ipairs(sorted) do
    if cur and h.start < cur.finish then
      if h.finish > cur.finish then cur.finish = h.finish end
      cur.n = cur.n + 1
    else
      cur = { key = "rw", owner = "readers", start = h.start, finish = h.finish, n = 1 }
      epochs[#epochs + 1] = cur
    end
  end
  return epochs
end

-- The write holds and the reader epochs together must never overlap (capacity 1).
local function check_rw(writes, reads)
  local all = {}
  for _, h in ipairs(writes) do
    all[#all + 1] = { key = "rw", owner = h.owner, start = h.start, finish = h.finish, token = h.token }
  end
  for _, e in ipairs(reader_epochs(reads)) do all[#all + 1] = e end
  local r = fw.check(all, 1)
  local readers = fw.check(reads, math.huge)
  return r, readers.max_overlap.rw or 0
end

return {
  UUID = UUID,
  SEQ10 = SEQ10,
  READ_NODE = READ_NODE,
  WRITE_NODE = WRITE_NODE,
  REQUEST_KEYS = REQUEST_KEYS,
  pack = pack,
  assert_code = assert_code,
  seq10 = seq10,
  uuid_of = uuid_of,
  reader_epochs = reader_epochs,
  check_rw = check_rw,
}
