-- Curator's DistributedQueue in zklock (client:queue(path, { format = "curator", lock_path = })),
-- against a real ZooKeeper server and the real Curator 5.4 (spec/support/peers/DQueuePeer.java):
--   * the framing byte by byte (version header, item opcodes, lengths, end marker) and the node
--     layout (persistent sequential queue- nodes), round trips of single and multi-item messages;
--   * messages Curator wrote (putMulti included) decoded by zklock, and zklock's consumed by
--     Curator; a message that is not Curator's framing (EFORMAT);
--   * lock-safe mode: fn runs while the ephemeral <lock_path>/<item> exists and the item is
--     removed only after fn returned (with fn's own writes, in one fenced multi); fn raising
--     leaves the item; a lost lock (ELOST) removes nothing; items locked by others are skipped;
--     CURATOR-605's case (the session ends mid-processing, another consumer takes the item over):
--     only the second consumer's writes and removal commit; coroutine.close inside fn (5.4) or
--     while the take's requests are in flight; a lock create whose answer is lost (the lock node
--     is removed in the background, only if it is this session's);
--     a consumer process killed with kill -9 mid-processing leaves its item for another consumer;
--   * bad input.
--   busted --lua=lua5.4 spec/53-distributed-queue_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")
local qp = require("support.queue_peers")
local qmod = require("zklock.queue")

local pack, assert_code = util.pack, util.assert_code

describe("distributed queue (Curator's DistributedQueue)", function()
  local zk
  local fx = fixture.server({ min_session_ms = 1000 }, {}, function(s) zk = s end)
  local connect = fx.connect

  teardown(function() qp.stop_all() end)

  it("frames messages as Curator does: version, 0x01 + length + bytes per item, 0x02", function()
    local a = connect("f-a")
    local q = a:queue("/dq/frame", { format = "curator" })
    assert.are.equal("queue", zklock.type(q))
    assert.are.equal(0, q:size())
    assert.is_nil(q:poll())
    local n1 = assert(q:put("ab"))
    local n2 = assert(q:put({ "x", "", "a\0\255" }))
    assert.is_truthy(n1:match("^queue%-%d%d%d%d%d%d%d%d%d%d$"), n1)
    local raw1, st = assert(a:get("/dq/frame/" .. n1))
    assert.are.equal("0000000000000000", st.ephemeral_owner)
    assert.are.equal("\0\1\0\1" .. "\1\0\0\0\2ab" .. "\2", raw1)
    assert.are.equal("\0\1\0\1" .. "\1\0\0\0\1x" .. "\1\0\0\0\0" .. "\1\0\0\0\3a\0\255" .. "\2",
      (a:get("/dq/frame/" .. n2)))
    assert.are.equal(300, #qmod.decode(qmod.encode({ ("z"):rep(300) }))[1])
    assert(a:create("/dq/frame/qn-0000000099", "x")) -- not Curator's: ignored
    assert.are.equal(2, q:size())
    assert.are.same({ { "ab" }, n1 }, { q:peek() })
    assert.are.same({ { "ab" }, n1 }, { q:take(5) })
    assert.are.same({ { "x", "", "a\0\255" }, n2 }, { q:poll() })
    -- bytes after the end marker are ignored (Curator stops reading there too)
    local n3 = assert(a:create("/dq/frame/queue-", "\0\1\0\1\1\0\0\0\1z\2junk", { sequential = true }))
    assert.are.same({ { "z" }, util.basename(n3) }, { q:take(1) })
    assert_code("ETIMEDOUT", pack(q:take(0.2)))
    -- not Curator's framing: removed (as Curator does), reported with its bytes
    for _, bad in ipairs({ "", "\0\1\0\2\2", "\0\1\0\1\3", "\0\1\0\1\1\0\0\0\9ab\2", "\0\1\0\1\1\0\0\0\1a" }) do
      local node = assert(a:create("/dq/frame/queue-", bad, { sequential = true }))
      local r = pack(q:take(1))
      assert_code("EFORMAT", r)
      assert.are.equal(bad, r[4])
      assert.is_false(a:exists(node))
    end
    assert.are.same({ "qn-0000000099" }, util.children(a, "/dq/frame"))
  end)

  it("reads what Curator's DistributedQueue wrote (putMulti too), and Curator consumes zklock's #interop", function()
    local a = connect("c-a")
    local path = "/dq/curator"
    local prod = qp.dqueue("produce", zk.hosts, path, { count = 8, prefix = "cur", multi = 2 })
    assert.is_true(util.wait_until(function() return not prod:alive() end, 60, { a }), prod:output())
    assert.is_truthy(prod:log().done, prod:output())
    local q = a:queue(path, { format = "curator" })
    -- messages: cur-1 | cur-2 cur-3 cur-4 | cur-5 | cur-6 cur-7 cur-8, in name order
    local names = util.children(a, path)
    assert.are.equal(4, #names)
    local want = { { "cur-1" }, { "cur-2", "cur-3", "cur-4" }, { "cur-5" }, { "cur-6", "cur-7", "cur-8" } }
    for i, name in ipairs(names) do
      assert.is_truthy(name:match("^queue%-%d%d%d%d%d%d%d%d%d%d$"), name)
      local raw, st = assert(a:get(path .. "/" .. name))
      assert.are.equal("0000000000000000", st.ephemeral_owner)
      assert.are.equal(qmod.encode(want[i]), raw) -- byte for byte
    end
    local got = {}
    for _ = 1, 4 do
      local items = assert(q:take(5))
      for _, it in ipairs(items) do got[#got + 1] = it end
    end
    assert.are.same(prod:log().puts, got)
    -- the other way: zklock puts (one multi-item message), a lock-safe Curator consumer takes
    local lq = a:queue(path, { format = "curator", lock_path = "/dq/curator-locks" })
    assert(lq:put("z-1"))
    assert(lq:put({ "z-2", "z-3" }))
    local stop = os.tmpname()
    local cons = qp.dqueue("consume", zk.hosts, path, { idle = 1, stop = stop, lock_path = "/dq/curator-locks" })
    assert.is_true(util.wait_until(function() return #cons:log().commits == 3 end, 60, { a }), cons:output())
    assert.is_true(util.wait_until(function() return lq:size() == 0 end, 30, { a }))
    cons:kill()
    os.remove(stop)
    assert.are.same({ "z-1", "z-2", "z-3" }, cons:log().commits)
  end)

  it("lock-safe: fn runs under the item's lock node; removal (with fn's writes) after it returned", function()
    local a, b = connect("l-a"), connect("l-b")
    local q = a:queue("/dq/ls", { format = "curator", lock_path = "/dq/ls-locks" })
    assert.is_truthy(tostring(q):match("lock /dq/ls%-locks"))
    local n1 = assert(q:put("one"))
    local seen
    local items, name = q:take(5, function(its, msg)
      local st = assert(b:exists("/dq/ls-locks/" .. n1))
      seen = { its, msg.name, st.ephemeral_owner == (a:session()), b:exists("/dq/ls/" .. n1) ~= false }
      msg:transaction():create("/dq/ls-done", "one")
    end)
    assert.are.same({ "one" }, items)
    assert.are.equal(n1, name)
    assert.are.same({ { "one" }, n1, true, true }, seen)
    assert.are.equal("one", (b:get("/dq/ls-done")))
    assert.is_false(b:exists("/dq/ls/" .. n1))
    assert.are.same({}, util.children(b, "/dq/ls-locks"))
    -- fn raises: the error comes back, the item stays, the lock node goes
    local n2 = assert(q:put("two"))
    local ok, err = pcall(q.take, q, 5, function() error("boom", 0) end)
    assert.is_false(ok)
    assert.are.equal("boom", err)
    assert.is_truthy(b:exists("/dq/ls/" .. n2))
    assert.are.same({}, util.children(b, "/dq/ls-locks"))
    -- fn's writes fail together with the removal: nothing applied, lock node gone, item stays
    local r = pack(q:take(5, function(_, msg) msg:transaction():create("/dq/ls-done", "dup") end))
    assert_code("ZNODEEXISTS", r)
    assert.is_truthy(b:exists("/dq/ls/" .. n2))
    assert.are.same({}, util.children(b, "/dq/ls-locks"))
    -- the lock node went meanwhile (as when the session ends): ELOST, nothing removed or written
    r = pack(q:take(5, function(_, msg)
      assert(b:delete(msg.lock))
      msg:transaction():create("/dq/ls-lost", "x")
    end))
    assert_code("ELOST", r)
    assert.is_truthy(b:exists("/dq/ls/" .. n2))
    assert.is_false(b:exists("/dq/ls-lost"))
    -- an item locked by another consumer is skipped: poll finds nothing, take times out
    local bq = b:queue("/dq/ls", { format = "curator", lock_path = "/dq/ls-locks" })
    assert(b:create("/dq/ls-locks/" .. n2, "", { ephemeral = true }))
    assert.is_nil(q:poll(function() error("must not run") end))
    local t0 = util.now()
    assert_code("ETIMEDOUT", pack(q:take(0.5, function() error("must not run") end)))
    assert.is_true(util.now() - t0 >= 0.5)
    -- ... until its lock goes: a waiting take gets it (no change in the queue's children)
    local got
    a:spawn(function() got = pack(q:take(10, function() end)) end)
    util.drive({ a, b }, 0.3)
    assert.is_nil(got)
    assert(b:delete("/dq/ls-locks/" .. n2))
    assert.is_true(util.wait_until(function() return got ~= nil end, 10, { a, b }))
    assert.are.same({ { "two" }, n2 }, { got[1], got[2] })
    assert.are.equal(0, bq:size())
  end)

  it("CURATOR-605: a consumer whose session ends while it processes commits nothing; the next one's work stands",
    function()
    local a, b = connect("s-a"), connect("s-b")
    local path, locks = "/dq/605", "/dq/605-locks"
    local qa = a:queue(path, { format = "curator", lock_path = locks })
    local qb = b:queue(path, { format = "curator", lock_path = locks })
    local name = assert(qa:put("job"))
    local b_got
    local heard, held, token = {}, nil, nil
    local r = pack(qa:take(10, function(items, msg)
      assert.are.same({ "job" }, items)
      -- the hold protocol on the message: held, a token, on_lost told of the session's end
      held, token = msg:is_held(), msg:token()
      assert.are.equal(msg, msg:on_lost(function(state, m, why) heard[#heard + 1] = { state, m == msg, why } end))
      -- a's session expires mid-processing: its lock node goes, b gets the item and finishes it
      assert(testing.expire(a, zk.hosts))
      local function lost() return heard[#heard] and heard[#heard][1] == "LOST" end
      assert.is_true(util.wait_until(lost, 10, { a }), "on_lost not told")
      assert.is_false(msg:is_held())
      assert.is_nil(msg:token())
      b_got = pack(qb:take(10, function(_, bmsg) bmsg:transaction():create("/dq/605-done", "b") end))
      -- a, unaware, finishes too: its writes and the removal go in one multi fenced by its lock
      msg:transaction():create("/dq/605-done", "a"):set(path, "a was here")
    end))
    assert_code("ELOST", r)
    assert.is_true(held)
    assert.is_number(token)
    assert.are.same({ "LOST", true, "session" }, heard[#heard])
    local n = 0
    for _, h in ipairs(heard) do if h[1] == "LOST" then n = n + 1 end end
    assert.are.equal(1, n) -- once (a SUSPENDED may come first)
    assert.are.same({ { "job" }, name }, { b_got[1], b_got[2] })
    assert.are.equal("b", (b:get("/dq/605-done")))
    assert.are.equal("", (b:get(path)))
    assert.are.same({}, util.children(b, path))
    assert.are.same({}, util.children(b, locks))
  end)

  it("coroutine.close on a consumer suspended in its fn removes its lock node; the item stays #lua54", function()
    local a = connect("cc-a")
    local q = a:queue("/dq/cc", { format = "curator", lock_path = "/dq/cc-locks" })
    local name = assert(q:put("x"))
    local inside, returned = false, false
    local co = a:spawn(function()
      q:take(5, function() inside = true a:sleep(30) end)
      returned = true
    end)
    assert.is_true(util.wait_until(function() return inside end, 5, { a }))
    assert.are.same({ name }, util.children(a, "/dq/cc-locks"))
    assert.is_true(coroutine.close(co))
    assert.is_true(util.wait_until(function() return #util.children(a, "/dq/cc-locks") == 0 end, 2, { a }))
    assert.is_false(returned)
    assert.are.same({ { "x" }, name }, { q:poll(function() end) })
  end)

  it("a take closed while its requests are in flight: no lock node left, no item lost #lua54", function()
    -- every message to and from a's server is held 400 ms by a fault proxy, so the take's requests
    -- stay in flight long enough to close its coroutine between them and their answers
    local net = testing.proxy(zk.hosts)
    finally(function() net:stop() end)
    local a, b = zklock.connect(net.hosts, { session_timeout = 10 }), connect("fl-b")
    finally(function() a:close() end)
    for _, lock_path in ipairs({ "/dq/fl-locks", false }) do
      local path = lock_path and "/dq/fl-safe" or "/dq/fl-plain"
      local opts = { format = "curator", lock_path = lock_path or nil }
      assert(b:queue(path, opts):put({ "pre", "cious" }))
      if lock_path then assert(b:create(lock_path, "")) end
      local q = a:queue(path, opts)
      assert.are.equal(1, q:size())
      net:delay(400, 30)
      local ran = false
      local co = a:spawn(function() q:take(20, lock_path and function() ran = true end or nil) end)
      -- the listing (one waiter), then the create+get or the get+delete (two waiters)
      assert.is_truthy(util.wait_until(function() return a:pending() == 2 end, 10, { a }),
        "the take's two requests were not seen in flight")
      assert(coroutine.close(co))
      net:heal()
      assert.is_truthy(util.wait_until(function() return a:pending() == 0 end, 10, { a }))
      local qb = b:queue(path, opts)
      assert.is_truthy(util.wait_until(function() return qb:size() == 1 end, 10, { a, b }), "the item was lost")
      if lock_path then
        assert.is_truthy(util.wait_until(function() return #util.children(b, lock_path) == 0 end, 10, { a, b }),
          "the lock node was left")
      end
      assert.is_false(ran)
      assert.are.same({ "pre", "cious" }, (qb:take(5, lock_path and function() end or nil)))
    end
  end)

  it("a lock create whose answer is lost: the take gives up, its lock node goes once the answers pass", function()
    local net = testing.proxy(zk.hosts)
    finally(function() net:stop() end)
    local a, b = zklock.connect(net.hosts, { session_timeout = 10, op_timeout = 1 }), connect("lr-b")
    finally(function() a:close() end)
    local path, locks = "/dq/lr", "/dq/lr-locks"
    assert(b:create(locks, "", { parents = true }))
    local qb = b:queue(path, { format = "curator" })
    local first = assert(qb:put("one"))
    local second = assert(qb:put("two"))
    local q = a:queue(path, { format = "curator", lock_path = locks })
    assert.are.same({ { "one" }, first }, { q:take(5, function() end) }) -- lists both: the next take sends at once
    net:drop_replies(30)
    local ran = false
    local r = pack(q:take(5, function() ran = true end))
    assert.is_nil(r[1])
    assert.is_truthy(r[3] == "ETIMEDOUT" or r[3] == "ZCONNECTIONLOSS", tostring(r[2]))
    assert.is_false(ran)
    -- the create reached the server: a's lock node is there while the answers are lost
    assert.are.same({ second }, util.children(b, locks))
    net:heal()
    assert.is_truthy(util.wait_until(function() return #util.children(b, locks) == 0 end, 20, { a, b }),
      "the lock node of the given-up take was left")
    assert.are.same({ { "two" }, second }, { qb:take(5) })
  end)

  it("a consumer killed with kill -9 while processing leaves its item to another consumer", function()
    local a = connect("k-a")
    local path, locks = "/dq/kill", "/dq/kill-locks"
    local q = a:queue(path, { format = "curator", lock_path = locks })
    local name = assert(q:put({ "k-1", "k-2" }))
    local stop = os.tmpname()
    local w = qp.lua("consume", zk.hosts, path, { format = "curator", lock = locks, cos = 1, poll = 1, stop = stop,
                                                  work_ms = 60000, session = 2 })
    assert.is_true(util.wait_until(function() return #w:log().starts == 2 end, 60, { a }), w:output())
    assert.are.same({ name }, util.children(a, locks))
    assert(w:kill())
    os.remove(stop)
    assert.are.same({}, w:log().commits)
    -- its lock node goes with its session; the item is still there and another consumer gets it
    local seen = {}
    local items = assert(q:take(30, function(its) seen = its end))
    assert.are.same({ "k-1", "k-2" }, items)
    assert.are.same(items, seen)
    assert.are.equal(0, q:size())
    assert.are.same({}, util.children(a, locks))
  end)

  it("bad input: a clear error naming the argument", function()
    local a = connect("b-a")
    local function raises(words, fn, ...)
      local msg = util.error_of(fn, ...)
      assert.is_truthy(msg, "no error")
      util.assert_words(msg, words)
    end
    raises({ "#2", "queue", "format", "zookeeper, curator" }, a.queue, a, "/dq/b", { format = "kafka" })
    raises({ "#2", "unknown option", "lock" }, a.queue, a, "/dq/b", { lock = "/x" })
    raises({ "#2", "lock_path", "only with format" }, a.queue, a, "/dq/b", { lock_path = "/dq/l" })
    raises({ "#2", "lock_path", "lock path" }, a.queue, a, "/dq/b", { format = "curator", lock_path = "rel" })
    raises({ "#2", "lock_path", "under it" }, a.queue, a, "/dq/b", { format = "curator", lock_path = "/dq/b/l" })
    local q = a:queue("/dq/b", { format = "curator" })
    local lq = a:queue("/dq/b", { format = "curator", lock_path = "/dq/bl" })
    raises({ "#1", "put", "list of strings" }, q.put, q, 42)
    raises({ "#1", "put", "non-empty" }, q.put, q, {})
    raises({ "#1", "put", "item 2" }, q.put, q, { "a", 3 })
    raises({ "#2", "take", "fn", "lock_path" }, q.take, q, 1, function() end)
    raises({ "#1", "poll", "fn", "lock_path" }, q.poll, q, function() end)
    raises({ "#2", "take", "fn", "function" }, lq.take, lq, 1, "nope")
    raises({ "#1", "take", "timeout" }, lq.take, lq, -1)
    -- calling msg:transaction() twice
    assert(lq:put("m"))
    raises({ "transaction", "twice" }, lq.take, lq, 5, function(_, msg) msg:transaction() msg:transaction() end)
    assert.are.same({}, util.children(a, "/dq/bl"))
    assert.are.equal(1, lq:size())
    assert.are.same({ { "m" } }, { (lq:poll(function() end)) })
  end)
end)
