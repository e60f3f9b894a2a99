-- bench/tools/metrics_cost.lua - what an installed metrics sink costs on the uncontended
-- acquire+release cycle (target: no more than 5 %).
--
-- One process, one throwaway ZooKeeper (forceSync off, so the disk does not hide the client's
-- own cost), two clients on it: one without a sink, one with a Prometheus sink. They run
-- alternating blocks of BLOCK cycles on their own mutex, ROUNDS blocks each; each block's client
-- CPU (os.clock: user + system of this process) and wall time are taken, and every pair of
-- neighbouring blocks gives a ratio with/without. Alternating in one process cancels the load
-- of a shared machine drifting between runs. Prints the medians.
--
--   lua5.4 bench/tools/metrics_cost.lua [ROUNDS=40] [BLOCK=200]       (from the repository root)
--   luajit bench/tools/metrics_cost.lua 40 200 build-jit
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = (arg[3] or (jit and "build-jit" or "build")) .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local core = require("zklock.core")

local ROUNDS, BLOCK = tonumber(arg[1] or 40), tonumber(arg[2] or 200)
local zk = testing.server{ config = { forceSync = "no" } }

local function median(t)
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end

local ok, err = pcall(function()
  local sink = zklock.metrics.prometheus()
  local plain = assert(zklock.connect(zk.hosts))
  local with = assert(zklock.connect(zk.hosts, { metrics = sink }))
  local mp, mw = plain:mutex("/metrics-cost/plain"), with:mutex("/metrics-cost/with")
  local function block(m)
    local c0, t0 = os.clock(), core.now()
    for _ = 1, BLOCK do
      assert(m:acquire(10))
      assert(m:release())
    end
    return (os.clock() - c0) / BLOCK * 1e6, (core.now() - t0) / BLOCK * 1e3
  end
  block(mp); block(mw) -- warm up
  local cpu_p, cpu_w, wall_p, wall_w, cpu_ratio, wall_ratio = {}, {}, {}, {}, {}, {}
  for i = 1, ROUNDS do
    local cp, wp, cw, ww
    if i % 2 == 1 then
      cp, wp = block(mp); cw, ww = block(mw)
    else
      cw, ww = block(mw); cp, wp = block(mp)
    end
    cpu_p[i], cpu_w[i], wall_p[i], wall_w[i] = cp, cw, wp, ww
    cpu_ratio[i], wall_ratio[i] = cw / cp, ww / wp
  end
  local n = sink:get("zklock_acquire_total", { recipe = "mutex", name = "-", outcome = "acquired" })
  assert(n == (ROUNDS + 1) * BLOCK, "the sink missed acquisitions: " .. tostring(n))
  print(("%s, %d rounds of %d cycles each way, forceSync=no"):format(jit and jit.version or _VERSION, ROUNDS, BLOCK))
  print(("  without sink: %7.1f us CPU/cycle  %7.1f us wall/cycle"):format(median(cpu_p), median(wall_p)))
  print(("  with sink:    %7.1f us CPU/cycle  %7.1f us wall/cycle"):format(median(cpu_w), median(wall_w)))
  print(("  with/without (median of paired blocks): CPU %.3f  wall %.3f"):format(median(cpu_ratio), median(wall_ratio)))
  plain:close()
  with:close()
end)
zk:stop()
assert(ok, err)
