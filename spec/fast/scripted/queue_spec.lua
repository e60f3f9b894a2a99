-- The scripted tier (no ZooKeeper server): zklock.queue against the fake ZooKeeper, each request
-- answered (or lost) by the spec. spec/support/scripted.lua has the vocabulary.
--   busted spec/fast/scripted/queue_spec.lua
local scripted = require("support.scripted")

describe("scripted queue #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("take: the oldest item is read and deleted in one round trip; ZNONODE means another consumer took it", function()
    local q = s.client:queue("/q")
    local t = s:spawn(function() return q:take(5) end)
    s:expect("children", "/q"):ok({ "qn-0000000003", "qn-0000000001", "lock-1" })
    local g = s:expect("get", "/q/qn-0000000001")
    local d = s:expect("delete", "/q/qn-0000000001")
    g:ok("one")
    d:fail("ZNONODE") -- another consumer won this one: the next candidate, without listing again
    assert.is_false(t.done)
    g = s:expect("get", "/q/qn-0000000003")
    d = s:expect("delete", "/q/qn-0000000003")
    g:ok("three")
    d:ok()
    assert.same({ "three", "qn-0000000003" }, { t:returned() })
    s:expect_none()
  end)

  it("take: a delete whose answer is lost ends the take with the outcome unknown, not with another item", function()
    local q = s.client:queue("/q")
    local t = s:spawn(function() return q:take(5) end)
    s:expect("children", "/q"):ok({ "qn-0000000001", "qn-0000000002" })
    s:expect("get", "/q/qn-0000000001"):ok("one")
    s:expect("delete", "/q/qn-0000000001"):drop() -- applied or not: nobody knows
    s:disconnect()
    assert.is_true(t.done)
    local msg, code = t:failed()
    assert.equal("ZCONNECTIONLOSS", code)
    assert.matches("may have been taken and lost", msg, 1, true)
    -- the bytes the get read come back as the 4th result, for the caller to put back
    assert.equal("one", select(4, t:returned()))
    s:reconnect()
    s:expect_none() -- in particular no take of qn-0000000002 on the caller's behalf
  end)

  it("put: a create whose answer is lost is reported, never sent again (no duplicate item)", function()
    s.fake.tree_add("/q")
    local q = s.client:queue("/q")
    local t = s:spawn(function() return q:put("x") end)
    local c = s:expect("create", "/q/qn-")
    assert.is_true(c.sequential)
    assert.equal("x", c.data)
    c:apply() -- the server made the node ...
    c:drop()  -- ... and its answer is lost with the connection
    s:disconnect()
    s:reconnect()
    local _, code = t:failed()
    assert.equal("ZCONNECTIONLOSS", code)
    s:expect_none()
    assert.equal(1, s.fake.tree_children("/q"))
  end)

  it("lock-safe take (Curator format): fn's own writes commit in the multi that removes item and lock", function()
    local q = s.client:queue("/cq", { format = "curator", lock_path = "/cq-locks" })
    local t = s:spawn(function()
      return q:take(5, function(items, msg)
        msg:transaction():create("/done/" .. items[1], "ok")
      end)
    end)
    s:expect("children", "/cq"):ok({ "queue-0000000002", "queue-0000000001" })
    local lock = s:expect("create", "/cq-locks/queue-0000000001") -- Curator's order: by name
    local g = s:expect("get", "/cq/queue-0000000001")
    lock:ok()
    g:ok(require("zklock.queue").encode({ "job-1" }))
    local m = s:expect("multi")
    local kinds = {}
    for i, op in ipairs(m.ops) do kinds[i] = op.kind .. " " .. op.path end
    assert.same({ "check /cq-locks/queue-0000000001", "create /done/job-1", "delete /cq/queue-0000000001",
                  "delete /cq-locks/queue-0000000001" }, kinds)
    m:ok()
    assert.same({ { "job-1" }, "queue-0000000001" }, { t:returned() })
    s:expect_none()
  end)

  it("lock-safe take (Curator format): a consumer whose lock node went is told ELOST and removes nothing", function()
    local q = s.client:queue("/cq", { format = "curator", lock_path = "/cq-locks" })
    local seen
    local t = s:spawn(function()
      return q:take(5, function(items) seen = items end)
    end)
    s:expect("children", "/cq"):ok({ "queue-0000000004" })
    local lock = s:expect("create", "/cq-locks/queue-0000000004")
    assert.is_true(lock.ephemeral)
    local g = s:expect("get", "/cq/queue-0000000004")
    lock:ok()
    g:ok(require("zklock.queue").encode({ "job" }))
    assert.same({ "job" }, seen)
    -- the commit: the lock node is checked in the same multi that removes item and lock
    local m = s:expect("multi")
    local kinds = {}
    for i, op in ipairs(m.ops) do kinds[i] = op.kind .. " " .. op.path end
    assert.same({ "check /cq-locks/queue-0000000004", "delete /cq/queue-0000000004",
                  "delete /cq-locks/queue-0000000004" }, kinds)
    m:multi({ "ZNONODE", "ZRUNTIMEINCONSISTENCY", "ZRUNTIMEINCONSISTENCY" }) -- the lock went with a session
    local msg, code = t:failed()
    assert.equal("ELOST", code)
    assert.matches("nothing of this transaction was written", msg, 1, true)
  end)
end)
