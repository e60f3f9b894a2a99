-- The mutex (Curator InterProcessMutex) against a real ZooKeeper: the shared server of
-- spec/support/fixture.lua (clean at each describe's start). Runs under Lua 5.4 and LuaJIT (tests
-- tagged #lua54 are 5.4 only).
-- This file: fencing tokens, FIFO grants, participants(), close with pending acquires.
--   busted --lua=lua5.4 spec/11-mutex-queue_spec.lua
--   busted --lua=luajit --run=luajit spec/11-mutex-queue_spec.lua
local zklock = require("zklock")
local util = require("support.util")
local fixture = require("support.fixture")
local H = require("support.mutex")

local pack, assert_code = H.pack, H.assert_code

describe("mutex: tokens, order, participants, close", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  ------------------------------------------------------------------ tokens, order, participants

  it("fencing tokens grow strictly across successive holders", function()
    local clients = { connect("t1"), connect("t2"), connect("t3") }
    local path = "/m/tokens"
    local grants, errors = {}, {}
    for i, c in ipairs(clients) do
      local m = c:mutex(path)
      for k = 1, 2 do
        c:spawn(function()
          for round = 1, 3 do
            if m:token() ~= nil then errors[#errors + 1] = "token while not held" end
            assert(m:acquire(20))
            local t = m:token()
            grants[#grants + 1] = { token = t, who = ("c%d/co%d/r%d"):format(i, k, round) }
            c:sleep(0)
            assert(m:release())
            if m:token() ~= nil then errors[#errors + 1] = "token after release" end
          end
        end)
      end
    end
    assert.is_true(zklock.run(clients, 30))
    assert.are.same({}, errors)
    assert.are.equal(18, #grants)
    for i, g in ipairs(grants) do
      assert.is_true(util.is_integer(g.token), "token is not an integer: " .. tostring(g.token))
      assert.is_true(g.token > 0)
      if i > 1 then
        assert.is_true(g.token > grants[i - 1].token,
          ("token of grant %d (%s, %s) is not above grant %d (%s, %s)"):format(i, g.who, tostring(g.token),
            i - 1, grants[i - 1].who, tostring(grants[i - 1].token)))
      end
    end
  end)

  it("grants in FIFO order: a holder and 10 waiters from several clients", function()
    local h = connect("holder")
    local clients = { connect("f1"), connect("f2"), connect("f3") }
    local all = { h, clients[1], clients[2], clients[3] }
    local path = "/m/fifo"
    local hm = h:mutex(path)
    assert(hm:acquire(5))
    local locks = {}
    for i, c in ipairs(clients) do locks[i] = c:mutex(path) end
    local names, order, granted_node, heads = {}, {}, {}, {}
    local seen = { [util.basename(hm:node())] = true }
    for i = 1, 10 do
      local ci = (i - 1) % #clients + 1
      local c, m = clients[ci], locks[ci]
      c:spawn(function()
        assert(m:acquire(30))
        order[#order + 1] = i
        granted_node[i] = util.basename(m:node())
        local p = assert(m:participants())
        heads[i] = p[1] and p[1].node
        c:sleep(0.01)
        assert(m:release())
      end)
      -- wait until this waiter's node is queued before starting the next
      local new
      assert.is_true(util.wait_until(function()
        for _, name in ipairs(util.children(h, path)) do
          if not seen[name] then new = name return true end
        end
      end, 5, all), "waiter " .. i .. " did not queue")
      seen[new] = true
      names[i] = new
    end
    assert.are.equal(11, #util.children(h, path))
    for i = 2, 10 do assert.is_true(util.seq(names[i]) > util.seq(names[i - 1])) end
    assert.is_true(hm:release())
    assert.is_true(zklock.run(all, 30))
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, order)
    for i = 1, 10 do
      assert.are.equal(names[i], granted_node[i])   -- each waiter got the node it queued with
      assert.are.equal(names[i], heads[i])          -- and was the head of the queue when granted
    end
    assert.are.same({}, util.children(h, path))
  end)

  it("participants() lists the queue in order, holder first, with each identity as data", function()
    local h = connect("holder-id")
    local ws = { connect("w1"), connect("w2"), connect("w3") }
    local all = { h, ws[1], ws[2], ws[3] }
    local path = "/m/participants"
    local hm = h:mutex(path)
    assert.are.same({}, hm:participants())            -- nothing there yet (no parent)
    assert(hm:acquire(5))
    local wl = {}
    for i, c in ipairs(ws) do
      wl[i] = c:mutex(path)
      local m = wl[i]
      c:spawn(function() m:acquire(30) end)
      assert.is_true(util.wait_until(function() return #util.children(h, path) == i + 1 end, 5, all))
    end
    for _, viewer in ipairs({ hm, wl[2] }) do
      local p = assert(viewer:participants())
      assert.are.equal(4, #p)
      assert.are.equal(util.basename(hm:node()), p[1].node)
      local ids = {}
      for i, e in ipairs(p) do
        ids[i] = e.data
        assert.matches(util.MUTEX_NODE, e.node)
        assert.are.equal(path .. "/" .. e.node, e.path)
        assert.is_number(e.sequence)
        assert.are.equal(util.seq(e.node), e.sequence)
        if i > 1 then assert.is_true(e.sequence > p[i - 1].sequence) end
      end
      assert.are.same({ "holder-id", "w1", "w2", "w3" }, ids)
    end
    for _, m in ipairs(wl) do assert.are.equal(1, m:cancel()) end
    assert.is_true(hm:release())
    assert.is_true(util.wait_until(function() return #util.children(h, path) == 0 end, 2, all))
  end)

  ------------------------------------------------------------------ close

  it("close fails pending acquires with ECLOSED and its held nodes vanish", function()
    local a = connect("other")
    local b = connect("closing")
    local p1, p2, p3 = "/m/close/contended", "/m/close/held-main", "/m/close/held-co"
    local ma = a:mutex(p1)
    assert(ma:acquire(5))
    local holder = util.basename(ma:node())
    local shared = b:mutex(p1)             -- two coroutines and the main thread wait on one object
    local other = b:mutex(p1)
    local m2, m3 = b:mutex(p2), b:mutex(p3)
    assert(m2:acquire(5))
    local results = {}
    local m3_held = false
    b:spawn(function()                              -- holds p3 and finishes holding it
      assert(m3:acquire(5))
      m3_held = true
    end)
    b:spawn(function() results[1] = pack(shared:acquire(30)) end)
    b:spawn(function() results[2] = pack(shared:acquire(30)) end)
    b:spawn(function() results[3] = pack(other:acquire()) end)
    local closed_at
    b:spawn(function()
      -- close once the three spawned waiters and the main thread are all queued
      for _ = 1, 500 do
        if m3_held and #assert(b:children(p1)) == 5 then break end
        b:sleep(0.01)
      end
      closed_at = util.now()
      b:close()
    end)
    local t0 = util.now()
    local main_res = pack(shared:acquire(30))      -- blocks, driving b, until the closer runs
    assert.is_true(util.now() - t0 < 10)
    assert.truthy(closed_at, "the closer never ran")
    assert.is_true(m3_held)
    assert_code("ECLOSED", main_res, "main-thread acquire")
    for i = 1, 3 do assert_code("ECLOSED", results[i], "spawned acquire " .. i) end
    assert.is_false(shared:is_held())
    assert.is_false(m2:is_held())
    -- seen from the other client: only its own node is left, the held locks are free
    assert.is_true(util.wait_until(function()
      local ch = util.children(a, p1)
      return #ch == 1 and ch[1] == holder and #util.children(a, p2) == 0 and #util.children(a, p3) == 0
    end, 1, { a }), "nodes of the closed client were left behind")
    local m3a = a:mutex(p3)
    assert.are.equal(m3a, m3a:acquire(0))
    assert.is_true(m3a:release())
    assert.is_true(ma:release())
  end)
  it("a waiter whose predecessor gives up does not acquire while its own client's holder holds", function()
    -- queue: H (client 2, holds), A (client 1), P (client 2, gives up after 2 s), B (client 1). H
    -- releases: A holds. P goes: B walks down the listing it kept to A, this client's own grant,
    -- which it must wait for (A's grant set the client's floor for the dir at A's node).
    local c1, c2 = connect("own"), connect("other")
    local path = "/m/own-floor"
    local mh, ma, mp, mb = c2:mutex(path), c1:mutex(path), c2:mutex(path), c1:mutex(path)
    assert(mh:acquire(5))
    local a_at, p_res, b_at, a_released_at, a_may_release, a_held_throughout
    local function queued(n)
      assert.is_true(util.wait_until(function() return util.child_count(c1, path) == n end, 10, { c1, c2 }))
    end
    c1:spawn(function() -- A holds in its own coroutine until told to release
      assert(ma:acquire(30))
      a_at = util.now()
      while not a_may_release do c1:sleep(0.02) end
      a_held_throughout = ma:is_held()
      a_released_at = util.now()
      assert(ma:release())
    end)
    queued(2)
    c2:spawn(function() p_res = pack(mp:acquire(2)) end)
    queued(3)
    c1:spawn(function()
      assert(mb:acquire(30))
      b_at = util.now()
      assert(mb:release())
    end)
    queued(4)
    assert(mh:release())
    assert.is_true(util.wait_until(function() return a_at ~= nil end, 10, { c1, c2 }))
    -- P times out and its node goes; B must still wait for A
    assert.is_true(util.wait_until(function() return p_res ~= nil end, 10, { c1, c2 }))
    assert_code("ETIMEDOUT", p_res)
    queued(2)
    util.drive({ c1, c2 }, 0.5)
    assert.is_nil(b_at, "B acquired while A still held the mutex")
    a_may_release = true
    assert.is_true(zklock.run({ c1, c2 }, 10))
    assert.is_true(a_held_throughout)
    assert.is_true(b_at ~= nil and b_at >= a_released_at)
  end)
end)
