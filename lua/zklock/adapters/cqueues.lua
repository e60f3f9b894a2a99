-- zklock.adapters.cqueues: zklock inside a cqueues event loop.
--
--   local cqueues = require("cqueues")
--   local zklock = require("zklock")
--   local zcq = require("zklock.adapters.cqueues")
--
--   local cq = cqueues.new()
--   local client = assert(zklock.connect("127.0.0.1:2181"))
--   zcq.attach(client, cq)               -- adds the client's pump to cq
--   cq:wrap(function()                   -- any coroutine of cq may now wait on the client
--     local m = client:mutex("/locks/orders")
--     assert(m:acquire(5))               -- suspends this coroutine only
--     cqueues.sleep(0.1)                 -- the rest of cq keeps running
--     m:release()
--     client:close()                     -- the pump ends with the client
--   end)
--   assert(cq:loop())
--
-- API
--   zcq.attach(client, cq [, opts]) -> client
--       installs the adapter (client:use) and wraps a pump coroutine into controller cq: it
--       waits with cqueues.poll(client) (the client is a cqueues pollable: its fd, readable,
--       and next_timeout_ms()), then runs client:process(). It ends when the client is closed.
--       Coroutines run directly by cq (cq:wrap) wait on a cqueues.condition; anything else (the
--       main thread, a coroutine of another controller, a plain coroutine nested inside a cq
--       coroutine) blocks as usual.
--       opts.on_error(err): called when client:process() raises (default: the error ends
--       the pump and propagates from cq:loop()).
--   Without attach, drive the client from a loop of your own (one per client):
--       while client.state ~= "CLOSED" do cqueues.poll(client); client:process() end
--       (spawned coroutines, client:spawn, then run inside client:process()). cqueues keeps
--       the fd registered after a poll: call cqueues.cancel(client:fd()) before client:close().
--   zcq.detach(client)  ends the pump (the client stays open). Coroutines already waiting
--       keep waiting until their events arrive, so something must drive the client (attach it
--       again, or call client:process()); new waits block.
local cqueues = require("cqueues")
local condition = require("cqueues.condition")

local M = { _NAME = "zklock.adapters.cqueues" }

local COND = setmetatable({}, { __tostring = function() return "zklock.adapters.cqueues.cond" end })

local states = setmetatable({}, { __mode = "k" })

function M.attach(client, cq, opts)
  if type(client) ~= "table" or type(client.use) ~= "function" then
    error("zklock.adapters.cqueues.attach: bad argument #1 (expected a zklock client)", 2)
  end
  if type(cq) ~= "userdata" and type(cq) ~= "table" then
    error("zklock.adapters.cqueues.attach: bad argument #2 (expected a cqueues controller)", 2)
  end
  opts = opts or {}
  if states[client] then M.detach(client) end
  local st = {
    cq = cq,
    kick = condition.new(),  -- a waiter went to sleep: the pump must recompute its timeout
    wake_at = -math.huge,    -- when the sleeping pump wakes by itself (monotime); -inf: awake
    stop = false,
    pump_co = nil,
    on_error = opts.on_error,
  }
  states[client] = st

  local adapter = { name = "cqueues" }

  function adapter.owns()
    if st.stop then return false end
    local ctl, direct = cqueues.running()
    if ctl ~= cq or not direct then return false end
    -- the pump itself must never wait on its own client (a session handler doing I/O): it
    -- blocks instead, which still makes progress
    return coroutine.running() ~= st.pump_co
  end

  function adapter.wait(c, w)
    local cond = condition.new()
    w[COND] = cond
    -- the sleeping pump must run earlier than it would by itself only when the client's next
    -- deadline is nearer than its wake-up (0: a listing waits to be sent, or an event is queued)
    local t = c:next_timeout_ms()
    if t >= 0 and cqueues.monotime() + t / 1000 < st.wake_at then st.kick:signal() end
    -- until the event arrives (client:close() delivers ECLOSED): leaving earlier would orphan
    -- an acquisition that is granted later
    while not w.done and c.state ~= "CLOSED" do
      cond:wait()
    end
    w[COND] = nil
  end

  function adapter.wake(_, w)
    local cond = w[COND]
    if cond then cond:signal() end
  end

  function adapter.sleep(_, s)
    cqueues.sleep(s)
  end

  client:use(adapter)

  -- The fd is closed by client:close(): cqueues must forget it first (cqueues.cancel), which
  -- also wakes the pump so that it ends. Session handlers run before the fd is closed.
  st.fd = client:fd()
  require("zklock.internal.recipe").on_session(client, function(state)
    if state == "CLOSED" and states[client] == st then
      cqueues.cancel(st.fd)
      st.kick:signal()
    end
  end)

  cq:wrap(function()
    st.pump_co = coroutine.running()
    while not st.stop and client.state ~= "CLOSED" do
      local t = client:next_timeout_ms() -- what the poll below sleeps for (client:timeout())
      st.wake_at = t >= 0 and cqueues.monotime() + t / 1000 or math.huge
      cqueues.poll(client, st.kick)
      st.wake_at = -math.huge -- awake: a wait that starts now is seen by the process() below
      if st.stop or client.state == "CLOSED" then break end
      if st.on_error then
        local ok, err = pcall(client.process, client)
        if not ok then st.on_error(err) end
      else
        client:process()
      end
    end
  end)
  return client
end

function M.detach(client)
  local st = states[client]
  if not st then return end
  st.stop = true
  st.kick:signal()
  states[client] = nil
end

return M
