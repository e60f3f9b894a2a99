-- Tests of the test harness itself (zklock.testing) against real ZooKeeper servers.
-- Run: busted --lua=lua5.4 -m 'lua/?.lua;lua/?/init.lua' spec/00-harness_spec.lua
-- The expire() case needs zklock.core; busted --lua=... re-runs itself through the shell
-- without quoting, so a ';' in -m cuts off later options. Use the environment instead:
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' busted --lua=lua5.4 spec/00-harness_spec.lua
-- Runtime ~10 s (2 cores).
local testing = require("zklock.testing")
local deps = require("support.deps")

local exists = testing.exists

local function proc_gone(pid)
  return not exists("/proc/" .. pid .. "/stat")
end

-- a stopped server's process is gone once its parent has reaped it: on a busy machine that can
-- take longer than stop()'s own wait, so allow a bounded wait (a process still running fails)
local function gone_soon(pid, seconds)
  local t0 = testing.now()
  while not proc_gone(pid) and testing.now() - t0 < (seconds or 10) do testing.sleep(0.05) end
  return proc_gone(pid)
end

local shell = testing.sh

-- processes whose command line mentions `needle` (our temp dirs are unique)
local function procs_mentioning(needle)
  -- "[/]tmp/..." matches "/tmp/..." but not the shell that runs pgrep
  local pattern = "[" .. needle:sub(1, 1) .. "]" .. needle:sub(2)
  return (shell("pgrep -f -- '" .. pattern .. "' 2>/dev/null"):gsub("%s+$", ""))
end

local function count_modes(ens)
  local leaders, followers = 0, 0
  for _, node in ipairs(ens.nodes) do
    local m = node:mode()
    if m == "leader" then leaders = leaders + 1 end
    if m == "follower" then followers = followers + 1 end
  end
  return leaders, followers
end

describe("zklock.testing single server", function()
  local zk

  setup(function()
    local t0 = testing.now()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000, max_session_ms = 60000 }
    print(("\n  [harness] standalone server up in %.2f s"):format(testing.now() - t0))
  end)

  teardown(function()
    if zk then zk:stop() end
  end)

  it("starts on a loopback port with a private dir", function()
    assert.is_number(zk.port)
    assert.is_true(zk.port >= 20000 and zk.port <= 40000)
    assert.are.equal("127.0.0.1:" .. zk.port, zk.hosts)
    assert.is_true(exists(zk.dir .. "/zoo.cfg"))
    assert.is_true(zk:running())
    assert.is_false(proc_gone(zk.pid))
  end)

  it("answers four-letter words", function()
    assert.are.equal("imok", zk:four("ruok"))
    assert.are.equal("standalone", zk:mode())
    local m = assert(zk:mntr())
    assert.is_number(m.zk_znode_count)
    assert.are.equal("standalone", m.zk_server_state)
    assert.matches("Mode: standalone", zk:four("srvr"))
    assert.has_error(function() zk:four("bogus") end)
  end)

  it("pause makes ruok time out and resume restores it", function()
    zk:pause()
    local ok, reply, err = pcall(function()
      local t0 = testing.now()
      local r, e = zk:four("ruok", 2)
      assert.is_true(testing.now() - t0 < 4, "four() must not hang")
      return r, e
    end)
    zk:resume()
    assert.is_true(ok, reply)
    assert.is_nil(reply)
    assert.matches("no reply", err)
    assert.are.equal("imok", zk:four("ruok"))
  end)

  it("kill + restart keeps the port and the data dir", function()
    local old_pid, port = zk.pid, zk.port
    zk:kill()
    assert.is_false(zk:running())
    assert.is_true(gone_soon(old_pid))
    assert.is_true(exists(zk.dir .. "/zoo.cfg"))
    assert.is_nil(zk:four("ruok", 1))
    local t0 = testing.now()
    zk:restart()
    print(("\n  [harness] restart after kill in %.2f s"):format(testing.now() - t0))
    assert.are_not.equal(old_pid, zk.pid)
    assert.are.equal(port, zk.port)
    assert.are.equal("imok", zk:four("ruok"))
    assert.is_number(assert(zk:mntr()).zk_znode_count)
  end)

  it("refuses to restart a running server", function()
    assert.has_error(function() zk:restart() end)
  end)

  it("fails clearly on a port that is taken", function()
    local t0 = testing.now()
    local ok, err = pcall(testing.server, { port = zk.port, timeout = 10 })
    assert.is_false(ok)
    assert.matches("in use", err)
    assert.is_true(testing.now() - t0 < 10)
    assert.are.equal("imok", zk:four("ruok"))   -- the owner is unharmed
  end)

  it("stop removes the dir, ends the process and is idempotent", function()
    local pid, dir = zk.pid, zk.dir
    local t0 = testing.now()
    zk:stop()
    print(("\n  [harness] stop in %.2f s"):format(testing.now() - t0))
    assert.is_true(gone_soon(pid))
    assert.is_false(exists(dir))
    assert.is_false(zk:running())
    zk:stop()
    assert.has_error(function() zk:restart() end)
  end)
