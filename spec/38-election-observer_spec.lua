-- The election observer (client:election) against a real ZooKeeper server, with zklock
-- participants (client:leader, client:latch): it reports each leader (id and token = czxid of the
-- head node), "none" between terms, resignation ("ended") also when the next leader is already
-- queued, a leader node deleted by someone else, in order; it joins nothing (no node, not in
-- participants()); bad input raises naming the argument. Curator participants: spec/79.
--   busted --lua=lua5.4 spec/38-election-observer_spec.lua
--   busted --lua=luajit --run=luajit spec/38-election-observer_spec.lua
local zklock = require("zklock")
local util = require("support.util")
local fixture = require("support.fixture")

-- An observer that records what it reports: { "leader id token", "ended id token", "none" }.
local function recorder(c, path)
  local e = c:election(path)
  local seen = {}
  local ret = e:on_change(function(event, obj, id, token)
    assert(obj == e, "the callback's first argument is the election")
    seen[#seen + 1] = id and ("%s %s %s"):format(event, id, tostring(token)) or event
  end)
  assert(ret == e, "on_change returns the election")
  return e, seen
end

-- A leader whose term lasts until release() is called (or it is closed).
local function participant(c, path, id)
  local p = { done = false, token = nil }
  p.leader = c:leader(path, function(l)
    p.token = l:token()
    while not p.done and l:sleep(0.02) do end
  end, { id = id })
  function p.release() p.done = true end
  return p
end

describe("election observer", function()
  local fx = fixture.server({}, { each = true })
  local connect = fx.connect

  it("reports each leader with its token, 'none' between terms and every end, in order", function()
    local path = "/obs/terms"
    local co, c1, c2, c3 = connect("obs"), connect("a"), connect("b"), connect("c")
    local all = { co, c1, c2, c3 }
    local e, seen = recorder(co, path)
    assert.is_true(util.drive_until(all, function() return #seen >= 1 end, 20))
    assert.are.same({ "none" }, seen) -- no election dir yet: nobody leads
    assert.is_false(e:leader())

    -- a first term, then nobody
    local p1 = participant(c1, path, "p1")
    assert.is_true(util.drive_until(all, function() return p1.token and #seen >= 2 end, 20))
    assert.are.same({ "none", "leader p1 " .. p1.token }, seen)
    local id, token = e:leader()
    assert.are.equal("p1", id)
    assert.are.equal(p1.token, token)
    -- the observer made no node and is no participant
    assert.are.equal(1, util.child_count(co, path))
    assert.are.same({ "p1" }, e:participants())
    assert.are.same({ "p1" }, p1.leader:participants())
    p1.release()
    assert.is_true(util.drive_until(all, function() return #seen >= 4 end, 20))
    assert.are.same({ "ended p1 " .. p1.token, "none" }, { seen[3], seen[4] })
    assert.is_false(e:leader())

    -- p2 leads with p3 queued behind it: p2's end is reported before p3's term
    local p2 = participant(c2, path, "p2")
    assert.is_true(util.drive_until(all, function() return p2.token and #seen >= 5 end, 20))
    local p3 = participant(c3, path, "p3")
    assert.is_true(util.drive_until(all, function() return util.child_count(co, path) == 2 end, 20))
    assert.are.same({ "p2", "p3" }, e:participants())
    p2.release()
    assert.is_true(util.drive_until(all, function() return p3.token and #seen >= 7 end, 20))
    -- p3 leaves by closing its client (its session and node go)
    c3:close()
    assert.is_true(util.drive_until(all, function() return #seen >= 9 end, 20))
    assert.are.same({
      "none",
      "leader p1 " .. p1.token, "ended p1 " .. p1.token, "none",
      "leader p2 " .. p2.token, "ended p2 " .. p2.token,
      "leader p3 " .. p3.token, "ended p3 " .. p3.token, "none",
    }, seen)
    assert.is_true(p1.token < p2.token and p2.token < p3.token)
    util.drive(all, 0.3)
    assert.are.equal(9, #seen, "nothing more is reported: " .. table.concat(seen, ", "))
    e:close()
  end)

  it("reports a leader node deleted by someone else, and sees latch participants in their order", function()
    local path = "/obs/latch"
    local co, c1, c2, admin = connect("obs"), connect("a"), connect("b"), connect("admin")
    local all = { co, c1, c2, admin }
    local l1 = c1:latch(path, { id = "L1" })
    assert.is_true(l1:await(20))
    local l2 = c2:latch(path, { id = "L2" })
    assert.is_true(util.drive_until(all, function() return util.child_count(co, path) == 2 end, 20))
    local e, seen = recorder(co, path)
    assert.is_true(util.drive_until(all, function() return #seen >= 1 end, 20))
    assert.are.same({ "leader L1 " .. l1:token() }, seen)
    local t1 = l1:token()
    -- an operator deletes the leader's node: the observer hears the end and the next leader
    local kids = util.children(admin, path)
    table.sort(kids, function(a, b) return util.seq(a) < util.seq(b) end)
    assert.is_true(admin:delete(path .. "/" .. kids[1]))
    assert.is_true(util.drive_until(all, function() return #seen >= 3 end, 20))
    assert.are.equal("ended L1 " .. t1, seen[2])
    assert.matches("^leader L2 %d+$", seen[3])
    assert.is_true(util.drive_until(all, function() return l2:is_held() end, 20))
    assert.are.equal("leader L2 " .. l2:token(), seen[3])
    l1:close()
    l2:close()
    e:close()
  end)

  it("after its own session expired, it looks again on the new session and reports what changed", function()
    local path = "/obs/expire"
    local co, c1, c2 = connect("obs"), connect("a"), connect("b")
    local e, seen = recorder(co, path)
    local p1 = participant(c1, path, "p1")
    assert.is_true(util.drive_until({ co, c1 }, function() return p1.token and #seen >= 2 end, 20))
    local t1 = p1.token
    local p2 = participant(c2, path, "p2")
    assert.is_true(util.drive_until({ co, c1, c2 }, function() return util.child_count(c1, path) == 2 end, 20))
    local sid = co:session()
    assert(require("zklock.testing").expire(co))
    -- the hand-over happens while the observer's session is gone (its client is not driven)
    p1.release()
    assert.is_true(util.drive_until({ c1, c2 }, function() return p2.token ~= nil end, 20))
    local n = #seen
    assert.is_true(util.drive_until({ co, c1, c2 }, function() return #seen >= n + 2 end, 30))
    assert.are_not.equal(sid, co:session())
    assert.are.same({ "ended p1 " .. t1, "leader p2 " .. p2.token }, { seen[n + 1], seen[n + 2] })
    assert.are.same({ e:leader() }, { "p2", p2.token })
    p2.release()
    assert.is_true(util.drive_until({ co, c1, c2 }, function() return seen[#seen] == "none" end, 20))
    e:close()
  end)

  it("on_change(nil) removes the handler; close() stops reports; a closed election says ECLOSED", function()
    local path = "/obs/handler"
    local co, c1 = connect("obs"), connect("a")
    local all = { co, c1 }
    local e, seen = recorder(co, path)
    assert.are.equal("election", zklock.type(e))
    assert.is_true(util.drive_until(all, function() return #seen >= 1 end, 20))
    assert.are.equal(e, e:on_change(nil))
    local p1 = participant(c1, path, "p1")
    assert.is_true(util.drive_until(all, function() return p1.token ~= nil end, 20))
    -- the view still follows without a handler
    assert.is_true(util.drive_until(all, function() return e:leader() == "p1" end, 20))
    assert.are.same({ "none" }, seen)
    -- wait() returns once a change is reported
    p1.release()
    assert.is_true(e:wait(20))
    assert.is_false(e:leader())
    assert.is_true(e:close())
    assert.is_true(e:close()) -- idempotent
    local ok, msg, code = e:leader()
    assert.is_nil(ok)
    assert.are.equal("ECLOSED", code, msg)
    local _, _, wcode = e:wait(1)
    assert.are.equal("ECLOSED", wcode)
  end)

  it("bad input raises naming the argument", function()
    local c = connect("obs")
    local cases = {
      { function() return c:election(nil) end, "bad argument #1 to 'election'" },
      { function() return c:election("no-slash") end, "bad argument #1 to 'election'" },
      { function() return c:election("/a"):on_change(5) end, "bad argument #1 to 'on_change' (expected a function" },
      { function() return c:election("/a"):wait(-1) end, "bad argument #1 to 'wait'" },
      { function() return c:election("/a").leader() end, "use election:leader(...) (with a colon)" },
    }
    for i, case in ipairs(cases) do
      local ok, err = pcall(case[1])
      assert.is_false(ok, "case " .. i .. " did not raise")
      assert.is_truthy(tostring(err):find(case[2], 1, true), ("case %d: %q lacks %q"):format(i, tostring(err), case[2]))
    end
    c:close()
    local ok, err = pcall(function() return c:election("/a") end)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("election on a closed client", 1, true), tostring(err))
  end)
end)
