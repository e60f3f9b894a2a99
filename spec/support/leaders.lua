-- spec/support/leaders.lua: zklock leader-election participant processes for the leader specs.
--   local leaders = require("support.leaders")
--   local w = leaders.zklock{ hosts =, mode = "leader"|"latch", path =, id =, hold_ms =, seconds =,
--                             session = (s), log = (default a temp file) }
--     runs spec/support/peers/zklock_leader.lua with this process's interpreter and build;
--     w.pid, w.log, w:alive(), w:kill() (SIGKILL, returns the core.now() ms it was sent),
--     w:wait_exit(timeout, pump), w:output()
--   leaders.stop_all()   kill every worker started here and remove their temp dirs
local core = require("zklock.core")
local testing = require("zklock.testing")
local fw = require("support.fault_worker")

local M = {}
local scope = fw.scope("zklock-leader")
local shq, read_file, pid_alive = testing.shq, testing.read_file, testing.pid_alive

local Worker = {}
Worker.__index = Worker

function M.zklock(args)
  local dir = scope.tmpdir("w")
  local root = fw.ROOT
  local lpath = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua"
  local setup = ("package.path=%q;package.cpath=%q"):format(lpath, fw.cpath())
  local a = {}
  for k, v in pairs(args) do a[k] = v end
  a.parent = fw.pid
  a.log = a.log or (dir .. "/leader.log")
  local argv = {}
  for k, v in pairs(a) do argv[#argv + 1] = shq(k .. "=" .. tostring(v)) end
  table.sort(argv)
  local cmd = ("env ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 %s -e %s %s %s"):format(
    fw.interpreter(), shq(setup), shq(root .. "/spec/support/peers/zklock_leader.lua"), table.concat(argv, " "))
  local pid, start = fw.spawn_bg(cmd, dir .. "/output")
  local self = setmetatable({ pid = pid, start = start, dir = dir, log = a.log }, Worker)
  scope.add(self)
  return self
end

function Worker:alive() return pid_alive(self.pid, self.start) end
function Worker:output() return read_file(self.dir .. "/output") or "" end
function Worker:wait_exit(timeout, pump) return fw.wait_exit(self, timeout or 30, pump, 0.05) end

-- SIGKILL; returns the time it was sent (core.now() ms): the end of a term it was in
function Worker:kill()
  local at = core.now()
  if pid_alive(self.pid, self.start) then os.execute(("kill -KILL %d 2>/dev/null"):format(self.pid)) end
  local deadline = core.now() + 5000
  while pid_alive(self.pid, self.start) and core.now() < deadline do testing.sleep(0.02) end
  self.stopped = true
  return at
end

function Worker:stop()
  if self.stopped then return true end
  self:kill()
  return true
end

-- The log's B lines of terms not yet ended (a term in progress), as { id, token, start }
function Worker:open_terms()
  local begun = {}
  for f in fw.log_records(self.log) do
    if f[1] == "B" then begun[f[6]] = f elseif f[1] == "H" then begun[f[6]] = nil end
  end
  local out = {}
  for _, f in pairs(begun) do out[#out + 1] = { id = f[4], token = tonumber(f[5]), start = tonumber(f[6]) } end
  return out
end

M.stop_all = scope.stop_all

return M
