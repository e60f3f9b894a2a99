-- A coroutine that ends while holding a mutex or a read-write lock side (error, return,
-- coroutine.close, or collected) no longer leaks it: the client releases it like the server drops
-- a crashed process's ephemeral node, and says so through its log function. Leases (owned by
-- nobody) and the main thread's holds are left alone.
--   busted --lua=lua5.4 spec/17-dead-owners_spec.lua
--   busted --lua=luajit --run=luajit spec/17-dead-owners_spec.lua
local util = require("support.util")
local fixture = require("support.fixture")
local deps = require("support.deps")

local now = util.now

describe("holds of dead owners", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  -- A client whose log lines are kept in `lines`.
  local function logged_client()
    local lines = {}
    local c = connect({ log = function(line, level) lines[#lines + 1] = { line = line, level = level } end })
    return c, lines
  end

  local function find_line(lines, ...)
    for _, l in ipairs(lines) do
      if util.has_words(l.line, ...) then return l end
    end
    return nil
  end

  -- another client gets the lock within a few seconds (it waited until its timeout before)
  local function others_get_it(b, path, clients)
    local got, took
    b:spawn(function()
      local t0 = now()
      local m = b:mutex(path)
      got = m:acquire(8)
      took = now() - t0
      if got then m:release() end
    end)
    util.drive_until(clients, function() return got ~= nil end, 10)
    assert.is_truthy(got, "another client could not take " .. path)
    return took
  end

  it("a spawned coroutine that raises while holding a mutex: released, logged, others get it", function()
    local a, lines = logged_client()
    local b = connect()
    local path = "/dead/raise"
    local ma = a:mutex(path)
    a:spawn(function() assert(ma:acquire(5)); error("bug") end)
    local ok, err = pcall(a.run, a, 10)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("bug", 1, true), tostring(err))
    assert.is_false(ma:is_held())
    -- the node is gone (or going): participants() no longer lists it for long
    assert.is_true(util.wait_until(function() return #ma:participants() == 0 end, 5, { a }))
    local l = find_line(lines, "zklock warn:", "mutex " .. path, "released", "owner coroutine ended")
    assert.is_table(l, "no log line about the reaped mutex")
    assert.are.equal("warn", l.level)
    assert.is_true(others_get_it(b, path, { a, b }) < 5)
  end)

  it("a spawned coroutine that returns holding a write lock; a read lock of a plain coroutine.wrap", function()
    local a, lines = logged_client()
    local b = connect()
    local rw = a:rwlock("/dead/rw")
    a:spawn(function() assert(rw.write:acquire(5)) end)
    assert(a:run(10))
    -- a coroutine.wrap the user resumes, which raises while holding the read side
    local f = coroutine.wrap(function() assert(rw.read:acquire(5)); error("bug in wrap") end)
    assert.is_false((pcall(f)))
    local got
    b:spawn(function()
      local w = b:rwlock("/dead/rw").write
      got = w:acquire(8)
      if got then w:release() end
    end)
    util.drive_until({ a, b }, function() return got ~= nil end, 10)
    assert.is_truthy(got, "the write side stayed taken")
    assert.is_table(find_line(lines, "write lock /dead/rw", "released"))
    assert.is_table(find_line(lines, "read lock /dead/rw", "released"))
  end)

  it("a coroutine closed with coroutine.close (Lua 5.4) #lua54", function()
    local a = connect({ log = function() end })
    local b = connect()
    local m = a:mutex("/dead/closed")
    local co = coroutine.create(function() assert(m:acquire(5)); coroutine.yield() end)
    assert(coroutine.resume(co))
    assert(coroutine.close(co))
    assert.is_true(others_get_it(b, "/dead/closed", { a, b }) < 5)
  end)

  it("a suspended coroutine that was collected", function()
    local a, lines = logged_client()
    local b = connect()
    local m = a:mutex("/dead/collected")
    do
      local co = coroutine.create(function() assert(m:acquire(5)); coroutine.yield() end)
      assert(coroutine.resume(co))
    end
    collectgarbage(); collectgarbage()
    assert.is_true(others_get_it(b, "/dead/collected", { a, b }) < 5)
    assert.is_table(find_line(lines, "mutex /dead/collected", "was collected"))
  end)

  it("a coroutine driven by an adapter (cqueues)", function()
    local cqueues = deps.require("cqueues", "apt-get install lua-cqueues", pending)
    if not cqueues then return end
    local zcq = require("zklock.adapters.cqueues")
    local a, lines = logged_client()
    local b = connect()
    local cq = cqueues.new()
    zcq.attach(a, cq)
    cq:wrap(function() assert(a:mutex("/dead/cq"):acquire(5)); error("bug in cq") end)
    local t0, errors = now(), {}
    while not find_line(lines, "mutex /dead/cq", "released") and now() - t0 < 10 do
      local ok, err = cq:step(0.05)
      if not ok then errors[#errors + 1] = tostring(err) end
    end
    assert.truthy(errors[1] and errors[1]:find("bug in cq", 1, true), tostring(errors[1]))
    assert.is_table(find_line(lines, "mutex /dead/cq", "released"), "not reaped")
    for _ = 1, 10 do cq:step(0.01) end -- the delete goes out
    local m = b:mutex("/dead/cq")
    assert.are.equal(m, m:acquire(5))
    m:release()
    a:close()
  end)

  it("the main thread never counts as dead; leases (owned by nobody) stay held", function()
    local a = connect({ log = function() end })
    local b = connect()
    local m = a:mutex("/dead/main")
    assert(m:acquire(5))
    local sem = a:semaphore("/dead/sem", 1)
    local lease
    a:spawn(function() lease = assert(sem:acquire(5)) end) -- the coroutine ends; the lease is no one's
    a:spawn(function() error("unrelated") end)
    assert.is_false((pcall(a.run, a, 10)))
    util.drive({ a, b }, 0.5)
    assert.is_true(m:is_held())
    util.assert_code("ETIMEDOUT", util.pack(b:mutex("/dead/main"):acquire(0)))
    assert.is_true(lease:is_held())
    util.assert_code("ETIMEDOUT", util.pack(b:semaphore("/dead/sem", 1):acquire(0)))
    assert.are.same({}, a:reap_dead_owners())
    assert(m:release())
    assert(lease:release())
  end)
end)
