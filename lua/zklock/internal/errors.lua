-- zklock.internal.errors: the one formatter of zklock's failures.
--
-- Every code a module returns is in one table: ZKL_ERRNO_MAP in zklock.h, which the binding
-- turns into zklock.errno (name -> number) and whose texts zklock.strerror returns. The codes
-- only the Lua layer uses (EDEADLK, EFORMAT, EDATA, ERANGE, ECONNECTING, EEXIST, ESTALE, EBUSY)
-- are in that list too, so that C and Lua cannot disagree about a name or its number.
--
-- An expected failure is returned as  nil, "CODE: message", "CODE"  (plus any extra results),
-- and every module builds that triple here:
--
--   local E = require("zklock.internal.errors")
--   return E.fail("ETIMEDOUT", ("timed out after %g s waiting for %s"):format(s, path))
--   return E.fail(st)                     -- a status number: "ZNONODE: node does not exist"
--   local msg = E.message("ELOST", text)  -- the string alone
--
-- A code name that is not in the table raises (a bug of zklock, not of its caller); the fast
-- tier's spec/fast/errors_spec.lua also finds every code literal under lua/ and checks it is in
-- the table. A status number that is not in it can only come from the server or the ZooKeeper
-- client (one newer than the codes zklock knows): it is named EUNKNOWN, its number in the text.
local core = require("zklock.core")

local M = {}

local errno = core.errno

-- name, number of a code given by name or number; raises for a name (or a non-code) not in the
-- table; a number not in it is "EUNKNOWN" (a server's or ZooKeeper client's code zklock lacks)
local function resolve(code)
  local t = type(code)
  if t == "string" then
    local n = errno[code]
    if n then return code, n end
    if code == "EUNKNOWN" then return code, nil end -- passed on from a result named by E.name
  elseif t == "number" and code % 1 == 0 then
    return core.errname(code), code
  end
  error(("zklock: internal error: error code %s is not in zklock.errno (add it to ZKL_ERRNO_MAP in"
    .. " zklock.h)"):format(tostring(code)), 3)
end

-- the table's text for number n, or "unknown error (code N)"
local function text_of(name, n)
  if name == "EUNKNOWN" then return n and ("unknown error (code %d)"):format(n) or "unknown error" end
  return core.strerror(n)
end

-- errors.name(code) -> "CODE" for a code name or number
function M.name(code)
  return (resolve(code))
end

-- errors.strerror(code) -> the table's text for a code name or number ("unknown error" if none)
function M.strerror(code)
  if type(code) == "string" then code = errno[code] end
  if type(code) ~= "number" or code % 1 ~= 0 then return "unknown error" end
  return core.strerror(code)
end

-- errors.message(code, text) -> "CODE: text"; text nil -> the table's text for the code
function M.message(code, text)
  local name, n = resolve(code)
  return ("%s: %s"):format(name, text or text_of(name, n))
end

-- errors.fail(code, text, ...) -> nil, "CODE: text", "CODE", ...
function M.fail(code, text, ...)
  local name, n = resolve(code)
  return nil, ("%s: %s"):format(name, text or text_of(name, n)), name, ...
end

-- errors.known(code) -> true when code (a name or number) is in the table
function M.known(code)
  if type(code) == "string" then return errno[code] ~= nil end
  if type(code) == "number" then return core.errname(code) ~= "EUNKNOWN" end
  return false
end

return M
