-- Errors that say what happened, and failures that reach the client's log function (default:
-- one line on stderr) instead of Lua's warn(), which is off by default.
--   busted --lua=lua5.4 spec/18-errors_spec.lua
--   busted --lua=luajit --run=luajit spec/18-errors_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

local now = util.now

local function raises(words, fn, ...)
  return util.assert_words(util.error_of(fn, ...), words)
end

describe("errors that help", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  local function logged(opts)
    local lines = {}
    opts = opts or {}
    opts.log = function(line, level) lines[#lines + 1] = { line = line, level = level } end
    return connect(opts), lines
  end
  local function find_line(lines, ...)
    for _, l in ipairs(lines) do if util.has_words(l.line, ...) then return l end end
    return nil
  end

  it("hosts: an unresolvable name is named; [::1]:port is refused with the syntax to use", function()
    local res = util.pack(zklock.connect("nosuch.invalid:2181", { wait = false }))
    util.assert_code("ESYSTEM", res)
    util.assert_words(res[2], { "could not resolve host nosuch.invalid" })
    raises({ "bad argument #1 to 'connect'", "IPv6", "::1:2181" }, zklock.connect, "[::1]:2181", { wait = false })
  end)

  it("a refused port: says so within connect_timeout, which defaults to the session timeout", function()
    local t0 = now()
    local res = util.pack(zklock.connect("127.0.0.1:1", { session_timeout = 1 }))
    local took = now() - t0
    util.assert_code("ETIMEDOUT", res)
    util.assert_words(res[2], { "could not connect to 127.0.0.1:1 within 1 s", "connection refused" })
    assert.is_true(took >= 0.95 and took < 5, "took " .. took)
  end)

  it("a session timeout too short to connect with is named as the cause, not the network", function()
    local res = util.pack(zklock.connect(zk.hosts, { session_timeout = 0.001 }))
    util.assert_code("ETIMEDOUT", res)
    util.assert_words(res[2], { "within 0.001 s", "session_timeout 0.001 s is too short", "round trip",
                                "2 of its ticks" })
    assert.is_nil(res[2]:find("firewall", 1, true), res[2])
    res = util.pack(zklock.connect(zk.hosts, { session_timeout = 5, connect_timeout = 0.001 }))
    if res[1] then
      res[1]:close() -- connected within 1 ms after all: nothing to explain
    else
      util.assert_words(res[2], { "connect_timeout 0.001 s is shorter than a round trip" })
    end
  end)

  it("bad versions, client.method(...) with a dot, long values cut", function()
    local c = connect()
    raises({ "bad argument #3 to 'set'", "version: expected an integer", '"abc"' }, c.set, c, "/x", "d", "abc")
    raises({ "bad argument #2 to 'delete'", "version" }, c.delete, c, "/x", 1.5)
    for _, name in ipairs({ "mutex", "get", "sleep", "spawn", "close", "run" }) do
      raises({ "use client:" .. name .. "(...) (with a colon)" }, c[name], "/x")
    end
    local m = c:mutex("/x")
    raises({ "use lock:acquire(...) (with a colon)" }, m.acquire, 5)
    local long = "/" .. ("x"):rep(2 * 1024 * 1024)
    local msg = util.error_of(c.get, c, long)
    assert.is_string(msg)
    assert.is_true(#msg < 600, "message of " .. #msg .. " characters")
    util.assert_words(msg, { "... (2097153 bytes)" })
    msg = util.error_of(c.mutex, c, long)
    assert.is_true(#msg < 600, "message of " .. #msg .. " characters")
    local res = util.pack(c:get("/" .. ("y"):rep(5000)))
    assert.is_true(#res[2] < 600, res[2])
  end)

  it("a create larger than max_data is refused before sending; the connection stays up", function()
    local c = connect()
    local states = util.record_session(c)
    local big = ("x"):rep(2 * 1024 * 1024)
    raises({ "bad argument #2 to 'create'", "max_data", "jute.maxbuffer" }, c.create, c, "/big", big)
    raises({ "bad argument #2 to 'set'", "max_data" }, c.set, c, "/big", big)
    assert(c:create("/big", ("x"):rep(1000 * 1000))) -- under the limit: fine
    util.drive({ c }, 0.5)
    assert.are.equal("CONNECTED", c.state)
    assert.are.same({}, states)
    local small = connect({ max_data = 100 })
    raises({ "max_data", "100 bytes" }, small.create, small, "/small", ("x"):rep(200))
  end)

  it("multi-lock: 'nothing was held' when the first component failed; ml:release() unheld raises", function()
    local a, b = connect(), connect()
    local h = b:mutex("/ml/one"); assert(h:acquire(5))
    local ml = a:multilock({ a:mutex("/ml/one"), a:mutex("/ml/two") })
    local res = util.pack(ml:acquire(0))
    util.assert_code("ETIMEDOUT", res)
    util.assert_words(res[2], { "mutex /ml/one (1 of 2)", "nothing was held" })
    assert.is_nil(res[2]:find("the others were released", 1, true))
    local ml2 = a:multilock({ a:mutex("/ml/three"), a:mutex("/ml/one") })
    res = util.pack(ml2:acquire(0))
    util.assert_words(res[2], { "mutex /ml/one (2 of 2)", "the one taken before it was released" })
    raises({ "release of", "does not hold it" }, ml.release, ml)
    h:release()
    assert(ml:acquire(5))
    assert(ml:release())
  end)

  it("a missing chroot is named when an acquire or a create fails", function()
    local c = connect()
    local cr = util.connect(zk.hosts .. "/no-such-chroot", {})
    local res = util.pack(cr:mutex("/l"):acquire(2))
    util.assert_code("ZNONODE", res)
    util.assert_words(res[2], { "acquiring mutex /l", "the chroot /no-such-chroot does not exist" })
    res = util.pack(cr:create("/n", "d"))
    util.assert_words(res[2], { "the chroot /no-such-chroot does not exist" })
    -- once it exists, both work
    assert(c:create("/no-such-chroot", ""))
    local m = cr:mutex("/l")
    assert.are.equal(m, m:acquire(5))
    assert(m:release())
  end)

  it("an error in an on_lost handler and a failed release reach the log function", function()
    local c, lines = logged()
    local m = c:mutex("/lost/handler")
    m:on_lost(function(state) if state == "LOST" then error("handler bug") end end)
    assert(m:acquire(5))
    testing.expire(c)
    assert.is_true(util.wait_until(function() return find_line(lines, "handler bug") ~= nil end, 15, { c }))
    local l = find_line(lines, "zklock error:", "on_lost handler of mutex /lost/handler failed (LOST)", "handler bug")
    assert.is_table(l)
    assert.are.equal("error", l.level)
    m:release() -- ELOST
  end)

  it("a failed release at the end of a <close> scope reaches the log function #lua54", function()
    local c, lines = logged()
    local m = c:mutex("/lost/close")
    local scope = assert(load([[
      local m, expire = ...
      local held <close> = assert(m:acquire(5))
      expire()
    ]]))
    scope(m, function()
      testing.expire(c)
      util.wait_until(function() return not m:is_held() end, 15, { c })
    end)
    local l = find_line(lines, "zklock error:", "release of mutex /lost/close at scope exit failed", "ELOST")
    assert.is_table(l, "no log line for the failed release")
  end)

  it("the negotiated session timeout is logged once per session when it differs (default sink: stderr)", function()
    local c, lines = logged({ session_timeout = 0.2 }) -- the server's minimum is 1 s
    assert.are.equal(1, c:session_timeout())
    local function count()
      local n = 0
      for _, l in ipairs(lines) do
        if util.has_words(l.line, "zklock warn:", "timeout of 1 s instead of the 0.2 s asked for") then n = n + 1 end
      end
      return n
    end
    util.drive({ c }, 0.3)
    assert.are.equal(1, count())
    testing.expire(c)
    assert.is_true(util.wait_until(function() return count() == 2 end, 20, { c }), "not logged for the new session")
    local same, same_lines = logged({ session_timeout = 4 }) -- within the server's range: nothing said
    util.drive({ same }, 0.2)
    assert.are.equal(4, same:session_timeout())
    assert.is_nil(find_line(same_lines, "asked for"))
    -- the default sink: one line on stderr
    local lua = jit and "luajit" or "lua5.4"
    local cpath = (jit and "build-jit" or "build") .. "/?.so;"
    local code = ("package.path='lua/?.lua;lua/?/init.lua;'..package.path package.cpath='%s'..package.cpath "
      .. "local c = assert(require('zklock').connect('%s', { session_timeout = 100 })) c:close()")
      :format(cpath, zk.hosts)
    local out = testing.sh(("%s -e %q 2>&1"):format(lua, code))
    assert.is_string(out)
    util.assert_words(out, { "zklock warn: the server gave session",
                             "a timeout of 60 s instead of the 100 s asked for" })
    local n = select(2, out:gsub("zklock warn", ""))
    assert.are.equal(1, n, out)
  end)
end)
