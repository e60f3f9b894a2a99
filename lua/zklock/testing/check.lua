-- zklock.testing.check: a history of what processes did (one log file per process, or in memory)
-- and checkers over it, Jepsen style: each returns true, or nil, a message naming the first
-- violation with both events (and where they were logged), and the two events.
--
-- Record format: one event a line, tab-separated, in one file per process:
--     <time ms> TAB <process> TAB <event> TAB <key> [TAB name=value]...
-- time: a clock all processes share (zklock.core.now(), CLOCK_MONOTONIC ms; the recorder's
-- default). Events the checkers read:
--     acquire  key [token=N] [seq=N] [mode=read|write] [limit=N] [id=X]   a hold begins
--     release  key [interrupted=1] [id=X]      the hold ends (log it when the process stops acting
--                                              as holder, e.g. on SUSPENDED); id= pairs leases
--     request  key                             the process is queued for key (for fifo)
--     lead     key / unlead key                leadership of key begins / ends
--     accept   key token=N / reject key token=N  a fenced resource took / refused a write
--     enqueue  key item=X / dequeue key item=X a queue item put / taken
--     cache, write, session, fault, heal, server, snapshot   see check.cache
-- Any other event is kept and ignored. An acquire with no release ends at its process's last
-- event (the process logged nothing later; marked open). Log acquire after the grant and release
-- before the actual release: the logged hold then lies inside the real one.
--
--   local check = require("zklock.testing.check")
--   local rec = check.recorder(dir .. "/p1.log", "p1")     -- rec:acquire(key, {token = t}) ...
--   local h = check.load(dir)                              -- every *.log file in dir
--   assert(check.mutex(h))                                 -- or check.all(h, {"mutex", "tokens"})
--   lua -e 'require("zklock.testing.check").main(arg)' /dev/null mutex,tokens DIR   (exit 1 on a violation)
local M = {}

---------------------------------------------------------------- recording

local Recorder = {}
Recorder.__index = Recorder
M.Recorder = Recorder

local function default_clock()
  local ok, core = pcall(require, "zklock.core")
  if ok and type(core) == "table" and core.now then return core.now end
  local shell = require("zklock.testing.shell")
  return function() return shell.now() * 1000 end
end

local function clean(s)
  return (tostring(s):gsub("[\t\n\r]", " "))
end

-- check.recorder(path, process [, clock]) -> recorder. path nil: in memory only (rec.events);
-- an open file: lines go to it (not kept in memory; close() leaves the file open, its owner
-- flushes and closes it). clock() -> ms (default zklock.core.now).
function M.recorder(path, process, clock)
  local handle = io.type(path) == "file" and path or nil
  if path ~= nil and type(path) ~= "string" and not handle then
    error("zklock.testing.check.recorder: bad argument #1: expected a file path, an open file or nil, got "
      .. tostring(path), 2)
  end
  if process == nil or (type(process) ~= "string" and type(process) ~= "number") then
    error("zklock.testing.check.recorder: bad argument #2: expected a process name (string), got "
      .. tostring(process), 2)
  end
  if clock ~= nil and type(clock) ~= "function" then
    error("zklock.testing.check.recorder: bad argument #3: expected a clock function or nil", 2)
  end
  local self = setmetatable({ path = not handle and path or nil, process = clean(process),
                              clock = clock or default_clock(), events = {}, keep = not handle }, Recorder)
  if handle then
    self.file, self.shared = handle, true
  elseif path then
    local f, err = io.open(path, "a")
    if not f then error("zklock.testing.check.recorder: cannot open " .. path .. ": " .. tostring(err), 2) end
    f:setvbuf("line")
    self.file = f
  end
  return self
end

