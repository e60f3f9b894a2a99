-- zklock.adapters.luv: zklock inside a libuv loop (luv).
--
--   local uv = require("luv")
--   local zklock = require("zklock")
--   local zluv = require("zklock.adapters.luv")
--
--   local client = assert(zklock.connect("127.0.0.1:2181"))
--   zluv.attach(client, uv)                -- a uv poll on the client's fd + one uv timer
--   zluv.spawn(client, function()          -- coroutines that may wait on the client
--     local m = client:mutex("/locks/orders")
--     assert(m:acquire(5))                 -- suspends this coroutine; the loop keeps running
--     client:sleep(0.1)                    -- a uv timer, also suspending
--     m:release()
--     client:close()                       -- closes the uv handles too
--   end)
--   uv.run()
--
-- API
--   zluv.attach(client [, uv [, opts]]) -> client
--       uv defaults to require("luv"). Installs the adapter (client:use), starts a uv poll
--       handle on client:fd() (readable) and one uv timer re-armed from next_timeout_ms()
--       after every client:process(). Both handles are closed when the client is closed (or by
--       zluv.detach). opts.on_error(err, co): called when a spawned coroutine raises, or when
--       client:process() raises inside a uv callback (default: the error and its traceback go
--       to stderr and the loop carries on; luv itself would exit the process).
--   zluv.spawn(client, fn, ...) -> coroutine
--       runs fn(...) in a new coroutine, at once, until it first waits. Only coroutines made by
--       spawn suspend on a zklock wait (on any client attached to the loop); any other caller
--       blocks as usual. They are resumed from uv callbacks, after client:process() has
--       returned, never from inside the client's dispatch.
--       A spawned coroutine may yield for other reasons too (another luv helper that resumes it
--       from its own callback): such yields are left alone.
--   zluv.sleep(seconds)       suspend the calling spawned coroutine on a uv timer
--   zluv.detach(client)       stop and close the handles (the client stays open; coroutines
--                             already waiting are resumed when their events arrive, so
--                             something must drive the client: attach it again)
local M = { _NAME = "zklock.adapters.luv" }

local running, yield, resume, status = coroutine.running, coroutine.yield, coroutine.resume, coroutine.status
local traceback = debug.traceback
local unpack_ = table.unpack or unpack

