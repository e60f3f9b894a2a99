-- One error table (docs/design.md, "Errors"): every code a module returns is in zklock.errno
-- with a zklock.strerror text, and zklock.internal.errors is the one formatter of "CODE: message".
-- The check is static: it reads every Lua module under lua/ and the binding's C files and finds
-- each error code literal ("ECLOSED", "ETIMEDOUT: ...", errno.ZNONODE), so a code added on a
-- path no test reaches is caught too.
--   busted --lua=lua5.4 spec/fast/errors_spec.lua
local zklock = require("zklock")
local core = require("zklock.core")
local E = require("zklock.internal.errors")

-- Upper-case words in quotes that are not error codes: a session's state "EXPIRED"
-- (client:on_session), an OpenResty worker's "EXITING" (ctx:stopping()), and "EUNKNOWN", the
-- name zkl_err_name gives a number that is not in the table (a status from a ZooKeeper newer
-- than zklock's table: zklock.internal.errors names it so, with the number in the message).
local NOT_CODES = { EXPIRED = true, EXITING = true, EUNKNOWN = true }

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function files(cmd)
  local p = assert(io.popen(cmd))
  local t = {}
  for line in p:lines() do t[#t + 1] = line end
  p:close()
  table.sort(t)
  return t
end

-- The error code names a source text uses, as { { code, line }, ... }: quoted code literals
-- ("ELOST", 'ZNONODE'), message prefixes ("ETIMEDOUT: ...") and errno.NAME / errno["NAME"].
local function codes_in(text)
  local found, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local function add(name)
      if not NOT_CODES[name] then found[#found + 1] = { name, n } end
    end
    for name in line:gmatch("[\"']([EZ][A-Z]+)[\"']") do add(name) end
    for name in line:gmatch("[\"']([EZ][A-Z]+): ") do add(name) end
    for name in line:gmatch("errno%.([A-Z][A-Z_]*)") do add(name) end
    for name in line:gmatch("errno%[[\"']([A-Z][A-Z_]*)[\"']%]") do add(name) end
  end
  return found
end

-- "path:line: CODE" for every code under `paths` that the table lacks
local function missing(paths)
  local bad = {}
  for _, path in ipairs(paths) do
    for _, hit in ipairs(codes_in(read(path))) do
      if not E.known(hit[1]) or zklock.strerror(hit[1]) == "unknown error" then
        bad[#bad + 1] = ("%s:%d: %s"):format(path, hit[2], hit[1])
      end
    end
  end
  return bad
end

describe("error table #fast", function()
  local lua_files = files("find lua -name '*.lua'")
  local c_files = files("ls csrc/lua/*.c")

  it("finds the modules it checks", function()
    assert.is_true(#lua_files >= 20, "too few Lua files under lua/: " .. #lua_files)
    assert.is_true(#c_files >= 3, "too few C files under csrc/lua/: " .. #c_files)
  end)

  it("has every code a Lua module or the binding uses, with a text", function()
    local bad = missing(lua_files)
    for _, b in ipairs(missing(c_files)) do bad[#bad + 1] = b end
    assert.are.same({}, bad, "codes missing from zklock.errno (add them to ZKL_ERRNO_MAP in zklock.h):\n"
      .. table.concat(bad, "\n"))
  end)

  it("catches a code the table lacks (the check can fail)", function()
    local planted = 'local function f()\n  return nil, "EPLANTED: nobody added me", "EPLANTED"\nend\n'
      .. 'local x = core.errno.ZPLANTED\nlocal s = "EXPIRED"\n'
    local names = {}
    for _, hit in ipairs(codes_in(planted)) do
      if not E.known(hit[1]) then names[#names + 1] = hit[1] .. "@" .. hit[2] end
    end
    assert.are.same({ "EPLANTED@2", "EPLANTED@2", "ZPLANTED@4" }, names)
  end)

  it("gives each code a unique number and a text of its own", function()
    local seen = {}
    for name, n in pairs(zklock.errno) do
      assert.is_nil(seen[n], ("%s and %s share the number %d"):format(tostring(seen[n]), name, n))
      seen[n] = name
      assert.are.equal(name, core.errname(n))
      assert.are_not.equal("unknown error", zklock.strerror(name), name)
      assert.are.equal(zklock.strerror(name), zklock.strerror(n))
    end
  end)

  it("knows the codes only the Lua layer returns", function()
    for _, name in ipairs({ "EDEADLK", "EFORMAT", "EDATA", "ERANGE", "ECONNECTING", "EEXIST", "ESTALE", "EBUSY" }) do
      assert.is_number(zklock.errno[name], name)
      assert.are_not.equal("unknown error", zklock.strerror(name), name)
    end
    assert.are.equal("unknown error", zklock.strerror("ENOSUCHCODE"))
    assert.are.equal("unknown error", zklock.strerror(nil))
  end)
end)

describe("zklock.internal.errors, the formatter #fast", function()
  it("builds nil, \"CODE: message\", \"CODE\" from a name or a number, extra results after", function()
    local r, msg, code, extra = E.fail("ETIMEDOUT", "no answer within 2 s", "x")
    assert.is_nil(r)
    assert.are.equal("ETIMEDOUT: no answer within 2 s", msg)
    assert.are.equal("ETIMEDOUT", code)
    assert.are.equal("x", extra)
    assert.are.equal(3, select("#", E.fail(zklock.errno.ZNONODE)))
    assert.are.equal("ZNONODE: node does not exist", select(2, E.fail(zklock.errno.ZNONODE)))
    assert.are.equal("EFORMAT: bad item", E.message("EFORMAT", "bad item"))
    assert.are.equal("EDATA: " .. zklock.strerror("EDATA"), E.message(zklock.errno.EDATA))
    assert.are.equal("ZBADVERSION", E.name(zklock.errno.ZBADVERSION))
  end)

  it("raises for a code name that is not in the table (a bug of zklock)", function()
    assert.has_error(function() E.fail("EPLANTED", "x") end,
      "zklock: internal error: error code EPLANTED is not in zklock.errno (add it to ZKL_ERRNO_MAP in zklock.h)")
    assert.has_error(function() E.message({}) end)
    assert.has_error(function() E.message(1.5) end)
  end)

  it("names a status number the table lacks (a newer server's) EUNKNOWN, with its number", function()
    assert.are.equal("EUNKNOWN: unknown error (code -125)", E.message(-125))
    assert.are.equal("EUNKNOWN: create /x: quota", E.message(-125, "create /x: quota"))
    local r, msg, code = E.fail(-125)
    assert.is_nil(r)
    assert.are.equal("EUNKNOWN: unknown error (code -125)", msg)
    assert.are.equal("EUNKNOWN", code)
    -- passed on by name (a transaction's op result, then the queue's message)
    assert.are.equal("EUNKNOWN: queue item x", E.message(E.name(-125), "queue item x"))
    assert.are.equal("EUNKNOWN: unknown error", E.message("EUNKNOWN"))
  end)
end)

describe("hand-made parts replaced #fast", function()
  it("the double barrier names members with the core's UUID and leaves math.random alone", function()
    local barrier = require("zklock.barrier")
    math.randomseed(12345)
    local want = { math.random(), math.random() }
    math.randomseed(12345)
    local a, b = barrier.uuid(), barrier.uuid()
    assert.are.same(want, { math.random(), math.random() })
    local v4 = "^%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$"
    assert.matches(v4, a)
    assert.matches(v4, core.uuid())
    assert.are_not.equal(a, b)
  end)

  it("no module seeds math.random or reads the host name itself (core.hostname is the source)", function()
    local bad = {}
    for _, path in ipairs(files("find lua -name '*.lua'")) do
      local text = read(path)
      for _, pat in ipairs({ "math%.randomseed", "kernel/hostname", "os%.getenv%(\"HOSTNAME\"%)" }) do
        if text:find(pat) then bad[#bad + 1] = path .. ": " .. pat end
      end
    end
    assert.are.same({}, bad)
    assert.is_string(core.hostname())
    assert.is_true(#core.hostname() > 0)
  end)

  -- hex (16 digits, a 64-bit id) -> its decimal as a signed long, by 64-bit arithmetic of the
  -- running Lua (5.4 integers, LuaJIT's int64_t), for comparison with the C side's
  local function java_long(hex)
    if math.type then return ("%d"):format(math.tointeger(tonumber(hex, 16))) end
    local ffi = require("ffi")
    local v = assert(loadstring("return 0x" .. hex .. "ULL"))()
    return (tostring(ffi.cast("int64_t", v)):gsub("LL$", ""))
  end

  it("java_long, the comparison of the next check, computes a signed long", function()
    if not math.type and not jit then return end -- PUC 5.1-5.3 without 64-bit integers: no check
    assert.are.equal("72057640156328227", java_long("0100000abcdef123"))
    assert.are.equal("-1", java_long("ffffffffffffffff"))
    assert.are.equal("-9223372036854775808", java_long("8000000000000000"))
    assert.are.equal("9223372036854775807", java_long("7fffffffffffffff"))
  end)

  it("the binding (recipe.session_decimal) gives the session id in decimal, as Java prints a long", function()
    local s = require("support.scripted").new()
    local ok, err = pcall(function()
      local R = require("zklock.internal.recipe")
      local seen = {}
      for i = 1, 2 do
        local hex, dec = s.client:session(), R.session_decimal(s.client)
        assert.is_string(dec)
        assert.matches("^%-?%d+$", dec)
        if math.type or jit then
          assert.are.equal(java_long(type(hex) == "number" and ("%016x"):format(hex) or hex), dec)
        end
        seen[i] = dec
        if i == 1 then
          s:expire() -- no session until reconnected, then a new one: another id
          assert.is_nil(R.session_decimal(s.client))
          s:reconnect()
        end
      end
      assert.are_not.equal(seen[1], seen[2])
    end)
    s:close()
    assert(ok, err)
  end)
end)
