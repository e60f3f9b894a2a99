-- zklock.retry: retry policies, plain Lua values usable with every acquire:
--   m:acquire(5, { retry = zklock.retry.exponential{ base = 0.1, max = 5, attempts = 5 } })
-- A policy is a function(attempt, code) -> seconds to wait before trying again, or nil to give up.
-- Acquires retry only failures that a new attempt can cure: the session expired (ESESSION) or the
-- server could not be reached (ZCONNECTIONLOSS, ZOPERATIONTIMEOUT, ZRUNTIMEINCONSISTENCY, ZSESSIONEXPIRED,
-- ZSESSIONMOVED),
-- never a timeout, a cancel or a closed client. The acquire's own timeout bounds all attempts.
local check = require("zklock.internal.args")

local M = {}

local unpack_ = table.unpack or unpack
local function pack(...) return { n = select("#", ...), ... } end

local RETRYABLE = {
  ESESSION = true,
  ZCONNECTIONLOSS = true,
  ZOPERATIONTIMEOUT = true,
  ZRUNTIMEINCONSISTENCY = true, -- a request lost with a silently dropped connection
  ZSESSIONEXPIRED = true,
  ZSESSIONMOVED = true,
}

function M.retryable(code) return RETRYABLE[code] == true end

local function opts_of(fname, opts, known)
  return check.options(fname, 1, opts, known)
end

-- Never retry.
function M.none()
  return function() return nil end
end

-- Retry up to `attempts` times (default 3), waiting `delay` seconds (default 0.5) each time.
function M.fixed(opts)
  opts = opts_of("fixed", opts, { delay = check.is.nonneg, attempts = check.is.nonneg })
  local delay, attempts = opts.delay or 0.5, opts.attempts or 3
  return function(attempt)
    if attempt > attempts then return nil end
    return delay
  end
end

-- Retry up to `attempts` times (default 5), waiting base * 2^(attempt-1) seconds, at most `max`,
-- with up to 50% random jitter subtracted (so many clients do not retry in step).
function M.exponential(opts)
  opts = opts_of("exponential", opts, { base = check.is.positive, max = check.is.positive,
                                         attempts = check.is.nonneg, jitter = check.is.boolean })
  local base, max, attempts = opts.base or 0.1, opts.max or 5, opts.attempts or 5
  local jitter = opts.jitter ~= false
  return function(attempt)
    if attempt > attempts then return nil end
    local d = math.min(max, base * 2 ^ (attempt - 1))
    if jitter then d = d * (1 - 0.5 * math.random()) end
    return d
  end
end

-- Run attempt(remaining_seconds_or_nil) until it succeeds, fails for good, or the policy gives up.
-- attempt returns its results as (ok, msg, code, ...). `sleep` waits (suspending when scheduled).
function M.run(policy, timeout, now_ms, sleep, attempt)
  local ms = check.timeout("acquire", 1, timeout) -- -1: forever (nil, math.huge, beyond the core's range)
  local deadline = ms >= 0 and (now_ms() + ms) or nil
  local n = 0
  while true do
    local left = timeout
    if deadline then left = math.max(0, (deadline - now_ms()) / 1000) end
    if timeout == 0 then left = 0 end
    local r = pack(attempt(left))
    if r[1] or not policy or not RETRYABLE[r[3]] then return unpack_(r, 1, r.n) end
    n = n + 1
    local delay = policy(n, r[3])
    if type(delay) ~= "number" or delay ~= delay or delay < 0 then return unpack_(r, 1, r.n) end
    if deadline and now_ms() + delay * 1000 >= deadline then return unpack_(r, 1, r.n) end
    if delay > 0 then sleep(delay) end
  end
end

-- The common shape of every acquire: validate { retry = }, then call once(timeout) directly or
-- under the policy, with retries sleeping on the client (suspending when scheduled).
function M.acquire(client, fname, argn, timeout, opts, once)
  local policy = M.option(fname, argn, opts)
  if not policy then return once(timeout) end
  return M.run(policy, timeout, require("zklock.core").now, function(s) client:sleep(s) end, once)
end

-- Validate the options of an acquire: { retry = policy, max_hold = seconds }. -> policy, max_hold
function M.option(fname, argn, opts)
  opts = check.options(fname, argn, opts, {
    retry = function(v) return type(v) == "function", "a retry policy (function(attempt, code) -> seconds|nil)" end,
    max_hold = check.is.positive,
  })
  return opts.retry, opts.max_hold
end

return M
