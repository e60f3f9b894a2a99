-- The mutex across OS processes (issue 2's checklist; test catalogue MX-03, CR-01, §3.1-3.3):
-- worker processes (spec/support/fault_worker.lua, mode "counter") run many coroutines each on
-- real ZooKeeper; their logs are checked afterwards:
--   * a shared counter znode, read-modify-written (get, a yield, an unconditional set) only under
--     the lock, ends exact;
--   * hold intervals (CLOCK_MONOTONIC, comparable across processes) never overlap (fw.check);
--   * fencing tokens strictly increase in hold order;
--   * FIFO: holds come in the order of their queue nodes' sequence numbers.
-- A control run without the lock shows that these detectors do fire.
--   busted --lua=lua5.4 spec/20-processes_spec.lua
--   busted --lua=luajit --run=luajit spec/20-processes_spec.lua
-- The shared server of spec/support/fixture.lua (clean at the start); every worker is killed in after_each/teardown.
-- Every wait is bounded. Runtime: ~12-15 s on 2 cores (Lua 5.4 and LuaJIT).
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")
local fixture = require("support.fixture")

local SESSION = 4 -- s, for the crash test: the server expires a dead holder after this long

local function now() return core.now() end -- monotonic ms, the clock the workers log with

local write_file = testing.write_file

-- A "counter" worker's log (format in spec/support/fault_worker.lua).
local COUNTER_LOG = {
  G = function(t, f)
    t.holds[#t.holds + 1] = { key = f[2], pid = f[3], owner = f[3] .. "/" .. f[4], token = tonumber(f[5]),
                              seq = tonumber(f[6]), start = tonumber(f[7]), finish = tonumber(f[8]),
                              interrupted = f[9] == "1", release = f[10], node = f[11] }
  end,
  F = function(t, f) t.fails[#t.fails + 1] = f[2] .. ":" .. f[3] end,
  R = function(t, f, line)  -- "R <session>" once at start; "R acquire ..." when an acquire raised
    if f[2] ~= "acquire" then t.session = f[2] else t.raised[#t.raised + 1] = line end
  end,
}

local function parse_log(path)
  return fw.fold_log(path, { holds = {}, fails = {}, raised = {}, errors = {}, session = nil, summary = nil,
                             done = false }, COUNTER_LOG)
end

-- Run `procs` counter workers of `cos` coroutines x `iters` critical sections over `locks`
-- mutexes under `root`. The lock parents are made persistent first, so that their sequence
-- counters never restart (a reaped container parent would start again from 0) and the FIFO
-- check can compare sequence numbers across the whole run. `sample(root)` (optional) runs
-- between polls while the workers work. Returns { holds, logs, counters, elapsed, span }.
local function run_counter(zk, obs, o)
  local dir = fw.tmpdir("counter")
  -- the shared counters are znodes: every increment is a get and an unconditional set
  local counters = o.root .. "-counters"
  for j = 1, o.locks do
    assert(obs:create(o.root .. "/" .. j, "", { parents = true }))
    assert(obs:create(counters .. "/" .. j, "0", { parents = true }))
  end
  local go = dir .. "/go"
  local workers = {}
  for i = 1, o.procs do
    workers[i] = fw.worker("counter", {
      hosts = zk.hosts, session = 10, lock_root = o.root, locks = o.locks, cos = o.cos, iters = o.iters,
      counters = counters, store = "znode", go = go, seed = o.seed or 7, id = i, log = dir .. "/w" .. i .. ".log",
      acquire_timeout = 60, hold_ms = o.hold_ms or 2, unlocked = o.unlocked and 1 or nil,
    })
  end
  local pump = function(s) util.drive({ obs }, s) end
  for i, w in ipairs(workers) do
    assert.truthy(w:wait_line("^R\t", 20, pump), ("worker %d did not connect: %s"):format(i, w:output()))
  end
  local t0 = now()
  write_file(go, "go\n")
  local deadline = now() + (o.limit or 60) * 1000
  for i, w in ipairs(workers) do
    local left = math.max(0, deadline - now()) / 1000
    assert.is_true(w:wait_exit(left, function(s)
      if o.sample then o.sample() end
      pump(s)
    end), ("worker %d did not finish within %d s: %s"):format(i, o.limit or 60, w:output()))
  end
  local elapsed = now() - t0
  local res = { holds = {}, logs = {}, counters = {}, elapsed = elapsed, span = 0 }
  local first, last
  for i = 1, o.procs do
    local log = parse_log(dir .. "/w" .. i .. ".log")
    res.logs[i] = log
    for _, h in ipairs(log.holds) do
      res.holds[#res.holds + 1] = h
      if not first or h.start < first then first = h.start end
      if not last or h.finish > last then last = h.finish end
    end
  end
  if first then res.span = last - first end -- from the first grant to the last release
  for j = 1, o.locks do
    res.counters[tostring(j)] = tonumber((obs:get(counters .. "/" .. j)))
  end
  return res
end

-- Every worker ran to the end and every critical section is accounted for.
local function assert_accounted(res, o)
  local per_proc = o.cos * o.iters
  for i, log in ipairs(res.logs) do
    assert.are.same({}, log.errors, "worker " .. i)
    assert.are.same({}, log.raised, "worker " .. i)
    assert.are.same({}, log.fails, "worker " .. i)
    assert.is_true(log.done, "worker " .. i .. " did not finish its log")
    assert.are.same({ started = per_proc, acquired = per_proc, failed = 0, raised = 0 }, log.summary,
      "worker " .. i .. " counters")
    assert.are.equal(per_proc, #log.holds, "worker " .. i .. " holds")
  end
  assert.are.equal(o.procs * per_proc, #res.holds)
  for _, h in ipairs(res.holds) do
    assert.are.equal("ok", h.release, "a release failed: " .. h.owner)
    assert.is_false(h.interrupted, "a hold saw SUSPENDED/LOST without any fault: " .. h.owner)
  end
end

-- Holds of one key in the order they happened (they are disjoint when the lock works).
local function by_key(holds)
  local t = {}
  for _, h in ipairs(holds) do
    local list = t[h.key]
    if not list then list = {} t[h.key] = list end
    list[#list + 1] = h
  end
  for _, list in pairs(t) do
    table.sort(list, function(a, b)
      if a.start ~= b.start then return a.start < b.start end
      return a.finish < b.finish
    end)
  end
  return t
end

-- FIFO: each key's holds, in time order, have strictly increasing node sequence numbers, and
-- each node is granted once. Returns the number of out-of-order grants and a few examples.
local function fifo_violations(holds)
  local bad, examples = 0, {}
  for key, list in pairs(by_key(holds)) do
    local seen = {}
    for i, h in ipairs(list) do
      if seen[h.node] then
        bad = bad + 1
        examples[#examples + 1] = ("lock %s: node %s granted twice"):format(key, h.node)
      end
      seen[h.node] = true
      if i > 1 and h.seq <= list[i - 1].seq then
        bad = bad + 1
        if #examples < 6 then
          examples[#examples + 1] = ("lock %s: seq %d (%s) granted after seq %d (%s)"):format(key, h.seq, h.owner,
            list[i - 1].seq, list[i - 1].owner)
        end
      end
    end
  end
  return bad, examples
end

-- Largest number of holds at one instant over all keys (touching intervals do not overlap).
local function max_concurrent(holds)
  local ev = {}
  for _, h in ipairs(holds) do
    ev[#ev + 1] = { t = h.start, d = 1 }
    ev[#ev + 1] = { t = h.finish, d = -1 }
  end
  table.sort(ev, function(a, b)
    if a.t ~= b.t then return a.t < b.t end
    return a.d < b.d
  end)
  local cur, max = 0, 0
  for _, e in ipairs(ev) do
    cur = cur + e.d
    if cur > max then max = cur end
  end
  return max
end

-- How often the holder's process changes from one hold to the next (per key, in time order).
local function process_switches(holds)
  local n = 0
  for _, list in pairs(by_key(holds)) do
    for i = 2, #list do
      if list[i].pid ~= list[i - 1].pid then n = n + 1 end
    end
  end
  return n
end

local function check_text(r)
  local maxo = 0
  for _, v in pairs(r.max_overlap) do if v > maxo then maxo = v end end
  return ("holds=%d clean=%d violations=%d interrupted_overlaps=%d token_violations=%d max_overlap=%d %s")
    :format(r.holds, r.clean, r.violations, r.interrupted_overlaps, r.token_violations, maxo,
            table.concat(r.examples, "; "))
end

local function pids_of(holds)
  local t, n = {}, 0
  for _, h in ipairs(holds) do
    if not t[h.pid] then t[h.pid] = true n = n + 1 end
  end
  return n
end

------------------------------------------------------------------------------------------------

describe("mutex across processes", function()
  local zk, obs
  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, { workers = true }, function(s) zk = s end)

  before_each(function()
    obs = util.connect(zk.hosts, { session_timeout = 10, identity = "observer" })
  end)

  after_each(function()
    fw.stop_all()
    util.close_all()
    obs = nil
  end)

  it("control: without the lock, the same workload loses counter updates and the checker sees overlaps", function()
    -- proves that the detectors below can fail: 2 processes x 20 coroutines, no lock taken
    local o = { root = "/procs/control", locks = 1, procs = 2, cos = 20, iters = 2, unlocked = true, limit = 30 }
    local res = run_counter(zk, obs, o)
    local total = o.procs * o.cos * o.iters
    assert.are.equal(total, #res.holds)
    local r = fw.check(res.holds, 1)
    print(("\n  [control] %d unlocked read-modify-writes: counter %d, %d overlapping critical sections"):format(
      total, res.counters["1"] or -1, r.violations))
    assert.is_true(res.counters["1"] < total, "no update was lost without the lock: the counter check cannot fail")
    assert.is_true(r.violations > 0, "no overlap seen without the lock: the interval check cannot fail")
    assert.are.same({}, util.children(obs, o.root .. "/1"))   -- no lock node was ever made
  end)

  it("4 processes x 50 coroutines on one mutex: exact counter, no overlap, rising tokens, FIFO by sequence", function()
    local o = { root = "/procs/one", locks = 1, procs = 4, cos = 50, iters = 5, limit = 60 }
    local path = o.root .. "/1"
    local max_queue = 0
    o.sample = function()
      local n = #util.children(obs, path)
      if n > max_queue then max_queue = n end
    end
    local res = run_counter(zk, obs, o)
    local total = o.procs * o.cos * o.iters   -- 1,000 critical sections
    assert_accounted(res, o)
    local r = fw.check(res.holds, 1)
    local text = check_text(r)
    local fifo_bad, fifo_ex = fifo_violations(res.holds)
    local switches = process_switches(res.holds)
    print(("\n  [one mutex] %d processes x %d coroutines x %d: %d holds in %.2f s (%.1f ms per handoff), counter %s, "
      .. "longest queue %d, holder process changed %d times; %s; fifo violations %d"):format(
      o.procs, o.cos, o.iters, #res.holds, res.span / 1000, res.span / #res.holds,
      tostring(res.counters["1"]), max_queue, switches, text, fifo_bad))
    assert.are.equal(total, res.counters["1"], "lost updates: the counter is not exact")
    assert.are.equal(0, r.violations, text)
    assert.are.equal(0, r.interrupted_overlaps, text)
    assert.are.equal(0, r.token_violations, text)
    assert.are.equal(1, r.max_overlap["1"], text)
    assert.are.equal(0, fifo_bad, table.concat(fifo_ex, "; "))
    -- the processes really contended: they interleaved, and most coroutines were queued at once
    assert.are.equal(o.procs, pids_of(res.holds))
    assert.is_true(switches >= 3 * o.procs, "processes hardly interleaved: " .. switches .. " switches")
    assert.is_true(max_queue >= 100, "the queue never grew long: at most " .. max_queue .. " nodes")
    for _, h in ipairs(res.holds) do
      assert.is_true(util.is_integer(h.token) and h.token > 0, "bad token " .. tostring(h.token))
      assert.matches(util.MUTEX_NODE, util.basename(h.node))
    end
    -- nothing left behind
    assert.are.same({}, util.children(obs, path))
  end)

  it("a SIGKILLed holder process: the next waiter (another process) gets the lock once the dead session expires, "
     .. "and nothing of it remains", function()
    local path = "/procs/crash"
    assert(obs:create(path, "", { parents = true }))
    local baseline = util.mntr(zk, "zk_ephemerals_count")
    local dir = fw.tmpdir("crash")
    local pump = function(s) util.drive({ obs }, s) end
    -- the holder: holds for a minute (unless killed)
    local holder = fw.worker("acquire", { hosts = zk.hosts, path = path, session = SESSION, timeout = 10,
                                          hold = 60, identity = "holder", log = dir .. "/holder.log" })
    local line = holder:wait_line("^acquired", 20, pump)
    assert.truthy(line, "holder did not acquire: " .. holder:output() .. table.concat(holder:lines(), " | "))
    local holder_sid = assert((holder:wait_line("^connected", 1) or ""):match("^connected (%x+)"))
    local holder_token = tonumber(line:match("^acquired %S+ (%d+)"))
    local names = util.children(obs, path)
    assert.are.equal(1, #names)
    local dead = path .. "/" .. names[1]
    local _, st = obs:get(dead)
    assert.are.equal(holder_sid, st.ephemeral_owner)
    -- two waiters in two more processes queue behind it, in this order
    local waiters = {}
    for i = 1, 2 do
      waiters[i] = fw.worker("acquire", { hosts = zk.hosts, path = path, session = SESSION, timeout = 4 * SESSION,
                                          hold = 0.3, identity = "waiter" .. i, log = dir .. "/waiter" .. i .. ".log" })
      assert.is_true(util.wait_until(function() return #util.children(obs, path) == i + 1 end, 15, { obs }),
        "waiter " .. i .. " did not queue: " .. waiters[i]:output())
    end
    local queue = util.children(obs, path)
    util.drive({ obs }, 0.3)
    assert.is_nil(waiters[1]:wait_line("^acquired", 0), "a waiter got the lock while the holder held it")

    local t_kill = now()
    holder:signal("KILL")
    assert.is_true(holder:wait_exit(5, pump))
    -- watch the dead holder's node until it goes (bounded), and the first waiter's grant. A read
    -- that finds the node was answered at some moment after it was sent: that moment is what
    -- is known to precede the delete, so last_seen is the send time (the time the answer was
    -- read may come after the grant on a busy machine, without any overlap)
    local last_seen = t_kill
    local got1
    local deadline = now() + 3 * SESSION * 1000
    while now() < deadline do
      local asked = now()
      if obs:exists(dead) then last_seen = asked end
      got1 = waiters[1]:wait_line("^acquired", 0)
      if got1 then break end
      util.drive({ obs }, 0.02)
    end
    assert.truthy(got1, "the next waiter did not get the lock within 3 session timeouts: "
      .. table.concat(waiters[1]:lines(), " | "))
    local t_grant = tonumber(got1:match("^acquired (%S+)"))
    local got2 = waiters[2]:wait_line("^acquired", 10, pump)
    assert.truthy(got2, "the second waiter did not get the lock: " .. table.concat(waiters[2]:lines(), " | "))
    local t_grant2 = tonumber(got2:match("^acquired (%S+)"))
    local released1 = waiters[1]:wait_line("^released", 10, pump)
    assert.truthy(released1)
    print(("\n  [crash] holder killed; its node last seen %.0f ms after the kill; next waiter granted %.0f ms after "
      .. "the kill (session %d s); the one behind it %.0f ms after that"):format(
      last_seen - t_kill, t_grant - t_kill, SESSION, t_grant2 - t_grant))
    -- within the session timeout plus a margin (tick rounding, scheduling), never before the dead
    -- holder's node was gone
    assert.is_true(t_grant - t_kill < (SESSION + 2) * 1000, "takeover too slow")
    assert.is_true(t_grant > last_seen, "granted while the dead holder's node still existed")
    assert.is_true(t_grant - t_kill > (SESSION - 1.5) * 1000, "granted before the dead session could have expired")
    -- FIFO after the crash, and rising tokens
    -- the first waiter holds for `hold` (0.3 s) after it logs "acquired"; its "released" line comes
    -- after release() returned, which on a busy machine can be after the next grant, so the bound
    -- is the start of its release: a grant inside the hold would be two holders
    assert.is_true(t_grant2 >= t_grant + 300, ("the second waiter was granted %.0f ms after the first, "
      .. "inside its 300 ms hold"):format(t_grant2 - t_grant))
    local token1 = tonumber(got1:match("^acquired %S+ (%d+)"))
    local token2 = tonumber(got2:match("^acquired %S+ (%d+)"))
    assert.is_true(token1 > holder_token and token2 > token1)
    for i = 1, 2 do
      assert.is_true(waiters[i]:wait_exit(10, pump))
      assert.truthy(waiters[i]:wait_line("^released %S+ ok", 0), table.concat(waiters[i]:lines(), " | "))
    end
    -- nothing of the dead session remains: not its node, not any ephemeral of its session
    assert.is_false(obs:exists(dead))
    assert.are.equal(names[1], queue[1])             -- it was the head of the queue
    assert.are.same({}, util.children(obs, path))
    local dump = assert(zk:four("dump"))
    assert.is_nil(dump:find("0x" .. holder_sid:gsub("^0+", ""), 1, true),
      "the dead session still owns ephemerals:\n" .. dump)
    assert.is_true(util.wait_until(function()
      return util.mntr(zk, "zk_ephemerals_count") <= baseline
    end, 2 * SESSION, { obs }), "ephemerals not back to the baseline")
  end)

  it("10 locks, 2 processes x 50 coroutines: each lock exact, exclusive, FIFO and token-ordered; "
     .. "the locks run in parallel", function()
    local o = { root = "/procs/ten", locks = 10, procs = 2, cos = 50, iters = 10, limit = 60 }
    local res = run_counter(zk, obs, o)
    local total = o.procs * o.cos * o.iters   -- 1,000 critical sections
    assert_accounted(res, o)
    local r = fw.check(res.holds, 1)
    local text = check_text(r)
    local fifo_bad, fifo_ex = fifo_violations(res.holds)
    local per_key, sum = {}, 0
    for key, list in pairs(by_key(res.holds)) do per_key[key] = #list end
    local conc = max_concurrent(res.holds)
    local parts = {}
    for j = 1, o.locks do
      local k = tostring(j)
      parts[#parts + 1] = ("%s:%s/%s"):format(k, tostring(res.counters[k]), tostring(per_key[k]))
    end
    print(("\n  [ten locks] %d holds in %.2f s; counter/holds per lock {%s}; up to %d locks held at once; %s; "
      .. "fifo violations %d"):format(#res.holds, res.span / 1000, table.concat(parts, " "), conc, text, fifo_bad))
    for j = 1, o.locks do
      local k = tostring(j)
      assert.is_true((per_key[k] or 0) > 0, "lock " .. k .. " was never used")
      assert.are.equal(per_key[k], res.counters[k], "lost updates on lock " .. k)
      assert.are.equal(1, r.max_overlap[k], "two holders at once on lock " .. k)
      sum = sum + res.counters[k]
      assert.are.same({}, util.children(obs, o.root .. "/" .. k))
    end
    assert.are.equal(total, sum)
    assert.are.equal(0, r.violations, text)
    assert.are.equal(0, r.interrupted_overlaps, text)
    assert.are.equal(0, r.token_violations, text)
    assert.are.equal(0, fifo_bad, table.concat(fifo_ex, "; "))
    -- independence: holds of different locks overlap in time (a lock does not wait for another)
    assert.is_true(conc >= 3, "at most " .. conc .. " locks were held at once: the locks do not run independently")
    assert.are.equal(o.procs, pids_of(res.holds))
    assert.is_true(process_switches(res.holds) >= o.locks, "the two processes hardly interleaved")
  end)
end)
