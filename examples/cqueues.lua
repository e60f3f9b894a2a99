-- zklock under cqueues: ten coroutines of one controller take turns on a ZooKeeper lock while
-- the rest of the program (a ticker) keeps running in the same loop.
--
--   lua5.4 examples/cqueues.lua                      starts a throwaway ZooKeeper on 127.0.0.1
--   ZK_HOSTS=host:port lua5.4 examples/cqueues.lua   uses yours (under /zklock-examples)
--   (luajit works too, with build-jit/)
local root = (arg and arg[0] or ""):match("^(.*)/examples/[^/]*$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. (jit and "/build-jit/?.so;" or "/build/?.so;") .. package.cpath

local cqueues = require("cqueues")
local zklock = require("zklock")
local zcq = require("zklock.adapters.cqueues")

local zk = not os.getenv("ZK_HOSTS") and require("zklock.testing").server{}
local ok, err = pcall(function()
  local client = assert(zklock.connect(os.getenv("ZK_HOSTS") or zk.hosts))
  local cq = cqueues.new()
  zcq.attach(client, cq)                  -- the client's pump is now a coroutine of cq

  local path = ("/zklock-examples/cqueues-%d"):format(os.time())
  local counter, done = 0, 0
  for i = 1, 10 do
    cq:wrap(function()
      local m = client:mutex(path)
      assert(m:acquire(10))               -- suspends this coroutine only
      local v = counter
      cqueues.sleep(0.05)                 -- others run meanwhile; the lock keeps them out
      counter = v + 1
      print(("\ncoroutine %2d holds the lock, token %d, counter -> %d"):format(i, m:token(), counter))
      assert(m:release())
      done = done + 1
      if done == 10 then client:close() end -- the pump ends with the client
    end)
  end
  cq:wrap(function()                      -- the rest of the program is not blocked
    while client.state ~= "CLOSED" do io.write("."); io.flush(); cqueues.sleep(0.02) end
  end)
  assert(cq:loop())
  print(("\ncounter = %d (expected 10)"):format(counter))
end)
if zk then zk:stop() end
assert(ok, err)
