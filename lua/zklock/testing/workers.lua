-- zklock.testing.workers: worker processes for multi-process lock tests. A worker is a Lua script
-- run by the same interpreter with this process's package.path and package.cpath (so it loads
-- the same zklock build), under a babysitter shell that kills it once this process is gone; the
-- registry stops it in testing.stop_all() and when the Lua state closes, and with_server /
-- with_ensemble stop the workers started inside them. Its output (stdout and stderr) goes to a
-- file; its exit status is kept.
--
--   local w = testing.worker{ script = "spec/my_worker.lua", args = { zk.hosts, dir .. "/w1.log" } }
--   assert.are.equal(0, w:wait(30))            -- exit status, or nil, "timeout" after 30 s
--
--   testing.worker(opts) -> worker
--     opts.script   path of the Lua file to run, or opts.code: Lua source (a chunk) to run
--     opts.args     list of strings (or numbers): the script's `...` and arg[1..n]
--     opts.lua      interpreter (default: the one running now: luajit or lua5.X from `arg[-1]`)
--     opts.env      { NAME = value } more environment variables
--     opts.cwd      working directory (default: the current one)
--   worker.pid, worker.out (the output file), worker.dir (its temp dir)
--   worker:alive()  worker:wait([timeout [, pump]]) -> status | nil, "timeout"
--   worker:output() the output so far    worker:signal(sig)    worker:pause() / worker:resume()
--   worker:stop([{ keep_dir = false }])  SIGKILL (after SIGCONT) to it and its children, and wait;
--                   idempotent. The output stays until the state closes (or keep_dir = false)
-- Inside a worker, os.getenv("ZKLOCK_TEST_PARENT") is the pid of the test process;
-- testing.exit_with_parent(client, tonumber(that)) ends the worker with it.
local shell = require("zklock.testing.shell")
local processes = require("zklock.testing.processes")
local registry = require("zklock.testing.registry")

local shq, read_file, write_file = shell.shq, shell.read_file, shell._write_file
local now, sleep = shell.now, shell.sleep
local pid_alive, proc_stat = processes.pid_alive, processes.proc_stat

local M = {}

local Worker = {}
Worker.__index = Worker
M.Worker = Worker

-- Debian's names: luajit, lua5.1 .. lua5.4
local function interpreter()
  if rawget(_G, "jit") then return "luajit" end
  return "lua" .. (_VERSION:match("(%d+%.%d+)") or "5.4")
end
M.interpreter = interpreter

local function argerr(n, what, got)
  error(("zklock.testing.worker: bad %s: expected %s, got %s"):format(n, what, tostring(got)), 3)
end

