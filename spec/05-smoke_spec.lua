-- Smoke test against one real ZooKeeper server, small enough to run on every Lua the module
-- builds for (CI runs it under Lua 5.1, 5.2 and 5.3 next to spec/fast; 5.4 and LuaJIT run it
-- with the whole suite): connect, a mutex from the main thread and from spawned coroutines, a
-- semaphore, a read-write lock, a multi-lock, the plain znode calls, close.
--   busted --lua=lua5.1 --run=lua51 spec/05-smoke_spec.lua    (lua5.2/lua52, lua5.3/lua53, ...)
local zklock = require("zklock")
local util = require("support.util")
local fixture = require("support.fixture")

describe("smoke (every Lua version)", function()
  local zk, client
  fixture.server({}, {}, function(s) zk = s end)

  setup(function()
    client = util.connect(zk.hosts, { identity = "smoke-" .. _VERSION })
  end)

  it("connects and reports the session", function()
    assert.are.equal("string", type(zklock._VERSION))
    assert.are.equal("client", zklock.type(client))
  end)

  it("locks a mutex from the main thread, with an integer fencing token", function()
    local m = client:mutex("/smoke/mutex")
    assert.are.equal(m, m:acquire(5))
    assert.is_true(m:is_held())
    assert.is_true(util.is_integer(m:token()))
    assert.are.equal(1, #m:participants())
    assert.is_true(m:release())
    assert.is_false(m:is_held())
  end)

  it("queues spawned coroutines on one mutex in order, each suspending while it waits", function()
    local m = client:mutex("/smoke/queue")
    local order, tokens = {}, {}
    for i = 1, 3 do
      client:spawn(function()
        assert(m:acquire(10))
        order[#order + 1] = i
        tokens[#tokens + 1] = m:token()
        client:sleep(0.05)
        assert(m:release())
      end)
    end
    assert.is_true(client:run(15))
    assert.are.same({ 1, 2, 3 }, order)
    assert.is_true(tokens[1] < tokens[2] and tokens[2] < tokens[3])
  end)

  it("times out with ETIMEDOUT while another coroutine holds the lock", function()
    local m = client:mutex("/smoke/timeout")
    assert(m:acquire(5))
    local res
    client:spawn(function() res = util.pack(m:acquire(0.2)) end)
    assert.is_true(client:run(5))
    util.assert_code("ETIMEDOUT", res, "acquire while held")
    assert.is_true(m:release())
  end)

  it("hands out semaphore leases up to the limit", function()
    local sem = client:semaphore("/smoke/sem", 2)
    local a = assert(sem:acquire(5))
    local b = assert(sem:acquire(5))
    util.assert_code("ETIMEDOUT", util.pack(sem:acquire(0.2)), "third lease")
    assert.are.equal(2, #sem:participants())
    assert.is_true(a:release())
    local c = assert(sem:acquire(5))
    assert.is_true(b:release())
    assert.is_true(c:release())
  end)

  it("shares a read lock and excludes a writer, in spawned coroutines", function()
    local rw = client:rwlock("/smoke/rw")
    local events = {}
    client:spawn(function()
      assert(rw.read:acquire(5)); events[#events + 1] = "r1"
      client:sleep(0.1)
      assert(rw.read:release())
    end)
    client:spawn(function()
      assert(rw.read:acquire(5)); events[#events + 1] = "r2"
      client:sleep(0.1)
      assert(rw.read:release())
    end)
    client:spawn(function()
      -- the writer asks once both readers hold (a fixed head start is not enough on a busy machine)
      for _ = 1, 500 do
        if #events >= 2 then break end
        client:sleep(0.01)
      end
      assert(rw.write:acquire(5)); events[#events + 1] = "w"
      assert(rw.write:release())
    end)
    assert.is_true(client:run(10))
    assert.are.same({ "r1", "r2", "w" }, events)
  end)

  it("takes and releases a multi-lock in a spawned coroutine", function()
    local a, b = client:mutex("/smoke/multi/a"), client:semaphore_mutex("/smoke/multi/b")
    local ml = client:multilock({ a, b }, { order = "path" })
    local res
    client:spawn(function()
      assert(ml:acquire(5))
      assert.is_true(ml:is_held())
      res = util.pack(ml:release())
    end)
    assert.is_true(client:run(10))
    assert.is_true(res[1], tostring(res[2]))
    assert.is_false(a:is_held())
  end)

  it("creates, reads, writes, lists and deletes plain znodes", function()
    assert(client:create("/smoke/plain/node", "one", { parents = true }))
    local data, stat = client:get("/smoke/plain/node")
    assert.are.equal("one", data)
    assert.are.equal(0, stat.version)
    assert(client:set("/smoke/plain/node", "two"))
    assert.are.equal("two", (client:get("/smoke/plain/node")))
    assert.are.same({ "node" }, (client:children("/smoke/plain")))
    assert(client:delete("/smoke/plain/node"))
    assert.is_falsy((client:exists("/smoke/plain/node")))
  end)

  it("closes: pending work fails with ECLOSED and the client refuses new calls", function()
    local c = util.connect(zk.hosts, { identity = "smoke-close" })
    local m = c:mutex("/smoke/mutex")
    assert(m:acquire(5))
    c:close()
    assert.is_false(m:is_held())
    assert.has_error(function() m:acquire(1) end)
  end)
end)
