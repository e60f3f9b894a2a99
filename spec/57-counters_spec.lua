-- Shared values on a real ZooKeeper server: client:shared_count (Curator SharedCount: a 4-byte
-- big-endian int, versioned sets, a change listener) and client:atomic_long (Curator
-- DistributedAtomicLong: an 8-byte big-endian long, optimistic compare-and-set with retries and
-- the promotion to a mutex). Concurrent increments from several clients add up exactly; the
-- listener sees every change made elsewhere (also across deletion); a session expiry during
-- increments never counts one twice; 64-bit edges (wrap under 5.4, ERANGE without 64-bit
-- integers); corrupt data and bad input give clear errors.
--   busted --lua=lua5.4 spec/57-counters_spec.lua     busted --lua=luajit --run=luajit ...
local zklock = require("zklock")
local testing = require("zklock.testing")
local shared = require("zklock.counters")
local util = require("support.util")
local fixture = require("support.fixture")

local pack, assert_code = util.pack, util.assert_code

local function raises(pattern, fn, ...)
  local msg = util.error_of(fn, ...)
  assert.is_string(msg, "expected an error matching " .. pattern)
  assert.truthy(msg:find(pattern, 1, true), ("%q does not contain %q"):format(msg, pattern))
end

describe("shared values", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  it("shared_count: the seed on first use, 4-byte big-endian data, versioned sets", function()
    local a, b = connect("sc-a"), connect("sc-b")
    local sc = a:shared_count("/sh/count/x", 7)
    assert.are.equal("shared count", zklock.type(sc))
    assert.is_false(a:exists("/sh/count/x")) -- nothing sent before a call
    local v, ver = sc:get()
    assert.are.equal(7, v)
    assert.are.equal(0, ver)
    assert.are.equal("\0\0\0\7", (b:get("/sh/count/x")))
    local ok, nver = sc:try_set(-2, 0)
    assert.is_true(ok)
    assert.are.equal(1, nver)
    assert.are.equal("\255\255\255\254", (b:get("/sh/count/x")))
    assert.is_false(sc:try_set(5, 0)) -- stale version: nothing written
    assert.are.equal(-2, (sc:get()))
    -- another client's SharedCount on the same path (its seed is ignored: the node exists)
    local sc2 = b:shared_count("/sh/count/x", 99)
    assert.are.same({ -2, 1 }, { sc2:get() })
    assert.is_true((sc2:set(2147483647)))
    assert.are.same({ 2147483647, 2 }, { sc:get() })
    assert.is_true((sc:set(-2147483648)))
    assert.are.equal("\128\0\0\0", (b:get("/sh/count/x")))
    -- set on a missing node makes it
    assert(b:delete("/sh/count/x"))
    assert.are.same({ true, 0 }, { sc:set(11) })
    assert.are.equal(11, (sc2:get()))
    -- try_set on a deleted node: ZNONODE
    assert(b:delete("/sh/count/x"))
    assert_code("ZNONODE", pack(sc:try_set(1, 0)))
    -- corrupt data (fewer than 4 bytes): EDATA; more: the first 4 bytes, as Curator reads them
    -- (parents: the container /sh/count may have been reaped once its child was deleted)
    assert(b:create("/sh/count/x", "ab", { parents = true }))
    assert_code("EDATA", pack(sc:get()))
    assert(b:set("/sh/count/x", "\0\0\1\0junk"))
    assert.are.equal(256, (sc:get()))
  end)

  it("shared_count:on_change sees every change made elsewhere, across deletion and recreation", function()
    local logged = {}
    local a = connect({ identity = "ch-a", log = function(line) logged[#logged + 1] = line end })
    local b = connect("ch-b")
    local sc = a:shared_count("/sh/listen", 0)
    assert(sc:get())
    local seen = {}
    assert.are.equal(sc, sc:on_change(function(event, who, v, ver)
      assert.are.equal("changed", event)
      assert.are.equal(sc, who)
      seen[#seen + 1] = { v, ver }
    end))
    util.drive({ a }, 0.2)
    assert.are.equal(0, #seen) -- arming reads the baseline, reports nothing
    local other = b:shared_count("/sh/listen")
    for i = 1, 5 do
      assert(other:set(i * 10))
      assert.is_true(util.wait_until(function() return #seen == i end, 10, { a, b }), "change " .. i)
    end
    assert.are.same({ 50, 5 }, seen[5])
    -- deleted, then made again: the recreation is reported
    assert(b:delete("/sh/listen"))
    util.drive({ a, b }, 0.2)
    assert(b:create("/sh/listen", shared.encode_int(-1), { parents = true })) -- /sh may be reaped
    assert.is_true(util.wait_until(function() return #seen == 6 end, 10, { a, b }))
    assert.are.same({ -1, 0 }, seen[6])
    -- a failing handler is logged; a new one replaces it and runs alone
    sc:on_change(function() error("boom") end)
    assert(other:set(3))
    local function failed_logged()
      for _, l in ipairs(logged) do if l:find("on_change handler failed", 1, true) then return true end end
    end
    assert.is_true(util.wait_until(failed_logged, 10, { a, b }), "the failing handler was not logged")
    local n2, before_n = 0, #seen
    sc:on_change(function() n2 = n2 + 1 end)
    assert(other:set(5))
    assert.is_true(util.wait_until(function() return n2 == 1 end, 10, { a, b }))
    assert.are.equal(before_n, #seen) -- the first handler was replaced
    -- close: no more calls, no watch left on the server for a
    assert.is_true(sc:close())
    assert.is_true(sc:close())
    local before = #seen
    assert(other:set(4))
    util.drive({ a, b }, 0.3)
    assert.are.equal(before, #seen) -- nothing after close
    raises("after close", function() sc:get() end)
  end)

  it("shared_count: the listener re-arms after a session expiry and reports a change missed meanwhile", function()
    local a, b = connect({ identity = "ex-a", session_timeout = 4 }), connect("ex-b")
    local sc = a:shared_count("/sh/expire", 1)
    assert(sc:get())
    local seen = {}
    sc:on_change(function(_, _, v) seen[#seen + 1] = v end)
    util.drive({ a }, 0.2)
    assert(testing.expire(a, zk.hosts))
    assert(b:shared_count("/sh/expire"):set(42))
    assert.is_true(util.wait_until(function() return seen[#seen] == 42 end, 20, { a, b }))
    assert(b:shared_count("/sh/expire"):set(43))
    assert.is_true(util.wait_until(function() return seen[#seen] == 43 end, 10, { a, b }))
  end)

  it("shared_count: concurrent try_set loops from three clients add up exactly", function()
    local cs = { connect("cc-1"), connect("cc-2"), connect("cc-3") }
    local per, workers = 15, 2
    local done, losses, errors = 0, 0, {}
    for _, c in ipairs(cs) do
      for _ = 1, workers do
        c:spawn(function()
          local sc = c:shared_count("/sh/sum")
          for _ = 1, per do
            local ok = false
            for _ = 1, 1000 do
              local v, ver = sc:get()
              if not v then errors[#errors + 1] = ver return end
              local r, msg = sc:try_set(v + 1, ver)
              if r == nil then errors[#errors + 1] = msg return end
              if r then ok = true break end
              losses = losses + 1
            end
            if not ok then errors[#errors + 1] = "gave up after 1000 lost races" return end
          end
          done = done + 1
        end)
      end
    end
    assert(zklock.run(cs, 120))
    assert.are.same({}, errors)
    assert.are.equal(#cs * workers, done)
    assert.are.equal(#cs * workers * per, (cs[1]:shared_count("/sh/sum"):get()))
  end)

  it("atomic_long: 8-byte big-endian data, Curator's AtomicValue shape, every operation", function()
    local a, b = connect("al-a"), connect("al-b")
    local al = a:atomic_long("/sh/long/x")
    assert.are.equal("atomic long", zklock.type(al))
    -- a missing node reads 0 and is not made by get
    local r = assert(al:get())
    assert.are.same({ succeeded = true, pre = 0, post = 0 }, r)
    assert.is_false(a:exists("/sh/long/x"))
    r = assert(al:increment()) -- makes the node (and its parents)
    assert.is_true(r.succeeded)
    assert.are.equal(0, r.pre)
    assert.are.equal(1, r.post)
    assert.are.equal(1, r.stats.optimistic_tries)
    assert.are.equal("\0\0\0\0\0\0\0\1", (b:get("/sh/long/x")))
    r = assert(al:add(41))
    assert.are.same({ 1, 42 }, { r.pre, r.post })
    r = assert(al:decrement())
    assert.are.same({ 42, 41 }, { r.pre, r.post })
    r = assert(al:subtract(50))
    assert.are.same({ 41, -9 }, { r.pre, r.post })
    assert.are.equal("\255\255\255\255\255\255\255\247", (b:get("/sh/long/x")))
    -- compare_and_set: one attempt, only on the expected value
    r = assert(al:compare_and_set(5, 6))
    assert.is_false(r.succeeded)
    assert.are.equal(-9, r.pre)
    r = assert(al:compare_and_set(-9, 1000))
    assert.is_true(r.succeeded)
    assert.are.same({ -9, 1000 }, { r.pre, r.post })
    r = assert(al:try_set(7))
    assert.are.same({ true, 1000, 7 }, { r.succeeded, r.pre, r.post })
    assert.is_false(al:initialize(3)) -- exists
    assert.is_true(al:force_set(-1))
    assert.are.equal(-1, assert(al:get()).post)
    -- compare_and_set on a missing node fails (Curator: even when expecting 0)
    local other = a:atomic_long("/sh/long/missing")
    assert.is_false(assert(other:compare_and_set(0, 1)).succeeded)
    assert.is_true(other:initialize(5))
    assert.are.equal(5, assert(other:get()).post)
    assert.is_true(a:atomic_long("/sh/long/forced"):force_set(9))
    assert.are.equal("\0\0\0\0\0\0\0\9", (b:get("/sh/long/forced")))
    -- an empty node reads 0 (Curator too); 1..7 bytes are corrupt; more than 8: the first 8
    assert(b:create("/sh/long/empty", ""))
    assert.are.equal(0, assert(a:atomic_long("/sh/long/empty"):get()).post)
    assert.are.equal(1, assert(a:atomic_long("/sh/long/empty"):increment()).post)
    assert(b:create("/sh/long/bad", "abc"))
    assert_code("EDATA", pack(a:atomic_long("/sh/long/bad"):increment()))
    assert_code("EDATA", pack(a:atomic_long("/sh/long/bad"):get()))
    assert.are.equal("abc", (b:get("/sh/long/bad"))) -- untouched
    assert(b:create("/sh/long/long", "\0\0\0\0\0\0\0\2tail"))
    assert.are.equal(2, assert(a:atomic_long("/sh/long/long"):get()).post)
  end)

  it("atomic_long: 64-bit edges (wraps like Java's long under 5.3+, ERANGE beyond 2^53 without)", function()
    local a, b = connect("edge-a"), connect("edge-b")
    local al = a:atomic_long("/sh/edge")
    if shared.INT64 then
      assert.is_true(al:force_set(math.maxinteger))
      assert.are.equal("\127\255\255\255\255\255\255\255", (b:get("/sh/edge")))
      local r = assert(al:increment())
      assert.are.equal(math.maxinteger, r.pre)
      assert.are.equal(math.mininteger, r.post)
      assert.are.equal("\128\0\0\0\0\0\0\0", (b:get("/sh/edge")))
      assert.are.equal(math.mininteger, assert(al:get()).post)
      raises("expected an integer", function() al:add(0.5) end)
      raises("expected an integer", function() al:add(2 ^ 63) end)
    else
      local safe = 2 ^ 53 - 1
      assert.is_true(al:force_set(safe))
      assert.are.equal("\0\31\255\255\255\255\255\255", (b:get("/sh/edge")))
      assert.are.equal(safe, assert(al:get()).post)
      local res = pack(al:increment())
      assert_code("ERANGE", res)
      util.assert_words(res[2], { "2^53", "Lua 5.3" })
      assert.are.equal(safe, assert(al:get()).post) -- nothing written
      assert.is_true(al:force_set(-safe))
      assert.are.equal(-safe, assert(al:get()).post)
      assert(b:set("/sh/edge", "\0\32\0\0\0\0\0\0")) -- 2^53: beyond the range
      assert_code("ERANGE", pack(al:get()))
      assert(b:set("/sh/edge", "\128\0\0\0\0\0\0\0"))
      assert_code("ERANGE", pack(al:get()))
      raises("2^53", function() al:add(2 ^ 53) end)
      raises("2^53", function() al:force_set(-2 ^ 53) end)
    end
  end)

  -- `workers` coroutines on each client of cs increment `per` times (each until it succeeds);
  -- state.left counts the workers still running; `also`: more clients to drive meanwhile
  local function increments(cs, path, per, workers, opts, state, also)
    local done, fails, errors, promoted = 0, 0, {}, 0
    state = state or {}
    state.left = #cs * workers
    local function work(c)
      local al = c:atomic_long(path, opts)
      for _ = 1, per do
        local ok = false
        for _ = 1, 200 do
          local r, msg = al:increment()
          if not r then errors[#errors + 1] = msg return end
          if r.stats.promoted_tries > 0 then promoted = promoted + 1 end
          if r.succeeded then ok = true break end
          fails = fails + 1
        end
        if not ok then errors[#errors + 1] = "200 increments did not succeed" return end
      end
      done = done + 1
    end
    for _, c in ipairs(cs) do
      for _ = 1, workers do
        c:spawn(function()
          work(c)
          state.left = state.left - 1
        end)
      end
    end
    local all = {}
    for _, c in ipairs(cs) do all[#all + 1] = c end
    for _, c in ipairs(also or {}) do all[#all + 1] = c end
    assert(zklock.run(all, 180))
    assert.are.same({}, errors)
    assert.are.equal(#cs * workers, done)
    return fails, promoted
  end

  it("atomic_long: concurrent increments from three clients add up exactly", function()
    local cs = { connect("ai-1"), connect("ai-2"), connect("ai-3") }
    increments(cs, "/sh/inc", 20, 2)
    assert.are.equal(120, assert(cs[1]:atomic_long("/sh/inc"):get()).post)
  end)

  it("atomic_long: with no optimistic retries, lost races are promoted to the mutex at the lock path", function()
    local cs = { connect("pl-1"), connect("pl-2"), connect("pl-3") }
    local opts = { retry = zklock.retry.none(), lock = { path = "/sh/promo-lock", timeout = 30 } }
    -- a fourth client samples the lock path's children meanwhile: the mutex is Curator's
    -- InterProcessMutex at the lock path itself
    local d = connect("pl-watch")
    local lock_nodes, state = {}, { left = 1 }
    local nlock = 0
    d:spawn(function()
      for _ = 1, 100000 do
        if state.left == 0 then return end
        local kids = d:children("/sh/promo-lock")
        for _, k in ipairs(kids or {}) do
          if not lock_nodes[k] then lock_nodes[k] = true; nlock = nlock + 1 end
        end
        d:sleep(0.002)
      end
    end)
    local _, promoted = increments(cs, "/sh/promo", 15, 3, opts, state, { d })
    assert.are.equal(135, assert(cs[1]:atomic_long("/sh/promo"):get()).post)
    assert.is_true(promoted > 0, "no increment was promoted to the lock")
    assert.is_true(nlock > 0, "no mutex node seen under the lock path")
    for name in pairs(lock_nodes) do
      assert.is_truthy(name:match("^_c_%x+%-%x+%-%x+%-%x+%-%x+%-lock%-%d+$"), name)
    end
    assert.are.same({}, util.children(cs[1], "/sh/promo-lock") or {}) -- released
  end)

  it("atomic_long: a session expiry during increments never counts one twice", function()
    local a = connect({ identity = "se-a", session_timeout = 4 })
    local b = connect("se-b")
    local ok_n, unknown, errors = 0, 0, {}
    local running = true
    for _ = 1, 3 do
      a:spawn(function()
        local al = a:atomic_long("/sh/expiry")
        for _ = 1, 100000 do
          if not running then return end
          local r, _, code = al:increment()
          if r and r.succeeded then ok_n = ok_n + 1
          elseif r == nil then
            errors[#errors + 1] = code
            unknown = unknown + 1
            a:sleep(0.05)
          end
        end
      end)
    end
    util.drive({ a }, 0.5)
    assert(testing.expire(a, zk.hosts))
    util.drive({ a }, 2)
    running = false
    assert(zklock.run({ a }, 30))
    assert.is_true(#errors >= 1, "the expiry interrupted no increment")
    local v = assert(b:atomic_long("/sh/expiry"):get()).post
    assert.is_true(v >= ok_n and v <= ok_n + unknown,
      ("value %d, %d succeeded, %d with an unknown outcome"):format(v, ok_n, unknown))
    for _, code in ipairs(errors) do
      assert.is_truthy(({ ESESSION = true, ZCONNECTIONLOSS = true, ZSESSIONEXPIRED = true })[code], code)
    end
    -- and it works again on the new session
    local before = v
    assert.are.equal(before + 1, assert(a:atomic_long("/sh/expiry"):increment()).post)
  end)

  it("bad input to every call raises an error naming the argument", function()
    local a = connect("bad")
    raises("bad argument #1 to 'shared_count' (path", function() a:shared_count(nil) end)
    raises("bad argument #1 to 'shared_count' (path", function() a:shared_count("rel") end)
    raises("bad argument #2 to 'shared_count' (seed", function() a:shared_count("/x", 2 ^ 31) end)
    raises("bad argument #2 to 'shared_count' (seed", function() a:shared_count("/x", "1") end)
    raises("with a colon", function() a.shared_count("/x") end)
    local sc = a:shared_count("/sh/bad")
    raises("bad argument #1 to 'try_set' (value", function() sc:try_set(1.5, 0) end)
    raises("bad argument #2 to 'try_set' (version", function() sc:try_set(1, nil) end)
    raises("bad argument #2 to 'try_set' (version", function() sc:try_set(1, -1) end)
    raises("bad argument #1 to 'set' (value", function() sc:set(nil) end)
    raises("bad argument #1 to 'set' (value", function() sc:set(0 / 0) end)
    raises("bad argument #1 to 'on_change'", function() sc:on_change("f") end)
    raises("use shared_count:get", function() sc.get() end)
    raises("bad argument #1 to 'atomic_long' (path", function() a:atomic_long(5) end)
    raises("unknown option 'retries'", function() a:atomic_long("/x", { retries = 1 }) end)
    raises("option 'retry'", function() a:atomic_long("/x", { retry = 3 }) end)
    raises("option 'lock'", function() a:atomic_long("/x", { lock = 3 }) end)
    raises("needs path", function() a:atomic_long("/x", { lock = { timeout = 1 } }) end)
    raises("must differ", function() a:atomic_long("/x", { lock = "/x" }) end)
    raises("option 'timeout'", function() a:atomic_long("/x", { lock = { path = "/l", timeout = -1 } }) end)
    raises("option 'path'", function() a:atomic_long("/x", { lock = { path = "l" } }) end)
    local al = a:atomic_long("/sh/bad-long")
    raises("bad argument #1 to 'add' (delta", function() al:add("1") end)
    raises("bad argument #1 to 'add' (delta", function() al:add(nil) end)
    raises("bad argument #1 to 'subtract' (delta", function() al:subtract(0.25) end)
    raises("bad argument #1 to 'compare_and_set' (expected", function() al:compare_and_set(nil, 1) end)
    raises("bad argument #2 to 'compare_and_set' (new", function() al:compare_and_set(1, {}) end)
    raises("bad argument #1 to 'try_set' (value", function() al:try_set(true) end)
    raises("bad argument #1 to 'initialize' (value", function() al:initialize() end)
    raises("bad argument #1 to 'force_set' (value", function() al:force_set(1 / 0) end)
    raises("use atomic_long:increment", function() al.increment() end)
    -- nothing was written by any of them
    assert.is_false(a:exists("/sh/bad"))
    assert.is_false(a:exists("/sh/bad-long"))
    a:close()
    raises("closed client", function() a:shared_count("/x") end)
    raises("closed client", function() al:get() end)
    raises("closed client", function() sc:get() end)
  end)
end)
