-- bench/bench.lua - runs every contender against one throwaway ZooKeeper and prints one table.
-- Started by bench/run (which builds the drivers first); run from the repository root:
--
--   lua5.4 bench/bench.lua [--smoke] [--rounds N] [--no-nosync] [--no-10k] [--no-ensemble] [--results FILE]
--                          [--baseline REV] [--only zklock,raw,curator,kazoo] [--cases ID,...]
--
-- Each case runs every contender once per round, in an order that rotates from round to round
-- (so no contender always runs first, or right after the JVM server's garbage collection of
-- someone else's run); every driver is a separate process (bench/drivers/*), so RSS is its own.
-- The table gives the median of the rounds with min-max, and zklock/peer ratios of the medians.
--
-- --baseline REV: bench/run has built revision REV into bench/out/base-build{,-jit} and copied its
-- lua/ to bench/out/base-lua; "zklock-base 5.4" and "zklock-base jit" run the same workloads with
-- that core and those Lua sources, each right next to its current-tree counterpart (which of the
-- two goes first alternates from round to round), and the report compares the two per workload.
-- --only LIST runs only the named contenders (zklock = both flavours and their baselines).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local testing = require("zklock.testing")

---------------------------------------------------------------- options

local opt = { rounds = 3, nosync = true, tenk = true, ensemble = true, results = nil, smoke = false, baseline = nil,
              only = nil }
do
  local function usage_error(msg)
    io.stderr:write("bench: " .. msg .. " (bench/run --help lists the options)\n")
    os.exit(2)
  end
  local function need(v, what)
    if v == nil then usage_error(what .. " needs a value") end
    return v
  end
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--smoke" then opt.smoke = true
    elseif a == "--rounds" then
      i = i + 1
      opt.rounds, opt.rounds_set = tonumber(need(arg[i], "--rounds N")), true
      if not opt.rounds or opt.rounds < 1 or opt.rounds % 1 ~= 0 then
        usage_error("--rounds N wants a whole number >= 1, got " .. arg[i])
      end
    elseif a == "--no-nosync" then opt.nosync = false
    elseif a == "--no-10k" then opt.tenk = false
    elseif a == "--no-ensemble" then opt.ensemble = false
    elseif a == "--results" then i = i + 1; opt.results = need(arg[i], "--results FILE")
    elseif a == "--baseline" then i = i + 1; opt.baseline = need(arg[i], "--baseline REV")
    elseif a == "--only" then i = i + 1; opt.only = need(arg[i], "--only zklock,raw,curator,kazoo,openresty")
    elseif a == "--cases" then i = i + 1; opt.cases = need(arg[i], "--cases ID,ID,...")
    elseif a == "-h" or a == "--help" then
      io.stdout:write("usage: bench/run [--smoke] [--rounds N] [--no-nosync] [--no-10k] [--no-ensemble]\n",
        "  [--results FILE] [--baseline REV] [--only zklock,raw,curator,kazoo,openresty] [--cases ID,...]\n",
        "(see the head of bench/run and bench/README.md)\n")
      os.exit(0)
    else usage_error("unknown option " .. a) end
    i = i + 1
  end
  -- bench/run checks the options this way before it spends minutes building
  if os.getenv("BENCH_PARSE_ONLY") then os.exit(0) end
  if opt.smoke then
    opt.rounds, opt.nosync, opt.tenk, opt.ensemble = opt.rounds_set and opt.rounds or 1, false, false, false
  end
end

local function sh(cmd)
  local f = io.popen(cmd .. " 2>&1")
  local s = f:read("*a")
  f:close()
  return (s:gsub("%s+$", ""))
end

local function now()
  return tonumber(sh("date +%s.%N"))
end

local function log(fmt, ...)
  io.stderr:write(("[bench %s] " .. fmt .. "\n"):format(os.date("%H:%M:%S"), ...))
end

---------------------------------------------------------------- contenders

local JARS = { "curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute",
               "guava", "slf4j-api", "slf4j-nop" }
local cp = { "bench/out/java" }
for _, j in ipairs(JARS) do cp[#cp + 1] = "/usr/share/java/" .. j .. ".jar" end

local CONTENDERS = {
  { id = "raw", label = "raw C (libzookeeper_st)", cmd = "bench/out/raw_zk" },
  { id = "zkl", label = "zklock Lua 5.4",
    cmd = "env ZKL_BUILD=bench/out/build lua5.4 bench/drivers/zklock_bench.lua" },
  { id = "jit", label = "zklock LuaJIT",
    cmd = "env ZKL_BUILD=bench/out/build-jit luajit bench/drivers/zklock_bench.lua" },
  { id = "cur", label = "Curator 5.4", cmd = "java -Xmx512m -cp " .. table.concat(cp, ":") .. " CuratorBench" },
  { id = "kaz", label = "Kazoo 2.8", cmd = "/usr/bin/python3 bench/drivers/kazoo_bench.py" },
  -- nginx + ngx_lua (LuaJIT) with zklock.adapters.openresty, loaded by wrk: its own section
  { id = "ngx", label = "OpenResty (nginx, LuaJIT)", cmd = "lua5.4 bench/drivers/openresty_bench.lua" },
}
-- the baseline's contenders: the same driver with the baseline's core.so and Lua sources
local BASE_OF = {} -- current-tree contender id -> its baseline's id
if opt.baseline then
  CONTENDERS[#CONTENDERS + 1] = { id = "bzkl", label = "zklock-base 5.4", base_of = "zkl",
    cmd = "env ZKL_BUILD=bench/out/base-build ZKL_LUA_DIR=bench/out/base-lua lua5.4 bench/drivers/zklock_bench.lua" }
  CONTENDERS[#CONTENDERS + 1] = { id = "bjit", label = "zklock-base jit", base_of = "jit",
    cmd = "env ZKL_BUILD=bench/out/base-build-jit ZKL_LUA_DIR=bench/out/base-lua luajit "
      .. "bench/drivers/zklock_bench.lua" }
  BASE_OF.zkl, BASE_OF.jit = "bzkl", "bjit"
  for _, f in ipairs({ "bench/out/base-build/zklock/core.so", "bench/out/base-build-jit/zklock/core.so",
                       "bench/out/base-lua/zklock/init.lua" }) do
    local fh = io.open(f)
    if not fh then error("--baseline: " .. f .. " is missing (bench/run --baseline REV builds it)", 0) end
    fh:close()
  end
end
local BY_ID = {}
for _, c in ipairs(CONTENDERS) do BY_ID[c.id] = c end
local LOCKS = { "zkl", "jit", "cur", "kaz" }

-- --only: the contenders that run (a baseline contender runs with its current-tree counterpart)
local SELECTED = {}
do
  local GROUPS = { zklock = { "zkl", "jit" }, raw = { "raw" }, curator = { "cur" }, kazoo = { "kaz" },
                   zkl = { "zkl" }, jit = { "jit" }, cur = { "cur" }, kaz = { "kaz" }, openresty = { "ngx" },
                   ngx = { "ngx" } }
  for _, c in ipairs(CONTENDERS) do SELECTED[c.id] = opt.only == nil end
  if opt.only then
    for name in opt.only:gmatch("[^,%s]+") do
      local g = GROUPS[name]
      if not g then
        error("--only: unknown contender " .. name .. " (zklock, raw, curator, kazoo, openresty, zkl, jit)", 0)
      end
      for _, id in ipairs(g) do SELECTED[id] = true end
    end
  end
  for new, base in pairs(BASE_OF) do SELECTED[base] = SELECTED[new] end
end

---------------------------------------------------------------- cases

-- Each case: id, server ("sync" | "nosync"), who (contender ids), args (driver arguments, or a
-- function of the contender id and the round), limit (s, per driver run), once (round 1 only).
local S = opt.smoke
local secs = S and 0.5 or 3
local CASES = {
  { id = "unc", title = "1. Uncontended acquire+release (raw: create+delete)",
    who = { "raw", "zkl", "jit", "cur", "kaz" },
    args = S and "uncontended n=50 warm=10" or "uncontended n=2000 warm=200" },
  { id = "pipe1", title = "raw pipelined create+delete, 1 in flight", who = { "raw" },
    args = S and "pipelined depth=1 n=100 warm=10" or "pipelined depth=1 n=3000 warm=200" },
  { id = "pipe16", title = "raw pipelined, 16 in flight", who = { "raw" },
    args = S and "pipelined depth=16 n=200 warm=20" or "pipelined depth=16 n=20000 warm=1000" },
  { id = "pipe128", title = "raw pipelined, 128 in flight", who = { "raw" },
    args = S and "pipelined depth=128 n=500 warm=128" or "pipelined depth=128 n=30000 warm=2000" },
  -- a lock's three requests with no lock logic (create and listing back to back, then the
  -- delete; each of the 1,000 slots under a parent of its own): the server's ceiling for the
  -- 1,000 locks' requests, the listing included (issue 24 target 3)
  { id = "pipe1000l", title = "raw pipelined with a lock's listing, 1000 in flight", who = { "raw" },
    args = S and "pipelined depth=100 n=300 warm=100 list=1" or "pipelined depth=1000 n=40000 warm=2000 list=1" },
  { id = "c8", title = "2. Contended mutex, 8 waiters", who = LOCKS, args = ("contended t=8 secs=%g"):format(secs) },
  { id = "c64", title = "2. Contended mutex, 64 waiters", who = LOCKS, args = ("contended t=64 secs=%g"):format(secs) },
  { id = "c1000", title = "2. Contended mutex, 1000 waiters", who = LOCKS,
    args = ("contended t=1000 secs=%g"):format(secs) },
  -- The raw ceiling runs in the same case (pipelined, 128 in flight), rotating with the others,
  -- so each round has its own zklock÷raw pair; 10 s runs: in 3 s the 1,000 coroutines, which move
  -- in waves of about 1,000 acquisitions, made only 3-10 waves and their rate swung by 2x with
  -- the machine's other load (bench/RESULTS.md, "The 1,000-lock workload's spread").
  { id = "ind", title = "3. 1000 independent locks, 1000 coroutines/threads",
    who = { "raw", "zkl", "jit", "cur", "kaz" },
    args = function(cid)
      if cid == "raw" then
        return S and "pipelined depth=128 n=500 warm=128" or "pipelined depth=128 n=100000 warm=2000"
      end
      return S and "independent t=50 secs=0.5" or "independent t=1000 secs=10"
    end },
  { id = "read", title = "4. Read lock, 8 readers", who = LOCKS, args = ("read t=8 secs=%g"):format(secs) },
  { id = "sem", title = "4. Semaphore max 4, 16 contenders", who = LOCKS,
    args = ("semaphore t=16 max=4 secs=%g"):format(secs) },
  { id = "h100", title = "5. Herd: 100 waiters behind one holder", who = LOCKS, args = "herd t=100" },
  -- OpenResty: nginx (2 workers, a zklock client each) under wrk, 16 keep-alive connections; the
  -- three locations back to back in one nginx, their order rotating from round to round
  { id = "http", title = "OpenResty: requests/s with and without a mutex per request", who = { "ngx" }, limit = 180,
    args = function(_, round)
      local locs = { "free", "lock", "shared" }
      local order = {}
      for k = 0, 2 do order[#order + 1] = locs[(k + round - 1) % 3 + 1] end
      return ("http secs=%g warm=1 c=16 workers=2 order=%s"):format(S and 1 or 5, table.concat(order, ","))
    end },
  { id = "h1000", title = "5. Herd: 1000 waiters behind one holder", who = LOCKS, args = "herd t=1000" },
  -- On its own server with a 1 GiB heap (Debian's default for ZooKeeper): 10,000 pipelined
  -- listings of a 10,000-child queue overflow the harness's 256 MiB heap (see RESULTS.md).
  -- Each on a fresh server: a second 10,000-waiter run on the same 1 GiB server ran it out of heap.
  { id = "h10k", server = "big-zkl", title = "10,000 waiting coroutines, Lua 5.4", who = { "zkl" },
    args = "herd t=10000", limit = 240, once = true },
  { id = "h10k", server = "big-jit", title = "10,000 waiting coroutines, LuaJIT", who = { "jit" },
    args = "herd t=10000", limit = 240, once = true },
  { id = "ns_unc", server = "nosync", title = "forceSync=no: raw create+delete, one at a time", who = { "raw" },
    args = "uncontended n=3000 warm=200" },
  { id = "ns_pipe", server = "nosync", title = "forceSync=no: raw pipelined, 128 in flight", who = { "raw" },
    args = "pipelined depth=128 n=30000 warm=2000" },
  { id = "ns_unc_l", server = "nosync", title = "forceSync=no: uncontended lock cycle", who = LOCKS,
    args = "uncontended n=3000 warm=200" },
  { id = "ns_c64", server = "nosync", title = "forceSync=no: contended mutex, 64 waiters", who = LOCKS,
    args = "contended t=64 secs=3" },
  -- A 3-node ensemble (the way production runs), its three JVMs on the same 2 cores; clients get
  -- all three hosts and connect to one of them at random, as every contender's library does.
  { id = "e_unc", server = "ens", title = "3-node ensemble: uncontended acquire+release (raw: create+delete)",
    who = { "raw", "zkl", "jit", "cur", "kaz" }, args = "uncontended n=1000 warm=100" },
  { id = "e_pipe", server = "ens", title = "3-node ensemble: raw pipelined, 128 in flight", who = { "raw" },
    args = "pipelined depth=128 n=20000 warm=1000" },
  { id = "e_c64", server = "ens", title = "3-node ensemble: contended mutex, 64 waiters", who = LOCKS,
    args = ("contended t=64 secs=%g"):format(secs) },
  { id = "e_ind", server = "ens", title = "3-node ensemble: 1000 independent locks, 1000 coroutines/threads",
    who = LOCKS, args = ("independent t=1000 secs=%g"):format(secs) },
}
if S then -- smoke: every driver and workload once, small
  local keep = { unc = true, pipe16 = true, pipe1000l = true, c8 = true, ind = true, read = true, sem = true,
                 h100 = true,
                 http = true }
  local cases = {}
  for _, c in ipairs(CASES) do if keep[c.id] then cases[#cases + 1] = c end end
  CASES = cases
  for _, c in ipairs(CASES) do
    if c.id == "h100" then c.args = "herd t=20" end
    if c.id == "sem" then c.args = "semaphore t=6 max=2 secs=0.5" end
  end
end
-- --baseline: the 10,000-waiter runs of the baseline, each on a fresh server of its own too
if opt.baseline then
  local cases = {}
  for _, c in ipairs(CASES) do
    cases[#cases + 1] = c
    if c.id == "h10k" then
      local b = {}
      for k, v in pairs(c) do b[k] = v end
      local base = BASE_OF[c.who[1]]
      b.server, b.who, b.title = "big-" .. base, { base }, c.title .. " (baseline)"
      c.alone, b.alone = true, true -- not next to each other: each on a fresh server
      c.once, b.once = false, false -- every round (see the servers below)
      cases[#cases + 1] = b
    end
  end
  CASES = cases
end
-- --cases: only those case ids (a follow-up of a few rows with more rounds)
if opt.cases then
  local want, cases, known = {}, {}, {}
  for id in opt.cases:gmatch("[^,%s]+") do want[id] = true end
  for _, c in ipairs(CASES) do
    known[c.id] = true
    if want[c.id] then cases[#cases + 1] = c end
  end
  for id in pairs(want) do
    if not known[id] then error("--cases: unknown case " .. id, 0) end
  end
  CASES = cases
end
-- --only: drop the contenders not selected, and the cases left with none. --baseline: the
-- baseline's contender right after its current-tree one.
do
  local cases = {}
  for _, c in ipairs(CASES) do
    local who = {}
    for _, id in ipairs(c.who) do
      if SELECTED[id] then who[#who + 1] = id end
      if BASE_OF[id] and SELECTED[BASE_OF[id]] and not c.alone then who[#who + 1] = BASE_OF[id] end
    end
    if #who > 0 then
      local k = {}
      for key, v in pairs(c) do k[key] = v end
      k.who = who
      cases[#cases + 1] = k
    end
  end
  CASES = cases
end

---------------------------------------------------------------- running

local results = {} -- case id -> contender id -> list of RESULT tables
local failures = {}
local failed_runs = {} -- "case/contender" -> true when a run of it failed

local function parse(line)
  local t = {}
  for k, v in line:gmatch("([%w_]+)=(%S+)") do t[k] = tonumber(v) or v end
  return t
end

local function run_driver(case, cid, hosts, round)
  local c = BY_ID[cid]
  local args = type(case.args) == "function" and case.args(cid, round) or case.args
  local errf = os.tmpname()
  local cmd = ("timeout -k 5 %d %s %s %s 2>%s"):format(case.limit or 300, c.cmd, hosts, args, errf)
  local t0 = now()
  local f = io.popen(cmd)
  local out = f:read("*a")
  local _, _, code = f:close()
  local ef = io.open(errf)
  local err = ef and ef:read("*a") or ""
  if ef then ef:close() end
  os.remove(errf)
  local line = out:match("RESULT[^\n]*")
  results[case.id] = results[case.id] or {}
  results[case.id][cid] = results[case.id][cid] or {}
  if not line then
    failed_runs[case.id .. "/" .. cid] = true
    local why = ("%s / %s: no RESULT (exit %s)\n%s%s"):format(case.id, cid, tostring(code), out:sub(-1500),
      err:sub(-1500))
    failures[#failures + 1] = why
    log("FAILED %s", why)
    return
  end
  local r = parse(line)
  r._round = round
  table.insert(results[case.id][cid], r)
  log("%-8s %-4s %5.1fs  %s", case.id, cid, now() - t0, line:sub(8, 160))
end

-- The order of a case's contenders in a round: the list rotates by one every round. With
-- --baseline each current-tree contender and its baseline form one slot that rotates as a unit,
-- so the two run back to back, and which of them goes first alternates from round to round.
local function round_order(who, round)
  local slots, in_slot = {}, {}
  for _, id in ipairs(who) do
    local base = BASE_OF[id]
    if base and not in_slot[base] then
      local has_base = false
      for _, other in ipairs(who) do if other == base then has_base = true end end
      if has_base then
        in_slot[base] = true
        slots[#slots + 1] = round % 2 == 1 and { id, base } or { base, id }
      else
        slots[#slots + 1] = { id }
      end
    elseif not in_slot[id] then
      slots[#slots + 1] = { id }
    end
  end
  local order, n = {}, #slots
  for k = 0, n - 1 do
    for _, id in ipairs(slots[(k + round - 1) % n + 1]) do order[#order + 1] = id end
  end
  return order
end

local function run_group(group, zk, only_round)
  local hosts = zk.hosts
  for round = only_round or 1, only_round or opt.rounds do
    for _, case in ipairs(CASES) do
      if (case.server or "sync") == group and (round == 1 or not case.once) then
        for _, cid in ipairs(round_order(case.who, round)) do
          if not zk:running() then
            failures[#failures + 1] = ("%s round %d: the server is gone (see its log)"):format(case.id, round)
            log("%s", failures[#failures])
            break
          end
          run_driver(case, cid, hosts, round)
        end
      end
    end
  end
end

local function needs(group)
  for _, c in ipairs(CASES) do
    if (c.server or "sync") == group then return true end
  end
  return false
end

-- The JVM server compiles its hot paths during the first seconds of load: warm it up first, and
-- throw those numbers away.
local function warm_up(hosts)
  if S then return end
  log("warming up the server")
  sh(("timeout 120 %s %s pipelined depth=128 n=20000 warm=0"):format(BY_ID.raw.cmd, hosts))
  sh(("timeout 120 %s %s independent t=200 secs=2"):format(BY_ID.zkl.cmd, hosts))
  sh(("timeout 120 %s %s contended t=16 secs=2"):format((SELECTED.cur and BY_ID.cur or BY_ID.zkl).cmd, hosts))
end

local server_info = {}
local t_start = now()
local function loadavg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("*l") or "?"
  if f then f:close() end
  return s:match("^(%S+ %S+ %S+)") or s
end
local load_start = loadavg()
local function with_server(group, config, jvm_opts, round)
  if not needs(group) then return end
  local zk = testing.server{ config = config, container_check_ms = 60000, jvm_opts = jvm_opts }
  local ok, err = pcall(function()
    local m = zk:mntr() or {}
    server_info.version = m.zk_version
    log("server %s (%s) on %s", group, config and "forceSync=no" or "forceSync=yes", zk.hosts)
    if not group:match("^big") then warm_up(zk.hosts) end
    run_group(group, zk, round)
    local st = io.open("/proc/" .. zk.pid .. "/status")
    local s = st and st:read("*a") or ""
    if st then st:close() end
    local peak, before = (tonumber(s:match("VmHWM:%s*(%d+)")) or 0) / 1024, server_info[group]
    server_info[group] = { alive = zk:running() and (not before or before.alive),
                           peak_rss_mib = math.max(peak, before and before.peak_rss_mib or 0) }
    log("server %s: %s, peak RSS %.0f MiB", group, server_info[group].alive and "still running" or "DIED",
      server_info[group].peak_rss_mib)
  end)
  zk:stop()
  if not ok then error(err, 0) end
end

-- The ensemble group: three members through zklock.testing.ensemble, the same settings as the
-- single server; request counts are not shown (the drivers read mntr of one member only).
local function with_ensemble()
  if not needs("ens") then return end
  local ens = testing.ensemble{ n = 3, container_check_ms = 60000 }
  local ok, err = pcall(function()
    ens:wait_quorum(60)
    log("ensemble (3 members, forceSync=yes) on %s", ens.hosts)
    warm_up(ens.hosts)
    run_group("ens", ens)
    local peak = 0
    for _, node in ipairs(ens.nodes) do
      local st = node.pid and io.open("/proc/" .. node.pid .. "/status")
      local text = st and st:read("*a") or ""
      if st then st:close() end
      peak = math.max(peak, (tonumber(text:match("VmHWM:%s*(%d+)")) or 0) / 1024)
    end
    server_info.ens = { alive = ens:running(), peak_rss_mib = peak }
    log("ensemble: %s, peak RSS of a member %.0f MiB", server_info.ens.alive and "still running" or "DIED", peak)
  end)
  ens:stop()
  if not ok then error(err, 0) end
end

with_server("sync", nil)
if opt.nosync then with_server("nosync", { forceSync = "no" }) end
if opt.ensemble then with_ensemble() end
if opt.tenk and not opt.baseline then
  with_server("big-zkl", nil, { "-Xmx1g" })
  with_server("big-jit", nil, { "-Xmx1g" })
elseif opt.tenk then
  -- --baseline: the 10,000 waiters every round, each run on a fresh server, new and base back to
  -- back (which goes first alternating), so that they too have a spread to judge by
  for round = 1, opt.rounds do
    local order = round % 2 == 1 and { "big-zkl", "big-bzkl", "big-jit", "big-bjit" }
      or { "big-bzkl", "big-zkl", "big-bjit", "big-jit" }
    for _, g in ipairs(order) do with_server(g, nil, { "-Xmx1g" }, round) end
  end
end
local elapsed = now() - t_start
local load_end = loadavg()

---------------------------------------------------------------- table

local function median(list)
  local s = {}
  for i, v in ipairs(list) do s[i] = v end
  table.sort(s)
  local n = #s
  if n == 0 then return nil end
  if n % 2 == 1 then return s[(n + 1) / 2] end
  return (s[n / 2] + s[n / 2 + 1]) / 2
end

local function values(case_id, cid, key, scale)
  local out = {}
  for _, r in ipairs(((results[case_id] or {})[cid]) or {}) do
    if type(r[key]) == "number" then out[#out + 1] = r[key] * (scale or 1) end
  end
  return out
end

local function stat(case_id, cid, key, scale)
  local v = values(case_id, cid, key, scale)
  if #v == 0 then return nil end
  local mn, mx = math.huge, -math.huge
  for _, x in ipairs(v) do mn = math.min(mn, x); mx = math.max(mx, x) end
  return { med = median(v), min = mn, max = mx, n = #v }
end

local function num(x, digits)
  if x == nil then return "-" end
  if digits then return ("%." .. digits .. "f"):format(x) end
  local a = math.abs(x)
  if a >= 100 then return ("%.0f"):format(x) end
  if a >= 10 then return ("%.1f"):format(x) end
  return ("%.2f"):format(x)
end

local function cell(s, digits)
  if not s then return "-" end
  if s.n == 1 or s.min == s.max then return num(s.med, digits) end
  return ("%s (%s–%s)"):format(num(s.med, digits), num(s.min, digits), num(s.max, digits))
end

-- rows: { case, key, label, scale, digits, raw_from (case ids to take the best raw value from:
-- the highest median, or with raw_min the lowest, for client CPU) }. Client CPU (cpu_us_per):
-- user + system CPU of the driver process over the timed part, per operation, measured by the
-- process itself (clock(), getrusage, process_time, the JVM's getProcessCpuTime: the whole JVM).
local RAW1 = { "unc" } -- the raw one-at-a-time create+delete: the CPU floor of one cycle
local ROWS = {
  { "unc", "rate", "1. uncontended: cycles/s" },
  { "unc", "p50_us", "1. uncontended: p50 latency, µs" },
  { "unc", "p99_us", "1. uncontended: p99 latency, µs" },
  { "unc", "req_per", "5. uncontended: ZooKeeper requests per cycle", digits = 2 },
  { "unc", "cpu_us_per", "uncontended: client CPU µs/op" },
  { "pipe1", "rate", "raw pipelined 1 in flight: cycles/s" },
  { "pipe16", "rate", "raw pipelined 16 in flight: cycles/s" },
  { "pipe128", "rate", "raw pipelined 128 in flight: cycles/s" },
  { "pipe128", "cpu_us_per", "raw pipelined 128 in flight: client CPU µs/op" },
  { "pipe1000l", "rate", "raw create+list+delete, 1000 in flight: cycles/s" },
  { "pipe1000l", "fsync_per", "raw create+list+delete, 1000 in flight: log fsyncs per cycle", digits = 3 },
  { "c8", "rate", "2. 8 waiters, one mutex: acquisitions/s" },
  { "c8", "p99_wait_us", "2. 8 waiters: p99 wait, ms", scale = 1e-3 },
  { "c8", "cpu_us_per", "8 waiters: client CPU µs/op (raw: 1 create+delete)", raw_from = RAW1, raw_min = true },
  { "c64", "rate", "2. 64 waiters, one mutex: acquisitions/s" },
  { "c64", "p99_wait_us", "2. 64 waiters: p99 wait, ms", scale = 1e-3 },
  { "c64", "req_per", "5. 64 waiters: requests per acquisition", digits = 2 },
  { "c64", "notif_per", "5. 64 waiters: watch notifications per acquisition", digits = 2 },
  { "c64", "cpu_us_per", "64 waiters: client CPU µs/op (raw: 1 create+delete)", raw_from = RAW1, raw_min = true },
  { "c1000", "rate", "2. 1000 waiters, one mutex: acquisitions/s" },
  { "c1000", "p99_wait_us", "2. 1000 waiters: p99 wait, ms", scale = 1e-3 },
  { "c1000", "cpu_us_per", "1000 waiters: client CPU µs/op (raw: 1 create+delete)", raw_from = RAW1, raw_min = true },
  { "ind", "rate", "3. 1000 locks x 1 holder each: acquisitions/s (raw: pipelined 128, same rounds)" },
  { "ind", "req_per", "3. 1000 locks: requests per acquisition", digits = 2 },
  { "ind", "fsync_per", "3. 1000 locks: log fsyncs at the server per acquisition (raw: per cycle)", digits = 3 },
  { "ind", "rss_kb", "3. 1000 locks: process RSS, MiB", scale = 1 / 1024 },
  { "ind", "cpu_us_per", "1000 locks: client CPU µs/op (raw: pipelined 128, same rounds)" },
  { "read", "rate", "4. read lock, 8 readers: acquisitions/s" },
  { "read", "req_per", "4. read lock: requests per acquisition", digits = 2 },
  { "read", "cpu_us_per", "read lock: client CPU µs/op (raw: 1 create+delete)", raw_from = RAW1, raw_min = true },
  { "sem", "rate", "4. semaphore max 4, 16 contenders: acquisitions/s" },
  { "sem", "req_per", "4. semaphore: requests per acquisition", digits = 2 },
  { "sem", "notif_per", "4. semaphore: watch notifications per acquisition", digits = 2 },
  { "sem", "cpu_us_per", "semaphore: client CPU µs/op (raw: 1 create+delete)", raw_from = RAW1, raw_min = true },
  { "h100", "notif_per", "5. 100 waiters: watch notifications per release", digits = 3 },
  { "h100", "req_per", "5. 100 waiters: requests per acquisition", digits = 2 },
  { "h100", "watches_queued", "5. 100 waiters: watches at the server while queued", digits = 0 },
  { "h100", "handoff_rate", "5. 100 waiters: handoffs/s (queue drain)" },
  { "h100", "cpu_us_per", "100 waiters: client CPU µs/handoff in the drain (raw: 1 create+delete)",
    raw_from = RAW1, raw_min = true },
  { "h1000", "notif_per", "1000 waiters: watch notifications per release", digits = 3 },
  { "h1000", "rss_above_idle_kb", "1000 waiters: RSS above the idle client, MiB", scale = 1 / 1024 },
  { "h1000", "handoff_rate", "1000 waiters: handoffs/s (queue drain)" },
  { "h1000", "cpu_us_per", "1000 waiters: client CPU µs/handoff in the drain (raw: 1 create+delete)",
    raw_from = RAW1, raw_min = true },
  { "h10k", "acquired", "10,000 waiters: acquisitions completed", digits = 0 },
  { "h10k", "enqueue_secs", "10,000 waiters: time to queue all, s" },
  { "h10k", "handoff_secs", "10,000 waiters: time to drain the queue, s" },
  { "h10k", "notif_per", "10,000 waiters: watch notifications per release", digits = 3 },
  { "h10k", "rss_above_idle_kb", "10,000 waiters: RSS above the idle client, MiB", scale = 1 / 1024 },
  { "h10k", "cpu_us_per", "10,000 waiters: client CPU µs/handoff (drain)" },
  { "ns_unc", "rate", "forceSync=no: raw create+delete one at a time, cycles/s" },
  { "ns_pipe", "rate", "forceSync=no: raw pipelined 128, cycles/s" },
  { "ns_unc_l", "rate", "forceSync=no: uncontended cycles/s (raw: one at a time)", raw_from = { "ns_unc" } },
  { "ns_unc_l", "p50_us", "forceSync=no: uncontended p50 latency, µs" },
  { "ns_unc_l", "cpu_us_per", "forceSync=no: uncontended client CPU µs/op (raw: one at a time)",
    raw_from = { "ns_unc" } },
  { "ns_c64", "rate", "forceSync=no: 64 waiters, acquisitions/s" },
  { "ns_c64", "req_per", "forceSync=no: 64 waiters, requests per acquisition", digits = 2 },
  { "ns_c64", "cpu_us_per", "forceSync=no: 64 waiters, client CPU µs/op (raw: 1 create+delete)",
    raw_from = { "ns_unc" }, raw_min = true },
  { "e_unc", "rate", "3-node ensemble: uncontended cycles/s (raw: create+delete one at a time)" },
  { "e_unc", "p50_us", "3-node ensemble: uncontended p50 latency, µs" },
  { "e_unc", "cpu_us_per", "3-node ensemble: uncontended client CPU µs/op" },
  { "e_pipe", "rate", "3-node ensemble: raw pipelined 128 in flight, cycles/s" },
  { "e_c64", "rate", "3-node ensemble: 64 waiters, one mutex: acquisitions/s" },
  { "e_c64", "p99_wait_us", "3-node ensemble: 64 waiters: p99 wait, ms", scale = 1e-3 },
  { "e_ind", "rate", "3-node ensemble: 1000 locks x 1 holder each: acquisitions/s (raw: pipelined 128)",
    raw_from = { "e_pipe" } },
  { "e_ind", "cpu_us_per", "3-node ensemble: 1000 locks: client CPU µs/op (raw: pipelined 128)",
    raw_from = { "e_pipe" }, raw_min = true },
}

local function raw_stat(row)
  if row.raw_from then -- the best of the given raw cases, by median
    local best
    for _, id in ipairs(row.raw_from) do
      local s = stat(id, "raw", row[2], row.scale)
      if s and (not best or (row.raw_min and s.med < best.med) or (not row.raw_min and s.med > best.med)) then
        best = s
      end
    end
    return best
  end
  return stat(row[1], "raw", row[2], row.scale)
end

local function ratio(a, b)
  if not a or not b or b.med == 0 then return nil end
  return a.med / b.med
end

-- Columns: every selected contender, then zklock's ratios to each selected peer (and, with
-- --baseline, to its baseline). Without --only and --baseline the table is the classic one.
local COLS = {}
do
  local function col(head, f) COLS[#COLS + 1] = { head = head, f = f } end
  local function value(cid, head)
    if SELECTED[cid] then col(head, function(st, row) return cell(st[cid], row.digits) end) end
  end
  value("raw", "raw C")
  value("zkl", "zklock 5.4")
  value("bzkl", "zklock-base 5.4")
  value("jit", "zklock LuaJIT")
  value("bjit", "zklock-base LuaJIT")
  value("cur", "Curator 5.4")
  value("kaz", "Kazoo 2.8")
  local function pair(head, peer_zkl, peer_jit)
    col(head, function(st)
      local a, b = ratio(st.zkl, st[peer_zkl]), ratio(st.jit, st[peer_jit])
      if not a and not b then return "-" end
      return ("%s / %s"):format(num(a, 2), num(b, 2))
    end)
  end
  if SELECTED.zkl or SELECTED.jit then
    if opt.baseline then pair("new÷base", "bzkl", "bjit") end
    if SELECTED.raw then pair("zklock÷raw", "raw", "raw") end
    if SELECTED.cur then pair("zklock÷Curator", "cur", "cur") end
    if SELECTED.kaz then pair("zklock÷Kazoo", "kaz", "kaz") end
  end
end

local lines = {}
local function emit(s) lines[#lines + 1] = s end
do
  local head, rule = { "workload and metric" }, { "---" }
  for _, c in ipairs(COLS) do head[#head + 1] = c.head; rule[#rule + 1] = "---:" end
  emit("| " .. table.concat(head, " | ") .. " |")
  emit("| " .. table.concat(rule, " | ") .. " |")
end
local S_ = {}
for _, row in ipairs(ROWS) do
  local st = { raw = raw_stat(row) }
  local any = st.raw ~= nil and SELECTED.raw and not row.raw_min -- raw_min rows: a CPU floor, not a run of their own
  for _, c in ipairs(CONTENDERS) do
    if c.id ~= "raw" then
      st[c.id] = stat(row[1], c.id, row[2], row.scale)
      any = any or st[c.id] ~= nil
    end
  end
  S_[row[1] .. "." .. row[2]] = st
  if any then
    local out = { row[3] }
    for _, c in ipairs(COLS) do out[#out + 1] = c.f(st, row) end
    emit("| " .. table.concat(out, " | ") .. " |")
  end
end
local table_md = table.concat(lines, "\n")

-- The plot's cells: every client CPU row (cpu_us_per), per runtime, median, min and max; `ref` = 1
-- when the raw value is a reference (the raw create+delete or pipelined run the row names), not
-- a run of the same workload.
local PLOT = { { "raw", "raw C" }, { "zkl", "zklock 5.4" }, { "jit", "zklock LuaJIT" }, { "cur", "Curator 5.4" },
               { "kaz", "Kazoo 2.8" } }
local cpu_tsv
do
  local t = { "workload\truntime\tmedian\tmin\tmax\tref" }
  for _, row in ipairs(ROWS) do
    local st = S_[row[1] .. "." .. row[2]]
    if row[2] == "cpu_us_per" and st and (st.zkl or st.jit) then
      local label = row[3]:gsub("^%d+%.%s+", ""):gsub("[:,]? client CPU µs/op", "")
        :gsub(": client CPU µs/handoff in the drain", ", per handoff in the drain")
        :gsub(": client CPU µs/handoff", ", per handoff")
      for _, p in ipairs(PLOT) do
        local v = st[p[1]]
        if v and SELECTED[p[1]] then
          t[#t + 1] = ("%s\t%s\t%.3f\t%.3f\t%.3f\t%d"):format(label, p[2], v.med, v.min, v.max,
            (p[1] == "raw" and row.raw_from) and 1 or 0)
        end
      end
    end
  end
  if #t > 1 then cpu_tsv = table.concat(t, "\n") .. "\n" end
end

-- OpenResty: the three locations of one nginx per run (bench/drivers/openresty_bench.lua)
local openresty_md
if results.http and results.http.ngx and #results.http.ngx > 0 then
  local L = { { "free", "no lock (the same work)" },
              { "lock", "a mutex per request (one per connection: uncontended)" },
              { "shared", "one mutex for every request of both workers (contended)" } }
  local o = { "| location | requests/s | p50 latency, ms | p99 latency, ms | nginx workers' CPU µs/request "
    .. "| requests/s ÷ no lock (per run) |", "| --- | ---: | ---: | ---: | ---: | ---: |" }
  for _, l in ipairs(L) do
    local k = l[1]
    local rate = stat("http", "ngx", k .. "_rate")
    if rate then
      local q = k ~= "free" and stat("http", "ngx", k .. "_ratio") or nil
      o[#o + 1] = ("| `/%s`: %s | %s | %s | %s | %s | %s |"):format(k, l[2], cell(rate),
        cell(stat("http", "ngx", k .. "_p50_us", 1e-3)), cell(stat("http", "ngx", k .. "_p99_us", 1e-3)),
        cell(stat("http", "ngx", k .. "_cpu_us_per")), k == "free" and "1" or cell(q, 3))
    end
  end
  local lc, fc = stat("http", "ngx", "lock_cpu_us_per"), stat("http", "ngx", "free_cpu_us_per")
  openresty_md = table.concat(o, "\n") .. "\n\n" .. ("nginx 2 workers (a zklock client each, "
    .. "`zklock.adapters.openresty`, zklock.core from bench/out/build-jit), loaded by `wrk -t1 -c16` for %g s per "
    .. "location after 1 s of warm-up, the three locations back to back in one nginx, their order rotating "
    .. "per round. CPU: utime + stime of the worker processes over the measured run. The mutex adds %s µs "
    .. "of worker CPU per request (medians)."):format(S and 1 or 5, num(lc and fc and lc.med - fc.med))
end

---------------------------------------------------------------- baseline comparison

-- For each row where both the current tree and the baseline have numbers, per flavour: the ratio
-- of the medians new/base, the baseline's own spread on the same scale (its min and max over its
-- median), and the verdict: "slower beyond spread" when the new median is below the baseline's
-- minimum (rates: higher is better) or above its maximum (latencies, counts, memory, times: lower
-- is better), else "within spread". A baseline with a single run has no spread to judge by.
local HIGHER_BETTER = { rate = true, handoff_rate = true, acquired = true }
local compare_md, verdicts_md
if opt.baseline then
  local cmp_lines, per_case, case_order = {}, {}, {}
  local function add(s) cmp_lines[#cmp_lines + 1] = s end
  add("| workload and metric | better | zklock 5.4 | zklock-base 5.4 | new÷base 5.4 (base spread) | paired 5.4 "
    .. "| verdict 5.4 | zklock LuaJIT | zklock-base LuaJIT | new÷base LuaJIT (base spread) | paired LuaJIT "
    .. "| verdict LuaJIT |")
  add("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |")
  -- compared at the precision the table shows (3.97 is not "above" 3.97: counts such as requests
  -- per acquisition wobble in the fourth digit with the contention, which is no slowdown)
  local function judge(new, base, higher, digits)
    if not new or not base then return nil end
    if base.n < 2 then return "one run: no spread" end
    local function shown(x) return tonumber(num(x, digits)) end
    if higher then return shown(new.med) < shown(base.min) and "slower beyond spread" or "within spread" end
    return shown(new.med) > shown(base.max) and "slower beyond spread" or "within spread"
  end
  -- the same round's new and base runs ran back to back: their ratios, min-max over the rounds
  local function paired(row, new_id, base_id)
    local by_round = {}
    for _, r in ipairs(((results[row[1]] or {})[base_id]) or {}) do
      if type(r[row[2]]) == "number" then by_round[r._round] = r[row[2]] end
    end
    local mn, mx, n = math.huge, -math.huge, 0
    for _, r in ipairs(((results[row[1]] or {})[new_id]) or {}) do
      local b = by_round[r._round]
      if b and b ~= 0 and type(r[row[2]]) == "number" then
        local q = r[row[2]] / b
        mn, mx, n = math.min(mn, q), math.max(mx, q), n + 1
      end
    end
    if n < 2 then return "-" end
    return ("%s–%s"):format(num(mn, 2), num(mx, 2))
  end
  local function rcell(new, base)
    if not new or not base or base.med == 0 then return "-" end
    local r = num(new.med / base.med, 2)
    if base.n < 2 then return r end
    return ("%s (%s–%s)"):format(r, num(base.min / base.med, 2), num(base.max / base.med, 2))
  end
  for _, row in ipairs(ROWS) do
    local st = S_[row[1] .. "." .. row[2]]
    if st and ((st.zkl and st.bzkl) or (st.jit and st.bjit)) then
      local higher = HIGHER_BETTER[row[2]] or false
      local v54, vjit = judge(st.zkl, st.bzkl, higher, row.digits), judge(st.jit, st.bjit, higher, row.digits)
      add(("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(row[3],
        higher and "higher" or "lower",
        cell(st.zkl, row.digits), cell(st.bzkl, row.digits), rcell(st.zkl, st.bzkl), paired(row, "zkl", "bzkl"),
        v54 or "-", cell(st.jit, row.digits), cell(st.bjit, row.digits), rcell(st.jit, st.bjit),
        paired(row, "jit", "bjit"), vjit or "-"))
      local pc = per_case[row[1]]
      if not pc then
        pc = { ["5.4"] = {}, LuaJIT = {} }
        per_case[row[1]] = pc
        case_order[#case_order + 1] = row[1]
      end
      for fl, v in pairs({ ["5.4"] = v54, LuaJIT = vjit }) do
        local new, base = fl == "5.4" and st.zkl or st.jit, fl == "5.4" and st.bzkl or st.bjit
        pc[fl].seen = pc[fl].seen or v ~= nil
        if v == "slower beyond spread" then
          pc[fl].slower = pc[fl].slower or {}
          local metric = row[3]:gsub("^%d+%.%s+", "")
          table.insert(pc[fl].slower, ("%s %s× base"):format(metric, num(new.med / base.med, 2)))
        elseif v == "one run: no spread" then
          pc[fl].single = true
        end
      end
    end
  end
  compare_md = table.concat(cmp_lines, "\n")
  local titles = {}
  for _, c in ipairs(CASES) do titles[c.id] = titles[c.id] or c.title:gsub(", Lua 5%.4$", "") end
  local vl = {}
  for _, id in ipairs(case_order) do
    local parts = {}
    for _, fl in ipairs({ "5.4", "LuaJIT" }) do
      local pc = per_case[id][fl]
      local w
      if not pc.seen then w = "not run"
      elseif pc.slower then w = "slower beyond spread (" .. table.concat(pc.slower, "; ") .. ")"
      elseif pc.single then w = "one run: no spread"
      else w = "within spread" end
      parts[#parts + 1] = ("%s %s"):format(fl == "5.4" and "Lua 5.4" or "LuaJIT", w)
    end
    vl[#vl + 1] = ("- %s (`%s`): %s"):format(titles[id] or id, id, table.concat(parts, "; "))
  end
  verdicts_md = table.concat(vl, "\n")
end

---------------------------------------------------------------- targets

local targets = {}
local function target(name, ok54, okjit, detail)
  local function word(ok) if ok == nil then return "n/a" end return ok and "met" or "MISSED" end
  targets[#targets + 1] = ("| %s | %s | %s | %s |"):format(name, word(ok54), word(okjit), detail)
end
local function med(key, cid) local s = S_[key] and S_[key][cid]; return s and s.med end
local function cmp(a, op, b)
  if a == nil or b == nil then return nil end
  if op == ">=" then return a >= b elseif op == "<=" then return a <= b elseif op == "<" then return a < b
  elseif op == ">" then return a > b else return a == b end
end
local function f2(x) return x and ("%.2f"):format(x) or "-" end
local function f3(x) return x and ("%.3f"):format(x) or "-" end
do
  local raw = med("unc.rate", "raw")
  local z, j, c = med("unc.rate", "zkl"), med("unc.rate", "jit"), med("unc.rate", "cur")
  target("uncontended cycle >= 0.98x raw one-at-a-time create+delete (cycles/s)",
    cmp(z, ">=", raw and 0.98 * raw), cmp(j, ">=", raw and 0.98 * raw),
    ("%s / %s x raw"):format(f2(z and raw and z / raw), f2(j and raw and j / raw)))
  local zp, jp, cp_ = med("unc.p50_us", "zkl"), med("unc.p50_us", "jit"), med("unc.p50_us", "cur")
  target("uncontended cycle faster than Curator (p50 latency)", cmp(zp, "<", cp_), cmp(jp, "<", cp_),
    ("p50 %s / %s µs vs Curator %s µs; cycles/s %s / %s x Curator"):format(num(zp), num(jp), num(cp_),
      f2(z and c and z / c), f2(j and c and j / c)))
  local rc, zc, jc = med("unc.cpu_us_per", "raw"), med("unc.cpu_us_per", "zkl"), med("unc.cpu_us_per", "jit")
  target("uncontended cycle client CPU <= 1.5x raw create+delete (µs/op)",
    cmp(zc, "<=", rc and 1.5 * rc), cmp(jc, "<=", rc and 1.5 * rc),
    ("%s / %s µs vs raw %s µs: %s / %s x raw"):format(num(zc), num(jc), num(rc),
      f2(zc and rc and zc / rc), f2(jc and rc and jc / rc)))
end
do
  local c = med("c64.rate", "cur")
  local z, j = med("c64.rate", "zkl"), med("c64.rate", "jit")
  target("64 contenders on one lock >= 1.3x Curator acquisitions/s", cmp(z, ">=", c and 1.3 * c),
    cmp(j, ">=", c and 1.3 * c), ("%s / %s x Curator"):format(f2(z and c and z / c), f2(j and c and j / c)))
  local zr, jr = med("c64.req_per", "zkl"), med("c64.req_per", "jit")
  target("64 contenders: <= 4 ZooKeeper requests per acquisition", cmp(zr, "<=", 4.05), cmp(jr, "<=", 4.05),
    ("%s / %s (Curator %s, Kazoo %s)"):format(f2(zr), f2(jr), f2(med("c64.req_per", "cur")),
      f2(med("c64.req_per", "kaz"))))
end
do
  local best = S_["ind.rate"] and S_["ind.rate"].raw
  local b = best and best.med
  local z, j = med("ind.rate", "zkl"), med("ind.rate", "jit")
  local l = med("pipe1000l.rate", "raw")
  -- the spread of a contender's rounds, (max - min) / median, and the per-round ratios to the raw
  -- run of the same round (which ran a few seconds before or after it)
  local function spread(cid)
    local s = S_["ind.rate"] and S_["ind.rate"][cid]
    if not s or s.n < 2 then return "-" end
    return ("%.0f%%"):format((s.max - s.min) / s.med * 100)
  end
  local function paired(cid)
    local raw_of, q = {}, {}
    for _, r in ipairs(((results.ind or {}).raw) or {}) do raw_of[r._round] = r.rate end
    for _, r in ipairs(((results.ind or {})[cid]) or {}) do
      if raw_of[r._round] and type(r.rate) == "number" then q[#q + 1] = r.rate / raw_of[r._round] end
    end
    if #q == 0 then return "-" end
    table.sort(q)
    return ("%s (%s–%s)"):format(f2(median(q)), f2(q[1]), f2(q[#q]))
  end
  target("1,000 coroutines on 1,000 locks >= 0.65x (Lua 5.4) / 0.75x (LuaJIT) raw pipelined ceiling",
    cmp(z, ">=", b and 0.65 * b), cmp(j, ">=", b and 0.75 * b),
    ("%s / %s x raw pipelined 128 (%s cycles/s); per round, x that round's raw run: %s / %s; spread of "
      .. "the rounds (max-min)/median: %s / %s (raw %s); x raw create+list+delete 1000 in flight (%s cycles/s): "
      .. "%s / %s"):format(f2(z and b and z / b), f2(j and b and j / b), num(b),
      paired("zkl"), paired("jit"), spread("zkl"), spread("jit"), spread("raw"), num(l),
      f2(z and l and z / l), f2(j and l and j / l)))
end
do -- the 3-node ensemble: the three workloads against Curator (and the raw client)
  local function r(key, peer, cid) local a, b = med(key, cid), med(key, peer); return a and b and b > 0 and a / b end
  local ok = {}
  for _, cid in ipairs({ "zkl", "jit" }) do
    local a, b, c = r("e_unc.rate", "cur", cid), r("e_c64.rate", "cur", cid), r("e_ind.rate", "cur", cid)
    if a and b and c then ok[cid] = a > 1 and b > 1 and c > 1 end
  end
  local pipe = med("e_pipe.rate", "raw")
  target("3-node ensemble: faster than Curator on the uncontended, 64-contender and 1,000-lock workloads",
    ok.zkl, ok.jit, ("x Curator: uncontended %s / %s, 64 contenders %s / %s, 1,000 locks %s / %s; x raw: "
      .. "uncontended %s / %s, 1,000 locks %s / %s of pipelined 128 (%s cycles/s)"):format(
      f2(r("e_unc.rate", "cur", "zkl")), f2(r("e_unc.rate", "cur", "jit")),
      f2(r("e_c64.rate", "cur", "zkl")), f2(r("e_c64.rate", "cur", "jit")),
      f2(r("e_ind.rate", "cur", "zkl")), f2(r("e_ind.rate", "cur", "jit")),
      f2(r("e_unc.rate", "raw", "zkl")), f2(r("e_unc.rate", "raw", "jit")),
      f2(pipe and med("e_ind.rate", "zkl") and med("e_ind.rate", "zkl") / pipe),
      f2(pipe and med("e_ind.rate", "jit") and med("e_ind.rate", "jit") / pipe), num(pipe)))
end
do
  local c = med("sem.rate", "cur")
  local z, j = med("sem.rate", "zkl"), med("sem.rate", "jit")
  target("semaphore (max 4, 16 contenders) >= 1.5x Curator", cmp(z, ">=", c and 1.5 * c), cmp(j, ">=", c and 1.5 * c),
    ("%s / %s x Curator"):format(f2(z and c and z / c), f2(j and c and j / c)))
  local zr, jr = med("sem.req_per", "zkl"), med("sem.req_per", "jit")
  target("semaphore: <= 7 requests per acquisition", cmp(zr, "<=", 7.05), cmp(jr, "<=", 7.05),
    ("%s / %s (Curator %s)"):format(f2(zr), f2(jr), f2(med("sem.req_per", "cur"))))
end
do
  local c = med("read.rate", "cur")
  local z, j = med("read.rate", "zkl"), med("read.rate", "jit")
  target("read lock, 8 readers >= 1.2x Curator", cmp(z, ">=", c and 1.2 * c), cmp(j, ">=", c and 1.2 * c),
    ("%s / %s x Curator"):format(f2(z and c and z / c), f2(j and c and j / c)))
end
do
  local z, j = med("h1000.rss_above_idle_kb", "zkl"), med("h1000.rss_above_idle_kb", "jit")
  target("1,000 waiting coroutines < 20 MiB RSS above an idle client", cmp(z, "<", 20), cmp(j, "<", 20),
    ("%s / %s MiB (Curator %s MiB with threads, Kazoo %s MiB)"):format(num(z), num(j),
      num(med("h1000.rss_above_idle_kb", "cur")), num(med("h1000.rss_above_idle_kb", "kaz"))))
end
do
  local z, j = med("h10k.acquired", "zkl"), med("h10k.acquired", "jit")
  local function verdict(v, cid)
    if failed_runs["h10k/" .. cid] then return false end -- a failed run is a miss, not "n/a"
    return cmp(v, "==", 10000)
  end
  target("10,000 waiters work", verdict(z, "zkl"), verdict(j, "jit"),
    ("%s / %s of 10000 acquired; drain %s / %s s"):format(num(z, 0), num(j, 0),
      num(med("h10k.handoff_secs", "zkl")), num(med("h10k.handoff_secs", "jit"))))
end
do
  local function one(cid)
    local ok, seen = true, false
    for _, k in ipairs({ "h100", "h1000", "h10k" }) do
      for _, v in ipairs(values(k, cid, "notif_per")) do
        seen = true
        if math.abs(v - 1) > 0.0015 then ok = false end
      end
    end
    if not seen then return nil end
    return ok
  end
  target("exactly one watch notification per mutex release, whatever the number of waiters",
    one("zkl"), one("jit"), ("100 waiters: %s / %s; 1000: %s / %s; 10,000: %s / %s"):format(
      f3(med("h100.notif_per", "zkl")), f3(med("h100.notif_per", "jit")), f3(med("h1000.notif_per", "zkl")),
      f3(med("h1000.notif_per", "jit")), f3(med("h10k.notif_per", "zkl")), f3(med("h10k.notif_per", "jit"))))
end
local targets_md = "| target | zklock 5.4 | zklock LuaJIT | measured (5.4 / LuaJIT) |\n| --- | --- | --- | --- |\n"
  .. table.concat(targets, "\n")

---------------------------------------------------------------- report

local function first_line(s) return (s or ""):match("[^\n]*") end
local cpu = sh("grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'")
local mem = sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
local facts = {
  "- machine: " .. sh("uname -srm") .. ", " .. sh("nproc") .. " cores (" .. cpu .. "), " .. mem .. " RAM; "
    .. sh("df -T /tmp | awk 'NR==2 {print $2}'") .. " under /tmp (ZooKeeper's data dir)",
  "- ZooKeeper server " .. tostring(server_info.version or "?"):match("^[^,-]*")
    .. " (Debian `zookeeper`), standalone, "
    .. "started by `zklock.testing` (tickTime 500 ms, containers checked every 60 s as in production, -Xmx256m; "
    .. "the 10,000-waiter runs each on a fresh server with -Xmx1g)"
    .. (opt.ensemble and "; the rows \"3-node ensemble\" on three members (QuorumPeerMain, same settings, "
      .. "each -Xmx256m) on the same 2 cores, every client given all three hosts" or ""),
  ("- server peak RSS: %s"):format((function()
    local parts = {}
    for _, g in ipairs({ "sync", "nosync", "big-zkl", "big-bzkl", "big-jit", "big-bjit", "ens" }) do
      local i = server_info[g]
      if i then parts[#parts + 1] = ("%s %.0f MiB%s"):format(g, i.peak_rss_mib, i.alive and "" or " (DIED)") end
    end
    return table.concat(parts, ", ")
  end)()),
  "- " .. first_line(sh("java -version 2>&1"))
    .. "; Curator " .. sh("ls /usr/share/java/curator-recipes-*.jar | sed 's/.*-//; s/.jar//'")
    .. " with ZooKeeper client " .. sh("ls /usr/share/java/zookeeper-3*.jar | sed 's/.*zookeeper-//; s/.jar//'"),
  "- " .. first_line(sh("lua5.4 -v")) .. "; " .. first_line(sh("luajit -v")),
  "- " .. sh("/usr/bin/python3 --version")
    .. ", Kazoo " .. sh("/usr/bin/python3 -c 'import kazoo.version as v; print(v.__version__)'"),
  "- libzookeeper_st " .. sh("dpkg-query -W -f='${Version}' libzookeeper-st2 2>/dev/null "
    .. "|| dpkg-query -W -f='${Version}' libzookeeper-st-dev"),
  ("- load average (1/5/15 min) %sat the start of the measurements %s, at the end %s: anything above what "
    .. "the benchmark itself adds (about 1.5) is someone else's work on the same 2 cores"):format(
    os.getenv("BENCH_LOAD_BEFORE") and ("before bench/run's builds " .. os.getenv("BENCH_LOAD_BEFORE") .. ", ") or "",
    load_start, load_end),
  "- zklock " .. sh("git rev-parse --short HEAD") .. " (" .. sh("git log -1 --format=%s HEAD") .. ")"
    .. (sh("git status --porcelain -- csrc lua CMakeLists.txt bench/bench.lua bench/drivers bench/tools") ~= ""
      and " with uncommitted changes in csrc/, lua/ or the benchmark's code" or ""),
}
if opt.baseline then
  local base_sha = sh("cat bench/out/base-build/.zkl-rev 2>/dev/null")
  facts[#facts + 1] = ("- baseline `%s`: %s, \"%s\" (its core.so built by bench/run in bench/out/base-build{,-jit} "
    .. "with the same options, its lua/ in bench/out/base-lua; the driver, bench/drivers/zklock_bench.lua, is "
    .. "the current tree's for both)"):format(opt.baseline, sh("git rev-parse --short " .. base_sha),
      sh("git log -1 --format=%s " .. base_sha))
end
if opt.cases then facts[#facts + 1] = "- cases: only " .. opt.cases end
if opt.only then
  facts[#facts + 1] = "- contenders: only " .. opt.only .. (opt.baseline and " (with the baseline's)" or "")
end
local header = {
  "# zklock benchmarks: results",
  "",
  ("Run on %s, %d round(s)%s, %.0f s in all."):format(os.date("!%Y-%m-%d %H:%M UTC"), opt.rounds,
    opt.smoke and " (SMOKE MODE: tiny sizes, numbers meaningless)" or "", elapsed),
  "",
  "Command: `" .. (os.getenv("BENCH_CMD") or "bench/run") .. "`",
  "",
  table.concat(facts, "\n"),
  "",
  "Cells: median over the rounds (min–max). Ratios: zklock's median over the peer's, Lua 5.4 / LuaJIT "
    .. "(for rates > 1 is better for zklock, for latencies and counts < 1 is). Requests and notifications "
    .. "are counted at the server (mntr `zk_packets_received` and `zk_sum_node_*_watch_count` deltas). "
    .. "Workloads with a duration run " .. secs .. " s each"
    .. (S and "." or " (the 1,000 locks 10 s, OpenResty 5 s per location)."),
  "",
}
local report = table.concat(header, "\n") .. "\n## Table\n\n" .. table_md .. "\n"
-- the plot of the client CPU rows, next to the report (drawn below, once the report is written)
local plot_png, plot_tsv
if opt.results and cpu_tsv then
  local stem = opt.results:gsub("%.md$", "")
  plot_png = stem .. "-cpu.png"
  plot_tsv = "bench/out/" .. (stem:match("[^/]+$") or stem) .. "-cpu.tsv"
  report = report .. "\n![Client CPU per operation by workload and runtime](" .. (plot_png:match("[^/]+$") or plot_png)
    .. ")\n\nThe client CPU rows above as a plot (`" .. plot_png .. "`, drawn by `bench/tools/plot_cpu.py` from "
    .. "`" .. plot_tsv .. "`): bars are medians, whiskers min–max of the rounds, hatched raw bars the raw "
    .. "reference the row names.\n"
  local tf = assert(io.open(plot_tsv, "w"))
  tf:write(cpu_tsv)
  tf:close()
  local out = sh(("/usr/bin/python3 bench/tools/plot_cpu.py %s -o %s"):format(testing.shq(plot_tsv),
    testing.shq(plot_png)) .. "; echo exit=$?")
  if out:match("exit=(%d+)$") == "0" then
    log("wrote %s", plot_png)
  else
    failures[#failures + 1] = "the plot (bench/tools/plot_cpu.py): " .. out
    log("FAILED: the plot: %s", out)
  end
end
if compare_md then
  report = report .. "\n## Current tree vs baseline " .. opt.baseline .. "\n\n"
    .. "Both run in the same rounds against the same server, each new run next to its baseline run (which goes "
    .. "first alternates per round). new÷base: ratio of the medians; in parentheses the baseline's own "
    .. "min and max over its median (its run-to-run spread on the same scale). Verdict: \"slower beyond spread\" "
    .. "when the new median is below the baseline's min (rates, higher is better) or above its max (latencies, "
    .. "requests, notifications, memory, times: lower is better), else \"within spread\". Paired: the "
    .. "min–max over the rounds of new÷base within a round (the two ran back to back), for a second look at "
    .. "noisy rows; the verdict does not use it.\n\n"
    .. compare_md .. "\n\nPer workload:\n\n" .. verdicts_md .. "\n"
end
if openresty_md then
  report = report .. "\n## OpenResty: per-request overhead of a mutex\n\n" .. openresty_md .. "\n"
end
report = report .. "\n## Targets\n\n" .. targets_md .. "\n"
if #failures > 0 then
  report = report .. "\n## Failed runs\n\n```\n" .. table.concat(failures, "\n") .. "\n```\n"
end

print(table_md)
print()
if compare_md then
  print(compare_md)
  print()
  print(verdicts_md)
  print()
end
print(targets_md)
if opt.results then
  -- keep the hand-written analysis below the marker of an existing file
  local MARK = "<!-- analysis: kept by bench/run -->"
  local keep = ""
  local f = io.open(opt.results)
  if f then
    local old = f:read("*a")
    f:close()
    local at = old:find(MARK, 1, true)
    if at then keep = "\n" .. old:sub(at) end
  end
  f = assert(io.open(opt.results, "w"))
  f:write(report, keep)
  f:close()
  log("wrote %s", opt.results)
end
if #failures > 0 then
  log("%d driver run(s) failed", #failures)
  os.exit(1)
end
