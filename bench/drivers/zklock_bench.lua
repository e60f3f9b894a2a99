-- zklock_bench.lua - the zklock contender (Lua 5.4 or LuaJIT; run from the repository root).
--
--   lua5.4 bench/drivers/zklock_bench.lua HOSTS WORKLOAD key=value ...
--   ZKL_BUILD=bench/out/build-jit luajit bench/drivers/zklock_bench.lua HOSTS WORKLOAD ...
--   ZKL_BUILD=bench/out/base-build ZKL_LUA_DIR=bench/out/base-lua lua5.4 bench/drivers/zklock_bench.lua ...
--     (another revision's core.so and Lua sources under the same workloads: bench/run --baseline)
--
-- Workloads (the same in every driver; see bench/README.md):
--   uncontended n= warm=        one holder, acquire+release in a loop: p50/p99 latency
--   contended t= secs=          t coroutines on one mutex: acquisitions/s, p99 wait
--   independent t= secs=        t coroutines, each on its own mutex: acquisitions/s, RSS
--   read t= secs=               t coroutines on the read side of one read-write lock
--   semaphore t= max= secs=     t coroutines on one semaphore of max leases
--   herd t=                     one holder, t waiters queued behind it, each takes the lock once:
--                               watch notifications per release, RSS of the queue
-- Output: one line "RESULT key=value ...". Requests are counted at the server (mntr
-- zk_packets_received over the measured part, less what the mntr calls and polls add).
local build = os.getenv("ZKL_BUILD") or "bench/out/build"
local luadir = os.getenv("ZKL_LUA_DIR") or "lua"
package.path = luadir .. "/?.lua;" .. luadir .. "/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath

local zklock = require("zklock")
local core = require("zklock.core")

local hosts, workload = arg[1], arg[2]
local opt = {}
for i = 3, #arg do
  local k, v = arg[i]:match("^([%w_]+)=(.*)$")
  if k then opt[k] = tonumber(v) or v end
end
local port = tonumber(hosts:match(":(%d+)$"))

-- clock: luv's hrtime (ns) where present, else the core's ms clock
local now
do
  local ok, uv = pcall(require, "luv")
  if ok then
    local hr = uv.hrtime
    now = function() return hr() / 1e9 end
  else
    now = function() return core.now() / 1000 end
  end
end

-- client CPU (user + system) of this process, seconds: os.clock() is C's clock(), which glibc
-- reads from CLOCK_PROCESS_CPUTIME_ID (Lua 5.4 and LuaJIT alike); children (the socat of the
-- mntr calls) are not counted
local cpu = os.clock

local N4 = 0 -- four-letter words sent (each adds `cost` to zk_packets_received)
local function four(cmd)
  N4 = N4 + 1
  local f = assert(io.popen(("printf %s | socat -T5 - TCP:127.0.0.1:%d 2>/dev/null"):format(cmd, port)))
  local s = f:read("*a")
  f:close()
  return s
end

local WATCH_KEYS = { "zk_sum_node_deleted_watch_count", "zk_sum_node_children_watch_count",
                     "zk_sum_node_changed_watch_count", "zk_sum_node_created_watch_count" }
local function snap()
  local s = four("mntr")
  local t = {}
  for k, v in s:gmatch("([%w_]+)\t([^\n]*)") do t[k] = tonumber(v) end
  local w = 0
  for _, k in ipairs(WATCH_KEYS) do w = w + (t[k] or 0) end
  -- zk_cnt_fsynctime: the server's transaction log fsyncs (one per batch of writes)
  return { recv = t.zk_packets_received, sent = t.zk_packets_sent, watch = w, n4 = N4, fsync = t.zk_cnt_fsynctime }
end

-- what one mntr call adds to zk_packets_received; requests(a, b): requests sent between two snaps
local cost
local function mntr_cost()
  local a, b = snap(), snap()
  return b.recv - a.recv
end
local function requests(a, b) return b.recv - a.recv - cost * (b.n4 - a.n4) end

local function total_watches()
  local s = four("wchs")
  return tonumber(s:match("Total watches:%s*(%d+)")) or -1
end

local function rss_kb(field)
  local f = io.open("/proc/self/status")
  local s = f:read("*a")
  f:close()
  return tonumber(s:match((field or "VmRSS") .. ":%s*(%d+)"))
end

local function pct(sorted, q)
  if #sorted == 0 then return 0 end
  local i = math.floor(q * (#sorted - 1) + 0.5) + 1
  return sorted[i]
end

local function result(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    if type(v) == "number" and v ~= math.floor(v) then v = ("%.3f"):format(v) end
    parts[#parts + 1] = k .. "=" .. tostring(v)
  end
  io.stdout:write("RESULT " .. table.concat(parts, " ") .. "\n")
  io.stdout:flush()
end

local function stats_delta(a, b)
  local d = {}
  for k, v in pairs(b) do d[k] = v - (a[k] or 0) end
  return d
end

local rss_idle0 = rss_kb()
-- ZKL_METRICS=prometheus: every client reports to an in-process Prometheus sink (the cost of
-- metrics, bench/tools/metrics_cost.lua)
if os.getenv("ZKL_METRICS") == "prometheus" then zklock.metrics.set_default(zklock.metrics.prometheus()) end
local c = assert(zklock.connect(hosts, { session_timeout = 10 }))
local rss_idle = rss_kb()
local base = ("/bench/zklock-%s-%d"):format(jit and "jit" or "54", math.floor(now() * 1000) % 1000000000)
cost = mntr_cost()
local out = { rss_idle_kb = rss_idle, rss_start_kb = rss_idle0 }
local secs = opt.secs or 3

if workload == "uncontended" then
  local n, warm = opt.n or 2000, opt.warm or 200
  local m = c:mutex(base .. "/uncontended")
  for _ = 1, warm do assert(m:acquire(10)); m:release() end
  local lat = {}
  local s0, st0 = snap(), c:stats()
  local t0, cpu0 = now(), cpu()
  for i = 1, n do
    local a = now()
    assert(m:acquire(10))
    m:release()
    lat[i] = now() - a
  end
  local el = now() - t0
  out.cpu_us_per = (cpu() - cpu0) / n * 1e6 -- client CPU (user + system) per cycle
  local s1, st1 = snap(), c:stats()
  table.sort(lat)
  local d = stats_delta(st0, st1)
  out.ops, out.secs, out.rate = n, el, n / el
  out.p50_us, out.p99_us = pct(lat, 0.5) * 1e6, pct(lat, 0.99) * 1e6
  out.req_per = requests(s0, s1) / n
  out.notif_per = (s1.watch - s0.watch) / n
  out.client_req_per = (d.creates + d.lists + d.gets + d.deletes + d.exists) / n

elseif workload == "contended" or workload == "read" or workload == "semaphore" then
  local t = opt.t or 64
  local lockobj, acquire, release
  if workload == "contended" then
    lockobj = c:mutex(base .. "/contended")
    acquire = function() return assert(lockobj:acquire(120)) end
    release = function() lockobj:release() end
  elseif workload == "read" then
    lockobj = c:rwlock(base .. "/read").read
    acquire = function() return assert(lockobj:acquire(120)) end
    release = function() lockobj:release() end
  else
    lockobj = c:semaphore(base .. "/semaphore", opt.max or 4)
    acquire = function() return assert(lockobj:acquire(120)) end
    release = function(lease) lease:release() end
  end
  release(acquire()) -- creates the parents, outside the measured part
  local waits, count, finished = {}, 0, 0
  local s0, st0 = snap(), c:stats()
  local t0, cpu0 = now(), cpu()
  local deadline = t0 + secs
  for _ = 1, t do
    c:spawn(function()
      while now() < deadline do
        local a = now()
        local h = acquire()
        waits[#waits + 1] = now() - a
        count = count + 1
        release(h)
      end
      finished = finished + 1
    end)
  end
  assert(c:run(secs + 300))
  local el, cpu_el = now() - t0, cpu() - cpu0
  local s1, st1 = snap(), c:stats()
  local d = stats_delta(st0, st1)
  table.sort(waits)
  out.t, out.ops, out.secs, out.rate = t, count, el, count / el
  out.cpu_us_per = cpu_el / count * 1e6
  out.p50_wait_us, out.p99_wait_us = pct(waits, 0.5) * 1e6, pct(waits, 0.99) * 1e6
  out.req_per = requests(s0, s1) / count
  out.notif_per = (s1.watch - s0.watch) / count
  out.client_req_per = (d.creates + d.lists + d.gets + d.deletes + d.exists) / count
  out.handoffs = d.handoffs
  out.rss_kb = rss_kb()

elseif workload == "independent" then
  local t = opt.t or 1000
  local ready, go, deadline, count, finished = 0, false, nil, 0, 0
  local s0, t0, cpu0
  for i = 1, t do
    c:spawn(function()
      local m = c:mutex(("%s/independent/%d"):format(base, i))
      assert(m:acquire(60)); m:release() -- parents, outside the measured part
      ready = ready + 1
      while not go do c:sleep(0.01) end
      while now() < deadline do
        assert(m:acquire(120))
        count = count + 1
        m:release()
      end
      finished = finished + 1
    end)
  end
  c:spawn(function()
    while ready < t do c:sleep(0.01) end
    s0 = snap()
    t0, cpu0 = now(), cpu()
    deadline, go = t0 + secs, true
  end)
  assert(c:run(secs + 300))
  local el, cpu_el = now() - t0, cpu() - cpu0
  local s1 = snap()
  out.t, out.ops, out.secs, out.rate = t, count, el, count / el
  out.cpu_us_per = cpu_el / count * 1e6
  out.req_per = requests(s0, s1) / count
  -- log fsyncs per acquisition: how the server batched the 1,000 coroutines' writes
  if s0.fsync and s1.fsync then out.fsync_per = (s1.fsync - s0.fsync) / count end
  out.rss_kb, out.rss_peak_kb = rss_kb(), rss_kb("VmHWM")

elseif workload == "herd" then
  local t = opt.t or 100
  local path = base .. "/herd"
  local m = c:mutex(path)
  assert(m:acquire(10)); m:release() -- parents
  local done, polls = 0, 0
  local s0, s1, s2, rss_q, watches_q
  local t0, t_release, cpu0
  c:spawn(function()
    assert(m:acquire(10))
    s0 = snap()
    t0 = now()
    for _ = 1, t do
      c:spawn(function()
        assert(m:acquire(600))
        m:release()
        done = done + 1
      end)
    end
    local interval = t >= 5000 and 0.2 or 0.01
    local limit = now() + 600 -- bounded: 10 minutes at most
    while true do -- every waiter queued and watching?
      polls = polls + 1
      local kids = assert(c:children(path))
      if #kids >= t + 1 then break end
      assert(now() < limit, "waiters did not queue within 600 s")
      c:sleep(interval)
    end
    repeat -- ... and every waiter's watch set (Kazoo sets it a round trip after listing)
      watches_q = total_watches()
      if watches_q >= t or now() > limit then break end
      c:sleep(0.01)
    until false
    out.enqueue_secs = now() - t0
    rss_q = rss_kb()
    s1 = snap()
    t_release, cpu0 = now(), cpu()
    m:release()
  end)
  assert(c:run(1200))
  local el, cpu_el = now() - t_release, cpu() - cpu0
  s2 = snap()
  out.t = t
  out.acquired = done
  out.handoff_secs = el
  out.handoff_rate = t / el
  out.cpu_us_per = cpu_el / t * 1e6 -- the drain: CPU per acquisition
  out.req_per = (requests(s0, s2) - polls) / t
  out.notif_per = (s2.watch - s1.watch) / t -- t releases had someone queued behind them
  out.watches_queued = watches_q
  out.rss_queued_kb = rss_q
  out.rss_above_idle_kb = rss_q - rss_idle
  out.rss_peak_kb = rss_kb("VmHWM")
else
  error("unknown workload " .. tostring(workload))
end

c:close()
result(out)
