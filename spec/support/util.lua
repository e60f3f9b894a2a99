-- spec/support/util.lua: small helpers shared by the specs (Lua 5.4 and LuaJIT).
--
--   local util = require("support.util")
--   util.now()                          monotonic seconds, sub-millisecond resolution
--   util.connect(hosts, opts)           zklock.connect that fails loudly and is remembered
--   util.close_all()                    close every client util.connect made (after_each)
--   util.drive(clients, seconds)        pump several clients (and their coroutines) for a while
--   util.wait_until(pred, timeout, clients)  poll pred() while driving clients; true | false
--   util.children(client, path)         child names sorted by sequence ({} if no such node)
--   util.seq(name)                      the sequence number at the end of a node name
--   util.stats_sum(clients), util.stats_delta(before, after)
--   util.mntr(zk, key)                  one numeric mntr value
--   util.watches_by_path(zk)            wchp parsed: { [path] = { session, ... } }
--   util.watched_paths(zk)              wchc parsed: list of every watched path
--   util.error_of(fn, ...)              the error message fn raises, or nil if it does not raise
--   util.has_words(msg, ...)            msg contains every word (plain find)
--   util.is_integer(x)
--   util.pack(...)                      the values as a table with n (nil holes survive)
--   util.assert_code(code, res [, what [, code_only]])  res = pack(call()) failed with `code`:
--                                       nil, "<code>: ...", code (code_only: only res[3] checked)
--   util.assert_words(msg, words)       msg is a string that contains every word; -> msg
--   util.record_session(c)              list of c's on_session states, in order
--   util.record_lock(m [, times])       list of m's on_lost states; times: also t.at, the
--                                       core.now() ms of each (t is then not a plain list)
--   util.index_of(list, v [, from])     first index of v at or after `from`, or nil
--   util.drive_until(clients, pred, timeout [, sample [, step]])  drive clients (util.drive,
--                                       `step` s a round, 0.01) until pred() or timeout s;
--                                       calls sample() between rounds; true | false
--   util.child_count(c, path)           number of children (0 if no such node)
--   util.wait_children(c, path, n, seconds)  c:sleep(0.02) until path has n children; true | false
--   util.wait_empty(c, paths, seconds)  c:sleep(0.02) until no path has children; true | false
--   util.stop_server(zk)                resume zk if a test left it paused, then zk:stop() (nil: no-op)
local zklock = require("zklock")
local testing = require("zklock.testing")
local core = require("zklock.core")

local M = {}

-- The lock node name Curator's InterProcessMutex makes: protected prefix (UUID v4), "lock-", seq10.
M.MUTEX_NODE = "^_c_%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x"
  .. "%-lock%-%d%d%d%d%d%d%d%d%d%d$"

function M.now()
  return core.now() / 1000
end

M.sleep = testing.sleep

---------------------------------------------------------------- clients

local opened = {}

