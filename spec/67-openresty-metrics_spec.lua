-- The OpenResty example's /metrics (examples/openresty: nginx.conf and app.lua as users copy
-- them) in a real nginx with 2 workers and a real ZooKeeper: the lock metrics of both workers go
-- to one lua_shared_dict, so a scrape answered by either worker counts every request.
--   busted --lua=lua5.4 spec/67-openresty-metrics_spec.lua
-- Skipped when nginx, the Lua module, lua-resty-core, curl or build-jit are missing, and failed
-- instead under CI=true (spec/support/deps.lua).
local testing = require("zklock.testing")
local harness = require("support.nginx.harness")
local deps = require("support.deps")
local fixture = require("support.fixture")

local ROOT = harness.ROOT

local function scrape(srv)
  local status, body = srv:get("/metrics", 10)
  assert.are.equal(200, status, body)
  local series = {}
  for line in body:gmatch("[^\n]+") do
    if not line:match("^#") then
      local name, value = line:match("^(%S+) (%S+)$")
      assert(name, "malformed exposition line: " .. line)
      series[name] = tonumber(value) or (value == "+Inf" and math.huge)
    end
  end
  return series, body
end

describe("openresty example /metrics #openresty #lua54 #nosan", function()
  local why = harness.unavailable(ROOT)
  if why then deps.skip(why, pending) return end

  local zk, srv
  fixture.server({}, {}, function(s) zk = s end)
  setup(function()
    srv = harness.start{ root = ROOT, template = ROOT .. "/examples/openresty/nginx.conf",
                         vars = { ZK_HOSTS = zk.hosts }, ready_path = "/hello" }
    -- the example's counter file lives in the prefix; workers run as nobody when started as root
    assert(testing.execute("chmod 0777 " .. testing.shq(srv.dir)))
  end)
  teardown(function()
    if srv then srv:stop() end
  end)

  it("counts every worker's acquisitions in one exposition", function()
    local N = 24
    local out = os.tmpname()
    -- N concurrent requests, so both workers take the lock
    assert(testing.execute(("for i in $(seq %d); do curl -s --max-time 60 %s >>%s & done; wait")
      :format(N, srv:url("/counter"), out)))
    local body = testing.read_file(out) or ""
    os.remove(out)
    local pids, answered = {}, 0
    for pid in body:gmatch("worker (%d+)") do pids[pid] = true; answered = answered + 1 end
    assert.are.equal(N, answered, body)

    local key = 'zklock_acquire_total{name="counter",outcome="acquired",recipe="mutex"}'
    local series, text
    -- every answer came after its release, so the numbers are in; two scrapes, either worker
    for _ = 1, 2 do
      series, text = scrape(srv)
      assert.are.equal(N, series[key], text)
      assert.are.equal(N, series['zklock_hold_seconds_count{name="counter",recipe="mutex"}'], text)
      local inf = 'zklock_wait_seconds_bucket{name="counter",outcome="acquired",recipe="mutex",le="+Inf"}'
      assert.are.equal(N, series[inf], text)
    end
    assert.matches("# TYPE zklock_wait_seconds histogram", text, 1, true)
    assert.is_nil(text:find("/zklock-examples", 1, true), "a raw path in the labels:\n" .. text)
    -- request counters are flushed by each worker's pump within ~100 ms of its next round
    local deadline = testing.now() + 20
    local creates = 0
    while testing.now() < deadline do
      series = scrape(srv)
      creates = series['zklock_requests_total{kind="create"}'] or 0
      if creates >= N then break end
      testing.sleep(0.2)
    end
    assert.is_true(creates >= N, ("creates counted: %d, expected >= %d"):format(creates, N))
    local nworkers = 0
    for _ in pairs(pids) do nworkers = nworkers + 1 end
    print(("\n  [metrics] %d requests over %d worker(s), %d acquisitions in one scrape")
      :format(N, nworkers, series[key]))
  end)
end)
