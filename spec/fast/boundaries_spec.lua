-- Module boundaries of lua/zklock (docs/design.md, "Module boundaries"), without a server:
-- (a) no require cycle between zklock's modules, (b) no module touches another module's `_`
-- fields (spec/support/boundaries.lua defines "own" and keeps the commented allow-list).
--   busted --lua=lua5.4 spec/fast/boundaries_spec.lua
local B = require("support.boundaries")

local function check(files)
  return table.concat(B.check(files), "\n")
end

describe("module boundaries #fast", function()
  it("hold on lua/zklock as it stands", function()
    local files = B.read_tree("lua/zklock")
    local n = 0
    for _ in pairs(files) do n = n + 1 end
    assert.is_true(n > 30, "found only " .. n .. " files under lua/zklock")
    assert.are.equal("", check(files))
  end)

  it("the recipe interface (the slot API) is the only allowed module, and requires nothing of zklock", function()
    local f = assert(io.open("lua/zklock/internal/recipe.lua"))
    local src = f:read("*a")
    f:close()
    assert.is_nil(src:match('require%s*%(?%s*"zklock'), "zklock.internal.recipe requires a zklock module")
    local whole_files = {}
    for key in pairs(B.ALLOW) do
      if not key:find("#", 1, true) then whole_files[#whole_files + 1] = key end
    end
    assert.are.same({ "lua/zklock/internal/recipe.lua" }, whole_files)
  end)

  it("finds a require cycle, also through a lazy require (planted)", function()
    local out = check({
      ["lua/zklock/a.lua"] = 'local b = require("zklock.b")\nreturn {}\n',
      ["lua/zklock/b.lua"] = 'local M = {}\nfunction M.f() return require("zklock.c") end\nreturn M\n',
      ["lua/zklock/c.lua"] = 'local a = require "zklock.a" -- back to the start\nreturn {}\n',
      ["lua/zklock/d.lua"] = '-- require("zklock.a") in a comment is no edge\nlocal x = "require(\\"zklock.d\\")"\n'
        .. 'return { x = require("zklock.d") }\n',
    })
    assert.are.equal("require cycle: zklock.a -> zklock.b -> zklock.c -> zklock.a", out)
  end)

  it("finds another module's `_` fields read, written and called (planted)", function()
    local out = check({
      ["lua/zklock/x.lua"] = table.concat({
        'local Client = require("zklock.client").Client',
        'local X = {}',
        'X.__index = X',
        'function X:get() return self._value end',              -- own: a method of X
        'local function helper(self) return self._value end',   -- own: a helper of a class file
        'function Client:x()',
        '  local rec = { _n = 1 }',
        '  rec._n = rec._n + 1',                                 -- own: made here
        '  return self._c',                                      -- 5: the client's field
        'end',
        'local function peek(c) c._mine = true end',            -- 11: written onto a client
        'local function deep(self) return self.client._watch end', -- 12: through a chain',
        'local function call(client) client:_await({}) end',    -- 13: a private method
        'local s = "x._y" -- x._z in a comment',
        'local I = require("zklock.metrics")._internal',        -- 15: a module's private part
        'return { X = X, I = I, helper = helper, peek = peek, deep = deep, call = call }',
      }, "\n") .. "\n",
    })
    assert.are.equal(table.concat({
      "lua/zklock/x.lua:9: self._c is not this module's own object",
      "lua/zklock/x.lua:11: c._mine is not this module's own object",
      "lua/zklock/x.lua:12: self.client._watch is not this module's own object",
      "lua/zklock/x.lua:13: client._await is not this module's own object",
      "lua/zklock/x.lua:15: (...))._internal is not this module's own object",
    }, "\n"), out)
  end)

  it("flags the old tree's violations: a counter set written onto the client (planted)", function()
    local files = B.read_tree("lua/zklock")
    local path = "lua/zklock/counters.lua"
    local src = assert(files[path])
    local planted, n = src:gsub('local set = R%.peek%(c, "counters"%)', 'local set = c._shared_counts', 1)
    assert.are.equal(1, n, "the counters module no longer has the line this test plants into")
    files[path] = planted
    assert.truthy(check(files):find("counters.lua:%d+: c%._shared_counts is not this module's own object"))
  end)

  it("flags a cycle planted into the tree: zklock.internal.watch requiring zklock.client", function()
    local files = B.read_tree("lua/zklock")
    local path = "lua/zklock/internal/watch.lua"
    files[path] = 'local _client = require("zklock.client")\n' .. files[path]
    assert.truthy(check(files):find("require cycle: zklock.client -> zklock.internal.watch -> zklock.client", 1, true),
      check(files))
  end)
end)
