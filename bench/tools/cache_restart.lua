-- bench/tools/cache_restart.lua - where the time goes when a server under a big cache restarts.
-- One local ZooKeeper server, a tree of N nodes (a root, parents of up to 100 leaves), a zklock
-- cache of it on a client behind the kit's fault proxy (as in cache_cost.lua), a writer on its
-- own direct connection without watches. ROUNDS times: kill -9 the server, start it again (the
-- sessions survive), and print, in ms from the server being up (`ruok` answers): the writer
-- connected again, its set answered, the cache's client connected again, the cache showing the
-- value, the cache's `initialized` (its resync). Also the size of the SetWatches message the
-- cache's client sends on the reconnection: 28 bytes and 4 + #path per watch, two per node (a
-- server refuses a message longer than its jute.maxbuffer).
--
-- FRESH=1: a new proxy, client and cache for every round, loaded and shown 20 writes before the
-- kill (as cache_cost.lua does per run); DIRECT=1: the cache's client without the proxy.
--
--   lua5.4 bench/tools/cache_restart.lua [N=10000] [ROUNDS=5]   (from the repository root)
--   FRESH=1 DIRECT=1 lua5.4 bench/tools/cache_restart.lua 10000 4
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = (os.getenv("ZKL_BUILD") or "build") .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")

local N, ROUNDS = tonumber(arg[1] or 10000), tonumber(arg[2] or 5)
local FRESH, DIRECT = os.getenv("FRESH") == "1", os.getenv("DIRECT") == "1"
local zk = testing.server{ jvm_opts = { "-Xmx1024m" } }
local net
local ok, err = pcall(function()
  local w = assert(zklock.connect(zk.hosts, { session_timeout = 30, op_timeout = 30 }))
  local root = "/bench/r"
  assert(w:create(root, "0", { parents = true }))
  local made, p, leaves, bytes = 1, 0, {}, 2 * (4 + #root)
  while made < N do
    p = p + 1
    local t = w:transaction()
    local parent = ("%s/p%03d"):format(root, p)
    t:create(parent, "0")
    made, bytes = made + 1, bytes + 2 * (4 + #parent)
    for i = 1, 100 do
      if made >= N then break end
      local leaf = ("%s/l%03d"):format(parent, i)
      t:create(leaf, "0")
      made, bytes = made + 1, bytes + 2 * (4 + #leaf)
      leaves[#leaves + 1] = leaf
    end
    assert(t:commit())
  end
  print(("%d nodes, %d watches, SetWatches message %d bytes"):format(N, 2 * N, bytes + 28))
  local c, cache, inits
  local function open()
    if net then net:stop() end
    net = testing.proxy(zk.hosts)
    c = assert(zklock.connect(DIRECT and zk.hosts or net.hosts, { session_timeout = 30 }))
    cache = c:cache(root, { max_nodes = N })
    inits = 0
    cache:on_change(function(event) if event == "initialized" then inits = inits + 1 end end)
    assert(util.drive_until({ c, w }, function() return inits >= 1 end, 120), "no initialized")
  end
  open()
  for r = 1, ROUNDS do
    if FRESH and r > 1 then
      cache:close()
      c:close()
      open()
      for k = 1, 20 do
        local leaf, v = leaves[k * 7], ("k%d-%d"):format(r, k)
        assert(w:set(leaf, v))
        local function seen() return cache:get(leaf) == v end
        assert(util.drive_until({ c, w }, seen, 30, nil, 0.001), "change not seen")
      end
      util.drive({ c, w }, 0.3)
    end
    local i0 = inits
    zk:kill()
    util.drive({ c, w }, 0.3)
    zk:restart()
    local t0 = core.now()
    local tw, tset, tc, tseen, tinit
    local marker = "m" .. r
    assert(util.drive_until({ c, w }, function()
      local t = core.now() - t0
      if not tw and w.state == "CONNECTED" then
        tw = t
        assert(w:set(leaves[1], marker))
        tset = core.now() - t0
      end
      if not tc and c.state == "CONNECTED" then tc = t end
      if tset and not tseen and cache:get(leaves[1]) == marker then tseen = core.now() - t0 end
      if not tinit and inits > i0 then tinit = t end
      return tseen and tinit
    end, 120, nil, 0.002), "not consistent within 120 s")
    print(("round %d, ms from up: writer connected %.0f, set answered %.0f, cache client connected %.0f,"
      .. " value seen %.0f, initialized %.0f"):format(r, tw, tset, tc, tseen, tinit))
  end
  cache:close()
  c:close()
  w:close()
end)
if net then net:stop() end
zk:stop()
if not ok then error(err, 0) end
