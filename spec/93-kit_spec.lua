-- The lock-test kit of zklock.testing against a real server: every network fault of the proxy
-- (testing.proxy) seen from a client, faults healing by themselves at their bound, a nemesis run
-- that logs each fault with its time and leaves everything healed, worker processes, the fenced
-- resource, eventually(), and with_server cleaning up after an error.
--   busted --lua=lua5.4 spec/93-kit_spec.lua   (~100 s on 2 cores, more when busy; the ensemble
--   test is tagged #slow)
local zklock = require("zklock")
local testing = require("zklock.testing")
local check = testing.check
local util = require("support.util")

local SESSION = 4

describe("zklock.testing kit #faults", function()
  local zk, obs

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
  end)

  teardown(function()
    util.close_all()
    util.stop_server(zk)
    testing.stop_all()
  end)

  local net, c, states
  before_each(function()
    obs = util.connect(zk.hosts, { identity = "observer" })
    net = testing.proxy(zk.hosts)
    c = util.connect(net.hosts, { session_timeout = SESSION, identity = "proxied" })
    states = util.record_session(c)
    net.pump = function(s) c:sleep(s) end
  end)

  after_each(function()
    if net then pcall(net.heal, net) end
    util.close_all()
    if net then net:stop() end
  end)

  local function wait_state(state, from, seconds)
    return testing.eventually(function() return util.index_of(states, state, from) end, seconds,
      { pump = function(s) c:sleep(s) end, what = "session state " .. state })
  end

  it("cut: the client is cut off at once and cannot reconnect until heal()", function()
    assert.truthy(c:exists("/"))
    net:cut(30)
    local i = wait_state("SUSPENDED", 1, SESSION)
    c:sleep(1)
    assert.is_nil(util.index_of(states, "CONNECTED", i), "reconnected through a cut")
    assert.are.equal("refuse", net:status().new)
    net:heal()
    wait_state("CONNECTED", i, SESSION)
    assert.truthy(c:exists("/"))
  end)

  it("blackhole: silence, no reset; requests time out; heal() brings the session back", function()
    assert.truthy(c:exists("/"))
    net:blackhole(30)
    local t0 = testing.now()
    local res = util.pack(c:exists("/", { timeout = 1 }))
    assert.are.equal("ETIMEDOUT", res[3])
    assert.is_nil(util.index_of(states, "SUSPENDED"), "a blackhole must not look like a reset")
    wait_state("SUSPENDED", 1, SESSION + 2)
    assert.is_true(testing.now() - t0 >= 1)
    net:heal()
    local i = util.index_of(states, "SUSPENDED")
    wait_state("CONNECTED", i, SESSION)
    assert.truthy(c:exists("/"))
  end)

  it("drop_replies: the server applies the request, the client never hears back", function()
    local path = "/kit-drop-" .. testing.pid
    net:drop_replies(30)
    local res = util.pack(c:create(path, "x", { timeout = 1 }))
    assert.are.equal("ETIMEDOUT", res[3])
    testing.eventually(function() return obs:exists(path) end, 5, { pump = function(s) obs:sleep(s) end })
    assert.is_true(net:status().s2c_dropped > 0)
    net:heal()
    wait_state("CONNECTED", util.index_of(states, "SUSPENDED") or 1, SESSION + 2)
    obs:delete(path)
  end)

  it("delay: every reply comes that much later; heal() removes the delay", function()
    assert.truthy(c:exists("/"))
    net:delay(400, 30)
    local t0 = testing.now()
    assert.truthy(c:exists("/"))
    assert.is_true(testing.now() - t0 >= 0.35, "not delayed")
    assert.are.equal(400, net:status().delay)
    net:heal()
    assert.are.equal(0, net:status().delay)
    assert.is_nil(util.index_of(states, "SUSPENDED"))
  end)

  it("reset: connections close once; the client reconnects by itself", function()
    assert.truthy(c:exists("/"))
    net:reset()
    local i = wait_state("SUSPENDED", 1, SESSION)
    wait_state("CONNECTED", i, SESSION)
    assert.are.equal("pass", net:status().new)
  end)

  it("blackhole_after_push: forwards until the server pushes a watch event, forwards the push, then silence "
     .. "both ways with no reset; heals by itself", function()
    local core = require("zklock.core")
    local path = "/kit-push-" .. testing.pid
    assert(obs:create(path, "a"))
    local _, _, w = c:get(path, { watch = true })
    assert.truthy(w, "no watch armed")
    net:blackhole_after_push(2)
    local st = net:status()
    assert.are.equal(1, st.armed)
    assert.are.equal(-1, st.push_ms)
    -- armed, not yet fired: replies (not pushes) pass as usual
    assert.truthy(c:exists("/", { timeout = 2 }))
    c:sleep(0.1)
    assert.are.equal("pass", net:status().new)
    assert(obs:set(path, "b"))
    -- the push arrives ...
    assert.are.equal("changed", (w:wait(2)))
    local t_event = core.now()
    c:sleep(0.1)
    st = net:status()
    assert.are.equal(1, st.push_silenced)
    assert.is_true(st.pushes >= 1)
    assert.are.equal(0, st.armed)
    assert.are.equal("blackhole", st.new)
    assert.are.equal(1, st.healing)
    assert.is_true(st.push_ms > 0 and st.push_ms <= t_event, ("push_ms %.0f, event %.0f"):format(st.push_ms, t_event))
    -- ... then nothing either way: a request goes unanswered, nothing is forwarded, nothing closed
    local res = util.pack(c:exists("/", { timeout = 0.8 }))
    assert.are.equal("ETIMEDOUT", res[3])
    local st2 = net:status()
    assert.are.equal(st.c2s, st2.c2s)
    assert.are.equal(st.s2c, st2.s2c)
    assert.is_true(st2.c2s_dropped > st.c2s_dropped, "the request was not swallowed")
    assert.are.equal(1, st2.open)
    assert.is_nil(util.index_of(states, "SUSPENDED"), "the silence looked like a reset (SUSPENDED within "
      .. (core.now() - st.push_ms) .. " ms)")
    -- heals by itself 2 s after the push: the silent connection is closed, the client reconnects
    testing.eventually(function() return net:status().new == "pass" end, 5, { pump = function(s) c:sleep(s) end })
    local healed_after = core.now() - st.push_ms
    assert.is_true(healed_after >= 1900, "healed after " .. healed_after .. " ms")
    assert.are.equal(0, net:status().healing)
    testing.eventually(function() return c:exists("/", { timeout = 1 }) end, SESSION * 2,
      { pump = function(s) c:sleep(s) end, what = "a reply after the heal" })
    obs:delete(path)
  end)

  it("blackhole_after_push: the server's close of the expired session is kept from the client too", function()
    local c1 = util.connect(net.hosts, { session_timeout = 1, identity = "short" })
    local path = "/kit-push3-" .. testing.pid
    assert(obs:create(path, "a"))
    local eph = assert(c1:create(path .. "-e", "", { ephemeral = true }))
    local _, _, w = c1:get(path, { watch = true })
    net:blackhole_after_push(30)
    assert(obs:set(path, "b"))
    assert.are.equal("changed", (w:wait(2)))
    -- the server expires c1's session (its ephemeral goes) and closes its connection
    testing.eventually(function() return obs:exists(eph) == false end, 10,
      { pump = function(s) obs:sleep(s) end, what = "the session's expiry at the server" })
    testing.eventually(function() return net:status().closes_held >= 1 end, 5,
      { pump = function(s) obs:sleep(s) end, what = "the server's close, kept back" })
    assert.are.equal("blackhole", net:status().new)
    net:heal()
    obs:delete(path)
  end)

  it("blackhole_after_push: no push, no silence; heal() disarms; bad arguments raise", function()
    net:blackhole_after_push(5)
    assert.truthy(c:exists("/", { timeout = 2 }))
    net:heal()
    assert.are.equal(0, net:status().armed)
    local path = "/kit-push2-" .. testing.pid
    assert(obs:create(path, "a"))
    local _, _, w = c:get(path, { watch = true })
    assert(obs:set(path, "b"))
    assert.are.equal("changed", (w:wait(2)))
    assert.truthy(c:exists("/", { timeout = 2 }))
    assert.are.equal(0, net:status().push_silenced)
    assert.are.equal("pass", net:status().new)
    -- as a nemesis step: armed for the step; the heal line says whether a push came
    local _, _, w2 = c:get(path, { watch = true })
    local calls, lines = 0, {}
    local nem = testing.nemesis{ seed = 1, nets = { net }, quiet = 0.2,
                                 schedule = { { at = 0.1, fault = "blackhole_after_push", seconds = 1 } },
                                 sleep = function(s)
                                   calls = calls + 1
                                   if calls == 2 then assert(obs:set(path, "c")) end   -- inside the step
                                   c:sleep(s)
                                 end,
                                 log = function(line) lines[#lines + 1] = line end }
    nem:run(1.5)
    assert.are.equal("changed", (w2:wait(0)))
    local log = table.concat(lines, "\n")
    assert.truthy(log:find("heal  blackhole_after_push (a push came: silenced)", 1, true), log)
    assert.are.equal("pass", net:status().new)
    assert.are.equal(0, net:status().armed)
    obs:delete(path)
    assert.truthy(util.error_of(net.blackhole_after_push, net):find("seconds", 1, true))
    assert.truthy(util.error_of(net.blackhole_after_push, net, 0):find("#1", 1, true))
    assert.truthy(util.error_of(net.blackhole_after_push, net, 1, -2):find("#2", 1, true))
  end)

  it("every fault is bounded: it heals by itself after its seconds", function()
    net:blackhole(1)
    assert.are.equal("blackhole", net:status().new)
    testing.eventually(function() return net:status().new == "pass" end, 5, { pump = function(s) c:sleep(s) end })
    assert.are.equal(0, net:status().healing)
    assert.truthy(c:exists("/", { timeout = SESSION }))
  end)

  it("bad arguments raise naming the argument", function()
    assert.truthy(util.error_of(net.cut, net, -1):find("seconds", 1, true))
    assert.truthy(util.error_of(net.delay, net, "x"):find("milliseconds", 1, true))
    assert.truthy(util.error_of(testing.proxy, "10.0.0.1:2181"):find("loopback", 1, true))
    assert.truthy(util.error_of(testing.proxy, 42):find("HOST:PORT", 1, true))
  end)

  it("nemesis: a seeded run logs every fault with its time and ends healed", function()
    local lines = {}
    local nem = testing.nemesis{ seed = 99, server = zk, nets = { net }, clients = { c },
                                 faults = { "pause", "reset", "blackhole", "expire", "delay" },
                                 gap = { 0.5, 1 }, duration = { 0.3, 0.8 }, quiet = 1,
                                 sleep = function(s) c:sleep(s) end,
                                 log = function(line) lines[#lines + 1] = line end }
    local planned = nem:plan(8)
    local report = nem:run(8)
    assert.is_true(report.faults <= #planned)
    assert.is_true(report.faults >= 3, report.summary)
    for i, st in ipairs(report.steps) do assert.are.equal(planned[i].fault, st.fault) end
    assert.truthy(lines[1]:find("start", 1, true))
    assert.truthy(lines[#lines]:find("end  healed", 1, true), lines[#lines])
    for _, l in ipairs(lines) do assert.truthy(l:match("^%s*%d+%.%d%d%d s  %S")) end
    assert.is_falsy(zk.paused)
    assert.is_true(zk:running())
    assert.are.equal("pass", net:status().new)
    assert.are.equal(0, net:status().delay)
    -- the proxied client works again (a fresh one if its session was expired)
    local c2 = util.connect(net.hosts, { session_timeout = SESSION })
    assert.truthy(c2:exists("/", { timeout = SESSION }))
  end)

  it("nemesis on an ensemble (with_ensemble): kill_leader, kill, pause_worker; a quorum at the end #slow", function()
    testing.with_ensemble({ n = 3 }, function(ens)
      local w = testing.worker{ code = "os.execute(\"sleep 60\")" }
      local lines = {}
      local nem = testing.nemesis{ seed = 7, ensemble = ens, workers = { w },
                                   faults = { "kill_leader", "kill", "pause_worker" },
                                   gap = { 0.5, 1 }, duration = { 1, 1.5 }, quiet = 0.5,
                                   log = function(line) lines[#lines + 1] = line end }
      local report = nem:run(12)
      assert.is_true(report.faults >= 2, table.concat(lines, "\n"))
      assert.truthy(lines[#lines]:find("end  healed", 1, true), table.concat(lines, "\n"))
      assert.is_truthy(ens:wait_quorum(30))
      for _, n in ipairs(ens.nodes) do assert.is_true(n:running()) assert.is_falsy(n.paused) end
      assert.are_not.equal("T", (testing.proc_stat(w.pid)))     -- the paused worker was resumed
      local c2 = util.connect(ens.hosts)
      assert.truthy(c2:exists("/", { timeout = 10 }))
    end)
  end)

  -- #nosan: the worker loads this build's zklock.core, which in the ASan suite is the sanitizer
  -- build, without the sanitizer runtime preloaded (workers run with LD_PRELOAD unset). It runs in
  -- the Lua 5.4 and LuaJIT suites.
  it("worker: runs a Lua script with this build, keeps its exit status and output, stops on demand #nosan", function()
    local w = testing.worker{ code = [[
      local zklock = require("zklock")
      local hosts = ...
      local c = assert(zklock.connect(hosts))
      print("connected", c:exists("/") and "yes" or "no")
      c:close()
      os.exit(7)
    ]], args = { zk.hosts } }
    assert.are.equal(7, w:wait(30))
    assert.truthy(w:output():find("connected\tyes", 1, true), w:output())
    local sleeper = testing.worker{ code = "os.execute(\"sleep 60\")" }
    assert.is_true(sleeper:alive())
    sleeper:pause()
    assert.are.equal("T", (testing.proc_stat(sleeper.pid)))
    sleeper:stop()
    assert.is_false(sleeper:alive())
    assert.truthy(util.error_of(testing.worker, { script = "/nonexistent.lua" }):find("readable", 1, true))
    assert.truthy(util.error_of(testing.worker, {}):find("exactly one", 1, true))
  end)

  it("fenced: takes rising tokens, refuses a stale one; the recorder's log passes check.fenced", function()
    local path = "/kit-fenced-" .. testing.pid .. "/db"
    local rec = check.recorder(nil, "resource")
    local w = obs
    local res = testing.fenced(w, path, { recorder = rec })
    assert.is_true(res:write(10, "a"))
    assert.is_true(res:write(10, "b"))
    assert.is_true(res:write(12, "c"))
    local res2 = util.pack(res:write(11, "late"))
    assert.are.equal("ESTALE", res2[3])
    assert.truthy(res2[2]:find("11 is older than 12", 1, true))
    assert.are.same({ "c", 12 }, { res:read() })
    assert.is_true((check.fenced(rec)))
    local evs = {}
    for _, ev in ipairs(rec.events) do evs[#evs + 1] = ev.ev end
    assert.are.same({ "accept", "accept", "accept", "reject" }, evs)
    assert.truthy(rec.events[1].f.zxid)
    assert(w:delete(path))
    -- its parent is a container: the server may have reaped it once it was empty
    local ok, msg, code = w:delete(path:match("^(.*)/"))
    assert(ok or code == "ZNONODE", msg)
  end)

  it("eventually: returns fn's values; raises with fn's last error at the timeout", function()
    local n = 0
    local v, w = testing.eventually(function() n = n + 1 return n >= 3 and "yes", "more" end, 5, 0.01)
    assert.are.same({ "yes", "more" }, { v, w })
    local msg = util.error_of(testing.eventually, function() error("not yet") end, 0.2, { what = "the thing" })
    assert.truthy(msg:find("the thing not within 0.2 s", 1, true), msg)
    assert.truthy(msg:find("not yet", 1, true), msg)
  end)

  it("with_server: stops the server, proxies and workers started inside, also when fn raises", function()
    local seen = {}
    local msg = util.error_of(testing.with_server, { tick_ms = 500 }, function(s)
      seen.server = s
      seen.net = testing.proxy(s.hosts)
      seen.worker = testing.worker{ code = "os.execute(\"sleep 60\")" }
      local cc = assert(zklock.connect(s.hosts))
      assert(cc:exists("/"))
      cc:close()
      error("boom")
    end)
    assert.truthy(msg:find("boom", 1, true))
    assert.is_false(seen.server:running())
    assert.is_false(seen.net:alive())
    assert.is_false(seen.worker:alive())
    assert.are.same({ 42 }, { testing.with_server(function(s) return s.port and 42 end) })
  end)
end)
