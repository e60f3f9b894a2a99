-- The example specs of the lock-test kit (examples/kit: docs/testing.md "A Jepsen-style lock test in
-- busted"), run as a user runs them: busted in examples/kit, with this build on LUA_PATH and
-- LUA_CPATH. Each passes with the right application code, and fails with the deliberately broken
-- variant (ZKLOCK_EXAMPLE_VARIANT=broken), the checker naming the violation and both events.
--   busted --lua=lua5.4 spec/94-kit-examples_spec.lua          (~2 min on 2 cores)
local testing = require("zklock.testing")

local ROOT = (testing.sh("pwd"):gsub("%s+$", ""))

local function build_dir()
  local found = package.searchpath and package.searchpath("zklock.core", package.cpath)
  local dir = found and found:match("^(.-)/?zklock/core%.so$") or (jit and "build-jit" or "build")
  if dir == "" then dir = "." end
  if dir:sub(1, 1) ~= "/" then dir = ROOT .. "/" .. dir end
  return dir
end

-- run one example spec; -> exit status, output
local function run_example(spec, variant)
  local lua = jit and "luajit" or ("lua" .. _VERSION:match("%d+%.%d+"))
  local cmd = ("cd %s/examples/kit && ZKLOCK_EXAMPLE_VARIANT=%s LUA_PATH=%s LUA_CPATH=%s "
    .. "timeout -k 10 240 busted --lua=%s %s 2>&1; echo \"exit=$?\""):format(
    testing.shq(ROOT), variant, testing.shq(ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;"),
    testing.shq(build_dir() .. "/?.so;;"), lua, spec)
  local out = testing.sh(cmd)
  return tonumber(out:match("exit=(%d+)%s*$")), out
end

describe("kit examples #faults #slow", function()
  it("writer: passes with app/writer.lua", function()
    local status, out = run_example("spec/writer_spec.lua", "good")
    assert.are.equal(0, status, out)
    assert.truthy(out:find("1 success / 0 failures", 1, true), out)
  end)

  it("writer: the checker catches app/writer_broken.lua writing on after SUSPENDED", function()
    local status, out = run_example("spec/writer_spec.lua", "broken")
    assert.are_not.equal(0, status, out)
    assert.truthy(out:find("mutual exclusion violation on /jobs/report", 1, true), out)
    assert.truthy(out:match("first:  w%d first write /jobs/report at"), out)
    assert.truthy(out:match("second: w%d first write /jobs/report at"), out)
    print("\n  [kit] broken writer, as the checker printed it:\n"
      .. (out:match("(mutual exclusion violation.-)\n+exit=") or out))
  end)

  it("leader: passes with app/leader.lua", function()
    local status, out = run_example("spec/leader_spec.lua", "good")
    assert.are.equal(0, status, out)
    assert.truthy(out:find("1 success / 0 failures", 1, true), out)
  end)

  it("leader: the checker catches app/leader_broken.lua leading on after losing its lock", function()
    local status, out = run_example("spec/leader_spec.lua", "broken")
    assert.are_not.equal(0, status, out)
    assert.truthy(out:find("single leader violation on /jobs/leader: two leaders at once", 1, true), out)
    assert.truthy(out:match("first:  c%d first tick /jobs/leader at"), out)
    assert.truthy(out:match("second: c%d first tick /jobs/leader at"), out)
    print("\n  [kit] broken leader, as the checker printed it:\n"
      .. (out:match("(single leader violation.-)\n+exit=") or out))
  end)
end)
