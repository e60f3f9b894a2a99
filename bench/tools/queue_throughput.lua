-- bench/tools/queue_throughput.lua - queue throughput, zklock's client:queue against Curator's
-- SimpleDistributedQueue (spec/support/peers/QueuePeer.java) and, lock-safe, its DistributedQueue
-- (DQueuePeer.java), on one local ZooKeeper server:
--   * put: N items by one sequential producer;
--   * take: N items drained by 1 and by 8 consumers (zklock: coroutines of one client; Curator:
--     threads of one CuratorFramework);
-- with items/s and the requests the server received per item (mntr zk_packets_received delta:
-- every request of the run, pings and the Java peer's connection setup included).
--
--   lua5.4 bench/tools/queue_throughput.lua [N=2000]      (from the repository root)
--   ZKL_BUILD=build lua5.4 bench/tools/queue_throughput.lua
-- The JVM's own start is not timed (the peer reports first to last take or put).
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = (os.getenv("ZKL_BUILD") or "build") .. "/?.so;" .. package.cpath
local testing = require("zklock.testing")
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")
local qp = require("support.queue_peers")

local N = tonumber(arg[1] or 2000)
local zk = testing.server{}
local c = assert(zklock.connect(zk.hosts, { session_timeout = 10 }))
assert(c:create("/bench", ""))
local function packets() return util.mntr(zk, "zk_packets_received") end
local function sec() return core.now() / 1000 end
local rows = {}
local function row(what, n, seconds, reqs)
  rows[#rows + 1] = ("| %-36s | %6d | %8.0f | %6.2f |"):format(what, n, n / seconds, reqs / n)
  io.stderr:write(rows[#rows], "\n")
end

-- fill `path` with N items fast (transactions of 500 creates), for the take runs
local function fill(path)
  assert(c:create(path, "", { parents = true }))
  local i = 0
  while i < N do
    local t = c:transaction()
    for _ = 1, math.min(500, N - i) do
      i = i + 1
      t:create(path .. "/qn-", "item-" .. i, { sequential = true })
    end
    assert(t:commit(30))
  end
end

local function wait_proc(p)
  local deadline = sec() + 600
  while p:alive() and sec() < deadline do util.drive({ c }, 0.05) end
  local t = p:log()
  assert(t.done, p.name .. " failed: " .. table.concat(t.errors, "; ") .. "\n" .. p:output())
  return t
end

-- zklock put
do
  local q = c:queue("/bench/zput")
  local p0, t0 = packets(), sec()
  for i = 1, N do assert(q:put("item-" .. i)) end
  row("zklock put (1 producer)", N, sec() - t0, packets() - p0)
end
-- Curator put
do
  local p0 = packets()
  local p = qp.java("curator", "produce", zk.hosts, "/bench/cput", { count = N, prefix = "item" })
  local t = wait_proc(p)
  row("Curator put (1 producer)", t.done, t.ms / 1000, packets() - p0)
end

for _, consumers in ipairs({ 1, 8 }) do
  -- zklock take
  local path = "/bench/ztake" .. consumers
  fill(path)
  local q = c:queue(path)
  local got = 0
  local p0, t0 = packets(), sec()
  for _ = 1, consumers do
    c:spawn(function()
      while true do
        local data, msg = q:poll()
        if not data then assert(msg == nil, msg) return end
        got = got + 1
      end
    end)
  end
  assert(c:run(600))
  row(("zklock take (%d consumer%s)"):format(consumers, consumers > 1 and "s" or ""), got, sec() - t0,
    packets() - p0)
  assert(got == N, got)
  -- Curator take
  path = "/bench/ctake" .. consumers
  fill(path)
  local stop = os.tmpname() -- exists: the consumers end at the first empty poll
  p0 = packets()
  local p = qp.java("curator", "consume", zk.hosts, path, { poll = 1, stop = stop, threads = consumers })
  local t = wait_proc(p)
  os.remove(stop)
  row(("Curator take (%d consumer thread%s)"):format(consumers, consumers > 1 and "s" or ""), t.done, t.ms / 1000,
    packets() - p0)
  assert(t.done == N, t.done)
end

-- Curator's DistributedQueue (queue- nodes, Curator's framing), lock-safe: zklock's
-- client:queue(path, { format = "curator", lock_path = }) against Curator's own DistributedQueue
-- (spec/support/peers/DQueuePeer.java, its default consumer executor).
do
  local z = c:queue("/bench/dzput", { format = "curator" })
  local p0, t0 = packets(), sec()
  for i = 1, N do assert(z:put("item-" .. i)) end
  row("zklock DistributedQueue put", N, sec() - t0, packets() - p0)
  p0 = packets()
  local p = qp.dqueue("produce", zk.hosts, "/bench/dcput", { count = N, prefix = "item" })
  local t = wait_proc(p)
  row("Curator DistributedQueue put", t.done, t.ms / 1000, packets() - p0)
end
for _, consumers in ipairs({ 1, 8 }) do
  local path, locks = "/bench/dztake" .. consumers, "/bench/dzlocks" .. consumers
  local q = c:queue(path, { format = "curator", lock_path = locks })
  for i = 1, N do assert(q:put("item-" .. i)) end
  local got = 0
  local p0, t0 = packets(), sec()
  for _ = 1, consumers do
    c:spawn(function()
      while true do
        local items, msg = q:poll(function(its) got = got + #its end)
        if not items then assert(msg == nil, msg) return end
      end
    end)
  end
  assert(c:run(600))
  row(("zklock lock-safe take (%d consumer%s)"):format(consumers, consumers > 1 and "s" or ""), got, sec() - t0,
    packets() - p0)
  assert(got == N, got)
end
do
  local path, locks = "/bench/dctake", "/bench/dclocks"
  local q = c:queue(path, { format = "curator", lock_path = locks })
  for i = 1, N do assert(q:put("item-" .. i)) end
  local stop = os.tmpname() -- exists: the consumer ends once no item came for 1 s
  local p0 = packets()
  local p = qp.dqueue("consume", zk.hosts, path, { idle = 1, stop = stop, lock_path = locks })
  local t = wait_proc(p)
  os.remove(stop)
  row("Curator lock-safe consumer", t.done, t.ms / 1000, packets() - p0)
  assert(t.done == N, t.done)
end

print(("\nqueue throughput, N = %d items, one local ZooKeeper %s server\n"):format(N, testing.config.version or ""))
print("| run                                  | items  | items/s  | req/item |")
print("| ------------------------------------ | ------ | -------- | ------ |")
for _, r in ipairs(rows) do print(r) end
c:close()
qp.stop_all()
zk:stop()
