-- Shared values and the double barrier with Apache Curator 5.4 (Debian's libcurator-recipes-java)
-- on one real ZooKeeper server, Curator in JVMs driven by spec/support/peers/SharedPeer.java:
--   * SharedCount: Curator's trySetCount loop and zklock's try_set loops increment one count
--     together and the total is exact; each side's listener sees the other's writes;
--   * DistributedAtomicLong: increments from Curator and zklock add up exactly, optimistic only
--     and with the promotion to a mutex at a shared lock path; each reads the other's values;
--   * DistributedDoubleBarrier: Curator and zklock members enter and leave together; with a
--     Curator member killed (kill -9) its node counts until its session expires: a zklock enter
--     that times out removes its own node, the others get through, and their leave waits for
--     the dead member's session to end;
--   * ZooKeeper's own lock recipe (WriteLock, zookeeper-recipes-lock) and client:zookeeper_lock
--     on one directory exclude each other both ways, with WriteLock's listener calls.
--   busted --lua=lua5.4 spec/76-curator-shared_spec.lua
local zklock = require("zklock")
local core = require("zklock.core")
local testing = require("zklock.testing")
local util = require("support.util")
local peers = require("support.peers.peer")

local pack, assert_code = util.pack, util.assert_code

describe("shared values and the double barrier with Apache Curator 5.4 #interop", function()
  local zk, cur, cs

  local function pump(dt) util.drive(cs, dt) end

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    cur = peers.curator_shared(zk.hosts)
    cs = { util.connect(zk.hosts, { identity = "zk-1" }), util.connect(zk.hosts, { identity = "zk-2" }) }
  end)

  teardown(function()
    util.close_all()
    peers.stop_all()
    if zk then zk:stop() end
  end)

  local function ok_reply(r)
    assert.are.equal("ok", r.status, r.text)
    return r.f
  end

  -- run fn(c) in `workers` coroutines on each zklock client while the peer's command runs
  local function together(cmd, args, workers, fn)
    local seq = cur:send(cmd, args)
    local errors = {}
    for _, c in ipairs(cs) do
      for _ = 1, workers do
        c:spawn(function()
          local ok, err = pcall(fn, c)
          if not ok then errors[#errors + 1] = tostring(err) end
        end)
      end
    end
    assert(zklock.run(cs, 180))
    assert.are.same({}, errors)
    return ok_reply(cur:wait(seq, 180, pump))
  end

  -- one increment of a shared count by a try_set loop (true once it took)
  local function count_inc(sc)
    for _ = 1, 1000 do
      local v, ver = assert(sc:get())
      local ok, msg = sc:try_set(v + 1, ver)
      assert(ok ~= nil, msg)
      if ok then return end
    end
    error("1000 lost races in a row")
  end

  it("SharedCount: Curator's trySetCount and zklock's try_set increment one count exactly", function()
    local path = "/interop/shared/count"
    local per, workers = 15, 2
    local f = together("count_add", { path = path, n = 40 }, workers, function(c)
      local sc = c:shared_count(path)
      for _ = 1, per do count_inc(sc) end
    end)
    assert.is_true(tonumber(f.tries) >= 40)
    local want = 40 + #cs * workers * per
    assert.are.equal(want, (cs[1]:shared_count(path):get()))
    f = ok_reply(cur:call("count_get", { path = path }, 30, pump))
    assert.are.equal(want, tonumber(f.value))
    assert.are.equal(want, tonumber(f.version)) -- one write per increment, none lost or doubled
  end)

  it("SharedCount listeners: Curator's sees zklock's writes, zklock's sees Curator's", function()
    local path = "/interop/shared/listen"
    ok_reply(cur:call("count_listen", { id = "L", path = path, seed = 5 }, 30, pump))
    local sc = cs[1]:shared_count(path, 5)
    assert.are.equal(5, (sc:get()))
    local seen = {}
    sc:on_change(function(_, _, v) seen[#seen + 1] = v end)
    util.drive(cs, 0.2)
    assert(sc:set(-77))
    local f
    assert.is_truthy(util.wait_until(function()
      f = ok_reply(cur:call("count_seen", { id = "L" }, 10, pump))
      return tonumber(f.n) >= 1 and tonumber(f.last) == -77
    end, 20, cs))
    ok_reply(cur:call("count_add", { path = path, n = 1 }, 30, pump))
    assert.is_truthy(util.wait_until(function() return seen[#seen] == -76 end, 20, cs))
    sc:close()
  end)

  it("DistributedAtomicLong: Curator and zklock increments add up exactly, optimistic and promoted", function()
    for _, case in ipairs({
      { path = "/interop/shared/long", peer = {}, opts = nil },
      { path = "/interop/shared/long-promoted", peer = { lock = "/interop/shared/long-lock" },
        opts = { retry = zklock.retry.none(), lock = { path = "/interop/shared/long-lock", timeout = 30 } } },
    }) do
      local per, workers = 15, 2
      local args = { path = case.path, n = 40 }
      for k, v in pairs(case.peer) do args[k] = v end
      local unsucceeded = 0
      together("long_add", args, workers, function(c)
        local al = c:atomic_long(case.path, case.opts)
        for _ = 1, per do
          for _ = 1, 200 do
            local r = assert(al:increment())
            if r.succeeded then break end
            unsucceeded = unsucceeded + 1
          end
        end
      end)
      local want = 40 + #cs * workers * per
      assert.are.equal(want, assert(cs[1]:atomic_long(case.path):get()).post, case.path)
      local f = ok_reply(cur:call("long_get", { path = case.path }, 30, pump))
      assert.are.equal(want, tonumber(f.value), case.path)
    end
    -- values both ways, beyond 32 bits and negative
    local al = cs[1]:atomic_long("/interop/shared/long-values")
    assert.is_true(al:force_set(2 ^ 40 + 3))
    local f = ok_reply(cur:call("long_get", { path = "/interop/shared/long-values" }, 30, pump))
    assert.are.equal("1099511627779", f.value)
    ok_reply(cur:call("long_set", { path = "/interop/shared/long-values", value = "-4398046511104" }, 30, pump))
    assert.are.equal(-4398046511104, assert(al:get()).post)
  end)

  -- run barrier members: each { client, barrier, leave_delay } enter(timeout) then leave(timeout)
  it("DistributedDoubleBarrier: Curator and zklock members enter and leave together", function()
    local path = "/interop/shared/barrier"
    for round = 1, 2 do
      local seq = cur:send("enter", { id = "B" .. round, path = path, qty = 3, timeout_ms = 60000 })
      local res, ent = {}, {}
      for i, c in ipairs(cs) do
        local b = c:double_barrier(path, 3)
        c:spawn(function()
          local ok, msg = b:enter(60)
          ent[i] = core.now()
          if not ok then res[i] = msg return end
          c:sleep(0.2 * i)
          ok, msg = b:leave(60)
          res[i] = ok or msg
        end)
      end
      local f = ok_reply(cur:wait(seq, 60, pump))
      assert.are.equal("true", f.entered)
      -- Curator is in; it leaves after the zklock members started leaving
      util.drive_until(cs, function() return ent[1] and ent[2] end, 30)
      local lseq = cur:send("leave", { id = "B" .. round, timeout_ms = 60000 })
      assert(zklock.run(cs, 60))
      assert.is_true(res[1], tostring(res[1]))
      assert.is_true(res[2], tostring(res[2]))
      f = ok_reply(cur:wait(lseq, 60, pump))
      assert.are.equal("true", f.left)
      assert.are.same({}, util.children(cs[1], path), "round " .. round)
    end
  end)

  it("a Curator member killed with kill -9: its node counts until its session ends", function()
    local path = "/interop/shared/barrier-kill"
    local victim = peers.curator_shared(zk.hosts, { session_ms = 6000 })
    -- fresh clients: the JVM's start kept the others unpumped for a while
    cs = { util.connect(zk.hosts, { identity = "zk-k1" }), util.connect(zk.hosts, { identity = "zk-k2" }) }
    local seq = victim:send("enter", { id = "V", path = path, qty = 3 })
    assert.is_truthy(util.wait_until(function() return #util.children(cs[1], path) == 1 end, 30, cs))
    local dead = util.children(cs[1], path)[1]
    os.execute(("kill -9 %d"):format(victim.pid))
    assert.is_truthy(util.wait_until(function() return not victim:alive() end, 10, cs))
    assert.is_nil(victim:reply(seq))
    local killed_at = core.now()
    -- one zklock member: 2 of 3 (the dead node counts): times out, and its own node is gone
    local b1 = cs[1]:double_barrier(path, 3)
    local res = pack(b1:enter(1))
    assert_code("ETIMEDOUT", res)
    assert.are.same({ dead }, util.children(cs[1], path))
    -- two zklock members and the dead one make 3: both are through
    local b2 = cs[2]:double_barrier(path, 3)
    local r = {}
    cs[1]:spawn(function() r[1] = pack(b1:enter(30)) end)
    cs[2]:spawn(function() r[2] = pack(b2:enter(30)) end)
    assert(zklock.run(cs, 30))
    assert.is_true(r[1][1], tostring(r[1][2]))
    assert.is_true(r[2][1], tostring(r[2][2]))
    local through = core.now()
    assert.is_true(through - killed_at < 6000, "the dead member's session ended too early for this check")
    -- their leave waits for the dead member's session to end (about 6 s after the kill)
    cs[1]:spawn(function() r[1] = pack(b1:leave(60)) end)
    cs[2]:spawn(function() r[2] = pack(b2:leave(60)) end)
    assert(zklock.run(cs, 60))
    assert.is_true(r[1][1], tostring(r[1][2]))
    assert.is_true(r[2][1], tostring(r[2][2]))
    assert.is_true(core.now() - killed_at >= 4000, "leave returned before the dead session could end")
    assert.are.same({}, util.children(cs[1], path))
  end)

  it("ZooKeeper's WriteLock and client:zookeeper_lock on one directory exclude each other", function()
    local dir = "/interop/shared/writelock"
    cs = { util.connect(zk.hosts, { identity = "wl-1" }) }
    local c = cs[1]
    local acq, rel = 0, 0
    local lk = c:zookeeper_lock(dir, { on_acquired = function() acq = acq + 1 end,
                                       on_released = function() rel = rel + 1 end })
    assert.are.equal("zookeeper lock", zklock.type(lk))
    -- WriteLock makes its directory but not the parents
    local ok, msg, code = c:create("/interop/shared", "", { parents = true })
    assert(ok or code == "ZNODEEXISTS", msg)
    -- WriteLock holds: zklock waits, and its node goes when it gives up
    local f = ok_reply(cur:call("wl_hold", { id = "A", dir = dir }, 30, pump))
    assert.are.equal("true", f.acquired)
    local java_node = f.node:match("[^/]+$")
    assert.truthy(java_node:match("^x%-%-?%d+%-%d%d%d%d%d%d%d%d%d%d$"), java_node)
    assert_code("ETIMEDOUT", pack(lk:acquire(0.5)))
    assert.are.same({ java_node }, util.children(c, dir))
    assert.are.equal(0, acq)
    -- zklock queues behind it and gets the lock when WriteLock unlocks
    local res
    c:spawn(function() res = pack(lk:acquire(30)) end)
    util.drive(cs, 0.3)
    assert.is_nil(res)
    local mine = util.children(c, dir)[2]
    local dec = assert(require("zklock.internal.recipe").session_decimal(c))
    assert.are.equal("x-" .. dec .. "-", mine:sub(1, #dec + 3))
    f = ok_reply(cur:call("wl_release", { id = "A" }, 30, pump))
    assert.are.equal("1", f.acquired_calls)
    assert.are.equal("1", f.released_calls)
    assert.is_truthy(util.wait_until(function() return res end, 20, cs))
    assert.are.equal(lk, res[1], tostring(res[2]))
    assert.is_true(lk:is_held())
    assert.are.equal(1, acq)
    -- while zklock holds, WriteLock does not get it
    f = ok_reply(cur:call("wl_hold", { id = "B", dir = dir, timeout_ms = 1000 }, 30, pump))
    assert.are.equal("false", f.acquired)
    assert.are.same({ lk:node():match("[^/]+$") }, util.children(c, dir)) -- its node went
    -- a WriteLock waiter gets it when zklock releases, not before
    local seq = cur:send("wl_hold", { id = "C", dir = dir, timeout_ms = 30000 })
    util.drive(cs, 0.5)
    assert.is_nil(cur:reply(seq))
    local released_at = core.now()
    assert.is_true(lk:release())
    assert.are.equal(1, rel)
    f = ok_reply(cur:wait(seq, 30, pump))
    assert.are.equal("true", f.acquired)
    assert.is_true(tonumber(f.at) >= released_at - 1)
    ok_reply(cur:call("wl_release", { id = "C" }, 30, pump))
    assert.are.same({}, util.children(c, dir))
  end)
end)
