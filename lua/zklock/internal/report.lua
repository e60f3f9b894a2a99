-- zklock.internal.report: what zklock.client and zklock.internal.hold report to metrics sinks
-- and the lock-event log (the sinks themselves and the documented calls are zklock.metrics).
-- Not for applications.
local core = require("zklock.core")
local check = require("zklock.internal.args")

local I = {}

local now = core.now

-- The recipe label of an object that acquires (its `kind`, without spaces).
local RECIPE = {
  ["mutex"] = "mutex",
  ["read lock"] = "read",
  ["write lock"] = "write",
  ["semaphore"] = "semaphore",
  ["semaphore mutex"] = "semaphore_mutex",
  ["multi-lock"] = "multilock",
  ["lease of semaphore"] = "semaphore",
}
function I.recipe_label(kind) return RECIPE[kind] or (tostring(kind):gsub("%W+", "_")) end

-- The outcome label of a finished acquire's status.
local OUTCOME = {
  [core.errno.ETIMEDOUT] = "timeout",
  [core.errno.ECANCELED] = "canceled",
  [core.errno.ECLOSED] = "closed",
  [core.errno.ESESSION] = "session",
}
function I.outcome_label(status, acquired)
  if acquired then return "acquired" end
  return OUTCOME[status] or "error"
end

---------------------------------------------------------------- the default sink

local default_sink

-- zklock.metrics.set_default(sink) (zklock.metrics(sink)): the sink of every client connected
-- after this call that has no `metrics` option of its own (nil: none). Returns the previous one.
function I.set_default(sink)
  if sink ~= nil then I.check_sink("metrics", 1, sink) end
  local old = default_sink
  default_sink = sink
  return old
end
function I.default() return default_sink end

function I.check_sink(fname, argn, sink, what)
  local t = type(sink)
  local ok = (t == "table" or t == "userdata")
  if ok then
    local mt = getmetatable(sink)
    local index = type(mt) == "table" and type(mt.__index) == "table" and mt.__index or {}
    local count = rawget(sink, "count") or index.count
    local observe = rawget(sink, "observe") or index.observe
    if t == "table" then
      ok = (count == nil or type(count) == "function") and (observe == nil or type(observe) == "function")
        and (count ~= nil or observe ~= nil)
    end
  end
  if not ok then
    check.argerror(fname, argn, ("%sexpected a sink (a table with count(name, labels, n) and/or "
      .. "observe(name, labels, value) methods), got %s"):format(what and (what .. ": ") or "", check.describe(sink)))
  end
  return sink
end

---------------------------------------------------------------- reporting (used by zklock.internal.hold)

-- Call a sink method, logging (once per sink and method) instead of raising when it fails.
local function call(rep, method, name, labels, v)
  local sink = rep.sink
  local fn = sink[method]
  if not fn then return end
  local ok, err = pcall(fn, sink, name, labels, v)
  if not ok and not rep.failed[method] then
    rep.failed[method] = true
    rep.log("error", ("metrics sink %s(%q) failed: %s (further failures of %s are not logged)")
      :format(method, name, tostring(err), method))
  end
end

-- A client's reporter: rep = I.reporter(client_opts, log) or nil when nothing is reported.
--   log(level, msg): the client's _emit.
function I.reporter(sink, label_fn, events_level, log)
  if not sink and events_level == "none" then return nil end
  return {
    sink = sink,
    label_fn = label_fn,
    events = events_level,
    log = log,
    failed = {},
    last_stats = {},
  }
end

-- The labels of an object that acquires (cached on the object by the caller).
function I.labels(rep, kind, path, name)
  if name == nil then
    if rep.label_fn then
      local ok, v = pcall(rep.label_fn, path, I.recipe_label(kind))
      name = ok and type(v) == "string" and v or "-"
      if not ok then rep.log("error", "metric_label function failed: " .. tostring(v)) end
    else
      name = "-"
    end
  end
  return { recipe = I.recipe_label(kind), name = name }
end

