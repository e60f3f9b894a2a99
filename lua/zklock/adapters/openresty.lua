-- zklock.adapters.openresty: zklock in nginx workers (lua-nginx-module + lua-resty-core).
--
-- One client per worker, made in init_worker_by_lua*, driven by a timer pump; requests wait on
-- ngx.semaphore, so a waiting request never blocks its worker. zklock.core must be the LuaJIT
-- build (build-jit/zklock/core.so): see examples/openresty/nginx.conf.
--
--   init_worker_by_lua_block {
--     require("zklock.adapters.openresty").start("127.0.0.1:2181", { session_timeout = 10 })
--   }
--   location /orders {
--     content_by_lua_block {
--       local client = require("zklock.adapters.openresty").client()
--       local m = client:mutex("/locks/orders")       -- one lock object per request
--       local ok, err = m:acquire(5)                   -- suspends this request only
--       if not ok then return ngx.exit(503) end
--       ...                                            -- critical section
--       m:release()
--     }
--   }
--
-- API
--   zngx.start(hosts [, connect_opts [, pump_opts]]) -> client | nil, msg, code
--       makes this worker's client and starts its pump. Call it in init_worker_by_lua*. It does
--       not wait for the session (it connects with zklock.connect(hosts, { wait = false }): a
--       waiting connect would block the worker): the client starts in state CONNECTING;
--       acquires made meanwhile are sent once it connects and their timeouts run from the call.
--       connect_opts are zklock.connect's options (`wait` is always false here; never set
--       `keepalive`: the worker's pump keeps the session alive).
--   zngx.attach(client [, pump_opts]) -> client
--       the same for a client you made yourself.
--   zngx.client() -> this worker's client (from start), or nil
--   zngx.stop()   close this worker's client now (its pump ends).
--   pump_opts:
--     busy_interval (0.001 s)  pump period while client:pending() > 0 (nginx cannot watch the
--                              client's fd: the pump polls it)
--     idle_interval (0.1 s)    longest pump period when idle (capped by
--                              client:next_timeout_ms()); a new operation wakes the pump at once
--     exit_grace (10 s)        on worker exit (reload, quit) the pump keeps serving in-flight
--                              requests until no operation is pending and no lock is held, at
--                              most this long, then closes the session: the old worker's lock
--                              nodes vanish at once instead of at session expiry
--
-- Waiting: requests (rewrite, access, content phases) and timers suspend on an ngx.semaphore;
-- other phases (init_worker, set, header/body filter, log, balancer) cannot yield, so a zklock
-- call there falls back to the library's blocking wait, which blocks the worker: do not acquire
-- or release there.
--
-- Ownership: a mutex or read-write lock belongs to the coroutine that took it, and each phase
-- handler of a request runs in its own coroutine: acquire and release in the same handler
-- (pcall the critical section). Set `lua_thread_cache_max_entries 0;`: by default ngx_lua resets
-- a finished request's coroutine and reuses it for a later request, which would then own (and
-- re-enter for free) a lock the first request did not release. With fresh coroutines the pump
-- releases, in the background, every lock whose request ended without releasing it (an error in
-- the critical section), with a warning in the error log. Use one lock object per request.
-- A request that dies while waiting (aborted, worker shutdown timeout) does not keep the lock
-- either: the grant nobody picks up is released in the background.
if type(ngx) ~= "table" or not ngx.timer then
  error("zklock.adapters.openresty needs lua-nginx-module (OpenResty): no ngx here", 2)
end
local zklock = require("zklock")
local semaphore = require("ngx.semaphore")

local ngx = ngx
local running = coroutine.running

local M = { _NAME = "zklock.adapters.openresty" }

local OWN_PHASES = { rewrite = true, access = true, content = true, timer = true }
local SEMA = setmetatable({}, { __tostring = function() return "zklock.adapters.openresty.sema" end })
local WAIT_SLICE = 1     -- s: a waiter re-checks the client's state at least this often
local ABANDON_AFTER = 0.1 -- s: a grant not picked up for this long (its request is gone) is given back
local REAP_EVERY = 0.1   -- s: how often locks of finished requests are looked for

-- ngx_lua replaces coroutine.status; its own answer for another request's coroutine is not
-- reliable ("running" for a finished one). The raw LuaJIT function is kept as _status.
local raw_status = coroutine._status or coroutine.status

local worker_client
local states = setmetatable({}, { __mode = "k" }) -- client -> pump state

local function log(level, ...)
  ngx.log(level, "zklock: ", ...)
end

