-- The hold protocol, checked the same way over every family of grant (spec/support/conformance.lua:
-- mutex, both read-write sides, semaphore mutex, lease, multi-lock, zookeeper_lock) against a
-- real server (docs/design.md, "One hold protocol"; docs/recipes.md, "When a hold is lost"):
--   * acquire with nil, 0, 1e-9, a huge number, math.huge (granted when free; 0 and 1e-9 give up
--     at once with ETIMEDOUT when another client holds it; math.huge waits for the release), NaN
--     and negative (raise, naming the argument);
--   * acquire returns the grant (the acquirer itself, or the lease), offering release, is_held,
--     token, node, on_lost, transaction; release twice raises the second time; a dot raises;
--   * <close> releases (#lua54); a grant collected while held is released in the background;
--   * the session's expiry reports LOST once: is_held() false, token() nil, release() ELOST, a
--     fenced transaction refused;
--   * the node deleted by another client: a fenced transaction (or a release) finds it, LOST is
--     reported once, is_held() false, release() ELOST;
--   * tokens of successive grants rise;
--   * nothing of the test is left on the server.
-- The argument checks also run without a server: spec/fast/conformance_spec.lua.
--   busted --lua=lua5.4 spec/21-conformance_spec.lua   busted --lua=luajit --run=luajit spec/21-...
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")
local conf = require("support.conformance")

local pack, assert_code = util.pack, util.assert_code

local function raises(words, fn, ...)
  return util.assert_words(util.error_of(fn, ...), words)
end

-- a handler that counts the states it hears: rec.LOST, rec.order
local function recorder(g)
  local rec = { order = {} }
  g:on_lost(function(state, obj, why)
    rec[state] = (rec[state] or 0) + 1
    rec.order[#rec.order + 1] = state
    rec.obj, rec.why = obj, why
  end)
  return rec
end

describe("hold protocol conformance", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect
  local seq = 0

  for _, f in ipairs(conf.families) do
    local function fresh()
      seq = seq + 1
      return ("/conf/%s/%d"):format(f.slug, seq)
    end
    -- nothing of the test left on the server (checked from a client of its own)
    local function assert_empty(path, clients)
      local obs = connect("observer")
      local ok = util.wait_until(function()
        for _, d in ipairs(f.dirs(path)) do
          if #util.children(obs, d) > 0 then return false end
        end
        return true
      end, 10, clients)
      for _, d in ipairs(f.dirs(path)) do
        assert.are.same({}, util.children(obs, d), f.name .. ": left on the server under " .. d)
      end
      assert.is_true(ok)
    end

    it(f.name .. ": acquire with nil, 0, 1e-9, huge, math.huge when free returns the grant; NaN and negative "
       .. "raise", function()
      local c = connect("free")
      local path = fresh()
      local obj = f.new(c, path)
      for _, t in ipairs({ "nil", 0, 1e-9, 1e300, math.huge }) do
        local timeout = t ~= "nil" and t or nil
        local g, msg, code = obj:acquire(timeout)
        if t == 1e-9 and code == "ETIMEDOUT" then
          -- a positive timeout bounds the whole acquire, its first round trip included: 1e-9
          -- (1 ms) may end before the server answers, even on a free lock (docs/design.md)
          g = assert(obj:acquire(5))
        end
        assert.truthy(g, ("%s acquire(%s): %s"):format(f.name, tostring(t), tostring(msg)))
        if f.same then assert.are.equal(obj, g, "acquire returns the acquirer") end
        for _, name in ipairs(conf.GRANT_METHODS) do
          assert.is_function(g[name], f.name .. " grant lacks " .. name)
        end
        assert.is_true(g:is_held())
        assert.is_true(util.is_integer(g:token()), "token: " .. tostring(g:token()))
        local nodes = f.nodes(g)
        assert.is_true(#nodes >= 1)
        for _, n in ipairs(nodes) do assert.is_string(n) end
        assert.is_true(g:release())
        assert.is_false(g:is_held())
        assert.is_nil(g:token())
      end
      raises({ "bad argument #1 to 'acquire'", "timeout", "NaN" }, obj.acquire, obj, 0 / 0)
      raises({ "bad argument #1 to 'acquire'", "timeout", "-1" }, obj.acquire, obj, -1)
      assert_empty(path, { c })
    end)

    it(f.name .. ": held by another client: 0 and 1e-9 give up at once (ETIMEDOUT), math.huge waits for the "
       .. "release", function()
      local a, b = connect("holder"), connect("waiter")
      local path = fresh()
      local held = assert(f.blocker(a, path):acquire(5))
      local obj = f.new(b, path)
      for _, t in ipairs({ 0, 1e-9 }) do
        local t0 = util.now()
        local res = pack(obj:acquire(t))
        assert_code("ETIMEDOUT", res)
        assert.is_true(util.now() - t0 < 5, "gave up only after " .. (util.now() - t0) .. " s")
      end
      local got, released
      b:spawn(function() -- a mutex's grant belongs to the coroutine that took it: released there
        got = pack(obj:acquire(math.huge))
        if got[1] then released = pack(got[1]:release()) end
      end)
      util.drive({ a, b }, 0.3)
      assert.is_nil(got, "granted while another client held it")
      assert.is_true(held:release())
      assert.truthy(util.wait_until(function() return released end, 10, { a, b }),
        "math.huge: not granted after the release")
      assert.truthy(got[1], tostring(got[2]))
      assert.is_true(released[1], tostring(released[2]))
      assert_empty(path, { a, b })
    end)

    it(f.name .. ": release twice raises the second time; a dot raises; the grant's methods need a colon", function()
      local c = connect("twice")
      local path = fresh()
      local obj = f.new(c, path)
      local g = assert(obj:acquire(5))
      raises({ "with a colon" }, g.release)
      raises({ "with a colon" }, g.is_held)
      raises({ "with a colon" }, g.token)
      raises({ "with a colon" }, g.on_lost, function() end)
      raises({ "with a colon" }, obj.acquire, 5)
      assert.is_true(g:is_held()) -- none of that touched the grant
      assert.is_true(g:release())
      raises({ "release" }, g.release, g)
      assert_empty(path, { c })
    end)

    it(f.name .. ": a grant in a <close> variable is released at scope exit #lua54", function()
      local c = connect("close")
      local path = fresh()
      local obj = f.new(c, path)
      local released = load([[
        local obj = ...
        do
          local g <close> = assert(obj:acquire(5))
          assert(g:is_held())
        end
        return true
      ]])
      assert.is_true(released(obj))
      for _, d in ipairs(f.dirs(path)) do assert.are.same({}, util.children(c, d)) end
      assert_empty(path, { c })
    end)

    it(f.name .. ": a grant collected while held is released in the background", function()
      local lines = {}
      local c = connect({ identity = "gc", log = function(line) lines[#lines + 1] = line end })
      local path = fresh()
      local node
      do
        local g = assert(f.new(c, path):acquire(5))
        node = f.nodes(g)[1]
      end
      assert.is_string(node)
      for _ = 1, 3 do collectgarbage() end
      assert_empty(path, { c })
      util.assert_words(table.concat(lines, "\n"), { "collected while held" })
    end)

    it(f.name .. ": the session's expiry reports LOST once; afterwards is_held() false, token() nil, release() "
       .. "ELOST, a fenced transaction refused", function()
      local c = connect("expire")
      local path = fresh()
      local g = assert(f.new(c, path):acquire(5))
      local rec = recorder(g)
      local sid = c:session()
      assert(testing.expire(c, fx.zk.hosts))
      assert.truthy(util.wait_until(function() return rec.LOST and c:session() and c:session() ~= sid end, 20, { c }),
        "no LOST after the expiry: " .. table.concat(rec.order, " "))
      util.drive({ c }, 0.3) -- anything more would come now
      assert.are.equal(1, rec.LOST, table.concat(rec.order, " "))
      assert.are.equal("LOST", rec.order[#rec.order])
      assert.are.equal(g, rec.obj)
      assert.is_false(g:is_held())
      assert.is_nil(g:token())
      local res = pack(g:transaction():set("/", "x"):commit())
      assert_code("ELOST", res)
      res = pack(g:release())
      assert_code("ELOST", res)
      assert.are.equal(1, rec.LOST, "release after LOST reported it again")
      raises({ "release" }, g.release, g)
      assert_empty(path, { c })
    end)

    it(f.name .. ": its node deleted by another client: a fenced transaction is refused and LOST is reported "
       .. "once; release() says ELOST", function()
      local c, o = connect("victim"), connect("deleter")
      local path = fresh()
      local g = assert(f.new(c, path):acquire(5))
      local rec = recorder(g)
      local data = "/conf-data-" .. f.slug .. seq
      assert(o:create(data, "0"))
      assert.are.same({ "0" }, { (o:get(data)) })
      assert(g:transaction():set(data, "1"):commit()) -- fenced, while held: written
      assert(o:delete(f.nodes(g)[1]))
      local res = pack(g:transaction():set(data, "2"):commit())
      assert_code("ELOST", res)
      assert.are.equal("1", (o:get(data)), "a fenced transaction wrote after the holder's node was deleted")
      assert.are.equal(1, rec.LOST, "LOST not reported once after the evidence: " .. table.concat(rec.order, " "))
      assert.is_false(g:is_held())
      assert.is_nil(g:token())
      res = pack(g:transaction():set(data, "3"):commit())
      assert_code("ELOST", res)
      res = pack(g:release())
      assert_code("ELOST", res)
      assert.are.equal(1, rec.LOST)
      assert(o:delete(data))
      assert_empty(path, { c, o })
    end)

    it(f.name .. ": its node deleted by another client: release() finds it, reports LOST once, returns ELOST",
      function()
      local c, o = connect("victim"), connect("deleter")
      local path = fresh()
      local g = assert(f.new(c, path):acquire(5))
      local rec = recorder(g)
      assert(o:delete(f.nodes(g)[1]))
      local res = pack(g:release())
      assert_code("ELOST", res)
      assert.are.equal(1, rec.LOST, "release after the node was deleted: " .. table.concat(rec.order, " "))
      assert.is_false(g:is_held())
      raises({ "release" }, g.release, g)
      -- and it acquires again
      local g2 = assert(f.new(c, path):acquire(5))
      assert.is_true(g2:release())
      assert_empty(path, { c, o })
    end)

    if f.lists then
      it(f.name .. ": its node deleted by another client: a listing of its queue without it reports LOST once",
        function()
        local c, o = connect("victim"), connect("deleter")
        local path = fresh()
        local obj = f.new(c, path)
        local g = assert(obj:acquire(5))
        local rec = recorder(g)
        assert(o:delete(f.nodes(g)[1]))
        assert.is_nil(rec.LOST) -- nothing watches a held node without on_revoke: not known yet
        local list = assert(obj:participants())
        assert.are.same({}, list)
        assert.are.equal(1, rec.LOST, "participants() lacked the node: " .. table.concat(rec.order, " "))
        assert.is_false(g:is_held())
        assert_code("ELOST", pack(g:release()))
        assert.are.equal(1, rec.LOST)
        assert_empty(path, { c, o })
      end)

      it(f.name .. ": its node deleted and its directory reaped: a listing that finds no directory "
        .. "reports LOST once", function()
        local c, o = connect("victim"), connect("deleter")
        local path = fresh()
        local obj = f.new(c, path)
        local g = assert(obj:acquire(5))
        local rec = recorder(g)
        local node = f.nodes(g)[1]
        local dir = node:match("^(.*)/[^/]+$")
        assert(o:delete(node))
        -- the server reaps the emptied container directory (container check every 100 ms here)
        assert.is_true(util.wait_until(function() return not o:exists(dir) end, 10, { o }),
          "the server did not reap " .. dir)
        assert.is_nil(rec.LOST)
        assert.are.same({}, assert(obj:participants()))
        assert.are.equal(1, rec.LOST, "participants() found no directory: " .. table.concat(rec.order, " "))
        assert.is_false(g:is_held())
        assert_code("ELOST", pack(g:release()))
        assert.are.equal(1, rec.LOST)
      end)
    end

    if f.revocable then
      it(f.name .. ": its node deleted by another client while on_revoke listens: LOST at once, once", function()
        local c, o = connect("victim"), connect("deleter")
        local path = fresh()
        local obj = f.new(c, path)
        local asked = 0
        obj:on_revoke(function() asked = asked + 1 end)
        local g = assert(obj:acquire(5))
        local rec = recorder(g)
        util.drive({ c }, 0.2) -- the watch on its own node is armed by a read at the grant
        assert(o:delete(f.nodes(g)[1]))
        assert.truthy(util.wait_until(function() return rec.LOST end, 10, { c, o }),
          "the revocation watch saw NodeDeleted but nothing was reported")
        util.drive({ c }, 0.2)
        assert.are.equal(1, rec.LOST)
        assert.are.equal(0, asked)
        assert.is_false(g:is_held())
        assert_code("ELOST", pack(g:release()))
        assert_empty(path, { c, o })
      end)
    end

    it(f.name .. ": tokens of successive grants rise, across clients", function()
      local a, b = connect("tok-a"), connect("tok-b")
      local path = fresh()
      local objs = { f.new(a, path), f.new(b, path) }
      local last
      for i = 1, 4 do
        local g = assert(objs[i % 2 + 1]:acquire(5))
        local t = g:token()
        if last then assert.is_true(t > last, ("token %s after %s"):format(tostring(t), tostring(last))) end
        last = t
        assert.is_true(g:release())
      end
      assert_empty(path, { a, b })
    end)
  end
end)

-- A leader's term and a latch's leadership answer the protocol's calls for the current term
-- (spec/support/conformance.lua says which checks do not apply to them, and why).
describe("hold protocol conformance: leader terms and latch leadership", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  for i, f in ipairs(conf.elections) do
    it(f.name .. ": the session's expiry reports LOST once; a transaction of the term is refused; "
       .. "tokens rise; nothing left", function()
      local c = connect("el-expire")
      local path = "/conf/election/" .. i
      local obj = f.new(c, path)
      local rec = recorder(obj)
      assert.truthy(util.wait_until(function() return obj:is_held() end, 10, { c }), "never led")
      local token, node = obj:token(), obj:node()
      assert.is_number(token)
      assert.are.equal(path .. "/", node:sub(1, #path + 1))
      local t = obj:transaction():set(path, "x")
      local sid = c:session()
      assert(testing.expire(c, fx.zk.hosts))
      assert.truthy(util.wait_until(function() return rec.LOST and c:session() and c:session() ~= sid end, 20, { c }),
        "no LOST after the expiry: " .. table.concat(rec.order, " "))
      util.drive({ c }, 0.3)
      assert.are.equal(1, rec.LOST, table.concat(rec.order, " "))
      assert.are.equal(obj, rec.obj)
      assert_code("ELOST", pack(t:commit()))
      if f.name == "latch leadership" then -- it joins again by itself: a new term, a larger token
        assert.truthy(util.wait_until(function() return obj:is_held() end, 10, { c }), "never led again")
        assert.is_true(obj:token() > token)
      else
        assert.is_false(obj:is_held())
        assert.is_nil(obj:token())
      end
      obj:close()
      local obs = connect("observer")
      assert.truthy(util.wait_until(function() return #util.children(obs, path) == 0 end, 10, { c, obs }),
        "left on the server under " .. path)
    end)

    it(f.name .. ": max_hold ends the term: LOST (max_hold) once, its transaction refused, its node "
       .. "deleted", function()
      local c = connect("el-maxhold")
      local path = "/conf/election-mh/" .. i
      local obj = f.new(c, path, { max_hold = 0.4 })
      local rec = recorder(obj)
      assert.truthy(util.wait_until(function() return obj:is_held() end, 10, { c }), "never led")
      local token, node = obj:token(), obj:node()
      local t = obj:transaction():set(path, "x")
      assert.truthy(util.wait_until(function() return rec.LOST end, 10, { c }), "no LOST after max_hold")
      assert.are.equal(obj, rec.obj)
      assert.are.equal("max_hold", rec.why)
      assert_code("ELOST", pack(t:commit()))
      local obs = connect("observer")
      assert.truthy(util.wait_until(function() return not obs:exists(node) end, 10, { c, obs }),
        "the node of the bounded term stayed: " .. node)
      if f.rejoins then -- alone, it leads again at once: a new term, a larger token, bounded again
        assert.truthy(util.wait_until(function() return obj:is_held() end, 10, { c }), "never led again")
        assert.is_true(obj:token() > token)
      else
        assert.are.equal(1, rec.LOST, table.concat(rec.order, " "))
        assert.is_false(obj:is_held())
        assert.is_nil(obj:token())
      end
      obj:close()
      assert.truthy(util.wait_until(function() return #util.children(obs, path) == 0 end, 10, { c, obs }),
        "left on the server under " .. path)
    end)
  end
end)