function M.connect(hosts, opts)
  local c, err = zklock.connect(hosts, opts)
  assert(c, "connect failed: " .. tostring(err))
  opened[#opened + 1] = c
  return c
end

function M.close_all()
  for i = #opened, 1, -1 do
    local c = opened[i]
    opened[i] = nil
    pcall(c.close, c)
  end
end

local function is_open(c)
  return c and c.state ~= "CLOSED"
end

-- Drive every client for `seconds`: each one's I/O, timers and spawned coroutines run. Only the
-- public API is used: process() on all, and a short blocking sleep on the first open one.
function M.drive(clients, seconds)
  local deadline = M.now() + (seconds or 0)
  local rounds = 0
  repeat
    rounds = rounds + 1
    local sleeper
    for _, c in ipairs(clients or {}) do
      if is_open(c) then
        c:process()
        sleeper = sleeper or c
      end
    end
    local left = deadline - M.now()
    local step = math.min(0.005, math.max(left, 0))
    if sleeper and is_open(sleeper) then
      sleeper:sleep(step)
    elseif step > 0 then
      testing.sleep(step)
    end
  until M.now() >= deadline or rounds > 100000
end

-- Poll pred() until it returns a true value or `timeout` seconds pass (default 5), driving
-- `clients` in between. Returns pred's value (true) or false.
function M.wait_until(pred, timeout, clients)
  local deadline = M.now() + (timeout or 5)
  for _ = 1, 100000 do
    local v = pred()
    if v then return v end
    if M.now() >= deadline then return false end
    M.drive(clients, 0.01)
  end
  return false
end

-- Drive `clients` until pred() is true or `timeout` s pass; calls `sample` between rounds.
function M.drive_until(clients, pred, timeout, sample, step)
  local deadline = core.now() + timeout * 1000
  for _ = 1, 100000 do
    if pred() then return true end
    if core.now() >= deadline then return false end
    M.drive(clients, step or 0.01)
    if sample then sample() end
  end
  return false
end

---------------------------------------------------------------- znodes

-- "..._c_<uuid>-lock-0000000042" -> 42; a wrapped counter gives "lock--2147483648" -> -2147483648.
function M.seq(name)
  if type(name) ~= "string" then return nil end
  local s = name:match("%-(%-?%d+)$") or name:match("(%d+)$")
  return s and tonumber(s) or nil
end

-- Child names of `path`, sorted by their trailing sequence number (then by name); {} if the node
-- does not exist. Raises on any other error.
function M.children(client, path)
  local names, err, code = client:children(path)
  if not names then
    if code == "ZNONODE" then return {} end
    error("children(" .. path .. "): " .. tostring(err), 2)
  end
  table.sort(names, function(a, b)
    local x, y = M.seq(a) or -1, M.seq(b) or -1
    if x ~= y then return x < y end
    return a < b
  end)
  return names
end

function M.child_count(c, path)
  local names = c:children(path)
  return names and #names or 0
end

function M.wait_children(c, path, n, seconds)
  local deadline = core.now() + seconds * 1000
  while core.now() < deadline do
    local names = c:children(path)
    if names and #names == n then return true end
    c:sleep(0.02)
  end
  return false
end

function M.wait_empty(c, paths, seconds)
  local deadline = core.now() + seconds * 1000
  repeat
    local n = 0
    for _, p in ipairs(paths) do n = n + M.child_count(c, p) end
    if n == 0 then return true end
    c:sleep(0.02)
  until core.now() > deadline
  return false
end

function M.basename(path)
  return path and path:match("([^/]+)$")
end

---------------------------------------------------------------- counters

local STAT_KEYS = { "creates", "lists", "gets", "deletes", "exists", "ops", "watch_events",
                    "acquired", "handoffs", "sessions_expired" }
M.STAT_KEYS = STAT_KEYS

function M.stats_sum(clients)
  local t = {}
  for _, k in ipairs(STAT_KEYS) do t[k] = 0 end
  for _, c in ipairs(clients) do
    local s = c:stats()
    for _, k in ipairs(STAT_KEYS) do t[k] = t[k] + (s[k] or 0) end
  end
  return t
end

function M.stats_delta(before, after)
  local d = {}
  for _, k in ipairs(STAT_KEYS) do d[k] = (after[k] or 0) - (before[k] or 0) end
  return d
end

function M.format_stats(s)
  local out = {}
  for _, k in ipairs(STAT_KEYS) do out[#out + 1] = k .. "=" .. tostring(s[k]) end
  return table.concat(out, " ")
end

---------------------------------------------------------------- server side

function M.stop_server(zk)
  if not zk then return end
  pcall(function() if zk.paused then zk:resume() end end)
  zk:stop()
end

function M.mntr(zk, key)
  local m, err = zk:mntr()
  assert(m, "mntr failed: " .. tostring(err))
  local v = m[key]
  assert(type(v) == "number", "mntr has no numeric " .. key)
  return v
end

-- wchp: "/path\n\t0xsession\n..." -> { ["/path"] = { "0x...", ... } }
function M.watches_by_path(zk)
  local s = assert(zk:four("wchp"))
  local out, cur = {}, nil
  for line in s:gmatch("[^\n]+") do
    if line:sub(1, 1) == "/" then
      cur = line:match("^(%S+)")
      out[cur] = out[cur] or {}
    elseif cur and line:match("^%s+0x%x+") then
      local list = out[cur]
      list[#list + 1] = line:match("(0x%x+)")
    end
  end
  return out
end

-- wchc: "0xsession\n\t/path\n..." -> every watched path (one entry per session and path)
function M.watched_paths(zk)
  local s = assert(zk:four("wchc"))
  local out = {}
  for line in s:gmatch("[^\n]+") do
    local p = line:match("^%s+(/%S*)")
    if p then out[#out + 1] = p end
  end
  return out
end

---------------------------------------------------------------- results and events

-- Results of a call as a table, so that nil holes survive.
function M.pack(...)
  return { n = select("#", ...), ... }
end

-- res = pack(call()) must be a failure with `code`: nil, "<code>: message", code.
-- With code_only, only the code (res[3]) is checked.
function M.assert_code(code, res, what, code_only)
  what = what or "call"
  assert(res, what .. " has not returned")
  assert(res[1] == nil, ("%s succeeded, expected %s"):format(what, code))
  if code_only then
    assert(res[3] == code, ("%s: %s, expected %s"):format(what, tostring(res[2]), code))
    return
  end
  assert(type(res[2]) == "string" and res[2]:find("^" .. code .. ": "),
    ("%s: message %q does not start with %q"):format(what, tostring(res[2]), code .. ": "))
  assert(res[3] == code, ("%s: code %s, expected %s"):format(what, tostring(res[3]), code))
end

-- Session state names in order, for one client.
function M.record_session(c)
  local t = {}
  c:on_session(function(state) t[#t + 1] = state end)
  return t
end

-- Lock events of one lock object, as names (t) and, with `times`, their times (t.at, core.now() ms).
function M.record_lock(m, times)
  local t = { at = times and {} or nil }
  m:on_lost(function(state)
    t[#t + 1] = state
    if times then t.at[#t.at + 1] = core.now() end
  end)
  return t
end

function M.index_of(list, v, from)
  for i = from or 1, #list do if list[i] == v then return i end end
  return nil
end

---------------------------------------------------------------- errors

-- The message fn(...) raises (as a string), or nil if it returns normally.
function M.error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then return nil end
  return tostring(err)
end

-- msg (from error_of) must be a string that contains every word in `words`; returns msg.
function M.assert_words(msg, words)
  assert(msg ~= nil, "expected an error mentioning " .. table.concat(words, ", ") .. ", but the call returned")
  for _, w in ipairs(words) do
    assert(msg:find(w, 1, true), ("error %q does not mention %q"):format(msg, w))
  end
  return msg
end

function M.has_words(msg, ...)
  if type(msg) ~= "string" then return false end
  for i = 1, select("#", ...) do
    if not msg:find((select(i, ...)), 1, true) then return false end
  end
  return true
end

function M.is_integer(x)
  if type(x) ~= "number" then return false end
  if math.type then return math.type(x) == "integer" end
  return x == math.floor(x) and x > -2 ^ 53 and x < 2 ^ 53
end

return M
