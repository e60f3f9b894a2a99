-- The scripted tier (no ZooKeeper server): zklock's double barrier against the fake ZooKeeper's
-- znode tree, with the other members' nodes (and their deaths) made by the spec.
--   busted spec/fast/scripted/barrier_spec.lua
local scripted = require("support.scripted")

-- member names sort by text: LOW before any UUID this client makes with a hex digit > 0, HIGH after
local LOW = "00000000-0000-4000-8000-000000000000"
local HIGH = "ffffffff-ffff-4fff-bfff-ffffffffffff"

describe("scripted double barrier #fast", function()
  local s
  before_each(function()
    s = scripted.new()
    assert.equal(0, s.fake.tree_add("/b"))
  end)
  after_each(function() s:close() end)

  it("enter: a member that died before the count leaves this one waiting; its timeout removes its own node", function()
    assert.equal(0, s.fake.tree_add("/b/" .. HIGH, true)) -- another session's member
    local b = s.client:double_barrier("/b", 2)
    local t = s:spawn(function() return b:enter(3) end)
    s:expect("exists", "/b/ready"):serve()
    local parents = s:expect("create", "/b") -- parents = true: the barrier node first, pipelined
    assert.is_true(parents.container)
    local own = s:expect("create", "/b/")
    parents:serve()
    assert.is_true(own.ephemeral)
    own:serve()
    assert.equal(0, s.fake.tree_del("/b/" .. HIGH)) -- the other member's session ends
    s:expect("children", "/b"):serve()                -- only this member: not enough
    assert.is_false(t.done)
    s:advance(3000)
    s:expect("delete", own.path):serve() -- giving up, it removes its own node
    local msg, code = t:failed()
    assert.equal("ETIMEDOUT", code)
    assert.matches("fewer than 2 members", msg, 1, true)
    assert.is_false(s.fake.tree_has(own.path))
    assert.same({}, s.fake.live())
  end)

  it("leave: the lowest member waits for the highest; the highest dying lets it leave", function()
    assert.equal(0, s.fake.tree_add("/b/" .. HIGH, true))
    local b = s.client:double_barrier("/b", 2)
    local t = s:spawn(function() return b:enter(5) end)
    s:serve_all()
    assert.is_true(t:returned())
    assert.is_true(s.fake.tree_has("/b/ready"))
    local own = b:node()
    assert.is_true(own < "/b/" .. HIGH)
    s:skip()
    t = s:spawn(function() return b:leave(5) end)
    s:expect("children", "/b")
    s:serve_all()
    assert.is_false(t.done)
    assert.equal(1, s.fake.armed("/b/" .. HIGH)) -- the lowest watches the highest
    assert.equal(0, s.fake.tree_del("/b/" .. HIGH)) -- it dies
    s:serve_all()
    assert.is_true(t:returned())
    assert.is_false(s.fake.tree_has(own))
    assert.is_false(s.fake.tree_has("/b/ready"))
  end)

  it("leave: a member whose own node went (its session ended) is told ELOST", function()
    assert.equal(0, s.fake.tree_add("/b/" .. LOW, true))
    local b = s.client:double_barrier("/b", 2)
    local t = s:spawn(function() return b:enter(5) end)
    s:serve_all()
    assert.is_true(t:returned())
    assert.equal(0, s.fake.tree_add("/b/" .. HIGH, true))
    assert.equal(0, s.fake.tree_del(b:node())) -- gone without this client deleting it
    t = s:spawn(function() return b:leave(5) end)
    s:serve_all()
    local msg, code = t:failed()
    assert.equal("ELOST", code)
    assert.matches("this member's node is gone", msg, 1, true)
  end)
end)
