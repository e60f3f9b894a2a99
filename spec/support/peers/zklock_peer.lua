-- spec/support/peers/zklock_peer.lua: the zklock contender process of the interop specs (one-shot
-- loop; the Curator and Kazoo peers are long-lived). Started by peer.lua's peers.zklock_loop():
--   <lua> -e "package.path=...;package.cpath=..." zklock_peer.lua key=value ...
--   hosts= recipe=mutex|read|write|rwmix|semaphore path= [key=] cos= seconds= log= [start_at=]
--   [hold_ms=] [hold_min_ms=] [gap_ms=] [write_pct=] [max=] [timeout_ms=] [seed=] [session=] [parent=]
-- `cos` coroutines of one client, each with lock objects of its own, loop from start_at (core.now()
-- milliseconds, CLOCK_MONOTONIC) for `seconds`: acquire, hold hold_min_ms..hold_ms, release.
-- Log format: as CuratorPeer.java (H/S hold lines with node and mode, F failures, X errors), then
--   C <started> <acquired> <failed> <raised>   and   D done
-- Runs under Lua 5.4 and LuaJIT.
local zklock = require("zklock")
local core = require("zklock.core")
local now = core.now

local opt = {}
for _, a in ipairs({ ... }) do
  local k, v = a:match("^([%w_]+)=(.*)$")
  if k then opt[k] = v end
end

local function num(k, d) return tonumber(opt[k]) or d end

-- package.path (set by peers.zklock_loop()) includes lua/, so the public harness is found.
local testing = require("zklock.testing")
local MY_PID = testing.pid
local parent = tonumber(opt.parent)

-- Park-Miller generator in doubles (exact under both interpreters)
local function rng(seed)
  local s = math.floor(seed) % 2147483646 + 1
  return function()
    s = (s * 16807) % 2147483647
    return (s - 1) / 2147483646
  end
end

local recipe, path = opt.recipe or "mutex", assert(opt.path, "path=")
local key = opt.key or path
local ncos, seconds = num("cos", 10), num("seconds", 5)
local start_at = num("start_at", now())
local hold_ms, hold_min = num("hold_ms", 5), num("hold_min_ms", 0)
local gap_ms, write_pct = num("gap_ms", 0), num("write_pct", 30)
local max, timeout = num("max", 1), num("timeout_ms", 10000) / 1000
local seed = num("seed", 1)
local end_at = start_at + seconds * 1000

local out = assert(io.open(assert(opt.log, "log="), "a"))
out:setvbuf("full")
local function emit(...) out:write(table.concat({ ... }, "\t"), "\n") end
local function fmt(t) return ("%.3f"):format(t) end

local c, cerr = zklock.connect(assert(opt.hosts, "hosts="), { session_timeout = num("session", 10),
                                                               identity = "zklock-" .. tostring(MY_PID) })
if not c then
  emit("X", "connect " .. tostring(cerr))
  out:close()
  os.exit(3)
end

local active = {}
c:on_session(function(state)
  if state == "CONNECTED" then return end
  for h in pairs(active) do h.sess = h.sess == "-" and state or (h.sess .. "," .. state) end
end)

local counts = { started = 0, acquired = 0, failed = 0, raised = 0 }
local owner = "zklock-" .. tostring(MY_PID)

local function one(i, objs, r)
  local mode
  if recipe == "rwmix" then
    mode = (r() * 100 < write_pct) and "write" or "read"
  elseif recipe == "semaphore" then
    mode = "lease"
  else
    mode = recipe
  end
  local obj = objs[mode]
  counts.started = counts.started + 1
  local t0 = now()
  local pok, res, _, code = pcall(obj.acquire, obj, timeout)
  if not pok then
    counts.raised = counts.raised + 1
    emit("X", (tostring(res):gsub("[\t\n]", " ")))
    return
  end
  if not res then
    counts.failed = counts.failed + 1
    emit("F", mode, tostring(code), fmt(now() - t0))
    return
  end
  counts.acquired = counts.acquired + 1
  local held = (mode == "lease") and res or obj
  local h = { sess = "-", lev = "-", held = held }
  h.start = now()
  active[h] = true
  objs.current = h
  local hold = hold_min + r() * (hold_ms - hold_min)
  if hold > 0 then c:sleep(hold / 1000) end
  h.finish = now()
  active[h] = nil
  objs.current = nil
  local token, node = held:token(), held:node()
  local still = held:is_held()
  local rok, rres, _, rcode = pcall(held.release, held)
  local rel = (not rok) and "raised" or (rres and "ok" or tostring(rcode))
  emit(mode == "lease" and "S" or "H", key, owner, "co" .. i, token and ("%.0f"):format(token) or "-",
       fmt(h.start), fmt(h.finish), h.sess, h.lev, still and "1" or "0", rel,
       tostring(node):match("([^/]+)$") or "-", mode)
end

local running = 0
for i = 1, ncos do
  running = running + 1
  c:spawn(function()
    local r = rng(seed * 1000003 + i * 7919 + (MY_PID or 0))
    local objs = {}
    local function watch(o)
      o:on_lost(function(state)
        local h = objs.current
        if h then h.lev = h.lev == "-" and state or (h.lev .. "," .. state) end
      end)
      return o
    end
    if recipe == "mutex" then
      objs.mutex = watch(c:mutex(path))
    elseif recipe == "semaphore" then
      objs.lease = watch(c:semaphore(path, max))
    else
      local rw = c:rwlock(path)
      objs.read, objs.write = watch(rw.read), watch(rw.write)
    end
    local wait = start_at - now()
    if wait > 0 then c:sleep(wait / 1000) end
    while now() < end_at do
      one(i, objs, r)
      if gap_ms > 0 then c:sleep(r() * gap_ms / 1000) end
    end
    running = running - 1
  end)
end
testing.exit_with_parent(c, parent, 0.5, function() return running > 0 end, function()
  emit("X", "parent gone")
  out:close()
end)

local ok, err = c:run(math.max(0, (start_at - now()) / 1000) + seconds + timeout + 60)
if not ok then emit("X", "run " .. tostring(err)) end
emit("C", tostring(counts.started), tostring(counts.acquired), tostring(counts.failed), tostring(counts.raised))
c:close()
emit("D", "done", fmt(now()))
out:close()
os.exit(ok and 0 or 5)
