-- Metrics and lock events (zklock.metrics) against a real ZooKeeper: the numbers a sink receives
-- follow what the locks did (acquires by outcome, waits, holds, losses, requests, sessions), the
-- Prometheus exposition is well formed and adds up, lock events are one line each, and bad
-- sinks and options are refused or contained.
--   busted --lua=lua5.4 spec/66-metrics_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

-- Parse an exposition into { ["name{labels}"] = value } and check its shape as we go.
local function parse(text)
  local out, types = {}, {}
  for line in text:gmatch("[^\n]+") do
    local name, typ = line:match("^# TYPE (%S+) (%S+)$")
    if name then
      types[name] = typ
    elseif not line:match("^# HELP ") then
      local series, value = line:match("^(%S+) (%S+)$")
      assert(series, "malformed exposition line: " .. line)
      local base = series:match("^([%w_]+)")
      local fam = base:gsub("_bucket$", ""):gsub("_sum$", ""):gsub("_count$", "")
      assert(types[base] or types[fam], "series before its # TYPE line: " .. line)
      out[series] = value == "+Inf" and math.huge or assert(tonumber(value), line)
    end
  end
  return out, types
end

-- Every histogram's buckets rise and end at its _count.
local function check_histograms(text)
  local last, last_key = {}, {}
  for series, value in text:gmatch("(%S+_bucket{[^}]*}) (%S+)") do
    local key = series:gsub(',?le="[^"]*"', "")
    value = tonumber(value)
    if last_key[key] then assert(value >= last[key], "buckets not cumulative at " .. series) end
    last[key], last_key[key] = value, true
  end
  for key, value in pairs(last) do
    local count_series = key:gsub("_bucket{", "_count{"):gsub("{}$", "")
    local count = text:match(count_series:gsub("[%p]", "%%%0") .. " (%S+)")
    assert(count, "no _count for " .. key)
    assert.are.equal(tonumber(count), value, "+Inf bucket differs from _count for " .. key)
  end
end

