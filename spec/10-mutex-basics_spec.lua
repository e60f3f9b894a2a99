-- The mutex (Curator InterProcessMutex) against a real ZooKeeper: the shared server of
-- spec/support/fixture.lua (clean at each describe's start). Runs under Lua 5.4 and LuaJIT (tests
-- tagged #lua54 are 5.4 only).
-- This file: acquire and release, reentrancy and ownership per coroutine, giving up (timeout, cancel, close).
--   busted --lua=lua5.4 spec/10-mutex-basics_spec.lua
--   busted --lua=luajit --run=luajit spec/10-mutex-basics_spec.lua
local util = require("support.util")
local fixture = require("support.fixture")
local H = require("support.mutex")

local pack, assert_code, only_child_soon = H.pack, H.assert_code, H.only_child_soon

describe("mutex", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  ------------------------------------------------------------------ basics

  it("acquires and releases; Curator node name; identity as data; container parent", function()
    local c = connect("web-1")
    local path = "/m/basic/orders"
    assert.is_false(c:exists("/m/basic"))
    local m = c:mutex(path)
    assert.is_false(m:is_held())
    assert.is_nil(m:token())
    assert.is_nil(m:node())

    assert.are.equal(m, m:acquire(5))
    assert.is_true(m:is_held())
    local node = m:node()
    assert.are.equal(path .. "/", node:sub(1, #path + 1))
    local name = util.basename(node)
    assert.matches(util.MUTEX_NODE, name)
    assert.are.same({ name }, util.children(c, path))

    local data, stat = c:get(node)
    assert.are.equal("web-1", data)
    local sid = c:session()
    assert.are.equal(sid, stat.ephemeral_owner)      -- ephemeral, owned by our session
    assert.are.equal(m:token(), stat.czxid)          -- the token is the node's czxid

    assert.is_true(m:release())
    assert.is_false(m:is_held())
    assert.is_nil(m:token())
    assert.is_nil(m:node())
    assert.are.same({}, util.children(c, path))      -- release returns after the delete
    -- the parents were made as containers: the server reaps them once they are empty
    assert.is_true(util.wait_until(function() return not c:exists("/m/basic") end, 5, { c }),
      "lock parents were not reaped: not created as containers?")
  end)

  it("writes its own node data when given one (data option), the identity otherwise", function()
    local c = connect("web-1")
    local m = c:mutex("/m/data", { data = "participant\0-7" })
    assert(m:acquire(5))
    assert.are.equal("participant\0-7", (c:get(m:node())))
    assert.is_true(m:release())
    local e = c:mutex("/m/data", { data = "" })
    assert(e:acquire(5))
    assert.are.equal("", (c:get(e:node())))
    assert.is_true(e:release())
    local rw = c:rwlock("/m/data-rw", { data = "rw-id" })
    assert(rw.write:acquire(5))
    assert.are.equal("rw-id", (c:get(rw.write:node())))
    assert.is_true(rw.write:release())
    -- bad data: raised at construction, naming the option; nothing is created
    assert.has_error(function() c:mutex("/m/data", { data = 7 }) end,
      "bad argument #2 to 'mutex' (option 'data': expected a string, got 7 (number))")
    assert.has_error(function() c:mutex("/m/data", { data = false }) end,
      "bad argument #2 to 'mutex' (option 'data': expected a string, got false (boolean))")
    local ok, err = pcall(c.mutex, c, "/m/data", { data = ("x"):rep(2 * 1024 * 1024) })
    assert.is_false(ok)
    assert.matches("bad argument #2 to 'mutex' (option 'data': ", err, 1, true)
    assert.matches("max_data", err, 1, true)
    assert.has_error(function() c:rwlock("/m/data", { data = {} }) end)
    assert.are.same({}, util.children(c, "/m/data"))
  end)

  it("reuses one object for successive acquisitions", function()
    local c = connect("reuse")
    local m = c:mutex("/m/reuse")
    assert(m:acquire(5))
    local n1, t1 = m:node(), m:token()
    assert.is_true(m:release())
    assert(m:acquire(5))
    assert.are_not.equal(n1, m:node())
    -- (not the sequence number: the empty container parent may be reaped in between, and a new
    -- parent counts from 0 again; the czxid token keeps growing)
    assert.is_true(m:token() > t1)
    assert.is_true(m:release())
  end)

  ------------------------------------------------------------------ reentrancy and ownership

  it("is reentrant: three levels, one node, no extra requests, held until the last release", function()
    local c = connect("re")
    local path = "/m/reentrant"
    local m = c:mutex(path)
    assert.are.equal(m, m:acquire(5))
    local node, token = m:node(), m:token()
    local before = c:stats()
    assert.are.equal(m, m:acquire(5))
    assert.are.equal(m, m:acquire(0))
    local after = c:stats()
    for _, k in ipairs({ "creates", "lists", "gets", "deletes", "exists", "ops", "acquired" }) do
      assert.are.equal(before[k], after[k], "nested acquire sent a request: " .. k)
    end
    assert.are.equal(node, m:node())
    assert.are.equal(token, m:token())
    assert.are.same({ util.basename(node) }, util.children(c, path))

    assert.is_true(m:release())
    assert.is_true(m:is_held())
    assert.are.equal(node, m:node())
    assert.is_true(m:release())
    assert.is_true(m:is_held())
    assert.are.same({ util.basename(node) }, util.children(c, path))
    assert.is_true(m:release())
    assert.is_false(m:is_held())
    assert.are.same({}, util.children(c, path))
    -- one release too many raises (count underflow), and deletes nothing twice
    local msg = util.error_of(m.release, m)
    assert.truthy(util.has_words(msg, path, "does not hold"), msg)
  end)

  it("ownership is per coroutine: a second coroutine on the same object waits with its own node", function()
    local c = connect("owner")
    local path = "/m/owner"
    local m = c:mutex(path)
    local phase, second = "start", nil
    local first_node
    c:spawn(function()
      assert(m:acquire(5))
      first_node = m:node()
      phase = "held"
      for _ = 1, 200 do
        if phase == "release" then break end
        c:sleep(0.01)
      end
      assert.is_true(m:is_held())
      m:release()
      phase = "released"
    end)
    c:spawn(function()
      for _ = 1, 200 do
        if phase == "held" then break end
        c:sleep(0.01)
      end
      assert.is_false(m:is_held())            -- the first coroutine's hold is not ours
      second = pack(m:acquire(0.3))
    end)
    -- while the second waits, the queue has two nodes: one per coroutine
    assert.is_true(util.wait_until(function() return #util.children(c, path) == 2 end, 3, { c }))
    assert.is_true(util.wait_until(function() return second ~= nil end, 3, { c }))
    assert_code("ETIMEDOUT", second, "second coroutine's acquire")
    assert.are.same({ util.basename(first_node) }, util.children(c, path))
    phase = "release"
    assert.is_true(c:run(5))
    assert.are.equal("released", phase)

    -- the main thread is an owner too
    assert(m:acquire(5))
    local res
    c:spawn(function() res = pack(m:acquire(0)) end)
    assert.is_true(c:run(5))
    assert_code("ETIMEDOUT", res, "spawned try-once while main holds")
    assert.is_true(m:is_held())
    c:spawn(function()
      res = pack(m:acquire(5))
      assert.is_true(m:is_held())
      m:release()
    end)
    c:sleep(0.1)
    assert.is_true(m:release())
    assert.is_true(c:run(5))
    assert.are.equal(m, res[1])
    assert.are.same({}, util.children(c, path))
  end)

  it("release by a coroutine that does not hold it raises and leaves the holder intact", function()
    local c = connect("nonholder")
    local path = "/m/nonholder"
    local m = c:mutex(path)
    assert(m:acquire(5))
    local node = m:node()
    local msg
    c:spawn(function() msg = util.error_of(m.release, m) end)
    assert.is_true(c:run(5))
    assert.truthy(util.has_words(msg, path, "does not hold"), tostring(msg))
    assert.is_true(m:is_held())
    assert.are.equal(node, m:node())
    assert.truthy(c:exists(node))
    assert.is_true(m:release())
    assert.is_false(c:exists(node))
  end)

  it("a <close> guard releases at scope exit, also when the scope errors #lua54", function()
    local c = connect("guard")
    local path = "/m/guard"
    local m = c:mutex(path)
    local chunk = assert((loadstring or load)([[
      local m = ...
      local r = {}
      do
        local held <close> = assert(m:acquire(5))
        r.inside = m:is_held()
        do
          local again <close> = assert(m:acquire(5))   -- reentrant: the inner guard gives back one level
        end
        r.after_inner = m:is_held()
      end
      r.after = m:is_held()
      r.ok, r.err = pcall(function()
        local held <close> = assert(m:acquire(5))
        r.inside2 = m:is_held()
        error("boom")
      end)
      r.after_error = m:is_held()
      return r
    ]], "=guard"))
    local r = chunk(m)
    assert.is_true(r.inside)
    assert.is_true(r.after_inner)
    assert.is_false(r.after)
    assert.is_true(r.inside2)
    assert.is_false(r.ok)
    assert.matches("boom", r.err)
    assert.is_false(r.after_error)
    assert.are.same({}, util.children(c, path))
  end)

  ------------------------------------------------------------------ giving up leaves nothing

  it("try-once while held elsewhere: ETIMEDOUT at once, only the holder's node remains", function()
    local a, b = connect("A"), connect("B")
    local path = "/m/tryonce"
    local ma, mb = a:mutex(path), b:mutex(path)
    assert(ma:acquire(5))
    local holder = util.basename(ma:node())
    local t0 = util.now()
    local res = pack(mb:acquire(0))
    assert.is_true(util.now() - t0 < 1)
    assert_code("ETIMEDOUT", res, "try-once")
    assert.is_false(mb:is_held())
    assert.is_nil(mb:token())
    assert.is_true(only_child_soon(a, path, holder, 1, { a, b }), "the try-once node was not removed within 1 s")
    assert.is_true(ma:is_held())
    assert.is_true(ma:release())
    assert.are.equal(mb, mb:acquire(0))   -- free now: try-once wins
    assert.is_true(mb:release())
  end)

  it("a timed acquire gives up after its timeout and leaves only the holder's node", function()
    local a, b = connect("A"), connect("B")
    local path = "/m/timeout"
    local ma, mb = a:mutex(path), b:mutex(path)
    assert(ma:acquire(5))
    local holder = util.basename(ma:node())
    local t0 = util.now()
    local res = pack(mb:acquire(0.3))
    local dt = util.now() - t0
    assert_code("ETIMEDOUT", res, "acquire(0.3)")
    assert.truthy(res[2]:find(path, 1, true), res[2])
    assert.is_true(dt >= 0.298, ("gave up after %.4f s, before the timeout"):format(dt))
    assert.is_true(dt < 1.5, ("gave up after %.3f s"):format(dt))
    assert.is_true(only_child_soon(a, path, holder, 1, { a, b }), "the timed-out node was not removed within 1 s")
    assert.is_true(ma:is_held())
    assert.is_true(ma:release())
  end)

  it("cancel withdraws a blocked acquire with ECANCELED; its node goes; acquire works afterwards", function()
    local a, b = connect("A"), connect("B")
    local path = "/m/cancel"
    local ma, mb = a:mutex(path), b:mutex(path)
    assert.are.equal(0, mb:cancel())       -- nothing pending
    assert(ma:acquire(5))
    local holder = util.basename(ma:node())
    local res
    b:spawn(function() res = pack(mb:acquire(10)) end)
    assert.is_true(util.wait_until(function() return #util.children(b, path) == 2 end, 3, { b }))
    local t0 = util.now()
    assert.are.equal(1, mb:cancel())
    assert.is_true(b:run(2))
    assert.is_true(util.now() - t0 < 1)
    assert_code("ECANCELED", res, "cancelled acquire")
    assert.is_true(only_child_soon(a, path, holder, 1, { a, b }), "the cancelled node was not removed within 1 s")
    assert.is_true(ma:release())
    assert.are.equal(mb, mb:acquire(2))
    assert.is_true(mb:release())
  end)

  it("coroutine.close on a coroutine suspended in acquire removes its node at once #lua54", function()
    local a, b = connect("A"), connect("B")
    local path = "/m/coclose"
    local ma, mb = a:mutex(path), b:mutex(path)
    assert(ma:acquire(5))
    local holder = util.basename(ma:node())
    local returned = false
    local co = b:spawn(function() mb:acquire(10); returned = true end)
    assert.is_true(util.wait_until(function() return #util.children(b, path) == 2 end, 3, { b }))
    assert.is_true(coroutine.close(co))
    local t0 = util.now()
    assert.is_true(only_child_soon(a, path, holder, 0.5, { a, b }),
      "the closed coroutine's node was not removed within 0.5 s")
    assert.is_true(util.now() - t0 < 0.5)
    assert.is_false(returned)
    assert.is_true(ma:release())
  end)

  it("client:run() finishes after a spawned coroutine was closed while waiting #lua54", function()
    local a, b = connect("A"), connect("B")
    local path = "/m/coclose-run"
    local ma, mb = a:mutex(path), b:mutex(path)
    assert(ma:acquire(5))
    local co = b:spawn(function() mb:acquire(10) end)
    assert.is_true(util.wait_until(function() return #util.children(b, path) == 2 end, 3, { b }))
    assert.is_true(coroutine.close(co))
    local t0 = util.now()
    local ok, err = b:run(2)
    -- the closed coroutine stops counting at once: run does not wait for a sweep or a timeout
    assert.is_true(ok, tostring(err))
    assert.is_true(util.now() - t0 < 0.05, ("run took %.3f s"):format(util.now() - t0))
    assert.are.equal(0, b:tasks())
  end)

  it("a spawned coroutine that dies while suspended in acquire loses its node within 0.5 s (sweep)", function()
    -- LuaJIT has no coroutine.close: a waiting coroutine can only die when someone other than the
    -- scheduler resumes it (misuse). The scheduler's periodic sweep must then withdraw its node.
    local a, b = connect("A"), connect("B")
    local path = "/m/sweep"
    local ma, mb = a:mutex(path), b:mutex(path)
    assert(ma:acquire(5))
    local holder = util.basename(ma:node())
    local res
    local co = b:spawn(function() res = pack(mb:acquire(10)) end)
    assert.is_true(util.wait_until(function() return #util.children(b, path) == 2 end, 3, { b }))
    assert.is_true((coroutine.resume(co)))       -- a foreign resume: acquire returns, co finishes
    assert.are.equal("dead", coroutine.status(co))
    assert.is_nil(res[1])                        -- not acquired
    assert.is_true(only_child_soon(a, path, holder, 0.5, { a, b }),
      "the dead coroutine's node was not removed within 0.5 s")
    assert.is_true(ma:release())
  end)
end)
