-- The scripted tier (no ZooKeeper server): leader election and the leader latch against the fake
-- ZooKeeper, with connection loss, reconnection and the loss of the session on the fake clock.
--   busted spec/fast/scripted/leader_spec.lua
-- Runs on PUC Lua 5.1 too: the election engine catches errors with zklock.scheduler's pcall,
-- which may yield there.
local scripted = require("support.scripted")

local OTHER = "_c_11111111-1111-4111-8111-111111111111-"

local function base(path) return (path:match("[^/]+$")) end

describe("scripted leader latch #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  -- join /el behind another participant's node, which then goes: -> latch, changes, own create
  local function lead(changes)
    local l = s.client:latch("/el", { id = "me" })
    l:on_change(function(why) changes[#changes + 1] = tostring(why == "LEADER") .. " " .. why end)
    s:pump()
    local c = s:expect("create", "/el/_c_")
    assert.is_true(c.ephemeral and c.sequential)
    assert.equal("me", c.data)
    local list = s:expect("children", "/el") -- pipelined with the create
    c = c:ok(3)
    list:ok({ OTHER .. "latch-0000000001", base(c.created) })
    local g = s:expect("get", "/el/" .. OTHER .. "latch-0000000001") -- the predecessor, watched
    assert.is_true(g.watch)
    g:ok("other")
    assert.is_false(l:is_held())
    assert.equal(1, s:fire("deleted", "/el/" .. OTHER .. "latch-0000000001"))
    assert.is_true(l:is_held())
    assert.same({ "true LEADER" }, changes)
    return l, c
  end

  it("SUSPENDED keeps leadership; the same session back changes nothing", function()
    local changes = {}
    local l = lead(changes)
    s:disconnect()
    assert.equal("SUSPENDED", s.client.state)
    assert.is_true(l:is_held())
    s:advance(3000)
    s:reconnect()
    assert.is_true(l:is_held())
    assert.same({ "true LEADER" }, changes)
    s:expect_none()
  end)

  it("LOST (no server heard for about a session timeout) ends leadership; it joins again on the new session", function()
    local changes = {}
    local l, own = lead(changes)
    s:disconnect()
    s:advance(8000)
    assert.is_true(l:is_held()) -- the session may still live on the server
    s:advance(2000)                   -- now it may not: LOST before the server could expire it
    assert.is_false(l:is_held())
    assert.same({ "true LEADER", "false LOST" }, changes)
    s:reconnect()
    local c = s:expect("create", "/el/_c_") -- a new node on the new session
    assert.are_not.equal(own.session, c.session)
    local list = s:expect("children", "/el")
    c = c:ok(9)
    list:ok({ base(c.created) })
    assert.is_true(l:is_held())
    assert.same({ "true LEADER", "false LOST", "true LEADER" }, changes)
  end)

  it("close() of a leader gives leadership up at once and returns once its node is deleted", function()
    local changes = {}
    local l, own = lead(changes)
    local t = s:spawn(function() return l:close() end)
    assert.is_false(l:is_held())
    assert.same({ "true LEADER", "false CLOSED" }, changes)
    local d = s:expect("delete", own.created)
    assert.is_false(t.done, "close() returned before its node was deleted")
    d:ok()
    assert.is_true(t:returned())
    assert.is_true(l:close()) -- idempotent
    s:expect_none() -- and it does not join again
  end)
end)

describe("scripted leader election #fast", function()
  local s
  before_each(function() s = scripted.new() end)
  after_each(function() s:close() end)

  it("a term runs while the mutex is held, outlives SUSPENDED and ends on LOST", function()
    local states, slept = {}, {}
    local ld = s.client:leader("/le", function(self)
      while true do
        local still = self:sleep(1)
        slept[#slept + 1] = still
        if not still then return end
      end
    end, { id = "me" })
    ld:on_lost(function(state) states[#states + 1] = state end)
    s:pump()
    local c = s:expect("create", "/le/_c_")
    assert.equal("me", c.data)
    local list = s:expect("children", "/le")
    c = c:ok(0)
    list:ok({ base(c.created) })
    assert.is_true(ld:is_leader())
    assert.equal(1, ld:terms())
    s:advance(1000)
    assert.same({ true }, slept)
    s:disconnect()
    assert.is_true(ld:is_leader())
    assert.same({ "SUSPENDED" }, states)
    s:expire()
    assert.same({ "SUSPENDED", "LOST" }, states)
    assert.is_false(ld:is_leader())
    assert.equal(false, slept[#slept]) -- the leader function heard it and returned
    s:reconnect()
    s:expect_none() -- one term (requeue not asked for)
  end)
end)

-- The election engine's supervised terms (what one_worker runs on, without nginx): a host whose
-- threads are client coroutines on the fake clock, and whose kill the job obeys (it looks at
-- its thread's `killed_at` after each sleep), so the spec sees when the supervisor killed it.
describe("scripted supervised election terms #fast", function()
  local s, host, lines
  before_each(function()
    s = scripted.new()
    lines = {}
    local watch = require("zklock.internal.watch")
    host = { who = "worker 42", fields = { pid = 42 }, exiting = false, threads = {} }
    host.now = function() return s.core.now() / 1000 end
    host.signal = function()
      local sig = watch.signal(s.client)
      return { wait = function(sec) watch.wait_signal(sig, math.max(1, math.ceil(sec * 1000))) end,
               wake = function() watch.notify(sig) end }
    end
    host.spawn = function(fn)
      local t = {}
      host.threads[#host.threads + 1] = t
      s.client:spawn(function() fn(); t.ended_at = host.now() end)
      return t
    end
    host.kill = function(t) t.killed_at = t.killed_at or host.now() end
    host.stopping = function() return host.exiting and "EXITING" or nil end
  end)
  after_each(function() s:close() end)

  -- an engine on /ow with the fake host running job; -> engine, once its first term runs
  local function elect(job, grace)
    local e = require("zklock.leader").engine(s.client, "/ow", {
      id = "me", requeue = true, suspended = "stop", retry_delay = 1, host = host, job = job, stop_grace = grace,
      log = function(level, text) lines[#lines + 1] = level .. " " .. text end,
    })
    assert.is_true(e:start())
    s:pump()
    local c = s:expect("create", "/ow/_c_")
    local list = s:expect("children", "/ow")
    c = c:ok(1, 500) -- czxid 500: the term's token
    list:ok({ base(c.created) })
    assert.is_truthy(e:job(), "the job does not run: " .. table.concat(lines, "\n"))
    return e
  end

  -- a job that ignores stopping(): it returns only when its thread is killed
  local function stubborn(job)
    local t = host.threads[#host.threads] -- its own thread: spawned just now
    host.job_thread = t
    while not t.killed_at do job.client:sleep(0.05) end
  end

  local function step(ms) for _ = 1, ms / 50 do s:advance(50) end end

  it("a job that ignores SUSPENDED is killed stop_grace after it was told, not before", function()
    local e = elect(stubborn, 2)
    local t = host.job_thread
    s:disconnect()
    local told = host.now()
    assert.is_nil(e:job()) -- told to stop: no longer "running"
    step(1800)
    assert.is_nil(t.killed_at, "killed before stop_grace")
    step(400)
    assert.is_truthy(t.killed_at, "not killed within stop_grace + 0.2 s")
    assert.is_true(t.killed_at - told >= 2 and t.killed_at - told <= 2.2,
      ("killed %.2f s after told"):format(t.killed_at - told))
    local said = table.concat(lines, "\n")
    assert.is_truthy(said:find("worker 42 ended the job (token 500): killed: it did not return within 2 s"
      .. " of being told to stop (SUSPENDED)", 1, true), said)
  end)

  it("LOST kills a job at once, whatever stop_grace says", function()
    elect(stubborn, 30)
    local t = host.job_thread
    s:disconnect()
    step(500)
    assert.is_nil(t.killed_at)
    s:expire()
    local lost = host.now()
    step(200)
    assert.is_truthy(t.killed_at, "not killed within 0.2 s of LOST")
    assert.is_true(t.killed_at - lost <= 0.15, ("killed %.2f s after LOST"):format(t.killed_at - lost))
    assert.is_truthy(table.concat(lines, "\n"):find("killed at once: the session was lost", 1, true))
  end)

  it("a job that returns when told is not killed; the host stopping withdraws the next queue entry", function()
    local said
    local e = elect(function(job)
      local ok, why = job:sleep(60)
      said = { ok, why, job:stopping(), job.pid, job.token }
    end, 2)
    local t = host.threads[#host.threads] -- the job's (a queue watcher's came before)
    host.exiting = true
    step(200)
    assert.are.same({ nil, "EXITING", "EXITING", 42, 500 }, said)
    assert.is_truthy(t.ended_at)
    assert.is_nil(t.killed_at)
    assert.is_truthy(table.concat(lines, "\n"):find("ended the job (token 500): told to stop: EXITING", 1, true))
    -- the term's node is given back; the engine queues again and the watcher withdraws it
    local d = s:expect("delete", "/ow/_c_")
    d:ok()
    step(300)
    assert.is_true(e.closed == "EXITING", "the queued entry was not withdrawn: " .. tostring(e.closed))
  end)
end)
