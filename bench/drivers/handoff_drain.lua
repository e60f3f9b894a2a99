-- bench/drivers/handoff_drain.lua - handoff cost against queue length, across processes.
--
-- One holder takes a mutex; W worker processes (own clients, own sessions) queue N waiters
-- behind it between them, in small batches, so that their nodes interleave in the queue; once
-- every waiter is queued and watching, the holder releases and the queue drains: every waiter
-- takes the lock once and releases it. Measured over the drain only:
--   handoffs/s   N / (time from the release to the last worker's last acquisition)
--   bytes/handoff  bytes the workers' sockets received during the drain (tcp_info bytes_received
--                of each worker's own connection, read through ss(8) by the worker itself before
--                and after), divided by N
--   lists, gets  the core's own request counters over the drain, per handoff
-- Each build runs in its own worker processes; builds alternate within each size.
--
--   lua5.4 bench/drivers/handoff_drain.lua [--sizes 100,1000,10000] [--workers 4] [--batch 10]
--       [--build NAME=BUILD_DIR[:LUA_DIR] ...] [--curator] [--kazoo] [--peer-sizes 100,1000]
--       [--rounds R] [--nosync] [--tsv FILE] [--smoke]
--   (from the repository root; default build: zklock=bench/out/build with lua/)
-- --curator, --kazoo: Curator 5.4 (InterProcessMutex, bench/drivers/HandoffCurator.java, a thread
-- per waiter) and Kazoo 2.8 (Lock, bench/drivers/handoff_kazoo.py) as contenders too, in worker
-- processes of their own with the same protocol, at --peer-sizes only (default 100,1000: a
-- thread per waiter). They keep no request counters: their lists and getData show "-".
-- Output: a Markdown table on stdout (and progress on stderr); --tsv FILE also writes the cells
-- as tab-separated values (contender, waiters, handoffs/s, bytes/handoff, lists, gets, drain s)
-- for bench/tools/plot_handoff.py.
-- Worker mode (run by the above): handoff_drain.lua worker HOSTS PATH N BATCH STATEFILE
local mode = arg[1]

-- Bytes this process's TCP sockets to the server have received (the kernel's tcp_info
-- bytes_received, through ss(8)): the client side, every reply and notification counted, even
-- those the ZooKeeper client reads with recv(), which /proc/<pid>/io's rchar leaves out.
local function received(port)
  if not os.execute("command -v ss >/dev/null 2>&1") then return -1 end -- no iproute2: not measured
  local f = io.open("/proc/self/stat", "r")
  local pid = f and f:read("a"):match("^(%d+)")
  if f then f:close() end
  local p = io.popen(("ss -tinpH state established '( dport = :%d )' 2>/dev/null"):format(port))
  local total, mine = 0, false
  for line in p:lines() do
    if line:match("^%S") then
      mine = pid ~= nil and line:find("pid=" .. pid .. ",", 1, true) ~= nil
    elseif mine then
      total = total + (tonumber(line:match("bytes_received:(%d+)")) or 0)
    end
  end
  p:close()
  return total
end

