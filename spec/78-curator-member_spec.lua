-- Group membership with Apache Curator 5.4 (Debian's libcurator-recipes-java) on one real
-- ZooKeeper server, Curator in a JVM driven by spec/support/peers/MemberPeer.java:
--   * Curator's GroupMember and zklock members in one group: each side's view (getCurrentMembers,
--     group:members) has both, with their data and each other's updates; a member that closes
--     leaves both views;
--   * a zklock member whose session expires comes back in Curator's view; a Curator
--     PersistentNode deleted by zklock is made again by Curator and the zklock group sees it
--     leave and join;
--   * names: a zklock protected member's name is a protected name to Curator (ProtectedUtils,
--     the same uuid, the name normalized back); a Curator protected sequential node is made
--     again under its protection by Curator and seen by zklock's group as one member.
--   busted --lua=lua5.4 spec/78-curator-member_spec.lua
local testing = require("zklock.testing")
local util = require("support.util")
local peers = require("support.peers.peer")

describe("group membership with Apache Curator 5.4 #interop", function()
  local zk, cur, c, o

  local function pump(dt) util.drive({ c, o }, dt) end

  setup(function()
    zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
    cur = peers.curator_member(zk.hosts)
    c = util.connect(zk.hosts, { identity = "zk-member", session_timeout = 4 })
    o = util.connect(zk.hosts, { identity = "zk-observer" })
  end)

  teardown(function()
    util.close_all()
    peers.stop_all()
    if zk then zk:stop() end
  end)

  local function call(cmd, args)
    local r = cur:call(cmd, args, 30, pump)
    assert.are.equal("ok", r.status, r.text)
    return r.f
  end

  -- Curator's view through member `id`: { [member id] = data }
  local function curator_view(id)
    local f = call("members", { id = id })
    local t = {}
    for item in (f.list or ""):gmatch("[^,]+") do
      local k, v = item:match("^([^:]*):(.*)$")
      t[k] = v
    end
    return t
  end

  local function eventually(pred, what, secs)
    local deadline = util.now() + (secs or 15)
    while util.now() < deadline do
      if pred() then return end
      pump(0.05)
    end
    error("not within " .. (secs or 15) .. " s: " .. what, 2)
  end

  it("GroupMember and zklock members see each other, their data and updates; a closed member leaves", function()
    local g = o:group("/ig")
    assert.is_true(g:await(10))
    call("member", { id = "java", path = "/ig", data = "j1" })
    local m = c:member("/ig/lua", "l1")
    assert.is_true(m:await(10))
    eventually(function()
      local v = curator_view("java")
      return v.java == "j1" and v.lua == "l1"
    end, "Curator sees the zklock member")
    eventually(function()
      local v = g:members()
      return v.java == "j1" and v.lua == "l1"
    end, "zklock sees the Curator member")
    -- updates, both ways
    call("member_set", { id = "java", data = "j2" })
    m:set("l2")
    eventually(function() return curator_view("java").lua == "l2" end, "Curator sees the zklock update")
    eventually(function() return g:members().java == "j2" end, "zklock sees the Curator update")
    -- the zklock member leaves: gone from Curator's view; Curator's leaves: gone from zklock's
    m:close()
    eventually(function() return curator_view("java").lua == nil end, "Curator sees the zklock member leave")
    call("member_close", { id = "java" })
    eventually(function() return g:members().java == nil end, "zklock sees the Curator member leave")
    g:close()
  end)

  it("a zklock member back after its session expired is back in Curator's view; a Curator node deleted by"
     .. " zklock is made again by Curator and seen to leave and join", function()
    local g = o:group("/ig2")
    local evs = {}
    g:on_change(function(event, _, id) if event ~= "initialized" then evs[#evs + 1] = event .. " " .. id end end)
    assert.is_true(g:await(10))
    call("member", { id = "java", path = "/ig2", data = "j" })
    local m = c:member("/ig2/lua", "l")
    assert.is_true(m:await(10))
    eventually(function() return curator_view("java").lua == "l" end, "Curator sees the zklock member")
    local sid = c:session()
    local _, st1 = o:get("/ig2/lua")
    assert(testing.expire(c, zk.hosts))
    eventually(function() return c.state == "CONNECTED" and c:session() ~= sid and m:is_current() end,
      "the member made again on a new session")
    local _, st2 = o:get("/ig2/lua")
    assert.is_true(st2.czxid > st1.czxid)
    eventually(function() return curator_view("java").lua == "l" end, "Curator sees the zklock member again")
    -- Curator's own node deleted by zklock: PersistentNode makes it again
    eventually(function() return g:members().java == "j" end, "zklock sees the Curator member")
    local n0 = #evs
    assert(o:delete("/ig2/java"))
    eventually(function() return o:exists("/ig2/java") end, "Curator made its node again")
    eventually(function() return #evs >= n0 + 2 end, "zklock's group saw it leave and join")
    assert.are.same({ "left java", "joined java" }, { evs[n0 + 1], evs[n0 + 2] })
    call("member_close", { id = "java" })
    m:close()
    g:close()
  end)

  it("protected names: zklock's read by Curator as protected; Curator's protected sequential node made again"
     .. " and seen as one member", function()
    local p = c:member("/ip/worker-", "z", { protected = true, sequential = true })
    assert.is_true(p:await(10))
    local name = util.basename(p:node())
    local f = call("protected", { name = name })
    assert.are.equal("true", f.protected)
    assert.are.equal(name:match("^_c_(%x+%-%x+%-%x+%-%x+%-%x+)%-"), f.id)
    assert.truthy(f.normalized:find("^worker%-%d%d%d%d%d%d%d%d%d%d$"), f.normalized)
    p:close()

    local g = o:group("/ip2")
    local evs = {}
    g:on_change(function(event, _, id) if event ~= "initialized" then evs[#evs + 1] = event .. " " .. id end end)
    assert.is_true(g:await(10))
    local node = call("pnode", { id = "pn", path = "/ip2/node-", mode = "ephemeral_sequential", protected = 1,
                                 data = "cur" }).node
    assert.truthy(util.basename(node):find("^_c_.*%-node%-%d%d%d%d%d%d%d%d%d%d$"), node)
    eventually(function() return g:members()[util.basename(node)] == "cur" end, "zklock sees the Curator node")
    assert(o:delete(node))
    local again
    eventually(function()
      local info = call("pnode_info", { id = "pn" })
      again = info.node
      return tonumber(info.created) >= 2 and o:exists(again)
    end, "Curator made its node again")
    print(("\n  [curator] PersistentNode made %s again as %s"):format(util.basename(node), util.basename(again)))
    eventually(function()
      local ids = g:ids()
      return #ids == 1 and ids[1] == util.basename(again) and #evs >= 3
    end, "zklock's group follows: one member")
    assert.are.same({ "joined " .. util.basename(node), "left " .. util.basename(node) }, { evs[1], evs[2] })
    assert.are.equal("joined " .. util.basename(again), evs[#evs])
    call("pnode_close", { id = "pn" })
    eventually(function() return #g:ids() == 0 end, "Curator's close deletes the node")
    g:close()
  end)
end)
