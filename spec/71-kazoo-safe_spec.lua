-- Interop with Kazoo 2.8 (Debian's python3-kazoo) on the same ZooKeeper and lock paths (issue 4),
-- and which Kazoo settings are safe next to zklock (docs: /work/shared/docs/wire-format.md §2).
--
-- One ZooKeeper and one Kazoo process (spec/support/peers/kazoo_peer.py) serve the file; the last
-- block also starts the Curator JVM (spec/support/peers/CuratorPeer.java) for three-way cases.
-- Tests tagged #evidence demonstrate an UNSAFE setting: they pass when the failure (an overlap, a
-- deadlock, an exceeded lease count, an error) is observed, so that a change of behaviour in a
-- peer shows up. Everything else asserts safety:
--   SAFE    Lock(extra_lock_patterns=["-lock-"])                   vs zklock mutex
--   SAFE    WriteLock(extra_lock_patterns=["__WRIT__","__READ__"])  vs zklock rwlock
--   UNSAFE  Lock / WriteLock / ReadLock without extra_lock_patterns (they ignore zklock's nodes),
--           and WriteLock with "__WRIT__" alone (it ignores zklock's readers)
--   UNSAFE  ReadLock(["__WRIT__"]) in 2.8: excludes correctly, but deadlocks with a writer that
--           queues after it (kazoo#649)
--   UNSAFE  Semaphore on a zklock/Curator semaphore path (other layout): more than max leases
--   CAVEAT  a long-lived Kazoo lock object on a parent zklock created (a container): NoNodeError
--           once the server reaps the empty container
--   UNSAFE  any Kazoo lock with Curator on the same path (Curator ignores "__lock__" names), unless
--           the Kazoo lock *creates* "-lock-" names (subclass, private _NODE_NAME): SAFE three-way
-- This file: the settings that are safe next to zklock, and ReadLock's.
--   busted --lua=lua5.4 spec/71-kazoo-safe_spec.lua            (about 20 s)
--   busted --lua=luajit --run=luajit spec/71-kazoo-safe_spec.lua
-- Shared fixture and helpers: spec/support/kazoo.lua.
local util = require("support.util")
local fw = require("support.fault_worker")
local peers = require("support.peers.peer")

local H = require("support.kazoo")
local kazoo_fixture = H.kazoo_fixture

local now, names, KAZOO_NODE, KAZOO_RNODE = H.now, H.names, H.KAZOO_NODE, H.KAZOO_RNODE
local MUTEX_SAFE, WRITE_SAFE, READ_PATTERNS = H.MUTEX_SAFE, H.WRITE_SAFE, H.READ_PATTERNS

describe("interop with Kazoo 2.8: safe settings #interop", function()
  local kz, c
  local fx = kazoo_fixture(function(f) kz, c = f.kz, f.c end)
  local pump, kcall, mixed = fx.pump, fx.kcall, fx.mixed

  it("the peer runs Kazoo 2.8 and reads the same monotonic clock as zklock", function()
    local before = now()
    local r = kcall("ping", {})
    local after = now()
    assert.equal("ok", r.status, r.text)
    assert.equal("2.8.0", r.f.version)
    local t = assert(tonumber(r.f.now))
    assert.is_true(before - 1 <= t and t <= after + 1,
      ("clocks differ: zklock %.3f..%.3f, Kazoo %.3f"):format(before, after, t))
  end)

  describe("SAFE: Lock(extra_lock_patterns=[\"-lock-\"]) vs zklock mutex", function()
    it("each runtime waits for the other's holder and sees its node", function()
      local path = "/interop/kazoo/mutex-visible"
      local m = c:mutex(path)
      assert.truthy(m:acquire(5))
      local zk_node = m:node()
      local p = kcall("participants", { recipe = "lock", patterns = MUTEX_SAFE, path = path })
      assert.same({ util.basename(zk_node) }, names(p.f.list))

      local hs = kz:send("hold", { id = "k1", recipe = "lock", patterns = MUTEX_SAFE, path = path, timeout_ms = 20000 })
      assert.truthy(util.wait_until(function()
        local q = m:participants()
        return q and #q == 2
      end, 10, { c }), "Kazoo's node did not appear")
      util.drive({ c }, 0.4)
      assert.is_nil(kz:reply(hs), "Kazoo acquired while zklock held the mutex")
      local parts = assert(m:participants())
      assert.equal(zk_node, parts[1].path)
      assert.truthy(parts[2].node:match(KAZOO_NODE), parts[2].node)
      assert.equal("kazoo-" .. kz.ready.f.pid, parts[2].data) -- Kazoo's identifier
      local released = now()
      assert.truthy(m:release())
      local h = kz:wait(hs, 10, pump)
      assert.equal("ok", h.status, h.text)
      assert.equal(parts[2].path, h.f.node)
      assert.is_true(tonumber(h.f.start) >= released)

      -- zklock waits for the Kazoo holder (zklock counts "__lock__" nodes by their sequence)
      local m2 = c:mutex(path)
      local ok, _, code = m2:acquire(0)
      assert.is_nil(ok)
      assert.equal("ETIMEDOUT", code)
      local rs = kz:send("release", { id = "k1" })
      assert.truthy(m2:acquire(10))
      local granted = now()
      local rr = kz:wait(rs, 10, pump)
      assert.is_true(granted >= tonumber(rr.f["end"]), "zklock was granted before Kazoo's hold ended")
      assert.is_true(m2:token() > tonumber(h.f.czxid))
      assert.truthy(m2:release())
    end)

    it("2 Kazoo threads + 2 zklock processes x 10 coroutines never overlap; FIFO across runtimes", function()
      local path = "/interop/kazoo/mix-mutex"
      -- a persistent parent, as Kazoo's ensure_path makes it (see the container test below)
      assert.truthy(c:create(path, "", { parents = true }))
      local t = mixed({ path = path, kazoo_recipe = "lock", patterns = MUTEX_SAFE, zklock_recipe = "mutex",
                        hold_ms = 4 }, 2, 2, 10)
      local by = peers.count_by(t.holds, "runtime")
      local rep = fw.check(t.holds, 1)
      local fifo = peers.fifo(t.holds)
      print(("\n  [kazoo mutex] holds: kazoo=%d zklock=%d overlaps=%d token_violations=%d fifo_violations=%d "
        .. "runtime_switches=%d"):format(
        by.kazoo or 0, by.zklock or 0, rep.violations, rep.token_violations, fifo.violations, fifo.switches))
      assert.is_true((by.kazoo or 0) >= 20 and (by.zklock or 0) >= 100, "too few holds to judge")
      assert.equal(rep.holds, rep.clean)
      assert.equal(0, rep.violations, table.concat(rep.examples, "\n"))
      assert.equal(0, rep.token_violations, table.concat(rep.examples, "\n"))
      assert.equal(0, fifo.violations, table.concat(fifo.examples, "\n"))
      assert.is_true(fifo.switches >= 20)
      assert.same({}, util.children(c, path))
    end)
  end)

  describe("SAFE: WriteLock(extra_lock_patterns=[\"__WRIT__\",\"__READ__\"]) vs zklock rwlock", function()
    it("a Kazoo writer waits for zklock readers and zklock waits for the Kazoo writer", function()
      local path = "/interop/kazoo/rw-visible"
      local rw = c:rwlock(path)
      assert.truthy(rw.read:acquire(5))
      local t = kcall("hold", { id = "w0", recipe = "wlock", patterns = WRITE_SAFE, path = path, timeout_ms = 0 })
      assert.equal("timeout", t.status, "Kazoo's writer entered while a zklock reader held: " .. t.text)

      local ws = kz:send("hold", { id = "w1", recipe = "wlock", patterns = WRITE_SAFE, path = path,
                                   timeout_ms = 20000 })
      assert.truthy(util.wait_until(function()
        local q = rw.read:participants()
        return q and #q == 2
      end, 10, { c }), "Kazoo's write node did not appear")
      -- a later zklock reader queues behind the Kazoo writer: zklock counts "__lock__" as a writer
      local other = c:rwlock(path)
      local ok, _, code = other.read:acquire(0)
      assert.is_nil(ok)
      assert.equal("ETIMEDOUT", code)
      util.drive({ c }, 0.3)
      assert.is_nil(kz:reply(ws), "Kazoo's writer entered while a zklock reader held")
      local released = now()
      assert.truthy(rw.read:release())
      local h = kz:wait(ws, 10, pump)
      assert.equal("ok", h.status, h.text)
      assert.is_true(tonumber(h.f.start) >= released)
      assert.is_nil((other.read:acquire(0)))
      assert.is_nil((other.write:acquire(0)))
      local rs = kz:send("release", { id = "w1" })
      assert.truthy(other.write:acquire(10))
      local granted = now()
      assert.is_true(granted >= tonumber(kz:wait(rs, 10, pump).f["end"]))
      assert.truthy(other.write:release())
      assert.same({}, util.children(c, path))
    end)

    it("2 Kazoo writer threads + 2 zklock processes x 10 reader/writer coroutines: writers exclude everyone", function()
      local path = "/interop/kazoo/mix-rw"
      assert.truthy(c:create(path, "", { parents = true }))
      local t = mixed({ path = path, kazoo_recipe = "wlock", patterns = WRITE_SAFE, zklock_recipe = "rwmix",
                        write_pct = 20, hold_ms = 6, hold_min_ms = 1 }, 2, 2, 10)
      local rep = peers.check_rw(t.holds)
      local w = {}
      for _, h in ipairs(t.holds) do w[h.runtime .. "-" .. h.mode] = (w[h.runtime .. "-" .. h.mode] or 0) + 1 end
      local kz_vs_read = peers.cross_overlaps(t.holds, "write", "read")
      print(("\n  [kazoo rwlock] holds: kazoo write=%d zklock read=%d write=%d write_overlaps=%d"):format(
        w["kazoo-write"] or 0, w["zklock-read"] or 0, w["zklock-write"] or 0, rep.violations))
      assert.is_true((w["kazoo-write"] or 0) >= 10 and (w["zklock-read"] or 0) >= 50 and (w["zklock-write"] or 0) >= 10)
      assert.equal(0, rep.interrupted)
      assert.equal(0, rep.violations, table.concat(rep.examples, "\n"))
      assert.equal(0, kz_vs_read)
      assert.same({}, util.children(c, path))
    end)
  end)

  describe("Kazoo ReadLock", function()
    it("with extra_lock_patterns=[\"__WRIT__\"] shares with zklock readers and waits for zklock writers", function()
      local path = "/interop/kazoo/rlock"
      local rw = c:rwlock(path)
      assert.truthy(rw.read:acquire(5))
      local r = kcall("hold", { id = "r1", recipe = "rlock", patterns = READ_PATTERNS, path = path, timeout_ms = 0 })
      assert.equal("ok", r.status, r.text)
      assert.truthy(util.basename(r.f.node):match(KAZOO_RNODE))
      assert.equal("ok", kcall("release", { id = "r1" }).status)
      assert.truthy(rw.read:release())
      assert.truthy(rw.write:acquire(5))
      r = kcall("hold", { id = "r2", recipe = "rlock", patterns = READ_PATTERNS, path = path, timeout_ms = 0 })
      assert.equal("timeout", r.status, "Kazoo's reader entered while a zklock writer held: " .. r.text)
      assert.truthy(rw.write:release())
    end)

    it("UNSAFE (evidence, kazoo#649): with the patterns, 2.8 deadlocks with a zklock writer queued after it "
       .. "#evidence", function()
      local path = "/interop/kazoo/rlock-deadlock"
      local w1 = c:rwlock(path)
      assert.truthy(w1.write:acquire(5))
      -- the Kazoo reader queues behind zklock writer 1 ...
      local rs = kz:send("hold", { id = "r", recipe = "rlock", patterns = READ_PATTERNS, path = path,
                                   timeout_ms = 3000 })
      assert.truthy(util.wait_until(function()
        local q = w1.write:participants()
        return q and #q == 2
      end, 10, { c }))
      -- ... and zklock writer 2 queues behind the Kazoo reader
      local w2 = c:rwlock(path)
      local w2_at, w2_err
      c:spawn(function()
        local ok, err = w2.write:acquire(10)
        if ok then w2_at = now(); w2.write:release() else w2_err = err end
      end)
      assert.truthy(util.wait_until(function()
        local q = w1.write:participants()
        return q and #q == 3
      end, 10, { c }))
      local released = now()
      assert.truthy(w1.write:release()) -- the only writer ahead of the reader is gone
      local r = kz:wait(rs, 10, pump)
      -- Kazoo 2.8's reader now waits for the *later* writer, which waits for the reader: it times
      -- out (without a timeout it would wait forever) although no earlier writer holds.
      assert.equal("timeout", r.status, "Kazoo's reader got the lock (fixed Kazoo?): " .. r.text)
      assert.truthy(util.wait_until(function() return w2_at or w2_err end, 10, { c }))
      assert.is_nil(w2_err)
      print(("\n  [kazoo#649] writer released at %.0f; Kazoo reader gave up after %s ms; "
        .. "zklock writer 2 granted %.0f ms after the release"):format(
        released, r.f.waited, w2_at - released))
      assert.is_true(w2_at - released > 1500, "zklock writer 2 was not held up by the deadlock")
    end)
  end)
end)
