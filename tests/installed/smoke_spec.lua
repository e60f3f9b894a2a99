-- tests/installed/smoke_spec.lua: an installed zklock (a luarocks tree), not the source tree,
-- against a real throwaway ZooKeeper started by the installed zklock.testing.
--
--   ZKL_TREE=/path/to/tree [ZKL_EXPECT_VERSION=0.1.0] \
--   LUA_PATH_5_4="$(luarocks --lua-version=5.4 --tree "$ZKL_TREE" path --lr-path);;" \
--   LUA_CPATH_5_4="$(luarocks --lua-version=5.4 --tree "$ZKL_TREE" path --lr-cpath);;" \
--   busted --lua=lua5.4 /abs/path/to/tests/installed/smoke_spec.lua
--
-- Run it from outside the source tree: the repository's .busted puts lua/ and build/ on the
-- path. The first test fails if any zklock module is found anywhere but in ZKL_TREE.
-- tests/installed/check.sh runs it in CI on the .src.rock that scripts/release.sh makes.
local TREE = os.getenv("ZKL_TREE")
local EXPECT = os.getenv("ZKL_EXPECT_VERSION")

local function under_tree(file)
  return file ~= nil and TREE ~= nil and file:sub(1, #TREE + 1) == TREE .. "/"
end

describe("installed zklock", function()
  local zklock, testing, zk

  it("is loaded from ZKL_TREE, not from a source tree", function()
    assert.is_string(TREE, "set ZKL_TREE to the luarocks tree under test")
    assert.is_nil(package.loaded["zklock"], "zklock was loaded before this spec")
    for _, name in ipairs({ "zklock", "zklock.client", "zklock.internal.recipe", "zklock.testing",
                            "zklock.testing.servers" }) do
      local file = package.searchpath(name, package.path)
      assert.is_true(under_tree(file), ("%s resolves to %s, not under %s"):format(name, tostring(file), TREE))
    end
    local so = package.searchpath("zklock.core", package.cpath)
    assert.is_true(under_tree(so), ("zklock.core resolves to %s, not under %s"):format(tostring(so), TREE))
    zklock = require("zklock")
    testing = require("zklock.testing")
    -- and what was actually loaded is that file
    local src = debug.getinfo(zklock.connect, "S").source
    assert.is_true(under_tree(src:sub(2)), "zklock.connect is defined in " .. src)
  end)

  it("reports one version everywhere", function()
    assert.is_table(zklock, "zklock did not load (see the first test)")
    local core = require("zklock.core")
    assert.matches("^%d+%.%d+%.%d+$", zklock._VERSION)
    assert.are.equal(core._VERSION, zklock._VERSION)
    assert.are.equal(zklock._VERSION, testing._VERSION)
    if EXPECT then assert.are.equal(EXPECT, zklock._VERSION) end
  end)

  describe("against a real ZooKeeper", function()
    setup(function()
      if testing then zk = testing.server{ tick_ms = 500, min_session_ms = 1000 } end
    end)
    teardown(function()
      if zk then zk:stop() end
    end)

    it("acquires and releases a mutex, across two clients", function()
      assert.is_table(zk, "no server (zklock.testing did not load, see the first test)")
      local a = assert(zklock.connect(zk.hosts, { session_timeout = 5, identity = "smoke-a" }))
      local b = assert(zklock.connect(zk.hosts, { session_timeout = 5, identity = "smoke-b" }))
      local ma, mb = a:mutex("/smoke/lock"), b:mutex("/smoke/lock")
      assert.are.equal(ma, ma:acquire(5))
      assert.is_true(ma:is_held())
      assert.is_number(ma:token())
      local ok, _, code = mb:acquire(0.3)               -- held elsewhere: times out
      assert.is_nil(ok)
      assert.are.equal("ETIMEDOUT", code)
      local token = ma:token()
      assert.is_true(ma:release())
      assert.is_false(ma:is_held())
      assert.are.equal(mb, mb:acquire(5))              -- free again
      assert.is_true(mb:token() > token)               -- fencing tokens only grow
      local node = mb:node()
      assert.are.equal("smoke-b", (b:get(node)))       -- the identity is the node's data
      assert.is_true(mb:release())
      assert.is_false(a:exists(node))                  -- release returns after the delete
      a:close()
      b:close()
    end)

    it("installs the zklock command, which runs a command under a lock", function()
      assert.is_table(zk, "no server (zklock.testing did not load, see the first test)")
      local bin = TREE .. "/bin/zklock"
      local f = io.popen(("ZKLOCK_HOSTS=%s %s run /smoke/cli -- sh -c 'echo token=$ZKLOCK_TOKEN; exit 3' 2>&1; "
        .. "echo rc=$?"):format(zk.hosts, bin))
      local out = f:read("*a")
      f:close()
      assert.truthy(out:match("token=%d+"), out)
      assert.truthy(out:match("rc=3"), out)
    end)
  end)
end)
