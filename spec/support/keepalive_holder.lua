-- spec/support/keepalive_holder.lua: a keepalive holder whose owner calls into the library only
-- every 50-100 ms (spec/34, H1). A testing.worker script:
--   args: hosts, path, out file, seconds (how long at most), seed
-- Connects with keepalive (session 2 s), takes a mutex at path, writes "H <ms>", then sleeps
-- 50-100 ms at a time (os.execute: the owner is away from the library, the keepalive thread
-- drives the client) and asks is_held() after each sleep; writes "L <ms>" when it first says
-- false (zklock.core.now(): when the owner learned of the loss), "E <message>" on a failure and
-- "END" when done.
local zklock = require("zklock")
local core = require("zklock.core")

local hosts, path, out, seconds, seed = ...
local f = assert(io.open(out, "a"))
f:setvbuf("line")
local function say(...) f:write(table.concat({ ... }, " "), "\n") end

local c = assert(zklock.connect(hosts, { session_timeout = 2, keepalive = true, identity = "ka-holder",
                                         log_level = "none" }))
local m = c:mutex(path)
local ok, err = m:acquire(10)
if not ok then
  say("E", (tostring(err):gsub("%s", "_")))
  os.exit(1)
end
say("H", ("%.3f"):format(core.now()))
local x = tonumber(seed) or 1
local deadline = core.now() + tonumber(seconds) * 1000
while core.now() < deadline do
  x = (x * 1103515245 + 12345) % 2147483648
  os.execute(("sleep %.3f"):format((50 + x % 51) / 1000))
  if not m:is_held() then
    say("L", ("%.3f"):format(core.now()))
    break
  end
end
say("END")
pcall(c.close, c)
