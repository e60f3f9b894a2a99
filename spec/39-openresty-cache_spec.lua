-- A cache shared by the workers (zklock.adapters.openresty.shared_cache) in a real nginx: the
-- example examples/openresty/upstreams.conf with 4 workers (Debian's nginx-core +
-- libnginx-mod-http-lua + lua-resty-core, zklock.core from build-jit/), a real ZooKeeper. A
-- direct client changes the directory of backends; every worker must serve the new set (each
-- answer names the worker's pid: the spec polls until every live worker has answered with it).
-- Then the keeper worker is killed with SIGKILL: the set keeps being served, and a change made
-- while no worker keeps the cache, and one after, are served by every worker. The directory, made
-- a container, is emptied, reaped by the server and made again with a child: every worker serves
-- the new set (3 rounds; the keeper's cache once missed the new directory's children). Like spec/61, the
-- nginx side does not depend on busted's interpreter: run once, in the Lua 5.4 run (#lua54).
--   busted --lua=lua5.4 spec/39-openresty-cache_spec.lua
-- Skipped when nginx, the Lua module, lua-resty-core, curl or build-jit are missing, and failed
-- instead under CI=true (spec/support/deps.lua).
local zklock = require("zklock")
local testing = require("zklock.testing")
local harness = require("support.nginx.harness")
local deps = require("support.deps")
local fixture = require("support.fixture")

local ROOT = harness.ROOT
local WORKERS = 4
local SERVICES = "/services/web"
local SESSION = 3 -- s: the keeper election's session timeout: a killed keeper is replaced after it

local now = harness.now

describe("openresty shared cache #openresty #lua54 #nosan", function()
  local why = harness.unavailable(ROOT)
  if why then deps.skip(why, pending) return end

  local zk, srv, client
  local last_version = {} -- worker pid -> the newest version it served (it must never go down)
  local polls = 0
  local accept_error -- an error answer poll() accepts (besides ECONNECTING before the first publish)

  fixture.server({}, {}, function(s) zk = s end)

  setup(function()
    srv = harness.start{
      root = ROOT, workers = WORKERS, template = ROOT .. "/examples/openresty/upstreams.conf",
      vars = { ZK_HOSTS = zk.hosts, SERVICES = SERVICES, ELECTION = "/spec39/keepers", SESSION_TIMEOUT = SESSION },
    }
    client = assert(zklock.connect(zk.hosts, { identity = "spec-39" }))
    -- The directory is persistent, so the server never reaps it when a test empties it; the last
    -- test makes it a container and has it reaped and made again on purpose.
    client:create("/services", "")
    client:create(SERVICES, "")
  end)

  teardown(function()
    local log = ""
    if srv then
      log = srv:error_log()
      srv:stop()
    end
    if client then client:close() end
    for line in log:gmatch("[^\n]+") do
      if line:find("[error]", 1, true) and line:find("zklock", 1, true)
         and not line:find("does not fit in lua_shared_dict services", 1, true) then -- the last test's
        error("zklock error in the nginx log: " .. line)
      end
    end
  end)

  local function add(addr) assert(client:create(SERVICES .. "/" .. addr, "", { parents = true })) end
  local function del(addr) assert(client:delete(SERVICES .. "/" .. addr)) end

  -- 20 GETs of /upstreams, each on a new connection (reuseport spreads them over the workers)
  -- -> { { pid, version, keeper, set = "a,b" } ... }
  local function poll()
    polls = polls + 1
    local url = testing.shq(srv:url("/upstreams"))
    local urls = {}
    for i = 1, 20 do urls[i] = url end
    local out = testing.sh("curl -s --max-time 5 -H 'Connection: close' " .. table.concat(urls, " ")
      .. " 2>/dev/null") or ""
    local answers, cur = {}, nil
    for line in out:gmatch("[^\n]+") do
      local pid, v, keeper = line:match("^(%d+) (%d+) (%d+) %d+$")
      if pid then
        cur = { pid = tonumber(pid), version = tonumber(v), keeper = tonumber(keeper), list = {} }
        answers[#answers + 1] = cur
      elseif line:match("^error ") then
        -- 503 from a worker: only before the first publish (ECONNECTING), see until_all_serve
        cur = nil
        answers[#answers + 1] = { error = line, list = {} }
      elseif cur and line:match("^[%w%.%-]+:%d+$") then
        cur.list[#cur.list + 1] = line
      else
        error("unexpected answer from /upstreams: " .. line .. "\n" .. srv:log_tail(20))
      end
    end
    for _, a in ipairs(answers) do
      a.set = table.concat(a.list, ",")
      if a.error then
        assert((a.error:find("ECONNECTING", 1, true) and not next(last_version))
          or (accept_error and a.error:find(accept_error, 1, true)), "a worker answered " .. a.error)
        goto continue
      end
      local prev = last_version[a.pid]
      assert(prev == nil or a.version >= prev, ("worker %d served version %d after version %s")
        :format(a.pid, a.version, tostring(prev)))
      last_version[a.pid] = a.version
      ::continue::
    end
    return answers
  end

  local function live_workers()
    local pids = {}
    for _, w in ipairs(srv:workers()) do
      if not w.shutting_down then pids[w.pid] = true end
    end
    return pids
  end

  -- Poll until every live worker's latest answer is `want` (sorted addresses joined by ",");
  -- -> seconds it took, the answers of the last poll. Every answer meanwhile must be one of the
  -- sets in `allowed` (the set before the change, or `want`).
  local function until_all_serve(want, timeout, allowed)
    local t0 = now()
    local latest = {}
    while true do
      local answers = poll()
      for _, a in ipairs(answers) do
        if a.error then goto next_answer end
        if allowed then
          assert(allowed[a.set] or a.set == want, ("worker %d served {%s}: neither the old set nor {%s}")
            :format(a.pid, a.set, want))
        end
        latest[a.pid] = a
        ::next_answer::
      end
      local live, all = live_workers(), true
      local n = 0
      for pid in pairs(live) do
        n = n + 1
        if not (latest[pid] and latest[pid].set == want) then all = false end
      end
      if all and n == WORKERS then return now() - t0, answers end
      if now() - t0 > timeout then
        local seen = {}
        for pid in pairs(live) do
          seen[#seen + 1] = ("%d: %s"):format(pid, latest[pid] and ("{" .. latest[pid].set .. "} v"
            .. latest[pid].version) or "no answer")
        end
        error(("not every worker served {%s} within %g s (%s)\n%s"):format(want, timeout,
          table.concat(seen, "; "), srv:log_tail(30)), 2)
      end
      client:sleep(0.05)
    end
  end

  local keeper0

  it("every worker serves the directory, and every change of it, from the shared dict", function()
    add("10.0.0.1:80")
    add("10.0.0.2:80")
    local t_first = until_all_serve("10.0.0.1:80,10.0.0.2:80", 30)
    -- one keeper serves them all; it says so, the others are readers
    local answers = poll()
    keeper0 = answers[1].keeper
    for _, a in ipairs(answers) do assert.are.equal(keeper0, a.keeper) end
    assert.is_true(live_workers()[keeper0] ~= nil, "the keeper pid is no live worker")
    local times = {}
    local sets = { "10.0.0.1:80,10.0.0.2:80" }
    for round = 1, 5 do
      local before = sets[#sets]
      local addr = ("10.0.1.%d:80"):format(round)
      add(addr)
      if round % 2 == 0 then del(("10.0.1.%d:80"):format(round - 1)) end
      local names = assert(client:children(SERVICES))
      table.sort(names)
      local want = table.concat(names, ",")
      local allowed = { [before] = true }
      -- the add and the delete may be published one by one, in either order (the cache may
      -- learn of the delete from the listing that finds the new node, and add it after its read)
      if round % 2 == 0 then
        local gone = ("10.0.1.%d:80"):format(round - 1)
        local mid, mid2 = {}, {}
        for _, n in ipairs(names) do mid[#mid + 1] = n end
        mid[#mid + 1] = gone
        table.sort(mid)
        allowed[table.concat(mid, ",")] = true
        for n in before:gmatch("[^,]+") do if n ~= gone then mid2[#mid2 + 1] = n end end
        allowed[table.concat(mid2, ",")] = true
      end
      times[#times + 1] = until_all_serve(want, 10, allowed)
      sets[#sets + 1] = want
    end
    table.sort(times)
    print(("\n  [shared cache] first load on %d workers %.2f s; 5 changes seen by every worker in %.2f-%.2f s"
      .. " (%d polls of 20 requests so far)"):format(WORKERS, t_first, times[1], times[#times], polls))
    assert.is_true(times[#times] < 10)
  end)

  it("kill -9 of the keeper: the set is still served, a change meanwhile and one later reach every worker", function()
    assert(keeper0, "the first test found no keeper")
    local names = assert(client:children(SERVICES))
    table.sort(names)
    local before = table.concat(names, ",")
    until_all_serve(before, 10)
    local t0 = now()
    assert(testing.execute("kill -KILL " .. keeper0))
    -- a change while no worker keeps the cache (the dead keeper's session lives on for SESSION s)
    add("10.0.2.1:80")
    names[#names + 1] = "10.0.2.1:80"
    table.sort(names)
    local want = table.concat(names, ",")
    -- the readers keep serving the last published set meanwhile
    local served, during = 0, {}
    while now() - t0 < SESSION * 0.5 do
      for _, a in ipairs(poll()) do
        assert.are.equal(before, a.set, "a reader served another set while no keeper ran")
        served = served + 1
        during[a.pid] = true
      end
      client:sleep(0.05)
    end
    local n = 0
    for _ in pairs(during) do n = n + 1 end
    assert.is_true(served > 0 and n >= 2, "no answers while the keeper was gone")
    local took = until_all_serve(want, SESSION + 20, { [before] = true })
    local moved = now() - t0
    local answers = poll()
    local keeper1 = answers[1].keeper
    assert.are_not.equal(keeper0, keeper1)
    for _, a in ipairs(answers) do assert.are.equal(keeper1, a.keeper) end
    -- a later change, through the new keeper
    add("10.0.2.2:80")
    del(names[1])
    local after = assert(client:children(SERVICES))
    table.sort(after)
    local want2 = table.concat(after, ",")
    local mid = {}
    for _, x in ipairs(names) do if x ~= names[1] then mid[#mid + 1] = x end end
    local mid2 = { "10.0.2.2:80" }
    for _, x in ipairs(names) do mid2[#mid2 + 1] = x end
    table.sort(mid2)
    local took2 = until_all_serve(want2, 10, { [want] = true, [table.concat(mid, ",")] = true,
                                               [table.concat(mid2, ",")] = true })
    print(("\n  [shared cache] kill -9 of keeper %d: %d answers of %d workers served the old set meanwhile;"
      .. " the change made then served by all %.2f s after the kill (new keeper %d); the next change %.2f s")
      :format(keeper0, served, n, moved, keeper1, took2))
    assert.is_true(took > 0)
    assert.is_true(moved >= SESSION * 0.5, "the keeper moved before the killed one's session could expire")
  end)

  it("a node's data and stat, after a set, from every worker", function()
    local addr = "10.0.0.2:80"
    local path = SERVICES .. "/" .. addr
    local _, st0 = assert(client:get(path))
    local st = assert(client:set(path, "weight=5 zone=b"))
    local url = testing.shq(srv:url("/node?addr=" .. addr))
    local urls = {}
    for i = 1, 20 do urls[i] = url end
    local deadline, seen = now() + 10, {}
    while true do
      local out = testing.sh("curl -s --max-time 5 -H 'Connection: close' " .. table.concat(urls, " ")) or ""
      for pid, cz, mz, ver, data in out:gmatch("(%d+) (%d+) (%d+) (%d+) ([^\n]*)\n") do
        assert.are.equal(st0.czxid, tonumber(cz))
        if tonumber(ver) == st.version then
          assert.are.equal("weight=5 zone=b", data)
          assert.are.equal(st.mzxid, tonumber(mz))
          seen[tonumber(pid)] = true
        else
          assert.are.equal(st0.version, tonumber(ver)) -- the old state, not another
        end
      end
      local all = true
      for pid in pairs(live_workers()) do all = all and seen[pid] ~= nil end
      if all then break end
      assert(now() < deadline, "not every worker served the new data within 10 s\n" .. srv:log_tail(20))
      client:sleep(0.05)
    end
    local status = srv:get("/node?addr=10.9.9.9:1", 5)
    assert.are.equal(404, status)
  end)

  it("nginx -s reload: the keeper moves to a new worker, which publishes; changes reach the new workers", function()
    local names = assert(client:children(SERVICES))
    table.sort(names)
    local before = table.concat(names, ",")
    until_all_serve(before, 10)
    local old = live_workers()
    local v0 = poll()[1].version
    assert(srv:reload())
    local deadline = now() + 30
    while true do
      local fresh, stale = 0, false
      for _, w in ipairs(srv:workers()) do
        if old[w.pid] then stale = true elseif not w.shutting_down then fresh = fresh + 1 end
      end
      if fresh == WORKERS and not stale then break end
      assert(now() < deadline, "the old workers did not exit within 30 s\n" .. srv:log_tail(30))
      client:sleep(0.1)
    end
    -- the new workers read the dict the old ones left (a reload keeps it) and a new keeper
    -- among them publishes a version of its own
    add("10.0.3.1:80")
    local want = before .. ",10.0.3.1:80"
    until_all_serve(want, 10, { [before] = true })
    local answers = poll()
    assert.is_true(answers[1].version > v0)
    assert.is_nil(old[answers[1].keeper], "the keeper is an old worker")
    assert.is_true(live_workers()[answers[1].keeper] ~= nil, "the keeper is no live worker")
  end)

  it("bad input raises a clear error naming the argument", function()
    -- the argument checks come before anything touches nginx: run them here, with a stand-in ngx
    local saved_ngx, saved_sema = rawget(_G, "ngx"), package.loaded["ngx.semaphore"]
    local stub_dict = { get = function() end }
    _G.ngx = { timer = {}, shared = { svc = stub_dict }, get_phase = function() return "init" end }
    package.loaded["ngx.semaphore"] = {}
    package.loaded["zklock.adapters.openresty"] = nil
    local ok, zngx = pcall(require, "zklock.adapters.openresty")
    package.loaded["zklock.adapters.openresty"] = nil
    local cases = {
      { function() zngx.shared_cache(nil, "/s", { hosts = "h:1" }) end,
        "bad argument #1 to 'shared_cache' (dict: expected the name of a lua_shared_dict or ngx.shared.NAME, got nil" },
      { function() zngx.shared_cache("nope", "/s", { hosts = "h:1" }) end,
        "bad argument #1 to 'shared_cache' (dict: no lua_shared_dict named \"nope\" in nginx.conf)" },
      { function() zngx.shared_cache("svc", "s", { hosts = "h:1" }) end,
        "bad argument #2 to 'shared_cache' (path: expected an absolute znode path, got \"s\"" },
      { function() zngx.shared_cache("svc", "/s") end,
        "bad argument #3 to 'shared_cache' (option 'hosts' is required" },
      { function() zngx.shared_cache("svc", "/s", { hosts = "h:1", depth = -1 }) end,
        "bad argument #3 to 'shared_cache' (option 'depth': expected an integer >= 0 or math.huge, got -1" },
      { function() zngx.shared_cache("svc", "/s", { hosts = "h:1", max_nodes = 0 }) end,
        "bad argument #3 to 'shared_cache' (option 'max_nodes': expected an integer >= 1, got 0" },
      { function() zngx.shared_cache("svc", "/s", { hosts = "h:1", dept = 1 }) end,
        "bad argument #3 to 'shared_cache' (unknown option 'dept' (known: acl, data, depth, election, hosts, id,"
        .. " max_nodes, max_watch_bytes, session_timeout))" },
      { function() zngx.shared_cache("svc", "/s", { hosts = "h:1", max_watch_bytes = 0.5 }) end,
        "bad argument #3 to 'shared_cache' (option 'max_watch_bytes': expected an integer >= 1, got 0.5" },
      { function() zngx.shared_cache("svc", "/s", { hosts = "h:1", election = "x" }) end,
        "bad argument #3 to 'shared_cache' (lock path" },
      { function() zngx.shared_cache(stub_dict, "/s", { hosts = "h:1" }) end,
        "zklock: shared_cache must be called in init_worker_by_lua* (or later), not in init_by_lua*" },
      { function() zngx.cache_reader(5) end,
        "bad argument #1 to 'cache_reader' (dict: expected the name of a lua_shared_dict or ngx.shared.NAME, got 5" },
      { function() zngx.cache_reader("svc").version() end, "zklock: use cache:version(...) (with a colon)" },
    }
    local results = {}
    if ok then
      for i, c in ipairs(cases) do results[i] = { pcall(c[1]) } end
    end
    _G.ngx, package.loaded["ngx.semaphore"] = saved_ngx, saved_sema
    assert(ok, zngx)
    for i, c in ipairs(cases) do
      local r = results[i]
      assert.is_false(r[1], "case " .. i .. " did not raise")
      local msg = tostring(r[2])
      assert.is_truthy(msg:find(c[2], 1, true), ("case %d: expected %q in %q"):format(i, c[2], msg))
      -- raised at the caller (this file), not inside zklock
      assert.is_truthy(msg:find("39-openresty-cache_spec.lua:", 1, true), msg)
    end
  end)

  it("the balancer picks its peer from the shared cache", function()
    -- the only backend: this nginx itself; /via/free is proxied to /free
    for _, name in ipairs(assert(client:children(SERVICES))) do del(name) end
    local self_addr = "127.0.0.1:" .. srv.port
    add(self_addr)
    until_all_serve(self_addr, 10)
    for _ = 1, 8 do
      local status, body = srv:get("/via/free", 5)
      assert.are.equal(200, status, body)
      assert.is_truthy(body:match("^free %d+"), body)
    end
    -- no backend: 503 from the balancer
    del(self_addr)
    until_all_serve("", 10)
    local status = srv:get("/via/free", 5)
    assert.are.equal(503, status)
  end)

  it("a snapshot too large for the dict: every worker answers ERANGE until one fits again", function()
    add("10.0.8.1:80") -- (the test before emptied the directory)
    local names = assert(client:children(SERVICES))
    table.sort(names)
    local before = table.concat(names, ",")
    until_all_serve(before, 10)
    local v0 = poll()[1].version
    -- two nodes of 600,000 bytes of data: a snapshot of both does not fit in the example's 1 MB
    -- dict (one of them may be published alone)
    local big, big2 = SERVICES .. "/10.0.9.9:80", SERVICES .. "/10.0.9.8:80"
    assert(client:create(big, string.rep("x", 600000)))
    assert(client:create(big2, string.rep("y", 600000)))
    accept_error = "ERANGE"
    local deadline, errs = now() + 10, {}
    local one_big = before .. ",10.0.9.9:80"
    while true do
      for _, a in ipairs(poll()) do
        assert(a.error or a.set == before or a.set == one_big, "a worker served {" .. tostring(a.set) .. "}")
        if a.error then errs[#errs + 1] = a.error end
      end
      if #errs >= 10 then break end
      assert(now() < deadline, "no worker answered ERANGE within 10 s\n" .. srv:log_tail(20))
      client:sleep(0.05)
    end
    assert.is_truthy(errs[1]:find("does not fit in lua_shared_dict services", 1, true), errs[1])
    assert.is_truthy(srv:error_log():find("does not fit in lua_shared_dict services", 1, true))
    -- the big nodes go: the next snapshot fits, the error goes
    assert(client:delete(big))
    assert(client:delete(big2))
    until_all_serve(before, 10)
    accept_error = nil
    assert.is_true(poll()[1].version > v0 + 1)
  end)
  it("a directory the server reaped and that was made again is served (container root)", function()
    -- the directory becomes a container: deleted, then made again by a create with parents
    for _, name in ipairs(assert(client:children(SERVICES))) do del(name) end
    assert(client:delete(SERVICES))
    add("10.0.7.1:80")
    until_all_serve("10.0.7.1:80", 10)
    for round = 1, 3 do
      -- emptied: the server's container manager reaps it (every 100 ms on the shared server)
      del(("10.0.7.%d:80"):format(round))
      local t0 = now()
      while client:exists(SERVICES) do
        assert(now() - t0 < 10, "the server did not reap the emptied container " .. SERVICES)
        client:sleep(0.05)
      end
      until_all_serve("", 10)
      add(("10.0.7.%d:80"):format(round + 1))
      until_all_serve(("10.0.7.%d:80"):format(round + 1), 10)
    end
  end)
end)
