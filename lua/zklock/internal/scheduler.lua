-- zklock.internal.scheduler: the builtin coroutine scheduler behind client:spawn, client:run, client:sleep
-- and zklock.run. It is a host adapter like zklock.adapters.cqueues, luv and openresty (the
-- protocol is in docs/design.md, "Host API"), with the optional hooks an adapter that keeps its
-- own run queue needs: the client calls step() from every process(), folds timeout_ms() into
-- next_timeout_ms(), counts pending() in client:pending() and calls close() from client:close().
--
-- One scheduler per client (made by the client). It owns the coroutines it spawned: only they
-- suspend on a wait of this client; any other caller blocks (while driving the client).
local core = require("zklock.core")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")

local M = {}

local running, yield, resume, status = coroutine.running, coroutine.yield, coroutine.resume, coroutine.status
local now = core.now
local unpack_ = table.unpack or unpack

local WAIT = setmetatable({}, { __tostring = function() return "zklock.wait" end })
M.WAIT = WAIT
local SWEEP_MS = 100 -- how often waiters and tasks of dead coroutines are looked for
local CO = setmetatable({}, { __tostring = function() return "zklock.internal.scheduler.co" end }) -- w[CO]

---------------------------------------------------------------- a pcall that may yield
--
-- PUC Lua 5.1 cannot yield across pcall ("attempt to yield across metamethod/C-call boundary"),
-- and the election engine catches the errors of code that waits (a term, a leader's function).
-- There M.pcall runs fn in a coroutine of its own, forwards its yields to whoever resumes the
-- caller and reads coroutine.resume's result: an error ends the call as pcall's would. The
-- inner coroutine acts for the caller: the scheduler parks, wakes and times the caller
-- (owner_of), so a wait inside fn suspends like one outside it. Lua 5.2+ and LuaJIT yield
-- across pcall: there M.pcall is pcall.
local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local owner_of = setmetatable({}, { __mode = "k" }) -- inner coroutine -> the coroutine it acts for
M.YIELD_ACROSS_PCALL = not (_VERSION == "Lua 5.1" and not rawget(_G, "jit"))

local function acting(co)
  return co and owner_of[co] or co
end

local function yielding_pcall(fn, ...)
  local outer = running()
  if not outer then return pcall(fn, ...) end -- the main thread does not yield: a plain pcall
  local co = coroutine.create(fn)
  owner_of[co] = acting(outer)
  local r = pack(resume(co, ...))
  while true do
    if not r[1] then
      owner_of[co] = nil
      return false, r[2]
    end
    if status(co) == "dead" then
      owner_of[co] = nil
      return true, unpack_(r, 2, r.n)
    end
    r = pack(resume(co, yield(unpack_(r, 2, r.n)))) -- pass the yield out, the resume back in
  end
end

-- M.pcall(fn, ...) -> pcall's results; fn may wait (yield) on every Lua this library supports.
M.pcall = M.YIELD_ACROSS_PCALL and pcall or yielding_pcall
M._yielding_pcall = yielding_pcall -- for the fast tier, on every Lua

-- Lua 5.4: a to-be-closed guard around the yield, so that coroutine.close() on a waiting
-- coroutine withdraws its operation (and its task) at once. The waiter itself is the guard (a
-- metatable with __close, shared by the scheduler's waits: no allocation per wait). LuaJIT
-- cannot parse it; there the periodic sweep of dead coroutines does the same, a little later.
local make_guarded_yield = (loadstring or load)([[
  local yield, WAIT, setmetatable, guard_mt = ...
  return function(w)
    local guard <close> = setmetatable(w, guard_mt)
    yield(WAIT)
    w.consumed = true -- not reached when the coroutine is closed while suspended
  end
]])

function M.new()
  local tasks, ntasks = {}, 0 -- spawned coroutine -> true
  -- the run queue: ready_co[i] is resumed with ready_val[i] (false: nothing), i = 1..nready; the
  -- step swaps it with the spare pair (no table per wake or per step)
  local ready_co, ready_val, nready = {}, {}, 0
  local spare_co, spare_val = {}, {}
  local timers = {}           -- sorted by deadline: { at = ms, co = }
  local parked = {}           -- waiter -> the coroutine suspended in it
  local next_sweep = 0
  local owner_client          -- the client this scheduler serves (set by the first wait)

  local S = { name = "builtin" }

  local function untask(co)
    if tasks[co] then
      tasks[co] = nil
      ntasks = ntasks - 1
    end
  end

  local function push(co, value)
    nready = nready + 1
    ready_co[nready], ready_val[nready] = co, value or false
  end

  local guarded_yield = make_guarded_yield and make_guarded_yield(yield, WAIT, setmetatable, { __close = function(w)
    if w.consumed then return end
    local co = parked[w]
    parked[w] = nil
    if co then
      untask(co)
      owner_client:abandon(w)
    end
  end })

  ------------------------------------------------------------ the adapter protocol

  function S.owns(_)
    local co, main = running()
    if main or not co then return false end
    return tasks[acting(co)] == true
  end

  function S.wait(client, w)
    local co = acting(running())
    w[CO] = co
    parked[w] = co
    owner_client = client
    if guarded_yield then guarded_yield(w) else yield(WAIT) end
    parked[w] = nil
    -- resumed by someone else before the event came: the caller gives up on the operation
    if not w.done then client:abandon(w) end
  end

  function S.wake(_, w)
    local co = w[CO]
    if co then push(co, w) end
  end

  -- seconds may be math.huge: then only client:close() wakes it
  function S.sleep(_, seconds)
    local timer = { at = now() + seconds * 1000, co = acting(running()) }
    local i = #timers + 1
    while i > 1 and timers[i - 1].at > timer.at do i = i - 1 end
    table.insert(timers, i, timer)
    repeat yield(WAIT) until timer.done
  end

  ------------------------------------------------------------ optional hooks

  function S.timeout_ms(_)
    if nready > 0 then return 0 end
    local t = timers[1]
    if not t or t.at == math.huge then return -1 end
    local left = math.ceil(t.at - now())
    return left < 0 and 0 or left
  end

  function S.pending(_) return nready end

  local died = false -- a spawned coroutine ended in this step: reap what it still holds
  local function step_co(co, value)
    local ok, res
    if value == nil then ok, res = resume(co) else ok, res = resume(co, value) end -- a first run: no arguments
    if status(co) == "dead" then
      untask(co)
      died = true
      if not ok then
        error(debug.traceback(co, "zklock: spawned coroutine failed: " .. tostring(res)), 0)
      end
    elseif res ~= WAIT then
      push(co) -- a plain yield: run it again on the next round
    end
  end

  local function run_ready()
    local n = nready
    if n == 0 then return end
    local qco, qval = ready_co, ready_val
    -- the spare pair is free unless an outer run_ready (a coroutine that pumped) still walks it
    if spare_co == nil then spare_co, spare_val = {}, {} end
    ready_co, ready_val, nready = spare_co, spare_val, 0
    spare_co, spare_val = nil, nil
    for i = 1, n do
      local co, value = qco[i], qval[i]
      qco[i], qval[i] = nil, nil
      if value == false then value = nil end
      local st = status(co)
      if st == "suspended" then
        step_co(co, value)
      elseif st ~= "dead" then
        push(co, value) -- busy (it resumed us): later
      end
    end
    spare_co, spare_val = qco, qval -- walked to the end: reusable
  end

  -- Waiters whose coroutine died without being resumed (coroutine.close under LuaJIT, or a
  -- foreign resume) give back their operation; dead tasks stop counting.
  local function sweep(client)
    local t = now()
    if t < next_sweep then return end
    next_sweep = t + SWEEP_MS
    for w, co in pairs(parked) do
      if status(co) == "dead" then
        parked[w] = nil
        client:abandon(w)
      end
    end
    for co in pairs(tasks) do
      if status(co) == "dead" then untask(co) end
    end
    -- sleepers closed while they slept: their timers would only wake the pump for nothing
    for i = #timers, 1, -1 do
      if status(timers[i].co) == "dead" then table.remove(timers, i) end
    end
  end

  function S.step(client)
    -- nothing scheduled (a host that only blocks): nothing to do, not even a clock read
    if ntasks == 0 and nready == 0 and timers[1] == nil and next(parked) == nil then return end
    local t = now()
    while timers[1] and timers[1].at <= t do
      local timer = table.remove(timers, 1)
      timer.done = true
      push(timer.co, timer)
    end
    sweep(client)
    died = false
    local ok, err = pcall(run_ready)
    -- before a spawned coroutine's error propagates: release what it held (the client sets
    -- S.on_died to its reaper)
    if died and S.on_died then S.on_died(client) end
    if not ok then error(err, 0) end
  end

  function S.close(_)
    for _, timer in ipairs(timers) do -- sleepers wake up (and find the client closed)
      timer.done = true
      push(timer.co, timer)
    end
    timers = {}
    run_ready()
  end

  ------------------------------------------------------------ spawn and count

  -- Run fn(...) in a new coroutine owned by this scheduler; it starts on the next process().
  function S.spawn(fn, ...)
    local n = select("#", ...)
    local co
    if n == 0 then
      co = coroutine.create(fn) -- no arguments: no closure or table per coroutine
    else
      local args = { ... }
      co = coroutine.create(function() return fn(unpack_(args, 1, n)) end)
    end
    tasks[co] = true
    ntasks = ntasks + 1
    push(co)
    return co
  end

  -- Spawned coroutines not finished yet.
  function S.count() return ntasks end

  return S
end

-- The next wait of a run loop (client:run, zklock.run): wait (ms) capped by the deadline (ms on
-- core.now's clock, or nil: none), or nil, "ETIMEDOUT: ..." once it passed with left_tasks
-- coroutines unfinished after `timeout` seconds.
function M.next_wait(wait, deadline, left_tasks, timeout)
  if not deadline then return wait end
  local left = deadline - now()
  if left <= 0 then
    return E.fail("ETIMEDOUT", ("%d coroutines still running after %g s"):format(left_tasks, timeout))
  end
  return left < wait and left or wait
end

-- Drive `clients` with the host API only (fd, next_timeout_ms, process, tasks) until none has an
-- unfinished spawned coroutine, or `timeout` seconds pass (then nil, "ETIMEDOUT: ...").
-- A closed client counts as finished.
function M.run(clients, timeout, fname, argn)
  local ms = check.timeout(fname, argn, timeout) -- -1: forever (nil, math.huge, beyond the core's range)
  local deadline = ms >= 0 and now() + ms or nil
  while true do
    local left_tasks, fds, wait = 0, {}, 1000
    for _, c in ipairs(clients) do
      if c.state ~= "CLOSED" then c:process() end
      if c.state ~= "CLOSED" then
        left_tasks = left_tasks + c:tasks()
        fds[#fds + 1] = c:fd()
        local t = c:next_timeout_ms()
        if t >= 0 and t < wait then wait = t end
      end
    end
    if left_tasks == 0 then return true end
    local msg, code
    wait, msg, code = M.next_wait(wait, deadline, left_tasks, timeout)
    if not wait then return nil, msg, code end
    if wait > 0 then core.poll(fds, math.ceil(wait)) end
  end
end

return M
