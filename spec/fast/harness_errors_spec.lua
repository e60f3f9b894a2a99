-- The fast tier (no ZooKeeper server): how zklock.testing fails, moved here from
-- spec/00-harness_spec.lua (none of these starts a server).
--   busted --lua=lua5.4 spec/fast/harness_errors_spec.lua
local testing = require("zklock.testing")

describe("zklock.testing errors #fast", function()
  it("says how to install ZooKeeper when the jar is missing", function()
    local jar = testing.config.zookeeper_jar
    testing.config.zookeeper_jar = "/nonexistent/zookeeper.jar"
    local ok, err = pcall(testing.server)
    testing.config.zookeeper_jar = jar
    assert.is_false(ok)
    assert.matches("apt%-get install zookeeper", err)
  end)

  it("rejects bad options", function()
    assert.has_error(function() testing.server{ tick_ms = -1 } end)
    -- durations are seconds unless the name ends in _ms: the old millisecond names are refused
    local ok, err = pcall(testing.server, { tick = 500 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("tick_ms", 1, true), err)
    assert.has_error(function() testing.ensemble{ n = 0 } end)
  end)

  it("expire() explains what it needs", function()
    assert.has_error(function() testing.expire(nil) end)
    local has_core = pcall(require, "zklock.core")
    if not has_core then
      local ok, err = pcall(testing.expire, { hosts = "127.0.0.1:1", session = function() end })
      assert.is_false(ok)
      assert.matches("zklock.core", err)
    end
  end)
end)
