-- zklock under libuv (luv): ten coroutines made by zluv.spawn take turns on a ZooKeeper lock
-- while a uv timer of the same loop keeps ticking.
--
--   lua5.4 examples/luv.lua                      starts a throwaway ZooKeeper on 127.0.0.1
--   ZK_HOSTS=host:port lua5.4 examples/luv.lua   uses yours (under /zklock-examples)
--   (luajit works too, with build-jit/)
local root = (arg and arg[0] or ""):match("^(.*)/examples/[^/]*$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. (jit and "/build-jit/?.so;" or "/build/?.so;") .. package.cpath

local uv = require("luv")
local zklock = require("zklock")
local zluv = require("zklock.adapters.luv")

local zk = not os.getenv("ZK_HOSTS") and require("zklock.testing").server{}
local ok, err = pcall(function()
  local client = assert(zklock.connect(os.getenv("ZK_HOSTS") or zk.hosts))
  zluv.attach(client, uv)                 -- a uv poll on the client's fd + one uv timer

  local ticker = uv.new_timer()           -- the rest of the program is not blocked
  ticker:start(20, 20, function() io.write("."); io.flush() end)

  local path = ("/zklock-examples/luv-%d"):format(os.time())
  local counter, done = 0, 0
  for i = 1, 10 do
    zluv.spawn(client, function()
      local m = client:mutex(path)
      assert(m:acquire(10))               -- suspends this coroutine only
      local v = counter
      client:sleep(0.05)                  -- a uv timer; others run meanwhile
      counter = v + 1
      print(("\ncoroutine %2d holds the lock, token %d, counter -> %d"):format(i, m:token(), counter))
      assert(m:release())
      done = done + 1
      if done == 10 then
        ticker:close()
        client:close()                    -- closes the client's uv handles: uv.run() returns
      end
    end)
  end
  uv.run()
  print(("\ncounter = %d (expected 10)"):format(counter))
end)
if zk then zk:stop() end
assert(ok, err)
