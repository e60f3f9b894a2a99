-- spec/support/intervals.lua: the leadership checker of the leader specs (55-leader,
-- 73-curator-leader, 92-faults-leader). Leadership terms from every process, zklock's and
-- Curator's, on the shared CLOCK_MONOTONIC milliseconds (core.now(), System.nanoTime()/1e6),
-- are checked with fault_worker.check at capacity 1: no two terms of one path overlap at any
-- instant, and fencing tokens grow with the start of each term. Unlike a lock hold, a term that
-- a connection event interrupted still counts: its end is when its participant stopped
-- believing it leads, which must come before anyone else starts.
--
--   local intervals = require("support.intervals")
--   local log = intervals.new()
--   local t = log:start(owner, token [, key])   a term begins now (core.now() ms)
--   log:stop(t)                                 ... and ends now
--   log:add{ owner=, token=, start=, finish=, key= }   a finished term from elsewhere
--   log:add_file(path [, open_until [, key]])   the terms of a worker or peer log: H lines (fault_worker's
--                                               H format: H key owner thread token start end ...) and
--                                               B lines (a term began) never ended, until open_until ms
--   log:count()                                 finished terms
--   log:check() -> { terms, overlaps, token_regressions, open, by_owner = { owner = n },
--                    changes (terms whose owner differs from the previous one), report (text) }
local core = require("zklock.core")
local fw = require("support.fault_worker")

local M = {}
local Log = {}
Log.__index = Log

function M.new()
  return setmetatable({ terms = {}, open = {} }, Log)
end

function Log:start(owner, token, key)
  local t = { owner = owner, token = token, start = core.now(), key = key or "leader", interrupted = false }
  self.open[t] = true
  return t
end

function Log:stop(t)
  if not t or not self.open[t] then return end
  self.open[t] = nil
  t.finish = core.now()
  self.terms[#self.terms + 1] = t
end

function Log:add(t)
  t.key = t.key or "leader"
  t.interrupted = false
  self.terms[#self.terms + 1] = t
end

-- The terms of a worker or peer log: H lines (H key owner thread token start end ...), and B
-- lines (B key owner thread token start node: a term began) that no H line ended, which run
-- until `open_until` (ms: when the process was killed; default now). -> terms added
function Log:add_file(path, open_until, key)
  local n, begun = 0, {}
  for f in fw.log_records(path) do
    if f[1] == "B" then
      begun[f[3] .. "|" .. f[4] .. "|" .. f[6]] = f
    elseif f[1] == "H" then
      local h = fw.hold_of(f)
      begun[f[3] .. "|" .. f[4] .. "|" .. f[6]] = nil
      h.key = key or h.key
      h.owner = f[3] .. "/" .. f[4]
      h.node = f[12]
      h.how = f[11]
      self:add(h)
      n = n + 1
    end
  end
  for _, f in pairs(begun) do
    self:add({ key = key or f[2], owner = f[3] .. "/" .. f[4], token = tonumber(f[5]), start = tonumber(f[6]),
               finish = open_until or core.now(), node = f[7], how = "killed" })
    n = n + 1
  end
  return n
end

function Log:count() return #self.terms end

-- Terms still open count as running until now: a participant that never stopped must not hide
-- an overlap.
function Log:check()
  local all = {}
  for _, t in ipairs(self.terms) do all[#all + 1] = t end
  local open = 0
  for t in pairs(self.open) do
    open = open + 1
    all[#all + 1] = { owner = t.owner, token = t.token, start = t.start, finish = core.now(), key = t.key,
                      interrupted = false }
  end
  -- a participant that could not read its node's czxid (a Curator peer during a ZooKeeper
  -- leader election logs -1) has no token to order: its term still counts for overlaps
  for _, t in ipairs(all) do
    if t.token and t.token < 0 then t.token = nil end
  end
  local r = fw.check(all, 1)
  local by_owner, changes, prev = {}, 0, nil
  table.sort(all, function(a, b) return a.start < b.start end)
  for _, t in ipairs(all) do
    by_owner[t.owner] = (by_owner[t.owner] or 0) + 1
    if prev ~= t.owner then changes = changes + 1 end
    prev = t.owner
  end
  local lines = {}
  for _, e in ipairs(r.examples) do lines[#lines + 1] = e end
  local out = { terms = #all, overlaps = r.violations, token_regressions = r.token_violations, open = open,
                by_owner = by_owner, changes = changes, all = all }
  out.report = ("%d terms, %d leadership changes, %d overlaps, %d token regressions%s%s"):format(#all, changes,
    out.overlaps, out.token_regressions, #lines > 0 and ":\n  " or "", table.concat(lines, "\n  "))
  return out
end

return M
