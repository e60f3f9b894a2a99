-- zklock demo: twenty coroutines on two clients share one lock and a counter znode; the
-- fencing token rises with every grant; a lost session is reported to its lock, never hidden.
--
--   lua5.4 examples/demo.lua           starts a throwaway ZooKeeper on 127.0.0.1 and stops it
--   ZK_HOSTS=host:port lua5.4 examples/demo.lua     uses yours (under /zklock-demo)
local root = (arg and arg[0] or ""):match("^(.*)/examples/[^/]*$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. (jit and "/build-jit/?.so;" or "/build/?.so;") .. package.cpath

local zklock = require("zklock")
local testing = require("zklock.testing")

local function say(fmt, ...) io.write((fmt):format(...), "\n"); io.flush() end

local function demo(hosts, throwaway)
  local opts = { session_timeout = 4 }
  local a = assert(zklock.connect(hosts, opts))
  local b = assert(zklock.connect(hosts, opts))
  local base = ("/zklock-demo/run-%d-%d"):format(os.time(), math.random(1e6))
  local lock_path, counter = base .. "/orders", base .. "-counter"
  assert(a:create(counter, "0", { parents = true }))
  say("two clients connected to %s; lock %s", hosts, lock_path)

  -- 1. Ten coroutines per client take the lock in turn and increment a counter znode with a
  --    plain read-modify-write: only the lock keeps the increments from being lost.
  local tokens = {}
  local function worker(client, name)
    local m = client:mutex(lock_path)
    assert(m:acquire(20))
    local value = tonumber((assert(client:get(counter))))
    client:sleep(0.005)
    assert(client:set(counter, tostring(value + 1)))
    tokens[#tokens + 1] = m:token()
    say("  %-6s holds the lock  token %-6d counter %2d -> %2d", name, m:token(), value, value + 1)
    assert(m:release())
  end
  for i = 1, 10 do
    a:spawn(worker, a, "a#" .. i)
    b:spawn(worker, b, "b#" .. i)
  end
  assert(zklock.run({ a, b }, 60))
  local final = tonumber((assert(a:get(counter))))
  local rising = true
  for i = 2, #tokens do rising = rising and tokens[i] > tokens[i - 1] end
  say("counter = %d (expected 20); fencing tokens strictly rising: %s", final, tostring(rising))

  -- 2. Try-once while someone else holds it.
  local ma, mb = a:mutex(lock_path), b:mutex(lock_path)
  assert(ma:acquire(5))
  local ok, err = mb:acquire(0)
  say("b tries once while a holds it: %s, %s", tostring(ok), err)

  -- 3. Loss is reported per lock: expire a's session from outside (throwaway server only).
  if throwaway then
    ma:on_lost(function(state) say("  a's lock reports %s", state) end)
    testing.expire(a)
    for _ = 1, 50 do
      if not ma:is_held() then break end
      a:sleep(0.05)
    end
    say("after a's session expired: a holds it? %s", tostring(ma:is_held()))
    assert(mb:acquire(10))
    say("b acquired it with token %d (a's was %d)", mb:token(), tokens[#tokens])
    local _, msg = ma:release()
    say("a's release after the loss says: %s", tostring(msg))
    assert(mb:release())
  else
    assert(ma:release())
  end

  local s = a:stats()
  say("client a: %d acquisitions, %d creates, %d lists, %d watches armed, %d handoffs without re-listing",
    s.acquired, s.creates, s.lists, s.gets, s.handoffs)
  a:delete(counter)
  a:close()
  b:close()
  assert(final == 20 and rising, "demo failed")
  say("demo ok")
end

math.randomseed(os.time())
local hosts = os.getenv("ZK_HOSTS")
local zk
if not hosts or hosts == "" then
  say("starting a throwaway ZooKeeper on 127.0.0.1 ...")
  zk = testing.server{}
  hosts = zk.hosts
end
local ok, err = pcall(demo, hosts, zk ~= nil)
if zk then zk:stop() end
if not ok then
  io.stderr:write("demo failed: ", tostring(err), "\n")
  os.exit(1)
end
