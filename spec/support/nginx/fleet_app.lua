-- The job of the nginx used by spec/64-openresty-fleet_spec.lua (see fleet.conf.in): every
-- worker of every instance calls zngx.one_worker on one path; the job appends its start, a beat
-- every `beat` seconds and its stop to one shared log (O_APPEND: the file's order is the order
-- of the writes across all processes), each line with its fencing token and pid:
--   start <token> <pid> <instance> <ngx.now()>
--   style <token> <pid> poll|sleep     how this term waits (they alternate)
--   beat <token> <pid>
--   stop <token> <pid> <reason> <ngx.now()>
-- While the file <log>.raise exists, a job writes its stop line (reason RAISED) and raises.
-- A stubborn job (STUBBORN=yes, or the file <log>.stubborn exists when it starts) ignores
-- stopping() and only sleeps and beats: the supervisor must kill it.
local zngx = require("zklock.adapters.openresty")

local M = {}
local cfg = {}
local handle

local init_error -- what one_worker raised when called in init_by_lua (the master)

function M.config(t)
  cfg = t
  local ok, err = pcall(zngx.one_worker, cfg.path, function() end, { hosts = cfg.hosts })
  init_error = ok and "ok" or tostring(err)
end

local function append(line)
  local f = io.open(cfg.log, "a")
  if not f then
    ngx.log(ngx.ERR, "fleet_app: cannot open ", cfg.log)
    return
  end
  f:setvbuf("no")
  f:write(line, "\n")
  f:close()
end

local function read_log()
  local f = io.open(cfg.log, "r")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  return text
end

local function job(ctx)
  ngx.update_time()
  append(("start %s %d %s %.3f"):format(tostring(ctx.token), ctx.pid, cfg.instance, ngx.now()))
  local r = io.open(cfg.log .. ".raise", "r")
  if r then
    r:close()
    append(("stop %s %d RAISED %.3f"):format(tostring(ctx.token), ctx.pid, ngx.now()))
    error("fleet_app: the job fails on purpose")
  end
  local f = io.open(cfg.log .. ".stubborn", "r")
  if f then f:close() end
  if cfg.stubborn or f then
    append(("stubborn %s %d"):format(tostring(ctx.token), ctx.pid))
    while true do
      ngx.sleep(cfg.beat)
      append(("beat %s %d"):format(tostring(ctx.token), ctx.pid))
    end
  end
  -- the terms alternate between the two ways of waiting: ctx:sleep (woken when told to stop)
  -- and ngx.sleep with ctx:stopping() polled between (the supervisor notices first and tells)
  local starts = 0
  for _ in (read_log() or ""):gmatch("start ") do starts = starts + 1 end
  local poll = starts % 2 == 0
  append(("style %s %d %s"):format(tostring(ctx.token), ctx.pid, poll and "poll" or "sleep"))
  while true do
    local ok, why
    if poll then
      ngx.sleep(cfg.beat)
      why = ctx:stopping()
      ok = not why
    else
      ok, why = ctx:sleep(cfg.beat)
    end
    if not ok then
      ngx.update_time()
      append(("stop %s %d %s %.3f"):format(tostring(ctx.token), ctx.pid, why, ngx.now()))
      return
    end
    append(("beat %s %d"):format(tostring(ctx.token), ctx.pid))
  end
end

function M.init_worker()
  -- stop_grace: 2 s, or what the file <log>.grace says when the worker starts
  local f = io.open(cfg.log .. ".grace", "r")
  local grace = f and tonumber(f:read("*l")) or 2
  if f then f:close() end
  local err
  handle, err = zngx.one_worker(cfg.path, job, {
    hosts = cfg.hosts, session_timeout = cfg.session_timeout, stop_grace = grace,
    id = cfg.instance .. "/" .. ngx.worker.pid(),
  })
  if not handle then ngx.log(ngx.ERR, "fleet_app: one_worker failed: ", err) return end
  -- /close?pid=N: that worker leaves the election (handle:close())
  local function poll(premature)
    if premature then return end
    if ngx.shared.fleet:get("close") == ngx.worker.pid() then
      handle:close()
      return
    end
    ngx.timer.at(0.05, poll)
  end
  ngx.timer.at(0.05, poll)
end

-- Bad input to one_worker: every call must raise (before connecting anything); one line per
-- call, "ok" or the error message.
function M.bad()
  local noop = function() end
  local hosts = cfg.hosts
  local calls = {
    function() return zngx.one_worker(nil, noop, { hosts = hosts }) end,
    function() return zngx.one_worker("no-slash", noop, { hosts = hosts }) end,
    function() return zngx.one_worker("/a/", noop, { hosts = hosts }) end,
    function() return zngx.one_worker("/a", "job", { hosts = hosts }) end,
    function() return zngx.one_worker("/a", job) end,
    function() return zngx.one_worker("/a", noop, "opts") end,
    function() return zngx.one_worker("/a", noop, { hosts = "nohost" }) end,
    function() return zngx.one_worker("/a", noop, { hosts = hosts, session_timeout = -1 }) end,
    function() return zngx.one_worker("/a", noop, { hosts = hosts, stop_grace = "1" }) end,
    function() return zngx.one_worker("/a", noop, { hosts = hosts, stop_grace = math.huge }) end,
    function() return zngx.one_worker("/a", noop, { hosts = hosts, id = 5 }) end,
    function() return zngx.one_worker("/a", noop, { hosts = hosts, acl = "closed" }) end,
    function() return zngx.one_worker("/a", noop, { hosts = hosts, requeue = true }) end,
    function() return handle.running() end,
    function() return handle.close() end,
  }
  for _, call in ipairs(calls) do
    local ok, err = pcall(call)
    ngx.say(ok and "ok" or tostring(err))
  end
  ngx.say(init_error)
end

function M.state()
  if handle and handle:running() then
    ngx.say("running ", ngx.worker.pid(), " ", tostring(handle:token()))
  else
    ngx.say("idle ", ngx.worker.pid())
  end
end

return M
