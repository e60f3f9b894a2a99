-- The fast tier (no ZooKeeper server): zklock.internal.args, the argument checks behind the public API.
--   busted --lua=lua5.4 spec/fast/check_spec.lua
local check = require("zklock.internal.args")

local function raises(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

describe("argument checks #fast", function()
  it("timeout(): seconds to ms, rounded up; nil, math.huge and beyond int ms wait forever; bad values raise", function()
    assert.are.equal(-1, check.timeout("acquire", 1, nil))
    assert.are.equal(-1, check.timeout("acquire", 1, math.huge))
    assert.are.equal(0, check.timeout("acquire", 1, 0))
    assert.are.equal(1, check.timeout("acquire", 1, 0.0001))
    assert.are.equal(1500, check.timeout("acquire", 1, 1.5))
    assert.are.equal(2147483647, check.timeout("acquire", 1, 2147483.647))
    for _, v in ipairs({ -1, 0 / 0, "5", true, {} }) do
      local msg = raises(check.timeout, "acquire", 1, v)
      assert.truthy(msg:find("bad argument #1 to 'acquire' (timeout", 1, true), msg)
    end
    assert.truthy(raises(check.timeout, "acquire", 1, 0 / 0):find("NaN", 1, true))
    -- beyond the core's int milliseconds: forever (no wrap-around, no error)
    assert.are.equal(-1, check.timeout("acquire", 1, 2147483.648))
  end)

  it("options(): nil is {}, unknown names are listed with the known ones, validators name the option", function()
    assert.are.same({}, check.options("f", 2, nil, {}))
    local known = { a = check.is.positive, b = check.is.oneof("x", "y") }
    assert.are.same({ a = 1, b = "x" }, check.options("f", 2, { a = 1, b = "x" }, known))
    local msg = raises(check.options, "f", 2, { c = 1 }, known)
    assert.truthy(msg:find("bad argument #2 to 'f' (unknown option 'c' (known: a, b))", 1, true), msg)
    msg = raises(check.options, "f", 2, { b = "z" }, known)
    assert.truthy(msg:find("option 'b': expected one of x, y, got \"z\"", 1, true), msg)
    msg = raises(check.options, "f", 2, "opts", known)
    assert.truthy(msg:find("options: expected a table", 1, true), msg)
  end)

  it("the is.* validators", function()
    assert.is_true((check.is.positive(1))); assert.is_false((check.is.positive(0)))
    assert.is_false((check.is.positive(math.huge))); assert.is_false((check.is.positive(0 / 0)))
    assert.is_true((check.is.nonneg(0))); assert.is_false((check.is.nonneg(-0.1)))
    assert.is_true((check.is.string(""))); assert.is_false((check.is.string(1)))
    assert.is_true((check.is.func(print))); assert.is_true((check.is.boolean(false)))
  end)

  it("path(): lock paths are checked by the core's rules, the error names the problem", function()
    assert.are.equal("/locks/a", check.path("mutex", 1, "/locks/a"))
    for _, case in ipairs({ { "", "empty" }, { "a", "start with '/'" }, { "/a/", "end with '/'" },
                            { "/a//b", "'//'" }, { "/zookeeper/x", "/zookeeper" }, { 42, "expected a string" } }) do
      local msg = raises(check.path, "mutex", 1, case[1])
      assert.truthy(msg:find("bad argument #1 to 'mutex'", 1, true), msg)
      assert.truthy(msg:find(case[2], 1, true), msg)
    end
  end)

  it("hosts(): host:port lists with an optional chroot", function()
    for _, ok in ipairs({ "127.0.0.1:2181", "a:1,b:2", "zk-1.example:2181/app", " h:1 ,h:2" }) do
      assert.are.equal(ok, check.hosts("connect", 1, ok))
    end
    for _, bad in ipairs({ "", "h", "h:0", "h:70000", ":1", "h:1,", "h:1/bad/" }) do
      local msg = raises(check.hosts, "connect", 1, bad)
      assert.truthy(msg:find("bad argument #1 to 'connect' (hosts", 1, true), msg)
    end
  end)

  it("acl_option() and acl_entries(): open, creator, or digest entries with perms letters", function()
    assert.is_true(check.acl_option(nil)); assert.is_true(check.acl_option("open"))
    assert.is_true(check.acl_option("creator"))
    assert.is_nil(check.acl_entries("open"))
    assert.are.same({ { 31, "auth", "" }, { 1, "world", "anyone" } }, check.acl_entries("creator"))
    local list = { { scheme = "digest", id = "alice:x", perms = "rwcda" },
                   { scheme = "world", id = "anyone", perms = "rr" } }
    assert.is_true(check.acl_option(list))
    assert.are.same({ { 31, "digest", "alice:x" }, { 1, "world", "anyone" } }, check.acl_entries(list))
    for _, bad in ipairs({ "closed", {}, { { scheme = "digest" } }, { { scheme = "d", id = "i", perms = "rx" } },
                           { { scheme = "d", id = "i", perms = 32 } } }) do
      assert.is_false((check.acl_option(bad)))
    end
  end)
end)

describe("argument errors' position #fast", function()
  it("is the caller's line, past zklock's files in lua/zklock/ and lua/zklock/internal/", function()
    local retry = require("zklock.retry") -- lua/zklock/retry.lua -> lua/zklock/internal/args.lua
    local this = debug.getinfo(1, "S").short_src
    local ok, err = pcall(function() return retry.fixed({ delay = -1 }) end)
    assert.is_false(ok)
    assert.are.equal(this .. ":", tostring(err):sub(1, #this + 1), tostring(err))
  end)
end)
