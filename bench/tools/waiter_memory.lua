-- bench/tools/waiter_memory.lua: Lua heap and RSS per waiting coroutine, and the frames a parked
-- waiter is suspended in. N coroutines of the builtin scheduler queue on one mutex the main
-- coroutine holds; each waiter's lock object is made beforehand and not counted. The heap is read
-- after two full collections before the waiters start and once all of them are queued.
--
--   ZK_HOSTS=... lua5.4 bench/tools/waiter_memory.lua [N] [build dir]
--   lua5.4 tests/with_zk.lua lua5.4 bench/tools/waiter_memory.lua 10000
--
-- Prints one RESULT line (heap_b_per and rss_b_per: bytes per waiter) and, per frame of one
-- parked waiter (innermost first), where it is and how many stack slots its function reserves
-- (the "slots" of luac -l for that function; Lua 5.4 only, where luac5.4 is installed).
local n = tonumber(arg[1]) or 10000
local build = arg[2] or (jit and "build-jit" or "build")
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath
local zklock = require("zklock")
local hosts = assert(os.getenv("ZK_HOSTS"), "ZK_HOSTS not set (run under tests/with_zk.lua)")

local function rss_kb()
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end
-- ZKL_GC_ROUNDS: full collections before each reading (default 2). Each one also frees half of a
-- suspended Lua 5.4 coroutine's unused CallInfo records (left by deeper calls before it parked):
-- more rounds read what a waiter keeps once parked for a while.
local GC_ROUNDS = tonumber(os.getenv("ZKL_GC_ROUNDS")) or 2
local function heap_b()
  for _ = 1, GC_ROUNDS do collectgarbage("collect") end
  return collectgarbage("count") * 1024
end

local c = assert(zklock.connect(hosts, { session_timeout = 30 }))
local path = ("/bench/waiter-memory/%d-%d"):format(os.time(), math.random(1e9))
local holder = c:mutex(path)
assert(holder:acquire(10))
local locks = {}
for i = 1, n do locks[i] = c:mutex(path) end
local cos, queued = {}, 0
local h0, r0 = heap_b(), rss_kb()
for i = 1, n do
  cos[i] = c:spawn(function()
    queued = queued + 1
    assert(locks[i]:acquire(600))
    locks[i]:release()
  end)
end
-- queue everyone: every waiter's node made and listed (bounded: 600 s)
local limit = os.time() + 600
repeat
  c:run(0.2)
  local kids = assert(c:children(path))
until (#kids >= n + 1 and queued == n) or os.time() > limit
c:run(0.5) -- the last listings' replies and watches
local h1, r1 = heap_b(), rss_kb()

-- one parked waiter's frames
local co = cos[math.floor(n / 2)]
local frames = {}
if type(co) == "thread" then
  local slots = {}
  if not jit then -- maxstacksize per function from luac5.4 -l: "function <file:line,last> (... N slots"
    local seen = {}
    for lvl = 0, 40 do
      local info = debug.getinfo(co, lvl, "S")
      if not info then break end
      local src = info.source:match("^@(.*)")
      if src and not seen[src] then
        seen[src] = true
        local p = io.popen("luac5.4 -p -l '" .. src .. "' 2>/dev/null")
        local l1
        for line in p:lines() do -- "function <file:first,last> (...)", then "... N slots, ..."
          l1 = line:match("^%a+ <.-:(%d+),%d+>") or l1
          local ns = line:match("(%d+) slots")
          if l1 and ns then slots[src .. ":" .. l1], l1 = tonumber(ns), nil end
        end
        p:close()
      end
    end
  end
  for lvl = 0, 40 do
    local info = debug.getinfo(co, lvl, "Sln")
    if not info then break end
    local src = info.source:match("^@(.*)") or info.what
    local key = src .. ":" .. tostring(info.linedefined)
    frames[#frames + 1] = ("  %d %s:%d %s (defined at %d, %s slots)"):format(lvl, src, info.currentline,
      info.name or "?", info.linedefined, slots[key] or "?")
  end
else
  frames[1] = "  (client:spawn did not return the coroutine: frames not listed)"
end

holder:release()
c:run(600)
c:close()
io.stdout:write(("RESULT lua=%s gc_rounds=%d n=%d heap_b_per=%.0f rss_b_per=%.0f heap_before_kb=%.0f "
  .. "heap_queued_kb=%.0f\n")
  :format(jit and "luajit" or _VERSION, GC_ROUNDS, n, (h1 - h0) / n, (r1 - r0) * 1024 / n, h0 / 1024, h1 / 1024))
io.stdout:write("frames of one parked waiter (innermost first):\n", table.concat(frames, "\n"), "\n")