local function event(rep, fmt, ...)
  if rep.events ~= "none" then rep.log(rep.events, fmt:format(...)) end
end

-- labels plus one more label, built once per (labels, key, value) and reused, so that a sink can
-- key its series by the table itself (the Prometheus sink does)
local derived = setmetatable({}, { __mode = "k" })
local function with(labels, key, value)
  local by_key = derived[labels]
  if not by_key then
    by_key = {}
    derived[labels] = by_key
  end
  local k = key .. "\0" .. value
  local l = by_key[k]
  if not l then
    l = { recipe = labels.recipe, name = labels.name, [key] = value }
    by_key[k] = l
  end
  return l
end

-- An acquire of `what` (e.g. "mutex /a") ended after `waited` seconds; `ahead`: the contenders
-- its node saw at its first listing (nil or < 0: unknown).
function I.acquire_done(rep, labels, what, waited, acquired, status, token, ahead)
  local outcome = I.outcome_label(status, acquired)
  if rep.sink then
    local l = with(labels, "outcome", outcome)
    call(rep, "count", "zklock_acquire_total", l, 1)
    call(rep, "observe", "zklock_wait_seconds", l, waited)
    if ahead and ahead >= 0 then call(rep, "observe", "zklock_contenders", labels, ahead) end
  end
  if acquired then
    event(rep, "granted %s token=%s waited=%.3fs", what, tostring(token), waited)
  elseif outcome == "timeout" then
    event(rep, "timed out %s waited=%.3fs", what, waited)
  else
    event(rep, "failed %s (%s) waited=%.3fs", what, core.errname(status) or tostring(status), waited)
  end
end

-- A hold ended: released (or dropped in the background, or gone with a lost session).
function I.hold_done(rep, labels, what, held, token, how)
  if rep.sink then call(rep, "observe", "zklock_hold_seconds", labels, held) end
  event(rep, "%s %s token=%s held=%.3fs", how, what, tostring(token), held)
end

-- A hold was asked to let go (a revocation request reached its on_revoke handler).
function I.revoked(rep, labels, what, token)
  if rep.sink then call(rep, "count", "zklock_revoke_total", labels, 1) end
  event(rep, "revoked %s token=%s", what, tostring(token))
end

-- A hold heard SUSPENDED, RECONNECTED or LOST.
function I.hold_state(rep, labels, what, state, token, held)
  if state ~= "SUSPENDED" and state ~= "LOST" then
    event(rep, "reconnected %s token=%s", what, tostring(token))
    return
  end
  if rep.sink then call(rep, "count", "zklock_loss_total", with(labels, "state", state), 1) end
  event(rep, "%s %s token=%s held=%.3fs", state == "LOST" and "lost" or "suspended", what, tostring(token), held)
end

-- A session state change of the client.
local SESSION_EVENTS = { CONNECTED = "connected", SUSPENDED = "suspended", EXPIRED = "expired" }
function I.session(rep, state, was)
  if not rep.sink then return end
  local ev = SESSION_EVENTS[state]
  if not ev then return end
  if ev == "connected" and was == "SUSPENDED" then ev = "reconnected" end
  call(rep, "count", "zklock_session_total", { event = ev }, 1)
end

-- The core's request counters since the last call, as counters by kind.
-- lock-recipe requests by kind, and plain znode operations (client:get, :set, ...) as "plain"
local REQUEST_KINDS = { creates = "create", deletes = "delete", lists = "list", gets = "get",
                        exists = "exists", ops = "plain" }
local REQUEST_ORDER = { "creates", "deletes", "lists", "gets", "exists", "ops" }
function I.requests(rep, stats)
  if not rep.sink then return end
  local last = rep.last_stats
  for _, k in ipairs(REQUEST_ORDER) do
    local v = stats[k]
    if v then
      local d = v - (last[k] or 0)
      if d > 0 then call(rep, "count", "zklock_requests_total", { kind = REQUEST_KINDS[k] }, d) end
      last[k] = v
    end
  end
end

I.now = function() return now() / 1000 end

return I
