-- The OpenResty adapter (zklock.adapters.openresty) in a real nginx: Debian's nginx-core with
-- libnginx-mod-http-lua and lua-resty-core, zklock.core from build-jit/, 4 workers, a real
-- ZooKeeper. The nginx side does not depend on the interpreter that runs busted, so these tests
-- run once, in the Lua 5.4 run (tagged #lua54; the LuaJIT run excludes that tag).
--   busted --lua=lua5.4 spec/61-openresty_spec.lua
-- Skipped when nginx, the Lua module, lua-resty-core, curl or build-jit are missing, and failed
-- instead under CI=true (spec/support/deps.lua).
local zklock = require("zklock")
local testing = require("zklock.testing")
local harness = require("support.nginx.harness")
local deps = require("support.deps")
local fixture = require("support.fixture")

local ROOT = harness.ROOT
local LOCK = "/openresty/counter"
local WORKERS = 4

local read_file, execute = testing.read_file, testing.execute

local function lines_of(path)
  local out = {}
  for line in (read_file(path) or ""):gmatch("[^\n]+") do out[#out + 1] = line end
  return out
end

-- "<value> <pid> <waited ms> <http code> <seconds>" lines written by Server:curl_loop
local function parse_results(path)
  local res = {}
  for _, line in ipairs(lines_of(path)) do
    local value, pid, waited, code, secs = line:match("^(%d+) (%d+) (%d+)%s+(%d+) ([%d%.]+)$")
    if value then
      res[#res + 1] = { value = tonumber(value), pid = tonumber(pid), waited = tonumber(waited),
                        code = tonumber(code), secs = tonumber(secs), line = line }
    else
      res[#res + 1] = { line = line, code = tonumber(line:match("(%d+) [%d%.]+$")) }
    end
  end
  return res
end

describe("openresty adapter #openresty #lua54 #nosan", function()
  local why = harness.unavailable(ROOT)
  if why then deps.skip(why, pending) return end

  local zk, srv, client, tmp
  local counter_file

  local function counter()
    return tonumber(read_file(counter_file) or "0") or 0
  end

  -- lock nodes under LOCK (the test client drives itself while polling)
  local function nodes()
    local names, _, code = client:children(LOCK)
    if not names then
      assert(code == "ZNONODE", code)
      return {}
    end
    return names
  end

  local function wait_for(pred, timeout, what)
    local deadline = harness.now() + (timeout or 10)
    while harness.now() < deadline do
      if pred() then return true end
      client:sleep(0.02)
    end
    error("timed out waiting for " .. (what or "a condition") .. "\nnginx error log:\n" .. srv:log_tail(30), 2)
  end

  -- Start `n` background loops of `per` GETs each; returns a function that waits for them and
  -- returns the parsed results.
  local bg_seq = 0
  local function background(path, n, per, max_time)
    bg_seq = bg_seq + 1
    local files, parts = {}, {}
    for i = 1, n do
      local out = ("%s/bg-%d-%d.txt"):format(tmp, bg_seq, i)
      files[i] = out
      parts[#parts + 1] = "(" .. srv:curl_loop(path, per, out, max_time) .. ") &"
    end
    local done = ("%s/bg-%d.done"):format(tmp, bg_seq)
    assert(execute("sh -c '" .. table.concat(parts, " "):gsub("'", "'\\''") .. " wait; touch " .. done
      .. "' </dev/null >/dev/null 2>&1 &"))
    return function(timeout)
      local deadline = harness.now() + (timeout or 60)
      while not read_file(done) do
        if harness.now() > deadline then error("background requests did not finish\n" .. srv:log_tail(30), 2) end
        client:sleep(0.05)
      end
      local all = {}
      for _, f in ipairs(files) do
        for _, r in ipairs(parse_results(f)) do all[#all + 1] = r end
      end
      return all
    end
  end

  local function assert_exact(results, before, n)
    assert.are.equal(n, #results)
    local seen = {}
    for _, r in ipairs(results) do
      assert(r.code == 200 and r.value, "request failed: " .. r.line .. "\n" .. srv:log_tail(20))
      assert(not seen[r.value], "two requests saw counter value " .. tostring(r.value))
      seen[r.value] = true
    end
    for v = before + 1, before + n do assert(seen[v], "no request produced counter value " .. v) end
    assert.are.equal(before + n, counter())
  end

  fixture.server({}, {}, function(s) zk = s end)

  setup(function()
    tmp = assert(io.popen("mktemp -d /tmp/zklock-openresty-spec.XXXXXX")):read("*l")
    assert(execute("chmod 0777 '" .. tmp .. "'")) -- nginx workers run as nobody when started as root
    counter_file = tmp .. "/counter"
    srv = harness.start{
      root = ROOT, workers = WORKERS,
      vars = { ZK_HOSTS = zk.hosts, LOCK_PATH = LOCK, COUNTER = counter_file },
    }
    client = assert(zklock.connect(zk.hosts, { identity = "spec-61" }))
  end)

  teardown(function()
    local log = ""
    if srv then
      log = srv:error_log()
      srv:stop()
    end
    if client then client:close() end
    if tmp then execute("rm -rf '" .. tmp .. "'") end
    -- the adapter reports no errors (the one expected error comes from /locked_error)
    for line in log:gmatch("[^\n]+") do
      if line:find("[error]", 1, true) and line:find("zklock", 1, true)
         and not line:find("failure inside the critical section", 1, true) then
        error("zklock error in the nginx log: " .. line)
      end
    end
  end)

  it("4 clients x 25 requests over 4 workers: the counter file is exact", function()
    local before = counter()
    local t0 = harness.now()
    local results = background("/locked", 4, 25, 60)(120)
    local elapsed = harness.now() - t0
    assert_exact(results, before, 100)
    local pids = {}
    local npids = 0
    for _, r in ipairs(results) do
      if not pids[r.pid] then pids[r.pid] = true; npids = npids + 1 end
    end
    assert.is_true(npids >= 2, "all requests were served by one worker: no cross-worker exclusion tested")
    print(("\n  [openresty] 100 locked requests on %d workers in %.2f s; counter %d -> %d")
      :format(npids, elapsed, before, counter()))
    assert.are.same({}, nodes())
  end)

  it("a location without the lock answers promptly while requests wait ~2 s for the lock", function()
    local before = counter()
    local m = client:mutex(LOCK)
    assert(m:acquire(10))
    local t_hold = harness.now()
    local WAITING = 8
    local finish = background("/locked", WAITING, 1, 60)
    -- every request queued behind us (one node each)
    wait_for(function() return #nodes() == WAITING + 1 end, 10, "8 queued requests")
    local max_t, pids = 0, {}
    for _ = 1, 40 do
      local status, body, secs = srv:get("/free", 5)
      assert.are.equal(200, status)
      pids[tonumber(body:match("free (%d+)"))] = true
      if secs > max_t then max_t = secs end
    end
    assert.are.equal(before, counter()) -- nobody got in
    -- hold ~2 s in all
    local left = 2 - (harness.now() - t_hold)
    if left > 0 then client:sleep(left) end
    assert(m:release())
    local results = finish(60)
    assert_exact(results, before, WAITING)
    local min_wait, waiting_pids = math.huge, {}
    for _, r in ipairs(results) do
      if r.waited < min_wait then min_wait = r.waited end
      waiting_pids[r.pid] = true
    end
    local overlap = false
    for pid in pairs(pids) do overlap = overlap or waiting_pids[pid] ~= nil end
    assert.is_true(overlap, "no /free request went to a worker with a waiting request")
    assert.is_true(min_wait >= 1000, "requests did not wait for the held lock")
    print(("\n  [openresty] /free max latency %.1f ms (40 requests) while %d requests waited %.2f-2 s for the lock")
      :format(max_t * 1000, WAITING, min_wait / 1000))
    assert.is_true(max_t < 0.2, ("/free took %.3f s while requests waited for the lock"):format(max_t))
    assert.are.same({}, nodes())
  end)

  it("a request aborted while it waits does not keep the lock it is granted later", function()
    local before = counter()
    local m = client:mutex(LOCK)
    assert(m:acquire(10))
    -- curl gives up after 1 s: the request is aborted (lua_check_client_abort) while it waits
    local finish = background("/locked_abortable", 1, 1, 1)
    wait_for(function() return #nodes() == 2 end, 10, "the abortable request to queue")
    finish(10)
    client:sleep(0.3)
    assert(m:release()) -- the aborted request's node is next: it is granted, nobody takes it
    wait_for(function() return #nodes() == 0 end, 5, "the aborted request's node to go")
    local status, body, secs = srv:get("/locked", 10)
    assert.are.equal(200, status, body)
    assert.is_true(secs < 1, "the next request waited " .. secs .. " s")
    assert.are.equal(before + 1, counter()) -- the aborted request never ran its critical section
    assert.is_truthy(srv:error_log():find("is gone; giving back", 1, true))
  end)

  it("a request that raises inside its critical section does not keep the lock", function()
    local before = counter()
    local status = srv:get("/locked_error", 10)
    assert.are.equal(500, status)
    -- the pump finds the dead request's hold and releases it in the background
    local t0 = harness.now()
    wait_for(function() return #nodes() == 0 end, 5, "the failed request's lock node to go")
    local released_after = harness.now() - t0
    local st, body, secs = srv:get("/locked", 10)
    assert.are.equal(200, st, body)
    assert.is_true(secs < 1, "the next request waited " .. tostring(secs) .. " s")
    assert.are.equal(before + 1, counter())
    -- said in the log by whichever reaper got there first: the adapter's (per request) or the
    -- client's own (any dead owner coroutine)
    local log = srv:error_log()
    assert.is_truthy(log:find("a request ended while holding mutex " .. LOCK, 1, true)
      or log:find("mutex " .. LOCK .. " released: its owner coroutine ended", 1, true), log:sub(-2000))
    print(("\n  [openresty] lock of a failed request released %.0f ms after it failed"):format(released_after * 1000))
  end)

  it("nginx -s reload: old workers finish their waiting requests, close their sessions, leak no nodes", function()
    local function sessions()
      local cons = zk:four("cons") or ""
      local n = 0
      for _ in cons:gmatch("sid=0x") do n = n + 1 end
      return n
    end
    -- every worker has its session (the idle ones connected at start), plus ours
    wait_for(function() return sessions() == WORKERS + 1 end, 10, "one session per worker")
    local old = {}
    for _, w in ipairs(srv:workers()) do old[w.pid] = true end
    local before = counter()
    local m = client:mutex(LOCK)
    assert(m:acquire(10))
    local WAITING = 8
    local finish = background("/locked", WAITING, 1, 60)
    wait_for(function() return #nodes() == WAITING + 1 end, 10, "8 queued requests")
    local t_reload = harness.now()
    assert.is_true(srv:reload())
    -- new workers come up while the old ones keep their waiting requests
    wait_for(function()
      local fresh = 0
      for _, w in ipairs(srv:workers()) do
        if not old[w.pid] and not w.shutting_down then fresh = fresh + 1 end
      end
      return fresh == WORKERS
    end, 10, "new workers")
    assert.are.equal(WAITING + 1, #nodes()) -- still queued in the old workers
    assert(m:release())
    local results = finish(60)
    assert_exact(results, before, WAITING)
    for _, r in ipairs(results) do assert.is_true(old[r.pid], "served by a new worker?") end
    -- old workers exit once their requests are done; their sessions are closed, not expired
    wait_for(function()
      for _, w in ipairs(srv:workers()) do if old[w.pid] then return false end end
      return true
    end, 15, "old workers to exit")
    wait_for(function() return sessions() == WORKERS + 1 end, 5, "old sessions to close")
    local settle = harness.now() - t_reload
    assert.is_true(settle < 10, "sessions went away only after the session timeout")
    assert.are.same({}, nodes())
    -- the new workers serve the lock
    local status, body = srv:get("/locked", 10)
    assert.are.equal(200, status, body)
    assert.are.equal(before + WAITING + 1, counter())
    print(("\n  [openresty] reload: old workers gone and sessions closed %.2f s after HUP; no lock nodes left")
      :format(settle))
  end)
end)
