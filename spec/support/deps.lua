-- spec/support/deps.lua: how a spec says that something it needs is missing (a Lua module, nginx,
-- a build directory). Specs use this instead of a bare pending(), so that the skip is visible as a
-- skip, machine-readable, and fatal where every dependency must be present:
--
--   local deps = require("support.deps")
--   describe("luv adapter", function()
--     local uv = deps.require("luv", "apt-get install lua-luv", pending)  -- nil after skip()
--     if not uv then return end
--     ...
--   local why = harness.unavailable(ROOT)  -- a reason naming the install step, or nil
--   if why then deps.skip(why, pending) return end
--
-- deps.skip(reason, pending) in a describe or an it body (`pending` is busted's function of that
-- place: the spec passes its own, since a describe's pending and a test's pending differ):
--   - outside CI: busted's pending("<spec file>:<line>: missing dependency: <reason>"); busted's
--     TAP prints it as "ok N - # SKIP [<describe>] <spec file>:<line>: missing dependency: ...",
--     and .ci/run counts and prints it as skipped (not passed);
--   - with CI=true (or CI=1) in the environment: raises the same text, so the describe or the test
--     fails. A CI machine installs every dependency (.ci/deps.sh): a skip there would hide a whole
--     block of tests behind a green run.
-- deps.PREFIX ("missing dependency: ") is in every such reason; .ci/run, under CI=true, also fails
-- any skip whose reason holds it (a spec that called pending() with it by hand).
--
-- ZKL_TEST_MISSING="name,name" (e.g. "nginx" or "luv,cqueues") makes deps.present(name) false and
-- deps.require(name) fail for those names, so the skip and the CI failure can be shown on a machine
-- that has them; the reason then says that the dependency was hidden by ZKL_TEST_MISSING. The names:
-- Lua module names for deps.require; "nginx", "ngx_http_lua_module", "lua-resty-core", "build-jit",
-- "curl" for the nginx harness (spec/support/nginx/harness.lua); "zklock.core".
-- Plain Lua (5.1-5.4).
local M = {}

M.PREFIX = "missing dependency: "

-- CI=true (as GitHub Actions and GitLab set it) or CI=1
function M.ci()
  local v = os.getenv("CI")
  return v == "true" or v == "1"
end

-- the names listed in ZKL_TEST_MISSING (comma or space separated)
local function hidden_names()
  local set = {}
  for name in (os.getenv("ZKL_TEST_MISSING") or ""):gmatch("[^,%s]+") do set[name] = true end
  return set
end

-- true when ZKL_TEST_MISSING lists `name`
function M.hidden(name)
  return hidden_names()[name] == true
end

-- `found` (the real check's result), unless ZKL_TEST_MISSING hides `name`: then false
function M.present(name, found)
  if M.hidden(name) then return false end
  return found and true or false
end

-- the reason text for a dependency `name` that is missing; `hint` says how to get it
function M.reason(what, hint, name)
  local r = what
  if name and M.hidden(name) then r = r .. " (hidden by ZKL_TEST_MISSING=" .. os.getenv("ZKL_TEST_MISSING") .. ")" end
  if hint then r = r .. "; install: " .. hint end
  return r
end

local THIS = debug.getinfo(1, "S").short_src

-- "file:line: " of the nearest caller outside this file (the spec), or ""
local function where()
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then return "" end
    if info.what ~= "C" and info.short_src ~= THIS then
      return ("%s:%d: "):format(info.short_src, info.currentline)
    end
    level = level + 1
  end
end

-- Skip the enclosing describe or test because a dependency is missing (see the top of this file).
-- `reason` says what is missing and how to install it; PREFIX is added when absent, and the spec's
-- file and line before it. `pending`: the spec's own pending (in a test it ends the test at once;
-- in a describe body the caller returns after this call).
function M.skip(reason, pending)
  assert(type(reason) == "string" and reason ~= "", "deps.skip: reason must be a non-empty string")
  assert(type(pending) == "function", "deps.skip: pending must be busted's pending function")
  if reason:sub(1, #M.PREFIX) ~= M.PREFIX then reason = M.PREFIX .. reason end
  reason = where() .. reason
  if M.ci() then
    error(reason .. " (CI=true: a missing dependency fails the run; unset CI to skip instead)", 0)
  end
  pending(reason)
end

-- require(modname), or nil after skip() when it cannot be loaded (or ZKL_TEST_MISSING hides it).
-- `hint`: how to install it ("apt-get install lua-luv"); `pending`: as for skip.
function M.require(modname, hint, pending)
  assert(type(pending) == "function", "deps.require: pending must be busted's pending function")
  if not M.hidden(modname) then
    local ok, mod = pcall(require, modname)
    if ok then return mod end
    M.skip(M.reason(("Lua module %s cannot be loaded (%s)"):format(modname,
      (tostring(mod):gsub("\n.*", ""))), hint), pending)
    return nil
  end
  M.skip(M.reason(("Lua module %s cannot be loaded"):format(modname), hint, modname), pending)
  return nil
end

return M
