-- zklock.errors: the one formatter of zklock's failures.
--
-- Every code a module returns is in one table: ZKL_ERRNO_MAP in zklock.h, which the binding
-- turns into zklock.errno (name -> number) and whose texts zklock.strerror returns. The codes
-- only the Lua layer uses (EDEADLK, EFORMAT, EDATA, ERANGE, ECONNECTING, EEXIST, ESTALE, EBUSY)
-- are in that list too, so that C and Lua cannot disagree about a name or its number.
--
-- An expected failure is returned as  nil, "CODE: message", "CODE"  (plus any extra results),
-- and every module builds that triple here:
--
--   local E = require("zklock.errors")
--   return E.fail("ETIMEDOUT", ("timed out after %g s waiting for %s"):format(s, path))
--   return E.fail(st)                     -- a status number: "ZNONODE: node does not exist"
--   local msg = E.message("ELOST", text)  -- the string alone
--
-- A code that is not in the table raises (a bug of zklock, not of its caller); the fast tier's
-- spec/fast/errors_spec.lua also finds every code literal under lua/ and checks it is in the table.
local core = require("zklock.core")

local M = {}

local errno = core.errno

-- name, number of a code given by name or number; raises for a code not in the table
local function resolve(code)
  local t = type(code)
  if t == "string" then
    local n = errno[code]
    if n then return code, n end
  elseif t == "number" then
    local name = core.errname(code)
    if name ~= "EUNKNOWN" then return name, code end
  end
  error(("zklock: internal error: error code %s is not in zklock.errno (add it to ZKL_ERRNO_MAP in"
    .. " zklock.h)"):format(tostring(code)), 3)
end

-- errors.name(code) -> "CODE" for a code name or number
function M.name(code)
  return (resolve(code))
end

-- errors.strerror(code) -> the table's text for a code name or number ("unknown error" if none)
function M.strerror(code)
  if type(code) == "string" then code = errno[code] end
  if type(code) ~= "number" then return "unknown error" end
  return core.strerror(code)
end

-- errors.message(code, text) -> "CODE: text"; text nil -> the table's text for the code
function M.message(code, text)
  local name, n = resolve(code)
  return ("%s: %s"):format(name, text or core.strerror(n))
end

-- errors.fail(code, text, ...) -> nil, "CODE: text", "CODE", ...
function M.fail(code, text, ...)
  local name, n = resolve(code)
  return nil, ("%s: %s"):format(name, text or core.strerror(n)), name, ...
end

-- errors.known(code) -> true when code (a name or number) is in the table
function M.known(code)
  if type(code) == "string" then return errno[code] ~= nil end
  if type(code) == "number" then return core.errname(code) ~= "EUNKNOWN" end
  return false
end

return M