describe("metrics", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  it("counts acquires by outcome, waits, holds, requests and sessions in a Prometheus sink", function()
    local sink = zklock.metrics.prometheus()
    local c = connect({ metrics = sink })
    local other = connect()
    local m = c:mutex("/metrics/a", { metric = "orders" })
    local N = 5
    for _ = 1, N do
      assert(m:acquire(5))
      assert(m:release())
    end
    -- a try-once acquire that finds the lock taken: outcome timeout
    local held = other:mutex("/metrics/a")
    assert(held:acquire(5))
    local ok, _, code = m:acquire(0)
    assert.is_nil(ok)
    assert.are.equal("ETIMEDOUT", code)
    assert(held:release())
    c:process()
    c:sleep(0.15) -- the request counters are read at most every 100 ms

    local L = { recipe = "mutex", name = "orders" }
    assert.are.equal(N, sink:get("zklock_acquire_total", { recipe = "mutex", name = "orders", outcome = "acquired" }))
    assert.are.equal(1, sink:get("zklock_acquire_total", { recipe = "mutex", name = "orders", outcome = "timeout" }))
    local wait = sink:get("zklock_wait_seconds", { recipe = "mutex", name = "orders", outcome = "acquired" })
    assert.are.equal(N, wait.count)
    assert.is_true(wait.sum > 0 and wait.sum < 60)
    local holds = sink:get("zklock_hold_seconds", L)
    assert.are.equal(N, holds.count)
    -- every acquisition created a node and deleted it: at least N of each
    assert.is_true(sink:get("zklock_requests_total", { kind = "create" }) >= N + 1)
    assert.is_true(sink:get("zklock_requests_total", { kind = "delete" }) >= N)
    assert.are.equal(1, sink:get("zklock_session_total", { event = "connected" }))

    local text = sink:render()
    local series, types = parse(text)
    assert.are.equal("counter", types.zklock_acquire_total)
    assert.are.equal("histogram", types.zklock_wait_seconds)
    assert.are.equal(N, series['zklock_acquire_total{name="orders",outcome="acquired",recipe="mutex"}'])
    assert.are.equal(N, series['zklock_hold_seconds_count{name="orders",recipe="mutex"}'])
    check_histograms(text)
    -- no raw path in any label by default
    assert.is_nil(text:find("/metrics/a", 1, true), "a raw path leaked into the labels:\n" .. text)
  end)

  it("observes the contenders each acquisition saw at its first listing", function()
    local sink = zklock.metrics.prometheus()
    local c = connect({ metrics = sink })
    local m = c:mutex("/metrics/contenders", { metric = "cont" })
    assert(m:acquire(5)) -- alone: 0 ahead
    local done = 0
    for _ = 1, 3 do
      c:spawn(function()
        assert(m:acquire(20))
        assert(m:release())
        done = done + 1
      end)
    end
    -- all three queue behind the holder (1, 2 and 3 nodes ahead) before it lets go
    assert.is_true(util.wait_until(function() return #util.children(c, "/metrics/contenders") == 4 end, 10, { c }))
    assert(m:release())
    assert(c:run(20))
    assert.are.equal(3, done)
    local h = sink:get("zklock_contenders", { recipe = "mutex", name = "cont" })
    assert.are.equal(4, h.count)
    assert.are.equal(0 + 1 + 2 + 3, h.sum)
    assert.matches('zklock_contenders_bucket{name="cont",recipe="mutex",le="2"} 3', sink:render(), 1, true)
  end)

  it("labels by the client's metric_label function; default name label is '-'", function()
    local sink = zklock.metrics.prometheus()
    local c = connect({ metrics = sink, metric_label = function(path, recipe)
      return recipe .. ":" .. path:gsub("/%d+$", "/:id")
    end })
    for i = 1, 3 do
      local m = c:mutex("/metrics/users/" .. i)
      assert(m:acquire(5))
      assert(m:release())
    end
    local rw = c:rwlock("/metrics/rw/7")
    assert(rw.read:acquire(5)); assert(rw.read:release())
    assert.are.equal(3, sink:get("zklock_acquire_total",
      { recipe = "mutex", name = "mutex:/metrics/users/:id", outcome = "acquired" }))
    assert.are.equal(1, sink:get("zklock_acquire_total",
      { recipe = "read", name = "read:/metrics/rw/:id", outcome = "acquired" }))

    local plain = zklock.metrics.prometheus()
    local c2 = connect({ metrics = plain })
    local s = c2:semaphore("/metrics/sem", 2)
    local leases = assert(s:acquire_many(2, 5))
    for _, l in ipairs(leases) do assert(l:release()) end
    assert.are.equal(1, plain:get("zklock_acquire_total", { recipe = "semaphore", name = "-", outcome = "acquired" }))
    assert.are.equal(2, plain:get("zklock_hold_seconds", { recipe = "semaphore", name = "-" }).count)
  end)

  it("counts SUSPENDED and LOST per hold, and the session's expiry", function()
    local sink = zklock.metrics.prometheus()
    local c = connect({ metrics = sink, session_timeout = 4 })
    local m = c:mutex("/metrics/lost", { metric = "lost" })
    assert(m:acquire(5))
    assert(testing.expire(c, zk.hosts))
    assert.is_true(util.wait_until(function() return not m:is_held() end, 20, { c }), "the hold was not lost")
    assert.are.equal(1, sink:get("zklock_loss_total", { recipe = "mutex", name = "lost", state = "LOST" }))
    assert.are.equal(1, sink:get("zklock_hold_seconds", { recipe = "mutex", name = "lost" }).count)
    local _, _, code = m:release()
    assert.are.equal("ELOST", code)
    -- reported once: the release of a lost hold adds no second hold time
    assert.are.equal(1, sink:get("zklock_hold_seconds", { recipe = "mutex", name = "lost" }).count)
    assert.is_true(util.wait_until(function()
      return (sink:get("zklock_session_total", { event = "expired" }) or 0) >= 1
    end, 20, { c }), "no expired session counted")
  end)

  it("writes one log line per lock event at the lock_events level", function()
    local lines = {}
    local c = connect({ log_level = "info", lock_events = "info",
                        log = function(line) lines[#lines + 1] = line end })
    local other = connect()
    local m = c:mutex("/metrics/events")
    assert(m:acquire(5))
    local token = m:token()
    assert(m:release())
    local h = other:mutex("/metrics/events")
    assert(h:acquire(5))
    assert.is_nil((m:acquire(0)))
    assert(h:release())
    local text = table.concat(lines, "\n")
    assert.matches("zklock info: granted mutex /metrics/events token=" .. token .. " waited=[%d.]+s", text)
    assert.matches("zklock info: released mutex /metrics/events token=" .. token .. " held=[%d.]+s", text)
    assert.matches("zklock info: timed out mutex /metrics/events waited=[%d.]+s", text)
    for _, l in ipairs(lines) do assert.is_nil(l:find("\n", 1, true)) end

    -- below the log level: no lines at all
    local quiet = {}
    local q = connect({ lock_events = "debug", log = function(line) quiet[#quiet + 1] = line end })
    local qm = q:mutex("/metrics/quiet")
    assert(qm:acquire(5)); assert(qm:release())
    for _, l in ipairs(quiet) do assert.is_nil(l:find("granted", 1, true), l) end
  end)

  it("a default sink reaches clients connected after zklock.metrics.set_default", function()
    local sink = zklock.metrics.prometheus()
    local old = zklock.metrics.set_default(sink)
    local ok, err = pcall(function()
      local c = connect()
      local m = c:mutex("/metrics/default")
      assert(m:acquire(5)); assert(m:release())
    end)
    zklock.metrics.set_default(old)
    assert(ok, err)
    assert.are.equal(1, sink:get("zklock_acquire_total", { recipe = "mutex", name = "-", outcome = "acquired" }))
  end)

  it("a sink that raises is logged once and the locks go on working", function()
    local lines = {}
    local calls = 0
    local bad = { count = function() calls = calls + 1; error("sink down") end }
    local c = connect({ metrics = bad, log = function(line) lines[#lines + 1] = line end })
    local m = c:mutex("/metrics/bad")
    for _ = 1, 3 do assert(m:acquire(5)); assert(m:release()) end
    assert.is_true(calls >= 3)
    local n = 0
    for _, l in ipairs(lines) do if l:find("metrics sink count", 1, true) then n = n + 1 end end
    assert.are.equal(1, n, table.concat(lines, "\n"))
  end)

  it("refuses bad sinks and options with the argument named", function()
    local cases = {
      { { metrics = 42 }, "option 'metrics': expected a sink" },
      { { metrics = {} }, "option 'metrics': expected a sink" },
      { { metrics = { count = "x" } }, "option 'metrics': expected a sink" },
      { { metric_label = "x" }, "option 'metric_label': expected a function" },
      { { lock_events = "loud" }, "option 'lock_events': expected one of none, error, warn, info, debug" },
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(zklock.connect, zk.hosts, case[1])
      assert.is_false(ok)
      assert.matches(case[2], err, 1, true)
      assert.matches("connect", err, 1, true)
    end
    local c = connect()
    local ok, err = pcall(c.mutex, c, "/metrics/x", { metric = 7 })
    assert.is_false(ok)
    assert.matches("option 'metric': expected a string", err, 1, true)
    ok, err = pcall(zklock.metrics.set_default, "nope")
    assert.is_false(ok)
    assert.matches("expected a sink", err, 1, true)
    ok, err = pcall(zklock.metrics.shared_dict, nil)
    assert.is_false(ok)
    assert.matches("dict: expected an ngx.shared dictionary", err, 1, true)
    assert.is_false(c:exists("/metrics/x")) -- nothing was created for the refused object
  end)
end)
