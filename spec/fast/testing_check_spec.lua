-- The fast tier (no ZooKeeper server): zklock.testing.check, the history checkers of the test kit.
-- Each checker gets a clean history it must pass and a known violation it must catch, with both
-- events named in its message; the log format round-trips through files and the command line.
--   busted --lua=lua5.4 spec/fast/testing_check_spec.lua
local check = require("zklock.testing.check")
local shell = require("zklock.testing.shell")
local unpack_ = table.unpack or unpack

-- A recorder for process p whose clock is set by the test: rec(t) logs at time t.
local function proc(p)
  local t = 0
  local r = check.recorder(nil, p, function() return t end)
  return function(at, ev, key, fields) t = at return r:log(ev, key, fields) end, r
end

local function history(...)
  local recs = {}
  for i = 1, select("#", ...) do recs[i] = select(i, ...) end
  return check.load(recs)
end

-- res = { checker(...) } must be a violation whose message mentions every word
local function caught(res, ...)
  local ok, msg, pair = res[1], res[2], res[3]
  assert.is_nil(ok)
  assert.is_string(msg)
  for _, w in ipairs({ ... }) do
    assert.truthy(msg:find(w, 1, true), ("violation message %q does not mention %q"):format(msg, w))
  end
  return msg, pair
end

describe("zklock.testing.check #fast", function()
  it("mutex: passes disjoint and touching holds, catches an overlap naming both holds", function()
    local a, ra = proc("p1")
    local b, rb = proc("p2")
    a(10, "acquire", "/l", { token = 1 }); a(20, "release", "/l")
    b(20, "acquire", "/l", { token = 2 }); b(30, "release", "/l")          -- touching is fine
    assert.is_true((check.mutex(history(ra, rb))))
    a(25, "acquire", "/other"); a(40, "release", "/other")                 -- another key
    a(35, "acquire", "/l", { token = 3 }); a(50, "release", "/l")
    b(45, "acquire", "/l", { token = 4 }); b(60, "release", "/l")
    local msg, pair = caught({ check.mutex(history(ra, rb)) }, "mutual exclusion", "/l", "p1 acquire", "p2 acquire",
      "token=3", "token=4", "at 35.000", "at 45.000")
    assert.are.equal("p1", pair.first.p)
    assert.are.equal("p2", pair.second.p)
    assert.truthy(msg:find("p1 release /l at 50.000", 1, true))
  end)

  it("mutex: an open hold lasts until its process's last event; ignore_interrupted skips interrupted holds", function()
    local a, ra = proc("p1")
    local b, rb = proc("p2")
    a(10, "acquire", "/l"); a(50, "write", "/l")                           -- never released
    b(40, "acquire", "/l"); b(60, "release", "/l")
    caught({ check.mutex(history(ra, rb)) }, "never ended", "p1 acquire")
    local c, rc = proc("p3")
    local d, rd = proc("p4")
    c(10, "acquire", "/l"); c(30, "release", "/l", { interrupted = true })
    d(20, "acquire", "/l"); d(40, "release", "/l")
    caught({ check.mutex(history(rc, rd)) }, "mutual exclusion")
    assert.is_true((check.mutex(history(rc, rd), { ignore_interrupted = true })))
  end)

  it("semaphore: at most N at once (opts.limit or limit= on acquire)", function()
    local procs, recs = {}, {}
    for i = 1, 4 do procs[i], recs[i] = proc("p" .. i) end
    for i = 1, 3 do procs[i](10 + i, "acquire", "/s"); procs[i](100, "release", "/s") end
    procs[4](100, "acquire", "/s"); procs[4](120, "release", "/s")          -- after the others
    assert.is_true((check.semaphore(history(table.unpack(recs)), { limit = 3 })))
    caught({ check.semaphore(history(table.unpack(recs)), { limit = 2 }) }, "semaphore limit", "more than 2",
      "p1 acquire", "p3 acquire")
    local e, re = proc("p5")
    e(50, "acquire", "/s", { limit = 3 }); e(60, "release", "/s")
    caught({ check.semaphore(history(re, table.unpack(recs)), { limit = 3 }) }, "more than 3", "p5 acquire")
    assert.has_error(function() check.semaphore(history(recs[1])) end)
  end)

  it("rwlock: readers share, a writer overlapping a reader or a writer is caught", function()
    local a, ra = proc("r1")
    local b, rb = proc("r2")
    local w, rw = proc("w1")
    a(10, "acquire", "/rw", { mode = "read" }); a(30, "release", "/rw")
    b(15, "acquire", "/rw", { mode = "read" }); b(35, "release", "/rw")
    w(35, "acquire", "/rw", { mode = "write" }); w(50, "release", "/rw")
    assert.is_true((check.rwlock(history(ra, rb, rw))))
    a(45, "acquire", "/rw", { mode = "read" }); a(60, "release", "/rw")
    caught({ check.rwlock(history(ra, rb, rw)) }, "readers/writer", "a reader while a writer",
      "w1 acquire", "r1 acquire")
    local x, rx = proc("w2")
    x(40, "acquire", "/rw", { mode = "write" }); x(41, "release", "/rw")
    caught({ check.rwlock(history(rx, rw)) }, "a writer while", "w1 acquire", "w2 acquire")
  end)

  it("tokens: rising in grant order; a lower token granted later is caught", function()
    local a, ra = proc("p1")
    local b, rb = proc("p2")
    a(10, "acquire", "/l", { token = 100 }); a(20, "release", "/l")
    b(30, "acquire", "/l", { token = 105 }); b(40, "release", "/l")
    assert.is_true((check.tokens(history(ra, rb))))
    a(50, "acquire", "/l", { token = 104 }); a(60, "release", "/l")
    caught({ check.tokens(history(ra, rb)) }, "fencing token order", "token 104 granted after token 105",
      "p2 acquire", "p1 acquire")
  end)

  it("fenced: a resource that accepts a stale token is caught; rejects and repeats are fine", function()
    local r, rr = proc("resource")
    r(10, "accept", "/db", { token = 5 }); r(11, "accept", "/db", { token = 5 })
    r(12, "reject", "/db", { token = 4 }); r(13, "accept", "/db", { token = 9 })
    assert.is_true((check.fenced(history(rr))))
    r(14, "accept", "/db", { token = 6 })
    caught({ check.fenced(history(rr)) }, "fenced resource", "stale token 6 accepted after token 9",
      "token=9", "token=6")
  end)

  it("fifo: grants in seq order, or in request order; an overtaking grant is caught", function()
    local a, ra = proc("p1")
    local b, rb = proc("p2")
    a(10, "acquire", "/q", { seq = 1 }); a(20, "release", "/q")
    b(30, "acquire", "/q", { seq = 2 }); b(40, "release", "/q")
    assert.is_true((check.fifo(history(ra, rb))))
    local c, rc = proc("p3")
    local d, rd = proc("p4")
    c(5, "request", "/q"); d(6, "request", "/q")
    d(10, "acquire", "/q"); d(20, "release", "/q")                         -- p4 overtook p3
    c(21, "acquire", "/q"); c(30, "release", "/q")
    caught({ check.fifo(history(rc, rd)) }, "FIFO", "p4 acquire", "p3 acquire")
    a(50, "acquire", "/q", { seq = 9 }); a(55, "release", "/q")
    b(60, "acquire", "/q", { seq = 7 }); b(65, "release", "/q")
    caught({ check.fifo(history(ra, rb)) }, "seq 7 granted after seq 9")
  end)

  it("leader: one leader at a time; two leaders at once are caught", function()
    local a, ra = proc("n1")
    local b, rb = proc("n2")
    a(10, "lead", "job"); a(20, "unlead", "job")
    b(25, "lead", "job"); b(40, "unlead", "job")
    assert.is_true((check.leader(history(ra, rb))))
    a(30, "lead", "job"); a(50, "unlead", "job")
    caught({ check.leader(history(ra, rb)) }, "single leader", "two leaders", "n2 lead job", "n1 lead job")
  end)

  it("queue: exactly once; a duplicate, an invented and a lost item are caught", function()
    local p, rp = proc("producer")
    local c, rc = proc("consumer")
    p(1, "enqueue", "/q", { item = "a" }); p(2, "enqueue", "/q", { item = "b" })
    c(3, "dequeue", "/q", { item = "a" }); c(4, "dequeue", "/q", { item = "b" })
    assert.is_true((check.queue(history(rp, rc))))
    local d, rd = proc("consumer2")
    d(5, "dequeue", "/q", { item = "b" })
    caught({ check.queue(history(rp, rc, rd)) }, "exactly-once", "item b delivered twice", "consumer dequeue",
      "consumer2 dequeue")
    local e, re = proc("consumer3")
    e(5, "dequeue", "/q", { item = "z" })
    caught({ check.queue(history(rp, rc, re)) }, "item z delivered but never enqueued")
    p(6, "enqueue", "/q", { item = "c" })
    caught({ check.queue(history(rp, rc)) }, "item c enqueued but never delivered")
    assert.is_true((check.queue(history(rp, rc), { complete = false })))
  end)

  it("all(): runs the named checks and reports the first failure and its name; bad names raise", function()
    local a, ra = proc("p1")
    local b, rb = proc("p2")
    a(10, "acquire", "/l", { token = 2 }); a(30, "release", "/l")
    b(40, "acquire", "/l", { token = 1 }); b(50, "release", "/l")
    assert.is_true((check.all(history(ra, rb), { "mutex", "rwlock" })))
    local ok, msg, _, name = check.all(history(ra, rb), "mutex,tokens")
    assert.is_nil(ok)
    assert.are.equal("tokens", name)
    assert.truthy(msg:find("token 1 granted after token 2", 1, true))
    assert.has_error(function() check.all(history(ra), { "nosuch" }) end)
    assert.has_error(function() check.all(history(ra), {}) end)
    assert.has_error(function() check.recorder(nil, nil) end)
    assert.has_error(function() check.recorder(42, "p") end)
    local _, r = proc("p")
    assert.has_error(function() r:log("two words", "/k") end)
  end)

  it("files: one log per process in a directory, read back in time order; the CLI exits 1 on a violation", function()
    local dir = shell.mktemp("zklock-zkcheck")
    finally(function() shell.remove_tree(dir) end)
    local t = 0
    local clock = function() return t end
    local r1 = check.recorder(dir .. "/p1.log", "p1", clock)
    local r2 = check.recorder(dir .. "/p2.log", "p2", clock)
    t = 10 r1:acquire("/l", { token = 1 })
    t = 15 r2:log("request", "/l")
    t = 20 r1:release("/l")
    t = 25 r2:acquire("/l", { token = 2, note = "tab\there" })
    t = 30 r2:release("/l")
    r1:close() r2:close()
    local h = check.load(dir)
    assert.are.equal(5, #h.events)
    local times = {}
    for i, ev in ipairs(h.events) do times[i] = ev.t end
    assert.are.same({ 10, 15, 20, 25, 30 }, times)
    assert.are.equal("tab here", h.events[4].f.note)
    assert.is_true((check.all(h, { "mutex", "tokens", "fifo" })))
    local status
    local function exit(code) status = code end
    check.main({ "mutex,tokens", dir }, exit, function() end)
    assert.are.equal(0, status)
    local r3 = check.recorder(dir .. "/p3.log", "p3", clock)
    t = 12 r3:acquire("/l", { token = 3 })
    t = 13 r3:release("/l")
    r3:close()
    check.main({ "mutex", dir }, exit, function() end)
    assert.are.equal(1, status)
    check.main({ "mutex" }, exit, function() end)
    assert.are.equal(2, status)
    check.main({ "nosuch", dir }, exit, function() end)
    assert.are.equal(2, status)
    -- the real command line: prints the violation with both events, exit status 1
    local lua = jit and "luajit" or "lua5.4"
    local out = shell.sh(("cd %s && %s -e 'package.path=\"lua/?.lua;lua/?/init.lua;\"..package.path' "
      .. "-e 'require(\"zklock.testing.check\").main(arg)' /dev/null mutex %s; echo \"status=$?\""):format(
      shell.shq((shell.sh("pwd"):gsub("%s+$", ""))), lua, shell.shq(dir)))
    assert.truthy(out:find("mutual exclusion violation on /l", 1, true), out)
    assert.truthy(out:find("p1 acquire /l at 10.000", 1, true), out)
    assert.truthy(out:find("p3 acquire /l at 12.000", 1, true), out)
    assert.truthy(out:find("status=1", 1, true), out)
  end)
end)

describe("zklock.testing.check.spans #fast", function()
  it("turns what processes did into holds: first to last event per process, key and token", function()
    local a, ra = proc("p1")
    local b, rb = proc("p2")
    a(10, "write", "/f", { token = 1 }); a(20, "write", "/f", { token = 1 })
    b(25, "write", "/f", { token = 2 }); b(30, "write", "/f", { token = 2 })
    a(40, "write", "/f", { token = 3 })
    local h = check.spans(history(ra, rb), "write")
    assert.is_true((check.mutex(h)))
    assert.is_true((check.tokens(h)))
    a(27, "write", "/f", { token = 1 })                                     -- p1 wrote on after p2 began
    caught({ check.mutex(check.spans(history(ra, rb), "write")) }, "mutual exclusion", "p1 first write /f at 10.000",
      "p2 first write /f at 25.000")
    caught({ check.leader(check.spans(history(ra, rb), "write", { as = "lead" })) }, "two leaders")
    assert.has_error(function() check.spans(history(ra), "write", { as = "nope" }) end)
  end)

  it("a term of a single event is a point: it overlaps what contains it, not what comes after", function()
    local a, ra = proc("c2")
    local b, rb = proc("c3")
    a(604, "tick", "/jobs/leader", { token = 70 })                          -- one tick, then down
    b(661, "tick", "/jobs/leader", { token = 72 }); b(700, "tick", "/jobs/leader", { token = 72 })
    local terms = check.spans(history(ra, rb), "tick", { as = "lead" })
    assert.is_true((check.leader(terms)))
    assert.is_true((check.mutex(check.spans(history(ra, rb), "tick"))))
    a(680, "tick", "/jobs/leader", { token = 71 })                          -- inside c3's term
    caught({ check.leader(check.spans(history(ra, rb), "tick", { as = "lead" })) }, "two leaders")
  end)
end)

describe("zklock.testing.check.stats and from_holds #fast", function()
  it("counts overlaps, interrupted overlaps, token order and the largest overlap per key", function()
    local holds = {
      { key = "a", owner = "p1", start = 0, finish = 10, token = 1 },
      { key = "a", owner = "p2", start = 5, finish = 12, token = 2 },               -- overlaps p1
      { key = "a", owner = "p3", start = 20, finish = 30, token = 1 },              -- token not above 2
      { key = "a", owner = "p4", start = 25, finish = 26, token = 9, interrupted = true },
      { key = 7, owner = "p5", start = 0, finish = 1 },                             -- keys keep their type
    }
    local r = check.stats(check.from_holds(holds))
    assert.are.equal(5, r.holds)
    assert.are.equal(4, r.clean)
    assert.are.equal(1, r.violations)
    assert.are.equal(1, r.interrupted_overlaps)
    assert.are.equal(1, r.token_violations)
    assert.are.same({ a = 2, [7] = 1 }, r.max_overlap)
    assert.truthy(r.examples[1]:find("p2[a token=2 5.000..12.000] overlaps p1[a", 1, true), r.examples[1])
    local two = check.stats(check.from_holds(holds), { limit = 2 })
    assert.are.equal(0, two.violations)
    assert.are.equal(0, two.token_violations)                                        -- tokens: limit 1 only
    assert.has_error(function() check.from_holds({ { key = "a" } }) end)
    local only_a = check.filter(check.from_holds(holds), function(ev) return ev.key == "a" end)
    assert.are.equal(8, #only_a.events)
  end)
  -- cache: a clean history passes; each planted cache bug is caught with its events named
  describe("cache", function()
    -- a writer w and a cache c over /t; ev(t, what, path, czxid, mzxid, value)
    local function base()
      local w, rw = proc("writer")
      local c, rc = proc("cache")
      local s, rs = proc("test")
      local function ev(t, what, path, cz, mz, value)
        c(t, "cache", path, { what = what, czxid = cz, mzxid = mz, value = value })
      end
      c(0, "session", "-", { sid = "s1" })
      ev(1, "added", "/t", 1, 1, ""); ev(1, "added", "/t/a", 2, 2, "v0"); ev(2, "initialized", "/t")
      w(100, "write", "/t/a", { op = "set", value = "v1", sent = 99 })
      ev(102, "updated", "/t/a", 2, 5, "v1")
      -- deleted and made again: removed + added (another czxid, the version restarts)
      w(2000, "write", "/t/a", { op = "delete", sent = 1999 })
      w(2001, "write", "/t/a", { op = "create", value = "v2", sent = 2000 })
      ev(2003, "removed", "/t/a", 2, 5, "v1"); ev(2003, "added", "/t/a", 7, 7, "v2")
      return { w = w, c = c, s = s, ev = ev, recs = { rw, rc, rs } }
    end
    local function snap(x, t, a_cz, a_mz, a_v)
      x.s(t, "server", "/t", { czxid = 1, mzxid = 1, value = "", snap = 1 })
      if a_cz then x.s(t, "server", "/t/a", { czxid = a_cz, mzxid = a_mz, value = a_v, snap = 1 }) end
      x.s(t, "snapshot", "/t", { snap = 1 })
    end

    it("passes a clean history: updates, removed+added on re-create, a snapshot that matches", function()
      local x = base()
      snap(x, 5000, 7, 7, "v2")
      local ok, n = check.cache(history(unpack_(x.recs)))
      assert.is_true(ok)
      assert.are.equal(6, n)
      assert.is_true((check.all(history(unpack_(x.recs)), "cache")))
    end)

    it("catches a re-create reported as an update (version compared, not czxid)", function()
      local x = base()
      -- the planted bug: the re-created node's version 0 is not above the cached one, so the
      -- cache compares mzxid alone and calls it an update
      x.ev(2100, "updated", "/t/a", 9, 9, "v3")
      caught({ check.cache(history(unpack_(x.recs))) }, "cache monotonicity", "another incarnation",
        "czxid 9 after 7", "cache cache /t/a")
    end)

    it("catches a re-create reported as an update even when the cache ends in the server's state", function()
      -- spec/96's planted 'version' case: the leaf deleted and made again (the same version) in a
      -- cut, the update carries the new czxid and value, so the snapshot after matches: only the
      -- events tell
      local x = base()
      x.s(2500, "fault", "-", { name = "cut" })
      x.w(2600, "write", "/t/a", { op = "delete", sent = 2599 })
      x.w(2601, "write", "/t/a", { op = "create", value = "v3", sent = 2600 })
      x.s(2800, "heal", "-", { name = "cut" })
      x.ev(2850, "updated", "/t/a", 9, 9, "v3")
      snap(x, 5000, 9, 9, "v3")
      local msg = caught({ check.cache(history(unpack_(x.recs))) }, "cache monotonicity", "another incarnation",
        "czxid 9 after 7", "not removed+added")
      assert.falsy(msg:find("convergence", 1, true), msg)
      -- the same history with the re-create reported as removed+added passes
      local y = base()
      y.s(2500, "fault", "-", { name = "cut" })
      y.w(2600, "write", "/t/a", { op = "delete", sent = 2599 })
      y.w(2601, "write", "/t/a", { op = "create", value = "v3", sent = 2600 })
      y.s(2800, "heal", "-", { name = "cut" })
      y.ev(2850, "removed", "/t/a", 7, 7, "v2"); y.ev(2850, "added", "/t/a", 9, 9, "v3")
      snap(y, 5000, 9, 9, "v3")
      assert.is_true((check.cache(history(unpack_(y.recs)))))
    end)

    it("catches a re-create never reported (the cache kept the old node)", function()
      local w, rw = proc("writer")
      local c, rc = proc("cache")
      local s, rs = proc("test")
      c(1, "cache", "/t", { what = "added", czxid = 1, mzxid = 1, value = "" })
      c(1, "cache", "/t/a", { what = "added", czxid = 2, mzxid = 2, value = "v0" })
      w(100, "write", "/t/a", { op = "delete", sent = 99 })
      w(101, "write", "/t/a", { op = "create", value = "v0", sent = 100 })
      s(5000, "server", "/t", { czxid = 1, mzxid = 1, value = "", snap = 1 })
      s(5000, "server", "/t/a", { czxid = 7, mzxid = 7, value = "v0", snap = 1 })
      s(5000, "snapshot", "/t", { snap = 1 })
      caught({ check.cache(history(rw, rc, rs)) }, "cache convergence", "/t/a", "server czxid=7",
        "cache czxid=2")
    end)

    it("catches a duplicate event and an older state reported after a newer one", function()
      local x = base()
      x.ev(2100, "updated", "/t/a", 7, 7, "v2")
      caught({ check.cache(history(unpack_(x.recs))) }, "duplicate event", "mzxid 7 reported twice")
      local y = base()
      y.ev(2100, "updated", "/t/a", 7, 9, "v3"); y.ev(2200, "updated", "/t/a", 7, 8, "v2b")
      caught({ check.cache(history(unpack_(y.recs))) }, "went back in time", "mzxid 8 after 9")
      local z = base()
      z.ev(2100, "added", "/t/a", 7, 7, "v2")
      caught({ check.cache(history(unpack_(z.recs))) }, "added again without a remove")
    end)

    it("catches no resync after a new session: no initialized, the changes made meanwhile missed", function()
      local x = base()
      x.s(3000, "fault", "-"); x.c(3500, "session", "-", { sid = "s2" }); x.s(4000, "heal", "-")
      x.w(3200, "write", "/t/a", { op = "set", value = "v9", sent = 3199 })
      snap(x, 20000, 7, 12, "v9")
      caught({ check.cache(history(unpack_(x.recs))) }, "cache resync", "new session", "no initialized",
        "sid=s2")
      -- resynced (initialized) but the change still missing: convergence
      local y = base()
      y.c(3500, "session", "-", { sid = "s2" }); y.c(3600, "cache", "/t", { what = "initialized" })
      snap(y, 20000, 7, 12, "v9")
      caught({ check.cache(history(unpack_(y.recs))) }, "cache convergence", "differs from the server",
        "server czxid=7 mzxid=12")
    end)

    it("catches a change visible longer than the window and never reported; excuses it inside a fault", function()
      local x = base()
      x.w(3000, "write", "/t/a", { op = "set", value = "lost", sent = 2999 })
      x.w(6000, "write", "/t/a", { op = "set", value = "v4", sent = 5999 })
      x.ev(6002, "updated", "/t/a", 7, 20, "v4")
      caught({ check.cache(history(unpack_(x.recs))) }, "cache visibility", "a set that stayed on the server",
        "2999 ms", "never appeared in cache's events", "writer write /t/a")
      assert.is_true((check.cache(history(unpack_(x.recs)), { window = 4000 })))
      x.s(2500, "fault", "-"); x.s(2600, "heal", "-")
      assert.is_true((check.cache(history(unpack_(x.recs)), { settle = 5000 })))
      caught({ check.cache(history(unpack_(x.recs)), { settle = 100 }) }, "cache visibility")
    end)

    it("record_cache and snapshot log what check.cache reads; the command line knows the check", function()
      assert.has_error(function() check.record_cache({}, nil) end)
      local x = base()
      snap(x, 5000, 7, 7, "v2")
      local dir = shell.sh("mktemp -d"):gsub("%s+$", "")
      local f = assert(io.open(dir .. "/all.log", "w"))
      for _, r in ipairs(x.recs) do
        for _, e in ipairs(r.events) do
          local parts = { ("%.3f"):format(e.t), e.p, e.ev, e.key }
          local names = {}
          for k in pairs(e.f) do names[#names + 1] = k end
          table.sort(names)
          for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. e.f[k] end
          f:write(table.concat(parts, "\t"), "\n")
        end
      end
      f:close()
      local out = {}
      local st = check.main({ "cache", dir, "--window", "1000" }, function(c) return c end,
        function(...) for _, v in ipairs({ ... }) do out[#out + 1] = v end end)
      shell.sh("rm -rf " .. shell.shq(dir))
      assert.are.equal(0, st, table.concat(out))
      assert.truthy(table.concat(out):find("ok: cache", 1, true))
    end)
  end)
end)
