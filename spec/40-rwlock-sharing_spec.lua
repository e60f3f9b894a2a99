-- The read-write lock (Curator InterProcessReadWriteLock) against a real ZooKeeper: the shared
-- server of spec/support/fixture.lua (clean at each describe's start). Runs under Lua 5.4 and LuaJIT
-- (tests tagged #lua54 are 5.4 only).
-- This file: node names, shared reads, exclusive writes, FIFO.
--   busted --lua=lua5.4 spec/40-rwlock-sharing_spec.lua
--   busted --lua=luajit --run=luajit spec/40-rwlock-sharing_spec.lua
--
-- Test catalogue: RW-01 (readers share), RW-02/RW-09 (writer excludes; interval checker),
-- RW-03 (upgrade refused), RW-04/RW-05/RW-06 (downgrade), RW-07/RW-08 (FIFO, no writer
-- starvation), RW-10 (participants), RE-01/RE-02 (reentrancy per coroutine), HE-01 (herd).
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")
local fw = require("support.fault_worker")
local fixture = require("support.fixture")
local H = require("support.rwlock")

local READ_NODE, WRITE_NODE, pack, assert_code = H.READ_NODE, H.WRITE_NODE, H.pack, H.assert_code
local seq10, check_rw = H.seq10, H.check_rw

describe("rwlock: names and sharing", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

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
                errors[#errors + 1] = ("%s saw the counter change from %d to %d while reading"):format(
                  owner, v, counter)
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
    local reads = { { key = "rw", owner = "r1", start = 0, finish = 12 },
                    { key = "rw", owner = "r2", start = 1, finish = 5 } }
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
end)
