-- spec/support/peers/zklock_leader.lua: a zklock leader-election participant process for the
-- leader specs (73-curator-leader, 92-faults-leader); started by spec/support/leaders.lua.
--   <lua> -e "package.path=...;package.cpath=..." zklock_leader.lua key=value ...
--   hosts= mode=leader|latch path= id= log= [hold_ms=100] [seconds=30] [session=4] [key=] [parent=]
-- leader: client:leader(path, fn, { id =, requeue = true }), fn leads hold_ms (l:sleep) per term.
-- latch:  a loop of client:latch(path, { id = }): await, lead hold_ms or until leadership is lost,
--         close.
-- Log (tab-separated, the format of CuratorPeer.java's leader commands):
--   B key owner id token start node          a term began (written at once)
--   H key owner id token start end sess - 0 how node mode   it ended (how: ok | lost)
--   E state ms                                a session event;  D  done
-- Times are core.now() milliseconds (CLOCK_MONOTONIC). Runs under Lua 5.4 and LuaJIT.
local zklock = require("zklock")
local core = require("zklock.core")
local testing = require("zklock.testing")
local now = core.now

local opt = {}
for _, a in ipairs({ ... }) do
  local k, v = a:match("^([%w_]+)=(.*)$")
  if k then opt[k] = v end
end
local function num(k, d) return tonumber(opt[k]) or d end

local mode, path, id = opt.mode or "leader", assert(opt.path, "path="), assert(opt.id, "id=")
local key = opt.key or path
local hold_ms, seconds = num("hold_ms", 100), num("seconds", 30)
local parent = tonumber(opt.parent)
local owner = "zklock-" .. testing.pid
local logf = assert(io.open(assert(opt.log, "log="), "a"))

local function line(...)
  logf:write(table.concat({ ... }, "\t"), "\n")
  logf:flush()
end
local function ms(t) return ("%.3f"):format(t) end

local c = assert(zklock.connect(assert(opt.hosts, "hosts="), { session_timeout = num("session", 4),
  identity = id, connect_timeout = 30 }))
local events = {}
c:on_session(function(st) events[#events + 1] = st; line("E", st, ms(now())) end)

local deadline = now() + seconds * 1000
local function running()
  return now() < deadline and (not parent or testing.pid_alive(parent)) and c.state ~= "CLOSED"
end

local function base(node) return node and node:match("[^/]+$") or "-" end

local function sess_since(n0)
  if #events <= n0 then return "-" end
  local t = {}
  for i = n0 + 1, #events do t[#t + 1] = events[i] end
  return table.concat(t, ",")
end

local terms = 0

local function run_leader()
  local l
  l = c:leader(path, function(me)
    local start, tok, n0 = now(), me:token(), #events
    local node = "-"
    local p = me._mutex:node() -- the mutex is owned by this coroutine
    if p then node = base(p) end
    line("B", key, owner, id, tostring(tok), ms(start), node)
    local ok = me:sleep(hold_ms / 1000)
    local finish = now()
    terms = terms + 1
    line("H", key, owner, id, tostring(tok), ms(start), ms(finish), sess_since(n0), "-", "0", ok and "ok" or "lost",
      node, "leader")
  end, { id = id, requeue = true })
  while running() do c:sleep(0.05) end
  l:close()
  -- a term still running ends (its sleep returns false) and gives the node back
  local t_end = now() + 5000
  while l:is_leader() or (l._running and now() < t_end) do c:sleep(0.02) end
end

local function run_latch()
  while running() do
    local l = c:latch(path, { id = id })
    local lost_at
    l:on_change(function(event) if event ~= "LEADER" and not lost_at then lost_at = now() end end)
    local led = false
    while not led and running() do led = l:await(0.05) == true end
    if not led then l:close() break end
    local start, tok, n0 = now(), l:token(), #events
    local node = l._hold and base(l._hold.node) or "-"
    line("B", key, owner, id, tostring(tok), ms(start), node)
    local until_ = start + hold_ms
    while now() < until_ and l:is_held() and running() do c:sleep(0.01) end
    local finish = lost_at or now()
    local how = lost_at and "lost" or "ok"
    l:close()
    terms = terms + 1
    line("H", key, owner, id, tostring(tok), ms(start), ms(finish), sess_since(n0), "-", "0", how, node, "latch")
  end
end

c:spawn(function()
  local ok, err = pcall(mode == "latch" and run_latch or run_leader)
  if not ok then line("X", tostring(err)) end
end)
c:run(seconds + 60)
line("C", tostring(terms))
line("D")
c:close()
logf:close()
