-- One-shot watches on plain reads (client:get/exists/children with { watch = true }) against a
-- real ZooKeeper server: each kind fires with its type, waiters suspend under the scheduler and
-- block while pumping otherwise, several waiters on one path of one client share one ZooKeeper
-- watch, a wait's timeout, session expiry and client close end every wait (nobody hangs), bad
-- input raises a clear error.
--   busted --lua=lua5.4 spec/46-watches_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")
local deps = require("support.deps")

local pack, assert_code = util.pack, util.assert_code

-- the server's watches on `path`, over all sessions
local function server_watches(zk, path)
  return #(util.watches_by_path(zk)[path] or {})
end

describe("watches on plain reads", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  it("get, exists and children arm one-shot watches that fire changed, created, child and deleted", function()
    local a, b = connect("w-a"), connect("w-b")
    assert(b:create("/w/n", "v1", { parents = true }))
    local data, stat, w = a:get("/w/n", { watch = true })
    assert.are.equal("v1", data)
    assert.are.equal(0, stat.version)
    assert.are.equal("watch", zklock.type(w))
    assert.is_nil(w:fired())
    local kids, wk = a:children("/w", { watch = true })
    assert.are.same({ "n" }, kids)
    local missing, we = a:exists("/w/new", { watch = true })
    assert.is_false(missing)
    local st, wx = a:exists("/w/n", { watch = true })
    assert.are.equal(stat.czxid, st.czxid)
    -- nothing fires before a change: a poll returns ETIMEDOUT at once
    assert_code("ETIMEDOUT", pack(w:wait(0)))
    assert(b:set("/w/n", "v2"))
    assert.are.equal("changed", w:wait(10))
    assert.are.equal("changed", w:wait(0)) -- stays fired
    assert.are.equal("changed", w:fired())
    assert.are.equal("changed", wx:wait(10))
    assert(b:create("/w/new", ""))
    assert.are.equal("created", we:wait(10))
    assert.are.equal("child", wk:wait(10))
    -- deleted
    local _, _, wd = a:get("/w/new", { watch = true })
    assert(b:delete("/w/new"))
    assert.are.equal("deleted", wd:wait(10))
    -- a get on a missing node arms nothing: plain ZNONODE, no watch object
    local res = pack(a:get("/w/none", { watch = true }))
    assert_code("ZNONODE", res)
    assert.are.equal(3, res.n)
    assert.are.equal(0, server_watches(zk, "/w/none"))
  end)

  it("a blocking read that armed nothing is not shared: the next read after a create arms its own", function()
    -- no scheduler: the reads block (Client:_block), whose answer must reach the watch layer
    local a, b = connect("w-a"), connect("w-b")
    assert_code("ZNONODE", pack(a:get("/wblock", { watch = true })))
    assert(b:create("/wblock", "v1"))
    local data, _, w = a:get("/wblock", { watch = true })
    assert.are.equal("v1", data)
    assert.is_nil(w:fired())
    assert.are.equal(1, server_watches(zk, "/wblock"))
    assert(b:set("/wblock", "v2"))
    assert.are.equal("changed", w:wait(5))
    -- a blocking read's armed watch is shared by the next read (sent without one)
    local _, w1 = a:children("/", { watch = true })
    local _, w2 = a:children("/", { watch = true })
    assert.are.equal(w1, w2)
    assert(b:create("/wblock2", ""))
    assert.are.equal("child", w2:wait(5))
    assert.are.equal(0, a:pending())
  end)

  it("a blocking wait on a watch sleeps in the pump instead of spinning until its deadline", function()
    local a = connect("w-spin")
    assert(a:create("/w/spin", "", { parents = true }))
    local _, _, w = a:get("/w/spin", { watch = true })
    local pumps, pump = 0, a._pump
    a._pump = function(...) pumps = pumps + 1; return pump(...) end
    local t0 = util.now()
    assert_code("ETIMEDOUT", pack(w:wait(0.5)))
    a._pump = nil
    assert.is_true(util.now() - t0 >= 0.45, "the wait ended early")
    -- a blocking pump ends at the watch's deadline or on I/O: a handful; a spin makes thousands
    assert.is_true(pumps <= 50, ("%d pumps in a 0.5 s wait"):format(pumps))
  end)

  it("many coroutines wait on one path of one client: one ZooKeeper watch, every waiter wakes once", function()
    local a, b = connect("s-a"), connect("s-b")
    assert(b:create("/ws/n", "0", { parents = true }))
    local N = 20
    local woke, objs = {}, {}
    local before = a:stats().watch_events
    for i = 1, N do
      a:spawn(function()
        local _, _, w = assert(a:get("/ws/n", { watch = true }))
        objs[i] = w
        woke[i] = pack(w:wait(30))
      end)
    end
    assert.is_true(util.wait_until(function() return #objs == N end, 10, { a }))
    for i = 2, N do assert.are.equal(objs[1], objs[i], "reads on one path share the armed watch") end
    assert.are.equal(1, server_watches(zk, "/ws/n"))
    assert.are.equal(N, a:pending()) -- the waits count as pending work (host pumps poll for it)
    assert(b:set("/ws/n", "1"))
    assert(a:run(10))
    for i = 1, N do assert.are.equal("changed", woke[i][1]) end
    assert.are.equal(0, a:pending())
    assert.are.equal(1, a:stats().watch_events - before, "one watch fired in the client, not one per reader")
    -- fired: the next read arms a new watch
    local _, _, w2 = a:get("/ws/n", { watch = true })
    assert.are_not.equal(objs[1], w2)
    assert.is_nil(w2:fired())
  end)

  it("wait(timeout) returns ETIMEDOUT after about the timeout, suspended or blocking; the watch stays armed", function()
    local a, b = connect("t-a"), connect("t-b")
    assert(b:create("/wt", ""))
    local _, _, w = a:get("/wt", { watch = true })
    local t0 = util.now()
    assert_code("ETIMEDOUT", pack(w:wait(0.3)))
    local blocked = util.now() - t0
    assert.is_true(blocked >= 0.3, "returned early: " .. blocked)
    local res, took
    a:spawn(function()
      local t1 = util.now()
      res = pack(w:wait(0.3))
      took = util.now() - t1
    end)
    assert(a:run(10))
    assert_code("ETIMEDOUT", res)
    assert.is_true(took >= 0.3, "returned early: " .. took)
    assert(b:set("/wt", "x"))
    assert.are.equal("changed", w:wait(10))
  end)

  it("a session expiry ends every armed watch with ESESSION; close ends them with ECLOSED", function()
    local a, b = connect("e-a"), connect("e-b")
    assert(b:create("/we", ""))
    local _, _, w = a:get("/we", { watch = true })
    local _, wk = a:children("/we", { watch = true })
    local res
    a:spawn(function() res = pack(w:wait()) end) -- no timeout: only the expiry can end it
    a:process()
    assert(testing.expire(a, zk.hosts))
    assert.is_true(util.wait_until(function() return res ~= nil end, 20, { a }))
    assert_code("ESESSION", res)
    assert_code("ESESSION", pack(wk:wait(0)))
    assert.are.equal("ESESSION", w:fired())
    -- a new session: new watches work
    assert.is_true(util.wait_until(function() return a.state == "CONNECTED" end, 20, { a }))
    local _, _, w2 = a:get("/we", { watch = true })
    local c = connect("e-c")
    local _, _, w3 = c:get("/we", { watch = true })
    local closed
    c:spawn(function() closed = pack(w3:wait()) end)
    c:process()
    c:close()
    assert_code("ECLOSED", closed)
    assert_code("ECLOSED", pack(w3:wait(1)))
    assert(b:set("/we", "y"))
    assert.are.equal("changed", w2:wait(10))
  end)

  it("a coroutine closed while waiting leaves the wait: pending() drops, the others still wake #lua54", function()
    local a, b = connect("cl-a"), connect("cl-b")
    assert(b:create("/wc", ""))
    local _, _, w = a:get("/wc", { watch = true })
    local other
    local co = a:spawn(function() w:wait() end)
    a:spawn(function() other = pack(w:wait(20)) end)
    a:process()
    assert.are.equal(2, a:pending())
    assert(coroutine.close(co))
    assert.are.equal(1, a:pending())
    assert(b:set("/wc", "x"))
    assert.is_true(util.wait_until(function() return other ~= nil end, 10, { a }))
    assert.are.equal("changed", other[1])
    assert.are.equal(0, a:pending())
  end)

  it("rejects bad input with errors naming the argument", function()
    local a = connect("bad")
    util.assert_words(util.error_of(a.get, a, "/x", { watch = "yes" }), { "get", "watch", "boolean" })
    util.assert_words(util.error_of(a.exists, a, "/x", { watch = 1 }), { "exists", "watch", "boolean" })
    util.assert_words(util.error_of(a.children, a, "/x", { wach = true }), { "children", "wach" })
    util.assert_words(util.error_of(a.set, a, "/x", "v", -1, { watch = true }), { "set", "watch" })
    assert(a:create("/wb", ""))
    local _, _, w = a:get("/wb", { watch = true })
    util.assert_words(util.error_of(w.wait, w, "soon"), { "wait", "timeout" })
    util.assert_words(util.error_of(w.wait, w, -2), { "wait" })
    util.assert_words(util.error_of(w.wait, 5), { "watch:wait" })
    util.assert_words(util.error_of(w.fired, {}), { "watch:fired" })
  end)
end)

describe("watches under the luv adapter #adapters", function()
  local uv = deps.require("luv", "apt-get install lua-luv", pending)
  if not uv then return end
  local zluv = require("zklock.adapters.luv")
  local zk
  fixture.server({}, {}, function(s) zk = s end)

  it("coroutines in a libuv loop suspend in wait: a timeout on time, a change wakes every waiter", function()
    local a = assert(zklock.connect(zk.hosts, { identity = "uvw-a" }))
    local b = assert(zklock.connect(zk.hosts, { identity = "uvw-b" }))
    zluv.attach(a, uv)
    zluv.attach(b, uv)
    assert(b:create("/wl", "0"))
    local results, timed, set_done = {}, nil, false
    local N = 5
    for i = 1, N do
      zluv.spawn(a, function()
        local _, _, w = assert(a:get("/wl", { watch = true }))
        results[i] = pack(w:wait(20))
      end)
    end
    zluv.spawn(a, function()
      local _, _, w = assert(a:get("/wl", { watch = true }))
      local t0 = util.now()
      timed = { pack(w:wait(0.3)), util.now() - t0 }
    end)
    zluv.spawn(b, function()
      while not timed do b:sleep(0.02) end -- the change comes after the timed wait ended
      assert(b:set("/wl", "1"))
      set_done = true
    end)
    uv.update_time() -- the loop's clock is cached since the last uv.run (another spec's, maybe long ago)
    local dog = uv.new_timer()
    local expired = false
    dog:start(30000, 0, function() expired = true; uv.stop() end)
    dog:unref()
    local closer = uv.new_timer()
    closer:start(20, 20, function()
      local n = 0
      for i = 1, N do if results[i] then n = n + 1 end end
      if n == N and set_done then
        closer:close()
        a:close()
        b:close()
      end
    end)
    uv.run()
    if not dog:is_closing() then dog:close() end
    uv.run("nowait")
    assert.is_false(expired, "the loop did not finish within 30 s")
    assert_code("ETIMEDOUT", timed[1])
    assert.is_true(timed[2] >= 0.3 and timed[2] < 5, "timed wait took " .. timed[2] .. " s")
    for i = 1, N do assert.are.equal("changed", results[i][1]) end
  end)
end)
