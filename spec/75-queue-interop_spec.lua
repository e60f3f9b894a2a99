-- Queue interop on one real ZooKeeper server, one queue path shared by three implementations:
-- zklock (client:queue, in worker processes), Apache Curator 5.4's SimpleDistributedQueue and
-- ZooKeeper 3.8's queue recipe (org.apache.zookeeper.recipes.queue.DistributedQueue), the Java
-- ones in spec/support/peers/QueuePeer.java.
--   * FIFO across implementations: what one puts, a single consumer of another takes in order;
--   * 3,000 items put by all three, taken by competing consumers of all three while one of each
--     is killed with kill -9 (and replaced): a checker over every process's log finds no item
--     taken twice and no item lost beyond the allowed gap.
-- The allowed gap, precisely: taking an item is deleting its node; a consumer logs the item after
-- its take returned. A consumer killed between the delete and the log line takes the item with
-- it, and at most one item per concurrent take of a killed consumer can go so (zklock workers
-- run `cos` takes at once, the Java consumers one). No other loss is allowed: every item put and
-- not logged as taken must be within that bound, and the queue must be empty at the end.
--   busted --lua=lua5.4 spec/75-queue-interop_spec.lua
local testing = require("zklock.testing")
local util = require("support.util")
local qp = require("support.queue_peers")

