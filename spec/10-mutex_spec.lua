-- The mutex (Curator InterProcessMutex) against real ZooKeeper servers: one server per describe
-- block, stopped in teardown. Runs under Lua 5.4 and LuaJIT (tests tagged #lua54 are 5.4 only).
--   busted --lua=lua5.4 spec/10-mutex_spec.lua
--   busted --lua=luajit --run=luajit spec/10-mutex_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")

local unpack_ = table.unpack or unpack

local pack, assert_code = util.pack, util.assert_code

-- Drive `clients` until `name` is the only child of `path` as client c sees it (within `timeout` s).
local function only_child_soon(c, path, name, timeout, clients)
  return util.wait_until(function()
    local ch = util.children(c, path)
    return #ch == 1 and ch[1] == name
  end, timeout, clients)
end

describe("mutex", function()
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() util.close_all() if zk then zk:stop() end end)
  after_each(util.close_all)

  local function connect(identity)
    return util.connect(zk.hosts, { identity = identity })
  end

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
    assert.is_true(only_child_soon(a, path, holder, 0.5, { a, b }), "the closed coroutine's node was not removed within 0.5 s")
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
    assert.is_true(only_child_soon(a, path, holder, 0.5, { a, b }), "the dead coroutine's node was not removed within 0.5 s")
    assert.is_true(ma:release())
  end)

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
end)

describe("mutex under many waiters", function()
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() util.close_all() if zk then zk:stop() end end)
  after_each(util.close_all)

  it("no herd: 200 waiters over 10 clients, every release wakes exactly one", function()
    local path = "/herd/lock"
    local h = util.connect(zk.hosts, { identity = "holder" })
    local hm = h:mutex(path)
    assert(hm:acquire(5))
    local clients = {}
    for i = 1, 10 do clients[i] = util.connect(zk.hosts, { identity = "c" .. i }) end
    local all = { h }
    for _, c in ipairs(clients) do all[#all + 1] = c end
    local before = util.stats_sum(clients)
    local done, in_lock, overlap = 0, 0, false
    for i, c in ipairs(clients) do
      local m = c:mutex(path)
      for _ = 1, 20 do
        c:spawn(function()
          assert(m:acquire(60))
          in_lock = in_lock + 1
          if in_lock > 1 then overlap = true end
          in_lock = in_lock - 1
          assert(m:release())
          done = done + 1
        end)
      end
    end
    assert.is_true(util.wait_until(function() return #util.children(h, path) == 201 end, 30, all),
      "the 200 waiters did not all queue")
    assert.are.equal(0, util.mntr(zk, "zk_max_node_children_watch_count"))
    assert.is_true(util.mntr(zk, "zk_max_node_deleted_watch_count") <= 1)
    local t0 = util.now()
    assert.is_true(hm:release())
    assert.is_true(zklock.run(clients, 60))
    local handoff_time = util.now() - t0
    assert.are.equal(200, done)
    assert.is_false(overlap)

    -- server side: each deletion woke at most one watcher, nobody watched children
    local m = assert(zk:mntr())
    assert.is_true(m.zk_max_node_deleted_watch_count <= 1,
      "a deletion woke " .. tostring(m.zk_max_node_deleted_watch_count) .. " watchers")
    assert.are.equal(0, m.zk_max_node_children_watch_count)

    -- client side: one create and one watch per waiter; a woken waiter lists again unless the node
    -- it watched was the head at its last listing (then the grant is a handoff, with no listing).
    -- A waiter deeper in the queue cannot skip that listing safely: its predecessor may have left
    -- by timeout or cancel while an earlier node still holds.
    local d = util.stats_delta(before, util.stats_sum(clients))
    local report = util.format_stats(d) .. (" handoff chain %.2f s"):format(handoff_time)
    assert.are.equal(200, d.acquired, report)
    assert.are.equal(200, d.creates, report)
    assert.is_true(d.gets <= 200 + 5, report)
    assert.is_true(d.handoffs >= 1, report)
    assert.is_true(d.lists <= 200 + (200 - d.handoffs) + 5, report)
    assert.is_true(d.watch_events <= 200 + 5, report)

    -- nothing left: no children, no watches
    assert.are.same({}, util.children(h, path))
    assert.is_true(util.wait_until(function() return #util.watched_paths(zk) == 0 end, 2, all),
      "watches left: " .. table.concat(util.watched_paths(zk), " "))
    assert.are.equal(0, util.mntr(zk, "zk_watch_count"))
  end)

  it("waiters that timed out leave no watch behind, so a release wakes no stale session", function()
    -- (test catalogue TO-02 / NC-03) Runs after the herd test: the server's max deleted-watch
    -- count is 1 at this point.
    local path = "/herd/stale"
    local h = util.connect(zk.hosts, { identity = "holder" })
    local hm = h:mutex(path)
    assert(hm:acquire(5))
    local holder_node = hm:node()
    local quitters = {}
    for i = 1, 4 do
      quitters[i] = util.connect(zk.hosts, { identity = "q" .. i })
      assert_code("ETIMEDOUT", pack(quitters[i]:mutex(path):acquire(0.1)), "quitter " .. i)
    end
    local all = { h, unpack_(quitters) }
    assert.is_true(util.wait_until(function() return #util.children(h, path) == 1 end, 1, all))
    local watchers = util.watches_by_path(zk)[holder_node] or {}
    assert.is_true(hm:release())
    util.drive(all, 0.2)
    local max = util.mntr(zk, "zk_max_node_deleted_watch_count")
    if #watchers > 0 or max > 1 then
      pending(("bug: %d sessions still watch the holder's node after their acquire(0.1) timed out; "
        .. "its deletion woke %d watchers (zk_max_node_deleted_watch_count)"):format(#watchers, max))
    end
    assert.are.equal(0, #watchers)
    assert.is_true(max <= 1)
  end)
end)

describe("mutex with many coroutines in one process", function()
  local zk

  setup(function() zk = testing.server{} end)
  teardown(function() util.close_all() if zk then zk:stop() end end)

  it("1,000 coroutines on one client share 10 locks: exact counters, never two holders", function()
    local c = util.connect(zk.hosts, { identity = "many" })
    local locks, counters, inside, max_inside = {}, {}, {}, {}
    for k = 1, 10 do
      locks[k] = c:mutex("/many/l" .. k)
      counters[k], inside[k], max_inside[k] = 0, 0, 0
    end
    local finished = 0
    local before = c:stats()
    for i = 1, 1000 do
      local k = i % 10 + 1
      local m = locks[k]
      c:spawn(function()
        assert(m:acquire(60))
        inside[k] = inside[k] + 1
        if inside[k] > max_inside[k] then max_inside[k] = inside[k] end
        local v = counters[k]       -- read, yield, write: a second holder would lose an update
        c:sleep(0)
        counters[k] = v + 1
        inside[k] = inside[k] - 1
        assert(m:release())
        finished = finished + 1
      end)
    end
    local t0 = util.now()
    assert.is_true(c:run(120))
    local dt = util.now() - t0
    assert.are.equal(1000, finished)
    local total = 0
    for k = 1, 10 do
      assert.are.equal(100, counters[k], "lost updates on lock " .. k)
      assert.are.equal(1, max_inside[k], "two holders at once on lock " .. k)
      total = total + counters[k]
      assert.are.same({}, util.children(c, "/many/l" .. k))
    end
    assert.are.equal(1000, total)
    local d = util.stats_delta(before, c:stats())
    assert.are.equal(1000, d.acquired, util.format_stats(d))
    assert.is_true(dt < 120, ("took %.1f s"):format(dt))
  end)
end)
