-- The scripted tier (no ZooKeeper server): client:cache (zklock.cache) when its root is deleted and
-- made again between two of its reads, in the orders a real server can answer them (one session's
-- answers come in the order its requests were sent). A directory that is a container is reaped by
-- the server once empty, and made again by the next create with parents: the cache must list the
-- new directory, or it misses its children for good (spec/39, spec/49 saw this on a real server;
-- the last test is spec/49's group whose only member's session expired).
--   busted --lua=lua5.4 spec/fast/scripted/cache_spec.lua
local scripted = require("support.scripted")

-- a cache of /r (depth 1) loaded with one child a; -> cache, its events ("added /r", ...)
local function loaded(s, children)
  local cache = s.client:cache("/r", { depth = 1 })
  local evs = {}
  cache:on_change(function(event, _, path) evs[#evs + 1] = event .. " " .. path end)
  s:expect("get", "/r"):ok("", 10)
  s:expect("children", "/r"):ok(children)
  for i, name in ipairs(children) do s:expect("get", "/r/" .. name):ok("x", 10 + i) end
  assert.is_true(cache:is_initialized())
  return cache, evs
end

describe("scripted cache: a root deleted and made again between reads #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("a listing that found no root, then a get that found it made again: the root is listed again", function()
    local cache, evs = loaded(s, { "a" })
    -- a deleted: its data watch fires, and the root's children watch (armed again by a listing)
    s:fire("deleted", "/r/a")
    s:fire("child", "/r")
    local get_a = s:expect("get", "/r/a")
    local list = s:expect("children", "/r")
    get_a:fail("ZNONODE")
    -- the emptied root is reaped: its data watch fires (its children watch is not armed: the
    -- listing is not answered yet)
    assert.are.equal(1, s:fire("deleted", "/r"))
    local get_r = s:expect("get", "/r")
    list:fail("ZNONODE") -- the listing reached the server after the reap
    get_r:ok("", 20) -- the get after the root was made again (with a child b)
    -- the new root must be listed (and its children watch armed), or b is never seen
    s:expect("children", "/r"):ok({ "b" })
    s:expect("get", "/r/b"):ok("y", 21)
    assert.are.equal("y", (cache:get("/r/b")))
    assert.are.same({ "b" }, cache:children("/r"))
    assert.are.same({ "added /r", "added /r/a", "initialized /r", "removed /r/a", "removed /r", "added /r",
                     "added /r/b" }, evs)
    s:expect_none()
  end)

  it("a listing answered while the root was not cached is not dropped with its watch armed", function()
    local cache, evs = loaded(s, {})
    -- the root is deleted: its data and children watches fire (one call of the core's one
    -- watcher, as the C client merges the watchers of a path); the get goes first
    assert.are.equal(1, s:fire("deleted", "/r"))
    local reqs = s:pending()
    assert.are.equal(2, #reqs)
    local get_r, list = reqs[1], reqs[2]
    assert.are.same({ "get", "children" }, { get_r.kind, list.kind })
    s:skip()
    get_r:fail("ZNONODE") -- removed; an exists watch waits for the root
    local ex = s:expect("exists", "/r")
    list:ok({ "b" }) -- made again (with a child b) before the listing arrived: armed, answered
    ex:ok(20) -- the root is there: read it
    s:expect("get", "/r"):ok("", 20)
    -- the listing above came while the root was not in the cache: it must be read again
    s:expect("children", "/r"):ok({ "b" })
    s:expect("get", "/r/b"):ok("y", 21)
    assert.are.equal("y", (cache:get("/r/b")))
    assert.are.same({ "added /r", "initialized /r", "removed /r", "added /r", "added /r/b" }, evs)
  end)

  it("a listing and a child's get answered for the root made again, then the root's get: all read again", function()
    -- spec/96 saw this on a real server: the root (a container) emptied, reaped and made again
    -- with its child, all before the cache's reads reached the server
    local cache, evs = loaded(s, { "a" })
    s:fire("deleted", "/r/a")
    s:fire("child", "/r")
    local get_a = s:expect("get", "/r/a")
    local list = s:expect("children", "/r")
    assert.are.equal(1, s:fire("deleted", "/r")) -- the reap (the children watch is not armed)
    local get_r = s:expect("get", "/r")
    get_a:ok("x2", 30) -- the new a (under the new root), reported under the cached old one
    list:ok({ "a" }) -- the new root's listing, applied to the old root: arms its children watch
    get_r:ok("", 29) -- the new root: the old one goes with everything below it
    -- the new root must be listed again and its child read again (their watches stand for what
    -- went with the old root), or a is missing until it changes
    s:expect("children", "/r"):ok({ "a" })
    s:expect("get", "/r/a"):ok("x2", 30)
    assert.are.equal("x2", (cache:get("/r/a")))
    assert.are.same({ "a" }, cache:children("/r"))
    assert.are.same({ "added /r", "added /r/a", "initialized /r", "removed /r/a", "added /r/a", "removed /r/a",
                     "removed /r", "added /r", "added /r/a" }, evs)
    s:expect_none()
  end)

  it("a group whose container was reaped when its only member's session expired sees it join again", function()
    -- spec/49's case: the member's node goes with its session, the emptied group node is reaped,
    -- and the member's create with parents makes both again
    local g = s.client:group("/g")
    local evs = {}
    g:on_change(function(event, _, id) evs[#evs + 1] = event .. (id and " " .. id or "") end)
    s:expect("get", "/g"):ok("", 10)
    s:expect("children", "/g"):ok({ "gamma" })
    s:expect("get", "/g/gamma"):ok("g1", 11)
    s:fire("deleted", "/g/gamma")
    s:fire("child", "/g")
    local get_m = s:expect("get", "/g/gamma")
    local list = s:expect("children", "/g")
    get_m:fail("ZNONODE")
    s:fire("deleted", "/g")
    local get_g = s:expect("get", "/g")
    list:fail("ZNONODE")
    get_g:ok("", 20)
    s:expect("children", "/g"):ok({ "gamma" })
    s:expect("get", "/g/gamma"):ok("g1", 21)
    assert.are.same({ "joined gamma", "initialized", "left gamma", "joined gamma" }, evs)
    assert.are.equal("g1", g:members().gamma)
  end)
end)

-- The watch budget (max_watch_bytes): one account per client, what the client's SetWatches
-- message would carry on a reconnection: 28 bytes, and 4 + the path's length per watch.
describe("scripted cache: the watch budget of a client #fast", function()
  local s
  after_each(function() s:close() end)

  -- a cache of root (depth 1) loaded with its children; -> cache
  local function load(root, children, opts)
    local cache = s.client:cache(root, opts or { depth = 1 })
    s:expect("get", root):ok("", 10)
    s:expect("children", root):ok(children)
    for i, name in ipairs(children) do s:expect("get", root .. "/" .. name):ok("x", 10 + i) end
    return cache
  end

  -- what the fake server holds: sum of 4 + #path over its armed watches
  local function armed_bytes(paths)
    local n = 0
    for _, p in ipairs(paths) do n = n + s.fake.armed(p) * (4 + #p) end
    return n
  end

  it("a node at the depth limit counts its data watch only: the share is what the server holds", function()
    s = scripted.new()
    local cache = load("/r", { "a", "bb" })
    assert.is_true(cache:is_initialized())
    assert.are.equal(4, s.fake.armed()) -- /r data and children, /r/a and /r/bb data
    -- 2 x (4 + 2) + (4 + 4) + (4 + 5)
    assert.are.equal(29, armed_bytes({ "/r", "/r/a", "/r/bb" }))
    assert.are.equal(29, cache:stats().watch_bytes)
    cache:close()
    assert.are.equal(0, cache:stats().watch_bytes)
  end)

  it("two caches draw from one account: the second stops past it, and starts once the first is closed",
    function()
    -- each cache: 2 x (4 + 2) + (4 + 4) = 20 bytes; with the header, one fits and two do not
    s = scripted.new({ max_watch_bytes = 60 })
    local first = load("/a", { "x" })
    assert.is_true(first:is_initialized())
    assert.are.equal(20, first:stats().watch_bytes)
    local second = load("/b", { "y" })
    local ok, msg, code = second:await(0)
    assert.is_nil(ok)
    assert.are.equal("ERANGE", code)
    assert.matches("the client's watches would pass its max_watch_bytes = 60 bytes (at /b/y, 1 nodes;"
      .. " this cache holds 12 bytes, the client's other caches 20, its other watches 0)", msg, 1, true)
    assert.are.equal(0, second:stats().watch_bytes) -- its share went back when it stopped
    -- and the client forgot its watchers: a reconnection's SetWatches no longer lists them
    assert.are.equal(0, s.fake.armed("/b") + s.fake.armed("/b/y"))
    second:close()
    -- a cache of the same tree as the first's shares its watches: they count once
    local twin = load("/a", { "x" })
    assert.is_true(twin:is_initialized())
    twin:close()
    assert.are.equal(3, s.fake.armed()) -- the first cache's watchers are still there
    first:close()
    assert.are.equal(0, s.fake.armed())
    local third = load("/b", { "y" })
    assert.is_true(third:is_initialized())
    assert.are.equal(20, third:stats().watch_bytes)
    third:close()
  end)

  it("the client's other watches count while armed; a cache's own max_watch_bytes caps its share", function()
    s = scripted.new({ max_watch_bytes = 60 })
    local t = s:spawn(function() return s.client:get("/some/path", { watch = true }) end)
    s:expect("get", "/some/path"):ok("v", 5) -- 4 + 10 bytes armed
    assert.are.equal("v", t:returned())
    local cache = load("/a", { "x" })
    local ok, msg, code = cache:await(0)
    assert.is_nil(ok)
    assert.are.equal("ERANGE", code)
    assert.matches("the client's other caches 0, its other watches 14)", msg, 1, true)
    cache:close()
    assert.are.equal(1, s:fire("changed", "/some/path")) -- fired: no longer counted
    cache = load("/a", { "x" })
    assert.is_true(cache:is_initialized())
    cache:close()
    cache = load("/a", { "x" }, { depth = 1, max_watch_bytes = 19 })
    ok, msg, code = cache:await(0)
    assert.is_nil(ok)
    assert.are.equal("ERANGE", code)
    assert.matches("its watches would pass its max_watch_bytes = 19 bytes (at /a/x, 1 nodes)", msg, 1, true)
    cache:close()
  end)

  it("bad max_watch_bytes options raise naming the option", function()
    s = scripted.new()
    assert.has_error(function() s.zklock.connect("fake:2181", { max_watch_bytes = 0 }) end,
      "bad argument #2 to 'connect' (option 'max_watch_bytes': expected an integer of bytes >= 1, got 0 (number))")
    assert.has_error(function() s.client:cache("/a", { max_watch_bytes = 1.5 }) end,
      "bad argument #2 to 'cache' (option 'max_watch_bytes': expected an integer >= 1, got 1.5 (number))")
  end)
end)
