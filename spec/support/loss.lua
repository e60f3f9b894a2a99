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
-- Pump order: every loop iteration processes the waiters' clients before the holders', so when a
-- grant and the holder's loss become due in the same iteration the grant is recorded first (an
-- overlap is reported, never hidden by the order).
--
-- Paused process (not covered by the guarantee: LOST is reported on time only if process() runs
-- at least every few hundred ms). All clients live in this one process; if it was not scheduled
-- for a while, every event is recorded late by that while. So each round measures the largest
-- gap between two iterations of its pump loop from the set to its decision; a gap above PAUSE_MS
-- (half the core's margin, SESSION/20, at least 100 ms) makes the round "paused":
--   * an overlap bigger than the gap still fails (a pause of that length cannot explain it);
--   * otherwise the round is neither a pass nor a failure: it is printed, and not counted, and
--     another round is run in its place (at most ROUNDS more in all; fewer judged rounds than
--     ROUNDS then fail the spec as "machine too busy", which is visible, not a silent pass).
--
-- Environment: ZKLOCK_LOSS_ROUNDS (default 20), ZKLOCK_LOSS_SESSION (seconds, default 2),
-- ZKLOCK_LOSS_PAIRS (rounds at once, default 7).
local assert = require("luassert") -- the spec files get it from busted; a required module does not
local core = require("zklock.core")
local testing = require("zklock.testing")
local check = testing.check
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
M.PAUSE_MS = math.max(100, M.SESSION * 1000 / 20)
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
      lt:on_change(function(leading) if h.led and not leading then ev.learned("on_change false") end end)
      local ok, err = lt:await(10)
      if not ok then lt:close() return nil, err end
      h.led = true
      h.held = function() return lt:has_leadership() end
      h.close = function() pcall(lt.close, lt) end
      return h
    end,
    contend = function(wc, path, ev)
      local lt = wc:latch(path)
      local w = {}
      lt:on_change(function(leading)
        if leading and not w.got then w.got = true ev.granted() ev.released() end
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

-- One batch of n rounds at once. ctx = { zk, obs, nets, fam, tag, seq (round counter), rng }.
local function batch(ctx, n)
  local fam, S = ctx.fam, M.SESSION
  local rounds = {}
  for i = 1, n do
    ctx.seq = ctx.seq + 1
    local k = ctx.seq
    local r = { k = k, net = ctx.nets[i], path = ("/loss/%s/%d/r%d"):format(ctx.tag, testing.pid, k),
                wpath = ("/loss-w/%s-%d-r%d"):format(ctx.tag, testing.pid, k), gap = 0 }
    r.hrec = check.recorder(nil, "holder-" .. k)
    r.wrec = check.recorder(nil, "waiter-" .. k)
    local key = r.path
    local hold_ev, rel_ev = fam.lead and "lead" or "acquire", fam.lead and "unlead" or "release"
    r.ev_h = {
      learned = function(how)
        if r.learned_at then return end
        r.learned_at, r.learned_how = now(), how
        r.hrec:log(rel_ev, key, nil, r.learned_at)
      end,
    }
    r.ev_w = {
      granted = function()
        if r.granted_at then return end
        r.granted_at = now()
        r.learned_by_grant = r.learned_at ~= nil
        r.wrec:log(hold_ev, key, r.w and r.w.fields or nil, r.granted_at)
      end,
      released = function() r.wrec:log(rel_ev, key, nil, now()) end,
    }
    assert(ctx.obs:create(r.wpath, "0", { parents = true }))
    r.hc = util.connect(r.net.hosts, { session_timeout = S, identity = "holder-" .. k, log_level = "none" })
    r.wc = util.connect(ctx.zk.hosts, { session_timeout = 10, identity = "waiter-" .. k, log_level = "none" })
    local h, err = fam.hold(r.hc, r.path, r.ev_h)
    assert(h, ("round %d: the holder could not take the %s: %s"):format(k, fam.name, tostring(err)))
    r.h = h
    r.hrec:log(hold_ev, key, h.fields, now())
    r.w = fam.contend(r.wc, r.path, r.ev_w)
    rounds[i] = r
  end
  -- every waiter queued behind its holder
  local qok = util.drive_until(ctx.clients_of(rounds), function()
    for _, r in ipairs(rounds) do
      if r.w.err then error(("round %d: the waiter failed: %s"):format(r.k, r.w.err)) end
      if children_count(ctx.obs, fam.queue(r.path)) < 2 then return false end
    end
    return true
  end, 15)
  assert(qok, "the waiters did not queue within 15 s")
  for _, r in ipairs(rounds) do
    assert(not r.granted_at, ("round %d: the waiter was granted while the holder held"):format(r.k))
  end
  -- arm the watches and the proxies; the set follows after a drawn delay
  for _, r in ipairs(rounds) do
    local _, _, w = r.hc:get(r.wpath, { watch = true, timeout = 5 })
    assert(type(w) == "table" or type(w) == "userdata", ("round %d: no watch armed"):format(r.k))
    r.watch = w
    r.armed_at = now()
    r.set_at = r.armed_at + ctx.rng() * S * 1000 / 3
    r.pushes_before = r.net:status().push_silenced or 0
    r.net:blackhole_after_push(3 * S + 5, 30)
  end
  -- the loop: waiters' clients first, then holders'; a set when due; every gap measured
  local deadline = now() + (3 * S + 10) * 1000
  local last = now()
  local pending
  for _ = 1, 1000000 do
    local t = now()
    for _, r in ipairs(rounds) do
      if not r.set_sent and t >= r.set_at then
        r.set_sent = true
        r.set_t = now()
        r.gap_from = r.set_t
        assert(ctx.obs:set(r.wpath, "1", nil, { timeout = 5 }))
      end
    end
    for _, r in ipairs(rounds) do if r.wc.state ~= "CLOSED" then r.wc:process() end end
    for _, r in ipairs(rounds) do
      if r.hc.state ~= "CLOSED" then r.hc:process() end
      if not r.learned_at and r.set_sent and not r.h.held() then
        r.ev_h.learned("is_held() false")
      end
    end
    t = now()
    local gap = t - last
    last = t
    pending = 0
    for _, r in ipairs(rounds) do
      if r.gap_from and not r.decided then r.gap = math.max(r.gap, gap) end
      if not r.decided and r.granted_at and r.learned_at then r.decided = t end
      if not r.decided then pending = pending + 1 end
    end
    if pending == 0 or t >= deadline then break end
    rounds[1].wc:sleep(0.005)
  end
  -- the proxies: when did the push go through
  for _, r in ipairs(rounds) do
    local st = r.net:status()
    r.push_ms = (st.push_silenced or 0) > r.pushes_before and st.push_ms or nil
    r.pushed = r.push_ms ~= nil
  end
  -- clean up: heal, stop every participant, close the clients
  for _, r in ipairs(rounds) do pcall(r.net.heal, r.net) end
  for _, r in ipairs(rounds) do
    if r.w.close then r.w.close() end
    pcall(r.h.close)
    pcall(r.hc.close, r.hc)
    pcall(r.wc.close, r.wc)
    pcall(ctx.obs.delete, ctx.obs, r.wpath)
  end
  return rounds
end

-- M.run(ctx) -> result: runs batches until M.ROUNDS rounds are judged; returns
-- { judged = {rounds}, paused = {rounds}, overlaps = {rounds}, lines = {text}, history }.
-- ctx: zk, obs (a direct client for sets and listings), fam (a family), tag, seed.
function M.run(ctx)
  ctx.seq = 0
  ctx.rng = testing.rng(ctx.seed or 1)
  ctx.nets = ctx.nets or {}
  for i = #ctx.nets + 1, M.PAIRS do ctx.nets[i] = testing.proxy(ctx.zk.hosts) end
  ctx.clients_of = function(rounds)
    local cs = { ctx.obs }
    for _, r in ipairs(rounds) do cs[#cs + 1] = r.wc cs[#cs + 1] = r.hc end
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
      local overlap = r.granted_at and (not r.learned_at or r.granted_at < r.learned_at)
      r.margin = r.granted_at and r.learned_at and (r.granted_at - r.learned_at) or nil
      local why
      if not r.pushed then
        why = "NO PUSH (the fault never fired)"
        res.failed[#res.failed + 1] = r
      elseif not r.granted_at then
        why = r.learned_at and "NO GRANT within the round" or "neither learned nor granted"
        res.failed[#res.failed + 1] = r
      elseif overlap and not r.learned_at then
        why = "OVERLAP: granted, holder never learned"
        res.overlaps[#res.overlaps + 1] = r
      elseif overlap and r.gap > M.PAUSE_MS and (r.learned_at - r.granted_at) <= r.gap then
        why = ("paused (pump gap %.0f ms), overlap %.0f ms not judged"):format(r.gap, r.learned_at - r.granted_at)
        res.paused[#res.paused + 1] = r
      elseif overlap then
        why = ("OVERLAP by %.0f ms"):format(r.learned_at - r.granted_at)
        res.overlaps[#res.overlaps + 1] = r
      elseif r.gap > M.PAUSE_MS then
        why = ("paused (pump gap %.0f ms), not judged"):format(r.gap)
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
      res.lines[#res.lines + 1] = ("    round %2d: push at set%s; holder learned %s ms (%s), waiter granted %s ms "
        .. "after the push; margin %s ms; gap %.0f ms: %s"):format(r.k,
        r.push_ms and r.set_t and ("%+.0f ms"):format(r.push_ms - r.set_t) or " (no push)",
        rel(r.learned_at), r.learned_how or "-", rel(r.granted_at),
        r.margin and ("%.0f"):format(r.margin) or "-", r.gap, why)
    end
    if #res.failed > 0 or #res.overlaps > 0 and tried >= M.ROUNDS then break end
  end
  res.tried = tried
  res.history = check.load(res.recs)
  local margins = {}
  for _, r in ipairs(res.judged) do if r.margin then margins[#margins + 1] = r.margin end end
  table.sort(margins)
  res.margins = margins
  res.summary = ("[loss %s] session %g s, %d rounds judged (%d run, %d paused), %d overlap(s), %d failed; "
    .. "margin holder-learned -> grant min/median/max %s/%s/%s ms"):format(ctx.fam.name, M.SESSION, #res.judged,
    tried, #res.paused, #res.overlaps, #res.failed,
    margins[1] and ("%.0f"):format(margins[1]) or "-", margins[1] and ("%.0f"):format(median(margins)) or "-",
    margins[1] and ("%.0f"):format(margins[#margins]) or "-")
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
  assert.is_true(#res.failed == 0, ("%d round(s) failed to run (see the lines above)"):format(#res.failed))
  assert.is_true(#res.overlaps == 0, ("%d of %d judged rounds: the waiter was granted before the holder learned of the "
    .. "loss:\n  %s"):format(#res.overlaps, #res.judged, table.concat(overlaps, "\n  ")))
  assert.is_true(ok == true, "the checker disagrees with the explicit comparison: " .. tostring(msg))
  assert.is_true(#res.judged >= M.ROUNDS, ("only %d of %d rounds could be judged (%d paused: the machine was too busy "
    .. "to pump the holders on time)"):format(#res.judged, M.ROUNDS, #res.paused))
end

return M