if mode == "worker" then
  local build = os.getenv("ZKL_BUILD") or "bench/out/build"
  local luadir = os.getenv("ZKL_LUA_DIR") or "lua"
  package.path = luadir .. "/?.lua;" .. luadir .. "/?/init.lua;" .. package.path
  package.cpath = build .. "/?.so;" .. package.cpath
  local zklock = require("zklock")
  local core = require("zklock.core")
  local hosts, path, n, batch, state = arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5]), arg[6]
  local c = assert(zklock.connect(hosts, { session_timeout = 30 }))
  local m = c:mutex(path)
  local done, last_acquired = 0, 0
  local function gets() return c:stats().gets end
  local g0 = gets()
  local queued = 0
  local limit = core.now() + 600000 -- bounded: 10 minutes
  while queued < n do -- a batch, then wait until each of its waiters watches its predecessor
    local b = math.min(batch, n - queued)
    for _ = 1, b do
      c:spawn(function()
        assert(m:acquire(1200))
        done = done + 1
        last_acquired = core.now() -- the drain ends at the last acquisition (as the peers' workers count)
        m:release()
      end)
    end
    queued = queued + b
    while gets() - g0 < queued do
      assert(core.now() < limit, "waiters did not queue in time")
      c:sleep(0.001)
    end
  end
  c:sleep(0.3) -- the last watches set
  local s0 = c:stats()
  local port = tonumber(hosts:match(":(%d+)$"))
  local r0 = received(port)
  local f = assert(io.open(state .. ".ready", "w"))
  f:write("ready\n")
  f:close()
  assert(c:run(1200))
  local t_end = last_acquired
  local r1 = received(port)
  local s1 = c:stats()
  f = assert(io.open(state .. ".tmp", "w"))
  local bytes = (r0 < 0 or r1 < 0) and -1 or r1 - r0
  f:write(("%.3f %d %d %d %d\n"):format(t_end, bytes, done, s1.lists - s0.lists, s1.gets - s0.gets))
  f:close()
  os.rename(state .. ".tmp", state .. ".done")
  c:close()
  os.exit(0)
end

-- ------------------------------------------------------------------ coordinator
local sizes, workers, batch, rounds, builds, smoke, nosync = { 100, 1000, 10000 }, 4, 10, 1, {}, false, false
local peers, peer_sizes, tsv = {}, { [100] = true, [1000] = true }, nil
do
  local i = 1
  while i <= #arg do
    local a, v = arg[i], arg[i + 1]
    if a == "--sizes" then
      sizes = {}
      for s in v:gmatch("%d+") do sizes[#sizes + 1] = tonumber(s) end
      i = i + 1
    elseif a == "--workers" then workers = assert(tonumber(v)); i = i + 1
    elseif a == "--batch" then batch = assert(tonumber(v)); i = i + 1
    elseif a == "--rounds" then rounds = assert(tonumber(v)); i = i + 1
    elseif a == "--build" then
      local name, dir, lua = v:match("^([^=]+)=([^:]+):?(.*)$")
      assert(name, "--build NAME=BUILD_DIR[:LUA_DIR]")
      builds[#builds + 1] = { name = name, build = dir, lua = lua ~= "" and lua or "lua" }
      i = i + 1
    elseif a == "--curator" then peers[#peers + 1] = { name = "Curator 5.4", kind = "curator" }
    elseif a == "--kazoo" then peers[#peers + 1] = { name = "Kazoo 2.8", kind = "kazoo" }
    elseif a == "--peer-sizes" then
      peer_sizes = {}
      for s in v:gmatch("%d+") do peer_sizes[tonumber(s)] = true end
      i = i + 1
    elseif a == "--tsv" then tsv = assert(v, "--tsv FILE"); i = i + 1
    elseif a == "--smoke" then smoke = true
    elseif a == "--nosync" then nosync = true
    else error("unknown argument " .. a, 0) end
    i = i + 1
  end
end
if smoke then sizes, workers, batch = { 20 }, 2, 5 end
if #builds == 0 then
  builds = { { name = "zklock", build = os.getenv("ZKL_BUILD") or "bench/out/build", lua = "lua" } }
end
for _, p in ipairs(peers) do builds[#builds + 1] = p end
-- the coordinator itself (holder, server harness) runs on the current tree's Lua and the first build
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = builds[1].build .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local core = require("zklock.core")

local function log(fmt, ...) io.stderr:write(("[handoff] " .. fmt .. "\n"):format(...)) end
local function exists(p) local f = io.open(p, "r"); if f then f:close() return true end return false end
local function shq(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Curator's worker is compiled here, once (bench/out/java-handoff, git-ignored)
local CURATOR_CP
for _, p in ipairs(peers) do
  if p.kind == "curator" then
    local jars = {}
    for _, j in ipairs({ "curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute",
                         "guava", "slf4j-api", "slf4j-nop" }) do jars[#jars + 1] = "/usr/share/java/" .. j .. ".jar" end
    CURATOR_CP = "bench/out/java-handoff:" .. table.concat(jars, ":")
    assert(os.execute("mkdir -p bench/out/java-handoff && javac -nowarn -d bench/out/java-handoff -cp "
      .. table.concat(jars, ":") .. " bench/drivers/HandoffCurator.java"), "javac HandoffCurator.java failed")
  end
end

local tmp = os.tmpname()
os.remove(tmp)
assert(os.execute("mkdir -p " .. shq(tmp)))
-- 1 GiB heap: listings of a 10,000-node queue (see bench.lua's h10k case)
local zk = testing.server{ jvm_opts = { "-Xmx1g" }, config = nosync and { forceSync = "no" } or nil }
local ok, err = pcall(function()
  local c = assert(zklock.connect(zk.hosts, { session_timeout = 30 }))
  local results = {}
  local run_id = 0
  local function run(b, n)
    run_id = run_id + 1
    local path = ("/drain/r%d"):format(run_id)
    local m = c:mutex(path)
    assert(m:acquire(30))
    local per = {}
    for w = 1, workers do per[w] = n // workers + (w <= n % workers and 1 or 0) end
    local states = {}
    for w = 1, workers do
      states[w] = ("%s/r%d-w%d"):format(tmp, run_id, w)
      local prog
      if b.kind == "curator" then
        prog = ("java -Xss256k -Xmx512m -cp %s HandoffCurator"):format(shq(CURATOR_CP))
      elseif b.kind == "kazoo" then
        prog = "/usr/bin/python3 bench/drivers/handoff_kazoo.py"
      else
        prog = ("ZKL_BUILD=%s ZKL_LUA_DIR=%s lua5.4 bench/drivers/handoff_drain.lua worker"):format(shq(b.build),
          shq(b.lua))
      end
      local cmd = ("%s %s %s %d %d %s >%s.log 2>&1 &"):format(prog, shq(zk.hosts), path, per[w], batch,
        shq(states[w]), shq(states[w]))
      assert(os.execute(cmd))
    end
    local limit = core.now() + 900000
    local function wait_files(suffix)
      for w = 1, workers do
        while not exists(states[w] .. suffix) do
          local f = io.open(states[w] .. ".log")
          local out = f and f:read("a") or ""
          if f then f:close() end
          if out ~= "" or core.now() > limit then -- a worker prints nothing unless it failed
            error(("worker %d: no %s: %s"):format(w, suffix, out ~= "" and out or "timed out"), 0)
          end
          c:sleep(0.05)
        end
      end
    end
    wait_files(".ready")
    local kids = assert(c:children(path))
    if b.kind then -- a peer's worker cannot tell its own nodes: wait for all of them here
      local until_ms = core.now() + 60000
      while #kids < n + 1 and core.now() < until_ms do
        c:sleep(0.05)
        kids = assert(c:children(path))
      end
      c:sleep(0.5) -- their watches set
    end
    assert(#kids == n + 1, ("%d waiters queued, %d expected"):format(#kids - 1, n))
    local t0 = core.now()
    assert(m:release())
    wait_files(".done")
    local t_end, bytes, done, lists, gets = 0, 0, 0, 0, 0
    for w = 1, workers do
      local f = assert(io.open(states[w] .. ".done"))
      local a, b2, d, l, g = f:read("n", "n", "n", "n", "n")
      f:close()
      t_end = math.max(t_end, a)
      bytes = (bytes < 0 or b2 < 0) and -1 or bytes + b2
      done, lists, gets = done + d, lists + l, gets + g
    end
    assert(done == n, ("%d acquisitions of %d"):format(done, n))
    local secs = math.max(t_end - t0, 1) / 1000
    -- bytes < 0: ss(8) missing, not measured (NaN prints as such in the table)
    local r = { rate = n / secs, bytes = bytes < 0 and 0 / 0 or bytes / n,
      lists = lists < 0 and 0 / 0 or lists / n, gets = gets < 0 and 0 / 0 or gets / n, secs = secs }
    log("%-6s n=%-6d %8.0f handoffs/s %10.0f bytes/handoff  lists %.3f gets %.2f per handoff  %.2f s",
      b.name, n, r.rate, r.bytes, r.lists, r.gets, secs)
    c:delete(path) -- may be reaped already (a container)
    return r
  end
  for _, n in ipairs(sizes) do
    for round = 1, rounds do
      local order = {}
      for i = 1, #builds do order[i] = builds[(i + round - 2) % #builds + 1] end -- alternate
      for _, b in ipairs(order) do
        if b.kind and not peer_sizes[n] then goto skip end
        results[b.name] = results[b.name] or {}
        results[b.name][n] = results[b.name][n] or {}
        table.insert(results[b.name][n], run(b, n))
        ::skip::
      end
    end
  end
  c:close()
  -- the median round of each cell
  local function med(list, k)
    local v = {}
    for i, r in ipairs(list) do
      if r[k] ~= r[k] then return r[k] end -- NaN: not measured
      v[i] = r[k]
    end
    table.sort(v)
    return v[(#v + 1) // 2]
  end
  print(("Waiters over %d processes (queued in batches of %d per process), server forceSync=%s, %d round(s), median:")
    :format(workers, batch, nosync and "no" or "yes", rounds))
  print("")
  print("| contender | waiters | handoffs/s | bytes received / handoff | lists / handoff | getData / handoff "
    .. "| drain, s |")
  print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
  local function shown(x, f) return x ~= x and "-" or f:format(x) end
  local out = tsv and assert(io.open(tsv, "w"))
  if out then out:write("contender\twaiters\thandoffs_per_s\tbytes_per_handoff\tlists\tgets\tdrain_s\n") end
  for _, b in ipairs(builds) do
    for _, n in ipairs(sizes) do
      local l = results[b.name] and results[b.name][n]
      if l then
        print(("| %s | %d | %.0f | %s | %s | %s | %.2f |"):format(b.name, n, med(l, "rate"),
          shown(med(l, "bytes"), "%.0f"), shown(med(l, "lists"), "%.3f"), shown(med(l, "gets"), "%.2f"),
          med(l, "secs")))
        if out then
          out:write(("%s\t%d\t%.1f\t%s\t%s\t%s\t%.3f\n"):format(b.name, n, med(l, "rate"),
            shown(med(l, "bytes"), "%.1f"), shown(med(l, "lists"), "%.4f"), shown(med(l, "gets"), "%.3f"),
            med(l, "secs")))
        end
      end
    end
  end
  if out then out:close() end
end)
zk:stop()
os.execute("rm -rf " .. shq(tmp))
if not ok then
  io.stderr:write("handoff_drain: ", tostring(err), "\n")
  os.exit(1)
end
