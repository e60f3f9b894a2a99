-- Timeouts of every call that waits, against a real ZooKeeper: nil and math.huge (and anything
-- beyond the core's int milliseconds) wait forever, 0 tries once (plain znode calls: rejected), a
-- fraction of a millisecond rounds up to 1 ms, NaN and negative values raise naming the argument;
-- plain znode calls take the client's op_timeout unless given { timeout = s }, and end with
-- ETIMEDOUT or ESESSION instead of waiting forever on a dead server or a client that never connects.
--   busted --lua=lua5.4 spec/16-timeouts_spec.lua
--   busted --lua=luajit --run=luajit spec/16-timeouts_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

local now = util.now
local MAXINT = math.maxinteger or 2 ^ 63 -- LuaJIT has no integers: the nearest double

-- The values every waiting call is run with, and what each one means.
local VALUES = {
  { name = "nil", v = nil, forever = true },
  { name = "0", v = 0, zero = true },
  { name = "tiny (1e-9)", v = 1e-9, finite = 0.001 },
  { name = "1", v = 1, finite = 1 },
  { name = "huge (1e300)", v = 1e300, forever = true },
  { name = "math.huge", v = math.huge, forever = true },
  { name = "math.maxinteger", v = MAXINT, forever = true },
  { name = "-1", v = -1, bad = "-1" },
  { name = "NaN", v = 0 / 0, bad = "NaN" },
}

local WINDOW = 3 -- s: a finite wait has ended by then; a forever wait has not

local function raises(words, fn, ...)
  return util.assert_words(util.error_of(fn, ...), words)
end

describe("timeouts of waiting calls", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  -- Each recipe's waiting call, on a lock the holder `b` keeps taken: start(a, b, path, v) ->
  -- function that waits (returns ok, msg, code), and release() for b's hold.
  local RECIPES = {
    { name = "mutex acquire", setup = function(a, b, path)
        local h = b:mutex(path); assert(h:acquire(5))
        local m = a:mutex(path)
        return function(v) return m:acquire(v) end, function() return h:release() end, m
      end },
    { name = "write lock acquire", setup = function(a, b, path)
        local h = b:rwlock(path).read; assert(h:acquire(5))
        local m = a:rwlock(path).write
        return function(v) return m:acquire(v) end, function() return h:release() end, m
      end },
    { name = "read lock acquire", setup = function(a, b, path)
        local h = b:rwlock(path).write; assert(h:acquire(5))
        local m = a:rwlock(path).read
        return function(v) return m:acquire(v) end, function() return h:release() end, m
      end },
    { name = "semaphore acquire", setup = function(a, b, path)
        local lease = assert(b:semaphore(path, 1):acquire(5))
        local s = a:semaphore(path, 1)
        return function(v) return s:acquire(v) end, function() return lease:release() end
      end },
    { name = "semaphore acquire_many", setup = function(a, b, path)
        local leases = assert(b:semaphore(path, 2):acquire_many(2, 5))
        local s = a:semaphore(path, 2)
        return function(v) return s:acquire_many(2, v) end, function()
          assert(leases[1]:release()); return leases[2]:release()
        end
      end },
    { name = "semaphore_mutex acquire", setup = function(a, b, path)
        local h = b:semaphore_mutex(path); assert(h:acquire(5))
        local m = a:semaphore_mutex(path)
        return function(v) return m:acquire(v) end, function() return h:release() end
      end },
    { name = "multilock acquire", setup = function(a, b, path)
        local h = b:mutex(path .. "/two"); assert(h:acquire(5))
        local ml = a:multilock({ a:mutex(path .. "/one"), a:mutex(path .. "/two") })
        return function(v) return ml:acquire(v) end, function() return h:release() end
      end },
  }

  it("every acquire over nil, 0, tiny, 1, huge, math.huge, math.maxinteger, -1, NaN", function()
    local a, b = connect("waiter"), connect("holder")
    local runs = {}
    for ri, r in ipairs(RECIPES) do
      for vi, val in ipairs(VALUES) do
        local path = ("/to/acq/%d/%d"):format(ri, vi)
        local wait, release = r.setup(a, b, path)
        local run = { recipe = r.name, val = val, release = release, what = r.name .. " with " .. val.name }
        runs[#runs + 1] = run
        if val.bad then
          -- misuse raises at once, naming the argument and the value
          raises({ "bad argument", "timeout", val.bad }, wait, val.v)
        else
          a:spawn(function()
            local t0 = now()
            run.res = util.pack(wait(val.v))
            run.took = now() - t0
            local got = run.res[1]
            if got then -- give it back: a lock object, a lease, or an array of leases
              if got.release then assert(got:release()) else for _, l in ipairs(got) do assert(l:release()) end end
            end
          end)
        end
      end
    end
    local t0 = now()
    util.drive({ a, b }, WINDOW)
    local window = now() - t0
    for _, run in ipairs(runs) do
      local val = run.val
      if val.zero or val.finite then
        assert.is_table(run.res, run.what .. ": still waiting after " .. window .. " s")
        util.assert_code("ETIMEDOUT", run.res, run.what)
        if val.finite == 1 then
          assert.is_true(run.took >= 0.95, run.what .. " returned after " .. run.took .. " s")
        end
      elseif val.forever then
        assert.is_nil(run.res, run.what .. ": returned after " .. tostring(run.took) .. " s (" ..
          tostring(run.res and run.res[2]) .. ") instead of waiting")
      end
    end
    -- the holder lets go: every forever wait is granted
    for _, run in ipairs(runs) do
      if not run.val.bad then assert(run.release()) end
    end
    assert.is_true(util.wait_until(function()
      for _, run in ipairs(runs) do
        if run.val.forever and not run.res then return false end
      end
      return true
    end, 30, { a, b }), "forever waits were not granted after the holder released")
    for _, run in ipairs(runs) do
      if run.val.forever then assert.is_truthy(run.res[1], run.what .. ": " .. tostring(run.res[2])) end
    end
  end)

  it("client:sleep (spawned and in the main thread) over the same values", function()
    local c = connect()
    local runs = {}
    for _, val in ipairs(VALUES) do
      if val.bad then
        raises({ "bad argument #1 to 'sleep'", "timeout", val.bad }, c.sleep, c, val.v)
      else
        local run = { val = val }
        runs[#runs + 1] = run
        c:spawn(function()
          local t0 = now()
          c:sleep(val.v)
          run.took = now() - t0
        end)
      end
    end
    util.drive({ c }, WINDOW)
    for _, run in ipairs(runs) do
      local val = run.val
      if val.forever then
        assert.is_nil(run.took, "sleep(" .. val.name .. ") returned after " .. tostring(run.took) .. " s")
      else
        assert.is_number(run.took, "sleep(" .. val.name .. ") still sleeping")
        assert.is_true(run.took >= (val.finite or 0) * 0.95, val.name .. ": " .. run.took)
      end
    end
    -- the main thread sleeps forever too; a spawned coroutine ends it by closing the client
    local closed_at
    c:spawn(function()
      c:sleep(1.5)
      closed_at = now()
      c:close()
    end)
    local t0 = now()
    c:sleep(math.huge)
    assert.is_number(closed_at, "the main thread's sleep(math.huge) returned before the client was closed")
    assert.is_true(now() - t0 >= 1.4)
    -- and the spawned forever sleepers were woken by the close
    for _, run in ipairs(runs) do
      if run.val.forever then assert.is_number(run.took, run.val.name .. " not woken by close") end
    end
  end)

  for _, which in ipairs({ "client:run", "zklock.run" }) do
    it(which .. " over the same values", function()
      for _, val in ipairs(VALUES) do
        local c = connect()
        local function run(v)
          if which == "client:run" then return c:run(v) end
          return zklock.run({ c }, v)
        end
        local argn = which == "client:run" and "#1 to 'run'" or "#2 to 'run'"
        if val.bad then
          raises({ "bad argument " .. argn, "timeout", val.bad }, run, val.v)
        else
          -- a coroutine that takes 1.5 s (finite cases) or that another one ends (forever cases)
          local done_at
          c:spawn(function() c:sleep(1.5); done_at = now() end)
          local t0 = now()
          local res = util.pack(run(val.v))
          local took = now() - t0
          if val.forever then
            assert.are.equal(true, res[1], val.name .. ": " .. tostring(res[2]))
            assert.is_number(done_at, val.name)
            assert.is_true(took >= 1.4, val.name .. " returned after " .. took .. " s")
          else
            util.assert_code("ETIMEDOUT", res, which .. " " .. val.name)
            assert.is_true(took < 1.4, val.name .. " took " .. took)
            assert.is_true(took >= (val.finite or 0) * 0.95, val.name .. " took " .. took)
          end
        end
        c:close()
      end
    end)
  end

  -- Plain calls on a client that never connects: every one ends by its timeout.
  local PLAIN = {
    { "get", 2, function(c, o) return c:get("/to/x", o) end },
    { "children", 2, function(c, o) return c:children("/to/x", o) end },
    { "exists", 2, function(c, o) return c:exists("/to/x", o) end },
    { "create", 3, function(c, o) return c:create("/to/x", "d", o) end },
    { "set", 4, function(c, o) return c:set("/to/x", "d", -1, o) end },
    { "delete", 3, function(c, o) return c:delete("/to/x", -1, o) end },
  }

  it("plain znode calls over the same values, on a client that never connects (op_timeout = 1)", function()
    local c = assert(zklock.connect("127.0.0.1:1", { wait = false, op_timeout = 1 }))
    local runs = {}
    for _, p in ipairs(PLAIN) do
      local name, argn, call = p[1], p[2], p[3]
      for _, val in ipairs(VALUES) do
        local what = name .. " with timeout " .. val.name
        if val.bad or val.zero then
          raises({ ("bad argument #%d to '%s'"):format(argn, name), "option 'timeout'", val.bad or "0" },
            call, c, { timeout = val.v })
        else
          -- { timeout = nil } is no option at all: the client's op_timeout (1 s here)
          local run = { val = val.v == nil and { name = "nil", finite = 1 } or val, what = what }
          runs[#runs + 1] = run
          c:spawn(function()
            local t0 = now()
            run.res = util.pack(call(c, { timeout = val.v }))
            run.took = now() - t0
          end)
        end
      end
      -- and without options: the client's op_timeout
      local run = { val = { name = "op_timeout", finite = 1 }, what = name .. " without options" }
      runs[#runs + 1] = run
      c:spawn(function()
        local t0 = now()
        if name == "create" then run.res = util.pack(c:create("/to/x", "d"))
        elseif name == "set" then run.res = util.pack(c:set("/to/x", "d"))
        elseif name == "delete" then run.res = util.pack(c:delete("/to/x"))
        else run.res = util.pack(c[name](c, "/to/x")) end
        run.took = now() - t0
      end)
    end
    util.drive({ c }, WINDOW)
    for _, run in ipairs(runs) do
      if run.val.forever then
        assert.is_nil(run.res, run.what .. ": returned " .. tostring(run.res and run.res[2]))
      else
        assert.is_table(run.res, run.what .. ": still waiting")
        util.assert_code("ETIMEDOUT", run.res, run.what)
        assert.is_true(run.took >= run.val.finite * 0.95, run.what .. " took " .. run.took)
      end
    end
    -- the forever ones end with the client
    c:close()
    for _, run in ipairs(runs) do
      if run.val.forever then util.assert_code("ECLOSED", run.res, run.what) end
    end
  end)

  it("a plain call on a client that never connects ends by the default op_timeout", function()
    -- the issue's case: zklock.connect("127.0.0.1:1", { wait = false }) then c:get("/") waited forever
    local c = assert(zklock.connect("127.0.0.1:1", { wait = false, session_timeout = 1.5 }))
    local res, took
    c:spawn(function()
      local t0 = now()
      res = util.pack(c:get("/")) -- default op_timeout: the session_timeout asked for
      took = now() - t0
    end)
    util.drive_until({ c }, function() return res ~= nil end, 15)
    c:close()
    assert.is_table(res, "get still waiting after 15 s")
    util.assert_code("ETIMEDOUT", res)
    util.assert_words(res[2], { "get /", "1.5 s", "op_timeout" })
    assert.is_true(took >= 1.4 and took < 10, "took " .. took)
  end)

  it("a plain call pending when the server dies ends with ESESSION or ETIMEDOUT, not never", function()
    local own = testing.server({})
    local c = assert(zklock.connect(own.hosts, { session_timeout = 3 }))
    local res, took
    own:kill()
    c:spawn(function()
      local t0 = now()
      res = util.pack(c:get("/"))
      took = now() - t0
    end)
    util.drive_until({ c }, function() return res ~= nil end, 20)
    c:close()
    util.stop_server(own)
    assert.is_table(res, "get still pending 20 s after the server was killed")
    assert.is_nil(res[1])
    assert.truthy(res[3] == "ESESSION" or res[3] == "ETIMEDOUT", tostring(res[2]))
    assert.is_true(took < 20)
  end)

  it("connect's connect_timeout over the same values (forever: in a child process)", function()
    local hosts = "127.0.0.1:1" -- refused: never connects
    for _, val in ipairs(VALUES) do
      if val.bad then
        raises({ "bad argument #2 to 'connect'", "connect_timeout", val.bad },
          zklock.connect, hosts, { connect_timeout = val.v })
      elseif not val.forever then
        local t0 = now()
        local res = util.pack(zklock.connect(hosts, { connect_timeout = val.v }))
        local took = now() - t0
        util.assert_code("ETIMEDOUT", res, val.name)
        assert.is_true(took >= (val.finite or 0) * 0.95 and took < 5, val.name .. " took " .. took)
      end
    end
    -- nil: the session timeout asked for
    local t0 = now()
    local res = util.pack(zklock.connect(hosts, { session_timeout = 1.2 }))
    util.assert_code("ETIMEDOUT", res)
    util.assert_words(res[2], { "within 1.2 s" })
    assert.is_true(now() - t0 >= 1.1)
    -- forever: still connecting after 2 s (the child is then killed by `timeout`: status 124)
    local lua = jit and "luajit" or "lua5.4"
    local cpath = (jit and "build-jit" or "build") .. "/?.so;"
    for _, expr in ipairs({ "math.huge", "1e300", jit and "2^63" or "math.maxinteger" }) do
      local code = ("package.path='lua/?.lua;lua/?/init.lua;'..package.path package.cpath='%s'..package.cpath "
        .. "local c = require('zklock').connect('%s', { connect_timeout = %s }) os.exit(c and 0 or 3)")
        :format(cpath, hosts, expr)
      local ok, how, status = os.execute(("timeout 2 %s -e %q"):format(lua, code))
      if type(ok) == "number" then status = ok / 256 end -- LuaJIT: os.execute returns the raw status
      assert.are.equal(124, status,
        ("connect_timeout = %s returned (%s %s)"):format(expr, tostring(how), tostring(status)))
    end
  end)
end)
