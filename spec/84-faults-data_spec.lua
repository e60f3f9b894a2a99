-- Fault injection on the data recipes (the qn- queue, the atomic long, the shared count): a request applied by the
-- server whose answer is lost (the connection drops while the answer is on its way) reports an
-- unknown outcome, and is never sent a second time: no item put twice, none handed out twice, no
-- increment counted twice. The delaying proxy holds every answer 0.6 s, long enough to see the
-- request applied on a direct connection and then drop the connection. Every loop bounded.
--   busted --lua=lua5.4 spec/84-faults-data_spec.lua
--   busted --lua=luajit --run=luajit spec/84-faults-data_spec.lua
local util = require("support.util")
local H = require("support.faults")

local pack = H.pack

describe("faults: lost answers on queues and shared values #faults", function()
  local proxy, obs
  local fx = H.proxied(function(f) proxy, obs = f.proxy, f.obs end)
  local pump_of = fx.pump_of

  -- run fn(c) in a coroutine of a client behind the proxy; once applied() is true on the
  -- server, lose the answer (drop the connection); -> fn's results, the client
  local function lose_answer(identity, setup, fn, applied)
    local c = util.connect(proxy.hosts, { session_timeout = 10, identity = identity })
    local obj = setup(c)
    proxy:send("delay 600", 5, pump_of({ c }))
    local res
    c:spawn(function() res = pack(fn(obj)) end)
    assert.is_truthy(util.wait_until(applied, 10, { c }), "the request never reached the server")
    assert.is_nil(res, "the answer was read before the connection dropped")
    proxy:send("drop", 5, pump_of({ c }))
    proxy:send("heal", 5, pump_of({ c })) -- closes the connection: a reconnect, the same session
    assert.is_truthy(util.wait_until(function() return res end, 20, { c }))
    assert.is_truthy(util.wait_until(function() return c.state == "CONNECTED" end, 20, { c }))
    util.drive({ c }, 0.5) -- time for anything sent again to arrive (nothing may be)
    return res, c, obj
  end

  it("a put whose answer is lost: ZCONNECTIONLOSS, and the item is in the queue once", function()
    local path = "/faults/data/put"
    assert(obs:create(path, "", { parents = true }))
    local res, c = lose_answer("dp-1", function(cc) return cc:queue(path) end,
      function(q) return q:put("once") end,
      function() return #util.children(obs, path) == 1 end)
    assert.is_nil(res[1])
    assert.are.equal("ZCONNECTIONLOSS", res[3], tostring(res[2]))
    assert.are.same({ "once" }, (function()
      local out = {}
      for _, n in ipairs(util.children(obs, path)) do out[#out + 1] = obs:get(path .. "/" .. n) end
      return out
    end)())
    c:close()
  end)

  it("a take whose answers are lost: the item is not handed out again, the next one is", function()
    local path = "/faults/data/take"
    local q0 = obs:queue(path)
    assert(q0:put("first"))
    assert(q0:put("second"))
    local res, c, q = lose_answer("dt-1", function(cc) return cc:queue(path) end,
      function(qq) return qq:take(30) end,
      function() return #util.children(obs, path) == 1 end)
    assert.is_nil(res[1])
    assert.are.equal("ZCONNECTIONLOSS", res[3], tostring(res[2]))
    assert.truthy(tostring(res[2]):find("may have been taken and lost", 1, true), res[2])
    local data, name = q:take(10)
    assert.are.equal("second", data, tostring(name))
    assert.are.equal(0, q:size())
    c:close()
  end)

  it("an atomic long increment whose answer is lost: ZCONNECTIONLOSS, counted once, not twice", function()
    local path = "/faults/data/long"
    local a0 = obs:atomic_long(path)
    assert(a0:add(41))
    local res, c, al = lose_answer("dl-1", function(cc) return cc:atomic_long(path) end,
      function(a) return a:increment() end,
      function() local r = a0:get(); return r and r.post == 42 end)
    assert.is_nil(res[1])
    assert.are.equal("ZCONNECTIONLOSS", res[3], tostring(res[2]))
    assert.are.equal(42, al:get().post)
    assert.are.equal(42, a0:get().post)
    c:close()
  end)

  it("a shared count try_set whose answer is lost: ZCONNECTIONLOSS, the node written once", function()
    local path = "/faults/data/count"
    local s0 = obs:shared_count(path, 0)
    assert(s0:set(7))
    local _, before = assert(obs:get(path))
    local res, c = lose_answer("dc-1", function(cc) return cc:shared_count(path, 0) end,
      function(sc) return sc:try_set(8, before.version) end,
      function() local _, st = obs:get(path); return st and st.version == before.version + 1 end)
    assert.is_nil(res[1])
    assert.are.equal("ZCONNECTIONLOSS", res[3], tostring(res[2]))
    local _, after = assert(obs:get(path))
    assert.are.equal(before.version + 1, after.version)
    assert.are.equal(8, (s0:get()))
    c:close()
  end)
end)