describe("queue interop with Curator's SimpleDistributedQueue and ZooKeeper's queue recipe #interop", function()
  local zk, c

  setup(function()
    zk = testing.server{}
    c = util.connect(zk.hosts)
    -- ZooKeeper's recipe creates a missing queue node, but not its parents
    assert(c:create("/iq", ""))
  end)

  teardown(function()
    qp.stop_all()
    util.close_all()
    if zk then zk:stop() end
  end)

  -- wait for processes to end, driving the spec's client meanwhile (its session stays up)
  local function wait_procs(procs, timeout)
    for _, p in ipairs(procs) do
      local deadline = util.now() + timeout
      while p:alive() and util.now() < deadline do util.drive({ c }, 0.05) end
      assert(not p:alive(), p.name .. " did not finish:\n" .. p:output())
      local t = p:log()
      assert(#t.errors == 0 and t.done, p.name .. " failed: " .. table.concat(t.errors, "; ") .. "\n" .. p:output())
    end
  end

  it("FIFO across implementations: zklock -> Curator, zklock -> ZooKeeper's recipe, both -> zklock", function()
    local N = 30
    for _, impl in ipairs({ "curator", "jar" }) do
      local path = "/iq/fifo-" .. impl
      local q = c:queue(path)
      local sent = {}
      for i = 1, N do
        sent[i] = "z" .. impl .. "-" .. i
        assert(q:put(sent[i]))
      end
      local stop = os.tmpname()
      local cons = qp.java(impl, "consume", zk.hosts, path, { poll = 1, stop = stop })
      assert(util.wait_until(function() return #cons:log().takes == N end, 60, { c }), cons:output())
      wait_procs({ cons }, 90)
      os.remove(stop)
      assert.are.same(sent, cons:log().takes, impl .. " consumer takes in sequence order")
      local prod = qp.java(impl, "produce", zk.hosts, path, { count = N, prefix = impl })
      wait_procs({ prod }, 90)
      local want = prod:log().puts
      assert.are.equal(N, #want)
      local got = {}
      for i = 1, N do got[i] = assert(q:take(5)) end
      assert.are.same(want, got, "zklock takes " .. impl .. "'s items in put order")
      assert.are.equal(0, q:size())
    end
  end)

  it("3,000 items, competing consumers of all three killed with kill -9 mid-run: none twice, none lost", function()
    local path = "/iq/mixed"
    local PER = 1000
    -- every consumer "works" this long on each item, so that the Java consumers (which list and
    -- walk the children for every take) are not starved by zklock's (one round trip per take)
    local WORK_MS = 5
    local procs, consumers = {}, {}
    local stop = os.tmpname()
    os.remove(stop)
    -- ZooKeeper's recipe creates a missing queue node on put, but two of its producers racing
    -- to do so fail with NodeExists: make it first
    assert(c:create(path, ""))
    local t0 = util.now()
    local function trace(fmt, ...) -- ZKL_QUEUE_TRACE=1: print the run's milestones
      if os.getenv("ZKL_QUEUE_TRACE") then print(("%.1f s: " .. fmt):format(util.now() - t0, ...)) end
    end
    local function consumer(kind, cos)
      local p
      if kind == "zklock" then
        p = qp.lua("consume", zk.hosts, path, { cos = cos, poll = 1, stop = stop, work_ms = WORK_MS })
        p.cos = cos
      else
        p = qp.java(kind, "consume", zk.hosts, path, { poll = 1, stop = stop, work_ms = WORK_MS })
      end
      procs[#procs + 1], consumers[#consumers + 1] = p, p
      return p
    end
    -- the slowest competitors (the Java recipes list and walk the children for every take) are
    -- killed first, while they still get items
    local victims = { consumer("jar"), consumer("curator"), consumer("zklock", 2) }
    consumer("zklock", 2)
    -- the producers start once every consumer is connected, so that all compete from the start
    assert(util.wait_until(function()
      for _, p in ipairs(consumers) do if not p:log().ready then return false end end
      return true
    end, 120, { c }), "consumers did not connect")
    local producers = {
      qp.lua("produce", zk.hosts, path, { count = PER, prefix = "zkl", cos = 4 }),
      qp.java("curator", "produce", zk.hosts, path, { count = PER, prefix = "cur", threads = 4 }),
      qp.java("jar", "produce", zk.hosts, path, { count = PER, prefix = "jar", threads = 4 }),
    }
    for _, p in ipairs(producers) do procs[#procs + 1] = p end

    local function taken()
      local n = 0
      for _, p in ipairs(consumers) do n = n + #p:log().takes end
      return n
    end
    -- kill -9 one consumer of each runtime at 2/15, 4/15 and 6/15 of the items taken, and start
    -- a fresh consumer of the same runtime in its place
    local kills, kill_at = 0, {}
    for i, v in ipairs(victims) do
      local goal = i * PER * 2 / 5
      local deadline = util.now() + 120
      while taken() < goal do
        assert(util.now() < deadline, ("only %d items taken (waiting for %d)"):format(taken(), goal))
        assert(v:alive(), v.name .. " ended early: " .. table.concat(v:log().errors, "; ") .. "\n" .. v:output())
        util.drive({ c }, 0.02)
      end
      -- preferably once the victim has taken items itself (up to 10 s more)
      local until_t = util.now() + 10
      while #v:log().takes == 0 and util.now() < until_t and v:alive() do util.drive({ c }, 0.02) end
      local at = taken()
      assert(v:kill())
      kill_at[#kill_at + 1] = at
      trace("killed %s at %d taken", v.name, taken())
      kills = kills + 1
      consumer(v.name:match("^zklock") and "zklock" or v.name:match("^(%w+)"), 2)
    end
    wait_procs(producers, 180)
    trace("producers done, %d taken", taken())
    -- all put: the consumers end once a take finds nothing after this
    assert(io.open(stop, "w")):close()
    for _, p in ipairs(consumers) do
      if not p.killed then wait_procs({ p }, 180) end
    end
    os.remove(stop)
    local r = qp.check(procs)
    local per = {}
    for _, x in ipairs(r.per) do
      per[#per + 1] = ("%s%s=%d"):format(x.name, x.killed and "(killed)" or "", x.takes)
    end
    print(("\nqueue interop (%.1f s): %d items put, %d taken by %d consumers (%s), %d killed (at %s taken),"
      .. " lost %d (allowed %d), duplicates %d"):format(util.now() - t0, r.puts, r.takes, #consumers,
      table.concat(per, " "), r.killed, table.concat(kill_at, "/"), #r.lost, r.allowed, #r.duplicates))
    assert.are.equal(3 * PER, r.puts)
    assert.are.equal(3, kills)
    for _, at in ipairs(kill_at) do assert.is_true(at < 3 * PER, "a kill came after the last take") end
    assert.are.same({}, r.duplicates, "items taken twice")
    assert.are.same({}, r.unknown, "items taken that nobody put")
    assert.is_true(#r.lost <= r.allowed, ("%d items lost, more than the %d the killed consumers may hold: %s")
      :format(#r.lost, r.allowed, table.concat(r.lost, " ", 1, math.min(#r.lost, 20))))
    assert.are.equal(0, c:queue(path):size(), "items left in the queue")
    -- every runtime consumed
    local by = { zklock = 0, curator = 0, jar = 0 }
    for _, x in ipairs(r.per) do
      local k = x.name:match("^(%w+)")
      by[k] = by[k] + x.takes
    end
    for k, n in pairs(by) do assert.is_true(n > 0, k .. " consumers took nothing") end
  end)
end)
