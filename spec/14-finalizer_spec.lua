-- A client collected without close() is closed on a background thread: the finalizer never
-- blocks the Lua thread, the session still ends (its nodes vanish long before the session
-- timeout), and a program that exits without closing its client ends its session at exit.
local testing = require("zklock.testing")
local core = require("zklock.core")
local util = require("support.util")
local run_delay_ms = require("support.loss").run_delay_ms

local SESSION = 20 -- s: long, so "vanished" cannot mean "expired by the server"

describe("a client collected without close()", function()
  local zk, watcher
  setup(function()
    zk = testing.server{}
    watcher = util.connect(zk.hosts)
  end)
  teardown(function()
    util.close_all()
    if zk then
      if zk.paused then zk:resume() end
      zk:stop()
    end
  end)

  -- in a function of its own, so no dead stack slot keeps the client alive
  local function hold_and_drop(path)
    local c = assert(require("zklock").connect(zk.hosts, { session_timeout = SESSION }))
    local m = c:mutex(path)
    assert(m:acquire(5))
  end

  it("ends its session in the background: its lock node vanishes at once", function()
    hold_and_drop("/fin/a")
    assert.is_true(util.wait_children(watcher, "/fin/a", 1, 2))
    local t0 = core.now()
    collectgarbage()
    collectgarbage()
    local gc_ms = core.now() - t0
    -- the session was closed, not left to expire: far sooner than the session timeout
    assert.is_true(util.wait_until(function()
      collectgarbage()
      return #util.children(watcher, "/fin/a") == 0
    end, SESSION / 4, { watcher }), "the collected client's lock node is still there")
    assert.is_true(gc_ms < SESSION * 1000 / 4, ("collection took %.0f ms"):format(gc_ms))
  end)

  it("does not block the collector while the server is stalled", function()
    hold_and_drop("/fin/b")
    assert.is_true(util.wait_children(watcher, "/fin/b", 1, 2))
    -- a stalled server: a close waits for its goodbye (drain, then closeSession) for seconds
    zk:pause()
    local t0, rq0 = core.now(), run_delay_ms()
    collectgarbage()
    collectgarbage()
    -- the collection's own time: on busy cores the thread also waits for a CPU, which is the
    -- machine's doing (a finalizer waiting for the stalled server is not waiting for a CPU)
    local gc_ms = core.now() - t0
    local gc_own = gc_ms - (run_delay_ms() - rq0)
    zk:resume()
    -- measured against a blocking close of the same kind of client under the same stall
    local c = assert(require("zklock").connect(zk.hosts, { session_timeout = SESSION }))
    assert(c:mutex("/fin/c"):acquire(5))
    zk:pause()
    local t1 = core.now()
    c:close()
    local close_ms = core.now() - t1
    zk:resume()
    assert.is_true(close_ms > 500, ("a blocking close took only %.0f ms: the stall did not show"):format(close_ms))
    print(("\n  [finalizer] collecting: %.0f ms (%.0f ms of it waiting for a CPU), a blocking close: %.0f ms")
      :format(gc_ms, gc_ms - gc_own, close_ms))
    assert.is_true(gc_own * 4 < close_ms, ("collecting took %.0f ms (%.0f ms less the time waiting for a CPU), a"
      .. " blocking close %.0f ms: the finalizer blocked"):format(gc_ms, gc_own, close_ms))
  end)

  it("is closed at exit when the program ends without closing it", function()
    local script = ([[
      package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
      package.cpath = %q .. ";" .. package.cpath
      local c = assert(require("zklock").connect(%q, { session_timeout = %d }))
      assert(c:mutex("/fin/exit"):acquire(5))
      io.stdout:write("held\n") io.stdout:flush()
    ]]):format(package.cpath:match("^[^;]+"), zk.hosts, SESSION)
    local lua = rawget(_G, "jit") and "luajit" or "lua5.4"
    local f = assert(io.popen(("%s -e %q 2>&1"):format(lua, script)))
    local out = f:read("a")
    f:close()
    assert.truthy(out:find("held", 1, true), out)
    -- the script has exited: its session must be gone already or within a moment
    assert.is_true(util.wait_until(function() return #util.children(watcher, "/fin/exit") == 0 end,
      SESSION / 4, { watcher }), "the exited program's lock node is still there")
  end)
end)
