-- bench/tools/cache_cost.lua - what a cache of a tree costs: zklock's client:cache against
-- Curator 5.4's CuratorCache and TreeCache (bench/drivers/CacheCurator.java), on one local
-- ZooKeeper server, for trees of 100, 1,000 and 10,000 nodes (a root, parents of up to 100 leaves
-- each), ROUNDS rounds (the contenders' order rotates every round; a fresh tree for each run,
-- deleted after it), each cell the median of the rounds with (min-max):
--   * watches held at the server once loaded (mntr zk_watch_count delta);
--   * the first load: ms to the initialized event, requests (mntr zk_packets_received delta: the
--     connection's setup and pings included) and bytes both ways (the kit's fault proxy between
--     the cache's client and the server counts them);
--   * per change: K sets of random leaves by a writer on its own direct connection, each waited
--     for in the cache before the next: the cache side's requests (server packets less the
--     writer's) and bytes per change, and the median ms from the set's answer to the cache's event;
--   * after a restart (kill -9, start again; the sessions survive): ms from the server being up
--     (`ruok` answers) to the writer's own client being connected again (no watches, no cache: the
--     floor the server's readiness and the C client's retries set), to the cache showing a value
--     the writer wrote then, and for zklock also to its `initialized` (the resync).
--
--   lua5.4 bench/tools/cache_cost.lua [SIZES=100,1000,10000] [K=100] [ROUNDS=3]   (from the repository root)
--   ZKL_BUILD=build lua5.4 bench/tools/cache_cost.lua
-- Needs javac/java and Debian's libcurator-recipes-java; compiles the driver into a temp dir.
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = (os.getenv("ZKL_BUILD") or "build") .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")

