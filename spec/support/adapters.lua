-- spec/support/adapters.lua: what the host adapter specs (spec/NN-adapters-*_spec.lua, numbered
-- 60, 68 and 69) share: the contention test of 1,000 coroutines on 10 locks with an unrelated
-- timer in the same loop, its tally and checks, and the timer lateness meter.
local zklock = require("zklock")
local core = require("zklock.core")
local assert = require("luassert") -- the spec files get it from busted; a required module does not

local function try_require(name)
  local ok, mod = pcall(require, name)
  if ok then return mod end
  return nil, mod
end

local function now_s() return core.now() / 1000 end

local N_COROUTINES, N_LOCKS = 1000, 10
-- The unrelated timer must stay on time while the contention runs. Its lateness is judged by
-- what the loop itself did, not by how busy the machine was: see lateness_limit() below.
local MAX_LATENESS = 0.2 -- s: allowed on a quiet machine, and the floor of lateness_limit()
local MAX_LATENESS_CAP = 1.0 -- s: never allowed, however long the run (a loop starving timers for seconds fails)
local TICK = 0.02        -- s: period of the unrelated timer

-- Time this process has spent runnable but waiting for a CPU (s), from /proc/self/schedstat
-- (run_delay); nil where the kernel does not provide it. On a machine whose cores are busy
-- with other work a timer fires late although the loop was free: that part of the lateness is
-- the machine's, not the loop's. Sleeping or computing inside the loop does not count here, so
-- a loop that blocks or computes past the timer's due time is still charged with all of it.
local function run_delay()
  local f = io.open("/proc/self/schedstat", "r")
  if not f then return nil end
  local s = f:read("*l")
  f:close()
  local v = s and s:match("^%d+%s+(%d+)")
  return v and tonumber(v) / 1e9 or nil
end

-- A lateness meter for a periodic timer: call arm() when the timer is (re)armed and fire(late)
-- when it runs, `late` being its wall-clock lateness (s). own = late less the run delay this
-- process accumulated meanwhile: the lateness the loop itself caused.
--   m.ticks, m.max_late (own, s), m.max_at (now_s() of that tick), m.max_wall (wall, s),
--   m.stolen (s): the run delay summed over the ticks' periods (each at most its period, TICK +
--   late): wall-clock time the loop could not have spent on the timer or on anything else
local function late_meter()
  local m = { ticks = 0, max_late = 0, max_at = 0, max_wall = 0, stolen = 0, sched = run_delay() ~= nil }
  local rd0
  function m.arm() rd0 = run_delay() end
  function m.fire(late)
    local rd1 = run_delay()
    local stolen = (rd0 and rd1) and math.max(0, rd1 - rd0) or 0
    m.stolen = m.stolen + math.min(stolen, TICK + math.max(0, late))
    local own = math.max(0, late - stolen)
    if own > m.max_late then m.max_late, m.max_at = own, now_s() end
    if late > m.max_wall then m.max_wall = late end
    m.ticks = m.ticks + 1
  end
  return m
end

-- The bound on the timer's own lateness for a run whose work took `elapsed` s: a tenth of the
-- measured run (a slow run, under ASan or on busy cores, may take proportionally longer
-- rounds), at least MAX_LATENESS and never more than MAX_LATENESS_CAP.
local function lateness_limit(elapsed)
  return math.min(MAX_LATENESS_CAP, math.max(MAX_LATENESS, elapsed / 10))
end

-- Shared bookkeeping of the contention test: per lock, a counter updated across a yield inside
-- the critical section, the number of holders right now and the most ever seen.
local function new_tally()
  local t = { counter = {}, holders = {}, max_holders = {}, done = 0, errors = {} }
  for k = 1, N_LOCKS do t.counter[k], t.holders[k], t.max_holders[k] = 0, 0, 0 end
  return t
end

