-- The kit's partitions between ensemble members (testing.ensemble{ partitions = true }), on a real
-- three-node ZooKeeper 3.8 ensemble: every member-to-member connection passes a kit link, the
-- isolated leader stops serving while the other two elect a new one, a client that sees only the
-- isolated member is SUSPENDED and cannot write, heal() brings it back as a follower with the
-- data written meanwhile, a mutex taken through the majority side stays exclusive across the
-- partition (check.mutex on the hold intervals), the nemesis's partition faults replay from
-- their seed and end healed, a link's election route rewrites the handshake without losing the
-- bytes of a sender that closes at once, and bad arguments raise naming the argument.
-- #lua54: the ensemble tests run in the Lua 5.4 suites only (like spec 85-faults-ensemble).
--   busted --lua=lua5.4 spec/95-kit-partitions_spec.lua      (~100-200 s on 2 busy cores)
--   busted --lua=luajit --run=luajit --exclude-tags= spec/95-kit-partitions_spec.lua
-- Every loop is bounded; the ensemble and its links are stopped in teardown, also on failure, and
-- the last test checks that no process is left in the ensemble's temp dir.
local testing = require("zklock.testing")
local check = testing.check
local util = require("support.util")

local SESSION = 4

-- every socket inode a process holds
local function socket_inodes(pid)
  local out = {}
  local listing = testing.sh(("ls -l /proc/%d/fd 2>/dev/null"):format(pid))
  for inode in listing:gmatch("socket:%[(%d+)%]") do out[inode] = true end
  return out
end

