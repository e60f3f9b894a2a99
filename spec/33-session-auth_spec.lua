-- Credentials the server refuses (an unknown auth scheme): the failure is reported once, as the
-- terminal session state AUTH_FAILED; pending and new calls fail with ZAUTHFAILED; the client
-- opens no new sessions (it used to open one per pump: ~2,000 "expiries" in 3 s).
local util = require("support.util")
local fixture = require("support.fixture")

describe("sessions: refused credentials", function()
  local fx = fixture.server({}, { each = true })

  it("are reported once as AUTH_FAILED, fail pending and new calls, and open no new session", function()
    local c = fx.connect({ session_timeout = 3 })
    local states = {}
    c:on_session(function(state) states[#states + 1] = state end)
    local m = c:mutex("/auth/x")
    local results = {}
    c:spawn(function() results.acquire = util.pack(m:acquire(5)) end)
    assert.is_true(c:add_auth("nosuch", "x")) -- asynchronous: the server answers later
    c:spawn(function() results.get = util.pack(c:get("/")) end)
    assert(c:run(5))
    util.assert_code("ZAUTHFAILED", results.get, "get")
    assert.are.equal("ZAUTHFAILED", results.acquire[3], tostring(results.acquire[2]))
    -- time for a storm, had there been one
    util.drive({ c }, 2)
    assert.are.same({ "AUTH_FAILED" }, states)
    assert.are.equal("AUTH_FAILED", c.state)
    assert.are.equal(0, c:stats().sessions_expired)
    util.assert_code("ZAUTHFAILED", util.pack(c:get("/")), "get after")
    util.assert_code("ZAUTHFAILED", util.pack(c:mutex("/auth/y"):acquire(0)), "acquire after")
    -- the mutex queue of the refused client holds nothing
    local other = fx.connect()
    assert.are.same({}, util.children(other, "/auth/x"))
  end)
end)
