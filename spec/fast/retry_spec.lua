-- The fast tier (no ZooKeeper server): retry policies and the retry loop of zklock.retry, with a
-- fake clock and a fake sleep.
--   busted --lua=lua5.4 spec/fast/retry_spec.lua
local retry = require("zklock.retry")

-- A fake clock in ms: sleep(s) advances it; attempts may advance it too.
local function fake_clock()
  local t = { ms = 1000, slept = {} }
  function t.now() return t.ms end
  function t.sleep(s) t.slept[#t.slept + 1] = s; t.ms = t.ms + s * 1000 end
  return t
end

-- An attempt function that fails with the given codes in turn, then succeeds.
local function attempts(codes, clock, cost_ms)
  local a = { n = 0, lefts = {} }
  function a.fn(left)
    a.n = a.n + 1
    a.lefts[a.n] = left
    if clock and cost_ms then clock.ms = clock.ms + cost_ms end
    local code = codes[a.n]
    if code then return nil, code .. ": failed", code end
    return "ok"
  end
  return a
end

describe("retry policies #fast", function()
  it("none() never retries", function()
    local p = retry.none()
    assert.is_nil(p(1, "ESESSION"))
  end)

  it("fixed{} waits `delay` for `attempts` retries (defaults 0.5 s, 3)", function()
    local p = retry.fixed()
    assert.are.same({ 0.5, 0.5, 0.5 }, { p(1), p(2), p(3) })
    assert.is_nil(p(4))
    p = retry.fixed{ delay = 0.2, attempts = 1 }
    assert.are.equal(0.2, p(1))
    assert.is_nil(p(2))
    p = retry.fixed{ delay = 0, attempts = 0 }
    assert.is_nil(p(1))
  end)

  it("exponential{} doubles from base up to max, stops after `attempts`; jitter only shortens", function()
    local p = retry.exponential{ base = 0.1, max = 0.5, attempts = 5, jitter = false }
    assert.are.same({ 0.1, 0.2, 0.4, 0.5, 0.5 }, { p(1), p(2), p(3), p(4), p(5) })
    assert.is_nil(p(6))
    local j = retry.exponential{ base = 0.1, max = 5, attempts = 4 }
    for _ = 1, 50 do
      for n = 1, 4 do
        local d, full = j(n), 0.1 * 2 ^ (n - 1)
        assert.is_true(d <= full and d >= full / 2, ("attempt %d: %s s outside [%s, %s]"):format(n, d, full / 2, full))
      end
    end
  end)

  it("policies reject bad options, naming the function and the option", function()
    local function msg(f, o) local ok, e = pcall(f, o); assert.is_false(ok); return tostring(e) end
    assert.truthy(msg(retry.fixed, { delay = -1 }):find("bad argument #1 to 'fixed'", 1, true))
    assert.truthy(msg(retry.fixed, { dealy = 1 }):find("unknown option 'dealy'", 1, true))
    assert.truthy(msg(retry.exponential, { base = 0 }):find("option 'base'", 1, true))
    assert.truthy(msg(retry.exponential, { jitter = "no" }):find("option 'jitter'", 1, true))
    assert.truthy(msg(retry.exponential, "fast"):find("expected a table", 1, true))
  end)

  it("retryable(): session and connection failures only, never a timeout, cancel or close", function()
    for _, code in ipairs({ "ESESSION", "ZCONNECTIONLOSS", "ZOPERATIONTIMEOUT", "ZRUNTIMEINCONSISTENCY",
                            "ZSESSIONEXPIRED", "ZSESSIONMOVED" }) do
      assert.is_true(retry.retryable(code), code)
    end
    for _, code in ipairs({ "ETIMEDOUT", "ECANCELED", "ECLOSED", "ELOST", "ZNOAUTH", "ZNONODE", "EDEADLK" }) do
      assert.is_false(retry.retryable(code), code)
    end
  end)

  it("option() accepts a function or nothing and rejects anything else, naming the argument", function()
    assert.is_nil(retry.option("acquire", 2, nil))
    local p = retry.none()
    assert.are.equal(p, retry.option("acquire", 2, { retry = p }))
    local ok, err = pcall(retry.option, "acquire", 2, { retry = 3 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("bad argument #2 to 'acquire'", 1, true), err)
    ok, err = pcall(retry.option, "acquire", 2, { retyr = p })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("unknown option 'retyr'", 1, true), err)
  end)
end)

describe("retry.run #fast", function()
  it("retries retryable failures with the policy's delays until one succeeds", function()
    local clock = fake_clock()
    local a = attempts({ "ESESSION", "ZCONNECTIONLOSS" }, clock)
    local r = { retry.run(retry.fixed{ delay = 0.25, attempts = 5 }, nil, clock.now, clock.sleep, a.fn) }
    assert.are.same({ "ok" }, r)
    assert.are.equal(3, a.n)
    assert.are.same({ 0.25, 0.25 }, clock.slept)
  end)

  it("returns a non-retryable failure at once, with all its values", function()
    local clock = fake_clock()
    local a = attempts({ "ETIMEDOUT" }, clock)
    local r = { retry.run(retry.fixed{ delay = 0.25 }, 5, clock.now, clock.sleep, a.fn) }
    assert.are.same({ nil, "ETIMEDOUT: failed", "ETIMEDOUT" }, r)
    assert.are.equal(1, a.n)
    assert.are.same({}, clock.slept)
  end)

  it("gives up when the policy does, returning the last failure", function()
    local clock = fake_clock()
    local a = attempts({ "ESESSION", "ESESSION", "ESESSION", "ESESSION" }, clock)
    local r = { retry.run(retry.fixed{ delay = 0.1, attempts = 2 }, nil, clock.now, clock.sleep, a.fn) }
    assert.are.same({ nil, "ESESSION: failed", "ESESSION" }, r)
    assert.are.equal(3, a.n)
  end)

  it("keeps every attempt within the timeout: each gets what is left, no retry sleep reaches the deadline", function()
    local clock = fake_clock()
    local a = attempts({ "ESESSION", "ESESSION", "ESESSION", "ESESSION" }, clock, 400) -- each attempt takes 0.4 s
    local r = { retry.run(retry.fixed{ delay = 0.5, attempts = 10 }, 2, clock.now, clock.sleep, a.fn) }
    -- t = 0.4 fail, sleep to 0.9, 1.3 fail, sleep to 1.8, 2.2 fail: a 0.5 s delay would pass 2 s
    assert.are.same({ nil, "ESESSION: failed", "ESESSION" }, r)
    assert.are.equal(3, a.n)
    assert.are.equal(2, a.lefts[1])
    assert.is_true(math.abs(a.lefts[2] - 1.1) < 1e-9, "second attempt got " .. a.lefts[2] .. " s")
    assert.is_true(math.abs(a.lefts[3] - 0.2) < 1e-9, "third attempt got " .. a.lefts[3] .. " s")
    assert.are.same({ 0.5, 0.5 }, clock.slept)
  end)

  it("try-once (timeout 0) is one attempt even with a policy; no policy means one attempt", function()
    local clock = fake_clock()
    local a = attempts({ "ESESSION" }, clock)
    assert.are.equal("ESESSION", select(3, retry.run(retry.fixed{ delay = 0 }, 0, clock.now, clock.sleep, a.fn)))
    assert.are.same({ 0 }, a.lefts)
    local b = attempts({ "ESESSION" }, clock)
    assert.is_nil((retry.run(nil, nil, clock.now, clock.sleep, b.fn)))
    assert.are.equal(1, b.n)
  end)

  it("a policy returning something other than a number >= 0 ends the retries", function()
    for _, bad in ipairs({ -1, 0 / 0, "1", true }) do
      local clock = fake_clock()
      local a = attempts({ "ESESSION", "ESESSION" }, clock)
      local r = { retry.run(function() return bad end, nil, clock.now, clock.sleep, a.fn) }
      assert.are.equal("ESESSION", r[3])
      assert.are.equal(1, a.n)
    end
  end)
end)
