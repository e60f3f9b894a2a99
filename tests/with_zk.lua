-- tests/with_zk.lua CMD ARGS...: run a command with ZK_HOSTS pointing at a throwaway ZooKeeper
-- started (and always stopped) by zklock.testing. Exits with the command's status.
--   lua5.4 tests/with_zk.lua ctest --test-dir build
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local testing = require("zklock.testing")

local function shq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local argv = {}
for i = 1, #arg do argv[#argv + 1] = shq(arg[i]) end
if #argv == 0 then
  io.stderr:write("usage: with_zk.lua command [args...]\n")
  os.exit(2)
end
local zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
local ok, how, code = os.execute("ZK_HOSTS=" .. shq(zk.hosts) .. " " .. table.concat(argv, " "))
zk:stop()
if type(ok) == "number" then code = ok; ok = code == 0 end -- Lua 5.1 / LuaJIT
os.exit(ok and 0 or (how == "exit" and code or 1))
