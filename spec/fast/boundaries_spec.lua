-- Module boundaries of lua/zklock (docs/design.md, "Module boundaries"), without a server:
-- (a) no require cycle between zklock's modules, (b) no module touches another module's `_`
-- fields, (c) no module but zklock.internal.hold gets at the raw core handle (recipes call typed
-- helpers) (spec/support/boundaries.lua defines "own" and keeps the commented allow-lists).
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

  it("only zklock.internal.hold may get at the raw core", function()
    local keys = {}
    for key, e in pairs(B.CORE_ALLOW) do
      keys[#keys + 1] = key
      assert.is_string(e.why, key)
    end
    table.sort(keys)
    assert.are.same({ "lua/zklock/internal/hold.lua", "lua/zklock/internal/recipe.lua" }, keys)
  end)

  it("finds the raw core handle taken outside zklock.internal.hold (planted)", function()
    local out = check({
      ["lua/zklock/y.lua"] = table.concat({
        'local R = require("zklock.internal.recipe")',
        'local H = require "zklock.internal.hold"',
        'local a = R.core(c)',                                    -- 3
        'local b = H["core"](c)',                                 -- 4
        'local d = require("zklock.internal.recipe").core(c)',   -- 5
        'local e = R.core_ish -- another name',
        'local f = other.core(c) -- not a module that hands it out',
        '-- R.core(c) in a comment',
        'local g = "R.core(c)"',
        'local h = require("zklock.internal.hold")["core"]',      -- 10
        'local i = H.start(obj, 1, "/p", 0) -- a typed helper',
        'return { a, b, d, e, f, g, h, i }',
      }, "\n") .. "\n",
    })
    local tail = ": the raw core handle outside zklock.internal.hold; use a typed helper"
    assert.are.equal(table.concat({
      "lua/zklock/y.lua:3: R.core" .. tail,
      "lua/zklock/y.lua:4: H[\"core\"]" .. tail,
      "lua/zklock/y.lua:5: require(\"zklock.internal.recipe\").core" .. tail,
      "lua/zklock/y.lua:10: require(\"zklock.internal.hold\").core" .. tail,
    }, "\n"), out)
  end)

  it("follows a name bound to the module (an alias of an alias), not one bound to its helpers (planted)", function()
    local out = check({
      ["lua/zklock/z.lua"] = table.concat({
        'local hold = require("zklock.internal.hold")',
        'local H = hold',
        'local HH = H',
        'local start = hold.start',
        'local s = hold.start(obj, 1, "/p", 0)',
        'local raw = HH.core(c)',                                 -- 6
        'local ok = start.core',
        'return { raw, ok, s }',
      }, "\n") .. "\n",
    })
    assert.are.equal("lua/zklock/z.lua:6: HH.core: the raw core handle outside zklock.internal.hold; "
      .. "use a typed helper", out)
  end)

  it("flags the old tree's raw-core acquire in lock.lua, and the old latch's in leader.lua (planted)", function()
    local files = B.read_tree("lua/zklock")
    local path = "lua/zklock/lock.lua"
    local planted, n = files[path]:gsub("hold%.start%(self, self%.recipe, self%.path, ms, a ~= nil%)",
      "hold.core(client):acquire(self.recipe, self.path, ms, hold.acl(self), hold.data(self))", 1)
    assert.are.equal(1, n, "lock.lua no longer has the line this test plants into")
    files[path] = planted
    files["lua/zklock/leader.lua"] = files["lua/zklock/leader.lua"]
      .. "\nlocal _raw = hold.core(client):acquire(core.LATCH, path, -1, nil, nil)\n"
    local out = check(files)
    assert.truthy(out:find("lua/zklock/lock.lua:%d+: hold%.core: the raw core handle outside"), out)
    assert.truthy(out:find("lua/zklock/leader.lua:%d+: hold%.core: the raw core handle outside"), out)
  end)
end)
