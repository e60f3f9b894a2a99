-- The example specs of the lock-test kit (examples/kit: docs/testing.md "A Jepsen-style lock test in
-- busted"), run as a user runs them: busted in examples/kit, with this build on LUA_PATH and
-- LUA_CPATH. Each passes with the right application code, and fails with the deliberately broken
-- variant (ZKLOCK_EXAMPLE_VARIANT=broken), the checker naming the violation and both events.
-- The four runs are independent (each its own busted process, server, proxies and workers, and
-- their time goes to the examples' fixed-length jobs, not to the CPU), so the first test starts
-- all four together and each test waits for its own run: about one run's time, not four. A run
-- that no test collected (busted --filter) is waited for in teardown: nothing outlives the file.
--   busted --lua=lua5.4 spec/94-kit-examples_spec.lua          (~35-40 s on 2 cores; 115 s one run after another)
local testing = require("zklock.testing")
local core = require("zklock.core")

local ROOT = (testing.sh("pwd"):gsub("%s+$", ""))
local LIMIT = 240 -- s, one example run (timeout(1) ends it then)

local function build_dir()
  local found = package.searchpath and package.searchpath("zklock.core", package.cpath)
  local dir = found and found:match("^(.-)/?zklock/core%.so$") or (jit and "build-jit" or "build")
  if dir == "" then dir = "." end
  if dir:sub(1, 1) ~= "/" then dir = ROOT .. "/" .. dir end
  return dir
end

local TMP -- the runs' output files (made by the first test: nothing is started when the tags leave them out)
local runs = {} -- "spec variant" -> output file

-- start one example spec in the background; its output (and "exit=N" last) goes to a file
local function start_example(spec, variant)
  local lua = jit and "luajit" or ("lua" .. _VERSION:match("%d+%.%d+"))
  local out = ("%s/%s-%s.out"):format(TMP, spec:match("([%w_]+)%.lua$"), variant)
  local cmd = ("cd %s/examples/kit && ZKLOCK_EXAMPLE_VARIANT=%s LUA_PATH=%s LUA_CPATH=%s "
    .. "timeout -k 10 %d busted --lua=%s %s >%s 2>&1; echo \"exit=$?\" >>%s"):format(
    testing.shq(ROOT), variant, testing.shq(ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;"),
    testing.shq(build_dir() .. "/?.so;;"), LIMIT, lua, spec, testing.shq(out), testing.shq(out))
  assert(os.execute("(" .. cmd .. ") </dev/null >/dev/null 2>&1 &"))
  runs[spec .. " " .. variant] = out
end

-- wait for a run to end (timeout(1) ends it within LIMIT + 10 s); -> exit status, output
local function wait_run(out, what)
  local deadline = core.now() / 1000 + LIMIT + 30
  local text
  repeat
    text = testing.read_file(out) or ""
    local status = tonumber(text:match("exit=(%d+)%s*$"))
    if status then return status, text end
    testing.sleep(0.2)
  until core.now() / 1000 > deadline
  error("no end of " .. what .. " within " .. (LIMIT + 30) .. " s:\n" .. text)
end

-- the four runs, started on the first call; -> exit status, output of one of them
local function run_example(spec, variant)
  if not TMP then
    TMP = (testing.sh("mktemp -d"):gsub("%s+$", ""))
    for _, s in ipairs({ "spec/writer_spec.lua", "spec/leader_spec.lua" }) do
      for _, v in ipairs({ "good", "broken" }) do start_example(s, v) end
    end
  end
  local key = spec .. " " .. variant
  local out = assert(runs[key], "no such example run: " .. key)
  local status, text = wait_run(out, key)
  runs[key] = false -- collected
  return status, text
end

describe("kit examples #faults #slow", function()
  teardown(function()
    for key, out in pairs(runs) do
      if out then pcall(wait_run, out, key) end
    end
    if TMP then os.execute("rm -rf " .. testing.shq(TMP)) end
  end)

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