-- The body of one contending coroutine. `pause` yields to the host loop inside the critical
-- section (client:sleep goes through the adapter's sleep).
local function contend(t, _client, lock, k, pause)
  assert(lock:acquire(60))
  t.holders[k] = t.holders[k] + 1
  if t.holders[k] > t.max_holders[k] then t.max_holders[k] = t.holders[k] end
  local v = t.counter[k]
  pause()
  t.counter[k] = v + 1
  t.holders[k] = t.holders[k] - 1
  assert(lock:release())
  t.done = t.done + 1
end

local function check_tally(t)
  assert.are.same({}, t.errors)
  assert.are.equal(N_COROUTINES, t.done)
  for k = 1, N_LOCKS do
    assert.are.equal(N_COROUTINES / N_LOCKS, t.counter[k], "counter of lock " .. k)
    assert.are.equal(1, t.max_holders[k], "simultaneous holders of lock " .. k)
  end
end

local function assert_no_nodes(hosts, base)
  local c = assert(zklock.connect(hosts))
  for k = 1, N_LOCKS do
    local names, _, code = c:children(base .. "/lock-" .. k)
    if names then
      assert.are.same({}, names, "nodes left under lock " .. k)
    else
      assert.are.equal("ZNONODE", code)
    end
  end
  c:close()
end

local run_id = 0
local function base_path(name)
  run_id = run_id + 1
  return ("/adapters/%s-%d-%d"):format(name, os.time(), run_id)
end

-- The contention test's N_LOCKS mutexes under `base`, one object per lock for each of a and b.
local function lock_objects(a, b, base)
  local locks = { [a] = {}, [b] = {} }
  for k = 1, N_LOCKS do
    locks[a][k] = a:mutex(base .. "/lock-" .. k)
    locks[b][k] = b:mutex(base .. "/lock-" .. k)
  end
  return locks
end

-- Start the N_COROUTINES contenders with spawn(client, fn), alternately on a and b; each calls
-- after_each_one() when it is done (or failed).
local function start_contenders(t, a, b, locks, spawn, after_each_one)
  for i = 1, N_COROUTINES do
    local client = (i % 2 == 0) and a or b
    local k = i % N_LOCKS + 1
    spawn(client, function()
      local ok, err = pcall(contend, t, client, locks[client][k], k, function() client:sleep(0.001) end)
      if not ok then t.errors[#t.errors + 1] = tostring(err) end
      after_each_one()
    end)
  end
end

-- The contention test's checks: the tally, the unrelated timer (tm: ticks, max_late, max_at) and
-- no node left behind.
local function check_contention(label, t, tm, t0, elapsed, hosts, base)
  check_tally(t)
  print(("\n  [%s %s] %d coroutines, %d locks, 2 clients: %.2f s; timer ticks %d, max lateness %.1f ms at +%.2f s")
    :format(label, jit and "luajit" or _VERSION, N_COROUTINES, N_LOCKS, elapsed, tm.ticks, tm.max_late * 1000,
      tm.max_at - t0))
  local limit = lateness_limit(elapsed)
  print(("  [%s] timer lateness: %.1f ms the loop's own (limit %.0f ms), %.1f ms wall-clock%s")
    :format(label, tm.max_late * 1000, limit * 1000, tm.max_wall * 1000,
      tm.sched and "" or " (no /proc/self/schedstat: all of it counted as the loop's)"))
  assert.is_true(tm.max_late < limit,
    ("timer %.3f s late (limit %.3f s for a %.2f s run)"):format(tm.max_late, limit, elapsed))
  -- at least half the ticks the run's own time allows: the wall-clock time less what the machine
  -- took from the process (on busy cores a 20 ms timer cannot tick every 20 ms of wall-clock
  -- time; a loop that computes or blocks past its timer is charged with all of that time)
  local own = math.max(0, elapsed - tm.stolen)
  local want = math.floor(own / TICK / 2)
  print(("  [%s] timer ticks %d, at least %d wanted: %.2f s run, %.2f s of it taken by the machine")
    :format(label, tm.ticks, want, elapsed, tm.stolen))
  assert.is_true(tm.ticks >= want, ("the timer hardly ran: %d ticks, fewer than %d (half of a %.2f s run's own time"
    .. " less %.2f s taken by the machine, in %g s ticks)"):format(tm.ticks, want, elapsed, tm.stolen, TICK))
  assert_no_nodes(hosts, base)
end

return {
  try_require = try_require,
  now_s = now_s,
  N_COROUTINES = N_COROUTINES,
  N_LOCKS = N_LOCKS,
  MAX_LATENESS = MAX_LATENESS,
  MAX_LATENESS_CAP = MAX_LATENESS_CAP,
  TICK = TICK,
  run_delay = run_delay,
  late_meter = late_meter,
  lateness_limit = lateness_limit,
  new_tally = new_tally,
  contend = contend,
  check_tally = check_tally,
  assert_no_nodes = assert_no_nodes,
  run_id = run_id,
  base_path = base_path,
  lock_objects = lock_objects,
  start_contenders = start_contenders,
  check_contention = check_contention,
}
