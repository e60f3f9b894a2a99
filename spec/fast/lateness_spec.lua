-- The fast tier (no ZooKeeper server): the timer lateness meter of the adapter contention tests
-- (spec/support/adapters.lua) must still fail a loop that starves its timers, whether the loop
-- computes or blocks, although it forgives the time the machine did not run this process.
--   busted --lua=lua5.4 spec/fast/lateness_spec.lua
local H = require("support.adapters")
local deps = require("support.deps")

describe("adapter timer lateness check #fast", function()
  local uv = deps.require("luv", "apt-get install lua-luv", pending)
  if not uv then return end

  -- An unrelated 20 ms timer as in the contention tests, while `starve(k)` runs from another
  -- timer every 100 ms, 4 times; returns the meter.
  local function run_with(starve)
    local tm = H.late_meter()
    local tick_ms = math.floor(H.TICK * 1000)
    local timer, bad = uv.new_timer(), uv.new_timer()
    local due
    local function on_tick()
      uv.update_time()
      tm.fire((uv.now() - due) / 1000)
      due = uv.now() + tick_ms
      tm.arm()
      timer:start(tick_ms, 0, on_tick)
    end
    uv.update_time()
    due = uv.now() + tick_ms
    tm.arm()
    timer:start(tick_ms, 0, on_tick)
    local k = 0
    bad:start(100, 100, function()
      k = k + 1
      starve(k)
      if k == 4 then bad:close(); timer:stop(); timer:close() end
    end)
    uv.run()
    return tm
  end

  -- compute for `seconds` of this process's CPU time (on a busy machine that takes longer)
  local function busy(seconds)
    local t0 = os.clock()
    while os.clock() - t0 < seconds do end
  end

  it("passes a loop that does a little work between timer runs", function()
    local tm = run_with(function() busy(0.005) end)
    -- the meter ran (about 20 ticks in 0.4 s; a process the machine starves sees fewer, which
    -- the lateness below forgives and so may this count)
    assert.is_true(tm.ticks >= 5, ("%d ticks"):format(tm.ticks))
    assert.is_true(tm.max_late < H.lateness_limit(0.5), ("%.3f s"):format(tm.max_late))
  end)

  it("fails a loop that computes for 1.2 s (CPU time) without returning to the loop", function()
    local tm = run_with(function(k) if k == 2 then busy(1.2) end end)
    assert.is_true(tm.max_late >= 1.0, ("own lateness %.3f s"):format(tm.max_late))
    -- whatever the run's length, the limit stays below that
    assert.is_false(tm.max_late < H.lateness_limit(1000))
  end)

  it("fails a loop that blocks (sleeps) for 1.2 s inside a callback", function()
    local tm = run_with(function(k) if k == 2 then os.execute("sleep 1.2") end end)
    assert.is_true(tm.max_late >= 1.0, ("own lateness %.3f s"):format(tm.max_late))
    assert.is_false(tm.max_late < H.lateness_limit(1000))
  end)
end)
