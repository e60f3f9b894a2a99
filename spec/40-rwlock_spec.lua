-- The read-write lock (Curator InterProcessReadWriteLock) against real ZooKeeper servers: one server
-- per describe block, stopped in teardown. Runs under Lua 5.4 and LuaJIT (tests tagged #lua54 are
-- 5.4 only).
--   busted --lua=lua5.4 spec/40-rwlock_spec.lua
--   busted --lua=luajit --run=luajit spec/40-rwlock_spec.lua
--
-- Test catalogue: RW-01 (readers share), RW-02/RW-09 (writer excludes; interval checker),
-- RW-03 (upgrade refused), RW-04/RW-05/RW-06 (downgrade), RW-07/RW-08 (FIFO, no writer
-- starvation), RW-10 (participants), RE-01/RE-02 (reentrancy per coroutine), HE-01 (herd).
local zklock = require("zklock")
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")

local UUID = "%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x"
local SEQ10 = ("%d"):rep(10)
local READ_NODE = "^_c_" .. UUID .. "%-__READ__" .. SEQ10 .. "$"
local WRITE_NODE = "^_c_" .. UUID .. "%-__WRIT__" .. SEQ10 .. "$"

local REQUEST_KEYS = { "creates", "lists", "gets", "deletes", "exists", "ops", "acquired" }

local pack, assert_code = util.pack, util.assert_code

-- "_c_<uuid>-__WRIT__0000000007" -> "0000000007"
local function seq10(name)
  return name:match("(%d%d%d%d%d%d%d%d%d%d)$")
end

local function uuid_of(name)
  return name:match("^_c_(" .. UUID .. ")%-")
end

