-- The judge of the loss rounds (spec/support/loss.lua, M.judge) and its bounded setup retry
-- (M.retry), on hand-made round records: an overlap is never excused without a measured gap in
-- the holder's pumps covering its loss deadline and the grant. No server.
--   busted --lua=lua5.4 spec/fast/loss_judge_spec.lua
local loss = require("support.loss")

-- a round as the holders' loop leaves it: armed at 0, the holder's deadline at 1800 (ms)
local function round(t)
  local r = { k = 1, armed_at = 0, pushed = true, push_ms = 10, deadline = 1800, stall = 0, gap = 0, rq = 0 }
  for k, v in pairs(t) do r[k] = v end
  return r
end

describe("loss rounds: the judge #fast", function()
  it("told before the grant: ok", function()
    assert.equal("ok", (loss.judge(round{ learned_at = 1800, granted_at = 2050, grant_rq = 0,
      due_pump = { t0 = 1800, t1 = 1801, rq = 0 } })))
  end)

  it("a pump past the deadline that did not report LOST: an overlap, whatever the CPU wait", function()
    local kind, why = loss.judge(round{ learned_at = 2300, granted_at = 2050, rq = 5000, missed = 1805,
      due_pump = { t0 = 1805, t1 = 1806, rq = 0 } })
    assert.equal("overlap", kind)
    assert.matches("did not report LOST", why)
  end)

  it("granted before the holder's own deadline: an overlap, even with no pump since", function()
    local kind, why = loss.judge(round{ granted_at = 1700, rq = 5000 })
    assert.equal("overlap", kind)
    assert.matches("before the holder's own loss deadline", why)
  end)

  it("granted, no deadline ever read: an overlap", function()
    assert.equal("overlap", (loss.judge(round{ deadline = false, granted_at = 2050 })))
  end)

  it("no pump between the deadline and the grant: paused", function()
    local kind, why = loss.judge(round{ learned_at = 2400, granted_at = 2050,
      due_pump = { t0 = 2390, t1 = 2400, rq = 0 }, last_before_grant = 1700 })
    assert.equal("paused", kind)
    assert.matches("not pumped from its loss deadline to the grant", why)
  end)

  it("the pump past the deadline spans the grant: paused only if its CPU wait covers the overlap", function()
    local r = { learned_at = 2100, granted_at = 2050, due_pump = { t0 = 1900, t1 = 2100, rq = 180 }, stall = 20 }
    assert.equal("paused", (loss.judge(round(r))))
    r.due_pump = { t0 = 1900, t1 = 2100, rq = 10 }
    assert.equal("overlap", (loss.judge(round(r))))
  end)

  it("a process() call blocked past BLOCK_MS fails the round", function()
    assert.equal("failed", (loss.judge(round{ learned_at = 1800, granted_at = 2050, stall = loss.BLOCK_MS + 1 })))
  end)

  it("a session lost before the fault was armed: void, unless it is an overlap", function()
    assert.equal("void", (loss.judge(round{ armed_at = false, early = true, learned_at = 500, granted_at = 700 })))
    assert.equal("overlap", (loss.judge(round{ armed_at = false, early = true, deadline = 900, granted_at = 700 })))
    -- armed, but told (at its deadline) before any push went through
    assert.equal("void", (loss.judge(round{ pushed = false, push_ms = nil, learned_at = 1800, granted_at = 2050 })))
    assert.equal("failed", (loss.judge(round{ pushed = false, push_ms = nil })))
  end)
end)

describe("loss rounds: the setup retry #fast", function()
  it("retries a timeout or a lost session, bounded, then names what failed", function()
    local n, retried = 0, 0
    assert.equal("done", loss.retry("the create", function()
      n = n + 1
      if n < 3 then return nil, "ZOPERATIONTIMEOUT: slow", "ZOPERATIONTIMEOUT" end
      return "done"
    end, 4, function() retried = retried + 1 end))
    assert.equal(3, n)
    assert.equal(2, retried)
    n = 0
    local ok, err = pcall(loss.retry, "the create", function()
      n = n + 1
      return nil, "ESESSION: gone", "ESESSION"
    end, 3)
    assert.is_false(ok)
    assert.equal(3, n)
    assert.matches("the create failed: ESESSION: gone", err, 1, true)
  end)

  it("does not retry any other failure", function()
    local n = 0
    local ok, err = pcall(loss.retry, "the create", function()
      n = n + 1
      return nil, "ZNOAUTH: no", "ZNOAUTH"
    end, 3)
    assert.is_false(ok)
    assert.equal(1, n)
    assert.matches("ZNOAUTH", err)
  end)

  it("refuses bad arguments, naming them", function()
    assert.has_error(function() loss.retry(nil, function() end, 1) end, "retry: argument 1 (what) must be a string")
    assert.has_error(function() loss.retry("x", nil, 1) end, "retry: argument 2 (fn) must be a function")
    assert.has_error(function() loss.retry("x", function() end, 0) end,
      "retry: argument 3 (tries) must be a number >= 1")
  end)
end)
