-- spec/support/loss.lua: the loss-after-push rounds of spec/35..37 (issue 21, part 1): a holder
-- hears a watch notification the server pushed to it, then its connection goes silent (no
-- reset); the holder must learn that its hold is lost before a waiter is granted.
--
-- A round: a holder client (session SESSION) connected through a fault proxy of its own holds
-- the recipe and has a data watch armed on a znode (a plain get with a watch); a waiter on a
-- direct client is queued behind it; the proxy is armed with net:blackhole_after_push; a third
-- client sets the znode after a drawn delay (0..SESSION/3 after the holder's last request, so
-- the holder's pings fall anywhere before the push). The proxy forwards the push, then silence.
-- Recorded per round: when the holder learned of the loss (its on_lost/on_change LOST, a term
-- ending, or is_held() false, whichever it noticed first) and when the waiter was granted. A
-- round fails when the grant came first (or the holder never learned). Both times also go to an
-- in-memory history that the family's checker (check.mutex / rwlock / semaphore / leader) reads.
-- PAIRS rounds run at once (each its own paths, proxy and clients); batches follow until ROUNDS
-- rounds were judged.
--
-- Two processes, as in real use: the holders (and the setter) live in the test process, the
-- waiters of a batch in a worker process of their own (spec/support/loss_waiters.lua), so that a
-- holder's pump that blocks cannot delay a grant being seen. Both record times from
-- CLOCK_MONOTONIC (zklock.core.now()).
--
-- A paused process is not covered by the guarantee (LOST is reported on time only if process()
-- runs). So every pump of a holder's client records the holder's own loss deadline
-- (client:loss_deadline(): the server cannot expire the session earlier) and whether the first
-- pump past it reported LOST; a round the holder was not told of by the grant is an overlap
-- when the grant came before that deadline or a pump past it did not report, and is set aside
-- as "paused", neither pass nor failure, only when no pump of that client ran between the
-- deadline and the grant (measured, see M.judge). Setup keeps every holder pumped between its
-- own steps (the harness's requests run in coroutines on the setter's client, retried, bounded,
-- on a timeout or a lost session); a round whose holder lost its session before its fault was
-- armed is "void". Blocking inside a call is not a pause: a holder's process() call blocked
-- (not waiting for a CPU) longer than BLOCK_MS fails its round (process() must never block:
-- meanwhile the holder cannot be told, and the waiter may be granted). Another round runs in
-- place of a paused or void one (at most ROUNDS more in all; fewer judged rounds than ROUNDS
-- fail the spec as "machine too busy", visibly, never as a pass).
--
-- Environment: ZKLOCK_LOSS_ROUNDS (default 20), ZKLOCK_LOSS_SESSION (seconds, default 2),
-- ZKLOCK_LOSS_PAIRS (rounds at once, default 7).
local assert = require("luassert") -- the spec files get it from busted; a required module does not
local core = require("zklock.core")
local testing = require("zklock.testing")
local check = testing.check
local shell = require("zklock.testing.shell")
local util = require("support.util")

local M = {}

local function env_number(name, default, min)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n or n < min then error(("%s: expected a number >= %s, got %q"):format(name, tostring(min), v), 0) end
  return n
end

M.ROUNDS = math.floor(env_number("ZKLOCK_LOSS_ROUNDS", 20, 1))
M.SESSION = env_number("ZKLOCK_LOSS_SESSION", 2, 1)
M.PAIRS = math.floor(env_number("ZKLOCK_LOSS_PAIRS", 7, 1))
-- a holder's process() call that spends longer than this blocked (not waiting for a CPU) fails
-- its round
M.BLOCK_MS = 100
-- the server: a fine tick, so that it expires a session within 200 ms of its deadline (a coarse
-- tick adds up to a tick of slack in the holder's favour and makes the rounds less strict)
M.SERVER = { tick_ms = 200, min_session_ms = 1000, max_session_ms = 60000 }

local function now() return core.now() end
local function pack(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack -- luacheck: ignore 143

---------------------------------------------------------------- recipe families
-- fam.hold(hc, path, ev) -> h: take the recipe on the holder client (blocking, bounded); h.held()
-- polls the holder's own view; calls ev.learned() when the holder is told of the loss.
-- fam.contend(wc, path, ev) -> w: start the waiter (a coroutine on wc); ev.granted() on grant;
-- w.close() ends it. fam.queue(path): the znode whose children are the queue (2 = queued).
-- fam.check(history): the kit checker for the family. fam.hold_ev / fam.wait_ev: the history
-- events (acquire/release or lead/unlead) and fields.

local function lock_family(name, side_h, side_w)
  local function lock_of(c, path, side)
    if side == "mutex" then return c:mutex(path) end
    return c:rwlock(path)[side]
  end
  return {
    name = name,
    wait_fields = { mode = side_w == "read" and "read" or "write" },
    queue = function(path) return path end,
    hold = function(hc, path, ev)
      local m = lock_of(hc, path, side_h)
      m:on_lost(function(state) if state == "LOST" then ev.learned("on_lost LOST") end end)
      local ok, err = m:acquire(10)
      if not ok then return nil, err end
      return { held = function() return m:is_held() end, close = function() pcall(m.release, m) end,
               fields = { mode = side_h == "read" and "read" or "write" } }
    end,
    contend = function(wc, path, ev)
      local m = lock_of(wc, path, side_w)
      local w = { fields = { mode = side_w == "read" and "read" or "write" } }
      wc:spawn(function()
        local ok, err = m:acquire(60)
        if not ok then w.err = err return end
        ev.granted()
        ev.released()
        m:release()
      end)
      return w
    end,
    check = function(h) if side_h == "mutex" then return check.mutex(h) end return check.rwlock(h) end,
  }
end

M.families = {
  mutex = lock_family("mutex", "mutex", "mutex"),
  rwlock_write = lock_family("rwlock (write side vs a writer)", "write", "write"),
  rwlock_read = lock_family("rwlock (a reader vs a writer)", "read", "write"),

  semaphore = {
    name = "semaphore (lease)",
    wait_fields = { limit = 1 },
    queue = function(path) return path .. "/leases" end,
    hold = function(hc, path, ev)
      local sem = hc:semaphore(path, 1)
      sem:on_lost(function(state) if state == "LOST" then ev.learned("on_lost LOST") end end)
      local lease, err = sem:acquire(10)
      if not lease then return nil, err end
      return { held = function() return lease:is_held() end, close = function() pcall(lease.release, lease) end,
               fields = { limit = 1 } }
    end,
    contend = function(wc, path, ev)
      local sem = wc:semaphore(path, 1)
      local w = { fields = { limit = 1 } }
      wc:spawn(function()
        local lease, err = sem:acquire(60)
        if not lease then w.err = err return end
        ev.granted()
        ev.released()
        lease:release()
      end)
      return w
    end,
    check = function(h) return check.semaphore(h, { limit = 1 }) end,
  },

  zookeeper_lock = {
    name = "zookeeper_lock",
    queue = function(path) return path end,
    hold = function(hc, path, ev)
      local zl = hc:zookeeper_lock(path, { on_lost = function(state)
        if state == "LOST" then ev.learned("on_lost LOST") end
      end })
      local ok, err = zl:acquire(10)
      if not ok then return nil, err end
      return { held = function() return zl:is_held() end, close = function() pcall(zl.release, zl) end }
    end,
    contend = function(wc, path, ev)
      local zl = wc:zookeeper_lock(path)
      local w = {}
      wc:spawn(function()
        local ok, err = zl:acquire(60)
        if not ok then w.err = err return end
        ev.granted()
        ev.released()
        zl:release()
      end)
      return w
    end,
    check = function(h) return check.mutex(h) end,
  },

  leader = {
    name = "leader (client:leader)",
    lead = true,
    queue = function(path) return path end,
    hold = function(hc, path, ev)
      local h = {}
      local l = hc:leader(path, function(l)
        h.leading = true
        l:sleep()                              -- until the term ends
        ev.learned("term ended")
      end)
      l:on_lost(function(state) if state == "LOST" then ev.learned("on_lost LOST") end end)
      local deadline = now() + 10000
      while not h.leading and now() < deadline do hc:sleep(0.01) end
      if not h.leading then l:close() return nil, "the holder did not lead within 10 s" end
      h.held = function() return l:is_leader() end
      h.close = function() pcall(l.close, l) end
      return h
    end,
    contend = function(wc, path, ev)
      local w = {}
      local l = wc:leader(path, function()
        ev.granted()
        ev.released()                         -- the term ends when fn returns
      end)
      w.close = function() pcall(l.close, l) end
      return w
    end,
    check = function(h) return check.leader(h) end,
  },

  latch = {
    name = "latch (client:latch)",
    lead = true,
    queue = function(path) return path end,
    hold = function(hc, path, ev)
      local lt = hc:latch(path)
      local h = {}
      lt:on_change(function(event) if h.led and event ~= "LEADER" then ev.learned("on_change false") end end)
      local ok, err = lt:await(10)
      if not ok then lt:close() return nil, err end
      h.led = true
      h.held = function() return lt:is_held() end
      h.close = function() pcall(lt.close, lt) end
      return h
    end,
    contend = function(wc, path, ev)
      local lt = wc:latch(path)
      local w = {}
      lt:on_change(function(event)
        if event == "LEADER" and not w.got then w.got = true ev.granted() ev.released() end
      end)
      w.close = function() pcall(lt.close, lt) end
      return w
    end,
    check = function(h) return check.leader(h) end,
  },
}

---------------------------------------------------------------- rounds

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  if #s == 0 then return nil end
  if #s % 2 == 1 then return s[(#s + 1) / 2] end
  return (s[#s / 2] + s[#s / 2 + 1]) / 2
end
M.median = median

-- How long this process has waited for a CPU so far, in ms (the kernel's run-queue delay of
-- this thread: /proc/thread-self/schedstat's second field, in ns). Time spent blocked in a call
-- (a poll that should not block, say) does not count: that is the library's doing, not the
-- machine's.
function M.run_delay_ms()
  local _, rq = M.sched_ms()
  return rq
end

-- (on-CPU ms, run-queue ms) of this thread so far: schedstat's first two fields.
function M.sched_ms()
  local fh = io.open("/proc/thread-self/schedstat") or io.open("/proc/self/schedstat")
  if not fh then return 0, 0 end
  local cpu, rq = fh:read("*n", "*n")
  fh:close()
  return (cpu or 0) / 1e6, (rq or 0) / 1e6
end

local function read_lines(path)
  local fh = io.open(path)
  if not fh then return {} end
  local t = {}
  for l in fh:lines() do t[#t + 1] = l end
  fh:close()
  return t
end

-- Setup calls the harness makes (creates, sets, connects, the watch it arms) fail on a busy
-- machine with a timeout or a lost session that says nothing about the loss rule. M.retry runs
-- fn() (-> ok, msg, code) up to `tries` times while it fails with one of these codes, calling
-- on_retry(code) in between (to reconnect a client whose session ended); any other failure, or
-- the last one, raises naming `what`.
M.TRANSIENT = { ZOPERATIONTIMEOUT = true, ZCONNECTIONLOSS = true, ETIMEDOUT = true, ESESSION = true,
                ZSESSIONEXPIRED = true, ECLOSED = true }
function M.retry(what, fn, tries, on_retry)
  if type(what) ~= "string" then error("retry: argument 1 (what) must be a string", 2) end
  if type(fn) ~= "function" then error("retry: argument 2 (fn) must be a function", 2) end
  if type(tries) ~= "number" or tries < 1 then error("retry: argument 3 (tries) must be a number >= 1", 2) end
  local msg, code
  for i = 1, tries do
    local res = pack(fn())
    if res[1] then return unpack(res, 1, res.n) end
    msg, code = res[2], res[3]
    if not M.TRANSIENT[code] then break end
    if i < tries and on_retry then on_retry(code) end
  end
  error(("%s failed: %s"):format(what, tostring(msg)), 0)
end

-- Pump one holder's client (one process() call), recording what the judge reads (M.run): the
-- holder's own loss deadline, read before and after the call (client:loss_deadline(), while the
-- session that took the hold is the client's: the server cannot expire it earlier); the first pump that
-- started at or past that deadline (it must report LOST: a "due" pump) and whether it did; the
-- time spent blocked in the call (its wall time less its wait for a CPU); the longest gap
-- between two pumps.
local function pump(r)
  local hc = r.hc
  if not hc or hc.state == "CLOSED" then return end
  local cpu0, rq0 = M.sched_ms()
  local t0 = now()
  local due = false
  if r.sid and not r.learned_at and hc:session() == r.sid then
    local d = hc:loss_deadline()
    if d and d > 0 then
      local dl = t0 + d * 1000 -- t0 is read first: never later than the client's own deadline
      if not r.deadline or dl > r.deadline then r.deadline = dl end
    elseif d then
      due = true -- (0: passed, by how much is not said; the last positive read stands)
      r.deadline = r.deadline or t0
    end
  end
  hc:process()
  -- (is_leader() and is_held() drive the client too)
  if r.h and not r.learned_at and not r.h.held() then r.ev_h.learned("is_held() false") end
  -- and after: an answer this call read moves the deadline on (the next pump may come late)
  if r.sid and not r.learned_at and hc.state ~= "CLOSED" and hc:session() == r.sid then
    local ta = now()
    local d = hc:loss_deadline()
    if d and d > 0 and (not r.deadline or ta + d * 1000 > r.deadline) then r.deadline = ta + d * 1000 end
  end
  local t1 = now()
  local cpu1, rq1 = M.sched_ms()
  if r.h and not r.decided then
    local stall = (t1 - t0) - (rq1 - rq0)
    if stall > r.stall then r.stall, r.stall_cpu = stall, cpu1 - cpu0 end
    if r.last_pump then r.gap = math.max(r.gap, t0 - r.last_pump) end
    if due and not r.due_pump then
      r.due_pump = { t0 = t0, t1 = t1, rq = rq1 - rq0 }
      if not r.learned_at then r.missed = t0 end -- past its deadline, and still held: a bug
    end
  end
  r.last_pump = t0
  r.pumps, r.npumps = r.pumps or {}, (r.npumps or 0) + 1
  r.pumps[(r.npumps - 1) % 32 + 1] = t0 -- the last 32 pump starts (scan looks up the one before the grant)
end

-- One batch of n rounds at once. ctx = { zk, obs, nets, fam, tag, seq (round counter), rng, dir }.
-- Every phase keeps every holder pumped (pump above) between its own steps; the harness's own
-- requests run in coroutines on the setter's client (ctx.obs) so that none blocks the holders.
local function batch(ctx, n)
  local fam, S = ctx.fam, M.SESSION
  local rounds, by_k = {}, {}
  local hold_ev, rel_ev = fam.lead and "lead" or "acquire", fam.lead and "unlead" or "release"
  local worker, out
  local function scan()
    if not out then return end
    for _, l in ipairs(read_lines(out)) do
      local tag, k, a, b = l:match("^(%u+) ?(%d*) ?(%S*) ?(%S*)")
      local r = by_k[k]
      if tag == "G" and r and not r.granted_at then
        r.granted_at, r.grant_rq = tonumber(a), tonumber(b)
        r.early = not r.armed_at -- granted before its fault was armed
        for _, t in ipairs(r.pumps or {}) do
          if t <= r.granted_at and t > (r.last_before_grant or -math.huge) then r.last_before_grant = t end
        end
        r.wrec:log(hold_ev, r.path, fam.wait_fields, r.granted_at)
        r.wrec:log(rel_ev, r.path, nil, r.granted_at + 1)
      elseif tag == "E" and r then
        error(("round %d: the waiter failed: %s"):format(r.k, a))
      end
    end
  end
  -- drive everything once: the setter, every holder, the waiters' grants
  local function step()
    if ctx.obs.state ~= "CLOSED" then ctx.obs:process() end
    for _, r in ipairs(rounds) do pump(r) end
    scan()
  end
  local function drive_until(pred, seconds, what)
    local deadline = now() + seconds * 1000
    for _ = 1, 1000000 do
      step()
      if pred() then return end
      if now() >= deadline then error(("%s: not within %g s"):format(what, seconds), 0) end
      if worker and not worker:alive() then error("the waiters' process ended early:\n" .. worker:output(), 0) end
      ctx.obs:sleep(0.005)
    end
    error(what .. ": the drive loop ran out", 0)
  end
  -- a request of the harness's own, on the setter's client, in a coroutine while all is driven;
  -- retried (bounded) on a timeout or a lost session (a new setter's client then)
  local function on_obs(what, fn)
    return M.retry(what, function()
      local res
      local obs = ctx.obs
      obs:spawn(function() res = pack(pcall(fn, obs)) end)
      drive_until(function() return res ~= nil end, 30, what)
      if not res[1] then error(res[2], 0) end
      return unpack(res, 2, res.n)
    end, 4, function(code)
      if code == "ESESSION" or code == "ZSESSIONEXPIRED" or code == "ECLOSED" or ctx.obs.state == "CLOSED" then
        pcall(ctx.obs.close, ctx.obs)
        ctx.obs = ctx.connect_obs()
      end
    end)
  end

  local ok, err = pcall(function()
    for i = 1, n do
      ctx.seq = ctx.seq + 1
      local k = ctx.seq
      local r = { k = k, net = ctx.nets[i], path = ("/loss/%s/%d/r%d"):format(ctx.tag, testing.pid, k),
                  wpath = ("/loss-w/%s-%d-r%d"):format(ctx.tag, testing.pid, k), gap = 0, stall = 0, rq = 0 }
      r.hrec = check.recorder(nil, "holder-" .. k)
      r.wrec = check.recorder(nil, "waiter-" .. k)
      r.ev_h = {
        learned = function(how)
          if r.learned_at or not r.h then return end -- (a hold lost while taken fails its acquire)
          r.learned_at, r.learned_how = now(), how
          r.hrec:log(rel_ev, r.path, nil, r.learned_at)
        end,
      }
      local tries = 0
      on_obs(("round %d: create %s"):format(k, r.wpath), function(obs)
        tries = tries + 1
        local cok, cmsg, code = obs:create(r.wpath, "0", { parents = true, timeout = 5 })
        if not cok and code == "ZNODEEXISTS" and tries > 1 then return true end -- an earlier try's
        return cok, cmsg, code
      end)
      -- the holder: its connect blocks (the others wait meanwhile; the judge sees that gap);
      -- both retried, bounded
      rounds[i], by_k[tostring(k)] = r, r
      M.retry(("round %d: the holder's %s"):format(k, fam.name), function()
        local cok, hc = pcall(util.connect, r.net.hosts, { session_timeout = S, identity = "holder-" .. k,
                                                          log_level = "none" })
        if not cok then return nil, hc, "ZCONNECTIONLOSS" end
        r.hc = hc
        -- the hold is taken in a coroutine while all is driven; a hold belongs to the coroutine
        -- that took it (is_held() asks for the caller's), so that coroutine keeps it and reads it
        -- (every 2 ms, at the pumps) until the round lets go
        local res
        hc:spawn(function()
          local h, herr = fam.hold(hc, r.path, r.ev_h)
          res = { h, herr }
          if not h then return end
          while not r.let_go do
            r.held_now = h.held()
            hc:sleep(0.002)
          end
          h.close()
        end)
        drive_until(function() return res ~= nil end, 30, ("round %d: the holder's %s"):format(k, fam.name))
        local h, herr = res[1], res[2]
        if h then
          r.sid = hc:session()
          r.held_now = true
          r.h = { fields = h.fields, held = function() return r.held_now end,
                  close = function() r.let_go = true end }
          r.hrec:log(hold_ev, r.path, r.h.fields, now())
          return true
        end
        pcall(hc.close, hc)
        local code = tostring(herr):match("^(%u[%u_]+):") or "ZOPERATIONTIMEOUT"
        return nil, herr, code
      end, 3)
    end
    -- the waiters: one process for the batch
    out = ("%s/waiters-%d.out"):format(ctx.dir, rounds[1].k)
    local args = { ctx.fam_key, ctx.zk.hosts, out, tostring(3 * S + 20) }
    for _, r in ipairs(rounds) do args[#args + 1] = r.k .. "=" .. r.path end
    worker = testing.worker{ script = "spec/support/loss_waiters.lua", args = args }
    -- every waiter queued behind its holder (or granted already: judged below)
    local queued = {}
    local listing = false
    drive_until(function()
      local all = true
      for _, r in ipairs(rounds) do
        if not queued[r] and not r.granted_at then
          all = false
          if listing ~= ctx.obs then -- (one listing at a time, on the current setter's client)
            local obs = ctx.obs
            listing = obs
            obs:spawn(function()
              local names = obs:children(fam.queue(r.path), { timeout = 5 })
              if names and #names >= 2 then queued[r] = true end
              if listing == obs then listing = false end
            end)
          end
        end
      end
      return all
    end, 30, "the waiters queueing")
    -- arm the watches and the proxies (not for a round already granted or lost); the set follows
    -- after a drawn delay
    for _, r in ipairs(rounds) do
      if not r.granted_at and not r.learned_at then
        local res
        local function arm()
          res = nil
          r.hc:spawn(function() res = pack(r.hc:get(r.wpath, { watch = true, timeout = 5 })) end)
          drive_until(function() return res ~= nil or r.learned_at ~= nil end, 30, ("round %d: the watch"):format(r.k))
          if r.learned_at then return true end -- lost before the fault: void (see M.run)
          local w = res[3]
          if res[1] ~= nil and (type(w) == "table" or type(w) == "userdata") then r.watch = w return true end
          return nil, ("round %d: no watch armed: %s"):format(r.k, tostring(res[2])),
            res[1] == nil and res[3] or "ZOPERATIONTIMEOUT"
        end
        M.retry(("round %d: arming the watch"):format(r.k), arm, 3)
        if not r.learned_at and not r.granted_at then
          r.set_at = now() + ctx.rng() * S * 1000 / 3
          r.pushes_before = r.net:status().push_silenced or 0
          r.net:blackhole_after_push(3 * S + 5, 30)
          r.armed_at = now()
        end
      end
    end
    -- the holders' loop: a set when due, the holders pumped, the waiters' grants read
    local deadline = now() + (3 * S + 10) * 1000
    local last_rq = M.run_delay_ms()
    for _ = 1, 1000000 do
      local t = now()
      for _, r in ipairs(rounds) do
        if r.armed_at and not r.set_sent and t >= r.set_at then
          r.set_sent = true
          r.set_t = now()
          ctx.obs:spawn(function()
            for _ = 1, 3 do -- bounded: a set that times out under load is sent again
              local sok, smsg, code = ctx.obs:set(r.wpath, "1", nil, { timeout = 5 })
              if sok then r.set_err = nil return end
              r.set_err = smsg
              if not M.TRANSIENT[code] or ctx.obs.state == "CLOSED" then return end
            end
          end)
        end
      end
      step()
      t = now()
      local rq = M.run_delay_ms()
      local rq_gap = rq - last_rq
      last_rq = rq
      local pending = 0
      for _, r in ipairs(rounds) do
        if not r.decided then
          r.rq = math.max(r.rq, rq_gap)
          if r.granted_at and (r.learned_at or not r.armed_at) then r.decided = t end
        end
        if not r.decided then pending = pending + 1 end
      end
      if pending == 0 or t >= deadline then break end
      ctx.obs:sleep(0.005)
    end
  end)
  -- the proxies: when did the push go through
  for _, r in ipairs(rounds) do
    local st = r.net:status()
    r.push_ms = r.pushes_before and (st.push_silenced or 0) > r.pushes_before and st.push_ms or nil
    r.pushed = r.push_ms ~= nil
  end
  -- clean up: stop the waiters, heal, stop every holder, close the clients
  if out then
    local stop = io.open(out .. ".stop", "w")
    if stop then stop:close() end
  end
  if worker and not worker:wait(20) then worker:stop() end
  for _, r in ipairs(rounds) do pcall(r.net.heal, r.net) end
  for _, r in ipairs(rounds) do
    if r.h then pcall(r.h.close) end
    if r.hc then pcall(r.hc.close, r.hc) end
    pcall(ctx.obs.delete, ctx.obs, r.wpath)
  end
  if not ok then error(err, 0) end
  return rounds
end

-- M.run(ctx) -> result: runs batches until M.ROUNDS rounds are judged; returns
-- { judged = {rounds}, paused = {rounds}, void = {rounds}, overlaps = {rounds}, failed = {rounds},
-- lines = {text}, history, margins, summary }. ctx: zk, obs (a direct client for sets and
-- listings), connect_obs (makes a new one when its session ended), fam_key (a key of
-- M.families), tag, seed, nets (proxies to reuse; more are made as needed).
--
-- Judging a round (times from CLOCK_MONOTONIC, shared by both processes). learned: when the
-- holder was told; granted: when the waiters' process saw the grant; deadline: the holder's own
-- loss deadline (client:loss_deadline(), the latest read while its hold's session was current:
-- the server cannot expire the session before it); a due pump: the first process() call on the
-- holder's client that started at or past that deadline (it must report LOST).
--   ok when learned <= granted, unless the waiters' process waited for a CPU longer than the
--     margin around the grant (the grant may have come that much earlier): then "paused".
--   OVERLAP when the holder was not told by the grant and either a due pump ended with the hold
--     still held (process() ran past the deadline and did not report), or the grant came before
--     the deadline (the deadline the client keeps is wrong), or no deadline was ever read.
--   paused when granted after the deadline, not told, and no pump ran between the deadline and
--     the grant (the process was not running, or was busy elsewhere: outside the guarantee), or
--     the due pump started before the grant and ended after it having waited for a CPU at least
--     that long. Measured, never assumed: the line shows the deadline, the pumps around it and
--     the CPU wait.
--   BLOCKED (a failure) when a holder's process() call blocked longer than BLOCK_MS (not waiting
--     for a CPU): process() must never block. A holder blocked in its own call is no excuse.
--   void when the holder's session ended before the fault was armed or fired (the waiter granted
--     then, or the holder told then, or no push) and the round is not an overlap: the push path
--     was not exercised.
--   A paused or void round is neither a pass nor a failure; another round runs in its place.
function M.judge(r)
  r.margin = r.granted_at and r.learned_at and (r.granted_at - r.learned_at) or nil
  -- (told before its fault was armed, or before the push went through: the push path was not
  -- what ended the hold)
  local early = r.early or (r.learned_at and (not r.armed_at or not r.pushed))
  local why, kind
  if not r.granted_at then
    if early then return "void", "the holder's session ended before the fault was armed; no grant" end
    if not r.pushed then return "failed", "NO PUSH (the fault never fired)" end
    return "failed", r.learned_at and "NO GRANT within the round" or "neither learned nor granted"
  elseif r.stall > M.BLOCK_MS then
    -- process() must never block (docs/design.md, decision 3): while it does, the holder
    -- cannot be told, and a waiter in another process can be granted meanwhile
    return "failed", ("BLOCKED: a holder's process() call blocked %.0f ms (%.0f ms of it on a CPU)")
      :format(r.stall, r.stall_cpu or 0)
  elseif r.margin and r.margin >= 0 then
    if early then kind, why = "void", ("the holder's session ended before %s (told first)")
      :format(r.armed_at and "the push" or "the fault was armed")
    elseif (r.grant_rq or 0) >= r.margin then
      kind, why = "paused", ("the waiters' process waited %.0f ms for a CPU around the grant; not judged")
        :format(r.grant_rq)
    else kind, why = "ok", "ok" end
  elseif r.missed then
    kind, why = "overlap", ("OVERLAP: a pump %.0f ms past the holder's loss deadline did not report LOST")
      :format(math.max(0, r.missed - r.deadline))
  elseif not r.deadline then
    kind, why = "overlap", "OVERLAP: granted, and the holder's loss deadline was never read"
  elseif r.granted_at < r.deadline then
    kind, why = "overlap", ("OVERLAP: granted %.0f ms before the holder's own loss deadline")
      :format(r.deadline - r.granted_at)
  else
    local dp = r.due_pump
    if not dp or dp.t0 > r.granted_at then
      kind, why = "paused", ("paused: the holder's client was not pumped from its loss deadline to the grant "
        .. "(%.0f ms; the last pump before the grant %s); not judged")
        :format(r.granted_at - r.deadline, r.last_before_grant
          and ("%.0f ms before the deadline"):format(r.deadline - r.last_before_grant) or "not among the last 32")
    elseif dp.rq >= dp.t1 - r.granted_at then
      kind, why = "paused", ("paused: the pump past the deadline ran %.0f ms across the grant, %.0f ms of it "
        .. "waiting for a CPU; not judged"):format(dp.t1 - dp.t0, dp.rq)
    else
      kind, why = "overlap", ("OVERLAP: the pump past the deadline started before the grant and reported "
        .. "%.0f ms after it"):format(dp.t1 - r.granted_at)
    end
  end
  if kind == "overlap" and r.learned_at then why = why .. (" (told %.0f ms after the grant)"):format(-r.margin) end
  if kind == "overlap" and early then why = why .. " (before the fault was armed)" end
  return kind, why
end

function M.run(ctx)
  ctx.seq = 0
  ctx.fam = M.families[ctx.fam_key]
  ctx.rng = testing.rng(ctx.seed or 1)
  ctx.nets = ctx.nets or {}
  ctx.dir = shell.mktemp("zklock-loss")
  ctx.connect_obs = ctx.connect_obs or function()
    return util.connect(ctx.zk.hosts, { session_timeout = 10, identity = "setter" })
  end
  for i = #ctx.nets + 1, M.PAIRS do ctx.nets[i] = testing.proxy(ctx.zk.hosts) end
  local res = { judged = {}, paused = {}, void = {}, overlaps = {}, failed = {}, lines = {}, recs = {} }
  local limit = 2 * M.ROUNDS
  local tried = 0
  while #res.judged < M.ROUNDS and tried < limit do
    local n = math.min(M.PAIRS, M.ROUNDS - #res.judged, limit - tried)
    tried = tried + n
    for _, r in ipairs(batch(ctx, n)) do
      local base = r.push_ms or r.set_t or r.deadline or 0
      local function rel(t) return t and ("%+.0f"):format(t - base) or "never" end
      local kind, why = M.judge(r)
      if kind == "failed" then res.failed[#res.failed + 1] = r
      elseif kind == "overlap" then res.overlaps[#res.overlaps + 1] = r
      elseif kind == "paused" then res.paused[#res.paused + 1] = r
      elseif kind == "void" then res.void[#res.void + 1] = r end
      if kind == "ok" or kind == "overlap" then
        res.judged[#res.judged + 1] = r
        -- the checker reads the judged rounds (a paused round's late records are left out)
        res.recs[#res.recs + 1] = r.hrec
        res.recs[#res.recs + 1] = r.wrec
      end
      res.lines[#res.lines + 1] = ("    round %2d: push %s after the set; holder learned %s ms (%s), waiter granted "
        .. "%s ms after the push; holder's loss deadline %s ms; margin %s ms; holders' loop: longest gap %.0f ms, "
        .. "longest block in a pump call %.0f ms, CPU wait %.0f ms; waiters' CPU wait %s ms: %s"):format(r.k,
        r.push_ms and r.set_t and ("%.0f ms"):format(r.push_ms - r.set_t) or "(none)",
        rel(r.learned_at), r.learned_how or "-", rel(r.granted_at), rel(r.deadline),
        r.margin and ("%.0f"):format(r.margin) or "-", r.gap, r.stall, r.rq,
        r.grant_rq and ("%.0f"):format(r.grant_rq) or "-", why)
    end
    if (#res.failed > 0 or #res.overlaps > 0) and tried >= M.ROUNDS then break end
  end
  shell.remove_tree(ctx.dir)
  res.tried = tried
  res.history = check.load(res.recs)
  local margins = {}
  for _, r in ipairs(res.judged) do if r.margin then margins[#margins + 1] = r.margin end end
  table.sort(margins)
  res.margins = margins
  local function ms(x) return x and ("%.0f"):format(x) or "-" end
  res.summary = ("[loss %s] session %g s, %d rounds judged (%d run, %d paused, %d void), %d overlap(s), %d failed; "
    .. "margin holder-learned -> grant min/median/max %s/%s/%s ms"):format(ctx.fam.name, M.SESSION, #res.judged,
    tried, #res.paused, #res.void, #res.overlaps, #res.failed, ms(margins[1]), ms(median(margins)),
    ms(margins[#margins]))
  return res
end

-- The assertion every family spec makes: prints the rounds, then fails on an overlap (with both
-- times), a failed round, too few judged rounds, or a checker violation.
function M.assert_safe(res, fam)
  print("\n  " .. res.summary)
  for _, l in ipairs(res.lines) do print(l) end
  local ok, msg = fam.check(res.history)
  local overlaps = {}
  for _, r in ipairs(res.overlaps) do
    overlaps[#overlaps + 1] = ("round %d: waiter granted %s, holder learned %s"):format(r.k,
      r.granted_at and ("%.0f"):format(r.granted_at) or "?", r.learned_at and ("%.0f"):format(r.learned_at) or "never")
  end
  print("  checker: " .. (ok and "no violation" or tostring(msg)))
  assert.is_true(#res.failed == 0, ("%d round(s) failed (see the lines above)"):format(#res.failed))
  assert.is_true(#res.overlaps == 0, ("%d of %d judged rounds: the waiter was granted before the holder learned of the "
    .. "loss:\n  %s"):format(#res.overlaps, #res.judged, table.concat(overlaps, "\n  ")))
  assert.is_true(ok == true, "the checker disagrees with the explicit comparison: " .. tostring(msg))
  assert.is_true(#res.judged >= M.ROUNDS, ("only %d of %d rounds could be judged (%d paused: the machine was too busy "
    .. "to pump the holders on time; %d void: a holder's session ended before its fault was armed)")
    :format(#res.judged, M.ROUNDS, #res.paused, #res.void))
end

-- The whole describe of a family spec (35, 36, 37): a server of its own (a 200 ms tick), the
-- setter's client, and one test per family in `names`, seeded seed_base + its index. Call it at
-- the top level of the spec file.
function M.describe_families(names, seed_base)
  local busted = require("busted") -- describe, it, setup, teardown (a spec file has them as globals)
  local fixture = require("support.fixture")
  busted.describe("loss after a server push #faults #slow", function()
    local zk, nets = nil, {}
    fixture.server(M.SERVER, { own = "a 200 ms tick: the server expires sessions within 200 ms of their "
      .. "deadline, so the rounds are strict" }, function(s) zk = s end)
    busted.teardown(function() for _, n in ipairs(nets) do pcall(n.stop, n) end end)

    for i, name in ipairs(names) do
      local fam = M.families[name]
      busted.it(fam.name .. ": the holder learns of the loss before the waiter is granted", function()
        -- the setter's client: its own per test, replaced by M.run when its session ends
        local ctx = { zk = zk, fam_key = name, tag = name, seed = seed_base + i, nets = nets }
        ctx.connect_obs = function()
          return M.retry("the setter's connect", function()
            local ok, c = pcall(util.connect, zk.hosts, { session_timeout = 10, identity = "setter" })
            if ok then return c end
            return nil, c, "ZCONNECTIONLOSS"
          end, 3)
        end
        -- the proxies first: starting them takes a while, and the setter's client is not driven then
        for k = #nets + 1, M.PAIRS do nets[k] = testing.proxy(zk.hosts) end
        ctx.obs = ctx.connect_obs()
        local ok, res = pcall(M.run, ctx)
        pcall(ctx.obs.close, ctx.obs)
        if not ok then error(res, 0) end
        M.assert_safe(res, fam)
      end)
    end
  end)
end

return M