end)

describe("zklock.testing expire (needs the C module)", function()
  local zklock = deps.require("zklock", "cmake --build build; run busted from the repository root (.busted "
    .. "puts build/ on package.cpath) or set LUA_CPATH='build/?.so;;'", pending)
  if not zklock then return end
  if not deps.require("zklock.core", "cmake --build build; LUA_CPATH='build/?.so;;'", pending) then return end

  it("expires a live session at the server", function()
    local zk, c
    finally(function()
      if c then pcall(c.close, c) end
      if zk then zk:stop() end
    end)
    zk = testing.server{}
    c = assert(zklock.connect(zk.hosts, { session_timeout = 4 }))
    local sid = assert(c:session())
    local hex = type(sid) == "number" and ("%x"):format(sid) or tostring(sid):gsub("^0+", "")
    assert.matches("sid=0x" .. hex, assert(zk:four("cons")))
    local t0 = testing.now()
    assert.is_true(testing.expire(c))
    local gone = false
    while testing.now() - t0 < 3 do
      if not assert(zk:four("cons")):find("sid=0x" .. hex, 1, true) then gone = true break end
      testing.sleep(0.05)
    end
    print(("\n  [harness] session expired in %.2f s"):format(testing.now() - t0))
    assert.is_true(gone, "the session is still listed by 'cons'")
  end)
end)