function M.worker(opts)
  if type(opts) ~= "table" then argerr("argument #1", "an options table { script = path | code = source }", opts) end
  if (opts.script == nil) == (opts.code == nil) then
    argerr("options", "exactly one of script (a path) and code (Lua source)", "script=" .. tostring(opts.script)
      .. " code=" .. tostring(opts.code))
  end
  if opts.script ~= nil and type(opts.script) ~= "string" then argerr("option script", "a file path", opts.script) end
  if opts.code ~= nil and type(opts.code) ~= "string" then argerr("option code", "Lua source (a string)", opts.code) end
  if opts.args ~= nil and type(opts.args) ~= "table" then argerr("option args", "a list of strings", opts.args) end
  if opts.env ~= nil and type(opts.env) ~= "table" then argerr("option env", "a table { NAME = value }", opts.env) end
  if not processes.pid then error("zklock.testing.worker: cannot tell this process's pid", 2) end
  local dir = shell.mktemp("zklock-zkworker")
  local script = opts.script
  if opts.code then
    script = dir .. "/worker.lua"
    write_file(script, opts.code)
  elseif not shell.exists(script) then
    shell.remove_tree(dir)
    argerr("option script", "a readable file", script)
  end
  local cwd = opts.cwd or (shell.sh("pwd"):gsub("%s+$", ""))
  if script:sub(1, 1) ~= "/" then script = cwd .. "/" .. script end
  local prelude = ("package.path=%q;package.cpath=%q"):format(package.path, package.cpath)
  local argv = {}
  for i, a in ipairs(opts.args or {}) do
    if type(a) ~= "string" and type(a) ~= "number" then argerr("option args[" .. i .. "]", "a string or number", a) end
    argv[#argv + 1] = shq(a)
  end
  local env = { "ZKLOCK_TEST_PARENT=" .. processes.pid, "ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0" }
  for k, v in pairs(opts.env or {}) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then argerr("option env", "variable names", k) end
    env[#env + 1] = shq(k .. "=" .. tostring(v))
  end
  local out, status, pidfile = dir .. "/output", dir .. "/status", dir .. "/pid"
  local cmd = ("env %s %s -e %s %s %s"):format(table.concat(env, " "), shq(opts.lua or interpreter()),
    shq(prelude), shq(script), table.concat(argv, " "))
  -- babysitter: run the worker, keep its exit status, and kill it once this process is gone
  local sh = table.concat({
    "cd " .. shq(cwd) .. " || exit 1",
    cmd .. " </dev/null >" .. shq(out) .. " 2>&1 &",
    "J=$!",
    "echo $J >" .. shq(pidfile .. ".tmp") .. " && mv -f " .. shq(pidfile .. ".tmp") .. " " .. shq(pidfile),
    "(",
    "  while :; do",
    "    s=$(cat /proc/" .. processes.pid .. "/stat 2>/dev/null) || break",
    "    s=${s##*) }; set -- $s",
    "    [ \"$1\" != Z ] || break",
    processes.pid_start and ("    [ \"${20}\" = " .. processes.pid_start .. " ] || break") or "    :",
    "    kill -0 $J 2>/dev/null || exit 0",
    "    sleep 1",
    "  done",
    "  kill -CONT $J 2>/dev/null; kill -KILL $J 2>/dev/null",
    ") </dev/null >/dev/null 2>&1 &",
    "W=$!",
    "wait $J",
    "echo $? >" .. shq(status .. ".tmp") .. " && mv -f " .. shq(status .. ".tmp") .. " " .. shq(status),
    "kill $W 2>/dev/null",
  }, "\n")
  if not shell.execute("setsid sh -c " .. shq(sh) .. " </dev/null >/dev/null 2>&1 &") then
    shell.remove_tree(dir)
    error("zklock.testing.worker: could not start a shell (setsid sh)", 2)
  end
  local deadline = now() + 5
  local pid
  repeat
    pid = tonumber((read_file(pidfile) or ""):match("(%d+)"))
    if not pid then sleep(0.01) end
  until pid or now() > deadline
  if not pid then
    shell.remove_tree(dir)
    error("zklock.testing.worker: the worker did not start (no pid after 5 s)", 2)
  end
  local _, start = proc_stat(pid)
  local self = setmetatable({ pid = pid, start = start, dir = dir, out = out, status_file = status,
                              script = script }, Worker)
  registry.register(self)
  return self
end

function Worker:alive()
  if read_file(self.status_file) then return false end
  return pid_alive(self.pid, self.start)
end

function Worker:status()
  return tonumber((read_file(self.status_file) or ""):match("(%d+)"))
end

-- wait([timeout [, pump]]) -> exit status | nil, "timeout". pump(0.02) runs between looks.
function Worker:wait(timeout, pump)
  local deadline = now() + (timeout or 60)
  while true do
    local st = self:status()
    if st then return st end
    if not pid_alive(self.pid, self.start) then
      -- gone; the babysitter writes the status a moment later
      for _ = 1, 100 do
        st = self:status()
        if st then return st end
        sleep(0.02)
      end
      return nil, "gone without a status"
    end
    if now() > deadline then return nil, "timeout" end
    if pump then pump(0.02) else sleep(0.02) end
  end
end

function Worker:output() return read_file(self.out) or "" end

function Worker:_signal(sig)
  if pid_alive(self.pid, self.start) then shell.execute(("kill -%s %d 2>/dev/null"):format(sig, self.pid)) end
end
Worker.signal = Worker._signal
-- pause() / resume() return once the kernel shows the worker stopped / running again (2 s at most)
function Worker:pause() self:_signal("STOP"); processes.wait_stopped(self.pid, true, 2) end
function Worker:resume() self:_signal("CONT"); processes.wait_stopped(self.pid, false, 2) end

-- stop([opts]): the output stays readable after stop(); { keep_dir = false } (what
-- testing.stop_all() passes) also removes the worker's temp dir.
function Worker:stop(opts)
  if not self.stopped then
    self.stopped = true
    self:_signal("CONT")
    -- its own children first (a shell command it runs), then the worker
    if pid_alive(self.pid, self.start) then shell.execute(("pkill -KILL -P %d 2>/dev/null"):format(self.pid)) end
    self:_signal("KILL")
    local deadline = now() + 5
    while pid_alive(self.pid, self.start) and now() < deadline do sleep(0.02) end
  end
  if opts and opts.keep_dir == false then
    registry.unregister(self)
    shell.remove_tree(self.dir)
  end
  return not pid_alive(self.pid, self.start)
end

return M
