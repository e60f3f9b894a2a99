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
--     setup: fx.zk = testing.server(opts), then bind(fx.zk) (so the spec keeps a local `zk`).
--     teardown: util.close_all(), fw.stop_all() when o.workers, then util.stop_server(fx.zk)
--     (resumes a server a failed test left paused). After each test: o.resume resumes the
--     server if the test left it paused, o.each runs util.close_all(), o.each_workers
--     fw.stop_all() (in that order).
--     fx.connect(identity | opts [, opts]): util.connect(fx.zk.hosts, ...), closed by close_all.
-- fixture.ensemble(opts, o, bind) -> fx: the same with testing.ensemble(opts) (fx.ens).
-- fixture.clients(fx, n, opts, bind): n clients of fx's server made in setup (after the server),
--     passed to bind(c1, ..., cn); closed in the fixture's teardown.
local testing = require("zklock.testing")
local util = require("support.util")

local M = {}

local function hooks() return require("busted") end

local unpack_ = table.unpack or unpack

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
    if fx.zk then util.stop_server(fx.zk) end
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
  local fx = {}
  return register(fx, function()
    fx.zk = testing.server(opts or {})
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
