-- The fast tier (no ZooKeeper server): API checks that need no server, moved here from
-- spec/01-api_spec.lua. .ci/run runs spec/fast first, so a broken argument check fails in seconds.
--   busted --lua=lua5.4 spec/fast            busted --lua=luajit --run=luajit spec/fast
local zklock = require("zklock")
local util = require("support.util")

-- Raise-check: fn must raise, and the message must contain every word.
local function assert_raises(words, fn, ...)
  return util.assert_words(util.error_of(fn, ...), words)
end

describe("zklock API without a server #fast", function()
  describe("module", function()
    it("exposes the error codes by name", function()
      local e = zklock.errno
      assert.is_table(e)
      assert.are.equal(-1001, e.ETIMEDOUT)
      assert.are.equal(-1002, e.ECANCELED)
      assert.are.equal(-1003, e.ESESSION)
      assert.are.equal(-1004, e.ECLOSED)
      assert.are.equal(-1005, e.ELOST)
      assert.are.equal(-4, e.ZCONNECTIONLOSS)
      assert.are.equal(-101, e.ZNONODE)
      for name, code in pairs(e) do
        assert.is_string(name)
        assert.is_number(code)
      end
    end)
  end)

  describe("connect", function()
    it("rejects malformed host lists, naming the argument and the expected form", function()
      local bad = { "", "nohostport", "h:0", "h:99999", "h:1,,", "h:", ":2181", "h:21x81", "h:1,h:-2" }
      for _, hosts in ipairs(bad) do
        local msg = assert_raises({ "bad argument #1 to 'connect'", "hosts", "host:port" }, zklock.connect, hosts)
        assert(msg:find(("%q"):format(hosts), 1, true), "message should quote the bad value: " .. msg)
      end
      assert_raises({ "bad argument #1 to 'connect'", "hosts", "nil" }, zklock.connect, nil)
      assert_raises({ "bad argument #1 to 'connect'", "hosts", "number" }, zklock.connect, 2181)
    end)

    it("returns nil, 'ETIMEDOUT: ...', 'ETIMEDOUT' promptly when nothing listens", function()
      local t0 = util.now()
      local c, err, code = zklock.connect("127.0.0.1:1", { connect_timeout = 0.5 })
      local dt = util.now() - t0
      assert.is_nil(c)
      assert.are.equal("ETIMEDOUT", code)
      assert.matches("^ETIMEDOUT: ", err)
      assert.truthy(err:find("127.0.0.1:1", 1, true), err)
      assert.is_true(dt >= 0.45, ("gave up after %.3f s, before connect_timeout"):format(dt))
      assert.is_true(dt < 2.5, ("took %.3f s for connect_timeout = 0.5"):format(dt))
    end)
  end)

  describe("run loops' timeouts", function()
    it("client:run(t) and zklock.run({c}, t) give up with ETIMEDOUT naming what still runs", function()
      local c = assert(zklock.connect("127.0.0.1:1", { wait = false }))
      c:spawn(function() c:sleep(30) end)
      local t0 = os.clock()
      local ok, msg, code = c:run(0.2)
      assert.is_nil(ok)
      assert.are.equal("ETIMEDOUT", code)
      assert.are.equal("ETIMEDOUT: 1 coroutines still running after 0.2 s", msg)
      ok, msg, code = zklock.run({ c }, 0.1)
      assert.is_nil(ok)
      assert.are.equal("ETIMEDOUT", code)
      assert.are.equal("ETIMEDOUT: 1 coroutines still running after 0.1 s", msg)
      assert.is_true(os.clock() - t0 < 5) -- waited, did not spin
      c:close()
    end)
  end)

  describe("plain calls' timeouts", function()
    -- 0 and negatives were told "expected nil (forever) or a number of seconds >= 0", which
    -- allows 0 (rejected here) and calls nil forever (it is the client's op_timeout)
    it("reject 0, negatives, NaN and non-numbers with the rule that applies (> 0)", function()
      local c = assert(zklock.connect("127.0.0.1:1", { wait = false }))
      for _, v in ipairs({ 0, -1, 0 / 0, "5", true }) do
        assert_raises({ "bad argument #2 to 'get'", "option 'timeout': expected a number of seconds > 0" },
          c.get, c, "/x", { timeout = v })
        assert_raises({ "bad argument #2 to 'connect'", "option 'op_timeout': expected a number", "> 0" },
          zklock.connect, "127.0.0.1:1", { wait = false, op_timeout = v })
      end
      c:close()
    end)
  end)

  describe("queue:take(t) with nothing listening", function()
    -- its listing waited for the client's op_timeout (5 s here), not the 0.3 s asked for
    it("gives up when its own timeout passes, not the listing's op_timeout", function()
      local c = assert(zklock.connect("127.0.0.1:1", { wait = false, op_timeout = 5 }))
      local t0 = util.now()
      local data, msg, code = c:queue("/f/q"):take(0.3)
      local dt = util.now() - t0
      c:close()
      assert.is_nil(data)
      assert.are.equal("ETIMEDOUT", code, msg)
      assert.truthy(msg:find("no item within 0.3 s", 1, true), msg)
      assert.is_true(dt >= 0.29 and dt < 3, ("took %.3f s for take(0.3)"):format(dt))
    end)
  end)

  describe("double_barrier:enter(t) with nothing listening", function()
    it("gives up when its own timeout passes, not a request's op_timeout", function()
      local c = assert(zklock.connect("127.0.0.1:1", { wait = false, op_timeout = 5 }))
      local b = c:double_barrier("/f/b", 2)
      local t0 = util.now()
      local ok, msg, code = b:enter(0.3)
      local dt = util.now() - t0
      c:close()
      assert.is_nil(ok)
      assert.are.equal("ETIMEDOUT", code, msg)
      assert.is_true(dt >= 0.29 and dt < 3, ("took %.3f s for enter(0.3): %s"):format(dt, msg))
    end)
  end)

  describe("acquire(0) with nothing listening", function()
    -- try once needs the server's answers; with no session nothing else would end the wait (it
    -- hung for ever), and zookeeper_lock said "held by another owner" having asked no one
    it("gives up after the session timeout with ETIMEDOUT saying no answer came", function()
      local c = assert(zklock.connect("127.0.0.1:1", { session_timeout = 1, wait = false }))
      local objs = {
        mutex = c:mutex("/f/m"), read = c:rwlock("/f/rw").read, write = c:rwlock("/f/rw").write,
        semaphore = c:semaphore("/f/s", 2), semaphore_mutex = c:semaphore_mutex("/f/sm"),
        multilock = c:multilock({ c:mutex("/f/a"), c:mutex("/f/b") }),
        zookeeper_lock = c:zookeeper_lock("/f/zk"),
      }
      local got = {}
      local t0 = util.now()
      for name, o in pairs(objs) do
        c:spawn(function()
          local ok, msg, code = o:acquire(0)
          got[name] = { ok, msg, code, util.now() - t0 }
        end)
      end
      local _, ran_msg = c:run(30) -- bounds the test should an acquire hang again
      c:close()
      for name in pairs(objs) do
        local g = got[name]
        assert.is_table(g, name .. ": acquire(0) did not return within 30 s (" .. tostring(ran_msg) .. ")")
        assert.is_nil(g[1], name)
        assert.are.equal("ETIMEDOUT", g[3], name .. ": " .. tostring(g[2]))
        assert.truthy(g[2]:find("no answer from ZooKeeper", 1, true), name .. ": " .. g[2])
        assert.is_true(g[4] >= 0.9, ("%s: gave up after %.3f s, before the session timeout"):format(name, g[4]))
      end
    end)
  end)
end)
