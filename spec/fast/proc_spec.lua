-- core.proc (csrc/lua/l_proc.c), the process control under the zklock command, without a server:
-- spawn with an environment, exec failures reported by errno, wait for exit and signal, kill,
-- the self-pipe that records caught signals (and whether a process sent them), fds opened after
-- keep_fds() closed on exec, bad arguments; tree(): the command under a keeper, in a group of
-- its own, its exit status, signals to the group, the whole tree killed on request and when the
-- control pipe closes (zklock gone), what it left behind killed when it exits.
-- The command itself: spec/65-cli_spec.lua, spec/97-cli-tree_spec.lua.
--   busted --lua=lua5.4 spec/fast/proc_spec.lua       busted --lua=luajit --run=luajit spec/fast/proc_spec.lua
local core = require("zklock.core")
local util = require("support.util")

local proc = core.proc

local function tmpname()
  local p = os.tmpname()
  os.remove(p)
  return p
end

local function read(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- wait (bounded) for pid to end -> how, value
local function reap(pid, seconds)
  local deadline = core.now() + (seconds or 10) * 1000
  while core.now() < deadline do
    local how, value = proc.wait(pid)
    if how then return how, value end
    core.poll({}, 10)
  end
  error("child " .. pid .. " did not end")
end

describe("core.proc #fast", function()
  after_each(function() proc.restore() end)

  it("spawns with extra environment (replacing same-named variables) and reports the exit status", function()
    local out = tmpname()
    local pid = assert(proc.spawn({ "env", "-u", "LD_PRELOAD", "sh", "-c", "echo \"$A|$HOME\" >" .. out .. "; exit 3" },
                                  { A = "x=y", HOME = "/replaced" }))
    assert.same({ "exited", 3 }, { reap(pid) })
    assert.equal("x=y|/replaced\n", read(out))
    os.remove(out)
  end)

  it("reports an exec failure with its errno, not as an exit status", function()
    local pid, msg, errno = proc.spawn({ "/nonexistent/zklock-test" })
    assert.is_nil(pid)
    assert.equal(2, errno)
    assert.truthy(msg:match("/nonexistent/zklock%-test"), msg)
    local dir = tmpname()
    os.execute("mkdir " .. dir .. " && printf '#!/bin/sh\\n' >" .. dir .. "/s")
    pid, msg, errno = proc.spawn({ dir .. "/s" })
    assert.is_nil(pid)
    assert.equal(13, errno, msg) -- EACCES: not executable
    os.execute("rm -rf " .. dir)
  end)

  it("waits for a signaled child, and kill takes names and numbers", function()
    local pid = assert(proc.spawn({ "sleep", "30" }))
    assert.is_nil(proc.wait(pid))
    assert.is_true(proc.kill(pid, "TERM"))
    assert.same({ "signaled", 15 }, { reap(pid) })
    pid = assert(proc.spawn({ "sleep", "30" }))
    assert.is_true(proc.kill(pid, 9))
    assert.same({ "signaled", 9 }, { reap(pid) })
    local ok, msg = proc.kill(pid, "TERM") -- reaped: no such process
    assert.is_nil(ok)
    assert.truthy(msg:match("kill"), msg)
  end)

  it("records caught signals on the self-pipe, with who sent them, and SIGCHLD", function()
    local fd = assert(proc.signals({ "USR1", "USR2" }))
    assert.is_true(fd > 2)
    assert.same({}, proc.read_signals())
    assert.is_true(proc.kill(proc.getpid(), "USR1"))
    assert.is_true(proc.kill(proc.getpid(), "USR2"))
    local deadline0 = core.now() + 2000
    while core.poll({ fd }, 100) ~= 1 and core.now() < deadline0 do end
    local got = proc.read_signals()
    assert.equal(2, #got)
    assert.same({ sig = proc.signum("USR1"), name = "USR1", user = true }, got[1])
    assert.same({ sig = proc.signum("USR2"), name = "USR2", user = true }, got[2])
    local pid = assert(proc.spawn({ "true" }))
    -- (a signal interrupts poll: it returns 0 then, as the zklock loop expects)
    local deadline = core.now() + 5000
    while core.poll({ fd }, 100) ~= 1 and core.now() < deadline do end
    local names = {}
    for _, s in ipairs(proc.read_signals()) do names[#names + 1] = s.name end
    assert.truthy(util.index_of(names, "CHLD"), table.concat(names, ","))
    reap(pid)
    -- the child starts with default dispositions: USR1 kills it
    pid = assert(proc.spawn({ "sh", "-c", "kill -USR1 $$; sleep 5" }))
    assert.same({ "signaled", proc.signum("USR1") }, { reap(pid) })
  end)

  it("closes fds opened after keep_fds() on exec, and keeps the earlier ones", function()
    local list = tmpname()
    local function fds_of(pid) -- the fd numbers of pid (system(): no fd of ours for the listing)
      os.execute("ls /proc/" .. pid .. "/fd >" .. list)
      local t = {}
      for n in (read(list) or ""):gmatch("%d+") do t[tonumber(n)] = true end
      os.remove(list)
      return t
    end
    local before = fds_of(proc.getpid())
    local kept = io.open("/dev/null", "r")
    local with_kept = fds_of(proc.getpid())
    proc.keep_fds()
    local later = io.open("/dev/null", "r")
    local with_later = fds_of(proc.getpid())
    local kept_fd, later_fd
    for n in pairs(with_kept) do if not before[n] then kept_fd = n end end
    for n in pairs(with_later) do if not with_kept[n] then later_fd = n end end
    assert.truthy(kept_fd and later_fd, "found the two fds")
    local out = tmpname()
    local pid = assert(proc.spawn({ "sh", "-c", "ls /proc/$$/fd >" .. out }))
    reap(pid)
    local child = {}
    for n in (read(out) or ""):gmatch("%d+") do child[tonumber(n)] = true end
    os.remove(out)
    later:close()
    kept:close()
    assert.truthy(child[kept_fd], "an fd open before keep_fds() is inherited")
    assert.is_nil(child[later_fd], "an fd opened after keep_fds() is closed on exec")
  end)

  -- the commands run without the sanitizer preload (ps, for one, hangs under it): the ASan run
  -- checks core.proc, not sh
  local function sh_c(script)
    return { "env", "-u", "LD_PRELOAD", "-u", "ASAN_OPTIONS", "sh", "-c", script }
  end
  -- the pids listed in `file` (one a line), once it has n of them
  local function pids_in(file, n)
    local deadline = core.now() + 10000
    while core.now() < deadline do
      local t = {}
      for p in (read(file) or ""):gmatch("%d+") do t[#t + 1] = tonumber(p) end
      if #t >= n then return t end
      core.poll({}, 10)
    end
    error("the tree did not start")
  end
  local function alive(pid)
    local st = read("/proc/" .. pid .. "/stat")
    return st ~= nil and not st:match("^%d+ %b() Z")
  end
  -- a tree: sh (the command), a pipeline, and a daemon that left the group (setsid)
  local TREE = "echo $$ >>%s; (setsid sh -c 'echo $$ >>%s; exec sleep 30' &); "
    .. "sh -c 'echo $$ >>%s; exec sleep 30' | cat"

  it("tree: the command's status, its own process group, and what it left behind killed", function()
    local out = tmpname()
    local keeper, pid, ctl, st = proc.tree(sh_c("echo $$ $(ps -o pgid= -p $$) >" .. out
      .. "; (setsid sh -c 'echo $$ >>" .. out .. ".left; exec sleep 30' &); "
      .. "i=0; while [ ! -s " .. out .. ".left ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done; exit 4"), nil)
    assert.truthy(keeper and pid, pid)
    assert.same({ "exited", 0 }, { reap(keeper) }) -- once nothing of the tree is left
    assert.same({ "exited", 4 }, { proc.tree_status(st) })
    local self, pgid = (read(out) or ""):match("(%d+)%s+(%d+)")
    assert.equal(tostring(pid), self)
    assert.equal(self, pgid) -- a process group of its own
    local left = tonumber((read(out .. ".left") or ""):match("%d+"))
    assert.truthy(left, "the daemon started")
    assert.is_false(alive(left), "what the command left behind is gone with it")
    proc.close(ctl)
    proc.close(st)
    os.remove(out)
    os.remove(out .. ".left")
  end)

  it("tree: signals go to the group; KILL_TREE kills every descendant (setsid ones too)", function()
    local out = tmpname()
    -- the command stays (a loop) whatever USR1 does to its children; the pipeline's sleep
    -- ignores USR1
    local keeper, _, ctl, st = proc.tree(sh_c(("exec 2>/dev/null; "
      .. "trap 'echo USR1 >>%s.sig' USR1; echo $$ >>%s; "
      .. "(setsid sh -c 'echo $$ >>%s; exec sleep 30' &); (sh -c 'echo $$ >>%s; trap \"\" USR1; exec sleep 30' "
      .. "| cat) & i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"):format(out, out, out, out)))
    local pids = pids_in(out, 3)
    for _, p in ipairs(pids) do assert.is_true(alive(p), "pid " .. p) end
    assert.is_true(proc.tree_send(ctl, "USR1"))
    local deadline = core.now() + 5000
    while not read(out .. ".sig") and core.now() < deadline do core.poll({}, 10) end
    assert.equal("USR1\n", read(out .. ".sig"))
    assert.is_nil(proc.wait(keeper))
    assert.is_true(proc.tree_send(ctl, "KILL_TREE"))
    reap(keeper)
    for _, p in ipairs(pids) do assert.is_false(alive(p), "pid " .. p .. " outlived the kill") end
    assert.same({ "signaled", 9 }, { proc.tree_status(st) })
    -- the keeper is gone: a request fails (EPIPE), it does not kill us with SIGPIPE
    local ok, msg = proc.tree_send(ctl, "TERM")
    assert.is_nil(ok)
    assert.truthy(msg:match("send"), msg)
    proc.close(ctl)
    proc.close(st)
    os.remove(out)
    os.remove(out .. ".sig")
  end)

  it("tree: the control pipe closing (zklock gone) kills the whole tree", function()
    local out = tmpname()
    local keeper, _, ctl, st = proc.tree(sh_c("trap '' TERM; " .. TREE:format(out, out, out)))
    local pids = pids_in(out, 3)
    proc.close(ctl)
    reap(keeper)
    for _, p in ipairs(pids) do assert.is_false(alive(p), "pid " .. p .. " outlived zklock") end
    assert.same({ "signaled", 9 }, { proc.tree_status(st) })
    proc.close(st)
    os.remove(out)
  end)

  it("tree: an exec failure is reported with its errno", function()
    local keeper, msg, errno = proc.tree({ "/nonexistent/zklock-test" })
    assert.is_nil(keeper)
    assert.equal(2, errno)
    assert.truthy(msg:match("/nonexistent/zklock%-test"), msg)
  end)

  -- #alone: it kills every descendant of the busted process, so it runs only where that process
  -- has no children of its own (the fast tier), not in a suite whose fixture started a server
  it("kill_tree without a group: every descendant of this process, grandchildren too #alone", function()
    local out = tmpname()
    local pid = assert(proc.spawn(sh_c(("echo $$ >>%s; sh -c 'echo $$ >>%s; exec sleep 30' & exec sleep 30")
      :format(out, out))))
    local pids = pids_in(out, 2)
    for _, p in ipairs(pids) do assert.is_true(alive(p), "pid " .. p) end
    assert.is_true(proc.kill_tree() >= 2)
    assert.same({ "signaled", 9 }, { reap(pid) })
    local deadline = core.now() + 5000
    while alive(pids[2]) and core.now() < deadline do core.poll({}, 10) end
    for _, p in ipairs(pids) do assert.is_false(alive(p), "pid " .. p .. " outlived kill_tree") end
    assert.equal(0, proc.kill_tree(0)) -- nothing left
    util.assert_words(util.error_of(proc.kill_tree, 1), { "process group id" })
    os.remove(out)
  end)

  it("names signals both ways", function()
    assert.equal(15, proc.signum("TERM"))
    assert.equal(15, proc.signum("SIGTERM"))
    assert.equal("HUP", proc.signame(1))
    assert.is_nil(proc.signum("NOPE"))
    assert.is_nil(proc.signame(200))
  end)

  it("rejects bad arguments with a message naming them", function()
    util.assert_words(util.error_of(proc.spawn, {}), { "non-empty array" })
    util.assert_words(util.error_of(proc.spawn, { 1 }), { "array of strings" })
    util.assert_words(util.error_of(proc.spawn, { "true" }, { A = 1 }), { "string names to string values" })
    util.assert_words(util.error_of(proc.spawn, { "true" }, { ["A=B"] = "x" }), { "without '='" })
    util.assert_words(util.error_of(proc.kill, 0, "TERM"), { "process id" })
    util.assert_words(util.error_of(proc.kill, 1, "NOPE"), { "signal name" })
    util.assert_words(util.error_of(proc.signals, { "KILL" }), { "cannot be caught" })
    util.assert_words(util.error_of(proc.signals, "INT"), { "table" })
  end)
end)
