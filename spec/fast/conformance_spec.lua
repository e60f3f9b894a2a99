-- The hold protocol's argument checks, over every family (spec/support/conformance.lua), without
-- a server: the part of spec/21-conformance_spec.lua that runs on Lua 5.1-5.4 and LuaJIT.
-- Every acquire rejects a NaN, negative or non-number timeout naming argument #1 and "timeout";
-- methods called with a dot say "with a colon"; on_x(fn) takes a function or nil and returns the
-- object; releasing what is not held raises.
--   busted --lua=lua5.4 spec/fast/conformance_spec.lua    busted --lua=lua5.1 --run=lua51 spec/fast
local zklock = require("zklock")
local util = require("support.util")
local conf = require("support.conformance")

local function raises(words, fn, ...)
  return util.assert_words(util.error_of(fn, ...), words)
end

describe("hold protocol: argument checks #fast", function()
  local c
  setup(function() c = assert(zklock.connect("127.0.0.1:1", { wait = false })) end)
  teardown(function() c:close() end)

  for i, f in ipairs(conf.families) do
    local path = "/conf/fast/" .. f.slug .. i

    it(f.name .. ": acquire rejects NaN, negative and non-number timeouts, naming argument #1 'timeout'", function()
      local obj = f.new(c, path)
      for _, t in ipairs(conf.BAD_TIMEOUTS) do
        local msg = raises({ "bad argument #1 to 'acquire'", "timeout" }, obj.acquire, obj, t[1])
        if t[2] == "NaN" or t[2] == "-1" then
          assert.truthy(msg:find(t[2], 1, true), msg)
        end
      end
    end)

    it(f.name .. ": a dot instead of a colon says so", function()
      local obj = f.new(c, path)
      for _, name in ipairs(conf.ACQUIRER_METHODS) do
        assert.is_function(obj[name], name)
        raises({ "with a colon" }, obj[name], 5)
      end
      if f.same then
        for _, name in ipairs(conf.GRANT_METHODS) do
          assert.is_function(obj[name], f.name .. " lacks " .. name)
          raises({ "with a colon" }, obj[name])
        end
      end
    end)

    it(f.name .. ": on_lost takes a function or nil, replaces, and returns the object", function()
      if not f.same then
        -- a lease exists only once granted: its acquirer (the semaphore) takes the handler for all
        local obj = f.new(c, path)
        raises({ "bad argument #1 to 'on_lost'", "expected a function" }, obj.on_lost, obj, 1)
        assert.are.equal(obj, obj:on_lost(function() end))
        assert.are.equal(obj, obj:on_lost(nil))
        return
      end
      local obj = f.new(c, path)
      raises({ "bad argument #1 to 'on_lost'", "expected a function" }, obj.on_lost, obj, 1)
      raises({ "bad argument #1 to 'on_lost'", "expected a function" }, obj.on_lost, obj, "x")
      assert.are.equal(obj, obj:on_lost(function() end))
      assert.are.equal(obj, obj:on_lost(nil))
    end)

    -- (a lease is never "not held yet": it exists once granted; the server part covers it)
    if f.same then it(f.name .. ": not held: is_held() false, token() and node() nil, release() raises", function()
      local obj = f.new(c, path)
      assert.is_false(obj:is_held())
      assert.is_nil(obj:token())
      assert.is_nil(obj:node())
      raises({ "release" }, obj.release, obj)
      raises({ "transaction" }, obj.transaction, obj)
    end) end
  end
end)

describe("hold protocol: leader terms and latch leadership #fast", function()
  local c
  setup(function() c = assert(zklock.connect("127.0.0.1:1", { wait = false })) end)
  teardown(function() c:close() end)

  for i, f in ipairs(conf.elections) do
    local path = "/conf/fast/election" .. i

    it(f.name .. ": the protocol's calls exist, a dot says so, on_lost follows the handler rule", function()
      local obj = f.new(c, path)
      for _, name in ipairs(conf.ELECTION_METHODS) do
        assert.is_function(obj[name], f.name .. " lacks " .. name)
        raises({ "with a colon" }, obj[name])
      end
      raises({ "bad argument #1 to 'on_lost'", "expected a function" }, obj.on_lost, obj, 1)
      assert.are.equal(obj, obj:on_lost(function() end))
      assert.are.equal(obj, obj:on_lost(nil))
      obj:close()
    end)

    it(f.name .. ": a bad max_hold raises naming the option", function()
      for _, v in ipairs({ 0, -1, 0 / 0, math.huge, "1", {} }) do
        raises({ "max_hold" }, f.new, c, path, { max_hold = v })
      end
      f.new(c, path, { max_hold = 0.5 }):close()
    end)

    it(f.name .. ": not leading: is_held() false, token() and node() nil, transaction() raises", function()
      local obj = f.new(c, path)
      assert.is_false(obj:is_held())
      assert.is_nil(obj:token())
      assert.is_nil(obj:node())
      raises({ "transaction" }, obj.transaction, obj)
      obj:close()
    end)
  end
end)
