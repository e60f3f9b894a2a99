-- tests/tsan_keepalive.lua: the keepalive thread and the Lua thread sharing one client, for a
-- ThreadSanitizer build of the module. It drives the binding (zklock.core) directly, so that
-- the Lua thread reads log lines, state and counters right after staying away, while the
-- keepalive thread has been driving the client meanwhile, with no locked call in between. It
-- spawns no process (under an LD_PRELOADed libtsan every child would inherit it), so the server
-- comes from outside:
--   lua5.4 tests/with_zk.lua env LD_PRELOAD=$(gcc -print-file-name=libtsan.so) \
--     TSAN_OPTIONS=halt_on_error=1:exitcode=66 lua5.4 tests/tsan_keepalive.lua build-tsan
-- Exits 0 after "ok"; a data race makes TSan end the process with status 66.
local build = arg[1] or "build-tsan"
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath
local core = require("zklock.core")
local hosts = assert(os.getenv("ZK_HOSTS"), "ZK_HOSTS not set (run under tests/with_zk.lua)")

local function away(seconds) -- stay out of the library without a system call or a child
  local t = core.now() + seconds * 1000 -- wall clock: os.clock() counts the other thread too
  while core.now() < t do end
end

local DEBUG = 4
local c = assert(core.new(hosts, 1200, "tsan", DEBUG, true))
local lines, connected = 0, false
for _ = 1, 40 do -- ~6 s: pings and their log lines come from the keepalive thread meanwhile
  away(0.15)
  lines = lines + #(c:logs() or {})
  connected = connected or c:state() == core.STATE_CONNECTED
  assert(c:session_count() <= 1, "the session was lost")
end
assert(connected, "never connected")
assert(lines > 0, "no log line")
c:close()
c:free()
print(("ok: %d log lines"):format(lines))
