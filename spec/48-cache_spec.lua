-- Caches kept current by watches (client:cache) against a real ZooKeeper server: the first sync
-- and its events, updates, deletes, a delete and re-create seen as removed+added (czxid, not
-- version), depth limits, a missing root, a reconnection on the same session (one barrier
-- read), max_nodes, max_watch_bytes (on a server with a small jute.maxbuffer: the reconnection
-- that never ends past it, the cache that stops before it, a tree just under it that resyncs),
-- handler replacement, close (no watch, no event, no memory left; a second cache of the tree and
-- a get on it keep theirs), the watches held at the
-- server, requests per change, bad input; the CPU a 10,000-node cache's reconnection costs its
-- process (the C client's work per session event).
--   busted --lua=lua5.4 spec/48-cache_spec.lua
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")
local fixture = require("support.fixture")

local pack, assert_code = util.pack, util.assert_code

-- a recorder for a cache's events: list of { event, path, version, czxid, data }
local function recorder(cache)
  local evs = {}
  cache:on_change(function(event, _, path, stat, data)
    evs[#evs + 1] = { event = event, path = path, version = stat and stat.version, czxid = stat and stat.czxid,
                      mzxid = stat and stat.mzxid, data = data }
  end)
  return evs
end

local function names(evs, from)
  local out = {}
  for i = from or 1, #evs do out[#out + 1] = evs[i].event .. " " .. evs[i].path end
  return out
end

local function tree_of(cache)
  local out = {}
  for path, _, data in cache:walk() do out[#out + 1] = path .. "=" .. tostring(data) end
  return out
end

describe("client:cache", function()
  local zk
  local fx = fixture.server({}, { each = true }, function(s) zk = s end)
  local connect = fx.connect

  it("loads a tree, reports added then initialized, and serves get/children/walk from memory", function()
    local a, b = connect("c-a"), connect("c-b")
    assert(b:create("/t/x", "1", { parents = true }))
    assert(b:create("/t/x/y", "2"))
    assert(b:create("/t/z", "3"))
    local cache = a:cache("/t")
    assert.are.equal("cache", zklock.type(cache))
    local evs = recorder(cache)
    assert(cache:await(10))
    assert.are.same({ "added /t", "added /t/x", "added /t/z", "added /t/x/y", "initialized /t" }, names(evs))
    assert.are.same({ "/t=", "/t/x=1", "/t/x/y=2", "/t/z=3" }, tree_of(cache))
    assert.are.same({ "x", "z" }, cache:children("/t"))
    assert.are.same({ "x", "z" }, cache:children())
    local data, stat = cache:get("/t/x/y")
    assert.are.equal("2", data)
    assert.are.equal(0, stat.version)
    assert.are.equal(4, cache:size())
    assert_code("ZNONODE", pack(cache:get("/t/none")))
    assert_code("ZNONODE", pack(cache:children("/elsewhere")))
    -- requests: one get per node, one listing per node; watches: the same, held at the server
    local st = cache:stats()
    assert.are.equal(8, st.reads)
    assert.are.equal(8, st.watches)
    assert.are.equal(8, util.mntr(zk, "zk_watch_count"))
    -- from memory: with the server paused, reads still answer
    assert.are.same({ "/t=", "/t/x=1", "/t/x/y=2", "/t/z=3" }, tree_of(cache))
  end)

  it("follows updates, deletes and new nodes; a delete and re-create is removed+added", function()
    local a, b = connect("c-a"), connect("c-b")
    -- /u persistent: a container parent (parents = true) can be reaped by the server between the
    -- delete of its only child and the re-create below (ZNONODE; seen once in CI)
    assert(b:create("/u", ""))
    assert(b:create("/u/x", "1"))
    local cache = a:cache("/u")
    local evs = recorder(cache)
    assert(cache:await(10))
    local n0 = #evs
    assert(b:set("/u/x", "2"))
    assert(util.wait_until(function() return #evs > n0 end, 10, { a, b }))
    assert.are.same({ "updated /u/x" }, names(evs, n0 + 1))
    assert.are.equal("2", evs[#evs].data)
    assert.are.equal(1, evs[#evs].version)
    -- delete and make again with the same data: the version is 0 again on both, the czxid differs
    local _, st1 = cache:get("/u/x")
    n0 = #evs
    assert(b:delete("/u/x"))
    assert(b:create("/u/x", "2"))
    assert(util.wait_until(function()
      local _, s = cache:get("/u/x")
      return s and s.czxid ~= st1.czxid
    end, 10, { a, b }))
    util.drive({ a, b }, 0.2)
    local seen = names(evs, n0 + 1)
    assert.are.same({ "removed /u/x", "added /u/x" }, seen)
    assert.are.equal(0, evs[#evs].version)
    -- a new child, a deleted child
    n0 = #evs
    assert(b:create("/u/x/k", "v"))
    assert(util.wait_until(function() return cache:get("/u/x/k") end, 10, { a, b }))
    assert(b:delete("/u/x/k"))
    assert(util.wait_until(function() return not cache:get("/u/x/k") end, 10, { a, b }))
    assert.are.same({ "added /u/x/k", "removed /u/x/k" }, names(evs, n0 + 1))
    -- requests per change (the cache's own and the client's count of plain ops agree):
    -- a set: 1 (the get that re-arms the data watch); a new leaf: 3 (the parent's listing, the
    -- child's get and listing); a deleted leaf: 3 (its get and listing find ZNONODE, the parent's
    -- listing)
    local function cost(fn, done)
      local r0, o0 = cache:stats().reads, a:stats().ops
      fn()
      assert(util.wait_until(done, 10, { a, b }))
      util.drive({ a, b }, 0.2)
      local r = cache:stats().reads - r0
      assert.are.equal(r, a:stats().ops - o0)
      return r
    end
    assert.are.equal(1, cost(function() assert(b:set("/u/x", "5")) end,
      function() return select(1, cache:get("/u/x")) == "5" end))
    assert.are.equal(3, cost(function() assert(b:create("/u/x/n", "")) end,
      function() return cache:get("/u/x/n") end))
    assert.are.equal(3, cost(function() assert(b:delete("/u/x/n")) end,
      function() return not cache:get("/u/x/n") end))
    -- the same number of watches as before the changes: each fired one is armed again
    util.drive({ a, b }, 0.2)
    assert.are.equal(4, cache:stats().watches)
    assert.are.equal(4, util.mntr(zk, "zk_watch_count"))
  end)

  it("depth 0 is the node alone, depth 1 its children; data = false keeps stats only", function()
    local a, b = connect("c-a"), connect("c-b")
    assert(b:create("/d/x/y", "deep", { parents = true }))
    assert(b:set("/d", "top"))
    local c0 = a:cache("/d", { depth = 0 })
    local c1 = a:cache("/d", { depth = 1, data = false })
    assert(c0:await(10))
    assert(c1:await(10))
    assert.are.same({ "/d=top" }, tree_of(c0))
    assert.are.same({ "/d=false", "/d/x=false" }, tree_of(c1))
    assert.are.same({}, c0:children("/d"))
    local data, stat = c1:get("/d/x")
    assert.is_false(data)
    assert.are.equal(1, stat.num_children)
    assert.are.equal(1, c0:stats().watches)
    assert.are.equal(3, c1:stats().watches) -- /d data + children, /d/x data
    c0:close()
    c1:close()
    -- the root of the tree itself, one level
    local top = a:cache("/", { depth = 1 })
    assert(top:await(10))
    local kids = top:children("/")
    assert.truthy(util.index_of(kids, "d"))
    assert.truthy(util.index_of(kids, "zookeeper"))
    assert.truthy(top:get("/d"))
    assert_code("ZNONODE", pack(top:get("/d/x")))
    top:close()
  end)

  it("a missing root is watched until it is made; a deleted root empties the cache", function()
    local a, b = connect("c-a"), connect("c-b")
    local cache = a:cache("/r")
    local evs = recorder(cache)
    assert(cache:await(10))
    assert.are.same({ "initialized /r" }, names(evs))
    assert.are.equal(0, cache:size())
    assert(b:create("/r", "here"))
    assert(b:create("/r/k", ""))
    assert(util.wait_until(function() return cache:size() == 2 end, 10, { a, b }))
    assert(b:delete("/r/k"))
    assert(b:delete("/r"))
    assert(util.wait_until(function() return cache:size() == 0 end, 10, { a, b }))
    assert.are.same({ "initialized /r", "added /r", "added /r/k", "removed /r/k", "removed /r" }, names(evs))
    util.drive({ a, b }, 0.2)
    assert.are.equal(1, cache:stats().watches) -- the exists watch on /r again
  end)

  it("a reconnection on the same session: a change missed meanwhile, one barrier read, initialized again", function()
    local net = testing.proxy(zk.hosts)
    finally(function() pcall(net.heal, net); util.close_all(); net:stop() end)
    local a = util.connect(net.hosts, { session_timeout = 6, identity = "c-a" })
    local b = connect("c-b")
    net.pump = function(s) util.drive({ a, b }, s) end
    assert(b:create("/s/x", "1", { parents = true }))
    assert(b:create("/s/y", "1"))
    local cache = a:cache("/s")
    local evs = recorder(cache)
    assert(cache:await(10))
    local sid, reads = a:session(), cache:stats().reads
    net:cut(10)
    assert(util.wait_until(function() return a.state ~= "CONNECTED" end, 10, { a, b }))
    assert(b:set("/s/x", "2"))
    local n0 = #evs
    net:heal()
    assert(util.wait_until(function() return cache:is_initialized() and select(1, cache:get("/s/x")) == "2" end,
      15, { a, b }))
    util.drive({ a, b }, 0.3)
    assert.are.equal(sid, (a:session()))
    assert.are.same({ "updated /s/x", "initialized /s" }, names(evs, n0 + 1))
    -- the barrier read and the get that re-armed /s/x's data watch: no node read again
    assert.are.equal(2, cache:stats().reads - reads)
    assert.are.equal(6, cache:stats().watches)
    cache:close()
  end)

  it("max_nodes: the cache stops with ERANGE and says so once", function()
    local a, b = connect("c-a"), connect("c-b")
    for i = 1, 5 do assert(b:create("/m/n" .. i, "", { parents = true })) end
    local cache = a:cache("/m", { max_nodes = 4 })
    local evs = recorder(cache)
    local ok, msg, code = cache:await(10)
    assert.is_nil(ok)
    assert.are.equal("ERANGE", code)
    assert.matches("max_nodes = 4", msg)
    local failed = 0
    for _, e in ipairs(evs) do if e.event == "failed" then failed = failed + 1 end end
    assert.are.equal(1, failed)
    assert_code("ERANGE", pack(cache:get("/m")))
    assert.are.equal(0, cache:stats().watches)
    assert.is_false(cache:is_initialized())
  end)

  it("on_change replaces, nil removes, returns the cache; close drops everything", function()
    local a, b = connect("c-a"), connect("c-b")
    assert(b:create("/h/x", "1", { parents = true }))
    local cache = a:cache("/h")
    assert(cache:await(10))
    local first, second = 0, 0
    assert.are.equal(cache, cache:on_change(function() first = first + 1 end))
    assert.are.equal(cache, cache:on_change(function() second = second + 1 end))
    assert(b:set("/h/x", "2"))
    assert(util.wait_until(function() return second == 1 end, 10, { a, b }))
    assert.are.equal(0, first)
    assert.are.equal(cache, cache:on_change(nil))
    assert(b:set("/h/x", "3"))
    assert(util.wait_until(function() return select(1, cache:get("/h/x")) == "3" end, 10, { a, b }))
    assert.are.equal(1, second)
    -- close: no event after it, client-side watch state empty, nothing pending, collectable
    cache:on_change(function() second = second + 1 end)
    assert.is_true(cache:close())
    assert.is_true(cache:close())
    assert(b:set("/h/x", "4"))
    util.drive({ a, b }, 0.3)
    assert.are.equal(1, second)
    assert.are.equal(0, a:pending())
    assert.has_error(function() cache:get("/h") end, "get: the cache of /h is closed")
    local weak = setmetatable({ cache }, { __mode = "v" })
    cache = nil -- luacheck: ignore
    for _ = 1, 3 do collectgarbage() end
    assert.is_nil(weak[1])
    -- the server's watch on /h (unfired) goes with the session
    a:close()
    assert(util.wait_until(function() return util.mntr(zk, "zk_watch_count") == 0 end, 10, { b }))
  end)

  it("a node at the depth limit counts one watch: the cache's share is what the server holds", function()
    local a, b = connect("c-a"), connect("c-b")
    assert(b:create("/dl/x/y", "", { parents = true }))
    assert(b:create("/dl/zz", ""))
    local cache = a:cache("/dl", { depth = 1 })
    assert(cache:await(10))
    -- /dl data and children, /dl/x and /dl/zz data only (no listing at the limit)
    -- what the server holds, as the client's SetWatches would carry it (4 + #path per watch):
    -- wchp lists a watched path once whatever its kinds; 4 watches on 3 paths, /dl's two
    assert.are.equal(4, util.mntr(zk, "zk_watch_count"))
    local paths, held = {}, 0
    for path, sessions in pairs(util.watches_by_path(zk)) do
      paths[#paths + 1] = path
      held = held + #sessions * (4 + #path)
    end
    table.sort(paths)
    assert.are.same({ "/dl", "/dl/x", "/dl/zz" }, paths)
    held = held + (4 + #"/dl")
    assert.are.equal(held, cache:stats().watch_bytes)
    cache:close()
    assert.are.equal(0, cache:stats().watch_bytes)
  end)

  it("two caches on one client draw from its max_watch_bytes; closing the first lets another start", function()
    -- each tree: a root and 3 children, 2 x (4 + 3) + 3 x 2 x (4 + 6) = 74 bytes of watches; with
    -- the message's 28 bytes one tree fits in 150 bytes, two do not
    local a, b = connect("c-a", { max_watch_bytes = 150 }), connect("c-b")
    for _, root in ipairs({ "/p1", "/p2" }) do
      assert(b:create(root, ""))
      for i = 1, 3 do assert(b:create(("%s/c%d"):format(root, i), "")) end
    end
    local first = a:cache("/p1")
    assert(first:await(10))
    assert.are.equal(74, first:stats().watch_bytes)
    local second = a:cache("/p2")
    local ok, msg, code = second:await(10)
    assert.is_nil(ok, "the second cache started: the budget is not the client's")
    assert.are.equal("ERANGE", code)
    assert.matches("ERANGE: cache /p2: the client's watches would pass its max_watch_bytes = 150 bytes", msg, 1, true)
    assert.matches("the client's other caches 74,", msg, 1, true)
    assert_code("ERANGE", pack(second:get("/p2")))
    second:close()
    first:close()
    local third = a:cache("/p2")
    assert.is_true(third:await(10))
    assert.are.equal(4, third:size())
    assert.are.equal(74, third:stats().watch_bytes)
    third:close()
  end)

  it("two caches of one tree on one client: closing one leaves the other's watches and a get's", function()
    -- the ZooKeeper client keeps one watcher per path for all of a client's reads there, so the
    -- first cache's close must not have it drop the watches the second cache and a get still use
    local a, b = connect("c-a"), connect("c-b")
    assert(b:create("/tw/x", "1", { parents = true }))
    local first, second = a:cache("/tw"), a:cache("/tw")
    assert(first:await(10))
    assert(second:await(10))
    local evs = recorder(second)
    local data, _, w = a:get("/tw/x", { watch = true })
    assert.are.equal("1", data)
    first:close()
    assert(b:set("/tw/x", "2"))
    assert(b:create("/tw/y", "n"))
    assert(util.wait_until(function() return #evs >= 2 end, 10, { a, b }), "the second cache missed a change")
    table.sort(evs, function(p, q) return p.path < q.path end)
    assert.are.same({ "updated /tw/x", "added /tw/y" }, names(evs))
    assert.are.equal("changed", w:wait(10))
    assert(b:delete("/tw/y"))
    assert(util.wait_until(function() return #evs == 3 end, 10, { a, b }))
    assert.are.same({ "removed /tw/y" }, names(evs, 3))
    second:close()
  end)

  it("bad input raises a clear error naming the argument", function()
    local a = connect("c-a")
    assert.has_error(function() a:cache("nope") end)
    assert.has_error(function() a:cache("/p", { depth = -1 }) end,
      "bad argument #2 to 'cache' (option 'depth': expected an integer >= 0 or math.huge, got -1 (number))")
    assert.has_error(function() a:cache("/p", { max_nodes = 0 }) end,
      "bad argument #2 to 'cache' (option 'max_nodes': expected an integer >= 1, got 0 (number))")
    assert.has_error(function() a:cache("/p", { dept = 1 }) end,
      "bad argument #2 to 'cache' (unknown option 'dept' (known: data, depth, max_nodes, max_watch_bytes))")
    local cache = a:cache("/p")
    assert.has_error(function() cache:on_change(42) end,
      "bad argument #1 to 'on_change' (expected a function(event, cache, path, stat, data) or nil, got 42 (number))")
    assert.has_error(function() cache:await(-1) end)
    assert.has_error(function() cache.get("/p") end)
    cache:close()
  end)
end)

-- A root that is a container: the server reaps it once its last child goes, and a create with
-- parents makes it again. The cache's client is behind a proxy that delays everything by DELAY
-- ms each way, so the listing it sends when the child goes reaches the server after the reap, and
-- the get it sends when the reap fires reaches it after the root was made again (when the reap
-- falls 0.1 to 1.2 s after the delete: most rounds with a check every second). The cache must
-- list the new root (once it missed its children for good: spec/39, spec/49).
describe("client:cache of a container root the server reaps", function()
  local zk, net
  local DELAY = 600 -- ms
  fixture.server({ container_check_ms = 1000 },
    { own = "reaps containers every second: the reap falls between the cache's delayed reads" },
    function(s) zk = s end)
  after_each(function()
    if net then net:stop() end
    net = nil
    util.close_all()
  end)

  it("follows the root reaped and made again with a child (4 rounds)", function()
    net = testing.proxy(zk.hosts)
    local a = util.connect(net.hosts, { identity = "c-a" })
    local b = util.connect(zk.hosts, { identity = "c-b" })
    assert(b:create("/rc/k1", "", { parents = true }))
    local cache = a:cache("/rc", { depth = 1 })
    local evs = recorder(cache)
    assert(cache:await(10))
    for round = 1, 4 do
      local kid, next_kid = "/rc/k" .. round, "/rc/k" .. (round + 1)
      assert(util.wait_until(function() return cache:get(kid) end, 10, { a, b }),
        ("round %d: %s not in the cache: %s"):format(round, kid, table.concat(names(evs), ", ")))
      net:delay(DELAY)
      local t0 = util.now()
      assert(b:delete(kid))
      assert(util.wait_until(function() return not b:exists("/rc") end, 5, { a, b }),
        "round " .. round .. ": the server did not reap the emptied container /rc")
      -- made again once the cache's listing (sent when the child went) has reached the server
      util.drive({ a, b }, math.max(0, t0 + 2 * DELAY / 1000 + 0.1 - util.now()))
      assert(b:create(next_kid, "", { parents = true }))
      net:delay(0)
    end
    assert(util.wait_until(function() return cache:get("/rc/k5") end, 10, { a, b }),
      "the cache missed the last re-made root's child: " .. table.concat(names(evs), ", "))
    assert.are.same({ "k5" }, cache:children("/rc"))
    cache:close()
  end)
end)

-- The 3.8 C client sends every watch again in one SetWatches message on a reconnection; a server
-- closes a connection whose message passes its jute.maxbuffer, and the client retries the same
-- message for ever. A server with a 64 KiB jute.maxbuffer makes that reachable with a small tree.
describe("client:cache max_watch_bytes", function()
  local LIMIT = 65536
  local fx = fixture.server({ jvm_opts = { "-Djute.maxbuffer=" .. LIMIT } }, { own = "a small jute.maxbuffer" })
  local connect = fx.connect

  -- root and parents of 100 leaves, n nodes in all; returns the bytes of their watch paths (2 x (4 + #path))
  local function tree(c, root, n)
    assert(c:create(root, ""))
    local made, bytes, p = 1, 2 * (4 + #root), 0
    while made < n do
      p = p + 1
      local t = c:transaction()
      local parent = ("%s/p%03d"):format(root, p)
      t:create(parent, "")
      made, bytes = made + 1, bytes + 2 * (4 + #parent)
      for i = 1, 100 do
        if made >= n then break end
        local leaf = ("%s/l%03d"):format(parent, i)
        t:create(leaf, "")
        made, bytes = made + 1, bytes + 2 * (4 + #leaf)
      end
      assert(t:commit())
    end
    return bytes
  end

  local function restart_and_resync(a, b, cache, timeout)
    local inits = 0
    cache:on_change(function(event) if event == "initialized" then inits = inits + 1 end end)
    fx.zk:kill()
    util.drive({ a, b }, 0.3)
    fx.zk:restart()
    return util.drive_until({ a, b }, function() return inits >= 1 end, timeout)
  end

  it("a tree whose watches pass it stops with ERANGE naming the option", function()
    local a, b = connect("w-a", { session_timeout = 30 }), connect("w-b", { session_timeout = 30 })
    local bytes = tree(b, "/w1", 2500) -- about 80 KB of watches: a reconnection would never finish
    assert.is_true(bytes > LIMIT)
    local cache = a:cache("/w1", { max_watch_bytes = LIMIT - 28 })
    local ok, msg, code = cache:await(30)
    assert.is_nil(ok)
    assert.are.equal("ERANGE", code)
    assert.matches("max_watch_bytes = 65508", msg, 1, true)
    assert.are.equal(0, cache:stats().watches)
  end)

  it("the premise: past the server's limit the reconnection fails over and over", function()
    local a, b = connect("w-a", { session_timeout = 30 }), connect("w-b", { session_timeout = 30 })
    local bytes = tree(b, "/w3", 2200) -- about 75 KB of watches
    assert.is_true(bytes + 28 > LIMIT)
    local cache = a:cache("/w3", { max_watch_bytes = 10 * LIMIT })
    assert.is_true(cache:await(30))
    assert.is_false(restart_and_resync(a, b, cache, 8), "resynced: does the C client split SetWatches now?")
    local refused = 0
    for _ in fx.zk:log_tail(2000):gmatch("Len error") do refused = refused + 1 end
    assert.is_true(refused >= 2, "the server refused the message " .. refused .. " times")
    assert.are.equal("SUSPENDED", a.state)
    cache:close()
  end)

  it("a tree just under it reconnects and resyncs after a server restart", function()
    local a, b = connect("w-a", { session_timeout = 30 }), connect("w-b", { session_timeout = 30 })
    local bytes = tree(b, "/w2", 1900) -- about 64 KB: the whole SetWatches message just fits
    assert.is_true(bytes <= LIMIT - 28 and bytes > LIMIT - 4096, "tree of " .. bytes .. " bytes")
    local cache = a:cache("/w2", { max_watch_bytes = LIMIT - 28, max_nodes = 1900 })
    assert.is_true(cache:await(30))
    assert.is_true(restart_and_resync(a, b, cache, 60), "no resync within 60 s")
    assert.are.equal(1900, cache:size())
    cache:close()
  end)

  it("a cache the client's budget stopped, then closed, leaves nothing in the reconnection's message", function()
    local a = connect("w-a", { session_timeout = 30, max_watch_bytes = LIMIT })
    local b = connect("w-b", { session_timeout = 30 })
    tree(b, "/w4", 2500) -- about 80 KB of watches
    local stopped = a:cache("/w4")
    local ok, msg, code = stopped:await(30)
    assert.is_nil(ok)
    assert.are.equal("ERANGE", code)
    assert.matches("the client's watches would pass its max_watch_bytes = 65536 bytes", msg, 1, true)
    stopped:close()
    local kept = a:cache("/w5")
    tree(b, "/w5", 1000) -- about 34 KB: fits with the header
    assert(util.wait_until(function() return kept:size() == 1000 and kept:is_initialized() end, 30, { a, b }))
    -- the server still holds what the stopped cache's reads armed (it hears of no removal): more
    -- than one message can carry, had the client kept listing them. wchp lists a path once; with
    -- no depth limit every watched path here has a data and a children watch
    local held, npaths = 0, 0
    for path, sessions in pairs(util.watches_by_path(fx.zk)) do
      held, npaths = held + 2 * #sessions * (4 + #path), npaths + #sessions
    end
    assert.are.equal(2 * npaths, util.mntr(fx.zk, "zk_watch_count"))
    assert.is_true(held > LIMIT, ("the server holds %d bytes of watches (%d paths)"):format(held, npaths))
    local sid = a:session()
    -- within half the session timeout: a session that expired meanwhile would resync too
    assert.is_true(restart_and_resync(a, b, kept, 15), "no resync within 15 s: the stopped cache's watches were sent")
    assert.are.equal(sid, a:session())
    assert.are.equal(1000, kept:size())
    assert.are.equal(2000, util.mntr(fx.zk, "zk_watch_count")) -- the kept cache's alone
    kept:close()
  end)
end)

-- The 3.8 C client, on every session event (a connection lost, a connection made again), builds
-- the list of its distinct (watcher, context) pairs with a linear search per pair: with a context
-- per watch, a cache of 10,000 nodes (20,000 watches) cost 0.7 s of CPU per event on a quiet
-- machine, the whole process stopped (bench/CACHE-RESULTS.md). The core registers every plain
-- watch under one pair; a reconnection's CPU is then mostly the SetWatches and the resync.
describe("client:cache of 10,000 nodes across a connection reset", function()
  local fx = fixture.server({ jvm_opts = { "-Xmx512m" } }, { own = "a tree of 10,000 nodes" })
  -- CPU seconds for RESETS reconnections: a context per watch took 0.53 s for one (two events)
  local N, RESETS, BOUND = 10000, 3, 0.6

  it("costs its process a small share of a second of CPU", function()
    local net = testing.proxy(fx.zk.hosts)
    finally(function() util.close_all(); net:stop() end)
    local a = util.connect(net.hosts, { session_timeout = 30, identity = "big-a" })
    local b = fx.connect("big-b", { session_timeout = 30 })
    net.pump = function(s) util.drive({ a, b }, s) end
    assert(b:create("/big", ""))
    local made, p = 1, 0
    while made < N do
      p = p + 1
      local t = b:transaction()
      t:create(("/big/p%03d"):format(p), "")
      made = made + 1
      for i = 1, 99 do
        if made >= N then break end
        t:create(("/big/p%03d/l%03d"):format(p, i), "")
        made = made + 1
      end
      assert(t:commit())
    end
    local cache = a:cache("/big", { max_nodes = N })
    local inits = 0
    cache:on_change(function(event) if event == "initialized" then inits = inits + 1 end end)
    assert.is_true(cache:await(60))
    assert.are.equal(2 * N, cache:stats().watches)
    -- counted as they come: the loss and the reconnection may both happen within one pump
    local suspended = 0
    a:on_session(function(state) if state == "SUSPENDED" then suspended = suspended + 1 end end)
    local sid, cpu0 = a:session(), os.clock()
    -- each reset from CONNECTED: a client SUSPENDED already (a starved process past its silence
    -- bound) reports no second SUSPENDED for a reset that comes meanwhile
    local function is_connected() return a.state == "CONNECTED" end
    for r = 1, RESETS do
      assert(util.wait_until(is_connected, 60, { a, b }), "not connected before a reset")
      local s0 = suspended
      net:reset() -- the connection closed once: SUSPENDED, then the same session again
      assert(util.wait_until(function() return suspended > s0 end, 30, { a, b }), "the reset went unnoticed")
      assert(util.wait_until(function() return inits >= r + 1 end, 60, { a, b }), "no resync within 60 s")
    end
    local cpu = os.clock() - cpu0
    assert.are.equal(sid, (a:session()))
    assert.are.equal(N, cache:size())
    print(("  [reset] a cache of %d nodes back and resynced %d times: %.3f s of CPU (bound %.1f s)")
      :format(N, RESETS, cpu, BOUND))
    assert.is_true(cpu < BOUND, ("%d reconnections took %.3f s of CPU"):format(RESETS, cpu))
    cache:close()
  end)
end)
