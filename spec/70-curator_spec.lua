-- Interop with Apache Curator 5.4 (Debian's libcurator-recipes-java) on the same ZooKeeper and the
-- same lock paths (issue 4, "Interop with the real peers").
--
-- One ZooKeeper and one Curator JVM (spec/support/peers/CuratorPeer.java, compiled with javac on
-- first use and cached by source hash) serve the whole file. zklock takes part from this process
-- (step-by-step scenarios) and from worker processes (spec/support/peers/zklock_peer.lua) in the
-- mixed runs. Every runtime logs its hold intervals in CLOCK_MONOTONIC milliseconds (the first test
-- checks that the clocks agree) and the mixed runs go through spec/support/fault_worker.lua's
-- checker:
--   * InterProcessMutex vs zklock mutex, 2 Curator threads + 2 zklock processes x 10 coroutines:
--     no overlapping holds, fencing tokens (czxid) and node sequence numbers grow in grant order
--     (FIFO across runtimes);
--   * InterProcessReadWriteLock vs zklock rwlock: writers overlap nothing, and a Curator read hold
--     and a zklock read hold did overlap;
--   * InterProcessSemaphoreV2 vs zklock semaphore: never more than max leases across runtimes;
--   * getParticipantNodes (Curator) lists zklock's nodes and participants() (zklock) Curator's.
--   busted --lua=lua5.4 spec/70-curator_spec.lua            (about 30 s)
--   busted --lua=luajit --run=luajit spec/70-curator_spec.lua
-- ZKLOCK_INTEROP_SECONDS (default 6) sets the length of each mixed run.
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")
local peers = require("support.peers.peer")
local fixture = require("support.fixture")

local SECONDS = tonumber(os.getenv("ZKLOCK_INTEROP_SECONDS") or "") or 6
local START_DELAY = 1500 -- ms between sending a mixed run and its start: the workers connect meanwhile

local function now() return core.now() end
local function ms(t) return ("%.3f"):format(t) end

local names, contains = peers.names, peers.contains

local function report(label, t, extra)
  local by = peers.count_by(t, "runtime")
  print(("\n  [%s] holds: curator=%d zklock=%d%s"):format(label, by.curator or 0, by.zklock or 0, extra or ""))
end

describe("interop with Apache Curator 5.4 #interop", function()
  local zk, cur, c

  local function pump(dt) util.drive({ c }, dt) end

  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, {}, function(s) zk = s end)

  setup(function()
    cur = peers.curator(zk.hosts)
    c = util.connect(zk.hosts, { session_timeout = 10, identity = "zklock-spec" })
  end)

  teardown(function()
    util.close_all()
    peers.stop_all()
  end)

  it("the peer runs Curator 5.4 and reads the same monotonic clock as zklock", function()
    local before = now()
    local r = cur:call("ping", {}, 10, pump)
    local after = now()
    assert.equal("ok", r.status, r.text)
    assert.truthy(r.f.version:match("^5%.4"), "Curator version: " .. r.text)
    local t = assert(tonumber(r.f.now))
    -- the peer's reading lies between two of ours (1 ms slack for the printed rounding)
    assert.is_true(before - 1 <= t and t <= after + 1,
      ("clocks differ: zklock %.3f..%.3f, Curator %.3f"):format(before, after, t))
  end)

  it("mutex: each runtime waits for the other's holder, and lists its node", function()
    local path = "/interop/curator/mutex-visible"
    local m = c:mutex(path)
    assert.truthy(m:acquire(5))
    local zk_node = m:node()
    -- Curator's getParticipantNodes lists the zklock holder
    local r = cur:call("participants", { recipe = "mutex", path = path }, 10, pump)
    assert.equal("ok", r.status, r.text)
    assert.same({ zk_node }, names(r.f.list))

    -- a Curator InterProcessMutex queues behind the zklock holder
    local hs = cur:send("hold", { id = "m1", recipe = "mutex", path = path, timeout_ms = 20000 })
    assert.truthy(util.wait_until(function()
      local p = m:participants()
      return p and #p == 2
    end, 10, { c }), "Curator's node did not appear")
    util.drive({ c }, 0.4)
    assert.is_nil(cur:reply(hs), "Curator acquired while zklock held the mutex")
    local parts = assert(m:participants())
    assert.equal(zk_node, parts[1].path)
    local cur_node = parts[2].path
    assert.truthy(parts[2].node:match(util.MUTEX_NODE), "Curator's node name: " .. parts[2].node)
    r = cur:call("participants", { recipe = "mutex", path = path }, 10, pump)
    assert.same({ zk_node, cur_node }, names(r.f.list)) -- same order in both runtimes

    local released = now()
    assert.truthy(m:release())
    local h = cur:wait(hs, 10, pump)
    assert.equal("ok", h.status, h.text)
    assert.equal(cur_node, h.f.node)
    assert.is_true(tonumber(h.f.start) >= released, "Curator's hold began before zklock released")

    -- zklock's participants() lists the Curator holder, with Curator's node data
    parts = assert(m:participants())
    assert.equal(1, #parts)
    assert.equal(cur_node, parts[1].path)
    assert.is_true(#parts[1].data > 0, "Curator's node carries its default data (the host address)")

    -- and zklock waits for the Curator holder
    local m2 = c:mutex(path)
    local ok, _, code = m2:acquire(0)
    assert.is_nil(ok)
    assert.equal("ETIMEDOUT", code)
    local rs = cur:send("release", { id = "m1" })
    assert.truthy(m2:acquire(10))
    local granted = now()
    local rr = cur:wait(rs, 10, pump)
    assert.equal("ok", rr.status, rr.text)
    assert.is_true(granted >= tonumber(rr.f["end"]), "zklock was granted before Curator's hold ended")
    assert.is_true(m2:token() > tonumber(h.f.czxid), "fencing token did not grow across runtimes")
    assert.truthy(m2:release())
    assert.same({}, util.children(c, path))
  end)

  it("rwlock: a Curator reader and a zklock reader hold at once; writers of either runtime wait", function()
    local path = "/interop/curator/rw-visible"
    local r = cur:call("hold", { id = "r1", recipe = "read", path = path, timeout_ms = 10000 }, 15, pump)
    assert.equal("ok", r.status, r.text)
    local cur_read = r.f.node
    local rw = c:rwlock(path)
    assert.truthy(rw.read:acquire(0), "a zklock reader could not join a Curator reader")
    -- both hold right now
    local p = cur:call("participants", { recipe = "read", path = path }, 10, pump)
    assert.same({ cur_read, rw.read:node() }, names(p.f.list))
    local zp = assert(rw.read:participants())
    assert.equal(2, #zp)
    assert.equal(cur_read, zp[1].path)

    -- a zklock writer cannot enter while the two readers hold
    local other = c:rwlock(path)
    local ok, _, code = other.write:acquire(0)
    assert.is_nil(ok)
    assert.equal("ETIMEDOUT", code)

    -- a Curator writer queues behind both readers
    local ws = cur:send("hold", { id = "w1", recipe = "write", path = path, timeout_ms = 20000 })
    assert.truthy(util.wait_until(function()
      local q = rw.read:participants()
      return q and #q == 3
    end, 10, { c }), "Curator's write node did not appear")
    local cur_write = assert(rw.read:participants())[3]
    assert.truthy(cur_write.node:find("__WRIT__", 1, true))
    local wp = cur:call("participants", { recipe = "write", path = path }, 10, pump)
    assert.same({ cur_write.path }, names(wp.f.list))
    -- a later zklock reader waits for that earlier Curator writer (no writer starvation)
    ok, _, code = other.read:acquire(0)
    assert.is_nil(ok)
    assert.equal("ETIMEDOUT", code)

    util.drive({ c }, 0.3)
    assert.is_nil(cur:reply(ws), "Curator's writer entered while two readers held")
    local zk_read_end = now()
    assert.truthy(rw.read:release())
    util.drive({ c }, 0.3)
    assert.is_nil(cur:reply(ws), "Curator's writer entered while Curator's reader held")
    local rr = cur:call("release", { id = "r1" }, 10, pump)
    assert.equal("ok", rr.status, rr.text)
    local w = cur:wait(ws, 10, pump)
    assert.equal("ok", w.status, w.text)
    assert.is_true(tonumber(w.f.start) >= tonumber(rr.f["end"]) and tonumber(w.f.start) >= zk_read_end)

    -- while the Curator writer holds, zklock can take neither side
    ok = other.read:acquire(0)
    assert.is_nil(ok)
    ok = other.write:acquire(0)
    assert.is_nil(ok)
    local rs = cur:send("release", { id = "w1" })
    assert.truthy(other.write:acquire(10))
    local granted = now()
    local wr = cur:wait(rs, 10, pump)
    assert.is_true(granted >= tonumber(wr.f["end"]))
    assert.truthy(other.write:release())
    assert.same({}, util.children(c, path))
  end)

  it("rwlock: zklock's downgrade keeps its place; a queued Curator writer waits for the downgraded reader", function()
    local path = "/interop/curator/rw-downgrade"
    local rw = c:rwlock(path)
    assert.truthy(rw.write:acquire(5))
    local ws = cur:send("hold", { id = "dw", recipe = "write", path = path, timeout_ms = 20000 })
    assert.truthy(util.wait_until(function()
      local q = rw.read:participants()
      return q and #q == 2
    end, 10, { c }), "Curator's write node did not appear")
    assert.truthy(rw.read:acquire(0)) -- downgrade: granted at once
    assert.truthy(rw.write:release())
    -- the read node carries the writer's sequence, so Curator 5.4 sorts it before its own writer
    local q = assert(rw.read:participants())
    assert.equal(2, #q)
    assert.equal(rw.read:node(), q[1].path)
    util.drive({ c }, 0.5)
    assert.is_nil(cur:reply(ws), "Curator's writer entered while zklock held the downgraded read lock")
    -- a Curator reader arriving now waits too: Curator's writer is ahead of it
    local r = cur:call("hold", { id = "dr", recipe = "read", path = path, timeout_ms = 300 }, 15, pump)
    assert.equal("timeout", r.status, r.text)
    local released = now()
    assert.truthy(rw.read:release())
    local w = cur:wait(ws, 10, pump)
    assert.equal("ok", w.status, w.text)
    assert.is_true(tonumber(w.f.start) >= released)
    assert.equal("ok", cur:call("release", { id = "dw" }, 10, pump).status)
    assert.same({}, util.children(c, path))
  end)

  it("UNSAFE (evidence, CURATOR-621): Curator 5.4's own downgrade lets a queued zklock writer in #evidence", function()
    local path = "/interop/curator/rw-downgrade-hole"
    local h = cur:call("hold", { id = "cw", recipe = "write", path = path, timeout_ms = 10000 }, 15, pump)
    assert.equal("ok", h.status, h.text)
    local rw = c:rwlock(path)
    local granted, done, stop = nil, false, false
    c:spawn(function()
      if rw.write:acquire(10) then
        granted = now()
        while not stop do c:sleep(0.01) end
        rw.write:release()
      end
      done = true
    end)
    assert.truthy(util.wait_until(function()
      local q = rw.read:participants()
      return q and #q == 2
    end, 10, { c }), "zklock's write node did not appear")
    -- Curator 5.4 downgrades with a new read node *after* the queued zklock writer ...
    local d = cur:call("downgrade", { id = "cw" }, 15, pump)
    assert.equal("ok", d.status, d.text)
    -- ... so the writer is first as soon as Curator's write node goes, although Curator still reads
    assert.truthy(util.wait_until(function() return granted end, 5, { c }),
      "the queued zklock writer was not let in (Curator fixed?)")
    local rr = cur:call("release", { id = "cw" }, 10, pump)
    stop = true
    assert.truthy(util.wait_until(function() return done end, 5, { c }))
    local rep = peers.check_rw({
      { owner = "curator", runtime = "curator", mode = "read",
        start = tonumber(d.f.at), finish = tonumber(rr.f["end"]) },
      { owner = "zklock", runtime = "zklock", mode = "write", start = granted, finish = now() } })
    print(("\n  [CURATOR-621] Curator read (after downgrade) %.0f..%.0f, zklock write from %.0f: "
      .. "write_overlaps=%d"):format(
      tonumber(d.f.at), tonumber(rr.f["end"]), granted, rep.violations))
    assert.equal(1, rep.violations)
  end)

  it("semaphore: InterProcessSemaphoreV2 and zklock count each other's leases (max 2)", function()
    local path = "/interop/curator/sem-visible"
    local r = cur:call("hold", { id = "s1", recipe = "semaphore", max = 2, path = path, timeout_ms = 10000 }, 15, pump)
    assert.equal("ok", r.status, r.text)
    local sem = c:semaphore(path, 2)
    local lease = assert(sem:acquire(5))
    local p = cur:call("participants", { recipe = "semaphore", max = 2, path = path }, 10, pump)
    local listed = names(p.f.list)
    assert.equal(2, #listed)
    assert.truthy(contains(listed, util.basename(lease:node())), "Curator does not list zklock's lease: " .. p.text)
    local zp = assert(sem:participants())
    assert.equal(2, #zp)
    local zpaths = { zp[1].path, zp[2].path }
    assert.truthy(contains(zpaths, r.f.node), "zklock does not list Curator's lease")

    -- the two leases exhaust the semaphore for both runtimes
    local ok, _, code = c:semaphore(path, 2):acquire(0)
    assert.is_nil(ok)
    assert.equal("ETIMEDOUT", code)
    local t = cur:call("hold", { id = "s2", recipe = "semaphore", max = 2, path = path, timeout_ms = 300 }, 15, pump)
    assert.equal("timeout", t.status, t.text)

    -- a waiting Curator lease gets zklock's lease when it is returned
    local hs = cur:send("hold", { id = "s3", recipe = "semaphore", max = 2, path = path, timeout_ms = 20000 })
    util.drive({ c }, 0.4)
    assert.is_nil(cur:reply(hs), "Curator took a third lease of two")
    local returned = now()
    assert.truthy(lease:release())
    local h = cur:wait(hs, 10, pump)
    assert.equal("ok", h.status, h.text)
    assert.is_true(tonumber(h.f.start) >= returned)
    assert.equal("ok", cur:call("release", { id = "s1" }, 10, pump).status)
    assert.equal("ok", cur:call("release", { id = "s3" }, 10, pump).status)
    assert.same({}, util.children(c, path .. "/leases"))
  end)

  -- Start a mixed run: Curator threads (one JVM) and zklock worker processes from one start time.
  local function mixed(args, curator_threads, workers, cos)
    local dir = peers.tmpdir("mix")
    local start_at = now() + START_DELAY
    local common = { path = args.path, recipe = args.recipe, seconds = SECONDS, start_at = ms(start_at),
                     hold_ms = args.hold_ms, hold_min_ms = args.hold_min_ms or 0, max = args.max,
                     write_pct = args.write_pct, timeout_ms = 10000 }
    local ca = { threads = curator_threads, log = dir .. "/curator.log", seed = 7 }
    for k, v in pairs(common) do ca[k] = v end
    local cs = cur:send("loop", ca)
    local ws = {}
    for i = 1, workers do
      local wa = { hosts = zk.hosts, cos = cos, seed = i }
      for k, v in pairs(common) do wa[k] = v end
      ws[i] = peers.zklock_loop(wa)
    end
    local cr = cur:wait(cs, SECONDS + 60, pump)
    assert.equal("ok", cr.status, cr.text)
    local t = peers.read_log(ca.log)
    for i, w in ipairs(ws) do
      assert.truthy(w:wait_exit(60, pump), "zklock worker did not finish")
      peers.read_log(w.log, t)
      assert.truthy(t.summary, ("zklock worker %d wrote no summary: %s"):format(i, w:output()))
      assert.equal(0, t.summary.raised, w:output())
      assert.equal(t.summary.started, t.summary.acquired + t.summary.failed)
    end
    assert.equal("0", cr.f.errors, cr.text)
    assert.same({}, t.errors)
    assert.same({}, t.fails) -- every acquire of every runtime succeeded within its 10 s timeout
    return t, cr
  end

  it("mutex: 2 Curator threads + 2 zklock processes x 10 coroutines never overlap; FIFO across runtimes", function()
    local path = "/interop/curator/mix-mutex"
    local t = mixed({ path = path, recipe = "mutex", hold_ms = 4 }, 2, 2, 10)
    local by = peers.count_by(t.holds, "runtime")
    local rep = fw.check(t.holds, 1)
    local fifo = peers.fifo(t.holds)
    report("mutex", t.holds, (" overlaps=%d token_violations=%d fifo_violations=%d runtime_switches=%d"):format(
      rep.violations, rep.token_violations, fifo.violations, fifo.switches))
    assert.is_true((by.curator or 0) >= 20, "too few Curator holds to judge")
    assert.is_true((by.zklock or 0) >= 100, "too few zklock holds to judge")
    assert.equal(rep.holds, rep.clean) -- no hold saw a connection event
    assert.equal(0, rep.violations, table.concat(rep.examples, "\n"))
    assert.equal(0, rep.token_violations, table.concat(rep.examples, "\n"))
    assert.equal(#t.holds, fifo.checked)
    assert.equal(0, fifo.violations, table.concat(fifo.examples, "\n"))
    assert.is_true(fifo.switches >= 20, "the grant order hardly alternated between runtimes")
    assert.same({}, util.children(c, path))
  end)

  it("rwlock: Curator and zklock readers share, writers of both exclude everyone", function()
    local path = "/interop/curator/mix-rw"
    local t = mixed({ path = path, recipe = "rwmix", write_pct = 25, hold_ms = 8, hold_min_ms = 2 }, 2, 2, 10)
    local rep = peers.check_rw(t.holds)
    local w = {}
    for _, h in ipairs(t.holds) do
      local k = h.runtime .. "-" .. h.mode
      w[k] = (w[k] or 0) + 1
    end
    report("rwlock", t.holds, (" (curator r/w %d/%d, zklock r/w %d/%d) "
      .. "write_overlaps=%d cross_read_overlaps=%d"):format(
      w["curator-read"] or 0, w["curator-write"] or 0, w["zklock-read"] or 0, w["zklock-write"] or 0,
      rep.violations, rep.cross_read_overlaps))
    assert.equal(0, rep.interrupted)
    for _, k in ipairs({ "curator-read", "curator-write", "zklock-read", "zklock-write" }) do
      assert.is_true((w[k] or 0) >= 5, "too few holds of kind " .. k)
    end
    assert.equal(0, rep.violations, table.concat(rep.examples, "\n"))
    assert.is_true(rep.cross_read_overlaps > 0, "no Curator read hold overlapped a zklock read hold")
    -- the writers alone, through the shared checker (exclusive among themselves, tokens in order)
    local writes = {}
    for _, h in ipairs(t.holds) do if h.mode == "write" then writes[#writes + 1] = h end end
    local wrep = fw.check(writes, 1)
    assert.equal(0, wrep.violations, table.concat(wrep.examples, "\n"))
    assert.equal(0, wrep.token_violations, table.concat(wrep.examples, "\n"))
    assert.same({}, util.children(c, path))
  end)

  it("semaphore: never more than max leases across Curator and zklock (max 3)", function()
    local path = "/interop/curator/mix-sem"
    local t = mixed({ path = path, recipe = "semaphore", max = 3, hold_ms = 15, hold_min_ms = 3 }, 2, 2, 5)
    local rep = fw.check(t.leases, 3)
    local cross = peers.cross_overlaps(t.leases)
    report("semaphore", t.leases, (" max_overlap=%d over_max=%d cross_runtime_overlaps=%d"):format(
      rep.max_overlap[path] or 0, rep.violations, cross))
    local by = peers.count_by(t.leases, "runtime")
    assert.is_true((by.curator or 0) >= 10 and (by.zklock or 0) >= 10, "too few leases to judge")
    assert.equal(rep.holds, rep.clean)
    assert.equal(0, rep.violations, table.concat(rep.examples, "\n"))
    assert.is_true(rep.max_overlap[path] >= 2, "leases never overlapped: the run proves nothing")
    assert.is_true(cross > 0, "no Curator lease overlapped a zklock lease")
    assert.same({}, util.children(c, path .. "/leases"))
  end)
end)
