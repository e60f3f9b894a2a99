-- Digest authentication and lock ACLs: nodes created with acl = "creator" cannot be deleted,
-- changed or queued on by a client without the credentials; it gets a clear error.
local zklock = require("zklock")
local testing = require("zklock.testing")

describe("acl", function()
  local zk
  -- containers are not reaped here: the test lists the lock dir after the last release
  setup(function() zk = testing.server{ container_check_ms = 3600000 } end)
  teardown(function() if zk then zk:stop() end end)

  it("protects lock nodes from clients without the credentials", function()
    local owner = assert(zklock.connect(zk.hosts))
    assert(owner:add_auth("digest", "alice:secret"))
    local friend = assert(zklock.connect(zk.hosts))
    assert(friend:add_auth("digest", "alice:secret"))
    local stranger = assert(zklock.connect(zk.hosts))
    local m = owner:mutex("/acl/a/lock", { acl = "creator" })
    assert(m:acquire(5))
    local node = m:node()
    -- the stranger can see the queue (world read) ...
    assert.are.equal(1, #assert(stranger:children("/acl/a/lock")))
    -- ... but cannot delete or change the holder's node
    local ok, msg, code = stranger:delete(node)
    assert.is_nil(ok)
    assert.are.equal("ZNOAUTH", code)
    assert.truthy(msg:find(node, 1, true))
    local _
    ok, _, code = stranger:set(node, "__REVOKE__")
    assert.is_nil(ok)
    assert.are.equal("ZNOAUTH", code)
    -- nor queue on the lock: a clear error at once, nothing left behind
    local t0 = require("zklock.core").now()
    ok, msg, code = stranger:mutex("/acl/a/lock"):acquire(5)
    assert.is_nil(ok)
    assert.are.equal("ZNOAUTH", code)
    assert.truthy(msg:find("/acl/a/lock", 1, true))
    assert.is_true(require("zklock.core").now() - t0 < 2000)
    -- a client with the same credentials contends normally
    local fm = friend:mutex("/acl/a/lock", { acl = "creator" })
    local got
    friend:spawn(function() got = fm:acquire(5); if got then fm:release() end end)
    friend:sleep(0.1)
    assert.is_nil(got)
    assert(m:release())
    assert(friend:run(5))
    assert.truthy(got)
    assert.are.equal(0, #assert(owner:children("/acl/a/lock")))
    owner:close(); friend:close(); stranger:close()
  end)

  it("create{acl = \"creator\"} makes a node a client without the credentials may not change", function()
    local owner = assert(zklock.connect(zk.hosts))
    assert(owner:add_auth("digest", "carol:secret"))
    local stranger = assert(zklock.connect(zk.hosts))
    -- the parents made on the way get the same ACL
    assert.are.equal("/acl4/p/node", owner:create("/acl4/p/node", "v1", { parents = true, acl = "creator" }))
    assert.are.equal("v1", (stranger:get("/acl4/p/node"))) -- world may read
    local ok, msg, code = stranger:set("/acl4/p/node", "v2")
    assert.is_nil(ok)
    assert.are.equal("ZNOAUTH", code, msg)
    ok, msg, code = stranger:create("/acl4/p/other", "")
    assert.is_nil(ok)
    assert.are.equal("ZNOAUTH", code, msg)
    -- the creator may, and a node created without acl stays open to everyone
    assert(owner:set("/acl4/p/node", "v3"))
    assert.are.equal("/acl4/open", owner:create("/acl4/open", "o"))
    assert(stranger:set("/acl4/open", "changed"))
    -- an explicit list works the same way
    assert(owner:create("/acl4/listed", "", { acl = { { scheme = "world", id = "anyone", perms = "r" } } }))
    ok, msg, code = owner:set("/acl4/listed", "x")
    assert.is_nil(ok)
    assert.are.equal("ZNOAUTH", code, msg)
    owner:close(); stranger:close()
  end)

  it("validates the acl option", function()
    local c = assert(zklock.connect(zk.hosts))
    assert.has_error(function() c:mutex("/acl/x", { acl = "everyone" }) end)
    assert.has_error(function() c:mutex("/acl/x", { acl = { { scheme = "digest", id = "u:x", perms = "rwz" } } }) end)
    assert.has_error(function() c:semaphore("/acl/s", 2, { acl = 5 }) end)
    local ok, err = pcall(c.mutex, c, "/acl/x", { acl = {} })
    assert.is_false(ok)
    assert.truthy(err:find("acl", 1, true))
    local m = c:mutex("/acl2/y", { acl = { { scheme = "world", id = "anyone", perms = "rwcda" } } })
    assert(m:acquire(5))
    assert(m:release())
    c:close()
  end)

  it("reports a parent it may not create as ZNOAUTH", function()
    local owner = assert(zklock.connect(zk.hosts))
    assert(owner:add_auth("digest", "bob:pw"))
    -- /acl3 is open to everyone (no acl option: world anyone), so the refusal below comes from
    -- /acl3/guarded and not from its parent: the stranger may create under /acl3 itself
    assert.are.equal("/acl3", owner:create("/acl3", "", {}))
    local guarded = owner:mutex("/acl3/guarded/x", { acl = "creator" })
    assert(guarded:acquire(5)) -- creates /acl3/guarded with the creator ACL
    local c = assert(zklock.connect(zk.hosts))
    assert.are.equal("/acl3/open", c:create("/acl3/open", ""))
    local ok, msg, code = c:mutex("/acl3/guarded/other/lock"):acquire(5)
    assert.is_nil(ok)
    assert.are.equal("ZNOAUTH", code)
    assert.truthy(msg:find("/acl3/guarded/other/lock", 1, true))
    assert(guarded:release())
    owner:close()
    c:close()
  end)
end)
