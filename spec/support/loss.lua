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
-- runs). On a busy machine either process may wait for a CPU; each measures that wait (the
-- kernel's run-queue delay, M.run_delay_ms) and a round is set aside as "paused", neither pass nor
-- failure, only when such a wait can explain its outcome (see M.run). Blocking inside a call is
-- not a pause (the process was not waiting for a CPU): it counts as is, and a holder's process()
-- call blocked longer than BLOCK_MS fails its round (process() must never block: meanwhile the
-- holder cannot be told, and the waiter may be granted). Another
-- round runs in place of a paused one (at most ROUNDS more in all; fewer judged rounds than
-- ROUNDS fail the spec as "machine too busy", visibly, never as a pass).
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

local function children_count(c, path)
  local names = c:children(path, { timeout = 5 })
  return names and #names or 0
end

-- How long this process has waited for a CPU so far, in ms (the kernel's run-queue delay of
-- this thread: /proc/thread-self/schedstat's second field, in ns). Time spent blocked in a call
-- (a poll that should not block, say) does not count: that is the library's doing, not the
-- machine's.
function M.run_delay_ms()
  local fh = io.open("/proc/thread-self/schedstat") or io.open("/proc/self/schedstat")
  if not fh then return 0 end
  local _, rq = fh:read("*n", "*n")
  fh:close()
  return (rq or 0) / 1e6
end

local function read_lines(path)
  local fh = io.open(path)
  if not fh then return {} end
  local t = {}
  for l in fh:lines() do t[#t + 1] = l end
  fh:close()
  return t
end

-- One batch of n rounds at once. ctx = { zk, obs, nets, fam, tag, seq (round counter), rng, dir }.
local function batch(ctx, n)
  local fam, S = ctx.fam, M.SESSION
  local rounds, by_k = {}, {}
  local hold_ev, rel_ev = fam.lead and "lead" or "acquire", fam.lead and "unlead" or "release"
  for i = 1, n do
    ctx.seq = ctx.seq + 1
    local k = ctx.seq
    local r = { k = k, net = ctx.nets[i], path = ("/loss/%s/%d/r%d"):format(ctx.tag, testing.pid, k),
                wpath = ("/loss-w/%s-%d-r%d"):format(ctx.tag, testing.pid, k), gap = 0, rq = 0, stall = 0 }
    r.hrec = check.recorder(nil, "holder-" .. k)
    r.wrec = check.recorder(nil, "waiter-" .. k)
    r.ev_h = {
      learned = function(how)
        if r.learned_at then return end
        r.learned_at, r.learned_how = now(), how
        r.hrec:log(rel_ev, r.path, nil, r.learned_at)
      end,
    }
    assert(ctx.obs:create(r.wpath, "0", { parents = true }))
    r.hc = util.connect(r.net.hosts, { session_timeout = S, identity = "holder-" .. k, log_level = "none" })
    local h, err = fam.hold(r.hc, r.path, r.ev_h)
    assert(h, ("round %d: the holder could not take the %s: %s"):format(k, fam.name, tostring(err)))
    r.h = h
    r.hrec:log(hold_ev, r.path, h.fields, now())
    rounds[i], by_k[tostring(k)] = r, r
  end
  -- the waiters: one process for the batch
  local out = ("%s/waiters-%d.out"):format(ctx.dir, rounds[1].k)
  local args = { ctx.fam_key, ctx.zk.hosts, out, tostring(3 * S + 20) }
  for _, r in ipairs(rounds) do args[#args + 1] = r.k .. "=" .. r.path end
  local worker = testing.worker{ script = "spec/support/loss_waiters.lua", args = args }
  local function scan()
    for _, l in ipairs(read_lines(out)) do
      local tag, k, a, b = l:match("^(%u+) ?(%d*) ?(%S*) ?(%S*)")
      local r = by_k[k]
      if tag == "G" and r and not r.granted_at then
        r.granted_at, r.grant_rq = tonumber(a), tonumber(b)
        r.wrec:log(hold_ev, r.path, fam.wait_fields, r.granted_at)
        r.wrec:log(rel_ev, r.path, nil, r.granted_at + 1)
      elseif tag == "E" and r then
        error(("round %d: the waiter failed: %s"):format(r.k, a))
      end
    end
  end
  local ok, err = pcall(function()
    -- every waiter queued behind its holder
    local qok = util.drive_until(ctx.clients_of(rounds), function()
      scan()
      if not worker:alive() then error("the waiters' process ended early:\n" .. worker:output()) end
      for _, r in ipairs(rounds) do
        if children_count(ctx.obs, fam.queue(r.path)) < 2 then return false end
      end
      return true
    end, 20)
    assert(qok, "the waiters did not queue within 20 s:\n" .. worker:output())
    scan()
    for _, r in ipairs(rounds) do
      assert(not r.granted_at, ("round %d: the waiter was granted while the holder held"):format(r.k))
    end
    -- arm the watches and the proxies; the set follows after a drawn delay
    for _, r in ipairs(rounds) do
      local _, _, w = r.hc:get(r.wpath, { watch = true, timeout = 5 })
      assert(type(w) == "table" or type(w) == "userdata", ("round %d: no watch armed"):format(r.k))
      r.watch = w
      r.set_at = now() + ctx.rng() * S * 1000 / 3
      r.pushes_before = r.net:status().push_silenced or 0
      r.net:blackhole_after_push(3 * S + 5, 30)
    end
    -- the holders' loop: a set when due, the holders pumped, the waiters' grants read
    local deadline = now() + (3 * S + 10) * 1000
    local last, last_rq = now(), M.run_delay_ms()
    for _ = 1, 1000000 do
      local t = now()
      for _, r in ipairs(rounds) do
        if not r.set_sent and t >= r.set_at then
          r.set_sent = true
          r.set_t = now()
          assert(ctx.obs:set(r.wpath, "1", nil, { timeout = 5 }))
        end
      end
      for _, r in ipairs(rounds) do
        local t1, rq1 = now(), M.run_delay_ms()
        if r.hc.state ~= "CLOSED" then r.hc:process() end
        -- (is_leader() and is_held() drive the client too)
        if not r.learned_at and r.set_sent and not r.h.held() then r.ev_h.learned("is_held() false") end
        if r.set_sent and not r.decided then
          -- wall time of the calls less their wait for a CPU: time spent blocked inside them
          r.stall = math.max(r.stall, (now() - t1) - (M.run_delay_ms() - rq1))
        end
      end
      scan()
      t = now()
      local rq = M.run_delay_ms()
      local gap, rq_gap = t - last, rq - last_rq
      last, last_rq = t, rq
      local pending = 0
      for _, r in ipairs(rounds) do
        if r.set_sent and not r.decided then
          r.gap, r.rq = math.max(r.gap, gap), math.max(r.rq, rq_gap)
          if r.granted_at and r.learned_at then r.decided = t end
        end
        if not r.decided then pending = pending + 1 end
      end
      if pending == 0 or t >= deadline then break end
      rounds[1].hc:sleep(0.005)
    end
  end)
  -- the proxies: when did the push go through
  for _, r in ipairs(rounds) do
    local st = r.net:status()
    r.push_ms = r.pushes_before and (st.push_silenced or 0) > r.pushes_before and st.push_ms or nil
    r.pushed = r.push_ms ~= nil
  end
  -- clean up: stop the waiters, heal, stop every holder, close the clients
  local stop = io.open(out .. ".stop", "w")
  if stop then stop:close() end
  if not worker:wait(20) then worker:stop() end
  for _, r in ipairs(rounds) do pcall(r.net.heal, r.net) end
  for _, r in ipairs(rounds) do
    pcall(r.h.close)
    pcall(r.hc.close, r.hc)
    pcall(ctx.obs.delete, ctx.obs, r.wpath)
  end
  if not ok then error(err, 0) end
  return rounds
end

-- M.run(ctx) -> result: runs batches until M.ROUNDS rounds are judged; returns
-- { judged = {rounds}, paused = {rounds}, overlaps = {rounds}, failed = {rounds}, lines = {text},
-- history, margins, summary }. ctx: zk, obs (a direct client for sets and listings), fam_key (a
-- key of M.families), tag, seed, nets (proxies to reuse; more are made as needed).
--
-- Judging a round (times from CLOCK_MONOTONIC, shared by both processes):
--   learned: when the holder was told; granted: when the waiters' process saw the grant.
--   OVERLAP when granted < learned (or the holder never learned), unless the holders' process
--     waited for a CPU at least as long as the overlap meanwhile (rq: it was not scheduled, so
--     it could not be told; a paused process is outside the guarantee): then "paused".
--   ok when learned <= granted, unless the waiters' process waited for a CPU longer than the
--     margin around the grant (the grant may have come that much earlier, before learned): then
--     "paused". A holder blocked in one of its own calls is no excuse: it counts as is.
--   A paused round is neither a pass nor a failure; another round runs in its place.
function M.run(ctx)
  ctx.seq = 0
  ctx.fam = M.families[ctx.fam_key]
  ctx.rng = testing.rng(ctx.seed or 1)
  ctx.nets = ctx.nets or {}
  ctx.dir = shell.mktemp("zklock-loss")
  for i = #ctx.nets + 1, M.PAIRS do ctx.nets[i] = testing.proxy(ctx.zk.hosts) end
  ctx.clients_of = function(rounds)
    local cs = { ctx.obs }
    for _, r in ipairs(rounds) do cs[#cs + 1] = r.hc end
    return cs
  end
  local res = { judged = {}, paused = {}, overlaps = {}, failed = {}, lines = {}, recs = {} }
  local limit = 2 * M.ROUNDS
  local tried = 0
  while #res.judged < M.ROUNDS and tried < limit do
    local n = math.min(M.PAIRS, M.ROUNDS - #res.judged, limit - tried)
    tried = tried + n
    for _, r in ipairs(batch(ctx, n)) do
      local base = r.push_ms or r.set_t or 0
      local function rel(t) return t and ("%+.0f"):format(t - base) or "never" end
      r.margin = r.granted_at and r.learned_at and (r.granted_at - r.learned_at) or nil
      local why
      if not r.pushed then
        why = "NO PUSH (the fault never fired)"
        res.failed[#res.failed + 1] = r
      elseif not r.granted_at then
        why = r.learned_at and "NO GRANT within the round" or "neither learned nor granted"
        res.failed[#res.failed + 1] = r
      elseif r.stall > M.BLOCK_MS then
        -- process() must never block (docs/design.md, decision 3): while it does, the holder
        -- cannot be told, and a waiter in another process can be granted meanwhile
        why = ("BLOCKED: a holder's process() call blocked %.0f ms"):format(r.stall)
        res.failed[#res.failed + 1] = r
      elseif not r.learned_at then
        why = "OVERLAP: granted, the holder never learned"
        res.overlaps[#res.overlaps + 1] = r
      elseif r.margin < 0 and -r.margin <= r.rq then
        why = ("paused: overlap %.0f ms while the holders' process waited %.0f ms for a CPU; not judged")
          :format(-r.margin, r.rq)
        res.paused[#res.paused + 1] = r
      elseif r.margin < 0 then
        why = ("OVERLAP by %.0f ms"):format(-r.margin)
        res.overlaps[#res.overlaps + 1] = r
      elseif (r.grant_rq or 0) >= r.margin then
        why = ("paused: the waiters' process waited %.0f ms for a CPU around the grant; not judged")
          :format(r.grant_rq)
        res.paused[#res.paused + 1] = r
      else
        why = "ok"
      end
      if why == "ok" or why:match("^OVERLAP") then
        res.judged[#res.judged + 1] = r
        -- the checker reads the judged rounds (a paused round's late records are left out)
        res.recs[#res.recs + 1] = r.hrec
        res.recs[#res.recs + 1] = r.wrec
      end
      res.lines[#res.lines + 1] = ("    round %2d: push %s after the set; holder learned %s ms (%s), waiter granted "
        .. "%s ms after the push; margin %s ms; holders' loop: longest gap %.0f ms, longest block in a pump "
        .. "call %.0f ms, CPU wait %.0f ms; waiters' CPU wait %s ms: %s"):format(r.k,
        r.push_ms and r.set_t and ("%.0f ms"):format(r.push_ms - r.set_t) or "(none)",
        rel(r.learned_at), r.learned_how or "-", rel(r.granted_at),
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
  res.summary = ("[loss %s] session %g s, %d rounds judged (%d run, %d paused), %d overlap(s), %d failed; "
    .. "margin holder-learned -> grant min/median/max %s/%s/%s ms"):format(ctx.fam.name, M.SESSION, #res.judged,
    tried, #res.paused, #res.overlaps, #res.failed, ms(margins[1]), ms(median(margins)), ms(margins[#margins]))
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
    .. "to pump the holders on time)"):format(#res.judged, M.ROUNDS, #res.paused))
end

-- The whole describe of a family spec (35, 36, 37): a server of its own (a 200 ms tick), the
-- setter's client, and one test per family in `names`, seeded seed_base + its index. Call it at
-- the top level of the spec file.
function M.describe_families(names, seed_base)
  local busted = require("busted") -- describe, it, setup, teardown (a spec file has them as globals)
  local fixture = require("support.fixture")
  busted.describe("loss after a server push #faults #slow", function()
    local zk, obs, nets = nil, nil, {}
    fixture.server(M.SERVER, { own = "a 200 ms tick: the server expires sessions within 200 ms of their "
      .. "deadline, so the rounds are strict" }, function(s) zk = s end)
    busted.setup(function() obs = util.connect(zk.hosts, { session_timeout = 10, identity = "setter" }) end)
    busted.teardown(function() for _, n in ipairs(nets) do pcall(n.stop, n) end end)

    for i, name in ipairs(names) do
      local fam = M.families[name]
      busted.it(fam.name .. ": the holder learns of the loss before the waiter is granted", function()
        local res = M.run{ zk = zk, obs = obs, fam_key = name, tag = name, seed = seed_base + i, nets = nets }
        M.assert_safe(res, fam)
      end)
    end
  end)
end

return M
