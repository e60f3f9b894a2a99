-- client:zookeeper_lock, the lock that shares a directory with ZooKeeper's own WriteLock recipe,
-- on a real ZooKeeper server (the interop with the real WriteLock is in
-- spec/76-curator-shared_spec.lua): node names x-<session id in decimal>-<seq10>, WriteLock's
-- ZNodeName order (by the sequence, whatever the prefix, negative after a wrap), mutual exclusion
-- and FIFO among many waiters on several clients (hold intervals never overlap), a waiter that
-- gives up takes its node with it, callbacks, loss reports (on_lost: SUSPENDED, RECONNECTED,
-- LOST), bad input.
--   busted --lua=lua5.4 spec/59-zookeeper-lock_spec.lua     busted --lua=luajit --run=luajit ...
local zklock = require("zklock")
local core = require("zklock.core")
local zkl = require("zklock.zookeeper_lock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

local pack, assert_code = util.pack, util.assert_code

local function raises(pattern, fn, ...)
  local msg = util.error_of(fn, ...)
  assert.is_string(msg, "expected an error matching " .. pattern)
  assert.truthy(msg:find(pattern, 1, true), ("%q does not contain %q"):format(msg, pattern))
end

describe("zookeeper_lock (ZooKeeper's WriteLock recipe)", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  it("WriteLock's ZNodeName order", function()
    assert.are.same({ "x-12", 7 }, { zkl.parse("x-12-0000000007") })
    assert.are.same({ "x-5", -2147483648 }, { zkl.parse("x-5--2147483648") })
    assert.are.same({ "_c_ab-lock", 3 }, { zkl.parse("_c_ab-lock-0000000003") })
    assert.are.same({ "plain" }, { zkl.parse("plain") })
    assert.are.same({ "x-2" }, { zkl.parse("x-2-abc") })
    local names = { "zz", "x-9-0000000010", "x-2-abc", "_c_a-lock-0000000003", "x-1--0000000002" }
    table.sort(names, zkl.less)
    assert.are.same({ "x-1--0000000002", "_c_a-lock-0000000003", "x-9-0000000010", "x-2-abc", "zz" }, names)
  end)

  it("excludes and queues in order across clients; names x-<sid>-<seq>; callbacks", function()
    local cs = { connect("z-1"), connect("z-2"), connect("z-3") }
    local holds, order, errors = {}, {}, {}
    local inside = 0
    local calls = { acq = 0, rel = 0 }
    for round = 1, 4 do
      for i, c in ipairs(cs) do
        c:spawn(function()
          local lk = c:zookeeper_lock("/zl/q", {
            on_acquired = function() calls.acq = calls.acq + 1 end,
            on_released = function() calls.rel = calls.rel + 1 end })
          local ok, msg = lk:acquire(60)
          if not ok then errors[#errors + 1] = msg return end
          inside = inside + 1
          if inside ~= 1 then errors[#errors + 1] = "two holders at once" end
          local node = lk:node():match("[^/]+$")
          local dec = require("zklock.internal.recipe").session_decimal(c)
          if node:sub(1, #dec + 3) ~= "x-" .. dec .. "-" then errors[#errors + 1] = "bad name " .. node end
          order[#order + 1] = select(2, zkl.parse(node))
          local t0 = core.now()
          c:sleep(0.02)
          holds[#holds + 1] = { t0, core.now(), round, i }
          inside = inside - 1
          assert(lk:release())
        end)
      end
    end
    assert(zklock.run(cs, 120))
    assert.are.same({}, errors)
    assert.are.equal(12, #holds)
    for i = 2, #order do assert.is_true(order[i] > order[i - 1], "grants out of sequence order") end
    table.sort(holds, function(a, b) return a[1] < b[1] end)
    for i = 2, #holds do assert.is_true(holds[i][1] >= holds[i - 1][2], "hold intervals overlap") end
    assert.are.same({ acq = 12, rel = 12 }, calls)
    assert.are.same({}, util.children(cs[1], "/zl/q"))
  end)

  it("a waiter that gives up removes its node; a holder that goes lets the next one through", function()
    local a, b = connect("g-1"), connect("g-2")
    local la, lb = a:zookeeper_lock("/zl/g"), b:zookeeper_lock("/zl/g")
    assert.are.equal(la, la:acquire(5))
    local t0 = core.now()
    local res = pack(lb:acquire(0.4))
    assert_code("ETIMEDOUT", res)
    assert.is_true(core.now() - t0 >= 350)
    assert.is_nil(lb:node())
    assert.are.equal(1, #util.children(a, "/zl/g"))
    assert_code("ETIMEDOUT", pack(lb:acquire(0))) -- try once
    assert.are.equal(1, #util.children(a, "/zl/g"))
    -- the holder's client closes: its ephemeral node goes, the waiter is through
    local got
    b:spawn(function() got = pack(lb:acquire(30)) end)
    util.drive({ b }, 0.2)
    a:close()
    assert.is_truthy(util.wait_until(function() return got end, 20, { b }))
    assert.are.equal(lb, got[1], tostring(got[2]))
    assert(lb:release())
  end)

  it("a holder whose session expires: is_held() turns false, release() says ELOST, the next one gets it",
    function()
    local a, b = connect("ex-1"), connect("ex-2")
    local released, states, la = 0, {}, nil
    la = a:zookeeper_lock("/zl/ex", { on_released = function() released = released + 1 end,
                                            on_lost = function(st, l) states[#states + 1] = st; assert(l == la) end })
    local lb = b:zookeeper_lock("/zl/ex")
    assert.are.equal(la, la:acquire(5))
    local got
    b:spawn(function() got = pack(lb:acquire(30)) end)
    util.drive({ b }, 0.2)
    assert(testing.expire(a, fx.zk.hosts))
    assert.is_truthy(util.wait_until(function() return got end, 20, { a, b }))
    assert.are.equal(lb, got[1], tostring(got[2]))
    assert.is_truthy(util.wait_until(function() return a:session() ~= nil end, 20, { a }))
    assert.is_false(la:is_held())
    -- told once, LOST last (a SUSPENDED may come first, while the client finds out)
    assert.is_true(#states >= 1 and #states <= 2, table.concat(states, " "))
    assert.are.equal("LOST", states[#states])
    local res = pack(la:release())
    assert_code("ELOST", res)
    assert.are.equal(1, released)
    assert.is_nil(la:node())
    assert.is_true(lb:is_held())
    assert(lb:release())
  end)

  -- A coroutine closed (coroutine.close) while its acquire waits gives up like a timeout: its
  -- node goes at once (the client's reaper of dead owners), not when the session ends, and the
  -- next waiter behind it is not held up.
  it("a coroutine closed while its acquire waits leaves no node; the next waiter gets through #lua54", function()
    local lines = {}
    local a, c = connect("cw-1"), connect("cw-3")
    local b = connect({ identity = "cw-2", log = function(line) lines[#lines + 1] = line end })
    local la, lb, lc = a:zookeeper_lock("/zl/closed"), b:zookeeper_lock("/zl/closed"), c:zookeeper_lock("/zl/closed")
    assert.are.equal(la, la:acquire(5))
    local res, got
    local co = b:spawn(function() res = pack(lb:acquire(30)) end)
    util.drive({ b }, 0.3)
    c:spawn(function() got = pack(lc:acquire(30)) end) -- queued behind b's node
    util.drive({ c }, 0.3)
    assert.are.equal(3, #util.children(a, "/zl/closed"))
    assert.are.equal("suspended", coroutine.status(co))
    assert(coroutine.close(co))
    assert.is_truthy(util.wait_until(function() return #util.children(a, "/zl/closed") == 2 end, 5, { b, c }),
      "the closed waiter's node stayed")
    assert.is_nil(lb:node())
    util.assert_words(table.concat(lines, "\n"), { "zookeeper_lock /zl/closed", "while it waited", "removed" })
    assert(la:release())
    assert.is_truthy(util.wait_until(function() return got end, 10, { b, c }))
    assert.are.equal(lc, got[1], tostring(got[2]))
    assert.is_nil(res) -- never resumed
    assert(lc:release())
    assert.are.same({}, util.children(a, "/zl/closed"))
    -- the object acquires again
    assert.are.equal(lb, lb:acquire(5))
    assert(lb:release())
  end)

  it("a coroutine closed while its acquire's create is in flight leaves no node #lua54", function()
    local a, b = connect("cf-1"), connect("cf-2")
    local la, lb = a:zookeeper_lock("/zl/closed-create"), b:zookeeper_lock("/zl/closed-create")
    assert.are.equal(la, la:acquire(5))
    local co = b:spawn(function() lb:acquire(30) end)
    -- one round at a time: the round that starts the coroutine sends the create; the server
    -- applies it while `b` is not pumped, so its reply is not read when the coroutine is closed
    local caught = false
    for _ = 1, 500 do
      b:process()
      util.sleep(0.02)
      if lb:node() then break end -- the reply was read first (a busy machine): not this time
      if #util.children(a, "/zl/closed-create") == 2 then caught = true break end
    end
    assert.is_true(caught, "the create was never seen in flight")
    assert(coroutine.close(co))
    assert.is_truthy(util.wait_until(function() return #util.children(a, "/zl/closed-create") == 1 end, 5, { b }),
      "the node made by the create whose coroutine was closed stayed")
    assert(la:release())
    assert.are.same({}, util.children(a, "/zl/closed-create"))
  end)

  it("the client closed while acquire waits: ECLOSED, no error raised, no node", function()
    local a, b = connect("cc-1"), connect("cc-2")
    local la, lb = a:zookeeper_lock("/zl/client-closed"), b:zookeeper_lock("/zl/client-closed")
    assert.are.equal(la, la:acquire(5))
    local res
    b:spawn(function() res = pack(pcall(lb.acquire, lb, 30)) end)
    util.drive({ b }, 0.3)
    assert.are.equal(2, #util.children(a, "/zl/client-closed"))
    b:close()
    assert.is_true(res[1], tostring(res[2])) -- returned, did not raise
    assert.is_nil(res[2])
    assert.are.equal("ECLOSED", res[4], tostring(res[3]))
    assert.is_nil(lb:node())
    assert.are.equal(1, #util.children(a, "/zl/client-closed"))
    assert(la:release())
  end)

  it("acquire before the first session waits for one, as a mutex's does (no ECONNECTING)", function()
    local c = connect({ identity = "early", wait = false })
    assert.are.equal("CONNECTING", c.state)
    local lk = c:zookeeper_lock("/zl/early")
    assert.are.equal(lk, lk:acquire(10))
    assert.is_true(lk:is_held())
    assert.is_true(util.is_integer(lk:token()))
    assert.is_true(lk:release())
    assert.are.same({}, util.children(c, "/zl/early"))
  end)

  it("cancel() withdraws a waiting acquire: ECANCELED, its node deleted; cancel() with nothing pending is 0",
    function()
    local a, b = connect("cn-1"), connect("cn-2")
    local la, lb = a:zookeeper_lock("/zl/cancel"), b:zookeeper_lock("/zl/cancel")
    assert.are.equal(0, lb:cancel())
    assert.are.equal(la, la:acquire(5))
    local res
    b:spawn(function() res = pack(lb:acquire(60)) end)
    assert.is_truthy(util.wait_until(function() return #util.children(a, "/zl/cancel") == 2 end, 10, { a, b }))
    local t0 = util.now()
    assert.are.equal(1, lb:cancel())
    assert.is_truthy(util.wait_until(function() return res end, 10, { a, b }))
    assert.is_true(util.now() - t0 < 5, "cancel took " .. (util.now() - t0) .. " s")
    assert_code("ECANCELED", res)
    assert.are.same(1, #util.children(a, "/zl/cancel"))
    assert.is_true(la:release())
    assert.are.equal(lb, lb:acquire(5)) -- the object acquires again
    assert.is_true(lb:release())
    assert.are.same({}, util.children(a, "/zl/cancel"))
  end)

  it("bad input and misuse raise clear errors", function()
    local a = connect("bad")
    raises("bad argument #1 to 'zookeeper_lock' (lock path", function() a:zookeeper_lock(nil) end)
    raises("bad argument #1 to 'zookeeper_lock' (lock path", function() a:zookeeper_lock("rel") end)
    raises("bad argument #1 to 'zookeeper_lock' (lock path", function() a:zookeeper_lock("/") end)
    raises("unknown option 'listener'", function() a:zookeeper_lock("/zl/b", { listener = print }) end)
    raises("option 'on_acquired'", function() a:zookeeper_lock("/zl/b", { on_acquired = 1 }) end)
    raises("option 'data'", function() a:zookeeper_lock("/zl/b", { data = 1 }) end)
    raises("option 'on_lost'", function() a:zookeeper_lock("/zl/b", { on_lost = "x" }) end)
    raises("with a colon", function() a.zookeeper_lock("/zl/b") end)
    local lk = a:zookeeper_lock("/zl/b")
    raises("bad argument #1 to 'acquire' (timeout", function() lk:acquire(-1) end)
    raises("release while not held", function() lk:release() end)
    raises("bad argument #1 to 'on_lost' (expected a function (or nil to remove the handler)",
      function() lk:on_lost(1) end)
    raises("use zookeeper_lock:on_lost", function() lk.on_lost(nil, print) end)
    assert.are.equal(lk, lk:on_lost(nil))
    assert.are.equal(lk, lk:acquire(5))
    raises("not reentrant", function() lk:acquire(5) end)
    assert.are.equal(zkl.DATA, (a:get(lk:node())))
    assert(lk:release())
    assert.is_false(lk:is_held())
    a:close()
    raises("closed client", function() lk:acquire(1) end)
  end)
end)

describe("zookeeper_lock: loss reports", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, { resume = true, each = true, own = "pauses the server" },
    function(s) zk = s end)

  it("a connection lost for less than the session timeout: SUSPENDED, then RECONNECTED, still held", function()
    local S = 6 -- SUSPENDED after 2/3 S without the server (4 s), LOST only after 0.9 S (5.4 s)
    local a = util.connect(zk.hosts, { session_timeout = S, identity = "zl-pause" })
    local states = {}
    local lk = a:zookeeper_lock("/zl/pause"):on_lost(function(st) states[#states + 1] = st end)
    assert.are.equal(lk, lk:acquire(5))
    local idle = a:zookeeper_lock("/zl/idle", { on_lost = function(st) states[#states + 1] = "idle " .. st end })
    local sid, node = a:session(), lk:node()
    assert.truthy(a:exists("/")) -- fresh contact: the session clocks start now
    local t0 = util.now()
    zk:pause()
    local suspended = util.drive_until({ a }, function() return states[1] ~= nil end, S)
    zk:resume()
    assert.is_true(suspended, "no SUSPENDED within the session timeout")
    assert.is_true(util.now() - t0 < 0.85 * S, "resumed too late to expect RECONNECTED")
    assert.is_true(util.drive_until({ a }, function() return states[2] ~= nil end, 2 * S), table.concat(states, " "))
    util.drive({ a }, 0.2)
    assert.are.same({ "SUSPENDED", "RECONNECTED" }, states) -- the lock not held (idle) hears nothing
    assert.are.equal(sid, (a:session()))
    assert.is_true(lk:is_held())
    assert.are.equal(node, lk:node())
    assert.is_true(lk:release())
    assert.is_nil(idle:node())
  end)
end)