-- remote ports of the established TCP connections among `inodes`
local function remote_ports(inodes)
  local ports = {}
  local s = (testing.read_file("/proc/net/tcp") or "") .. (testing.read_file("/proc/net/tcp6") or "")
  for line in s:gmatch("[^\n]+") do
    local f = {}
    for w in line:gmatch("%S+") do f[#f + 1] = w end
    -- sl local rem st tx:rx tr:when retrnsmt uid timeout inode
    if f[4] == "01" and inodes[f[10]] then
      ports[#ports + 1] = tonumber(f[3]:match(":(%x+)$"), 16)
    end
  end
  return ports
end

-- "server.j=127.0.0.1:Q:E" lines of a member's zoo.cfg -> { [j] = { Q, E } }
local function view_of(node)
  local v = {}
  for j, q, e in (testing.read_file(node.cfg) or ""):gmatch("server%.(%d+)=127%.0%.0%.1:(%d+):(%d+)") do
    v[tonumber(j)] = { tonumber(q), tonumber(e) }
  end
  return v
end

local function modes(ens)
  local m = {}
  for i, node in ipairs(ens.nodes) do m[i] = tostring((node:mode(2))) end
  return table.concat(m, " ")
end

describe("zklock.testing partitions between ensemble members #faults #lua54", function()
  local ens

  setup(function()
    ens = testing.ensemble{ n = 3, partitions = true, tick_ms = 500, min_session_ms = 1000, timeout = 60 }
  end)

  teardown(function()
    util.close_all()
    if ens then ens:stop() end
  end)

  after_each(function()
    util.close_all()
    if ens then
      ens:heal()
      assert(ens:wait_quorum(60))
    end
  end)

  -- member-to-member connections that bypass the links: a JVM's established socket whose remote
  -- port is another member's real quorum or election port
  local function direct_connections()
    local real, direct = {}, {}
    for i, node in ipairs(ens.nodes) do real[i] = view_of(node)[i] end
    for i, node in ipairs(ens.nodes) do
      for _, port in ipairs(remote_ports(socket_inodes(node.pid))) do
        for j = 1, #ens.nodes do
          if j ~= i and (port == real[j][1] or port == real[j][2]) then
            direct[#direct + 1] = ("member %d -> member %d's port %d"):format(i, j, port)
          end
        end
      end
    end
    return direct
  end

  it("every connection between members passes a link, also after a member with the lowest id rejoins", function()
    assert.are.equal(3, #ens.nodes)
    for i, node in ipairs(ens.nodes) do
      local v = view_of(node)
      for j = 1, 3 do
        if j ~= i then
          -- member i names link i -> j for j, not j's own ports
          assert.are.same({ ens.links[i][j].ports[1], ens.links[i][j].ports[2] }, v[j])
        end
      end
    end
    -- the election connections are up once a quorum serves; look at each JVM's sockets
    assert.are.same({}, direct_connections())
    -- and the links carry traffic: each pair has an open connection through one of its links
    for i = 1, 3 do
      for j = i + 1, 3 do
        local open = ens.links[i][j]:status().open + ens.links[j][i]:status().open
        assert.is_true(open >= 1, ("no open connection between members %d and %d"):format(i, j))
      end
    end
    -- member 1, cut off and healed, opens its election connections to 2 and 3 itself; each of them
    -- closes it and connects back to the address in member 1's handshake (the case the links'
    -- handshake rewrite exists for)
    assert(ens:isolate(1, 120))
    testing.eventually(function() return not ens.nodes[1]:mode(2) end, 60, { what = "member 1 out of service" })
    assert(ens:heal())
    assert.is_truthy(ens:wait_quorum(60), modes(ens))
    testing.sleep(1)
    assert.are.same({}, direct_connections())
  end)

  it("isolate_leader: the others elect a leader, the isolated one stops serving; heal() brings it back with the data",
    function()
    local leader = assert(ens:leader(30))
    local lone = util.connect(ens.nodes[leader].hosts, { session_timeout = SESSION, identity = "lone" })
    local lone_states = util.record_session(lone)
    local t0 = testing.now()
    local old = assert(ens:isolate_leader({ seconds = 120 }))
    assert.are.equal(leader, old)
    assert.are.same({ { old }, (function()
      local rest = {}
      for i = 1, 3 do if i ~= old then rest[#rest + 1] = i end end
      return rest
    end)() }, ens.groups)
    -- a new leader among the other two, and the isolated member no longer serving
    local new = testing.eventually(function()
      local i = ens:leader(1)
      if i and i ~= old and not ens.nodes[old]:mode(2) then return i end
    end, 60, { what = "a new leader while member " .. old .. " is isolated", pump = function(sec) lone:sleep(sec) end })
    local t_elect = testing.now() - t0
    assert.are_not.equal(old, new)
    assert.is_nil((ens.nodes[old]:mode(2)))
    -- the client that sees only the isolated member is SUSPENDED, and a write fails (after a
    -- session timeout without a server the client also assumes its session EXPIRED: that may
    -- follow, a CONNECTED may not)
    assert.is_truthy(util.drive_until({ lone }, function() return util.index_of(lone_states, "SUSPENDED") end, 30),
      table.concat(lone_states, ","))
    assert.are.equal("SUSPENDED", lone_states[1], table.concat(lone_states, ","))
    local ok = lone:create("/kit-partition-lone", "x", { timeout = 2 })
    assert.is_nil(ok)
    assert.is_nil(util.index_of(lone_states, "CONNECTED", util.index_of(lone_states, "SUSPENDED")))
    -- a write through the majority
    local rest = {}
    for i = 1, 3 do if i ~= old then rest[#rest + 1] = ens.nodes[i].hosts end end
    local c = util.connect(table.concat(rest, ","), { session_timeout = SESSION, identity = "majority" })
    local path = "/kit-partition-" .. math.floor(testing.now() * 1000)
    assert(c:create(path, "written while isolated"))
    -- still isolated: the old leader has not come back on its own
    assert.is_nil((ens.nodes[old]:mode(2)))
    -- heal: it rejoins as a follower and has the data
    local t1 = testing.now()
    assert.is_true(ens:heal())
    assert.is_nil(ens.groups)
    assert.is_truthy(ens:wait_quorum(60), modes(ens))
    local t_heal = testing.now() - t1
    assert.are.equal("follower", ens.nodes[old]:mode(2))
    local direct = util.connect(ens.nodes[old].hosts, { session_timeout = SESSION, identity = "rejoined" })
    local data = testing.eventually(function() return (direct:get(path, { timeout = 5 })) end, 30,
      { what = "the data written meanwhile, read on the rejoined member" })
    assert.are.equal("written while isolated", data)
    -- the lone client's own writes never happened
    assert.is_falsy((direct:exists("/kit-partition-lone", { timeout = 5 })))
    print(("\n  isolate_leader: member %d isolated, member %d elected after %.1f s; healed in %.1f s")
      :format(old, new, t_elect, t_heal))
  end)

  it("a mutex taken through the majority side stays exclusive across the partition (check.mutex)", function()
    local victim = assert(ens:leader(30))
    local rest = {}
    for i = 1, 3 do if i ~= victim then rest[#rest + 1] = ens.nodes[i].hosts end end
    local major = table.concat(rest, ",")
    local path = "/kit-partition-mutex-" .. math.floor(testing.now() * 1000)
    local rec = check.recorder(nil, "all")
    -- the holder at the start sees only the member that will be isolated
    local lone = util.connect(ens.nodes[victim].hosts, { session_timeout = SESSION, identity = "lone" })
    local lm = lone:mutex(path)
    local lone_events = {}
    local held = true
    lm:on_lost(function(state)
      lone_events[#lone_events + 1] = state
      if held and (state == "SUSPENDED" or state == "LOST") then
        held = false
        rec:release(path, { id = "lone" })   -- the application stops acting as holder here
      end
    end)
    assert(lm:acquire(10))
    rec:acquire(path, { id = "lone" })
    -- two clients on the majority side, two coroutines each, taking turns for a bounded time
    local a = util.connect(major, { session_timeout = SESSION, identity = "a" })
    local b = util.connect(major, { session_timeout = SESSION, identity = "b" })
    local grants, failures = 0, {}
    -- the workers run until 8 s after the first grant, at most 60 s in all (re-election and the lone
    -- session's expiry come first: on a busy machine that alone has taken close to 30 s)
    local stop_at = testing.now() + 60
    for k, c in ipairs({ a, b, a, b }) do
      local m = c:mutex(path)
      local id = "w" .. k
      local mine = false
      m:on_lost(function(state)
        if mine and (state == "SUSPENDED" or state == "LOST") then
          mine = false
          rec:release(path, { id = id, interrupted = 1 })
        end
      end)
      c:spawn(function()
        for _ = 1, 1000 do
          if testing.now() > stop_at then return end
          local got, err, code = m:acquire(3)
          if got then
            mine = true
            rec:acquire(path, { id = id })
            grants = grants + 1
            if grants == 1 then stop_at = math.min(stop_at, testing.now() + 8) end
            c:sleep(0.05 + 0.05 * (k % 3))
            if mine then
              mine = false
              rec:release(path, { id = id })
            end
            pcall(m.release, m)           -- also after SUSPENDED (the hold may live on)
          elseif code ~= "ETIMEDOUT" then
            failures[#failures + 1] = tostring(err)
            c:sleep(0.2)
          end
          c:sleep(0.02)
        end
      end)
    end
    -- isolate the holder's member while the workers queue behind it
    util.drive({ a, b, lone }, 1)
    assert.are.equal(0, grants)
    assert(ens:isolate(victim, { seconds = 120 }))
    local t0 = testing.now()
    -- the holder hears SUSPENDED; the majority gets the lock only after its session is gone
    assert.is_truthy(util.drive_until({ a, b, lone }, function() return grants > 0 end, 55),
      "the majority side never got the lock")
    local t_grant = testing.now() - t0
    assert.is_truthy(util.index_of(lone_events, "SUSPENDED"), table.concat(lone_events, ","))
    util.drive({ a, b, lone }, 4)
    assert(ens:heal())
    -- run out the workers (bounded by stop_at), the lone client hears LOST after the heal
    local ok = require("zklock").run({ a, b }, 60)
    assert.is_true(ok)
    util.drive_until({ lone }, function() return util.index_of(lone_events, "LOST") ~= nil end, 30)
    assert.is_truthy(util.index_of(lone_events, "LOST"), table.concat(lone_events, ","))
    assert.is_false(lm:is_held())
    local h = check.load(rec)
    local mok, msg = check.mutex(h)
    assert.is_true(mok, msg)
    assert.is_true(grants >= 5, "grants " .. grants)
    print(("\n  mutex: holder's member %d isolated; majority granted after %.1f s; %d grants, %d holds checked, "
      .. "%d failed acquires")
      :format(victim, t_grant, grants, select(2, check.mutex(h)), #failures))
  end)

  it("nemesis partition faults: the same seed plans the same schedule; a run logs them and ends healed", function()
    local function plan(seed)
      local nem = testing.nemesis{ seed = seed, ensemble = ens, faults = { "partition", "isolate_leader" },
                                   gap = { 0.5, 1 }, duration = { 2, 3 }, quiet = 1 }
      return nem:plan(60)
    end
    local p1, p2, p3 = plan(11), plan(11), plan(12)
    assert.are.same(p1, p2)
    assert.are_not.same(p1, p3)
    local kinds = {}
    for _, st in ipairs(p1) do
      kinds[st.fault] = true
      if st.fault == "partition" then
        assert.are.equal(2, #st.groups)
        assert.are.equal(1, #st.groups[1])          -- a minority of one in three
        assert.are.equal(st.target, st.groups[1][1])
        assert.are.equal(2, #st.groups[2])
      end
    end
    assert.is_true(kinds.partition and kinds.isolate_leader)
    -- the default mix of an ensemble with links includes them
    local default = testing.nemesis{ seed = 1, ensemble = ens }
    local names = {}
    for _, m in ipairs(default.mix) do names[m.name] = true end
    assert.is_true(names.partition and names.isolate_leader)
    -- a short run: each fault applied, logged with its time, healed
    local lines = {}
    local nem = testing.nemesis{ seed = 11, ensemble = ens, faults = { "partition", "isolate_leader" },
                                 gap = { 0.5, 1 }, duration = { 2, 3 }, quiet = 1,
                                 log = function(line) lines[#lines + 1] = line end }
    local t0 = testing.now()
    local report = nem:run(12)
    local took = testing.now() - t0
    local log = table.concat(lines, "\n")
    assert.is_true(report.faults >= 1, log)
    for i, st in ipairs(report.steps) do assert.are.equal(p1[i].fault, st.fault, log) end
    assert.truthy(lines[#lines]:find("end  healed", 1, true), log)
    assert.truthy(log:find("partition  {%d} | {%d,%d} for") or log:find("isolate_leader  leader node %d"), log)
    assert.is_nil(ens.groups)
    for i = 1, 3 do
      for j = 1, 3 do
        if i ~= j then assert.are.equal("pass", ens.links[i][j]:status().new) end
      end
    end
    assert.is_truthy(ens:wait_quorum(60), modes(ens))
    print(("\n  nemesis: %s in %.1f s\n%s"):format(report.summary, took, log))
  end)

  it("a link's election route rewrites the handshake's address and delivers what a sender wrote before closing",
    function()
    -- a python3 listener stands in for a member; the sender writes a handshake and closes at once,
    -- as a member does when it expects the other one to connect back
    local dir = testing.sh("mktemp -d"):gsub("%s+$", "")
    local port = testing.free_ports(1)[1]
    local link = testing.proxy("127.0.0.1:" .. port, { routes = { { target = "127.0.0.1:" .. port,
                                                                     hello = "127.0.0.1:4242" } } })
    local ok, err = pcall(function()
      assert.are.equal(2, #link.ports)
      local py = table.concat({
        "import socket, struct, sys",
        "srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
        "srv.bind(('127.0.0.1', int(sys.argv[1]))); srv.listen(8); srv.settimeout(10)",
        "good = 0",
        "for i in range(20):",
        "    c = socket.create_connection(('127.0.0.1', int(sys.argv[2])), timeout=10)",
        "    a = b'127.0.0.1:29597'",
        "    c.sendall(struct.pack('>qqi', -65536, 1, len(a)) + a + b'tail'); c.close()",
        "    s, _ = srv.accept(); s.settimeout(10); got = b''",
        "    while True:",
        "        d = s.recv(4096)",
        "        if not d: break",
        "        got += d",
        "    s.close()",
        "    want = struct.pack('>qqi', -65536, 1, 14) + b'127.0.0.1:4242' + b'tail'",
        "    good += got == want",
        "    if got != want: print('got %r' % got)",
        "print('good %d' % good)",
      }, "\n")
      testing.write_file(dir .. "/t.py", py .. "\n")
      local out = testing.sh(("timeout 60 python3 %s %d %d 2>&1"):format(testing.shq(dir .. "/t.py"), port,
        link.ports[2]))
      assert.truthy(out:find("good 20", 1, true), out)
    end)
    link:stop()
    testing.execute("rm -rf " .. testing.shq(dir))
    assert(ok, err)
  end)

  it("bad arguments raise naming the argument; an ensemble without links says how to get them", function()
    assert.truthy(util.error_of(ens.partition, ens):find("at least one group", 1, true))
    assert.truthy(util.error_of(ens.partition, ens, { 4 }):find("member indexes in 1..3", 1, true))
    assert.truthy(util.error_of(ens.partition, ens, { 1 }, { 1, 2 }):find("each member in one group", 1, true))
    assert.truthy(util.error_of(ens.partition, ens, {}):find("non-empty list", 1, true))
    assert.truthy(util.error_of(ens.isolate, ens, "1"):find("a member index", 1, true))
    assert.truthy(util.error_of(ens.isolate, ens, 1, { how = "drop" }):find("opts.how", 1, true))
    assert.truthy(util.error_of(ens.isolate, ens, 1, { seconds = -1 }):find("opts.seconds", 1, true))
    assert.truthy(util.error_of(testing.ensemble, { partitions = "yes" }):find("partitions must be a boolean", 1, true))
    local plain = setmetatable({ n = 3, nodes = ens.nodes }, getmetatable(ens))
    assert.truthy(util.error_of(plain.isolate, plain, 1):find("partitions = true", 1, true))
    assert.truthy(util.error_of(testing.nemesis, { seed = 1, ensemble = plain, faults = { "partition" } })
      :find("partitions = true", 1, true))
    assert.is_true(plain:heal())   -- nothing to heal
    -- nothing was applied by the failed calls
    assert.is_nil(ens.groups)
  end)

  it("blackhole partition: silence instead of refusal; the majority still elects and heal() rejoins", function()
    local old = assert(ens:leader(30))
    assert(ens:partition({ old }, { how = "blackhole", seconds = 120 }))
    local new = testing.eventually(function()
      local i = ens:leader(1)
      if i and i ~= old then return i end
    end, 60, { what = "a new leader while member " .. old .. " is blackholed" })
    assert.are_not.equal(old, new)
    assert(ens:heal())
    assert.is_truthy(ens:wait_quorum(60), modes(ens))
    assert.are.equal("follower", ens.nodes[old]:mode(2))
  end)

  it("stop() ends every member and every link; nothing is left in the temp dir", function()
    local dir = ens.dir
    local pids, dirs = {}, { dir }
    for i = 1, 3 do
      for j = 1, 3 do
        if i ~= j then
          pids[#pids + 1] = { ens.links[i][j].pid, ens.links[i][j].start }
          dirs[#dirs + 1] = ens.links[i][j].dir
        end
      end
    end
    assert.are.equal(6, #pids)
    ens:stop()
    ens = nil
    for _, p in ipairs(pids) do assert.is_false(testing.pid_alive(p[1], p[2])) end
    -- no process mentions the temp dirs (the JVMs' zoo.cfg, the links' control files)
    for _, d in ipairs(dirs) do
      -- "[/]tmp/...": the pattern does not match the command line of the shell running pgrep
      local left = testing.sh("pgrep -f " .. testing.shq("[" .. d:sub(1, 1) .. "]" .. d:sub(2)) .. " || true")
      assert.are.equal("", (left:gsub("%s+", "")), d)
    end
    assert.is_false(testing.exists(dir .. "/node1/zoo.cfg"))
  end)
end)