-- Union of overlapping reader intervals: a writer that overlaps any reader overlaps the epoch
-- that contains it, so "writers and epochs never overlap" (capacity 1) is "a write hold overlaps
-- nothing". Touching intervals do not overlap (as in fw.check).
local function reader_epochs(reads)
  local sorted = {}
  for i, h in ipairs(reads) do sorted[i] = h end
  table.sort(sorted, function(a, b) return a.start < b.start end)
  local epochs, cur = {}, nil
  for _, h in ipairs(sorted) do
    if cur and h.start < cur.finish then
      if h.finish > cur.finish then cur.finish = h.finish end
      cur.n = cur.n + 1
    else
      cur = { key = "rw", owner = "readers", start = h.start, finish = h.finish, n = 1 }
      epochs[#epochs + 1] = cur
    end
  end
  return epochs
end

-- The write holds and the reader epochs together must never overlap (capacity 1).
local function check_rw(writes, reads)
  local all = {}
  for _, h in ipairs(writes) do
    all[#all + 1] = { key = "rw", owner = h.owner, start = h.start, finish = h.finish, token = h.token }
  end
  for _, e in ipairs(reader_epochs(reads)) do all[#all + 1] = e end
  local r = fw.check(all, 1)
  local readers = fw.check(reads, math.huge)
  return r, readers.max_overlap.rw or 0
end

describe("rwlock", function()
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() util.close_all() if zk then zk:stop() end end)
  after_each(util.close_all)

  local function connect(identity)
    return util.connect(zk.hosts, { identity = identity })
  end

  ------------------------------------------------------------------ names and sharing

  it("read and write nodes carry Curator's names: _c_<uuid>-__READ__<seq10> / __WRIT__", function()
    local c = connect("names")
    local path = "/rw/names"
    local rw = c:rwlock(path)
    assert.are.equal(path, rw.path)
    assert.are.equal("read lock", zklock.type(rw.read))
    assert.are.equal("write lock", zklock.type(rw.write))
    assert.are.equal(rw.read, rw.read:acquire(5))
    local rname = util.basename(rw.read:node())
    assert.matches(READ_NODE, rname)
    assert.are.equal(path .. "/" .. rname, rw.read:node())
    assert.is_true(rw.read:release())
    assert.are.equal(rw.write, rw.write:acquire(5))
    local wname = util.basename(rw.write:node())
    assert.matches(WRITE_NODE, wname)
    local data, stat = c:get(rw.write:node())
    assert.are.equal("names", data)
    assert.are.equal(c:session(), stat.ephemeral_owner)
    assert.are.equal(rw.write:token(), stat.czxid)
    assert.is_true(rw.write:release())
    assert.are.same({}, util.children(c, path))
  end)

  it("N readers hold together across 2 clients; a writer cannot enter until all have left", function()
    local a, b, w = connect("ra"), connect("rb"), connect("writer")
    local path = "/rw/share"
    local N = 10
    local inside, max_inside, granted, done = 0, 0, 0, 0
    local release_now, last_left = false, 0
    for _, c in ipairs({ a, b }) do
      local rw = c:rwlock(path)            -- one object per client, five coroutines on it
      for _ = 1, N / 2 do
        c:spawn(function()
          assert(rw.read:acquire(10))
          granted = granted + 1
          inside = inside + 1
          if inside > max_inside then max_inside = inside end
          for _ = 1, 1000 do                 -- stay until told (bounded)
            if release_now then break end
            c:sleep(0.01)
          end
          inside = inside - 1
          last_left = math.max(last_left, util.now())  -- before release is called
          assert(rw.read:release())
          done = done + 1
        end)
      end
    end
    assert.is_true(util.wait_until(function() return granted == N end, 10, { a, b, w }),
      ("only %d of %d readers got the read lock while the others held it"):format(granted, N))
    assert.are.equal(N, max_inside)
    assert.are.equal(N, inside)
    local names = util.children(w, path)
    assert.are.equal(N, #names)
    for _, name in ipairs(names) do assert.matches(READ_NODE, name) end

    -- participants: all ten, each with its client's identity
    local rww = w:rwlock(path)
    local p = assert(rww.read:participants())
    assert.are.equal(N, #p)
    local by_id = {}
    for i, e in ipairs(p) do
      by_id[e.data] = (by_id[e.data] or 0) + 1
      assert.are.equal(path .. "/" .. e.node, e.path)
      assert.are.equal(tonumber(seq10(e.node)), e.sequence)
      if i > 1 then assert.is_true(e.sequence > p[i - 1].sequence) end
    end
    assert.are.same({ ra = 5, rb = 5 }, by_id)

    -- a third client's writer: try-once fails at once, a timed one times out, nothing left behind
    assert_code("ETIMEDOUT", pack(rww.write:acquire(0)), "try-write while readers hold")
    assert_code("ETIMEDOUT", pack(rww.write:acquire(0.2)), "timed write while readers hold")
    assert.is_true(util.wait_until(function() return #util.children(w, path) == N end, 2, { a, b, w }),
      "the writer's node was not removed")
    -- ... while a late reader still joins at once
    assert.are.equal(rww.read, rww.read:acquire(0))
    assert.is_true(rww.read:release())

    -- a writer queued now gets in only after the last reader left
    local wres, w_at
    w:spawn(function()
      wres = pack(rww.write:acquire(20))
      w_at = util.now()
      assert(rww.write:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(w, path) == N + 1 end, 3, { a, b, w }))
    release_now = true
    assert.is_true(util.wait_until(function() return wres ~= nil end, 10, { a, b, w }))
    assert.are.equal(rww.write, wres[1], tostring(wres[2]))
    assert.is_true(zklock.run({ a, b, w }, 5))
    assert.are.equal(N, done)
    assert.is_true(w_at >= last_left, "the writer got in before every reader had released")
    assert.is_true(zklock.run({ a, b, w }, 5))
    assert.are.same({}, util.children(w, path))
  end)

  ------------------------------------------------------------------ exclusion

  it("a writer excludes readers and writers: interval checker over 24 coroutines, exact counter", function()
    local clients = { connect("x1"), connect("x2"), connect("x3") }
    local path = "/rw/exclusion"
    local writes, reads, errors = {}, {}, {}
    local counter, write_holds = 0, 0
    local ROUNDS = 8
    for ci, c in ipairs(clients) do
      local rw = c:rwlock(path)
      for k = 1, 8 do
        c:spawn(function()
          local r = fw.rng(ci * 100 + k)
          for round = 1, ROUNDS do
            local owner = ("c%d/co%d/r%d"):format(ci, k, round)
            if r() < 0.3 then
              assert(rw.write:acquire(30))
              local h = { key = "rw", owner = owner, start = core.now(), token = rw.write:token() }
              local v = counter         -- read, yield, write: anyone else inside loses an update
              c:sleep(r() * 0.003)
              counter = v + 1
              write_holds = write_holds + 1
              h.finish = core.now()
              writes[#writes + 1] = h
              assert(rw.write:release())
            else
              assert(rw.read:acquire(30))
              local h = { key = "rw", owner = owner, start = core.now() }
              local v = counter
              c:sleep(r() * 0.003)
              if counter ~= v then
                errors[#errors + 1] = ("%s saw the counter change from %d to %d while reading"):format(owner, v, counter)
              end
              h.finish = core.now()
              reads[#reads + 1] = h
              assert(rw.read:release())
            end
            if r() < 0.3 then c:sleep(r() * 0.002) end
          end
        end)
      end
    end
    assert.is_true(zklock.run(clients, 45))
    assert.are.same({}, errors)
    assert.are.equal(3 * 8 * ROUNDS, #writes + #reads)
    assert.is_true(#writes >= 10, "too few writes to mean anything: " .. #writes)
    assert.are.equal(#writes, write_holds)
    assert.are.equal(write_holds, counter, "lost updates: two writers were inside at once")
    local report, max_readers = check_rw(writes, reads)
    assert.are.equal(0, report.violations, table.concat(report.examples, "\n"))
    assert.are.equal(0, report.token_violations, table.concat(report.examples, "\n"))
    assert.is_true(max_readers > 1, "readers never shared the lock")
    assert.are.same({}, util.children(clients[1], path))
  end)

  it("the checker used above does see a reader inside a write hold (self-test)", function()
    local writes = { { key = "rw", owner = "w", start = 10, finish = 20 } }
    local reads = { { key = "rw", owner = "r1", start = 0, finish = 12 }, { key = "rw", owner = "r2", start = 1, finish = 5 } }
    local report, max_readers = check_rw(writes, reads)
    assert.are.equal(1, report.violations)
    assert.are.equal(2, max_readers)
    reads[1].finish = 10 -- touching is not overlapping
    report = check_rw(writes, reads)
    assert.are.equal(0, report.violations)
    report = check_rw({ writes[1], { key = "rw", owner = "w2", start = 19, finish = 25 } }, {})
    assert.are.equal(1, report.violations)
  end)

  ------------------------------------------------------------------ order

  it("FIFO: a writer queued before later readers goes first; readers after it wait for it", function()
    local h, r1, w2, r2 = connect("holder"), connect("r1"), connect("w2"), connect("r2")
    local all = { h, r1, w2, r2 }
    local path = "/rw/fifo"
    local rwh, rw1, rww, rw2 = h:rwlock(path), r1:rwlock(path), w2:rwlock(path), r2:rwlock(path)

    -- RW-08: a reader holds, a writer queues behind it, a later reader may not join the reader
    assert(rwh.read:acquire(5))
    local blocked
    w2:spawn(function() blocked = pack(rww.write:acquire(0.5)) end)
    assert.is_true(util.wait_until(function() return #util.children(h, path) == 2 end, 3, all))
    assert_code("ETIMEDOUT", pack(rw2.read:acquire(0)), "a reader behind a queued writer (try-once)")
    assert.is_true(util.wait_until(function() return blocked ~= nil end, 3, all))
    assert_code("ETIMEDOUT", blocked, "the writer behind a reader")
    assert.is_true(rwh.read:release())
    assert.is_true(util.wait_until(function() return #util.children(h, path) == 0 end, 2, all))

    -- RW-07: write held; then R1, W2, R2 queue (each once the previous is in the queue)
    assert(rwh.write:acquire(5))
    local log = {}
    local function waiter(c, lock, tag)
      c:spawn(function()
        assert(lock:acquire(20))
        log[#log + 1] = tag .. "+"
        local p = assert(lock:participants())
        log[#log + 1] = "head=" .. p[1].node:match("__(%u+)__")
        c:sleep(0.05)
        log[#log + 1] = tag .. "-"
        assert(lock:release())
      end)
    end
    local order = {}
    for i, step in ipairs({ { r1, rw1.read, "R1" }, { w2, rww.write, "W2" }, { r2, rw2.read, "R2" } }) do
      waiter(step[1], step[2], step[3])
      assert.is_true(util.wait_until(function() return #util.children(h, path) == i + 1 end, 3, all),
        step[3] .. " did not queue")
    end
    for _, name in ipairs(util.children(h, path)) do order[#order + 1] = name:match("__(%u+)__") end
    assert.are.same({ "WRIT", "READ", "WRIT", "READ" }, order)
    util.drive(all, 0.1)
    assert.are.same({}, log)                          -- nobody enters while the writer holds
    assert.is_true(rwh.write:release())
    assert.is_true(zklock.run(all, 20))
    assert.are.same({ "R1+", "head=READ", "R1-", "W2+", "head=WRIT", "W2-", "R2+", "head=READ", "R2-" }, log)
    assert.are.same({}, util.children(h, path))
  end)

  ------------------------------------------------------------------ downgrade and upgrade

  it("downgrade: the write holder takes the read lock at once, one create and no listing", function()
    local c = connect("dg")
    local path = "/rw/downgrade"
    local rw = c:rwlock(path)
    assert(rw.write:acquire(5))
    local wname = util.basename(rw.write:node())
    local before = c:stats()
    local t0 = util.now()
    assert.are.equal(rw.read, rw.read:acquire(0))     -- try-once is enough: granted on create
    assert.is_true(util.now() - t0 < 1)
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(1, d.creates, util.format_stats(d))
    assert.are.equal(0, d.lists, util.format_stats(d))
    assert.are.equal(0, d.gets, util.format_stats(d))
    assert.is_true(rw.read:is_held() and rw.write:is_held())
    local rname = util.basename(rw.read:node())
    assert.matches(READ_NODE, rname)
    assert.are.equal(seq10(wname), seq10(rname))      -- the writer's sequence, not a new one
    assert.are_not.equal(uuid_of(wname), uuid_of(rname))
    local _, stat = c:get(rw.read:node())
    assert.are.equal(c:session(), stat.ephemeral_owner)
    assert.is_true(rw.write:release())
    assert.is_true(rw.read:is_held())
    assert.is_false(rw.write:is_held())
    assert.are.same({ rname }, util.children(c, path))
    assert.is_true(rw.read:release())
    assert.are.same({}, util.children(c, path))
  end)

  it("downgrade with a queued writer: the writer never gets in while the downgraded read is held", function()
    local a, b, r = connect("T1"), connect("T2"), connect("R3")
    local all = { a, b, r }
    local path = "/rw/downgrade-queued"
    local rwa, rwb, rwr = a:rwlock(path), b:rwlock(path), r:rwlock(path)
    assert(rwa.write:acquire(5))
    local wname = util.basename(rwa.write:node())
    local t2 = {}
    b:spawn(function()
      t2.res = pack(rwb.write:acquire(20))
      t2.start = core.now()
      t2.node = util.basename(rwb.write:node())
      b:sleep(0.02)
      t2.finish = core.now()
      assert(rwb.write:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(a, path) == 2 end, 3, all))
    local w2name = util.children(a, path)[2]
    assert.matches(WRITE_NODE, w2name)
    -- a reader queued behind the waiting writer (it must keep waiting for that writer too)
    local r3 = {}
    r:spawn(function()
      r3.res = pack(rwr.read:acquire(20))
      r3.start = core.now()
      r3.finish = core.now()
      assert(rwr.read:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(a, path) == 3 end, 3, all))

    -- RW-06: the downgrade belongs to the coroutine holding the write lock, not to the object
    local other
    a:spawn(function() other = pack(rwa.read:acquire(0.2)) end)
    assert.is_true(a:run(3))
    assert_code("ETIMEDOUT", other, "read by another coroutine of the write holder's object")
    assert.is_true(util.wait_until(function() return #util.children(a, path) == 3 end, 2, all),
      "the timed-out read node was not removed")

    assert(rwa.read:acquire(5))                    -- downgrade ...
    local t1 = { key = "rw", owner = "T1-read", start = core.now() }
    local dname = util.basename(rwa.read:node())
    assert.are.equal(seq10(wname), seq10(dname))
    assert.is_true(rwa.write:release())            -- ... and let the write lock go
    -- the queued writer wakes, lists again and now waits behind the downgraded read node
    assert.is_true(util.wait_until(function()
      local watchers = util.watches_by_path(zk)[path .. "/" .. dname]
      return watchers and #watchers == 1
    end, 3, all), "the queued writer does not watch the downgraded read node")
    local names = util.children(a, path)
    assert.are.equal(3, #names)
    local sorted = core.sort(names, core.WRITE)
    assert.are.same({ dname, w2name }, { sorted[1], sorted[2] })
    util.drive(all, 0.3)                           -- give the writer every chance to get in
    assert.is_nil(t2.res, "the queued writer got the lock while the downgraded read was held")
    assert.is_nil(r3.res)
    t1.finish = core.now()
    assert.is_true(rwa.read:release())
    assert.is_true(zklock.run(all, 10))
    assert.are.equal(rwb.write, t2.res[1], tostring(t2.res[2]))
    assert.are.equal(w2name, t2.node)
    assert.are.equal(rwr.read, r3.res[1], tostring(r3.res[2]))
    local report = fw.check({
      t1,
      { key = "rw", owner = "T2-write", start = t2.start, finish = t2.finish },
      { key = "rw", owner = "R3-read", start = r3.start, finish = r3.finish },
    }, 1)
    assert.are.equal(0, report.violations, table.concat(report.examples, "\n"))
    assert.is_true(t2.start >= t1.finish)
    assert.is_true(r3.start >= t2.finish)          -- the later reader still came after the writer
    assert.are.same({}, util.children(a, path))
  end)

  it("upgrade: a read holder asking for the write lock fails at once with EDEADLK", function()
    local c, other = connect("up"), connect("other-reader")
    local path = "/rw/upgrade"
    local rw = c:rwlock(path)
    assert(rw.read:acquire(5))
    assert(rw.read:acquire(5))                     -- reentrant read: still no upgrade
    local node = rw.read:node()
    local before = c:stats()
    for _, timeout in ipairs({ 5, 0 }) do
      local t0 = util.now()
      local res = pack(rw.write:acquire(timeout))
      assert.is_true(util.now() - t0 < 0.5, "EDEADLK was not immediate")
      assert_code("EDEADLK", res, "write acquire by a read holder")
      assert.truthy(util.has_words(res[2], path, "upgrad", "deadlock", "release the read lock first"), res[2])
    end
    local d = util.stats_delta(before, c:stats())
    for _, k in ipairs(REQUEST_KEYS) do assert.are.equal(0, d[k], "request sent: " .. k) end
    assert.is_true(rw.read:is_held())
    assert.is_false(rw.write:is_held())
    assert.are.equal(node, rw.read:node())
    assert.are.same({ util.basename(node) }, util.children(c, path))
    -- another coroutine of the same client is not the read holder: it simply waits
    local res
    c:spawn(function() res = pack(rw.write:acquire(0.2)) end)
    assert.is_true(c:run(3))
    assert_code("ETIMEDOUT", res, "write by another coroutine while read is held")
    assert.is_true(rw.read:release())
    assert_code("EDEADLK", pack(rw.write:acquire(1)), "write while the read lock is still held once")
    assert.is_true(rw.read:release())
    -- with the read lock gone, the write lock is granted
    assert.are.equal(rw.write, rw.write:acquire(5))
    assert.is_true(rw.write:release())
    -- the check is per coroutine: another client's reader does not make our write fail fast
    local orw = other:rwlock(path)
    assert(orw.read:acquire(5))
    assert_code("ETIMEDOUT", pack(rw.write:acquire(0.2)), "write while another client reads")
    assert.is_true(orw.read:release())
    assert.is_true(util.wait_until(function() return #util.children(c, path) == 0 end, 2, { c, other }))
  end)

  ------------------------------------------------------------------ reentrancy

  it("each side is reentrant per coroutine: one node, no requests, held until the last release", function()
    local c = connect("re")
    local path = "/rw/reentrant"
    local rw = c:rwlock(path)
    for _, side in ipairs({ "read", "write" }) do
      local lock = rw[side]
      assert.are.equal(lock, lock:acquire(5))
      local node, token = lock:node(), lock:token()
      local before = c:stats()
      assert.are.equal(lock, lock:acquire(5))
      assert.are.equal(lock, lock:acquire(0))
      local d = util.stats_delta(before, c:stats())
      for _, k in ipairs(REQUEST_KEYS) do assert.are.equal(0, d[k], side .. ": nested acquire sent " .. k) end
      assert.are.equal(node, lock:node())
      assert.are.equal(token, lock:token())
      assert.are.same({ util.basename(node) }, util.children(c, path))
      assert.is_true(lock:release())
      assert.is_true(lock:release())
      assert.is_true(lock:is_held(), side .. " released before its last release")
      assert.are.same({ util.basename(node) }, util.children(c, path))
      assert.is_true(lock:release())
      assert.is_false(lock:is_held())
      assert.are.same({}, util.children(c, path))
      local msg = util.error_of(lock.release, lock)
      assert.truthy(util.has_words(msg, path, "does not hold"), tostring(msg))
    end
  end)

  it("ownership is per coroutine: another coroutine shares the read side and waits on the write side", function()
    local c = connect("owner")
    local path = "/rw/owner"
    local rw = c:rwlock(path)
    -- read side: a second coroutine on the same object gets its own node and holds at once
    assert(rw.read:acquire(5))
    local main_node = rw.read:node()
    local co_node, co_held
    c:spawn(function()
      assert.is_false(rw.read:is_held())
      assert(rw.read:acquire(0))
      co_node, co_held = rw.read:node(), rw.read:is_held()
      assert(rw.read:release())
    end)
    assert.is_true(c:run(5))
    assert.is_true(co_held)
    assert.matches(READ_NODE, util.basename(co_node))
    assert.are_not.equal(main_node, co_node)
    assert.are.equal(main_node, rw.read:node())
    assert.is_true(rw.read:release())
    -- write side: a second coroutine waits (and times out), the holder keeps it
    assert(rw.write:acquire(5))
    local res, msg
    c:spawn(function()
      res = pack(rw.write:acquire(0.2))
      msg = util.error_of(rw.write.release, rw.write)   -- not its lock to release
    end)
    assert.is_true(c:run(5))
    assert_code("ETIMEDOUT", res, "second coroutine on the write side")
    assert.truthy(util.has_words(msg, path, "does not hold"), tostring(msg))
    assert.is_true(rw.write:is_held())
    assert.is_true(rw.write:release())
    assert.is_true(util.wait_until(function() return #util.children(c, path) == 0 end, 2, { c }))
  end)

  it("rejects bad input with errors that name the argument", function()
    local c = connect("bad")
    local function raises(words, fn, ...)
      local msg = util.error_of(fn, ...)
      assert(msg, "expected an error mentioning " .. table.concat(words, ", "))
      for _, w in ipairs(words) do assert(msg:find(w, 1, true), ("error %q does not mention %q"):format(msg, w)) end
    end
    raises({ "bad argument #1 to 'rwlock'", "lock path", "42" }, c.rwlock, c, 42)
    raises({ "bad argument #1 to 'rwlock'", "lock path", "no-slash" }, c.rwlock, c, "no-slash")
    raises({ "bad argument #1 to 'rwlock'", "lock path" }, c.rwlock, c, "/rw/bad/")
    raises({ "bad argument #2 to 'rwlock'", "unknown option 'bogus'", "acl" }, c.rwlock, c, "/rw/bad", { bogus = 1 })
    raises({ "bad argument #2 to 'rwlock'", "option 'acl'" }, c.rwlock, c, "/rw/bad", { acl = 5 })
    local rw = c:rwlock("/rw/bad")
    for _, side in ipairs({ "read", "write" }) do
      local lock = rw[side]
      raises({ "bad argument #1 to 'acquire'", "timeout", "-1" }, lock.acquire, lock, -1)
      raises({ "bad argument #1 to 'acquire'", "timeout", "\"soon\"" }, lock.acquire, lock, "soon")
      raises({ "bad argument #2 to 'acquire'", "retry" }, lock.acquire, lock, 1, { retry = 5 })
      raises({ "bad argument #1 to 'on_lost'", "function" }, lock.on_lost, lock, "x")
      raises({ side .. " lock", "/rw/bad", "does not hold" }, lock.release, lock)
    end
    assert.is_false(c:exists("/rw/bad"))               -- nothing was created
  end)

  it("a <close> guard releases each side at scope exit, also on error #lua54", function()
    local c = connect("guard")
    local path = "/rw/guard"
    local rw = c:rwlock(path)
    local chunk = assert(load([[
      local rw = ...
      local r = {}
      r.ok, r.err = pcall(function()
        local w <close> = assert(rw.write:acquire(5))
        local rd <close> = assert(rw.read:acquire(5))      -- downgrade inside the write hold
        r.both = rw.write:is_held() and rw.read:is_held()
        error("boom")
      end)
      r.after = rw.write:is_held() or rw.read:is_held()
      return r
    ]], "=guard"))
    local r = chunk(rw)
    assert.is_true(r.both)
    assert.is_false(r.ok)
    assert.matches("boom", r.err)
    assert.is_false(r.after)
    assert.are.same({}, util.children(c, path))
  end)
end)

describe("rwlock wake-ups (no herd)", function()
  local zk

  setup(function() zk = testing.server{} end) -- its own server: the mntr maxima below count this test only
  teardown(function() util.close_all() if zk then zk:stop() end end)

  it("a writer's release wakes each waiting reader once (first earlier writer), never the queued writer", function()
    -- Queue: W (held) <- 30 readers (group A, 3 clients x 10) <- W2 <- 20 readers (group B, 2 x 10).
    -- Documented: a reader watches the first earlier writer, a writer its immediate predecessor.
    -- So W's release wakes all 50 readers once: group A is granted, group B lists and watches W2.
    -- Readers' releases wake W2 only; W2's release wakes group B once.
    local path = "/herd/rw"
    local w = util.connect(zk.hosts, { identity = "W" })
    local w2 = util.connect(zk.hosts, { identity = "W2" })
    local ga, gb = {}, {}
    for i = 1, 3 do ga[i] = util.connect(zk.hosts, { identity = "A" .. i }) end
    for i = 1, 2 do gb[i] = util.connect(zk.hosts, { identity = "B" .. i }) end
    local all = { w, w2, ga[1], ga[2], ga[3], gb[1], gb[2] }
    local rww = w:rwlock(path)
    assert(rww.write:acquire(5))
    local wnode = rww.write:node()

    local holds = { A = {}, B = {}, W2 = {} }
    local release = { A = false, B = false }
    local function readers(group, clients)
      for _, c in ipairs(clients) do
        local rw = c:rwlock(path)
        for _ = 1, 10 do
          c:spawn(function()
            assert(rw.read:acquire(60))
            local h = { key = "rw", owner = group, start = core.now() }
            for _ = 1, 2000 do
              if release[group] then break end
              c:sleep(0.01)
            end
            h.finish = core.now()
            local list = holds[group]
            list[#list + 1] = h
            assert(rw.read:release())
          end)
        end
      end
    end
    readers("A", ga)
    assert.is_true(util.wait_until(function() return #util.children(w, path) == 31 end, 10, all))
    local rw2 = w2:rwlock(path)
    local w2node
    w2:spawn(function()
      assert(rw2.write:acquire(60))
      w2node = rw2.write:node()
      local h = { key = "rw", owner = "W2", start = core.now() }
      w2:sleep(0.02)
      h.finish = core.now()
      holds.W2[1] = h
      assert(rw2.write:release())
    end)
    assert.is_true(util.wait_until(function() return #util.children(w, path) == 32 end, 5, all))
    local sorted = core.sort(util.children(w, path), core.WRITE)
    local w2name, last_a = sorted[32], sorted[31]
    assert.matches(WRITE_NODE, w2name)
    readers("B", gb)
    assert.is_true(util.wait_until(function() return #util.children(w, path) == 52 end, 10, all))

    -- Server side, once every waiter has its watch: every reader watches the FIRST earlier writer
    -- (Curator's read predicate), so both groups' 5 sessions watch W; W2 watches the last reader
    -- of group A; nothing else is watched.
    local function expect_watches(expected)
      local watches
      local settled = util.wait_until(function()
        watches = util.watches_by_path(zk)
        for p, n in pairs(expected) do
          if not watches[p] or #watches[p] ~= n then return false end
        end
        for p in pairs(watches) do if not expected[p] then return false end end
        return true
      end, 10, all)
      if not settled then
        local got = {}
        for p, s in pairs(watches) do got[#got + 1] = p .. "=" .. #s end
        table.sort(got)
        error("unexpected watches: " .. table.concat(got, " "), 2)
      end
    end
    expect_watches({ [wnode] = 5, [path .. "/" .. last_a] = 1 })
    -- and client side, every waiter has set its watch (one getData each). A client handles one
    -- ZooKeeper reply per process() call, so this can lag behind the server's view.
    assert.is_true(util.wait_until(function()
      return util.stats_sum(ga).gets == 30 and util.stats_sum(gb).gets == 20 and w2:stats().gets == 1
    end, 10, all), "the waiters did not all set their watches")
    util.drive(all, 0.3) -- the getData replies themselves
    assert.are.equal(0, util.mntr(zk, "zk_max_node_children_watch_count"))

    local function sums()
      return { A = util.stats_sum(ga), B = util.stats_sum(gb), W2 = util.stats_sum({ w2 }) }
    end
    local s0 = sums()
    assert.is_true(rww.write:release())
    assert.is_true(util.wait_until(function()
      return #holds.A == 0 and util.stats_sum(ga).acquired - s0.A.acquired == 30
        and util.stats_sum(gb).gets - s0.B.gets == 20
    end, 10, all), "group A was not all granted, or group B did not watch again")
    -- group B re-watches W2 (its first earlier writer now)
    expect_watches({ [path .. "/" .. w2name] = 2, [path .. "/" .. last_a] = 1 })
    util.drive(all, 0.3)
    local s1 = sums()
    local dA, dB, dW2 = util.stats_delta(s0.A, s1.A), util.stats_delta(s0.B, s1.B), util.stats_delta(s0.W2, s1.W2)
    -- each reader of group A: one watch event, granted after a listing; no other request. The
    -- readers of one client woken together share a listing: at least one per client, never
    -- more than one per reader
    assert.are.equal(30, dA.acquired, util.format_stats(dA))
    assert.are.equal(30, dA.watch_events, util.format_stats(dA))
    assert.is_true(dA.lists >= #ga and dA.lists <= 30, util.format_stats(dA))
    assert.are.equal(0, dA.gets + dA.creates + dA.exists + dA.deletes, util.format_stats(dA))
    -- each reader of group B: one watch event, a (shared) listing, one getData+watch on W2;
    -- not granted
    assert.are.equal(0, dB.acquired, util.format_stats(dB))
    assert.are.equal(20, dB.watch_events, util.format_stats(dB))
    assert.is_true(dB.lists >= #gb and dB.lists <= 20, util.format_stats(dB))
    assert.are.equal(20, dB.gets, util.format_stats(dB))
    assert.are.equal(0, dB.creates + dB.exists + dB.deletes, util.format_stats(dB))
    -- the queued writer heard nothing
    for _, k in ipairs(util.STAT_KEYS) do
      assert.are.equal(0, dW2[k], "W2: " .. util.format_stats(dW2))
    end
    -- W's deletion woke the 5 reader sessions, and only those
    assert.are.equal(5, util.mntr(zk, "zk_max_node_deleted_watch_count"))
    assert.is_nil(w2node)

    -- group A leaves; W2 goes next; then group B, each reader woken once by W2's release
    release.A = true
    assert.is_true(util.wait_until(function() return holds.W2[1] ~= nil end, 15, all), "W2 never got in")
    assert.is_true(util.wait_until(function() return util.stats_sum(gb).acquired - s1.B.acquired == 20 end,
      10, all), "group B was not all granted")
    util.drive(all, 0.1)
    local dB2 = util.stats_delta(s1.B, util.stats_sum(gb))
    assert.are.equal(20, dB2.acquired, util.format_stats(dB2))
    assert.are.equal(20, dB2.watch_events, util.format_stats(dB2))
    assert.is_true(dB2.lists >= #gb and dB2.lists <= 20, util.format_stats(dB2)) -- shared per client
    local dW2b = util.stats_delta(s1.W2, util.stats_sum({ w2 }))
    -- W2 watches one predecessor at a time: at most one wake-up per group-A reader that left
    assert.is_true(dW2b.watch_events <= 30, util.format_stats(dW2b))
    assert.are.equal(1, dW2b.acquired)
    release.B = true
    assert.is_true(zklock.run(all, 20))
    assert.are.equal(5, util.mntr(zk, "zk_max_node_deleted_watch_count")) -- no later deletion woke more

    -- exclusion over the whole run
    local reads = {}
    for _, g in ipairs({ "A", "B" }) do for _, h in ipairs(holds[g]) do reads[#reads + 1] = h end end
    assert.are.equal(50, #reads)
    local report, max_readers = check_rw(holds.W2, reads)
    assert.are.equal(0, report.violations, table.concat(report.examples, "\n"))
    assert.are.equal(30, max_readers)
    assert.are.same({}, util.children(w, path))
    assert.is_true(util.wait_until(function() return #util.watched_paths(zk) == 0 end, 3, all),
      "watches left: " .. table.concat(util.watched_paths(zk), " "))
  end)
end)
