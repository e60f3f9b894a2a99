-- bench/tools/server_gone.lua - reproduces a zklock problem found while benchmarking (see
-- bench/RESULTS.md, "Problems found", A): a holder and N queued waiters; the server is killed;
-- does the client report SUSPENDED/EXPIRED and fail the acquires with ESESSION, as documented?
--
--   lua5.4 bench/tools/server_gone.lua [N=2000] [seconds to watch=20]
--
-- With N = 100 it does; with N = 2000 (on a 2-core machine) nothing is reported, is_held() stays
-- true and the process spins at 100 % CPU reconnecting. Bounded: returns after `seconds`.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("ZKL_BUILD") or "bench/out/build") .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local core = require("zklock.core")

local N, WATCH = tonumber(arg[1] or 2000), tonumber(arg[2] or 20)
local zk = testing.server{}
local c = assert(zklock.connect(zk.hosts, { session_timeout = 10 }))
local m = c:mutex("/server-gone/x")
local events, t_kill = {}, nil
local function t() return core.now() / 1000 - (t_kill or 0) end
c:on_session(function(s) events[#events + 1] = ("%+.1f s  session %s"):format(t(), s) end)
m:on_lost(function(s) events[#events + 1] = ("%+.1f s  holder on_lost %s"):format(t(), s) end)
assert(m:acquire(5))
local failed, codes = 0, {}
for _ = 1, N do
  c:spawn(function()
    local _, _, code = m:acquire(WATCH + 60)
    failed = failed + 1
    codes[code or "ok"] = (codes[code or "ok"] or 0) + 1
  end)
end
c:spawn(function()
  c:sleep(0.5)
  zk:kill()
  t_kill = core.now() / 1000
  events[#events + 1] = "+0.0 s  server killed (SIGKILL)"
end)
local cpu0 = os.clock()
c:run(WATCH)
print(("N = %d waiters, watched %g s after the kill; session timeout 10 s"):format(N, WATCH))
for _, e in ipairs(events) do print("  " .. e) end
print(("  acquires finished: %d of %d %s"):format(failed, N, (function()
  local p = {}
  for k, v in pairs(codes) do p[#p + 1] = k .. "=" .. v end
  return "(" .. table.concat(p, ", ") .. ")"
end)()))
print(("  client state %s, holder is_held() = %s, sessions_expired = %d, client CPU %.1f s")
  :format(c.state, tostring(m:is_held()), c:stats().sessions_expired, os.clock() - cpu0))
c:close()
zk:stop() -- already killed: removes its temporary directory
os.exit(0)
