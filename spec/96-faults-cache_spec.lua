-- Caches under the kit's fault catalogue: a writer changes a tree (sets, deletes and re-creates,
-- new and deleted children, a directory deleted children first and made again with new ones;
-- the root, a container, emptied so the server reaps it and made again by a create with parents)
-- while a cache behind a fault proxy follows it; each fault is one round (proxy cut, blackhole,
-- drop_replies, every byte delayed while the root is reaped between the cache's listing and its
-- get, a session expired at the server, a blackhole longer than the session, a server restart; in
-- a three-node ensemble, the leader killed). After each round the writer stops, the server's tree
-- is logged as a snapshot, and at the end testing.check.cache judges the history: never back in
-- time, initialized after every new session, converged at every snapshot, every change visible
-- for longer than the window reported. The delayed round fails on a cache that does not list a
-- root made again between its two reads (the bug fixed on 2026-11-27: with the fix reverted, 4
-- runs of 4 failed, 3 at that round's snapshot and one earlier, at a random reap under a cut).
-- The same scenario with three planted bugs (a copy of zklock/cache.lua with one line changed:
-- version compared instead of czxid, no resync after a new session, duplicates not dropped) must
-- fail the checker, each in one run: the version bug at a leaf deleted and made again with the
-- same version in a cut shorter than the session (reported as an update: the checker judges the
-- events, the state after is the same). 2 s sessions; every loop is bounded by a count or a time;
-- every server and proxy is stopped.
--   busted --lua=lua5.4 spec/96-faults-cache_spec.lua
local testing = require("zklock.testing")
local check = require("zklock.testing.check")
local core = require("zklock.core")
local util = require("support.util")
local fixture = require("support.fixture")

local SESSION = 2
local WINDOW = 1500 -- ms: a change visible this long must be reported (a round trip, with room)
local SETTLE = 6000 -- ms after a heal during which misses are excused (reconnect, expiry, resync)
local REAP_MS = 400 -- the server's container check interval (the root is a container)
local DELAY = 300 -- ms each way in the round that reaps the root between the cache's two reads
local MARGIN = 60 -- ms: the root is made again this long after that listing reached the server
local REAP_WAIT = 5000 -- ms the writer waits at most for a reap (one comes within ~REAP_MS of the last delete)

-- zklock/cache.lua with `from` replaced by `to` (exactly once): a module with a planted bug
local function planted(from, to)
  local f = assert(io.open("lua/zklock/cache.lua"))
  local src = f:read("*a")
  f:close()
  local i, j = src:find(from, 1, true)
  assert(i, "the planted bug's line is not in cache.lua any more: " .. from)
  assert(not src:find(from, j + 1, true), "the planted bug's line is in cache.lua twice: " .. from)
  src = src:sub(1, i - 1) .. to .. src:sub(j + 1)
  return assert((loadstring or load)(src, "=cache.lua (planted bug)"))()
end

local BUGS = {
  version = { "if n and res.czxid ~= n.stat.czxid then", "if n and res.version < n.stat.version then" },
  no_resync = { "elseif sid ~= self._sid or self._suspended then", "elseif false then" },
  duplicates = { "elseif res.mzxid > n.stat.mzxid then", "elseif res.mzxid >= n.stat.mzxid then" },
}

-- each scenario gets a tree of its own: /fc1, /fc2, ... with parents a, b, c of leaves k1..k3
local ROOT, PARENTS
local scenarios = 0

-- a small deterministic generator (no math.randomseed: the host's generator stays untouched)
local function lcg(seed)
  local x = seed
  return function(n)
    x = (x * 1103515245 + 12345) % 2147483648
    return x % n + 1
  end
end

-- The scenario's state: clients, recorders, the writer.
local function scenario(hosts_direct, hosts_cache, mod, seed)
  local sc = { rounds = 0, writes = 0, unknown = 0, events = 0, rebuilds = 0, reaps = 0, reaped = {},
               remake_after = 0, longest = 0 }
  scenarios = scenarios + 1
  ROOT = "/fc" .. scenarios
  PARENTS = { ROOT .. "/a", ROOT .. "/b", ROOT .. "/c" }
  sc.rw = check.recorder(nil, "writer")
  sc.rc = check.recorder(nil, "cache")
  sc.rt = check.recorder(nil, "test")
  sc.b = util.connect(hosts_direct, { session_timeout = 10, identity = "writer", op_timeout = 3 })
  sc.a = util.connect(hosts_cache, { session_timeout = SESSION, identity = "cache" })
  sc.a:on_session(function(state, c)
    if state == "CONNECTED" then sc.rc:log("session", "-", { sid = (c:session()) }) end
  end)
  if sc.a.state == "CONNECTED" then sc.rc:log("session", "-", { sid = (sc.a:session()) }) end
  local b = sc.b
  assert(b:create(ROOT, "root", { container = true }))
  for _, p in ipairs(PARENTS) do
    assert(b:create(p, "p0"))
    for k = 1, 3 do assert(b:create(p .. "/k" .. k, "0")) end
  end
  sc.cache = mod and mod.new(sc.a, ROOT) or sc.a:cache(ROOT)
  check.record_cache(sc.rc, sc.cache, function() sc.events = sc.events + 1 end)
  assert(util.wait_until(function() return sc.cache:is_initialized() end, 20, { sc.a, sc.b }))
  sc.clients = { sc.a, sc.b }
  local rnd = lcg(seed or 7)
  local seq = 0
  local function write(op, path, opts)
    seq = seq + 1
    local value = "v" .. seq
    local sent = core.now()
    local ok, _, code
    if op == "set" then ok, _, code = b:set(path, value)
    elseif op == "create" then ok, _, code = b:create(path, value, opts)
    else ok, _, code = b:delete(path) end
    if ok then
      sc.writes = sc.writes + 1
      sc.rw:log("write", path, { op = op, value = op ~= "delete" and value or nil, sent = sent })
    elseif code ~= "ZNONODE" and code ~= "ZNODEEXISTS" and code ~= "ZNOTEMPTY" then
      sc.unknown = sc.unknown + 1 -- no answer: the outcome is unknown, it only ends the value before it
      sc.rw:log("write", path, { op = op, unknown = 1, sent = sent })
    end
    return ok
  end
  sc.write = write
  -- delete dir's children, then dir (when it is below the root) or leave the root to the server
  local function empty(dir)
    for _, k in ipairs(b:children(dir) or {}) do write("delete", dir .. "/" .. k) end
  end
  -- a directory with children deleted (children first) and made again with new children: its
  -- leaves again and a name it never had
  local function rebuild(p)
    sc.rebuilds = sc.rebuilds + 1
    empty(p)
    write("delete", p)
    write("create", p)
    for k = 1, 3 do write("create", p .. "/k" .. k) end
    write("create", p .. "/n" .. seq)
  end
  sc.rebuild = rebuild
  -- the root, a container, emptied (its directories' children first, then its directories, one
  -- after another): the server reaps it (every REAP_MS); made again by a create with parents (the
  -- root a container again) no sooner than sc.remake_after ms after its first directory went, then
  -- filled. The reap is logged as the root's delete; sc.reaped: ms from that first delete.
  local function reap_root()
    sc.reaps = sc.reaps + 1
    local dirs = b:children(ROOT) or {}
    for _, p in ipairs(dirs) do empty(ROOT .. "/" .. p) end
    local t0
    for _, p in ipairs(dirs) do
      write("delete", ROOT .. "/" .. p)
      t0 = t0 or core.now()
    end
    t0 = t0 or core.now()
    local gone
    -- polled every 20 ms until the reap was seen and remake_after passed, for REAP_WAIT ms at most
    -- (time, not a count of polls: under load, or while the server restarts, one poll can take
    -- seconds, and the writer's step must end well inside sc.idle's bound)
    local deadline = t0 + REAP_WAIT
    while core.now() < deadline do
      if not gone then
        local st, _, code = b:exists(ROOT)
        if st == false and not code then
          gone = core.now()
          sc.rw:log("write", ROOT, { op = "delete", sent = t0, reaped = 1 })
          sc.reaped[#sc.reaped + 1] = gone - t0
        end
      end
      if gone and core.now() >= t0 + sc.remake_after then break end
      b:sleep(0.02)
    end
    write("create", PARENTS[1], { parents = true })
    for _, p in ipairs(PARENTS) do
      if p ~= PARENTS[1] then write("create", p) end
      for k = 1, 3 do write("create", p .. "/k" .. k) end
    end
  end
  sc.reap_root = reap_root
  -- one step of the writer (steps queued in sc.queue first): set a node, delete and re-create a
  -- leaf, a child made or deleted, a directory rebuilt (3 %), the root emptied, reaped and made
  -- again (2 %)
  sc.queue = {}
  function sc.step()
    local queued = table.remove(sc.queue, 1)
    if queued then return queued() end
    local p = PARENTS[rnd(#PARENTS)]
    local r = rnd(100)
    if r <= 2 and not sc.no_reap then
      reap_root()
    elseif r <= 5 then
      rebuild(p)
    elseif r <= 40 then
      write("set", rnd(2) == 1 and p or p .. "/k" .. rnd(3))
    elseif r <= 70 then
      local leaf = p .. "/k" .. rnd(3)
      if write("delete", leaf) then write("create", leaf) else write("create", leaf) end
    else
      local extra = p .. "/x" .. rnd(2)
      if not write("create", extra) then write("delete", extra) end
    end
  end
  sc.writing = false
  b:spawn(function()
    for _ = 1, 100000 do
      if sc.stop then return end
      if (sc.writing and not sc.hold) or #sc.queue > 0 then
        sc.busy = true
        local t0 = core.now()
        sc.step()
        sc.longest = math.max(sc.longest, core.now() - t0)
        sc.busy = false
      end
      b:sleep(0.02)
    end
  end)
  function sc.drive(s) util.drive(sc.clients, s) end
  -- until the writer's current step (and every queued one) is done (bounded)
  function sc.idle(s)
    assert(util.drive_until(sc.clients, function() return not sc.busy and #sc.queue == 0 end, s or 15, nil, 0.02),
      "the writer did not finish its step")
  end
  return sc
end

-- the cache's view equals the server's (read through the writer's client)
local function converged(sc)
  if sc.a.state ~= "CONNECTED" or not sc.cache:is_initialized() then return false end
  local want = {}
  local stack = { ROOT }
  for _ = 1, 1000 do
    local path = table.remove(stack)
    if not path then break end
    local data, stat = sc.b:get(path)
    if data then
      want[path] = data .. "\0" .. stat.czxid .. "\0" .. stat.mzxid
      for _, k in ipairs(sc.b:children(path) or {}) do stack[#stack + 1] = path .. "/" .. k end
    end
  end
  local n = 0
  for path, _, data in sc.cache:walk() do
    local _, stat = sc.cache:get(path)
    if want[path] ~= data .. "\0" .. stat.czxid .. "\0" .. stat.mzxid then return false end
    n = n + 1
  end
  for _ in pairs(want) do n = n - 1 end
  return n == 0
end

-- one round: write, apply the fault (fault_fn(sc) -> heal function), write through it, heal,
-- write on, stop, wait (bounded) for the cache to converge, log the server's snapshot.
local function round(sc, name, fault_fn, wait)
  sc.rounds = sc.rounds + 1
  sc.writing = true
  sc.drive(1.0)
  sc.rt:log("fault", "-", { name = name })
  local heal = fault_fn(sc)
  sc.drive(0.2)
  if heal then heal(sc) end
  sc.rt:log("heal", "-", { name = name })
  sc.drive(1.5)
  sc.writing = false
  sc.idle()
  sc.no_reap = nil
  sc.drive(0.1)
  local t0 = core.now()
  local ok = util.drive_until(sc.clients, function() return converged(sc) end, wait or 25, nil, 0.05)
  local took = core.now() - t0
  util.drive(sc.clients, 0.1)
  assert(check.snapshot(sc.rt, sc.b, ROOT, sc.rounds))
  return ok, took
end

local function history(sc)
  return check.load(sc.rw, sc.rc, sc.rt)
end

local function finish(sc)
  sc.stop = true
  sc.drive(0.1)
  local ok, n = check.cache(history(sc), { window = WINDOW, settle = SETTLE })
  return ok, n
end

describe("faults: a cache under the fault catalogue #faults #slow", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000, container_check_ms = REAP_MS },
    { own = "restarts the server; reaps containers every REAP_MS" }, function(s) zk = s end)
  local net

  before_each(function() net = testing.proxy(zk.hosts) end)
  after_each(function()
    if net then pcall(net.heal, net) end
    util.close_all()
    if net then net:stop() end
    net = nil
  end)

  local function with_pump(sc) net.pump = sc.drive end

  -- A leaf never set (version 0) deleted and made again (version 0 again) in a cut shorter than the
  -- cache's session (CUT s at most, healed sooner): the session is kept, no notification reaches
  -- the cache while the old incarnation goes, and after the reconnection its get finds only the
  -- new one, with the same version and a higher mzxid (a cache comparing versions calls it an
  -- update). The writer's own steps are held from before the leaf is made until the cache has read
  -- the new one: a rebuild of the leaf's directory meanwhile would show the leaf removed and hide
  -- the case. s.remade: { kept = the session was kept, unheard = the cache still held the old one
  -- at the heal, ms = from the heal to the new one read }.
  local CUT = 1.0
  local function recreate_unheard(s)
    local leaf = PARENTS[1] .. "/fresh" .. s.rounds
    s.hold = true
    s.idle()
    assert(s.write("create", leaf))
    local function cached_czxid()
      local _, st = s.cache:get(leaf)
      return st and st.czxid
    end
    assert(util.drive_until(s.clients, function() return cached_czxid() ~= nil end, 10, nil, 0.02),
      "the cache did not read the leaf " .. leaf)
    local _, old = assert(s.b:get(leaf))
    local sid = s.a:session()
    net:cut(CUT)
    s.drive(0.1)
    assert(s.write("delete", leaf))
    assert(s.write("create", leaf))
    local _, new = assert(s.b:get(leaf))
    assert(new.version == old.version and new.czxid ~= old.czxid and new.mzxid > old.mzxid,
      "the leaf was not made again with the same version")
    return function()
      local unheard = cached_czxid() == old.czxid -- the cache has not read the new one before the heal
      local t0 = core.now()
      net:heal()
      assert(util.drive_until(s.clients, function() return cached_czxid() == new.czxid end, 10, nil, 0.02),
        "the cache did not read the leaf made again")
      s.remade = { kept = s.a:session() == sid, unheard = unheard, ms = core.now() - t0 }
      s.hold = nil
    end
  end
  -- the root reaped between the cache's listing and its get: every byte is delayed DELAY ms each
  -- way, so the listing the cache sends when the root's first directory goes reaches the server
  -- after the reap (a reap within 2 * DELAY of that delete), and the root is made again MARGIN ms
  -- after that: before the get that the reap's notification starts, when the reap came more than
  -- MARGIN ms after that delete. Tried until a reap fell there (6 tries at most); no other
  -- reap until the snapshot (it would read the root again and hide a root left unlisted).
  local function reap_between_reads(s)
    s.no_reap = true
    s.idle() -- a reap of the writer's own is not under way
    net:delay(DELAY)
    s.remake_after = 2 * DELAY + MARGIN
    for try = 1, 6 do
      local before = #s.reaped
      s.queue[#s.queue + 1] = s.reap_root
      s.idle()
      local r = #s.reaped > before and s.reaped[#s.reaped]
      -- r is when the writer saw the root gone: the reap came at most one poll (20 ms) before
      if r and r >= MARGIN + 25 and r <= 2 * DELAY - 100 then
        s.between = ("reaped %.0f ms after the first directory went, try %d"):format(r, try)
        break
      end
      s.drive(4 * DELAY / 1000) -- the cache catches up before the next try
    end
    s.remake_after = 0
    return function() net:heal() end
  end
  it("follows a changing tree through cut (and a re-create unheard), blackhole, drop_replies, expiry, a long"
    .. " silence and a restart", function()
    local sc = scenario(zk.hosts, net.hosts, nil, 11)
    with_pump(sc)
    local report = {}
    local function r(name, fn)
      local ok, took = round(sc, name, fn)
      report[#report + 1] = ("%s %s %.0f ms"):format(name, ok and "converged in" or "NOT converged after", took)
    end
    r("cut", function(s) net:cut(5); s.drive(1.0); return function() net:heal() end end)
    r("cut, a leaf re-created unheard", recreate_unheard)
    r("blackhole", function(s) net:blackhole(5); s.drive(1.0); return function() net:heal() end end)
    r("drop_replies", function(s) net:drop_replies(5); s.drive(1.0); return function() net:heal() end end)
    r("delay, the root reaped between two reads", reap_between_reads)
    r("expire", function(s)
      assert(testing.expire(s.a, zk.hosts))
      s.drive(0.5)
    end)
    r("long blackhole", function(s) net:blackhole(8); s.drive(3.5); return function() net:heal() end end)
    r("restart", function(s)
      zk:kill()
      s.drive(0.5)
      zk:restart()
    end)
    local ok, msg = finish(sc)
    local st = sc.cache:stats()
    print(("\n  [cache faults] %d rounds, %d writes (%d unknown), %d cache events, %d resyncs, %d reads, %d"
      .. " directories rebuilt, %d root reaps (%s); %s"):format(sc.rounds, sc.writes, sc.unknown, sc.events, st.resyncs,
      st.reads, sc.rebuilds, sc.reaps, sc.between or "no reap between the two reads", table.concat(report, "; ")))
    print(("  [cache faults] the leaf made again in a cut: session %s, %s at the heal, read %.0f ms after it;"
      .. " the writer's longest step %.0f ms"):format(sc.remade.kept and "kept" or "NEW",
      sc.remade.unheard and "unheard" or "HEARD", sc.remade.ms, sc.longest))
    assert(ok, msg)
    assert.is_true(sc.rebuilds >= 3, "directories rebuilt: " .. sc.rebuilds)
    assert.is_true(#sc.reaped >= 3, "root reaps seen: " .. #sc.reaped)
    assert.truthy(sc.between, "no reap fell between the cache's listing and its get in 6 tries")
    assert.is_true(sc.writes > 100)
    assert.is_true(st.resyncs >= 3) -- at least the expiry, the long silence and the restart
    local inits = 0
    for _, e in ipairs(sc.rc.events) do if e.f.what == "initialized" then inits = inits + 1 end end
    assert.is_true(inits >= 4, "initialized reported " .. inits .. " times") -- the first sync and the resyncs
    sc.cache:close()
  end)

  -- each planted bug must fail the checker in the scenario that exposes it
  local function planted_run(bug, rounds)
    local mod = planted(BUGS[bug][1], BUGS[bug][2])
    local sc = scenario(zk.hosts, net.hosts, mod, 5)
    with_pump(sc)
    for _, rd in ipairs(rounds) do round(sc, rd[1], rd[2], 5) end
    local ok, msg = finish(sc)
    sc.cache:close()
    return ok, msg, sc
  end
  local function expire(s) assert(testing.expire(s.a, zk.hosts)); s.drive(0.5) end

  it("fails the checker with a planted bug: version compared instead of czxid", function()
    -- the leaf made again with the same version in a short cut (session kept) is reported as an
    -- update, whatever else the writer did: the checker over the whole history fails, and so does
    -- the checker over that leaf's events alone
    local ok, msg, sc = planted_run("version", { { "cut, a leaf re-created unheard", recreate_unheard } })
    assert.is_nil(ok)
    print(("\n  [planted: version] session %s, %s at the heal, the new leaf read %.0f ms after it; %s"):format(
      sc.remade.kept and "kept" or "NEW", sc.remade.unheard and "unheard" or "HEARD", sc.remade.ms,
      msg:match("^[^\n]*")))
    assert.truthy(msg:find("another incarnation", 1, true), msg)
    local leaf = PARENTS[1] .. "/fresh1"
    local h = check.filter(history(sc), function(ev)
      return ev.key == leaf or (ev.ev ~= "cache" and ev.ev ~= "write" and ev.ev ~= "server")
    end)
    local ok2, msg2 = check.cache(h, { window = WINDOW, settle = SETTLE })
    assert.is_nil(ok2)
    assert.truthy(msg2:find("another incarnation", 1, true) and msg2:find(leaf, 1, true), msg2)
  end)

  it("fails the checker with a planted bug: no resync after a new session", function()
    local ok, msg, sc = planted_run("no_resync", { { "expire", expire } })
    assert.is_nil(ok)
    print("\n  [planted: no resync] " .. msg:match("^[^\n]*"))
    assert.truthy(msg:find("cache resync", 1, true), msg)
    -- without the session events the checker still sees what the missing resync cost
    local h = check.filter(history(sc), function(ev) return ev.ev ~= "session" end)
    local ok2, msg2 = check.cache(h, { window = WINDOW, settle = SETTLE })
    assert.is_nil(ok2)
    print("  [planted: no resync, sessions not logged] " .. msg2:match("^[^\n]*"))
    assert.truthy(msg2:find("cache convergence", 1, true), msg2)
  end)

  it("fails the checker with a planted bug: duplicates not dropped", function()
    -- a new session reads every node again: each unchanged one is answered with the same mzxid
    -- whether the resync's answers land while the round is judged varies with the machine's load
    -- (one clean-clone run had it pass the checker twice): up to 3 scenario runs to show it
    local ok, msg
    for _ = 1, 3 do
      ok, msg = planted_run("duplicates", { { "expire", expire } })
      if not ok then break end
    end
    assert.is_nil(ok)
    print("\n  [planted: duplicates] " .. msg:match("^[^\n]*"))
    assert.truthy(msg:find("duplicate event", 1, true), msg)
  end)
end)

describe("faults: a cache across a leader kill in a three-node ensemble #faults #lua54 #slow", function()
  local ens
  fixture.ensemble({ n = 3, tick_ms = 500, min_session_ms = 1000 }, {}, function(e) ens = e end)
  after_each(function() util.close_all() end)

  it("converges after the leader is killed and restarted, never back in time", function()
    assert(ens:leader(30))
    -- a leader's death drops every member's clients until a new leader is elected
    local sc = scenario(ens.hosts, ens.hosts, nil, 3)
    local report = {}
    for i = 1, 2 do
      local ok, took = round(sc, "kill leader", function(s)
        local l = assert(ens:leader(30))
        ens.nodes[l]:kill()
        s.drive(1.0)
        return function()
          ens.nodes[l]:restart()
        end
      end)
      report[#report + 1] = ("round %d %s %.0f ms"):format(i, ok and "converged in" or "NOT converged after", took)
      assert(ens:wait_quorum(30))
    end
    local ok, msg = finish(sc)
    local st = sc.cache:stats()
    print(("\n  [cache leader kill] %d writes (%d unknown), %d events, %d resyncs; %s; the writer's longest step"
      .. " %.0f ms"):format(sc.writes, sc.unknown, sc.events, st.resyncs, table.concat(report, "; "), sc.longest))
    assert(ok, msg)
    sc.cache:close()
  end)
end)
