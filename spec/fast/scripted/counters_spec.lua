-- The scripted tier (no ZooKeeper server): zklock.counters's compare-and-set against the fake
-- ZooKeeper, the races answered by the spec.
--   busted spec/fast/scripted/counters_spec.lua
local scripted = require("support.scripted")
local shared = require("zklock.counters") -- the encodings only (pure Lua)

describe("scripted shared values #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("atomic_long: a set that lost the race (ZBADVERSION) is tried again on a fresh read, at its version", function()
    local al = s.client:atomic_long("/n")
    local t = s:spawn(function() return al:increment() end)
    s:expect("get", "/n"):stat_version(3):ok(shared.encode_long(5))
    local set = s:expect("set", "/n")
    assert.equal(3, set.version) -- compare-and-set at the version read
    assert.equal(6, shared.decode_long(set.data))
    set:fail("ZBADVERSION") -- another writer came first
    assert.is_false(t.done)
    s:advance(1000) -- the retry policy's pause
    s:expect("get", "/n"):stat_version(4):ok(shared.encode_long(9))
    set = s:expect("set", "/n")
    assert.equal(4, set.version)
    assert.equal(10, shared.decode_long(set.data))
    set:stat_version(5):ok()
    local r = t:returned()
    assert.is_true(r.succeeded)
    assert.equal(9, r.pre)
    assert.equal(10, r.post)
    assert.equal(2, r.stats.optimistic_tries)
    s:expect_none()
  end)

  it("atomic_long: a set whose answer is lost is an error, never sent twice", function()
    local al = s.client:atomic_long("/n")
    local t = s:spawn(function() return al:add(2) end)
    s:expect("get", "/n"):stat_version(1):ok(shared.encode_long(1))
    s:expect("set", "/n"):drop()
    s:disconnect()
    s:reconnect()
    local _, code = t:failed()
    assert.equal("ZCONNECTIONLOSS", code)
    s:expect_none()
  end)

  it("shared_count: try_set at a stale version is false; get reads value and version", function()
    local sc = s.client:shared_count("/c", 0)
    local t = s:spawn(function()
      local v, version = sc:get()
      local ok = sc:try_set(v + 1, version)
      return v, version, ok
    end)
    s:expect("get", "/c"):stat_version(7):ok(shared.encode_int(41))
    local set = s:expect("set", "/c")
    assert.equal(7, set.version)
    assert.equal(42, shared.decode_int(set.data))
    set:fail("ZBADVERSION")
    assert.same({ 41, 7, false }, { t:returned() })
  end)
end)
