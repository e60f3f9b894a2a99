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
    -- the root is deleted: its data and children watches fire; the get goes first
    assert.are.equal(2, s:fire("deleted", "/r"))
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
