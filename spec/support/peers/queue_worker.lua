-- spec/support/peers/queue_worker.lua: a zklock producer or consumer process of the queue interop
-- spec (75-queue-interop), started by spec/support/queue_peers.lua (log line R once connected):
--   <lua> -e "package.path=...;package.cpath=..." queue_worker.lua hosts= path= log= mode=produce|consume
--     produce: count= prefix= cos=   consume: cos= poll= stop= work_ms=        max= (seconds, default 120)
-- A consumer coroutine takes until a take of `poll` seconds finds nothing once the file `stop` exists.
-- `cos` coroutines of one client take concurrently. Log lines as QueuePeer.java: P <item> after a
-- put returned, T <item> after a take returned (each line written and flushed at once, so a
-- kill -9 loses nothing already logged), D <n> when done, X <text> on an error.
-- Runs under Lua 5.4 and LuaJIT.
local zklock = require("zklock")

local opt = {}
for _, a in ipairs({ ... }) do
  local k, v = a:match("^([%w_]+)=(.*)$")
  if k then opt[k] = v end
end
local function num(k, d) return tonumber(opt[k]) or d end

local log = assert(io.open(assert(opt.log, "log="), "a"))
log:setvbuf("no")
local function line(s) log:write(s, "\n") end

local client, err = zklock.connect(assert(opt.hosts, "hosts="),
  { session_timeout = num("session", 10), log_level = "error" })
if not client then
  line("X " .. tostring(err))
  os.exit(1)
end
-- format=curator: Curator's DistributedQueue (lock=<lock path>: lock-safe; done=<path>: each
-- item's consumption creates <done>/<item> in the same multi that removes it; multi=k: every k-th
-- message put holds 3 items). Lock-safe consumers log S <item> when fn starts, C <item> after the
-- removal committed.
local q = client:queue(assert(opt.path, "path="), opt.format and { format = opt.format, lock_path = opt.lock } or nil)
line("R")
local n, failed = 0, nil

if opt.mode == "produce" then
  local cos, count = num("cos", 1), num("count", 100)
  for first = 1, cos do
    client:spawn(function() -- coroutine `first` puts items first, first + cos, ...
      local multi = num("multi", 0)
      local i, m = first, 0
      while i <= count do
        m = m + 1
        local items = { opt.prefix .. "-" .. i }
        if multi > 0 and m % multi == 0 then -- 3 items of this coroutine's share in one message
          for k = 1, 2 do
            if i + k * cos <= count then items[#items + 1] = opt.prefix .. "-" .. (i + k * cos) end
          end
        end
        local name, msg = q:put(opt.format and items or items[1])
        if not name then failed = msg return end
        for _, item in ipairs(items) do line("P " .. item) end
        n = n + #items
        i = i + #items * cos
      end
    end)
  end
else
  local poll, stop, work = num("poll", 1), assert(opt.stop, "stop="), num("work_ms", 0) / 1000
  local function stopped()
    local f = io.open(stop)
    if f then f:close() end
    return f ~= nil
  end
  for _ = 1, num("cos", 1) do
    client:spawn(function()
      while not failed do
        local last = stopped()
        local data, msg, code
        if opt.lock then
          data, msg, code = q:take(poll, function(items, m)
            local t = opt.done and m:transaction()
            for _, item in ipairs(items) do
              line("S " .. item)
              if t then t:create(opt.done .. "/" .. item, "") end
            end
            if work > 0 then client:sleep(work) end
          end)
          if data then
            for _, item in ipairs(data) do line("C " .. item) end
            n = n + #data
            data = nil
            msg = nil
          end
          if code == "ELOST" then code, msg = nil, nil end -- the item stays for another consumer
        else
          data, msg, code = q:take(poll)
          if type(data) == "table" then data = table.concat(data, "\nT ") end
        end
        if data then
          line("T " .. data)
          n = n + 1
          if work > 0 then client:sleep(work) end
        elseif code and code ~= "ETIMEDOUT" then
          failed = msg
          return
        elseif code and last then
          return
        end
      end
    end)
  end
end

local ok, rerr = client:run(num("max", 120))
if not ok then failed = failed or rerr end
if failed then
  line("X " .. tostring(failed):gsub("\n", " "))
  os.exit(1)
end
line("D " .. n)
client:close()
os.exit(0)
