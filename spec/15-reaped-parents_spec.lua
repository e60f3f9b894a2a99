-- Lock parents and create{parents=true} parents are containers: the server reaps one as soon as
-- it is empty (every 100 ms in the test server), at any moment, also between a parent's create
-- and the child's. The caller asked for a lock or a node, not for a parent: every such ZNONODE
-- must be absorbed by making the parents again (the core does it, up to 10 rounds; the exact
-- interleavings are pinned down by the scripted tests, tests/script/test_plain.c and the mutex
-- group). Here, real reaping under churn: deep paths emptied and re-made while two clients lock
-- and create on them, and a third deletes every emptied parent every few milliseconds (a reaper
-- far faster than the server's: it hits the moment between a parent's create and the child's).
-- It used to fail about 1 acquire in 300 with ZNONODE; with a single round of parents it fails
-- here within a few hundred operations.
local util = require("support.util")
local fixture = require("support.fixture")

describe("container parents reaped under churn", function()
  local fx = fixture.server({ container_check_ms = 50 }, { own = "reaps containers every 50 ms" })

  it("never fail an acquire or a create{parents=true} with ZNONODE", function()
    local a, b, r = fx.connect("a"), fx.connect("b"), fx.connect("reaper")
    local ROUNDS, failures, done, reaped = 300, {}, 0, 0
    local function note(what, ok, msg, code)
      if not ok then failures[#failures + 1] = ("%s: %s (%s)"):format(what, tostring(msg), tostring(code)) end
    end
    a:spawn(function()
      for i = 1, ROUNDS do
        local m = a:mutex(("/reap/d%d/x%d/lock"):format(i % 5, i % 11))
        local ok, msg, code = m:acquire(5)
        note("acquire " .. i, ok, msg, code)
        if ok then assert(m:release()) end
        if i % 7 == 0 then a:sleep(0.02) end -- let the reaper see emptied parents
      end
      done = done + 1
    end)
    b:spawn(function()
      for i = 1, ROUNDS do
        local path = ("/reap/d%d/x%d/n"):format(i % 5, (i + 3) % 11)
        local made, msg, code = b:create(path, "v", { parents = true, ephemeral = true })
        note("create " .. i, made, msg, code)
        if made then assert(b:delete(made)) end
        if i % 5 == 0 then b:sleep(0.03) end
      end
      done = done + 1
    end)
    r:spawn(function()
      while done < 2 do
        for d = 0, 4 do
          for x = 0, 10 do
            if r:delete(("/reap/d%d/x%d"):format(d, x)) then reaped = reaped + 1 end
          end
          if r:delete(("/reap/d%d"):format(d)) then reaped = reaped + 1 end
        end
        r:sleep(0.005) -- a sweep every few ms: often inside the window, never in every one
      end
    end)
    assert.is_true(util.drive_until({ a, b, r }, function() return done == 2 end, 120))
    assert.are.same({}, failures)
    assert.is_true(reaped > ROUNDS / 10, "the reaper deleted only " .. reaped .. " parents: the test did not test")
    -- without parents, a missing parent stays the caller's ZNONODE
    local created, m, code = b:create("/reap/none/n", "x")
    assert.is_nil(created)
    assert.are.equal("ZNONODE", code, m)
  end)

  it("concurrent first acquires on a new path share one batch of parents, also under reaping", function()
    local a, r = fx.connect("share-a"), fx.connect("share-reaper")
    -- quiet: N waiters on a new path (3 parents and the lock dir) make N node creates that meet
    -- ZNONODE, one batch of 4 parents, N creates again (each its own batch: N * 6 creates)
    local N, failures, done = 200, {}, 0
    local before = a:stats().creates
    for _ = 1, N do
      a:spawn(function()
        local m = a:mutex("/share/p/q/lock")
        local ok, msg, code = m:acquire(30)
        if ok then assert(m:release()) else failures[#failures + 1] = tostring(msg) .. " " .. tostring(code) end
        done = done + 1
      end)
    end
    assert.is_true(util.drive_until({ a }, function() return done == N end, 60))
    assert.are.same({}, failures)
    local creates = a:stats().creates - before
    assert.is_true(creates <= 2 * N + 2 * 4, ("%d creates for %d first acquires"):format(creates, N))
    -- waves of waiters on parents the reaper deletes whenever they are empty
    -- at least WAVES waves, and more (at most MAX_WAVES) until the reaper has deleted more than
    -- WAVES parents: on a busy machine the reaper gets fewer turns per wave
    local WAVES, MAX_WAVES, W, stop, reaped = 30, 150, 20, false, 0
    done = 0
    a:spawn(function()
      for wave = 1, MAX_WAVES do
        if wave > WAVES and reaped > WAVES then break end
        local left = W
        for _ = 1, W do
          a:spawn(function()
            local m = a:mutex(("/share/w%d/x/lock"):format(wave % 3))
            local ok, msg, code = m:acquire(10)
            if ok then assert(m:release()) else failures[#failures + 1] = tostring(msg) .. " " .. tostring(code) end
            left = left - 1
          end)
        end
        for _ = 1, 2000 do
          if left == 0 then break end
          a:sleep(0.005)
        end
        a:sleep(0.01)
      end
      stop = true
    end)
    r:spawn(function()
      while not stop do
        for w = 0, 2 do
          if r:delete(("/share/w%d/x/lock"):format(w)) then reaped = reaped + 1 end
          if r:delete(("/share/w%d/x"):format(w)) then reaped = reaped + 1 end
          if r:delete(("/share/w%d"):format(w)) then reaped = reaped + 1 end
        end
        r:sleep(0.002)
      end
    end)
    assert.is_true(util.drive_until({ a, r }, function() return stop end, 120))
    assert.are.same({}, failures)
    assert.is_true(reaped > WAVES, "the reaper deleted only " .. reaped .. " parents: the test did not test")
  end)
end)
