-- spec/support/fenced_worker.lua: a lock holder that gets paused (SIGSTOP) by
-- spec/47-transactions_spec.lua and, once resumed, writes as if nothing had happened.
--
--   lua5.4 spec/support/fenced_worker.lua HOSTS LOCK DATA DIR MODE SESSION_S
--     MODE "fenced": the write is m:transaction():set(DATA, "stale"):commit()
--     MODE "plain":  the write is client:set(DATA, "stale") (retried while the session is renewed)
-- Writes DIR/held ("<token>") once it holds LOCK, waits for DIR/go (created by the spec while
-- this process is stopped), writes, and puts the outcome in DIR/result: "ok" or "refused <code>".
-- Exits after that, or after 60 s in any case.
local root = arg[0]:match("^(.*)/spec/support/[^/]*$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. (jit and "/build-jit/?.so;" or "/build/?.so;") .. package.cpath
local zklock = require("zklock")
local testing = require("zklock.testing")

local hosts, lock, data, dir, mode, session = arg[1], arg[2], arg[3], arg[4], arg[5], tonumber(arg[6])
local c = assert(zklock.connect(hosts, { session_timeout = session, log_level = "none" }))
local m = c:mutex(lock)
assert(m:acquire(30))
testing.write_file(dir .. "/held", tostring(m:token()))
local deadline = testing.now() + 60
while not testing.exists(dir .. "/go") do
  if testing.now() > deadline then os.exit(3) end
  testing.sleep(0.02) -- a busy worker: it does not drive the client while it works
end
local ok, code
if mode == "fenced" then
  local _, _, c1 = m:transaction():set(data, "stale"):commit(10)
  ok, code = c1 == nil, c1
else
  for _ = 1, 50 do -- a naive writer: retries until the write goes through
    local r, _, c1 = c:set(data, "stale", -1, { timeout = 10 })
    ok, code = r ~= nil, c1
    if ok then break end
    c:sleep(0.1)
  end
end
testing.write_file(dir .. "/result", ok and "ok" or ("refused " .. tostring(code)))
c:close()
