-- spec/support/kazoo.lua: what the Kazoo interop specs (spec/7[12]-kazoo-*_spec.lua) share: node
-- patterns, Kazoo's lock pattern settings, the overlap count, and the fixture (server, Kazoo peer,
-- zklock client, mixed runs). The settings and verdicts are listed in spec/71-kazoo-safe_spec.lua.
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")
local peers = require("support.peers.peer")
local fixture = require("support.fixture")
local assert = require("luassert") -- the spec files get it from busted; a required module does not

local SECONDS = tonumber(os.getenv("ZKLOCK_INTEROP_SECONDS") or "") or 6
local START_DELAY = 1500

local function now() return core.now() end
local function ms(t) return ("%.3f"):format(t) end

local names, contains = peers.names, peers.contains

local KAZOO_NODE = "^" .. ("%x"):rep(32) .. "__lock__%d%d%d%d%d%d%d%d%d%d$"
local KAZOO_RNODE = "^" .. ("%x"):rep(32) .. "__rlock__%d%d%d%d%d%d%d%d%d%d$"
local COMPAT_NODE = "^" .. ("%x"):rep(32) .. "%-lock%-%d%d%d%d%d%d%d%d%d%d$"

local MUTEX_SAFE = "-lock-"
local WRITE_SAFE = "__WRIT__,__READ__"
local READ_PATTERNS = "__WRIT__"

-- Two hold intervals through the shared checker: the number of overlaps beyond `capacity`.
local function overlap_count(holds, capacity)
  local list = {}
  for i, h in ipairs(holds) do
    list[i] = { key = "k", owner = h.owner, start = h.start, finish = h.finish }
  end
  return fw.check(list, capacity or 1).violations
end

-- The fixture of the Kazoo specs: one ZooKeeper, one Kazoo peer process and one zklock client
-- `c` for the describe (zk, kz, c, passed to bind(fx) after setup); teardown closes the clients
-- and stops every peer process and the server.
--   fx.pump(dt)                       drive c for dt s (while waiting for a peer)
--   fx.kcall(cmd, args [, timeout])   one Kazoo peer command, c pumped meanwhile
--   fx.mixed(args, kazoo_threads, workers, cos [, curator])
--                                     a mixed run of Kazoo threads and zklock worker processes
--                                     (and Curator threads); returns the parsed logs
local function kazoo_fixture(bind)
  local busted = require("busted")
  local fx = {}

  function fx.pump(dt) util.drive({ fx.c }, dt) end

  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, {}, function(s) fx.zk = s end)

  busted.setup(function()
    fx.kz = peers.kazoo(fx.zk.hosts)
    fx.c = util.connect(fx.zk.hosts, { session_timeout = 10, identity = "zklock-spec" })
    bind(fx)
  end)

  busted.teardown(function()
    util.close_all()
    peers.stop_all()
  end)

  function fx.kcall(cmd, args, timeout) return fx.kz:call(cmd, args, timeout or 15, fx.pump) end

  -- Start a mixed run of Kazoo threads and zklock worker processes; returns the parsed logs.
  function fx.mixed(args, kazoo_threads, workers, cos, curator)
    local dir = peers.tmpdir("mix")
    local start_at = now() + START_DELAY
    local common = { path = args.path, seconds = args.seconds or SECONDS, start_at = ms(start_at),
                     hold_ms = args.hold_ms, hold_min_ms = args.hold_min_ms or 0, timeout_ms = 10000,
                     write_pct = args.write_pct }
    local ka = { threads = kazoo_threads, recipe = args.kazoo_recipe, patterns = args.patterns,
                 log = dir .. "/kazoo.log", seed = 11 }
    for k, v in pairs(common) do ka[k] = v end
    local ks = fx.kz:send("loop", ka)
    local cs, ca
    if curator then
      ca = { threads = curator.threads, recipe = curator.recipe, log = dir .. "/curator.log", seed = 13 }
      for k, v in pairs(common) do ca[k] = v end
      cs = curator.peer:send("loop", ca)
    end
    local ws = {}
    for i = 1, workers do
      local wa = { hosts = fx.zk.hosts, cos = cos, seed = i, recipe = args.zklock_recipe }
      for k, v in pairs(common) do wa[k] = v end
      ws[i] = peers.zklock_loop(wa)
    end
    local kr = fx.kz:wait(ks, common.seconds + 60, fx.pump)
    assert.equal("ok", kr.status, kr.text)
    assert.equal("0", kr.f.errors, kr.text)
    local t = peers.read_log(ka.log)
    if cs then
      local cr = curator.peer:wait(cs, common.seconds + 60, fx.pump)
      assert.equal("ok", cr.status, cr.text)
      assert.equal("0", cr.f.errors, cr.text)
      peers.read_log(ca.log, t)
    end
    for i, w in ipairs(ws) do
      assert.truthy(w:wait_exit(60, fx.pump), "zklock worker did not finish")
      peers.read_log(w.log, t)
      assert.truthy(t.summary, ("zklock worker %d wrote no summary: %s"):format(i, w:output()))
      assert.equal(0, t.summary.raised, w:output())
      assert.equal(t.summary.started, t.summary.acquired + t.summary.failed)
    end
    assert.same({}, t.errors)
    assert.same({}, t.fails)
    return t
  end
  return fx
end

return {
  kazoo_fixture = kazoo_fixture,
  SECONDS = SECONDS,
  START_DELAY = START_DELAY,
  now = now,
  ms = ms,
  names = names,
  contains = contains,
  KAZOO_NODE = KAZOO_NODE,
  KAZOO_RNODE = KAZOO_RNODE,
  COMPAT_NODE = COMPAT_NODE,
  MUTEX_SAFE = MUTEX_SAFE,
  WRITE_SAFE = WRITE_SAFE,
  READ_PATTERNS = READ_PATTERNS,
  overlap_count = overlap_count,
}