-- Module-wide scheduler state: one libuv loop per Lua state (luv's default loop).
local S = {
  uv = nil,
  tasks = setmetatable({}, { __mode = "k" }),   -- spawned coroutine -> on_error or true
  parked = setmetatable({}, { __mode = "k" }),  -- coroutine -> the wait record it sleeps in
  ready = {},                                    -- wait records to resume
  kick = nil,                                    -- 0 ms timer that drains `ready`
  draining = false,
  in_pump = 0,
}

local TOKEN = setmetatable({}, { __tostring = function() return "zklock.adapters.luv.wait" end })
local REC = setmetatable({}, { __tostring = function() return "zklock.adapters.luv.rec" end })

local function default_on_error(err)
  io.stderr:write("zklock.adapters.luv: ", tostring(err), "\n")
end

local drain

local function schedule_drain()
  if S.draining or S.in_pump > 0 then return end -- drained when that returns
  local kick = S.kick
  if kick and not kick:is_active() then kick:start(0, 0, function() drain() end) end
end

local function push(rec)
  local q = S.ready
  q[#q + 1] = rec
  schedule_drain()
end

local function step(co, ...)
  local ok, err = resume(co, ...)
  if not ok then
    local on_error = S.tasks[co]
    S.tasks[co] = nil
    local msg = traceback(co, "zklock.adapters.luv: spawned coroutine failed: " .. tostring(err))
    if type(on_error) ~= "function" then on_error = default_on_error end
    on_error(msg, co)
  elseif status(co) == "dead" then
    S.tasks[co] = nil
  end
end

-- Resume every coroutine whose wait record was woken (those woken meanwhile too).
function drain()
  if S.draining then return end
  S.draining = true
  local i = 1
  while true do
    local q = S.ready
    local rec = q[i]
    if not rec then break end
    i = i + 1
    local co = rec.co
    -- only a coroutine still parked in this very wait (not resumed by someone else since)
    if co and S.parked[co] == rec and status(co) == "suspended" then step(co) end
  end
  S.ready = {}
  S.draining = false
end

-- Suspend the calling spawned coroutine until rec.done.
local function park(rec)
  local co = rec.co
  while not rec.done do
    S.parked[co] = rec
    yield(TOKEN)
    if S.parked[co] == rec then S.parked[co] = nil end
  end
end

local function owned()
  local co, main = running()
  if not co or main then return nil end
  if S.tasks[co] then return co end
  return nil
end

local states = setmetatable({}, { __mode = "k" })

function M.attach(client, uv, opts)
  if type(client) ~= "table" or type(client.use) ~= "function" then
    error("zklock.adapters.luv.attach: bad argument #1 (expected a zklock client)", 2)
  end
  uv = uv or require("luv")
  opts = opts or {}
  if S.uv and S.uv ~= uv then
    error("zklock.adapters.luv.attach: another luv module is already in use", 2)
  end
  S.uv = uv
  if not S.kick or S.kick:is_closing() then S.kick = uv.new_timer() end
  if states[client] then M.detach(client) end

  local on_error = opts.on_error or default_on_error
  local st = { uv = uv, closed = false, on_error = on_error }
  states[client] = st
  st.poll = uv.new_poll(client:fd())
  st.timer = uv.new_timer()

  local pump
  local function rearm(ms)
    if st.closed then return end
    if ms == nil then ms = client:next_timeout_ms() end
    st.timer:stop()
    -- timers count from the loop's cached clock, which is as old as the current loop iteration
    -- (or the last uv.run, outside one): bring it up to date so the deadline is not early
    if ms >= 0 then uv.update_time(); st.timer:start(ms, 0, pump) end
  end

  function pump()
    if st.closed then return end
    if client.state == "CLOSED" then M.detach(client) return end
    S.in_pump = S.in_pump + 1
    local ok, err = pcall(client.process, client)
    S.in_pump = S.in_pump - 1
    if not ok then on_error(err) end
    drain()
    if client.state == "CLOSED" then M.detach(client) return end
    rearm()
  end
  st.pump = pump
  st.rearm = rearm

  local adapter = { name = "luv" }

  function adapter.owns()
    return not st.closed and owned() ~= nil
  end

  function adapter.wait(c, w)
    local rec = { co = running(), w = w }
    w[REC] = rec
    -- the timer follows the client's next deadline, which is 0 when the op queued its event
    -- already or a listing waits to be sent (then the pump runs at once); otherwise nothing is
    -- due before the timer or the fd wakes the pump
    if S.in_pump == 0 then rearm() end
    while not w.done and c.state ~= "CLOSED" do
      park(rec)
      rec.done = false
    end
    w[REC] = nil
  end

  function adapter.wake(_, w)
    local rec = w[REC]
    if rec then
      rec.done = true
      push(rec)
    end
  end

  function adapter.sleep(_, s)
    M.sleep(s)
  end

  client:use(adapter)

  -- The fd is closed by client:close(): the poll handle must be stopped first.
  require("zklock.internal.recipe").on_session(client, function(state)
    if state == "CLOSED" and states[client] == st then
      M.detach(client)
    end
  end)

  st.poll:start("r", function(err)
    if err then on_error("zklock.adapters.luv: poll error: " .. tostring(err)) end
    pump()
  end)
  rearm(0)
  return client
end

function M.detach(client)
  local st = states[client]
  if not st then return end
  states[client] = nil
  st.closed = true
  if not st.poll:is_closing() then st.poll:stop(); st.poll:close() end
  if not st.timer:is_closing() then st.timer:stop(); st.timer:close() end
end

function M.spawn(client, fn, ...)
  if type(fn) ~= "function" then
    error("zklock.adapters.luv.spawn: bad argument #2 (expected a function)", 2)
  end
  if client ~= nil and not states[client] then
    error("zklock.adapters.luv.spawn: the client is not attached (zluv.attach(client, uv) first)", 2)
  end
  local n, args = select("#", ...), { ... }
  local co = coroutine.create(function() return fn(unpack_(args, 1, n)) end)
  local st = client ~= nil and states[client]
  S.tasks[co] = st and st.on_error or true
  step(co)
  return co
end

function M.sleep(seconds)
  local co = owned()
  if not co then
    error("zklock.adapters.luv.sleep: not called from a coroutine made by zluv.spawn", 2)
  end
  if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0 then
    error("zklock.adapters.luv.sleep: bad argument #1 (expected seconds >= 0)", 2)
  end
  local uv = S.uv
  local rec = { co = co }
  local t = uv.new_timer()
  uv.update_time() -- as in rearm: the cached loop clock may be old
  t:start(math.floor(seconds * 1000 + 0.5), 0, function()
    t:close()
    rec.done = true
    push(rec)
  end)
  park(rec)
end

M.TOKEN = TOKEN
return M
