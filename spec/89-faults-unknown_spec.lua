-- Unknown outcomes called unknown (issue 21, part 3), against a real server behind the kit's
-- fault proxy: with the server's replies dropped (net:drop_replies: requests still reach the
-- server and are applied, no answer comes back), a write ends with a code for which
-- zklock.outcome_unknown() is true, and its message says "outcome unknown: the operation may
-- have been applied" (a queue take: "the item may have been taken"), never "nothing was
-- applied": a transaction whose create was applied, a plain create, a shared count's set, a
-- take's delete, the removal of a lock-safe take. The ZooKeeper client's own code
-- (ZOPERATIONTIMEOUT: no reply for two thirds of the session timeout) and the core's (ETIMEDOUT:
-- the call's timeout) both. Also the queue's argument and lifecycle fixes: a lock-safe take
-- without fn is refused, a take on a missing queue that gets nothing leaves no node behind (the
-- container it made to watch is deleted again), client:close() inside
-- a lock-safe fn makes take return ECLOSED.
--   busted --lua=lua5.4 spec/89-faults-unknown_spec.lua
--   busted --lua=luajit --run=luajit spec/89-faults-unknown_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

local pack = util.pack

local UNKNOWN = "outcome unknown: the operation may have been applied"

-- r = { nil, msg, code }: an unknown outcome, said so
local function assert_unknown(r, words)
  assert.is_nil(r[1], "expected a failure, got " .. tostring(r[1]))
  assert.is_string(r[3], tostring(r[2]))
  assert.is_true(zklock.outcome_unknown(r[3]), ("%s is not an unknown outcome: %s"):format(r[3], tostring(r[2])))
  assert.are.equal(r[3] .. ":", r[2]:sub(1, #r[3] + 1))
  assert.is_truthy(r[2]:find(words or UNKNOWN, 1, true), r[2])
  assert.is_nil(r[2]:find("nothing was applied", 1, true), r[2])
end

describe("faults: unknown outcomes under dropped replies #faults", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  -- a client behind a proxy of its own (session 2 s: the ZooKeeper client gives up a silent
  -- connection after about 1.3 s), and a direct observer
  local function proxied(name, opts)
    local net = testing.proxy(zk.hosts)
    finally(function() net:stop() end)
    local o = { session_timeout = 2, identity = name }
    for k, v in pairs(opts or {}) do o[k] = v end
    local a = assert(zklock.connect(net.hosts, o))
    finally(function() net:heal() a:close() end)
    return a, net, connect(name .. "-obs")
  end

  -- the client's own code (ZOPERATIONTIMEOUT: the op timeout is longer than the C client's
  -- receive timeout) and the core's (ETIMEDOUT: a short call timeout)
  local VARIANTS = {
    { what = "the ZooKeeper client's timeout", op_timeout = 10,
      codes = { ZOPERATIONTIMEOUT = true, ZCONNECTIONLOSS = true } },
    { what = "the call's timeout", op_timeout = 0.4, codes = { ETIMEDOUT = true } },
  }
  for vi, v in ipairs(VARIANTS) do
    local base = "/unk" .. vi
    describe(v.what, function()
      it("a transaction whose create was applied says outcome unknown, not 'nothing was applied'", function()
        local a, net, b = proxied("txn", { op_timeout = v.op_timeout })
        assert(b:create(base, "0"))
        net:drop_replies(30)
        local r = pack(a:transaction():create(base .. "/t", "x"):set(base, "1"):commit())
        print(("\n  [unknown] transaction: %s"):format(tostring(r[2])))
        assert_unknown(r, "transaction of 2 op(s)")
        assert_unknown(r)
        assert.is_true(v.codes[r[3]], r[3])
        assert.is_table(r[4])
        assert.are.equal(r[3], r[4][1].code) -- no per-op answer: each op carries the status
        -- the server applied it: a caller who retried would write twice
        assert.is_true(util.wait_until(function() return b:exists(base .. "/t") ~= false end, 10, { a, b }),
          "the transaction was not applied")
        assert.are.equal("x", (b:get(base .. "/t")))
        assert.are.equal("1", (b:get(base)))
        net:heal()
        assert.is_true(util.wait_until(function() return a:exists("/") ~= nil end, 10, { a }), "no reconnect")
        -- the same transaction again is refused by the server: that answer is known
        local r2 = pack(a:transaction():create(base .. "/t", "x"):commit(10))
        assert.are.equal("ZNODEEXISTS", r2[3], tostring(r2[2]))
        assert.is_false(zklock.outcome_unknown(r2[3]))
        assert.is_truthy(r2[2]:find("nothing was applied", 1, true), r2[2])
      end)

      it("a shared count's set and a plain create say outcome unknown; both were applied", function()
        local a, net, b = proxied("plain", { op_timeout = v.op_timeout })
        local sc = a:shared_count(base .. "/count", 5)
        local _, version = assert(sc:get())
        net:drop_replies(30)
        local r = pack(sc:try_set(6, version))
        assert_unknown(r)
        assert.is_true(v.codes[r[3]], r[3])
        local bsc = b:shared_count(base .. "/count", 5)
        assert.is_true(util.wait_until(function() return bsc:get() == 6 end, 10, { a, b }), "the set was not applied")
        -- again once the client is connected: a plain create
        net:heal()
        assert.is_true(util.wait_until(function() return a:exists("/") ~= nil end, 10, { a }), "no reconnect")
        net:drop_replies(30)
        r = pack(a:create(base .. "/p", "x"))
        assert_unknown(r)
        assert.is_true(v.codes[r[3]], r[3])
        assert.is_true(util.wait_until(function() return b:exists(base .. "/p") ~= false end, 10, { a, b }),
          "the create was not applied")
        assert.are.equal("x", (b:get(base .. "/p")))
      end)

      it("a take whose delete was applied says the item may have been taken", function()
        local a, net, b = proxied("take", { op_timeout = v.op_timeout })
        local qb = b:queue(base .. "/q")
        assert(qb:put("one"))
        assert(qb:put("two"))
        local q = a:queue(base .. "/q")
        assert.are.equal("one", (q:take(10))) -- lists both: the next take sends at once
        net:drop_replies(30)
        local r = pack(q:take(10))
        assert_unknown(r, "outcome unknown: the item may have been taken")
        -- it was: removed, and handed to nobody
        assert.is_true(util.wait_until(function() return qb:size() == 0 end, 10, { a, b }), "not removed")
      end)

      it("a lock-safe take whose removal was applied says the item may have been taken", function()
        local a, net, b = proxied("safe", { op_timeout = v.op_timeout })
        local path, locks = base .. "/dq", base .. "/dq-locks"
        local qb = b:queue(path, { format = "curator" })
        assert(qb:put("job"))
        local q = a:queue(path, { format = "curator", lock_path = locks })
        local ran = false
        local r = pack(q:take(10, function(_, msg)
          ran = true
          msg:transaction():create(base .. "/done", "")
          net:drop_replies(30) -- the fenced removal goes out now; its answer is lost
        end))
        assert.is_true(ran)
        assert_unknown(r, "outcome unknown: the item may have been taken")
        assert.is_true(util.wait_until(function() return qb:size() == 0 end, 10, { a, b }), "not removed")
        assert.is_truthy(b:exists(base .. "/done")) -- fn's write went with the removal
      end)

      it("a zookeeper_lock acquire whose create got no answer: not acquired, said so; no node left", function()
        local a, net, b = proxied("zl", { op_timeout = v.op_timeout })
        assert(b:create(base .. "/zl", ""))
        local zl = a:zookeeper_lock(base .. "/zl")
        local bar = a:double_barrier(base .. "/bar", 2)
        assert(a:create(base .. "/bar", ""))
        net:drop_replies(30)
        local r = pack(zl:acquire(5))
        assert_unknown(r, "the lock was not acquired")
        assert.is_false(zl:is_held())
        net:heal()
        assert.is_true(util.wait_until(function() return a:exists("/") ~= nil end, 10, { a }), "no reconnect")
        net:drop_replies(30)
        r = pack(bar:enter(5))
        assert.is_nil(r[1])
        assert.is_true(zklock.outcome_unknown(r[3]), tostring(r[2]))
        net:heal()
        -- once the answers pass again, the nodes the server made are deleted
        assert.is_true(util.wait_until(function()
          return #util.children(b, base .. "/zl") == 0 and #util.children(b, base .. "/bar") == 0
        end, 20, { a, b }), ("a node of the given-up acquire or enter was left: %s | %s"):format(
          table.concat(util.children(b, base .. "/zl"), " "), table.concat(util.children(b, base .. "/bar"), " ")))
      end)
    end)
  end

  it("a lock-safe take or poll without fn is refused, naming the argument", function()
    local a = connect("nofn")
    local q = a:queue("/unk/nofn", { format = "curator", lock_path = "/unk/nofn-locks" })
    util.assert_words(util.error_of(q.take, q, 1), { "bad argument #2 to 'take'", "fn", "lock-safe", "lock_path" })
    util.assert_words(util.error_of(q.poll, q), { "bad argument #1 to 'poll'", "fn", "lock-safe" })
    assert.is_false(a:exists("/unk/nofn")) -- nothing was sent
  end)

  it("a take on a missing queue leaves no node behind, and wakes when the queue is made", function()
    local a, b = connect("miss-a"), connect("miss-b")
    local q = a:queue("/unk/missing/q")
    local r = pack(q:take(0.3))
    assert.are.equal("ETIMEDOUT", r[3], tostring(r[2]))
    -- the container the take made to watch is deleted again (the server never reaps a
    -- container that had no child); its parent, which had one, goes by the server's reaping
    assert.is_true(util.wait_until(function() return b:exists("/unk/missing/q") == false end, 10, { a, b }),
      "the empty queue node was left")
    assert.is_true(util.wait_until(function() return b:exists("/unk/missing") == false end, 10, { a, b }),
      "the parent container was left")
    assert.is_nil(q:poll())
    assert.is_false(b:exists("/unk/missing/q"))
    -- a waiting take gets an item put after it started (the queue node made by the put)
    local got
    a:spawn(function() got = pack(q:take(10)) end)
    util.drive({ a, b }, 0.2)
    assert.is_nil(got)
    assert(b:queue("/unk/missing/q"):put("late"))
    assert.is_true(util.wait_until(function() return got ~= nil end, 10, { a, b }))
    assert.are.equal("late", got[1], tostring(got[2]))
  end)

  it("client:close() inside a lock-safe fn: take returns nil, 'ECLOSED: ...', 'ECLOSED'", function()
    local a, b = connect("close-a"), connect("close-b")
    local path = "/unk/closed"
    local qb = b:queue(path, { format = "curator" })
    assert(qb:put("x"))
    local q = a:queue(path, { format = "curator", lock_path = "/unk/closed-locks" })
    local r = pack(pcall(q.take, q, 5, function() a:close() end))
    assert.is_true(r[1], "take raised: " .. tostring(r[2]))
    assert.is_nil(r[2])
    assert.are.equal("ECLOSED", r[4], tostring(r[3]))
    assert.are.equal("ECLOSED:", r[3]:sub(1, 8))
    assert.are.equal(1, qb:size()) -- the item stays for another consumer
  end)
end)
