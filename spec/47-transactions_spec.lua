-- Transactions (ZooKeeper's multi) and fenced writes against a real ZooKeeper: all or none,
-- per-op results, errors naming the failing op; a transaction from a held lock or lease checks
-- the holder's node first, so a holder that lost its lock cannot overwrite the next holder's
-- work: shown with the node deleted behind the holder's back (the server refuses, whatever the
-- holder believes), and with a holder process paused (SIGSTOP) past its session: fenced, its
-- write is refused and the next holder's value stands; unfenced, the same scenario overwrites it.
--   busted --lua=lua5.4 spec/47-transactions_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")
local fw = require("support.fault_worker")

local function raises(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err), 1, true)
end

describe("transactions", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  it("applies creates, sets, deletes and checks together, with per-op results", function()
    local c = connect()
    assert(c:create("/txn/a", "v0", { parents = true }))
    assert(c:create("/txn/gone", ""))
    local res, msg = c:transaction()
      :check("/txn/a", 0)
      :create("/txn/a/child", "c")
      :create("/txn/seq-", "s", { sequential = true })
      :set("/txn/a", "v1", 0)
      :delete("/txn/gone", -1)
      :commit(10)
    assert(res, msg)
    assert.are.equal(5, #res)
    assert.are.same({ "check", "create", "create", "set", "delete" },
      { res[1].op, res[2].op, res[3].op, res[4].op, res[5].op })
    assert.are.equal("/txn/a/child", res[2].created)
    assert.matches("^/txn/seq%-%d%d%d%d%d%d%d%d%d%d$", res[3].created)
    assert.are.equal(1, res[4].version)
    assert.are.equal("v1", (c:get("/txn/a")))
    assert.are.equal("c", (c:get("/txn/a/child")))
    assert.is_false(c:exists("/txn/gone"))
  end)

  it("applies nothing when one op fails, and names it", function()
    local c = connect()
    assert(c:create("/txn2", "v0"))
    local t = c:transaction():create("/txn2/new", "x"):set("/txn2", "v1", 7):delete("/txn2/missing")
    local res, msg, code, results = t:commit()
    assert.is_nil(res)
    assert.are.equal("ZBADVERSION", code)
    assert.matches("transaction op 2 (set /txn2)", msg, 1, true)
    assert.matches("nothing was applied", msg, 1, true)
    assert.are.equal(3, #results)
    assert.are.equal("ZBADVERSION", results[2].code)
    assert.is_false(c:exists("/txn2/new"))            -- the create before it was rolled back
    assert.are.equal("v0", (c:get("/txn2")))
    -- a check on a missing node
    local _, _, code2 = c:transaction():check("/txn2/none"):set("/txn2", "x"):commit()
    assert.are.equal("ZNONODE", code2)
    assert.are.equal("v0", (c:get("/txn2")))
  end)

  it("fences a holder's writes: its node deleted behind its back, the server refuses the write", function()
    local c, other = connect("holder"), connect("other")
    assert(c:create("/txn3-data", "0"))
    local m = c:mutex("/txn3-lock")
    assert(m:acquire(5))
    assert(m:transaction():set("/txn3-data", "1"):commit())
    assert.are.equal("1", (c:get("/txn3-data")))
    -- the holder's node vanishes (an operator, a reaper, the server expiring it): the holder is
    -- not told (it has no watch on its own node) and still believes it holds the lock
    assert(other:delete(m:node()))
    assert.is_true(m:is_held())
    local nm = other:mutex("/txn3-lock")
    assert(nm:acquire(5))
    assert(nm:transaction():set("/txn3-data", "next"):commit())
    local res, msg, code, results = m:transaction():set("/txn3-data", "stale"):commit()
    assert.is_nil(res)
    assert.are.equal("ELOST", code)
    assert.matches("is no longer held", msg, 1, true)
    assert.are.equal(1, #results)                      -- the caller's ops only, not the guard
    assert.are.equal("next", (c:get("/txn3-data")))
    -- without the fence the same write goes through: the bug the fence prevents
    assert(c:set("/txn3-data", "stale"))
    assert.are.equal("stale", (c:get("/txn3-data")))
    assert(nm:release())
  end)

  it("a lock lost with its session refuses the write without sending it", function()
    local c = connect({ session_timeout = 4 })
    local m = c:mutex("/txn4")
    assert(m:acquire(5))
    local t = m:transaction():create("/txn4-x", "")
    assert(testing.expire(c, zk.hosts))
    assert.is_true(util.wait_until(function() return not m:is_held() end, 20, { c }))
    local _, msg, code = t:commit()
    assert.are.equal("ELOST", code)
    assert.matches("not held", msg, 1, true)
    assert.is_false(c:exists("/txn4-x"))
    assert.are.equal("ELOST", select(3, m:release()))
  end)

  it("fences lease and semaphore mutex writes", function()
    local c = connect()
    local s = c:semaphore("/txn5-sem", 2)
    local lease = assert(s:acquire(5))
    assert(lease:transaction():create("/txn5-a", "1"):commit())
    local smx = c:semaphore_mutex("/txn5-smx")
    assert(smx:acquire(5))
    assert(smx:transaction():create("/txn5-b", "1"):commit())
    assert(smx:release())
    assert(lease:release())
    raises("transaction of lease", lease.transaction, lease)
    raises("which is not held", smx.transaction, smx)
    assert.is_truthy(c:exists("/txn5-a"))
    assert.is_truthy(c:exists("/txn5-b"))
  end)

  it("refuses bad input with the argument named, and never sends half a transaction", function()
    local c = connect()
    local t = c:transaction()
    raises("bad argument #1 to 'create' (path: expected an absolute znode path", t.create, t, "rel", "")
    raises("data: expected a string or nil", t.create, t, "/x", 5)
    raises("unknown option 'ephemral'", t.create, t, "/x", "", { ephemral = true })
    raises("a container cannot be ephemeral", t.create, t, "/x", "", { container = true, ephemeral = true })
    raises("bad argument #2 to 'set' (data: expected a string", t.set, t, "/x", nil)
    raises("version: expected an integer", t.set, t, "/x", "", 1.5)
    raises("version: expected an integer", t.delete, t, "/x", "new")
    raises("version: expected an integer", t.check, t, "/x", -2)
    raises("commit with no ops", t.commit, t)
    t:create("/txn6", "")
    raises("timeout: expected a number of seconds > 0", t.commit, t, 0)
    raises("use transaction:commit(...) (with a colon)", t.commit, {})
    assert(t:commit())
    raises("after commit", t.commit, t)
    raises("after commit", t.set, t, "/txn6", "")
    local big = c:transaction()
    for i = 1, 999 do big:check("/txn6", -1 + 0 * i) end
    raises("at most 1000 ops", big.check, big, "/txn6")
    assert(big:commit())
    local m = c:mutex("/txn6-lock")
    raises("by a coroutine that does not hold it", m.transaction, m)
    local pending_txn = c:transaction()
    c:close()
    raises("on a closed client", c.transaction, c)
    raises("on a closed client", pending_txn.set, pending_txn, "/x", "")
  end)
end)

describe("fenced writes across a paused holder #slow", function()
  local zk
  fixture.server({}, { each = true }, function(s) zk = s end)
  local SESSION = 2 -- s

  -- One run: a holder process takes the lock, is stopped, its session expires, a second holder
  -- writes "next", the first resumes and writes. -> the value that stands, the first's result
  local function run(mode)
    local c = assert(zklock.connect(zk.hosts))
    local path = "/fence-" .. mode
    assert(c:create(path .. "-data", "initial"))
    local dir = fw.tmpdir("fenced")
    local cmd = ("%s %s %s %s %s %s %s %d"):format(fw.interpreter(),
      testing.shq(fw.ROOT .. "/spec/support/fenced_worker.lua"), zk.hosts, path .. "-lock", path .. "-data", dir,
      mode, SESSION)
    local pid = assert(testing.spawn{ command = cmd, log = dir .. "/out.log", pidfile = dir .. "/pid", stop = "KILL" })
    local ok, err = pcall(function()
      local deadline = testing.now() + 30
      while not testing.exists(dir .. "/held") do
        assert(testing.now() < deadline, "the worker never held the lock: "
          .. (testing.read_file(dir .. "/out.log") or ""))
        testing.sleep(0.05)
      end
      assert(testing.execute("kill -STOP " .. pid))
      testing.write_file(dir .. "/go", "")
      -- the server expires the stopped holder's session; then the next holder gets the lock
      local m = c:mutex(path .. "-lock")
      assert(m:acquire(SESSION * 10))
      assert(m:transaction():set(path .. "-data", "next"):commit())
      assert(m:release())
      assert(testing.execute("kill -CONT " .. pid))
      deadline = testing.now() + 40
      while not testing.exists(dir .. "/result") do
        assert(testing.now() < deadline, "the worker wrote no result: " .. (testing.read_file(dir .. "/out.log") or ""))
        testing.sleep(0.05)
      end
    end)
    testing.execute("kill -CONT " .. pid .. " 2>/dev/null; kill -KILL " .. pid .. " 2>/dev/null")
    assert(ok, err)
    local result = testing.read_file(dir .. "/result")
    local value = c:get(path .. "-data")
    c:close()
    return value, result
  end

  it("fenced: the resumed holder's write is refused and the next holder's value stands", function()
    local value, result = run("fenced")
    assert.are.equal("refused ELOST", result)
    assert.are.equal("next", value)
  end)

  it("unfenced (the control): the resumed holder overwrites the next holder's value", function()
    local value, result = run("plain")
    assert.are.equal("ok", result)
    assert.are.equal("stale", value)
  end)
end)