describe("zklock.testing ensemble", function()
  local ens

  setup(function()
    local t0 = testing.now()
    ens = testing.ensemble{ n = 3, tick_ms = 500 }
    print(("\n  [harness] 3-node ensemble up in %.2f s"):format(testing.now() - t0))
  end)

  teardown(function()
    if ens then ens:stop() end
  end)

  it("has three nodes and one connect string", function()
    assert.are.equal(3, #ens.nodes)
    local n = 0
    for _ in ens.hosts:gmatch("127%.0%.0%.1:%d+") do n = n + 1 end
    assert.are.equal(3, n)
    for i, node in ipairs(ens.nodes) do
      assert.is_true(node:running())
      assert.is_truthy(ens.hosts:find(node.hosts, 1, true), "node " .. i)
    end
  end)

  it("elects exactly one leader", function()
    local l = ens:leader()
    assert.is_number(l)
    local leaders, followers = count_modes(ens)
    assert.are.equal(1, leaders)
    assert.are.equal(2, followers)
    assert.are.equal("leader", ens.nodes[l]:mode())
  end)

  it("elects a new leader after the leader is killed", function()
    local old = assert(ens:leader())
    local t0 = testing.now()
    ens.nodes[old]:kill()
    local new, err = ens:leader(15)
    local dt = testing.now() - t0
    print(("\n  [harness] new leader %.2f s after kill -9 of the leader"):format(dt))
    assert.is_number(new, err)
    assert.are_not.equal(old, new)
    assert.is_true(dt < 15)
    -- the old leader rejoins as a follower
    ens.nodes[old]:restart()
    assert.is_number(ens:wait_quorum(20))
    local leaders, followers = count_modes(ens)
    assert.are.equal(1, leaders)
    assert.are.equal(2, followers)
  end)

  it("stop removes everything", function()
    local pids, dir = {}, ens.dir
    for i, node in ipairs(ens.nodes) do pids[i] = node.pid end
    local t0 = testing.now()
    ens:stop()
    print(("\n  [harness] ensemble stop in %.2f s"):format(testing.now() - t0))
    for _, pid in ipairs(pids) do assert.is_true(gone_soon(pid)) end
    assert.is_false(exists(dir))
    ens:stop()   -- idempotent
  end)
end)

describe("zklock.testing cleanup", function()
  it("stop_all stops every server and ensemble of this process", function()
    local a, b, ens
    finally(function()
      if a then a:stop() end
      if b then b:stop() end
      if ens then ens:stop() end
    end)
    a = testing.server{}
    b = testing.server{}
    b:kill()                                   -- stopped but with its dir kept
    ens = testing.ensemble{ n = 1 }
    local pids = { a.pid, ens.nodes[1].pid }
    local dirs = { a.dir, b.dir, ens.dir }
    assert.is_true(testing.stop_all())
    for _, pid in ipairs(pids) do assert.is_true(gone_soon(pid)) end
    for _, dir in ipairs(dirs) do
      assert.is_false(exists(dir))
      assert.are.equal("", procs_mentioning(dir))
    end
  end)

  it("a SIGKILLed test process leaves no server behind", function()
    local lua = "lua5.4"
    if shell("command -v lua5.4"):match("^%s*$") then lua = "luajit" end
    local info, script_file = os.tmpname(), os.tmpname()
    local dir
    finally(function()
      os.remove(info)
      os.remove(script_file)
      if dir and dir:match("^/[%w/]*zklock%-zk%.%w+$") then os.execute("rm -rf -- '" .. dir .. "'") end
    end)
    local f = assert(io.open(script_file, "w"))
    f:write(("package.path = %q .. package.path\n"):format(package.path .. ";"),
      "local t = require('zklock.testing')\n",
      "local zk = t.server{}\n",
      ("local f = io.open(%q, 'w')\n"):format(info),
      "f:write(zk.pid, ' ', zk.dir, '\\n'); f:close()\n",
      "for _ = 1, 600 do t.sleep(0.1) end\n")
    f:close()
    local child = shell(lua .. " " .. script_file .. " >/dev/null 2>&1 & echo $!"):match("%d+")
    assert.is_truthy(child)
    local pid
    local deadline = testing.now() + 20
    repeat
      testing.sleep(0.1)
      local fi = io.open(info)
      local s = fi and fi:read("*a")
      if fi then fi:close() end
      if s then pid, dir = s:match("^(%d+) (%S+)") end
    until pid or testing.now() > deadline
    assert.is_truthy(pid, "the child did not start a server")
    assert.is_false(proc_gone(pid))
    os.execute("kill -KILL " .. child)
    local t0 = testing.now()
    while not proc_gone(pid) and testing.now() - t0 < 8 do testing.sleep(0.1) end
    print(("\n  [harness] server gone %.2f s after its test process was SIGKILLed"):format(testing.now() - t0))
    assert.is_true(proc_gone(pid))
  end)
end)

describe("zklock.testing shell, file and process helpers", function()
  it("quote, run, read, write and look at processes", function()
    local path = os.tmpname()
    finally(function() os.remove(path) end)
    testing.write_file(path, "a'b\n")
    testing.write_file(path, "c\n", "a")
    assert.are.equal("a'b\nc\n", testing.read_file(path))
    assert.is_true(testing.exists(path))
    assert.is_nil(testing.read_file(path .. ".none"))
    assert.is_false(testing.exists(path .. ".none"))
    assert.are.equal("a'b $x\n", testing.sh("printf '%s\\n' " .. testing.shq("a'b $x")))
    assert.are.equal("", testing.sh("printf %s \"$LD_PRELOAD\""))
    assert.is_true(testing.execute("true"))
    assert.is_false(testing.execute("exit 3"))
    assert.has_error(function() testing.write_file(path .. ".none/x", "") end)
    local state, start = testing.proc_stat(testing.pid)
    assert.is_string(state)
    assert.are.equal(testing.pid_start, start)
    assert.is_true(testing.pid_alive(testing.pid, testing.pid_start))
    assert.is_false(testing.pid_alive(testing.pid, "1"))
    local gone = tonumber(testing.sh("sh -c 'echo $$'"):match("%d+"))
    assert.is_false(testing.pid_alive(gone))
  end)

  it("the specs' scope removes its temp dirs, also ones whose tag holds '-'", function()
    local fw = require("support.fault_worker")
    local scope = fw.scope("zklock-harness")
    local dirs = { scope.tmpdir("plain"), scope.tmpdir("with-two-dashes") }
    for _, d in ipairs(dirs) do assert.is_true(testing.exists(d), d) end
    scope.stop_all()
    for _, d in ipairs(dirs) do assert.is_false(testing.exists(d), d) end
  end)
end)
