-- bench/leader.lua: leadership handover times, zklock vs Curator 5.4, on one throwaway ZooKeeper.
--
--   lua5.4 bench/leader.lua [--smoke] [--seconds S] [--kills N] [--session S] [--results FILE]
--
-- Run from the repository root after building build/ (cmake -B build): it uses the specs'
-- participant processes (spec/support/peers/zklock_leader.lua and CuratorPeer.java's leader and
-- latch commands, compiled with javac on first use), each logging its terms in CLOCK_MONOTONIC
-- milliseconds. Two cases, for each runtime and each recipe (election = client:leader vs
-- LeaderSelector, latch = client:latch vs LeaderLatch), two participants in separate processes:
--   release  each term lasts 50 ms and ends by giving leadership up (fn returns / the latch
--            closes); measured: the end of one term to the start of the next participant's term
--            (release request, the watch notification, the next one's check, its start).
--   kill -9  the leader holds until killed with SIGKILL; measured: the kill to the next leader's
--            start. Dominated by the session timeout (the server must expire the dead session).
-- Prints a table (median, p90, min, max in ms, and n) and writes it to --results if given.
-- Not part of the CI suite; --smoke (3 s runs, one kill each: about 1.5 min) checks that it runs.
package.path = "lua/?.lua;lua/?/init.lua;spec/?.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath

local testing = require("zklock.testing")
local core = require("zklock.core")
local fw = require("support.fault_worker")
local peers = require("support.peers.peer")
local leaders = require("support.leaders")
local intervals = require("support.intervals")

local opt = { seconds = 20, kills = 5, session = 4, smoke = false }
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--smoke" then opt.smoke = true
    elseif a == "--seconds" then i = i + 1; opt.seconds = assert(tonumber(arg[i]), "--seconds S")
    elseif a == "--kills" then i = i + 1; opt.kills = assert(tonumber(arg[i]), "--kills N")
    elseif a == "--session" then i = i + 1; opt.session = assert(tonumber(arg[i]), "--session S")
    elseif a == "--results" then i = i + 1; opt.results = assert(arg[i], "--results FILE")
    else error("unknown argument " .. a) end
    i = i + 1
  end
  if opt.smoke then opt.seconds, opt.kills = 3, 1 end
end

local now = core.now
local function sleep_until(pred, timeout)
  local deadline = now() + timeout * 1000
  while now() < deadline do
    if pred() then return true end
    testing.sleep(0.01)
  end
  return pred()
end

local zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }

local function participant(rt, kind, path, id, hold_ms, seconds, jvm)
  if rt == "zklock" then
    local w = leaders.zklock{ hosts = zk.hosts, mode = kind, path = path, id = id, hold_ms = hold_ms,
                              seconds = seconds, session = opt.session }
    return { rt = rt, log = w.log, proc = w }
  end
  local p = jvm or peers.curator(zk.hosts, { session_ms = opt.session * 1000 })
  local log = p.dir .. "/" .. id .. ".log"
  local seq = p:send(kind, { path = path, id = id, log = log, hold_ms = hold_ms, seconds = seconds })
  return { rt = rt, log = log, proc = p, seq = seq }
end

local function finish(p, timeout)
  if p.rt == "zklock" then return p.proc:wait_exit(timeout) end
  return p.proc:wait(p.seq, timeout).status == "ok"
end

local function stats(xs)
  table.sort(xs)
  local n = #xs
  if n == 0 then return { n = 0 } end
  local function q(f) return xs[math.max(1, math.min(n, math.ceil(f * n)))] end
  return { n = n, med = q(0.5), p90 = q(0.9), min = xs[1], max = xs[n] }
end

local function open_term(p)
  local begun
  for f in fw.log_records(p.log) do
    if f[1] == "B" then begun = tonumber(f[6]) elseif f[1] == "H" then begun = nil end
  end
  return begun
end

local rows = {}

