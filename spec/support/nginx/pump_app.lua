-- Request handlers of the nginx used by spec/44-openresty-pump_spec.lua (see pump.conf.in): each
-- request makes a client of its own and attaches it with the pump options under test.
local zklock = require("zklock")
local zngx = require("zklock.adapters.openresty")

local M = {}
local cfg = {}

function M.config(t)
  cfg = t
end

local function elapsed(t0)
  ngx.update_time()
  return ngx.now() - t0
end

local function attached(hosts)
  local c = assert(zklock.connect(hosts, { wait = false, session_timeout = 10 }))
  return zngx.attach(c, { wakeup = ngx.var.arg_wakeup, busy_interval = 0.3, idle_interval = 1 })
end

function M.cycles()
  local n = tonumber(ngx.var.arg_n) or 10
  local c = attached(ngx.var.arg_hosts or cfg.hosts)
  local m = c:mutex(cfg.base .. "/c" .. ngx.var.connection)
  local function cycle()
    local ok, err = m:acquire(30)
    if not ok then error("acquire: " .. tostring(err)) end
    assert(m:release())
  end
  local ok, err = pcall(function()
    cycle() -- connects
    ngx.update_time()
    local t0 = ngx.now()
    for _ = 1, n do cycle() end
    return elapsed(t0)
  end)
  c:close()
  if not ok then
    ngx.status = 500
    ngx.say("ERR ", err)
    return
  end
  ngx.say(("%.3f"):format(err))
end

-- GET /deadline?hosts=H&wakeup=W: connect through H (the spec's proxy, which delays replies by
-- seconds), wait until connected and the pump sleeps its idle period (1 s), then acquire(0.3):
-- no reply comes in time, only the pump's own deadline ends the wait.
function M.deadline()
  local c = attached(ngx.var.arg_hosts)
  ngx.update_time()
  local until_t = ngx.now() + 30
  while c.state ~= "CONNECTED" and ngx.now() < until_t do
    ngx.sleep(0.02)
    ngx.update_time()
  end
  if c.state ~= "CONNECTED" then
    c:close()
    ngx.status = 500
    ngx.say("ERR never connected")
    return
  end
  -- past the core's first deadline after connecting (about 0.5 s): the pump then sleeps 1 s
  ngx.sleep(0.6)
  ngx.update_time()
  local t0 = ngx.now()
  local ok, err = c:mutex(cfg.base .. "/never"):acquire(0.3)
  local secs = elapsed(t0)
  c:close()
  ngx.say(tostring(ok and "granted" or err), " ", ("%.3f"):format(secs))
end

-- GET /flush?n=N&hosts=H: the flush timer (wakeup = "fd"), through H (the spec's proxy, which
-- delays replies: none can wake the pump before the timer runs). Once connected, with the pump
-- waiting on its waker for its idle period (1 s), N light threads each start an acquire in one
-- event-loop turn. Those acquires' listings wait for a process() round: one 0 ms timer for the
-- turn must run it (sending them with the creates). ngx.timer.at is
-- wrapped for the turn to count the 0 ms timers and to read next_timeout_ms() around the round
-- they run. -> "timers=T before=ms after=ms granted=G <slowest grant, s> <all, s>"
function M.flush()
  local n = tonumber(ngx.var.arg_n) or 4
  local c = attached(ngx.var.arg_hosts or cfg.hosts)
  ngx.update_time()
  local until_t = ngx.now() + 30
  while c.state ~= "CONNECTED" and ngx.now() < until_t do
    ngx.sleep(0.02)
    ngx.update_time()
  end
  -- a read lock held meanwhile keeps the lock dir (a container: the test server reaps an empty
  -- one within 0.1 s) in place, so each timed acquire (a read lock too: shared, granted at once)
  -- costs a create and the listing, no parent to make
  local path = ("%s/flush-%s"):format(cfg.base, ngx.var.connection)
  local keep = c:rwlock(path).read
  local kept, kerr = keep:acquire(30)
  if not kept then
    c:close()
    ngx.status = 500
    ngx.say("ERR ", kerr)
    return
  end
  ngx.sleep(0.6) -- past the core's deadlines after that: the pump then sleeps 1 s
  local timer_at, timers, before, after = ngx.timer.at, 0, nil, nil
  ngx.timer.at = function(delay, fn, ...) -- luacheck: ignore 122 (wrapped for this turn only)
    if delay ~= 0 then return timer_at(delay, fn, ...) end
    timers = timers + 1
    return timer_at(0, function(premature, ...)
      before = c:next_timeout_ms()
      fn(premature, ...)
      after = c:next_timeout_ms()
    end, ...)
  end
  ngx.update_time()
  local t0 = ngx.now()
  local threads, slowest = {}, 0
  local ok, err = pcall(function()
    for i = 1, n do
      threads[i] = ngx.thread.spawn(function()
        local m = c:rwlock(path).read
        local got, aerr = m:acquire(10)
        if not got then return false, aerr end
        slowest = math.max(slowest, elapsed(t0))
        return m:release()
      end)
    end
  end)
  -- the threads all started their acquires (and yielded) in this turn
  ngx.timer.at = timer_at -- luacheck: ignore 122
  local granted = 0
  for _, th in ipairs(threads) do
    local _, res = ngx.thread.wait(th)
    if res then granted = granted + 1 end
  end
  local secs = elapsed(t0)
  keep:release()
  c:close()
  if not ok then
    ngx.status = 500
    ngx.say("ERR ", err)
    return
  end
  ngx.say(("timers=%d before=%s after=%s granted=%d %.3f %.3f"):format(timers, tostring(before),
    tostring(after), granted, slowest, secs))
end

function M.badopt()
  local c = assert(zklock.connect(cfg.hosts, { wait = false }))
  local ok, err = pcall(zngx.attach, c, { wakeup = "epoll" })
  c:close()
  ngx.say(ok and "accepted" or tostring(err))
  -- start checks before it connects: no client is left behind
  local sok, serr = pcall(zngx.start, cfg.hosts, nil, { busy_interval = -1 })
  ngx.say(sok and "accepted" or tostring(serr), " client=", tostring(zngx.client()))
end

return M
