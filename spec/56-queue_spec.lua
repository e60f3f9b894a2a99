-- The distributed queue (client:queue) against a real ZooKeeper server: the node layout (qn-
-- persistent sequential, the item's bytes), FIFO order by sequence, poll/peek/size on an empty
-- and a missing queue, take suspending under the scheduler and blocking otherwise, many waiting
-- coroutines of one client sharing one children watch, competing consumers (coroutines and
-- clients) taking every item exactly once, take's timeout, bad input.
--   busted --lua=lua5.4 spec/56-queue_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

local pack, assert_code = util.pack, util.assert_code

describe("queue", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  it("put makes persistent sequential qn- nodes with the bytes; take/poll return them in sequence order", function()
    local a = connect("q-a")
    local q = a:queue("/q/basic")
    assert.are.equal("queue", zklock.type(q))
    assert.is_nil(q:poll()) -- missing queue path: empty
    assert.is_nil(q:peek())
    assert.are.equal(0, q:size())
    local names = {}
    local bin = "a\0b\255\n"
    for i, data in ipairs({ "one", "", bin, "four" }) do
      names[i] = assert(q:put(data))
      assert.is_truthy(names[i]:match("^qn%-%d%d%d%d%d%d%d%d%d%d$"), names[i])
    end
    local _, stat = assert(a:get("/q/basic/" .. names[1]))
    assert.are.equal("0000000000000000", stat.ephemeral_owner) -- persistent
    for i = 2, 4 do assert.is_true(util.seq(names[i]) > util.seq(names[i - 1])) end
    assert.are.equal(bin, (a:get("/q/basic/" .. names[3])))
    assert(a:create("/q/basic/foreign", "x")) -- not a queue item: ignored
    assert.are.equal(4, q:size())
    assert.are.same({ "one", names[1] }, { q:peek() })
    assert.are.same({ "one", names[1] }, { q:poll() })
    assert.are.same({ "", names[2] }, { q:take(5) })
    assert.are.same({ bin, names[3] }, { q:take(0) })
    assert.are.same({ "four", names[4] }, { q:poll() })
    assert.is_nil(q:poll())
    assert_code("ETIMEDOUT", pack(q:take(0)))
    assert.are.same({ "foreign" }, util.children(a, "/q/basic"))
  end)

  it("take waits for an item: blocking, and suspended in many coroutines sharing one children watch", function()
    local a, b = connect("w-a"), connect("w-b")
    local q = a:queue("/q/wait")
    assert(b:queue("/q/wait"):put("seed"))
    assert.are.equal("seed", (q:take(1)))
    -- blocking: the timeout passes with nothing put
    local t0 = util.now()
    assert_code("ETIMEDOUT", pack(q:take(0.3)))
    assert.is_true(util.now() - t0 >= 0.3)
    local N = 10
    local got = {}
    for i = 1, N do
      a:spawn(function() got[i] = pack(q:take(30)) end)
    end
    util.drive({ a }, 0.5)
    assert.are.equal(N, a:pending(), "every take waits")
    local before = a:stats().watch_events
    -- all N items in one transaction: one child event, so one watch firing must wake them all
    local t = b:transaction()
    for i = 1, N do t:create("/q/wait/qn-", "item" .. i, { sequential = true }) end
    assert(t:commit(10))
    assert(a:run(20))
    assert.are.equal(1, a:stats().watch_events - before, "one children watch shared by the waiting coroutines")
    local seen = {}
    for i = 1, N do
      assert.is_string(got[i][1], tostring(got[i][2]))
      assert.is_nil(seen[got[i][1]], "taken twice: " .. got[i][1])
      seen[got[i][1]] = true
    end
    for i = 1, N do assert.is_true(seen["item" .. i]) end
    assert.are.equal(0, q:size())
  end)

  it("competing consumers on several clients take every item exactly once", function()
    local producer = connect("c-p")
    local consumers = {}
    for i = 1, 3 do consumers[i] = connect("c-" .. i) end
    local path = "/q/compete"
    local N = 300
    local taken, counts = {}, {}
    local done = 0
    for ci, c in ipairs(consumers) do
      counts[ci] = 0
      local q = c:queue(path)
      for _ = 1, 2 do
        c:spawn(function()
          while true do
            local data, name, code = q:take(3)
            if not data then
              assert(code == "ETIMEDOUT", name)
              break
            end
            taken[#taken + 1] = data
            counts[ci] = counts[ci] + 1
          end
          done = done + 1
        end)
      end
    end
    local pq = producer:queue(path)
    producer:spawn(function()
      for i = 1, N do assert(pq:put(("%05d"):format(i))) end
    end)
    local all = { producer }
    for _, c in ipairs(consumers) do all[#all + 1] = c end
    assert(zklock.run(all, 120))
    assert.are.equal(6, done)
    assert.are.equal(N, #taken)
    local seen = {}
    for _, d in ipairs(taken) do
      assert.is_nil(seen[d], "taken twice: " .. d)
      seen[d] = true
    end
    for i = 1, N do assert.is_true(seen[("%05d"):format(i)], "lost " .. i) end
    assert.are.equal(0, pq:size())
  end)

  it("a single consumer takes in put order", function()
    local a = connect("o-a")
    local q = a:queue("/q/order")
    for i = 1, 50 do assert(q:put(tostring(i))) end
    for i = 1, 50 do assert.are.equal(tostring(i), (q:take(5))) end
  end)

  it("the queue path is made (a container) by a take that waits on a missing queue", function()
    local a, b = connect("m-a"), connect("m-b")
    local res
    a:spawn(function() res = pack(a:queue("/q/missing/deep"):take(30)) end)
    assert.is_truthy(util.wait_until(function() return b:exists("/q/missing/deep") end, 10, { a }))
    assert(b:queue("/q/missing/deep"):put("late"))
    assert.is_true(util.wait_until(function() return res ~= nil end, 10, { a }))
    assert.are.equal("late", res[1])
  end)

  it("a take on a missing queue leaves no node when its client closes or its coroutine is closed #lua54", function()
    -- the server never reaps a container that had no child: the take's own must go with it
    local a, b = connect("lk-a"), connect("lk-b")
    local res
    a:spawn(function() res = pack(a:queue("/lk/q"):take(20)) end)
    assert.is_truthy(util.wait_until(function() return b:exists("/lk/q") end, 10, { a }))
    util.drive({ a }, 0.3)
    a:close()
    assert_code("ECLOSED", res)
    assert.is_truthy(util.wait_until(function() return not b:exists("/lk/q") end, 10, { b }),
      "the take's container outlived the closed client")
    local c = connect("lk-c")
    local co = c:spawn(function() c:queue("/lk/q2"):take(20) end)
    assert.is_truthy(util.wait_until(function() return b:exists("/lk/q2") end, 10, { c }))
    assert(coroutine.close(co))
    assert.is_truthy(util.wait_until(function() return not b:exists("/lk/q2") end, 10, { b, c }),
      "the take's container outlived its closed coroutine")
  end)

  it("a waiting take ends with ESESSION when the session expires and ECLOSED when the client closes", function()
    local a = connect("e-a")
    local q = a:queue("/q/expire")
    assert(q:put("x"))
    assert.are.equal("x", (q:take(5)))
    local res
    a:spawn(function() res = pack(q:take()) end) -- no timeout: only the session can end it
    util.drive({ a }, 0.3)
    assert(testing.expire(a, zk.hosts))
    assert.is_truthy(util.wait_until(function() return res ~= nil end, 20, { a }))
    assert_code("ESESSION", res)
    assert.is_truthy(util.wait_until(function() return a.state == "CONNECTED" end, 20, { a }))
    -- the queue works on the new session
    assert(q:put("y"))
    assert.are.equal("y", (q:take(5)))
    local res2
    a:spawn(function() res2 = pack(q:take()) end)
    util.drive({ a }, 0.3)
    a:close()
    assert_code("ECLOSED", res2)
    assert.are.equal(0, a:pending())
  end)

  it("a take whose coroutine is closed while waiting leaves: pending() drops, the others still get items #lua54",
    function()
    local a, b = connect("cl-a"), connect("cl-b")
    local q = a:queue("/q/closed")
    assert(b:create("/q/closed", "", { parents = true }))
    local got
    local co = a:spawn(function() q:take() end)
    a:spawn(function() got = pack(q:take(20)) end)
    util.drive({ a }, 0.3)
    assert.are.equal(2, a:pending())
    assert(coroutine.close(co))
    assert.are.equal(1, a:pending())
    assert(b:queue("/q/closed"):put("only"))
    assert.is_truthy(util.wait_until(function() return got ~= nil end, 10, { a }))
    assert.are.equal("only", got[1])
    assert.are.equal(0, a:pending())
    assert.are.equal(0, q:size())
  end)

  it("a take closed while its get+delete are in flight puts the item back (none lost) #lua54", function()
    -- every message to and from a's server is held 400 ms by a fault proxy, so the take's two
    -- requests stay in flight long enough to close its coroutine between them and their answers
    local net = testing.proxy(zk.hosts)
    finally(function() net:stop() end)
    local a, b = zklock.connect(net.hosts, { session_timeout = 10 }), connect("fl-b")
    finally(function() a:close() end)
    assert(b:queue("/q/inflight"):put("precious"))
    local q = a:queue("/q/inflight")
    assert.are.equal(1, q:size())
    net:delay(400, 30)
    local co = a:spawn(function() q:take(20) end)
    -- the listing (one waiter), then the get and the delete (two waiters)
    assert.is_truthy(util.wait_until(function() return a:pending() == 2 end, 10, { a }),
      "the take's get and delete were not seen in flight")
    assert(coroutine.close(co))
    net:heal()
    assert.is_truthy(util.wait_until(function() return a:pending() == 0 end, 10, { a }))
    local qb = b:queue("/q/inflight")
    assert.is_truthy(util.wait_until(function() return qb:size() == 1 end, 10, { a, b }), "the item was lost")
    assert.are.equal("precious", (qb:take(5)))
  end)

  it("bad input raises a clear error naming the argument", function()
    local a = connect("b-a")
    assert.has_error(function() a:queue(nil) end,
      "bad argument #1 to 'queue' (queue path: expected a string like \"/queues/name\", got nil (nil))")
    assert.is_truthy(util.error_of(a.queue, a, "rel/path"):find("queue path", 1, true))
    assert.is_truthy(util.error_of(a.queue, a, "/q/"):find("queue path", 1, true))
    local q = a:queue("/q/bad")
    assert.is_truthy(util.error_of(q.put, q, 42):find("bad argument #1 to 'put' (data: expected a string", 1, true))
    assert.is_truthy(util.error_of(q.put, q, nil):find("data: expected a string", 1, true))
    assert.is_truthy(util.error_of(q.take, q, -1):find("bad argument #1 to 'take'", 1, true))
    assert.is_truthy(util.error_of(q.take, q, "5"):find("timeout", 1, true))
    assert.is_truthy(util.error_of(q.poll, "x"):find("queue:poll", 1, true))
    assert.is_truthy(util.error_of(a.queue, "x", "/q"):find("client:queue", 1, true))
    assert.is_false(a:exists("/q/bad"), "bad input leaves no node")
    a:close()
    assert.is_truthy(util.error_of(q.put, q, "x"):find("closed client", 1, true))
  end)
end)