local SIZES = {}
for n in (arg[1] or "100,1000,10000"):gmatch("%d+") do SIZES[#SIZES + 1] = tonumber(n) end
local K = tonumber(arg[2] or 100)
local ROUNDS = tonumber(arg[3] or 3)

local shq, sh = testing.shq, testing.sh
local J = "/usr/share/java"
local CP = table.concat({ J .. "/curator-recipes.jar", J .. "/curator-framework.jar", J .. "/curator-client.jar",
  J .. "/zookeeper.jar", J .. "/zookeeper-jute.jar", J .. "/guava.jar", J .. "/slf4j-api.jar",
  J .. "/slf4j-nop.jar" }, ":")
local TMP = (sh("mktemp -d /tmp/zklock-cache-bench.XXXXXXXX"):gsub("%s+$", ""))
local out = sh(("javac -nowarn -d %s -cp %s bench/drivers/CacheCurator.java 2>&1; echo rc=$?")
  :format(shq(TMP), shq(CP)))
assert(out:match("rc=0%s*$"), "javac failed: " .. out)

local zk = testing.server{ jvm_opts = { "-Xmx1024m" } }
local w = assert(zklock.connect(zk.hosts, { session_timeout = 30, op_timeout = 30 }))
local function now() return core.now() end
local function packets() return util.mntr(zk, "zk_packets_received") end
local function watches() return util.mntr(zk, "zk_watch_count") end
local function bytes(net)
  local s = net:status()
  return (s.c2s or 0) + (s.s2c or 0)
end

-- a tree of n nodes under root: the root, ceil((n-1)/101) parents, leaves up to n
local function build(root, n)
  local leaves = {}
  local t = w:transaction()
  local queued, made = 0, 0
  local function add(path, leaf)
    t:create(path, "0")
    queued, made = queued + 1, made + 1
    if leaf then leaves[#leaves + 1] = path end
    if queued == 500 then assert(t:commit()); t = w:transaction(); queued = 0 end
  end
  assert(w:create(root, "0", { parents = true }))
  made = 1
  local p = 0
  while made < n do
    p = p + 1
    local parent = ("%s/p%03d"):format(root, p)
    add(parent)
    for i = 1, 100 do
      if made >= n then break end
      add(("%s/l%03d"):format(parent, i), true)
    end
  end
  if queued > 0 then assert(t:commit()) end
  return leaves
end

local seed = 12345
local function rnd(n)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n + 1
end

local function median(list)
  table.sort(list)
  return list[math.ceil(#list / 2)] or 0
end

-- delete root's tree (a root, parents, leaves), leaves first, 500 deletes a transaction
local function destroy(root)
  local t, queued = w:transaction(), 0
  local function del(path)
    t:delete(path)
    queued = queued + 1
    if queued == 500 then assert(t:commit()); t = w:transaction(); queued = 0 end
  end
  local parents = assert(w:children(root))
  table.sort(parents)
  for _, p in ipairs(parents) do
    local path = root .. "/" .. p
    for _, l in ipairs(assert(w:children(path))) do del(path .. "/" .. l) end
    del(path)
  end
  if queued > 0 then assert(t:commit()) end
  assert(w:delete(root))
end

-- The contenders: start(net, root) -> handle with :seen(path, value) -> bool, :initialized_count(),
-- :init_ms(), :close(); `drive(s)` pumps what needs pumping.
local contenders = {}

contenders.zklock = function(net, root)
  local c = assert(zklock.connect(net.hosts, { session_timeout = 30 }))
  local h = { inits = 0 }
  local t0 = now()
  h.cache = c:cache(root, { max_nodes = 1000000 })
  h.cache:on_change(function(event)
    if event == "initialized" then
      h.inits = h.inits + 1
      if h.inits == 1 then h.init = now() - t0 end
    end
  end)
  function h.drive(s) util.drive({ c, w }, s) end
  function h.ready() return h.init ~= nil end
  function h.seen(path, value) return (h.cache:get(path)) == value end
  function h.close() h.cache:close(); c:close() end
  return h
end

local function curator(kind, net, root)
  local log = TMP .. "/" .. kind .. "-" .. root:gsub("/", "_") .. ".log"
  local h = { seen_at = {} }
  sh(("env -u LD_PRELOAD java -Xmx512m -XX:+UseSerialGC -cp %s CacheCurator %s %s %s 600 %s >%s 2>&1 &"):format(
    shq(TMP .. ":" .. CP), shq(net.hosts), shq(root), shq(log), kind, shq(log .. ".out")))
  local pos = 1
  local function poll()
    local f = io.open(log)
    if not f then return end
    f:seek("set", pos - 1)
    local text = f:read("*a")
    f:close()
    local last = text:match(".*\n()")
    if not last then return end
    pos = pos + last - 1
    for line in text:sub(1, last - 1):gmatch("[^\n]+") do
      local ms = line:match("^init (%d+)")
      if ms then h.init = tonumber(ms) end
      local path, value = line:match("^chg %S+ (%S+) ?(.*)$")
      if path then h.seen_at[path .. "\0" .. value] = true end
    end
  end
  function h.drive(s) util.drive({ w }, s); poll() end
  function h.ready() return h.init ~= nil end
  function h.seen(path, value) return h.seen_at[path .. "\0" .. value] == true end
  function h.close()
    sh("touch " .. shq(log .. ".stop"))
    for _ = 1, 200 do
      poll()
      local f = io.open(log)
      local all = f and f:read("*a") or ""
      if f then f:close() end
      if all:find("\ndone\n", 1, true) or all:match("^done\n") then break end
      testing.sleep(0.05)
    end
  end
  return h
end
contenders.curator = function(net, root) return curator("curator", net, root) end
contenders.treecache = function(net, root) return curator("treecache", net, root) end
local NAMES = { "zklock", "curator", "treecache" }

local rows = {}
local function row(...)
  rows[#rows + 1] = ("| " .. table.concat({ ... }, " | ") .. " |")
  io.stderr:write(rows[#rows], "\n")
end
row("nodes", "contender", "watches held", "load ms", "load requests", "load KiB", "requests/change",
  "bytes/change", "change ms (median)", "restart: writer back ms", "restart: value seen ms",
  "restart: initialized ms")
rows[#rows + 1] = "|---|---|---|---|---|---|---|---|---|---|---|---|"

-- one run: a fresh tree of n nodes followed by contender `name` -> its measures
local n_tree = 0
local function run(n, name)
  n_tree = n_tree + 1
  local root = ("/bench/t%d"):format(n_tree)
  local leaves = build(root, n)
  local net = testing.proxy(zk.hosts)
  local w0, p0, b0 = watches(), packets(), bytes(net)
  local h = contenders[name](net, root)
  assert(util.drive_until({}, function() h.drive(0.02); return h.ready() end, 300), name .. ": no initialized")
  h.drive(0.3)
  local m = { held = watches() - w0, load_ms = h.init, load_p = packets() - p0, load_kib = (bytes(net) - b0) / 1024 }
  -- changes
  local ops0, p1, b1 = w:stats().ops, packets(), bytes(net)
  local lat = {}
  for k = 1, K do
    local leaf = leaves[rnd(#leaves)]
    local value = ("c%d-%d"):format(n_tree, k)
    assert(w:set(leaf, value))
    local t = now()
    assert(util.drive_until({}, function() h.drive(0.001); return h.seen(leaf, value) end, 30),
      name .. ": change not seen")
    lat[#lat + 1] = now() - t
  end
  h.drive(0.3)
  local writer = w:stats().ops - ops0
  m.per_p = (packets() - p1 - writer) / K
  m.per_b = (bytes(net) - b1) / K
  m.change_ms = median(lat)
  -- restart
  local inits0 = h.inits
  zk:kill()
  h.drive(0.3)
  zk:restart()
  local t_up = now()
  local marker = ("m%d"):format(n_tree)
  assert(util.drive_until({}, function() h.drive(0.01); return w.state == "CONNECTED" end, 60))
  m.writer_ms = now() - t_up -- the writer's own reconnection: a floor for the columns after it
  assert(w:set(leaves[1], marker))
  local t_seen, t_init
  assert(util.drive_until({}, function()
    h.drive(0.005)
    if not t_seen and h.seen(leaves[1], marker) then t_seen = now() - t_up end
    if inits0 and not t_init and h.inits > inits0 then t_init = now() - t_up end
    return t_seen and (not inits0 or t_init)
  end, 120), name .. ": not consistent after the restart")
  m.seen_ms, m.init_ms = t_seen, t_init
  h.close()
  net:stop()
  destroy(root)
  return m
end

-- median (min-max) of field f over the rounds, with fmt; "-" when no round has it
local function cell(list, f, fmt)
  local v = {}
  for _, m in ipairs(list) do if m[f] then v[#v + 1] = m[f] end end
  if #v == 0 then return "-" end
  local med = median(v) -- sorts v
  local a, b, c = fmt:format(med), fmt:format(v[1]), fmt:format(v[#v])
  if #v == 1 or b == c then return a end
  return ("%s (%s-%s)"):format(a, b, c)
end

for _, n in ipairs(SIZES) do
  local got = {}
  for r = 1, ROUNDS do
    for i = 1, #NAMES do
      local name = NAMES[(i + r - 2) % #NAMES + 1] -- the order rotates every round
      got[name] = got[name] or {}
      local m = run(n, name)
      got[name][#got[name] + 1] = m
      io.stderr:write(("round %d, %d nodes, %s: load %.0f ms, %.2f requests/change, restart: writer back %.0f ms,"
        .. " seen %.0f ms\n"):format(r, n, name, m.load_ms, m.per_p, m.writer_ms, m.seen_ms))
    end
  end
  for _, name in ipairs(NAMES) do
    local l = got[name]
    row(n, name, cell(l, "held", "%.0f"), cell(l, "load_ms", "%.0f"), cell(l, "load_p", "%.0f"),
      cell(l, "load_kib", "%.1f"), cell(l, "per_p", "%.2f"), cell(l, "per_b", "%.0f"), cell(l, "change_ms", "%.1f"),
      cell(l, "writer_ms", "%.0f"),
      cell(l, "seen_ms", "%.0f"), cell(l, "init_ms", "%.0f"))
  end
end
w:close()
zk:stop()
sh("rm -rf " .. shq(TMP))
print(("\ncache cost, %s, K = %d changes per run, %d rounds: median (min-max) (%s)\n"):format(
  os.date("!%Y-%m-%d %H:%M UTC"), K, ROUNDS, "bench/tools/cache_cost.lua"))
for _, r in ipairs(rows) do print(r) end
