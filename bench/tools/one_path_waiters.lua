-- bench/tools/one_path_waiters.lua - what many watches of one client on ONE path cost its
-- process: K coroutines of one client take a read lock behind a write lock another client holds
-- (every reader watches the writer's node), and K watched gets of one node; this process's CPU
-- (os.clock) to queue or arm them all, and to wake them all (the writer's release, a set of the
-- node), ROUNDS rounds each on one local ZooKeeper server, medians with (min-max). The core's
-- index of watches puts all K under one path (docs/design.md, "Plain-op watches"); the readers'
-- queueing also lists the lock dir once per reader (K listings of up to K children), which costs
-- the same whatever the index does.
--   lua5.4 bench/tools/one_path_waiters.lua [SIZES=1000,10000] [ROUNDS=3]   (from the repository root)
--   ZKL_BUILD=build-jit luajit bench/tools/one_path_waiters.lua
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = (os.getenv("ZKL_BUILD") or "build") .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local util = require("support.util")

local SIZES = {}
for n in (arg[1] or "1000,10000"):gmatch("%d+") do SIZES[#SIZES + 1] = tonumber(n) end
local ROUNDS = tonumber(arg[2] or 3)
assert(#SIZES > 0 and ROUNDS and ROUNDS >= 1, "usage: one_path_waiters.lua [SIZES] [ROUNDS]")
local zk = testing.server({ jvm_opts = { "-Xmx1024m" } })
local run_id = 0

local function connect(name)
  return assert(zklock.connect(zk.hosts, { session_timeout = 30, identity = name }))
end

-- K readers behind a write lock: CPU to queue them (each has sent its getData with a watch), and
-- from the release until every one holds the lock (each releases it at once)
local function readers(k)
  run_id = run_id + 1
  local a, b = connect("readers"), connect("writer")
  local path = ("/bench/onepath/r%d"):format(run_id)
  local w = b:rwlock(path)
  assert(w.write:acquire(10))
  local rw = a:rwlock(path)
  local granted = 0
  local cpu0 = os.clock()
  for _ = 1, k do
    a:spawn(function()
      assert(rw.read:acquire(300))
      granted = granted + 1
      assert(rw.read:release())
    end)
  end
  assert(util.wait_until(function() return a:stats().gets >= k end, 600, { a, b }), "not all queued")
  local queue = os.clock() - cpu0
  cpu0 = os.clock()
  assert(w.write:release())
  assert(util.wait_until(function() return granted >= k end, 600, { a, b }), "not all granted")
  local wake = os.clock() - cpu0
  a:close()
  b:close()
  return queue, wake
end

-- K watched gets of one node: CPU to arm them, and from the set until every one has fired
local function reads(k)
  run_id = run_id + 1
  local a, b = connect("reads"), connect("setter")
  local path = ("/bench/onepath/n%d"):format(run_id)
  assert(b:create(path, "v1", { parents = true }))
  local armed, fired = 0, 0
  local cpu0 = os.clock()
  for _ = 1, k do
    a:spawn(function()
      local _, _, w = assert(a:get(path, { watch = true }))
      armed = armed + 1
      assert(w:wait(300) == "changed")
      fired = fired + 1
    end)
  end
  assert(util.wait_until(function() return armed >= k end, 600, { a, b }), "not all armed")
  local arm = os.clock() - cpu0
  cpu0 = os.clock()
  assert(b:set(path, "v2"))
  assert(util.wait_until(function() return fired >= k end, 600, { a, b }), "not all fired")
  local fire = os.clock() - cpu0
  a:close()
  b:close()
  return arm, fire
end

local function cell(xs)
  table.sort(xs)
  return ("%.3f (%.3f-%.3f)"):format(xs[math.floor((#xs + 1) / 2)], xs[1], xs[#xs])
end

local ok, err = pcall(function()
  print(("| K | readers: queue s | readers: wake s | reads: arm s | reads: fire s |"))
  print("| ---: | ---: | ---: | ---: | ---: |")
  for _, k in ipairs(SIZES) do
    local q, wk, ar, fi = {}, {}, {}, {}
    for r = 1, ROUNDS do
      q[r], wk[r] = readers(k)
      ar[r], fi[r] = reads(k)
    end
    print(("| %d | %s | %s | %s | %s |"):format(k, cell(q), cell(wk), cell(ar), cell(fi)))
  end
end)
zk:stop()
if not ok then error(err, 0) end
