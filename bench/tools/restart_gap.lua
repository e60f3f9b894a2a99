-- bench/tools/restart_gap.lua - how long each client of one process takes to be connected again
-- after a server restart, by age and by the watches it holds. One local ZooKeeper server with a
-- tree of N nodes (a root, parents of up to 100 leaves); client A made first. ROUNDS times: kill -9
-- the server, start it again (the sessions survive) and print, for every client, the ms from the
-- server being up (`ruok` answers) to its state being CONNECTED again. Before each round but the
-- first a new client B<r> is made (young: its first connection loss comes), with CACHE=1 a cache
-- of the whole tree on it (2 watches per node), and with BARE=1 one more client X<r> without
-- watches. DBG=1 writes every client's C client log lines (debug level) to stderr, prefixed with
-- the ms since the start and the client's name.
--
--   lua5.4 bench/tools/restart_gap.lua [N=10000] [ROUNDS=3]   (from the repository root)
--   CACHE=1 BARE=1 lua5.4 bench/tools/restart_gap.lua 10000 3
--   ZKL_BUILD=/other/build ...                                 (another build of zklock.core)
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = (os.getenv("ZKL_BUILD") or "build") .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")

local N, ROUNDS = tonumber(arg[1] or 10000), tonumber(arg[2] or 3)
local CACHE, BARE, DBG = os.getenv("CACHE") == "1", os.getenv("BARE") == "1", os.getenv("DBG") == "1"
local ST = 30 -- session timeout, s: the C client pauses ST/60 after trying every host
local zk = testing.server{ jvm_opts = { "-Xmx1024m" } }
local T0 = core.now()
local function ts() return ("%8.0f"):format(core.now() - T0) end

local function options(name)
  local o = { session_timeout = ST }
  if DBG then
    o.log_level = "debug" -- the C client's level is process-wide: every client logs at debug
    o.log = function(line) io.stderr:write(ts(), " ", name, " ", line, "\n") end
  end
  return o
end

local ok, err = pcall(function()
  local a = assert(zklock.connect(zk.hosts, options("A")))
  local root = "/bench/gap"
  assert(a:create(root, "0", { parents = true }))
  local made, p = 1, 0
  while made < N do
    p = p + 1
    local t = a:transaction()
    local parent = ("%s/p%03d"):format(root, p)
    t:create(parent, "0")
    made = made + 1
    for i = 1, 100 do
      if made >= N then break end
      t:create(("%s/l%03d"):format(parent, i), "0")
      made = made + 1
    end
    assert(t:commit())
  end
  print(("%d nodes, session timeout %d s, cache %s, bare client %s"):format(N, ST, tostring(CACHE), tostring(BARE)))
  local clients, names, caches = { a }, { "A" }, {}
  for r = 1, ROUNDS do
    if r > 1 then
      local b = assert(zklock.connect(zk.hosts, options("B" .. r)))
      assert(util.drive_until({ b }, function() return b.state == "CONNECTED" end, 30), "B not connected")
      clients[#clients + 1], names[#names + 1] = b, "B" .. r
      if CACHE then
        local cache = b:cache(root, { max_nodes = N + 1 })
        local inits = 0
        cache:on_change(function(event) if event == "initialized" then inits = inits + 1 end end)
        assert(util.drive_until(clients, function() return inits >= 1 end, 120), "no initialized")
        caches[#caches + 1] = cache
      end
      if BARE then
        local x = assert(zklock.connect(zk.hosts, options("X" .. r)))
        assert(util.drive_until({ x }, function() return x.state == "CONNECTED" end, 30), "X not connected")
        clients[#clients + 1], names[#names + 1] = x, "X" .. r
      end
      util.drive(clients, 0.3)
    end
    zk:kill()
    util.drive(clients, 0.3)
    zk:restart()
    local t0 = core.now()
    local back = {}
    assert(util.drive_until(clients, function()
      local all = true
      for i, c in ipairs(clients) do
        if not back[i] and c.state == "CONNECTED" then back[i] = core.now() - t0 end
        all = all and back[i] ~= nil
      end
      return all
    end, 60, nil, 0.002), "not every client connected again within 60 s")
    local parts = {}
    for i = 1, #clients do parts[#parts + 1] = ("%s %.0f"):format(names[i], back[i]) end
    print(("round %d, ms from up to CONNECTED: %s"):format(r, table.concat(parts, ", ")))
  end
  for _, cache in ipairs(caches) do cache:close() end
  for _, c in ipairs(clients) do c:close() end
end)
zk:stop()
if not ok then error(err, 0) end