function M.attach(client, opts)
  if type(client) ~= "table" or type(client.use) ~= "function" then
    error("zklock.adapters.openresty.attach: bad argument #1 (expected a zklock client)", 2)
  end
  opts = opts or {}
  local busy_interval = opts.busy_interval or 0.001
  local idle_interval = opts.idle_interval or 0.1
  local exit_grace = opts.exit_grace or 10

  local st = {
    kick = assert(semaphore.new(0)), -- posted when an operation starts: wakes an idle pump
    woken = {},                      -- { w, sema, at }: grants posted, not yet picked up
    pump_co = nil,
    stopped = false,
  }

  local function kick()
    -- at most one pending post: a burst of operations wakes the pump once
    if st.kick:count() < 1 then st.kick:post(1) end
  end

  local adapter = { name = "openresty" }

  function adapter.owns()
    if st.stopped or not ngx or not OWN_PHASES[ngx.get_phase()] then return false end
    return running() ~= st.pump_co
  end

  function adapter.wait(c, w)
    local sema = assert(semaphore.new(0))
    w[SEMA] = sema
    kick()
    while not w.done and c.state ~= "CLOSED" do
      local ok, err = sema:wait(WAIT_SLICE)
      if not ok and err ~= "timeout" then
        log(ngx.WARN, "semaphore wait failed: ", tostring(err))
        if not w.done then ngx.sleep(0.001) end
      end
    end
    w[SEMA] = nil
  end

  function adapter.wake(_, w)
    local sema = w[SEMA]
    if sema then
      sema:post(1)
      local woken = st.woken
      woken[#woken + 1] = { w = w, sema = sema, at = ngx.now() }
    end
  end

  function adapter.sleep(_, s)
    ngx.sleep(s)
  end

  -- Grants whose request never came back for them: it was aborted while waiting (the posted
  -- semaphore kept its resource, nobody consumed the wake-up).
  local function reap_abandoned(t)
    local woken = st.woken
    if #woken == 0 then return end
    local keep = {}
    for i = 1, #woken do
      local e = woken[i]
      local w = e.w
      if not w.consumed then
        if t - e.at < ABANDON_AFTER then
          keep[#keep + 1] = e
        elseif e.sema:count() > 0 then
          log(ngx.INFO, "a request waiting on operation ", tostring(w.id), " is gone; giving back its result")
          client:abandon(w)
        end
      end
    end
    st.woken = keep
  end

  client:use(adapter)

  -- Locks held by requests that ended without releasing them (an error in the critical
  -- section): their coroutine is dead, nobody can release them; give them back.
  local next_reap = 0
  local function reap_dead_owners(t)
    if t < next_reap then return end
    next_reap = t + REAP_EVERY
    for _, r in ipairs(client:reap_dead_owners(raw_status)) do
      log(ngx.WARN, "a request ended while holding ", tostring(r.kind), " ", tostring(r.path),
        "; released in the background")
    end
  end

  local function pump(premature)
    st.pump_co = running()
    local exit_deadline
    while not st.stopped and client.state ~= "CLOSED" do
      local ok, err = pcall(client.process, client)
      if not ok then log(ngx.ERR, "process failed: ", tostring(err)) end
      if client.state == "CLOSED" then break end
      ngx.update_time()
      local t = ngx.now()
      reap_abandoned(t)
      reap_dead_owners(t)
      local busy = client:pending() > 0 or #st.woken > 0
      if premature or ngx.worker.exiting() then
        exit_deadline = exit_deadline or (t + exit_grace)
        if (not busy and not client:held()) or t >= exit_deadline then
          if busy or client:held() then
            log(ngx.WARN, "worker exiting with zklock operations or locks still held; closing the session")
          end
          st.stopped = true
          client:close()
          break
        end
      end
      local d
      if busy then
        d = busy_interval
      else
        d = idle_interval
        local ms = client:next_timeout_ms()
        if ms >= 0 and ms / 1000 < d then d = ms / 1000 end
        if exit_deadline and d > 0.01 then d = 0.01 end
      end
      if d <= 0 then
        ngx.sleep(0)
      elseif busy then
        ngx.sleep(d)
      else
        st.kick:wait(d)
      end
    end
    st.pump_co = nil
  end

  local ok, err = ngx.timer.at(0, pump)
  if not ok then
    error("zklock.adapters.openresty: cannot start the pump timer: " .. tostring(err), 2)
  end
  st.stop = function()
    st.stopped = true
    kick()
  end
  states[client] = st
  return client
end

function M.start(hosts, connect_opts, pump_opts)
  if worker_client and worker_client.state ~= "CLOSED" then
    return nil, "EEXIST: zklock.adapters.openresty.start: this worker already has a client", "EEXIST"
  end
  local opts = connect_opts
  if type(connect_opts) == "table" then
    opts = {}
    for k, v in pairs(connect_opts) do opts[k] = v end
    opts.wait = false
  elseif connect_opts == nil then
    opts = { wait = false }
  end
  local c, msg, code = zklock.connect(hosts, opts)
  if not c then return nil, msg, code end
  M.attach(c, pump_opts)
  worker_client = c
  return c
end

function M.client()
  return worker_client
end

function M.stop()
  local c = worker_client
  worker_client = nil
  if c and c.state ~= "CLOSED" then
    local st = states[c]
    if st then st.stop() end
    c:close()
  end
end

return M
