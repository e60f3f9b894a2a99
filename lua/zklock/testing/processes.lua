-- zklock.testing.processes: processes as /proc shows them, this process's own pid, and
-- long-lived children that go away with it (babysitter shell: servers, workers, proxies).
--   proc_stat, pid_alive, wait_stopped, pid, pid_start, spawn, exit_with_parent
local shell = require("zklock.testing.shell")

local read_file, readcmd, execute, shq = shell.read_file, shell.readcmd, shell.execute, shell.shq
local now, sleep = shell.now, shell.sleep

local M = {}
-- pid -> state letter, starttime, ppid (strings) from /proc/<pid>/stat, or nil
local function proc_stat(pid)
  local s = read_file("/proc/" .. tostring(pid) .. "/stat")
  if not s then return nil end
  local rest = s:match("^.*%) (.*)$")       -- comm may contain spaces and ')'
  if not rest then return nil end
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  -- fields[1] = state (stat field 3), fields[2] = ppid (field 4), fields[20] = starttime (field 22)
  return fields[1], fields[20], fields[2]
end
M.proc_stat = proc_stat

local function pid_alive(pid, starttime)
  if not pid then return false end
  local state, st = proc_stat(pid)
  if not state or state == "Z" or state == "X" or state == "x" then return false end
  if starttime and st ~= starttime then return false end   -- pid was reused
  return true
end
M.pid_alive = pid_alive

-- After a SIGSTOP or SIGCONT: wait (up to timeout s, default 2) until the kernel shows pid
-- stopped (state T) or not, as `stopped` asks; a signal takes effect only when the process is
-- next scheduled. -> true once it shows, false at the timeout
function M.wait_stopped(pid, stopped, timeout)
  local deadline = now() + (timeout or 2)
  while true do
    local state = proc_stat(pid)
    if state == nil or (state == "T") == stopped then return state ~= nil end
    if now() >= deadline then return false end
    sleep(0.01)
  end
end

-- The PID of this Lua process, read from /proc/self/stat, or $PPID of a child shell.
local MY_PID, MY_START
do
  local s = read_file("/proc/self/stat")
  MY_PID = s and s:match("^(%d+)")
  if not MY_PID then
    MY_PID = (readcmd("echo $PPID") or ""):match("(%d+)")
  end
  if MY_PID then
    local _, st = proc_stat(MY_PID)
    MY_START = st
  end
end
M.pid, M.pid_start = tonumber(MY_PID), MY_START

-- A worker process started by a test stops when that test process is gone: a coroutine of
-- `client` checks every `period` s (0.5), while busy() is true (always, if nil), that
-- parent_pid (as started now: a reused pid does not count) still exists; once it does not, it
-- calls on_gone() (to log and flush) and exits the process with status 4.
function M.exit_with_parent(client, parent_pid, period, busy, on_gone)
  if not parent_pid then return end
  local _, start = proc_stat(parent_pid)
  client:spawn(function()
    while busy == nil or busy() do
      client:sleep(period or 0.5)
      if not pid_alive(parent_pid, start) then
        if on_gone then on_gone() end
        os.exit(4)
      end
    end
  end)
end
-- Run a long-lived command under a babysitter shell in its own session (setsid): the shell
-- starts the command in the background and reaps it, and a watcher polls once a second that
-- this Lua process (pid + start time) still exists; once it is gone it sends CONT and `stop`
-- to the command, then KILL after `grace` seconds. Sanitizer preloads are unset (they belong
-- to Lua, not to the child). Returns the command's pid (a string) once it is in pidfile.
function M.spawn(o)
  if not MY_PID then return nil, "cannot tell this process's pid (no /proc/self/stat)" end
  local pidfile = o.pidfile
  os.remove(pidfile)
  local tries = math.max(1, math.floor((o.grace or 3) * 2 + 0.5))
  local script = table.concat({
    "set -f",
    "unset LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS",
    "cd " .. shq(o.cwd or "/") .. " || exit 1",
    "echo \"=== start $(date '+%F %T')\" >>" .. shq(o.log),
    o.command .. " </dev/null >>" .. shq(o.log) .. " 2>&1 &",
    "J=$!",
    "echo $J >" .. shq(pidfile .. ".tmp") .. " && mv -f " .. shq(pidfile .. ".tmp") .. " " .. shq(pidfile),
    "(",
    "  while :; do",
    "    s=$(cat /proc/" .. MY_PID .. "/stat 2>/dev/null) || break",
    "    s=${s##*) }; set -- $s",
    "    [ \"$1\" != Z ] || break",
    MY_START and ("    [ \"${20}\" = " .. MY_START .. " ] || break") or "    :",
    "    kill -0 $J 2>/dev/null || exit 0",
    "    sleep 1",
    "  done",
    "  kill -CONT $J 2>/dev/null; kill -" .. (o.stop or "TERM") .. " $J 2>/dev/null",
    "  i=0; while [ $i -lt " .. tries .. " ]; do kill -0 $J 2>/dev/null || exit 0; sleep 0.5; i=$((i+1)); done",
    "  kill -KILL $J 2>/dev/null",
    ") </dev/null >/dev/null 2>&1 &",
    "W=$!",
    "wait $J",
    "kill $W 2>/dev/null",
  }, "\n")
  if not execute("setsid sh -c " .. shq(script) .. " </dev/null >/dev/null 2>&1 &") then
    return nil, "could not start the babysitter shell (setsid sh)"
  end
  local deadline = now() + 5
  repeat
    local s = read_file(pidfile)
    local pid = s and s:match("(%d+)")
    if pid then return pid end
    sleep(0.01)
  until now() > deadline
  return nil, "the command did not start (no pid file after 5 s)"
end

return M
