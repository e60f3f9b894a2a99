-- keepalive = true: a plain script that blocks (no event loop) keeps its session and its locks;
-- without it the session is lost and the lock says so on the next call, never pretending.
local zklock = require("zklock")
local fixture = require("support.fixture")

local SESSION = 2 -- seconds; the script blocks for 3x that

local function block(seconds)
  -- a blocking call that never enters zklock (a shell sleep, like os.execute("sleep 30") in a script)
  os.execute(("sleep %g"):format(seconds))
end

describe("keepalive #slow", function()
  local zk
  fixture.server({ tick_ms = 500, min_session_ms = 1000 }, {}, function(s) zk = s end)

  it("keeps the session and the lock through a block of 3x the session timeout", function()
    local c = assert(zklock.connect(zk.hosts, { session_timeout = SESSION, keepalive = true }))
    local m = c:mutex("/keepalive/a")
    local states = {}
    m:on_lost(function(state) states[#states + 1] = state end)
    assert(m:acquire(5))
    local id = c:session()
    local token = m:token()
    block(3 * SESSION)
    c:process()
    assert.is_true(m:is_held())
    assert.are.equal(token, m:token())
    assert.are.equal(id, (c:session()))
    assert.are.same({}, states)
    -- and it is really held: another client cannot take it
    local other = assert(zklock.connect(zk.hosts, { session_timeout = SESSION }))
    local ok, _, code = other:mutex("/keepalive/a"):acquire(0)
    assert.is_nil(ok)
    assert.are.equal("ETIMEDOUT", code)
    assert.is_true(m:release())
    c:close()
    other:close()
  end)

  it("without it, the holder learns LOST on its next call and is_held() is false", function()
    local c = assert(zklock.connect(zk.hosts, { session_timeout = SESSION }))
    local m = c:mutex("/keepalive/b")
    local states = {}
    m:on_lost(function(state) states[#states + 1] = state end)
    assert(m:acquire(5))
    local id = c:session()
    block(3 * SESSION)
    c:process()
    -- the first pump after the block must not report the stale lock as held
    assert.is_false(m:is_held())
    assert.is_nil(m:token())
    assert.are.equal("LOST", states[#states])
    local ok, _, code = m:release()
    assert.is_nil(ok)
    assert.are.equal("ELOST", code)
    -- the client carries on with a new session
    for _ = 1, 100 do
      if c.state == "CONNECTED" then break end
      c:sleep(0.05)
    end
    assert.are_not.equal(id, (c:session()))
    assert(m:acquire(5))
    assert.is_true(m:release())
    c:close()
  end)
end)
