-- API surface and misuse: argument checking, error shapes, closed clients. Fast: one ZooKeeper
-- server for the whole file. Runs under Lua 5.4 and LuaJIT.
--   busted --lua=lua5.4 spec/01-api_spec.lua
--   busted --lua=luajit --run=luajit spec/01-api_spec.lua
local zklock = require("zklock")
local util = require("support.util")
local fixture = require("support.fixture")

local THIS_FILE = debug.getinfo(1, "S").short_src

-- Raise-check: fn must raise, and the message must contain every word.
local function assert_raises(words, fn, ...)
  return util.assert_words(util.error_of(fn, ...), words)
end

describe("zklock API", function()
  local zk, client
  fixture.server({}, {}, function(s) zk = s end)

  setup(function()
    client = util.connect(zk.hosts, { identity = "api-spec" })
  end)

  describe("module", function()
    it("tells clients and mutexes apart with zklock.type", function()
      local m = client:mutex("/api/type")
      assert.are.equal("client", zklock.type(client))
      assert.are.equal("mutex", zklock.type(m))
      assert.is_nil(zklock.type(nil))
      assert.is_nil(zklock.type({}))
      assert.is_nil(zklock.type("client"))
      assert.is_nil(zklock.type(42))
      assert.is_nil(zklock.type(setmetatable({}, { __index = client })))
    end)
  end)

  describe("connect", function()
    it("rejects unknown option names and lists the known ones", function()
      local msg = assert_raises({ "bad argument #2 to 'connect'", "unknown option 'sesion_timeout'" },
        zklock.connect, zk.hosts, { sesion_timeout = 5 })
      assert.truthy(msg:find("session_timeout", 1, true))
      assert.truthy(msg:find("identity", 1, true))
      assert_raises({ "options", "expected a table" }, zklock.connect, zk.hosts, "fast")
    end)

    it("rejects a session_timeout that is not a positive number", function()
      local bad = { "10", -1, 0, 0 / 0, math.huge, {}, true }
      for _, v in ipairs(bad) do
        assert_raises({ "bad argument #2 to 'connect'", "session_timeout", "number" },
          zklock.connect, zk.hosts, { session_timeout = v })
      end
      assert_raises({ "session_timeout", "NaN" }, zklock.connect, zk.hosts, { session_timeout = 0 / 0 })
    end)

    it("rejects bad connect_timeout, identity, log and log_level values", function()
      assert_raises({ "connect_timeout", ">= 0" }, zklock.connect, zk.hosts, { connect_timeout = -1 })
      assert_raises({ "connect_timeout" }, zklock.connect, zk.hosts, { connect_timeout = 0 / 0 })
      assert_raises({ "identity", "string" }, zklock.connect, zk.hosts, { identity = 7 })
      assert_raises({ "log", "function" }, zklock.connect, zk.hosts, { log = "stderr" })
      assert_raises({ "log_level", "one of" }, zklock.connect, zk.hosts, { log_level = "verbose" })
    end)

    it("connects with valid options", function()
      local c = util.connect(zk.hosts, { session_timeout = 4, connect_timeout = 5, identity = "x",
                                         log = function() end, log_level = "error" })
      assert.are.equal("client", zklock.type(c))
      assert.are.equal("CONNECTED", c.state)
      assert.is_true(c:session_timeout() > 0)
      c:close()
    end)
  end)

  describe("mutex path", function()
    local cases = {
      { "", "empty" },
      { "locks/a", "start with '/'" },
      { "/locks/a/", "end with '/'" },
      { "/locks//a", "'//'" },
      { "/locks/a\0b", "NUL" },
      { "/locks/./a", "'.' or '..'" },
      { "/locks/../a", "'.' or '..'" },
      { "/locks/.", "'.' or '..'" },
      { "/..", "'.' or '..'" },
      { "/" .. ("x"):rep(1024), "too long" },
      { "/", "root" },
      { "/zookeeper", "/zookeeper" },
      { "/zookeeper/x", "/zookeeper" },
      { "/locks/a\nb", "control" },
    }

    it("rejects bad paths with a message that says what is wrong", function()
      for _, case in ipairs(cases) do
        assert_raises({ "bad argument #1 to 'mutex'", "lock path", case[2] }, client.mutex, client, case[1])
      end
    end)

    it("rejects non-string paths", function()
      for _, v in ipairs({ 42, true, {} }) do
        assert_raises({ "bad argument #1 to 'mutex'", "lock path", "expected a string" }, client.mutex, client, v)
      end
      assert_raises({ "lock path", "expected a string" }, client.mutex, client, nil)
    end)

    it("accepts a path of exactly 1024 bytes and locks it", function()
      local path = "/api/" .. ("p"):rep(1024 - 5)
      assert.are.equal(1024, #path)
      local m = client:mutex(path)
      assert.are.equal(m, assert(m:acquire(5)))
      assert.is_true(m:release())
    end)

    it("rejects unknown mutex options", function()
      assert_raises({ "unknown option 'fair'" }, client.mutex, client, "/api/opts", { fair = true })
    end)
  end)

  describe("acquire arguments", function()
    it("rejects timeouts that are not nil or a number >= 0", function()
      local m = client:mutex("/api/timeouts")
      for _, v in ipairs({ "5", {}, true, -1, -0.001, 0 / 0, -math.huge }) do
        assert_raises({ "bad argument #1 to 'acquire'", "timeout" }, m.acquire, m, v)
      end
      assert_raises({ "timeout", "NaN" }, m.acquire, m, 0 / 0)
      assert.is_false(m:is_held())
    end)

    it("takes timeouts too large for the core as forever (spec/16-timeouts_spec.lua waits on them)", function()
      local m = client:mutex("/api/timeouts")
      for _, v in ipairs({ 1e10, 2 ^ 31, 2147483.648 }) do
        assert.are.equal(m, m:acquire(v))
        assert.is_true(m:release())
      end
    end)

    it("accepts nil, math.huge and the largest finite timeout", function()
      local m = client:mutex("/api/timeouts-ok")
      for _, v in ipairs({ false, math.huge, 2147483.647 }) do
        local r
        if v == false then r = m:acquire() else r = m:acquire(v) end
        assert.are.equal(m, r)
        assert.is_true(m:release())
      end
    end)
  end)

  describe("misuse", function()
    it("spawn wants a function", function()
      for _, v in ipairs({ "f", 1, {}, true }) do
        assert_raises({ "bad argument #1 to 'spawn'", "expected a function" }, client.spawn, client, v)
      end
      assert_raises({ "bad argument #1 to 'spawn'", "expected a function", "nil" }, client.spawn, client, nil)
    end)

    it("on_lost wants a function or nil", function()
      local m = client:mutex("/api/onlost")
      for _, v in ipairs({ "f", 1, {}, true }) do
        assert_raises({ "bad argument #1 to 'on_lost'", "function" }, m.on_lost, m, v)
      end
      m:on_lost(function() end)
      m:on_lost(nil)
    end)

    it("release of a lock that is not held raises, naming the path, and writes nothing", function()
      local m = client:mutex("/api/not-held")
      local before = client:stats()
      assert_raises({ "release", "/api/not-held", "does not hold" }, m.release, m)
      local after = client:stats()
      assert.are.equal(before.deletes, after.deletes)
      assert.are.equal(before.ops, after.ops)
      assert.is_false(m:is_held())
    end)

    it("releasing twice raises the second time", function()
      local m = client:mutex("/api/twice")
      assert(m:acquire(5))
      local node = m:node()
      assert.is_true(m:release())
      assert.is_false(client:exists(node))
      assert_raises({ "release", "/api/twice", "does not hold" }, m.release, m)
      -- and the object still works
      assert.are.equal(m, assert(m:acquire(5)))
      assert.is_true(m:release())
    end)

    it("plain znode calls reject relative paths", function()
      for _, name in ipairs({ "get", "children", "exists", "delete" }) do
        assert_raises({ "bad argument #1 to '" .. name .. "'", "absolute" }, client[name], client, "relative/x")
      end
      assert_raises({ "absolute" }, client.create, client, "x", "")
      -- with parents the whole path is checked first: the error names it, not a prefix of it
      assert_raises({ "bad argument #1 to 'create'", "absolute", "relative/x" },
        client.create, client, "relative/x", "", { parents = true })
      assert_raises({ "bad argument #1 to 'create'", "absolute", "number" },
        client.create, client, 7, "", { parents = true })
      assert_raises({ "bad argument #2 to 'set'", "string" }, client.set, client, "/api", 5)
    end)

    it("create takes named options only: bare numeric flags and unknown options are rejected", function()
      -- 3 was EPHEMERAL|SEQUENTIAL in the ZooKeeper C API
      assert_raises({ "bad argument #3 to 'create'", "options", "numeric flags", "3 (number)" },
        client.create, client, "/api/flags", "", 3)
      assert_raises({ "bad argument #3 to 'create'", "unknown option 'flags'", "acl", "ephemeral" },
        client.create, client, "/api/flags", "", { flags = 1 })
      assert_raises({ "bad argument #3 to 'create'", "option 'ephemeral'", "boolean" },
        client.create, client, "/api/flags", "", { ephemeral = 1 })
      assert_raises({ "bad argument #3 to 'create'", "option 'acl'", "creator" },
        client.create, client, "/api/flags", "", { acl = "everyone" })
      assert_raises({ "bad argument #3 to 'create'", "container", "ephemeral or sequential" },
        client.create, client, "/api/flags", "", { container = true, sequential = true })
      assert.is_false(client:exists("/api/flags"))
      -- the named flags do what they say
      local made = assert(client:create("/api/named/n-", "x", { parents = true, ephemeral = true, sequential = true }))
      assert.truthy(made:match("^/api/named/n%-%d%d%d%d%d%d%d%d%d%d$"), made)
      local _, stat = assert(client:get(made))
      assert.are_not.equal("0000000000000000", stat.ephemeral_owner)
      assert(client:delete(made))
    end)
  end)

  describe("a closed client", function()
    local c, m, held

    setup(function()
      c = util.connect(zk.hosts, { identity = "closing" })
      m = c:mutex("/api/closed/m")
      held = c:mutex("/api/closed/held")
      assert(held:acquire(5))
      c:close()
    end)

    it("is still a client, and close is idempotent", function()
      assert.are.equal("client", zklock.type(c))
      assert.are.equal("CLOSED", c.state)
      c:close()
      assert.are.equal("CLOSED", c.state)
    end)

    it("raises on every method that needs the session, saying it is closed", function()
      local calls = {
        { "mutex", function() c:mutex("/api/closed/x") end },
        { "spawn", function() c:spawn(function() end) end },
        { "stats", function() c:stats() end },
        { "session", function() c:session() end },
        { "get", function() c:get("/api") end },
        { "children", function() c:children("/api") end },
        { "exists", function() c:exists("/api") end },
        { "create", function() c:create("/api/closed/new", "") end },
        { "set", function() c:set("/api", "") end },
        { "delete", function() c:delete("/api") end },
        { "acquire", function() m:acquire(1) end },
        { "acquire", function() m:acquire(0) end },
        { "participants", function() m:participants() end },
      }
      for _, call in ipairs(calls) do
        assert_raises({ call[1], "closed client" }, call[2])
      end
    end)

    it("its held locks are no longer held", function()
      assert.is_false(held:is_held())
      assert.is_false(m:is_held())
      -- closing the session removed its node at once
      assert.are.same({}, util.children(client, "/api/closed/held"))
    end)

    it("a lock held at close has no fencing token or node any more", function()
      assert.is_nil(held:token())
      assert.is_nil(held:node())
    end)

    it("sleep raises instead of returning at once", function()
      local t0 = util.now()
      local msg = util.error_of(c.sleep, c, 0.2)
      assert.is_true(util.now() - t0 < 0.1)
      util.assert_words(msg, { "sleep", "closed client" })
    end)
  end)

  describe("error positions", function()
    it("argument errors and misuse point at the caller, not into the library", function()
      local m = client:mutex("/api/pos")
      local sem = client:semaphore("/api/pos-sem", 1)
      local job = client:semaphore_mutex("/api/pos-job")
      local closed = util.connect(zk.hosts)
      local cm, csem = closed:mutex("/api/pos-closed"), closed:semaphore("/api/pos-closed-sem", 1)
      local cml = closed:multilock({ cm })
      closed:close()
      local calls = {
        { "spawn", function() client:spawn(1) end },
        { "on_lost", function() m:on_lost(1) end },
        { "semaphore on_lost", function() sem:on_lost(1) end },
        { "mutex path", function() client:mutex("bad") end },
        { "rwlock options", function() client:rwlock("/api/pos", { bogus = 1 }) end },
        { "semaphore max_leases", function() client:semaphore("/api/pos", 0) end },
        { "multilock locks", function() client:multilock({}) end },
        { "connect hosts", function() zklock.connect("nohostport") end },
        { "connect options", function() zklock.connect(zk.hosts, { bogus = 1 }) end },
        { "acquire timeout", function() m:acquire(-1) end },
        { "acquire retry", function() m:acquire(1, { retry = 1 }) end },
        { "acquire_many count", function() sem:acquire_many(2, 1) end },
        { "sleep seconds", function() client:sleep(-1) end },
        { "run timeout", function() client:run(-1) end },
        { "zklock.run clients", function() zklock.run({ 1 }) end },
        { "use adapter", function() client:use({}) end },
        { "get path", function() client:get("x") end },
        { "set data", function() client:set("/api", 1) end },
        { "create{parents} path", function() client:create("a/b", "", { parents = true }) end },
        { "create options", function() client:create("/api/x", "", { bogus = true }) end },
        { "release not held", function() m:release() end },
        { "semaphore mutex release not held", function() job:release() end },
        { "acquire on a closed client", function() cm:acquire(1) end },
        { "semaphore acquire on a closed client", function() csem:acquire(1) end },
        { "multilock acquire on a closed client", function() cml:acquire(1) end },
        { "sleep on a closed client", function() closed:sleep(0) end },
        { "spawn on a closed client", function() closed:spawn(function() end) end },
        { "mutex on a closed client", function() closed:mutex("/api/x") end },
      }
      local wrong = {}
      for _, call in ipairs(calls) do
        local msg = util.error_of(call[2])
        assert.is_string(msg, call[1] .. " did not raise")
        if msg:sub(1, #THIS_FILE + 1) ~= THIS_FILE .. ":" then
          wrong[#wrong + 1] = call[1] .. " -> " .. (msg:match("^[^:]*:%d+:") or msg)
        end
      end
      assert.are.same({}, wrong)
    end)

    it("a lease released twice raises at the caller", function()
      local sem = client:semaphore("/api/pos-twice", 1)
      local lease = assert(sem:acquire(5))
      assert.is_true(lease:release())
      local msg = util.error_of(lease.release, lease)
      util.assert_words(msg, { "already released" })
      -- through a method call written here
      msg = util.error_of(function() lease:release() end)
      assert.are.equal(THIS_FILE .. ":", msg:sub(1, #THIS_FILE + 1))
    end)
  end)

  -- Keep this last: everything above that was rejected must have left nothing on the server.
  describe("afterwards", function()
    it("the server holds no znodes under the test paths and no ephemerals", function()
      local checker = util.connect(zk.hosts)
      local function clean()
        local root = util.children(checker, "/")
        for _, name in ipairs(root) do
          if name ~= "zookeeper" and name ~= "api" then return false end
        end
        -- the bad paths: none of them may exist
        for _, p in ipairs({ "/locks", "/zookeeper/x", "/bad", "/api/closed/new" }) do
          if checker:exists(p) then return false end
        end
        -- what is left under /api are empty containers at most
        for _, name in ipairs(util.children(checker, "/api")) do
          if #util.children(checker, "/api/" .. name) > 0 then return false end
        end
        return util.mntr(zk, "zk_ephemerals_count") == 0
      end
      assert.is_true(util.wait_until(clean, 3, { client, checker }))
      local zkc = util.children(checker, "/zookeeper")
      for _, name in ipairs(zkc) do
        assert.is_truthy(name == "config" or name == "quota", "unexpected /zookeeper/" .. name)
      end
    end)
  end)
end)
