-- spec/support/fixture.lua: the per-describe setup the spec files share, instead of a copy of
-- setup/teardown/after_each in every file. Call these inside a describe(): they register the
-- busted hooks themselves.
--
--   describe("mutex", function()
--     local zk
--     local fx = fixture.server({}, { each = true }, function(s) zk = s end)
--     local connect = fx.connect            -- connect("web-1") or connect({ session_timeout = 4 })
--     it(...)
--   end)
--
-- fixture.server(opts, o, bind) -> fx
--     setup: fx.zk = the shared server (below), or with o.own a server of its own
--     (testing.server(opts)); then bind(fx.zk) (so the spec keeps a local `zk`).
--     teardown: util.close_all(), fw.stop_all() when o.workers, then util.stop_server(fx.zk) for
--     a server of its own (resumes a server a failed test left paused). After each test: o.resume
--     resumes the server if the test left it paused, o.each runs util.close_all(), o.each_workers
--     fw.stop_all() (in that order).
--     fx.connect(identity | opts [, opts]): util.connect(fx.zk.hosts, ...), closed by close_all.
--     o.own = "why" (a string saying why): a server of its own, started in setup and stopped in
--     teardown. Needed by a describe that pauses, kills, stops or restarts its server, that reads
--     server-wide counters that only a fresh server makes meaningful (mntr maxima, session ids
--     since start), or that asks for other server options than the defaults (opts other than
--     tick_ms = 500, min_session_ms = 1000, max_session_ms = 60000, container_check_ms = 100
--     without o.own raise an error).
-- fixture.ensemble(opts, o, bind) -> fx: the same with testing.ensemble(opts) (fx.ens), always
--     its own (the ensemble specs kill and restart nodes).
-- fixture.clients(fx, n, opts, bind): n clients of fx's server made in setup (after the server),
--     passed to bind(c1, ..., cn); closed in the fixture's teardown.
-- fixture.shared_stats() -> { starts = n, uses = n, replaced = n, start_s = s, clean_s = s } of this
--     busted process (server starts, describes served, servers replaced; seconds spent starting
--     them and making them clean for the next describe).
--
-- The shared server. Starting a ZooKeeper JVM costs one to three seconds of two cores, and a
-- suite has dozens of describes, so every describe without o.own shares one standalone server per
-- busted process: started by the first describe that needs it, stopped when the suite ends (busted's
-- "suite end" event; zklock.testing's own cleanup and the babysitter shell as a fallback). Each
-- describe gets it clean, as a fresh server would be, with the same options: before handing it
-- over, the fixture resumes it if it was left paused, waits until every client connection of the
-- describes before has gone, deletes every znode they made (everything but /zookeeper), and checks
-- with mntr that no connection, watch, ephemeral or extra znode is left. If it is not running, or
-- not clean within a few seconds, it is stopped and a fresh one started in its place (a line
-- "# fixture: ..." in the output says why). So a describe that shares may use any path and may rely
-- on an empty tree and zero watches/ephemerals at its start, but not on counters since the server
-- started; such a describe asks for o.own. The state lives in the Lua registry, because busted
-- reloads this module for every spec file (file insulation).
local zklock = require("zklock")
local testing = require("zklock.testing")
local util = require("support.util")

local M = {}

local function hooks() return require("busted") end

local unpack_ = table.unpack or unpack

-- zklock.testing.server's defaults: the options of the shared server
local DEFAULTS = { tick_ms = 500, min_session_ms = 1000, max_session_ms = 60000, container_check_ms = 100 }
local STATE_KEY = "zklock.spec.fixture.shared"
local CLEAN_WAIT = 8 -- s: how long the connections of the describes before may take to go

local function shared_state()
  local reg = debug.getregistry()
  local st = reg[STATE_KEY]
  if not st then
    st = { starts = 0, uses = 0, replaced = 0, start_s = 0, clean_s = 0 }
    reg[STATE_KEY] = st
  end
  return st
end

local function note(msg)
  io.stderr:write("# fixture: " .. msg .. "\n")
end

local function defaults_only(opts)
  for k, v in pairs(opts or {}) do
    if DEFAULTS[k] == nil or DEFAULTS[k] ~= v then return false, k end
  end
  return true
end

-- Delete every znode but /zookeeper (depth first; bounded: a node that keeps gaining children,
-- or one this client may not delete, makes it give up).
local function wipe(hosts)
  local c, err = zklock.connect(hosts, { session_timeout = 10, connect_timeout = 10, op_timeout = 10 })
  if not c then return nil, "cannot connect: " .. tostring(err) end
  local deleted = 0
  local function rm(path, depth)
    if depth > 100 then return nil, "tree deeper than 100 at " .. path end
    for _ = 1, 5 do
      local kids, msg, code = c:children(path)
      if not kids then
        if code == "ZNONODE" then return true end
        return nil, "children " .. path .. ": " .. tostring(msg)
      end
      for _, k in ipairs(kids) do
        local p = (path == "/" and "" or path) .. "/" .. k
        if p ~= "/zookeeper" then
          local ok, e = rm(p, depth + 1)
          if not ok then return nil, e end
        end
      end
      if path == "/" then return true end
      local ok, msg2, code2 = c:delete(path)
      if ok then deleted = deleted + 1 return true end
      if code2 == "ZNONODE" then return true end
      if code2 ~= "ZNOTEMPTY" then return nil, "delete " .. path .. ": " .. tostring(msg2) end
    end
    return nil, path .. " keeps getting new children"
  end
  local ok, e = pcall(rm, "/", 0)
  pcall(c.close, c)
  if not ok then return nil, tostring(e) end
  if e ~= true then return nil, e end
  return true, deleted
end

local function counters(zk)
  local m, err = zk:mntr(3)
  if not m then return nil, err end
  for _, k in ipairs({ "zk_num_alive_connections", "zk_watch_count", "zk_ephemerals_count", "zk_znode_count" }) do
    if type(m[k]) ~= "number" then return nil, "mntr has no " .. k end
  end
  return m
end

local function dirty(m, base)
  if m.zk_num_alive_connections > base.connections then
    return ("%d client connections"):format(m.zk_num_alive_connections - base.connections)
  end
  if m.zk_watch_count > 0 then return m.zk_watch_count .. " watches" end
  if m.zk_ephemerals_count > 0 then return m.zk_ephemerals_count .. " ephemerals" end
  if m.zk_znode_count > base.znodes then return (m.zk_znode_count - base.znodes) .. " extra znodes" end
  return nil
end

-- Wait until pred() returns a true value (at most `secs`); returns that value or nil.
local function poll(secs, pred)
  local deadline = testing.now() + secs
  for _ = 1, 1000 do
    local v = pred()
    if v then return v end
    if testing.now() >= deadline then return nil end
    testing.sleep(0.05)
  end
end

-- Make the shared server what a fresh one is: returns true, or nil and why it cannot.
local function make_clean(zk, base)
  if zk.stopped or not zk:running() then return nil, "it is not running" end
  if zk.paused then
    local ok, err = pcall(zk.resume, zk)
    if not ok then return nil, "resume failed: " .. tostring(err) end
  end
  -- clients of the describes before that were dropped without close(): their finalizers
  collectgarbage("collect")
  collectgarbage("collect")
  local last = "no mntr reply"
  local gone = poll(CLEAN_WAIT, function()
    local m, err = counters(zk)
    if not m then last = err return nil end
    if m.zk_num_alive_connections <= base.connections then return true end
    last = dirty(m, base)
  end)
  if not gone then return nil, "connections left: " .. tostring(last) end
  local ok, err = wipe(zk.hosts)
  if not ok then return nil, "cannot delete the znodes left: " .. tostring(err) end
  local clean = poll(3, function()
    local m, e = counters(zk)
    if not m then last = e return nil end
    last = dirty(m, base)
    return last == nil
  end)
  if not clean then return nil, "after deleting: " .. tostring(last) end
  return true
end

local function stop_shared()
  local st = shared_state()
  if st.zk then
    pcall(util.stop_server, st.zk)
    st.zk, st.keep, st.base = nil, nil, nil
  end
end

-- The shared server, clean (see above).
local function shared_server()
  local st = shared_state()
  st.uses = st.uses + 1
  if st.zk then
    local t0 = testing.now()
    local ok, why = make_clean(st.zk, st.base)
    st.clean_s = st.clean_s + (testing.now() - t0)
    if ok then return st.zk end
    note(("the shared ZooKeeper on port %d cannot be handed over (%s): a fresh one in its place")
      :format(st.zk.port, why))
    st.replaced = st.replaced + 1
    stop_shared()
  end
  local o = {}
  for k, v in pairs(DEFAULTS) do o[k] = v end
  local t0 = testing.now()
  local zk = testing.server(o)
  st.start_s = st.start_s + (testing.now() - t0)
  -- keep this zklock.testing's registry (and so its cleanup at state close) alive for as long as
  -- the server: busted drops the modules a spec file loaded when the file ends
  st.keep = require("zklock.testing.registry")
  local m = assert(poll(5, function() return counters(zk) end), "no mntr reply from the new server")
  st.base = { connections = m.zk_num_alive_connections, znodes = m.zk_znode_count }
  st.zk = zk
  st.starts = st.starts + 1
  if not st.subscribed then
    st.subscribed = true
    hooks().subscribe({ "suite", "end" }, function()
      local s = shared_state()
      if s.uses > 0 then
        note(("shared ZooKeeper: %d describes, %d server starts (%.1f s), %d replaced; handovers %.1f s")
          :format(s.uses, s.starts, s.start_s, s.replaced, s.clean_s))
      end
      stop_shared()
      return nil, true -- let the other subscribers (the output handler) see the event too
    end)
  end
  return zk
end

function M.shared_stats()
  local st = shared_state()
  return { starts = st.starts, uses = st.uses, replaced = st.replaced, start_s = st.start_s, clean_s = st.clean_s }
end

local function connector(fx)
  return function(identity, opts)
    if type(identity) == "table" then identity, opts = nil, identity end
    local o = {}
    for k, v in pairs(opts or {}) do o[k] = v end
    if identity ~= nil then o.identity = identity end
    return util.connect(fx.hosts or (fx.zk or fx.ens).hosts, o)
  end
end

local function register(fx, start, o, bind)
  o = o or {}
  local b = hooks()
  b.setup(function()
    start()
    if bind then bind(fx.zk or fx.ens) end
  end)
  b.teardown(function()
    util.close_all()
    if o.workers then require("support.fault_worker").stop_all() end
    if fx.zk and not fx.shared then util.stop_server(fx.zk) end
    if fx.ens then fx.ens:stop() end
  end)
  if o.each or o.each_workers or o.resume then
    b.after_each(function()
      if o.resume and fx.zk and fx.zk.paused then fx.zk:resume() end
      if o.each then util.close_all() end
      if o.each_workers then require("support.fault_worker").stop_all() end
    end)
  end
  fx.connect = connector(fx)
  return fx
end

function M.server(opts, o, bind)
  o = o or {}
  if o.own ~= nil and (type(o.own) ~= "string" or o.own == "") then
    error("fixture.server: o.own must be a string saying why the describe needs a server of its own", 2)
  end
  local plain, key = defaults_only(opts)
  if not plain and not o.own then
    error(("fixture.server: option %s differs from the shared server's; pass o.own = \"why\" for a "
      .. "server of its own"):format(tostring(key)), 2)
  end
  local fx = { shared = not o.own }
  return register(fx, function()
    if fx.shared then
      fx.zk = shared_server()
    else
      fx.zk = testing.server(opts or {})
    end
    fx.hosts = fx.zk.hosts
  end, o, bind)
end

function M.ensemble(opts, o, bind)
  local fx = {}
  return register(fx, function()
    fx.ens = testing.ensemble(opts or {})
    fx.hosts = fx.ens.hosts
  end, o, bind)
end

function M.clients(fx, n, opts, bind)
  hooks().setup(function()
    local cs = {}
    for i = 1, n do cs[i] = util.connect(fx.hosts, opts) end
    bind(unpack_(cs, 1, n))
  end)
end

return M