-- rec:log(event, key [, fields [, t]]) -> the event. fields: { name = value }.
function Recorder:log(event, key, fields, t)
  if type(event) ~= "string" or not event:match("^[%w_%-]+$") then
    error("zklock.testing.check: bad event name " .. tostring(event) .. " (expected a word)", 2)
  end
  t = t or self.clock()
  local parts = { ("%.3f"):format(t), self.process, event, clean(key == nil and "-" or key) }
  local names = {}
  for k in pairs(fields or {}) do names[#names + 1] = tostring(k) end
  table.sort(names)
  local f = {}
  for _, k in ipairs(names) do
    local v = fields[k]
    if v ~= nil and v ~= false then
      if v == true then v = 1 end
      if type(v) == "number" and v == math.floor(v) then v = ("%.0f"):format(v) end
      parts[#parts + 1] = clean(k) .. "=" .. clean(v)
      f[k] = tostring(v)
    end
  end
  local ev = { t = t, p = self.process, ev = event, key = clean(key == nil and "-" or key), f = f,
               src = (self.path or (self.shared and "file" or "memory")) .. ":" .. (#self.events + 1) }
  if self.keep then self.events[#self.events + 1] = ev end
  if self.file then self.file:write(table.concat(parts, "\t"), "\n") end
  return ev
end

function Recorder:acquire(key, fields, t) return self:log("acquire", key, fields, t) end
function Recorder:release(key, fields, t) return self:log("release", key, fields, t) end
function Recorder:flush() if self.file then self.file:flush() end end
function Recorder:close()
  if self.file and not self.shared then self.file:close() end
  self.file = nil
end

---------------------------------------------------------------- loading

local function parse_line(line, src)
  local parts = {}
  for w in (line .. "\t"):gmatch("([^\t]*)\t") do parts[#parts + 1] = w end
  local t = tonumber(parts[1])
  if not t or #parts < 4 then return nil end
  local f = {}
  for i = 5, #parts do
    local k, v = parts[i]:match("^([^=]+)=(.*)$")
    if k then f[k] = v end
  end
  return { t = t, p = parts[2], ev = parts[3], key = parts[4], f = f, src = src }
end

local function list_dir(dir)
  local shell = require("zklock.testing.shell")
  local out = shell.sh("ls -1 " .. shell.shq(dir) .. " 2>/dev/null")
  local files = {}
  for name in out:gmatch("[^\n]+") do
    if name:match("%.log$") then files[#files + 1] = dir .. "/" .. name end
  end
  table.sort(files)
  return files
end

-- check.load(source, ...) -> history (events sorted by time; ties keep file order).
-- source: a file, a directory (its *.log files), a recorder, a list of events or of sources.
function M.load(...)
  local events, seq = {}, 0
  local function add(ev)
    seq = seq + 1
    ev.n = seq
    events[#events + 1] = ev
  end
  local function from(src)
    if type(src) == "table" and src.events and getmetatable(src) == Recorder then
      for _, ev in ipairs(src.events) do add(ev) end
    elseif type(src) == "table" and src.t and src.ev then
      add(src)
    elseif type(src) == "table" then
      for _, s in ipairs(src) do from(s) end
    elseif type(src) == "string" then
      local shell = require("zklock.testing.shell")
      if shell.execute("test -d " .. shell.shq(src)) then
        for _, file in ipairs(list_dir(src)) do from(file) end
        return
      end
      local text = shell.read_file(src)
      if text == nil then error("zklock.testing.check.load: cannot read " .. src, 3) end
      local lines = 0
      for line in text:gmatch("[^\n]+") do
        lines = lines + 1
        local ev = parse_line(line, src .. ":" .. lines)
        if ev then add(ev) end
      end
    else
      error("zklock.testing.check.load: expected a file, directory, recorder or event list, got " .. tostring(src), 3)
    end
  end
  for i = 1, select("#", ...) do from((select(i, ...))) end
  table.sort(events, function(a, b)
    if a.t ~= b.t then return a.t < b.t end
    return a.n < b.n
  end)
  return { events = events }
end

local function history_of(h)
  if type(h) == "table" and h.events and getmetatable(h) ~= Recorder then return h end
  return M.load(h)
end
M.history = history_of

---------------------------------------------------------------- describing events

local function describe_ev(ev)
  if not ev then return "(none)" end
  local names = {}
  for k in pairs(ev.f) do names[#names + 1] = k end
  table.sort(names)
  local fs = {}
  for _, k in ipairs(names) do fs[#fs + 1] = k .. "=" .. ev.f[k] end
  return ("%s %s %s at %.3f ms%s [%s]"):format(ev.p, ev.label or ev.ev, tostring(ev.key), ev.t,
    #fs > 0 and (" (" .. table.concat(fs, " ") .. ")") or "", ev.src or "?")
end
M.describe = describe_ev

local function describe_hold(h)
  local s = describe_ev(h.a)
  if h.r then
    s = s .. "\n      ended by " .. describe_ev(h.r)
  else
    s = s .. ("\n      never ended (open; counted until its process's last event at %.3f ms)"):format(h.finish)
  end
  return s
end

local function violation(kind, key, text, a, b)
  local msg = ("%s violation on %s: %s\n  first:  %s\n  second: %s"):format(kind, tostring(key), text,
    a.a and describe_hold(a) or describe_ev(a), b.a and describe_hold(b) or describe_ev(b))
  return nil, msg, { first = a, second = b }
end

---------------------------------------------------------------- intervals

-- Hold intervals of `open_ev`/`close_ev` events: { key, p, start, finish, a = acquire event,
-- r = release event | nil, token, seq, mode, interrupted, open }.
local function intervals(h, open_ev, close_ev)
  local last = {}
  for _, ev in ipairs(h.events) do last[ev.p] = ev.t end
  local openh, out = {}, {}
  for _, ev in ipairs(h.events) do
    if ev.ev == open_ev or ev.ev == close_ev then
      local id = ev.p .. "\0" .. tostring(ev.key) .. "\0" .. (ev.f.id or "")
      if ev.ev == open_ev then
        local hold = { key = ev.key, p = ev.p, start = ev.t, a = ev, token = tonumber(ev.f.token),
                       seq = tonumber(ev.f.seq), mode = ev.f.mode, limit = tonumber(ev.f.limit) }
        local stack = openh[id]
        if not stack then stack = {} openh[id] = stack end
        stack[#stack + 1] = hold
        out[#out + 1] = hold
      else
        local stack = openh[id]
        local hold = stack and stack[#stack]
        if hold then
          stack[#stack] = nil
          hold.finish, hold.r = ev.t, ev
          hold.interrupted = ev.f.interrupted == "1" or ev.f.interrupted == "true"
        end
      end
    end
  end
  for _, hold in ipairs(out) do
    if not hold.finish then hold.finish, hold.open = last[hold.p] or hold.start, true end
  end
  return out
end
M.intervals = function(h, open_ev, close_ev)
  return intervals(history_of(h), open_ev or "acquire", close_ev or "release")
end

local function by_key(list, keep)
  local keys, groups = {}, {}
  for _, x in ipairs(list) do
    if not keep or keep(x) then
      local g = groups[x.key]
      if not g then g = {} groups[x.key] = g keys[#keys + 1] = x.key end
      g[#g + 1] = x
    end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys, groups
end

local function clean_only(opts)
  return function(hold) return not (opts and opts.ignore_interrupted and hold.interrupted) end
end

-- Sweep over one key's holds: calls on_start(hold, open_set) for each start, ends before starts
-- at the same instant (touching holds do not overlap). Returns the first violation it reports.
local function sweep(holds, on_start)
  -- at one instant: ends of holds first (touching holds do not overlap), then starts, then the
  -- ends of zero-length holds (a single event: it must open before it closes)
  local pts = {}
  for _, h in ipairs(holds) do
    pts[#pts + 1] = { t = h.start, d = 1, h = h }
    pts[#pts + 1] = { t = h.finish, d = h.finish > h.start and 0 or 2, h = h }
  end
  table.sort(pts, function(x, y)
    if x.t ~= y.t then return x.t < y.t end
    if x.d ~= y.d then return x.d < y.d end
    return x.h.a.n < y.h.a.n
  end)
  local open, nopen = {}, 0
  for _, pt in ipairs(pts) do
    if pt.d == 1 then
      if pt.h.finish > pt.h.start or nopen > 0 then
        local bad = on_start(pt.h, open, nopen)
        if bad then return bad end
      end
      open[pt.h] = true
      nopen = nopen + 1
    elseif open[pt.h] then
      open[pt.h] = nil
      nopen = nopen - 1
    end
  end
end

local function earliest(set)
  local best
  for h in pairs(set) do
    if not best or h.start < best.start or (h.start == best.start and h.a.n < best.a.n) then best = h end
  end
  return best
end

local function overlaps(kind, text, holds_of, limit_of)
  return function(h, opts)
    h = history_of(h)
    local keys, groups = by_key(holds_of(h), clean_only(opts))
    local count = 0
    for _, key in ipairs(keys) do
      count = count + #groups[key]
      local bad = sweep(groups[key], function(hold, open, nopen)
        local limit = limit_of(hold, opts)
        if nopen + 1 > limit then return { earliest(open), hold } end
      end)
      if bad then
        return violation(kind, key, text(limit_of(bad[2], opts)), bad[1], bad[2])
      end
    end
    return true, count
  end
end

-- mutex(h [, opts]): no two holds of one key overlap. opts.ignore_interrupted: skip holds whose
-- release says interrupted=1.
M.mutex = overlaps("mutual exclusion", function() return "a second holder while the first still held it" end,
  function(h) return intervals(h, "acquire", "release") end, function() return 1 end)

-- semaphore(h, opts): at most opts.limit (or the acquire's limit= field) holds of a key at once.
M.semaphore = overlaps("semaphore limit",
  function(n) return ("more than %d holders at once (the first still-open holder and the one over the limit)")
    :format(n) end,
  function(h) return intervals(h, "acquire", "release") end,
  function(hold, opts)
    local n = hold.limit or (opts and opts.limit)
    if not n then error("zklock.testing.check.semaphore: needs opts.limit or a limit= field on acquire", 4) end
    return n
  end)

-- leader(h [, opts]): at most one process leads a key at any instant (lead / unlead events).
M.leader = overlaps("single leader", function() return "two leaders at once" end,
  function(h) return intervals(h, "lead", "unlead") end, function() return 1 end)

-- rwlock(h [, opts]): a write hold (mode=write) overlaps no other hold; reads may overlap reads.
function M.rwlock(h, opts)
  h = history_of(h)
  local keys, groups = by_key(intervals(h, "acquire", "release"), clean_only(opts))
  local count = 0
  for _, key in ipairs(keys) do
    count = count + #groups[key]
    local bad = sweep(groups[key], function(hold, open)
      local writing = hold.mode == "write"
      local other
      for o in pairs(open) do
        if writing or o.mode == "write" then
          if not other or o.start < other.start then other = o end
        end
      end
      if other then return { other, hold } end
    end)
    if bad then
      return violation("readers/writer", key, bad[2].mode == "write" and "a writer while another holder held it"
        or "a reader while a writer held it", bad[1], bad[2])
    end
  end
  return true, count
end

-- tokens(h [, opts]): per key, fencing tokens strictly rise in grant order (holds with token=).
function M.tokens(h, opts)
  h = history_of(h)
  local keys, groups = by_key(intervals(h, "acquire", "release"), function(x)
    return x.token ~= nil and clean_only(opts)(x)
  end)
  local count = 0
  for _, key in ipairs(keys) do
    local prev
    for _, hold in ipairs(groups[key]) do
      count = count + 1
      if prev and hold.token <= prev.token then
        return violation("fencing token order", key, ("token %s granted after token %s"):format(
          hold.a.f.token, prev.a.f.token), prev, hold)
      end
      prev = hold
    end
  end
  return true, count
end

-- fenced(h): a fenced resource never accepted a token below one it accepted before (accept
-- events; in zxid= order when every accept of the key has one, else in time order).
function M.fenced(h)
  h = history_of(h)
  local keys, groups = by_key(h.events, function(ev) return ev.ev == "accept" end)
  local count = 0
  for _, key in ipairs(keys) do
    local list = groups[key]
    local by_zxid = true
    for _, ev in ipairs(list) do
      if not tonumber(ev.f.token) then
        return nil, "fenced: an accept event without a numeric token: " .. describe_ev(ev), { first = ev }
      end
      if not tonumber(ev.f.zxid) then by_zxid = false end
    end
    if by_zxid then
      table.sort(list, function(a, b)
        local x, y = tonumber(a.f.zxid), tonumber(b.f.zxid)
        if x ~= y then return x < y end
        return a.n < b.n
      end)
    end
    local best
    for _, ev in ipairs(list) do
      count = count + 1
      local tok = tonumber(ev.f.token)
      if best and tok < tonumber(best.f.token) then
        return violation("fenced resource", key, ("stale token %s accepted after token %s"):format(
          ev.f.token, best.f.token), best, ev)
      end
      if not best or tok > tonumber(best.f.token) then best = ev end
    end
  end
  return true, count
end

-- fifo(h [, opts]): per key, grants come in queue order: by the acquire's seq= field when it has
-- one, else by the time of the process's last request event for the key before the grant.
function M.fifo(h, opts)
  h = history_of(h)
  local req = {}
  local holds = intervals(h, "acquire", "release")
  for _, ev in ipairs(h.events) do
    if ev.ev == "request" then req[ev.p .. "\0" .. tostring(ev.key)] = ev
    elseif ev.ev == "acquire" then
      for _, hold in ipairs(holds) do
        if hold.a == ev then
          local r = req[ev.p .. "\0" .. tostring(ev.key)]
          hold.order = hold.seq or (r and r.t)
          hold.req = r
          req[ev.p .. "\0" .. tostring(ev.key)] = nil
          break
        end
      end
    end
  end
  local keys, groups = by_key(holds, function(x) return x.order ~= nil and clean_only(opts)(x) end)
  local count = 0
  for _, key in ipairs(keys) do
    local prev
    for _, hold in ipairs(groups[key]) do
      count = count + 1
      if prev and hold.order < prev.order then
        local what = hold.seq and ("seq %s granted after seq %s"):format(hold.a.f.seq, prev.a.f.seq)
          or ("a request made at %.3f ms granted after one made at %.3f ms"):format(hold.order, prev.order)
        return violation("FIFO", key, what, prev, hold)
      end
      prev = hold
    end
  end
  return true, count
end

-- queue(h [, opts]): every dequeued item was enqueued and is dequeued once; with opts.complete
-- (default true) every enqueued item is dequeued.
function M.queue(h, opts)
  h = history_of(h)
  local put, got, count = {}, {}, 0
  for _, ev in ipairs(h.events) do
    local item = ev.f.item
    local id = tostring(ev.key) .. "\0" .. tostring(item)
    if ev.ev == "enqueue" then
      put[id] = put[id] or ev
    elseif ev.ev == "dequeue" then
      count = count + 1
      if got[id] then
        return violation("exactly-once delivery", ev.key, ("item %s delivered twice"):format(tostring(item)),
          got[id], ev)
      end
      got[id] = ev
    end
  end
  local missing = {}
  for id, ev in pairs(got) do
    if not put[id] then missing[#missing + 1] = ev end
  end
  table.sort(missing, function(a, b) return a.n < b.n end)
  if missing[1] then
    local ev = missing[1]
    return nil, ("exactly-once delivery violation on %s: item %s delivered but never enqueued\n  event: %s")
      :format(ev.key, tostring(ev.f.item), describe_ev(ev)), { first = ev }
  end
  if not opts or opts.complete ~= false then
    local lost = {}
    for id, ev in pairs(put) do if not got[id] then lost[#lost + 1] = ev end end
    table.sort(lost, function(a, b) return a.n < b.n end)
    if lost[1] then
      local ev = lost[1]
      return nil, ("exactly-once delivery violation on %s: item %s enqueued but never delivered (%d lost)\n"
        .. "  event: %s"):format(ev.key, tostring(ev.f.item), #lost, describe_ev(ev)), { first = ev }
    end
  end
  return true, count
end

-- spans(h, event [, opts]) -> a history of holds made from what processes did: for each process,
-- key and token= value, one hold from its first to its last `event` (say "write"): opts.as =
-- "acquire" (default: acquire/release events, for mutex, semaphore, tokens) or "lead"
-- (lead/unlead, for leader). A hold then is what the process did, not what it believed.
function M.spans(h, event, opts)
  h = history_of(h)
  if type(event) ~= "string" then
    error("zklock.testing.check.spans: bad argument #2: expected an event name (such as \"write\")", 2)
  end
  local as = opts and opts.as or "acquire"
  local open_ev, close_ev = as, (as == "lead" and "unlead" or "release")
  if as ~= "acquire" and as ~= "lead" then
    error("zklock.testing.check.spans: opts.as: expected \"acquire\" or \"lead\", got " .. tostring(as), 2)
  end
  local groups, order = {}, {}
  for _, ev in ipairs(h.events) do
    if ev.ev == event then
      local id = ev.p .. "\0" .. tostring(ev.key) .. "\0" .. (ev.f.token or "-")
      local g = groups[id]
      if not g then g = { first = ev } groups[id] = g order[#order + 1] = id end
      g.last = ev
    end
  end
  local events = {}
  for _, id in ipairs(order) do
    local g = groups[id]
    local f = {}
    for k, v in pairs(g.first.f) do f[k] = v end
    events[#events + 1] = { t = g.first.t, p = g.first.p, ev = open_ev, key = g.first.key, f = f, src = g.first.src,
                            label = "first " .. event }
    events[#events + 1] = { t = g.last.t, p = g.last.p, ev = close_ev, key = g.last.key, f = {}, src = g.last.src,
                            label = "last " .. event }
  end
  return M.load(events)
end

-- from_holds(list) -> a history from hold records kept as tables: { key =, owner =, start = ms,
-- finish = ms [, token =] [, interrupted = true] [, mode =] }, one acquire/release pair each
-- (owner is the process; keys keep their type).
function M.from_holds(list)
  if type(list) ~= "table" then
    error("zklock.testing.check.from_holds: bad argument #1: expected a list of holds, got " .. tostring(list), 2)
  end
  local events = {}
  for i, hd in ipairs(list) do
    if type(hd) ~= "table" or type(hd.start) ~= "number" or type(hd.finish) ~= "number" then
      error(("zklock.testing.check.from_holds: hold %d: expected { key =, owner =, start = ms, finish = ms }")
        :format(i), 2)
    end
    local p, id, key = tostring(hd.owner == nil and i or hd.owner), tostring(i), hd.key == nil and "-" or hd.key
    local token = hd.token
    if type(token) == "number" then token = ("%.0f"):format(token) elseif token ~= nil then token = tostring(token) end
    events[#events + 1] = { t = hd.start, p = p, ev = "acquire", key = key, src = "hold " .. i,
                            f = { token = token, mode = hd.mode, id = id } }
    events[#events + 1] = { t = hd.finish, p = p, ev = "release", key = key, src = "hold " .. i,
                            f = { interrupted = hd.interrupted and "1" or nil, id = id } }
  end
  return M.load(events)
end

-- stats(h [, opts]) -> counts over every key's holds (opts.limit holders allowed at once, 1):
-- { holds, clean (not interrupted), violations (clean holds starting while `limit` others were
-- held), interrupted_overlaps (more when interrupted holds count too), token_violations (limit 1:
-- a clean hold's token not above the previous clean hold's), max_overlap = { [key] = n },
-- examples = { text, ... } }. A soak's summary; the checkers above stop at the first violation.
function M.stats(h, opts)
  h = history_of(h)
  local limit = opts and opts.limit or 1
  local r = { holds = 0, clean = 0, violations = 0, interrupted_overlaps = 0, token_violations = 0,
              max_overlap = {}, examples = {} }
  local keys, groups = by_key(intervals(h, "acquire", "release"))
  local function line(hd)
    return ("%s[%s token=%s %.3f..%.3f]"):format(hd.p, tostring(hd.key), tostring(hd.token), hd.start, hd.finish)
  end
  local function sweep_count(list, with_interrupted)
    local pts = {}
    for _, hd in ipairs(list) do
      if with_interrupted or not hd.interrupted then
        pts[#pts + 1] = { t = hd.start, d = 1, h = hd }
        pts[#pts + 1] = { t = hd.finish, d = -1, h = hd }
      end
    end
    table.sort(pts, function(a, b)
      if a.t ~= b.t then return a.t < b.t end
      if a.d ~= b.d then return a.d < b.d end
      return a.h.a.n < b.h.a.n
    end)
    local cur, max, excess, open = 0, 0, 0, {}
    for _, pt in ipairs(pts) do
      cur = cur + pt.d
      if pt.d > 0 then
        if cur > limit then
          excess = excess + 1
          if #r.examples < 8 and not with_interrupted then
            local others = {}
            for o in pairs(open) do others[#others + 1] = line(o) end
            table.sort(others)
            r.examples[#r.examples + 1] = line(pt.h) .. " overlaps " .. table.concat(others, ", ")
          end
        end
        open[pt.h] = true
      else
        open[pt.h] = nil
      end
      if cur > max then max = cur end
    end
    return max, excess
  end
  -- keys sort as strings; the table keeps their type
  for _, key in ipairs(keys) do
    local list = groups[key]
    table.sort(list, function(a, b)
      if a.start ~= b.start then return a.start < b.start end
      if a.finish ~= b.finish then return a.finish < b.finish end
      return a.a.n < b.a.n
    end)
    r.holds = r.holds + #list
    local max, excess = sweep_count(list, false)
    local _, excess_all = sweep_count(list, true)
    r.max_overlap[key] = max
    r.violations = r.violations + excess
    r.interrupted_overlaps = r.interrupted_overlaps + math.max(0, excess_all - excess)
    local prev
    for _, hd in ipairs(list) do
      if not hd.interrupted then
        r.clean = r.clean + 1
        if limit == 1 and hd.token then
          if prev and hd.token <= prev.token then
            r.token_violations = r.token_violations + 1
            if #r.examples < 12 then
              r.examples[#r.examples + 1] = ("token order on %s: %s after %s"):format(tostring(key),
                tostring(hd.token), tostring(prev.token))
            end
          end
          prev = hd
        end
      end
    end
  end
  return r
end

---------------------------------------------------------------- caches (client:cache)
--
-- cache(h [, opts]): a cache followed a tree that writers changed. Events:
--   cache     <path> what=added|updated|removed|initialized czxid=N mzxid=N value=V
--             (the cache's process logs each event its on_change handler got, as it got it)
--   write     <path> op=set|create|delete value=V sent=<ms> [unknown=1]
--             (a writer, after the server answered; sent = when the request went out; unknown=1:
--             no answer, the outcome is unknown: it only ends the value before it)
--   session   - sid=X  (the cache's process, when its client is CONNECTED; a new sid = a new session)
--   fault     - / heal -   (a fault began / was healed)
--   server    <path> value=V czxid=N mzxid=N snap=N   (the server's tree, read after a fault)
--   snapshot  <root> snap=N   (logged after the server events of snapshot N)
-- Checks, per cache process:
--   * never back in time: per path, an update's mzxid is above the last one reported (equal: a
--     duplicate), a node is added only when absent and updated or removed only when present, an
--     update keeps the czxid (another czxid must be removed+added), a re-add has a higher czxid;
--   * a new session is followed by an `initialized` before the next snapshot;
--   * converged: at each snapshot, the nodes its events describe are the server's (path, czxid,
--     mzxid, value);
--   * visible changes reported: a write whose value stayed on the server longer than opts.window
--     ms (default 1000) appears in the events (a value in an added/updated event, a delete as a
--     removed event at or after it was sent), unless that time touched a fault, from its start to
--     opts.settle ms (default 5000) after its heal.
-- -> true, events checked | nil, message naming the first violation, { first =, second = }
function M.cache(h, opts)
  h = history_of(h)
  local window = opts and opts.window or 1000
  local settle = opts and opts.settle or 5000
  local last_t = 0
  for _, ev in ipairs(h.events) do if ev.t > last_t then last_t = ev.t end end
  -- faults: { from, to } (to: the heal + settle; a fault never healed lasts to the end)
  local faults, open_fault = {}, nil
  for _, ev in ipairs(h.events) do
    if ev.ev == "fault" then open_fault = open_fault or ev.t
    elseif ev.ev == "heal" and open_fault then
      faults[#faults + 1] = { open_fault, ev.t + settle }
      open_fault = nil
    end
  end
  if open_fault then faults[#faults + 1] = { open_fault, math.huge } end
  local function in_fault(a, b)
    for _, f in ipairs(faults) do if a <= f[2] and b >= f[1] then return true end end
    return false
  end
  local procs, order = {}, {}
  local function proc(p)
    local st = procs[p]
    if not st then
      st = { nodes = {}, gone = {}, last = {}, values = {}, removed_at = {}, sid = nil, need_init = nil }
      procs[p] = st
      order[#order + 1] = p
    end
    return st
  end
  local count = 0
  local server, writes = {}, {}
  for _, ev in ipairs(h.events) do
    local f = ev.f
    if ev.ev == "cache" then
      count = count + 1
      local st = proc(ev.p)
      local path, what = ev.key, f.what
      local cz, mz = tonumber(f.czxid), tonumber(f.mzxid)
      local cur = st.nodes[path]
      if what == "added" then
        if cur then
          return violation("cache monotonicity", path, "added again without a remove in between", cur.ev, ev)
        end
        local gone = st.gone[path]
        if gone and cz and tonumber(gone.f.czxid) and cz < tonumber(gone.f.czxid) then
          return violation("cache monotonicity", path, "re-added an older incarnation (lower czxid) than one"
            .. " already removed", gone, ev)
        end
        st.nodes[path] = { cz = cz, mz = mz, value = f.value, ev = ev }
        st.values[path .. "\0" .. tostring(f.value)] = true
      elseif what == "updated" then
        if not cur then
          return violation("cache monotonicity", path, "updated while not present", st.gone[path] or ev, ev)
        end
        if cz ~= cur.cz then
          return violation("cache monotonicity", path, ("another incarnation (czxid %s after %s) reported as an"
            .. " update, not removed+added"):format(tostring(cz), tostring(cur.cz)), cur.ev, ev)
        end
        if mz == cur.mz then
          return violation("cache monotonicity", path,
            ("duplicate event (mzxid %s reported twice)"):format(tostring(mz)), cur.ev, ev)
        end
        if mz < cur.mz then
          return violation("cache monotonicity", path, ("went back in time: mzxid %s after %s"):format(tostring(mz),
            tostring(cur.mz)), cur.ev, ev)
        end
        st.nodes[path] = { cz = cz, mz = mz, value = f.value, ev = ev }
        st.values[path .. "\0" .. tostring(f.value)] = true
      elseif what == "removed" then
        if not cur then
          return violation("cache monotonicity", path, "removed while not present", st.gone[path] or ev, ev)
        end
        st.nodes[path] = nil
        st.gone[path] = ev
        local r = st.removed_at[path] or {}
        r[#r + 1] = ev.t
        st.removed_at[path] = r
      elseif what == "initialized" then
        st.need_init = nil
      end
    elseif ev.ev == "session" then
      local st = proc(ev.p)
      if st.sid and f.sid ~= st.sid then st.need_init = ev end
      st.sid = f.sid
    elseif ev.ev == "server" then
      local snap = f.snap or "-"
      server[snap] = server[snap] or {}
      server[snap][ev.key] = ev
    elseif ev.ev == "snapshot" then
      local snap = f.snap or "-"
      local want = server[snap] or {}
      for _, p in ipairs(order) do
        local st = procs[p]
        if st.need_init then
          return violation("cache resync", ev.key, "a new session, and no initialized before the snapshot",
            st.need_init, ev)
        end
        local paths = {}
        for path in pairs(want) do paths[#paths + 1] = path end
        for path in pairs(st.nodes) do if not want[path] then paths[#paths + 1] = path end end
        table.sort(paths)
        for _, path in ipairs(paths) do
          local s, c = want[path], st.nodes[path]
          if not c then
            return violation("cache convergence", path, ("on the server (snapshot %s) but not in the cache's events")
              :format(snap), s, ev)
          elseif not s then
            return violation("cache convergence", path, ("in the cache's events but not on the server (snapshot %s)")
              :format(snap), c.ev, ev)
          elseif tonumber(s.f.czxid) ~= c.cz or tonumber(s.f.mzxid) ~= c.mz or s.f.value ~= c.value then
            return violation("cache convergence", path, ("differs from the server (snapshot %s): server czxid=%s"
              .. " mzxid=%s, cache czxid=%s mzxid=%s"):format(snap, s.f.czxid, s.f.mzxid, tostring(c.cz),
              tostring(c.mz)), c.ev, s)
          end
        end
      end
    elseif ev.ev == "write" then
      writes[#writes + 1] = ev
    end
  end
  -- visibility: each write's value lasted from its answer to the next write's sending on that path
  local by_path = {}
  for _, w in ipairs(writes) do
    local l = by_path[w.key] or {}
    l[#l + 1] = w
    by_path[w.key] = l
  end
  local paths = {}
  for path in pairs(by_path) do paths[#paths + 1] = path end
  table.sort(paths)
  for _, path in ipairs(paths) do
    local l = by_path[path]
    for i, w in ipairs(l) do
      local nxt = l[i + 1]
      local ends = nxt and (tonumber(nxt.f.sent) or nxt.t) or last_t
      if w.f.unknown ~= "1" and ends - w.t > window and not in_fault(tonumber(w.f.sent) or w.t, ends) then
        for _, p in ipairs(order) do
          local st = procs[p]
          local seen
          if w.f.op == "delete" then
            for _, t in ipairs(st.removed_at[path] or {}) do
              if t >= (tonumber(w.f.sent) or w.t) then seen = true break end
            end
          else
            seen = st.values[path .. "\0" .. tostring(w.f.value)]
          end
          if not seen then
            return violation("cache visibility", path, ("a %s that stayed on the server for %.0f ms (> %g ms, no fault)"
              .. " never appeared in %s's events"):format(w.f.op or "write", ends - w.t, window, p), w, nxt or w)
          end
        end
      end
    end
  end
  return true, count
end

-- record_cache(rec, cache [, fn]) -> cache: the cache's handler logs every event for check.cache
-- (then calls fn(event, cache, path, stat, data) when given). Replaces the cache's handler.
function M.record_cache(rec, cache, fn)
  if getmetatable(rec) ~= Recorder then
    error("zklock.testing.check.record_cache: bad argument #1: expected a recorder", 2)
  end
  return cache:on_change(function(event, c, path, stat, data)
    rec:log("cache", path, { what = event, czxid = stat and stat.czxid, mzxid = stat and stat.mzxid,
                             value = type(data) == "string" and data or nil })
    if fn then fn(event, c, path, stat, data) end
  end)
end

-- snapshot(rec, client, root, snap) -> nodes logged | nil, msg: reads the server's tree below
-- root through client (plain reads, one after another) and logs a `server` event per node, then
-- `snapshot root snap=`. Run it while nothing writes, so the reads see one state.
function M.snapshot(rec, client, root, snap)
  if getmetatable(rec) ~= Recorder then
    error("zklock.testing.check.snapshot: bad argument #1: expected a recorder", 2)
  end
  local list, stack = {}, { root }
  while #stack > 0 do
    local path = table.remove(stack)
    local data, stat, code = client:get(path)
    if data then
      list[#list + 1] = { path, data, stat }
      local kids, msg, kcode = client:children(path)
      if not kids and kcode ~= "ZNONODE" then return nil, msg end
      for _, k in ipairs(kids or {}) do stack[#stack + 1] = (path == "/" and "" or path) .. "/" .. k end
    elseif code ~= "ZNONODE" then
      return nil, stat
    end
  end
  for _, e in ipairs(list) do
    rec:log("server", e[1], { value = e[2], czxid = e[3].czxid, mzxid = e[3].mzxid, snap = snap })
  end
  rec:log("snapshot", root, { snap = snap })
  return #list
end

-- filter(h, pred) -> a history of the events for which pred(event) is true (say, one key).
function M.filter(h, pred)
  h = history_of(h)
  if type(pred) ~= "function" then
    error("zklock.testing.check.filter: bad argument #2: expected a function(event) -> boolean", 2)
  end
  local out = {}
  for _, ev in ipairs(h.events) do if pred(ev) then out[#out + 1] = ev end end
  return { events = out }
end

M.CHECKS = { "mutex", "semaphore", "rwlock", "tokens", "fenced", "fifo", "leader", "queue", "cache" }

-- all(h, names [, opts]) -> true | nil, message of the first failing check
function M.all(h, names, opts)
  h = history_of(h)
  if type(names) == "string" then
    local t = {}
    for n in names:gmatch("[^,%s]+") do t[#t + 1] = n end
    names = t
  end
  if type(names) ~= "table" or #names == 0 then
    error("zklock.testing.check.all: bad argument #2: expected check names (" .. table.concat(M.CHECKS, ", ") .. ")", 2)
  end
  for _, n in ipairs(names) do
    local fn = M[n]
    local known = false
    for _, c in ipairs(M.CHECKS) do if c == n then known = true end end
    if not known or type(fn) ~= "function" then
      error("zklock.testing.check.all: unknown check " .. tostring(n) .. " (expected one of "
        .. table.concat(M.CHECKS, ", ") .. ")", 2)
    end
    local ok, msg, pair = fn(h, opts)
    if not ok then return nil, msg, pair, n end
  end
  return true
end

---------------------------------------------------------------- command line

local USAGE = [[
usage: lua -e 'require("zklock.testing.check").main(arg)' /dev/null CHECKS PATH... [options]
  CHECKS   comma-separated: mutex, semaphore, rwlock, tokens, fenced, fifo, leader, queue, cache
  PATH     a log file or a directory of *.log files (one per process)
  --limit N             the semaphore limit (unless acquire events carry limit=)
  --ignore-interrupted  skip holds whose release says interrupted=1
  --partial             queue: do not require every enqueued item to be delivered
  --window MS           cache: a write visible longer than this must be reported (default 1000)
  --settle MS           cache: misses excused this long after a fault's heal (default 5000)
exit status: 0 every check passed, 1 a violation (printed), 2 usage error]]

-- main(argv [, exit [, write]]) : runs the checks, prints "ok: ..." lines or the first violation
-- (write(s), default io.write; usage errors to stderr), and exits (exit = os.exit by default;
-- pass a function to get the status instead).
function M.main(argv, exit, write)
  exit = exit or os.exit
  write = write or io.write
  local stderr = write == io.write and function(...) io.stderr:write(...) end or write
  argv = argv or {}
  local args, opts = {}, { complete = true }
  local i = 1
  -- `lua -e ... /dev/null ARGS` puts the script name at arg[0]; accept either form
  while argv[i] ~= nil do
    local a = argv[i]
    if a == "--limit" then opts.limit = tonumber(argv[i + 1]) i = i + 1
      if not opts.limit then stderr(USAGE, "\n") return exit(2) end
    elseif a == "--ignore-interrupted" then opts.ignore_interrupted = true
    elseif a == "--partial" then opts.complete = false
    elseif a == "--window" or a == "--settle" then
      opts[a:sub(3)] = tonumber(argv[i + 1]) i = i + 1
      if not opts[a:sub(3)] then stderr(USAGE, "\n") return exit(2) end
    elseif a == "-h" or a == "--help" then write(USAGE, "\n") return exit(0)
    else args[#args + 1] = a end
    i = i + 1
  end
  if #args < 2 then stderr(USAGE, "\n") return exit(2) end
  local names = {}
  for n in args[1]:gmatch("[^,]+") do names[#names + 1] = n end
  local paths = {}
  for j = 2, #args do paths[#paths + 1] = args[j] end
  local ok, h = pcall(M.load, paths)
  if not ok then stderr(tostring(h), "\n") return exit(2) end
  for _, n in ipairs(names) do
    local fn = M[n]
    local known = false
    for _, c in ipairs(M.CHECKS) do if c == n then known = true end end
    if not known then stderr("unknown check ", n, "\n", USAGE, "\n") return exit(2) end
    local pok, res, msg = pcall(fn, h, opts)
    if not pok then stderr(tostring(res), "\n") return exit(2) end
    if not res then
      write(msg, "\n")
      return exit(1)
    end
    write(("ok: %s (%d checked, %d events)\n"):format(n, msg or 0, #h.events))
  end
  return exit(0)
end

return M