-- release: gaps between consecutive terms of different participants
local function release_case(rt, kind)
  local path = ("/bench/%s/%s/release"):format(rt, kind)
  local jvms = {}
  if rt == "curator" then
    for i = 1, 2 do jvms[i] = peers.curator(zk.hosts, { session_ms = opt.session * 1000 }) end
  end
  local ps = {}
  for i = 1, 2 do ps[i] = participant(rt, kind, path, rt .. "-" .. i, 50, opt.seconds, jvms[i]) end
  for _, p in ipairs(ps) do assert(finish(p, opt.seconds + 60), "participant did not finish") end
  local log = intervals.new()
  for _, p in ipairs(ps) do log:add_file(p.log) end
  local r = log:check()
  assert(r.overlaps == 0, r.report)
  table.sort(r.all, function(a, b) return a.start < b.start end)
  local gaps = {}
  for i = 2, #r.all do
    local a, b = r.all[i - 1], r.all[i]
    if a.owner ~= b.owner then gaps[#gaps + 1] = b.start - a.finish end
  end
  for _, j in ipairs(jvms) do j:stop() end
  return stats(gaps), r
end

-- kill -9: the leader holds until killed; the kill to the next leader's start
local function kill_case(rt, kind)
  local path = ("/bench/%s/%s/kill"):format(rt, kind)
  local live, all, gaps = {}, {}, {}
  local n = 0
  local function add()
    n = n + 1
    local p = participant(rt, kind, path, rt .. "-" .. n, 600000, 600)
    live[#live + 1], all[#all + 1] = p, p
  end
  add(); add()
  for _ = 1, opt.kills do
    local leader
    assert(sleep_until(function()
      for _, p in ipairs(live) do if open_term(p) then leader = p return true end end
    end, 60), "no leader")
    testing.sleep(0.5) -- the survivor queued long ago; let the replacement queue behind it
    local at = now()
    os.execute(("kill -KILL %d"):format(leader.proc.pid))
    leader.killed_at = at
    for i, p in ipairs(live) do if p == leader then table.remove(live, i) break end end
    local start
    assert(sleep_until(function()
      start = open_term(live[1])
      return start ~= nil
    end, 60), "nobody took over")
    gaps[#gaps + 1] = start - at
    add()
  end
  for _, p in ipairs(live) do
    p.killed_at = now()
    os.execute(("kill -KILL %d"):format(p.proc.pid))
  end
  local log = intervals.new()
  for _, p in ipairs(all) do log:add_file(p.log, p.killed_at) end
  local r = log:check()
  assert(r.overlaps == 0, r.report)
  return stats(gaps), r
end

local t0 = os.time()
for _, kind in ipairs({ "leader", "latch" }) do
  for _, rt in ipairs({ "zklock", "curator" }) do
    local s, r = release_case(rt, kind)
    rows[#rows + 1] = { case = "release", kind = kind, rt = rt, s = s, terms = r.terms }
    io.stderr:write(("release %s %s: median %.1f ms (n=%d)\n"):format(kind, rt, s.med or -1, s.n))
    s, r = kill_case(rt, kind)
    rows[#rows + 1] = { case = "kill -9", kind = kind, rt = rt, s = s, terms = r.terms }
    io.stderr:write(("kill -9 %s %s: median %.0f ms (n=%d)\n"):format(kind, rt, s.med or -1, s.n))
  end
end
leaders.stop_all()
peers.stop_all()
zk:stop()

local out = {}
out[#out + 1] = ("Leadership handover, %s; one ZooKeeper 3.8 (forceSync on), session timeout %g s, %s%s."):format(
  os.date("!%Y-%m-%d %H:%M UTC"), opt.session, _VERSION, opt.smoke and " (SMOKE MODE: numbers meaningless)" or "")
out[#out + 1] = ""
out[#out + 1] = "| case | recipe | runtime | median ms | p90 ms | min ms | max ms | n | terms (0 overlaps) |"
out[#out + 1] = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for _, r in ipairs(rows) do
  local s = r.s
  local recipe = r.kind == "leader" and (r.rt == "zklock" and "client:leader" or "LeaderSelector")
    or (r.rt == "zklock" and "client:latch" or "LeaderLatch")
  out[#out + 1] = ("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %d | %d |"):format(r.case, recipe, r.rt,
    s.med or 0, s.p90 or 0, s.min or 0, s.max or 0, s.n, r.terms)
end
out[#out + 1] = ""
out[#out + 1] = ("(%d s in all)"):format(os.time() - t0)
local text = table.concat(out, "\n") .. "\n"
io.write(text)
if opt.results then testing.write_file(opt.results, text) end
