-- zklock.testing.fixtures: eventually(), and with_server / with_ensemble, which run a function
-- against a fresh server or ensemble and stop it and everything started meanwhile (proxies,
-- workers, other servers) whatever happens, then re-raise an error.
--
--   testing.with_server({ tick_ms = 500 }, function(zk)
--     local c = assert(zklock.connect(zk.hosts))
--     testing.eventually(function() return c:exists("/x") end, 5, { pump = function(s) c:sleep(s) end })
--   end)
local registry = require("zklock.testing.registry")
local shell = require("zklock.testing.shell")

local M = {}

local unpack_ = table.unpack or unpack
local function pack(...) return { n = select("#", ...), ... } end

-- eventually(fn, timeout [, opts]) -> fn's results once fn returns a true first value without
-- raising; after timeout seconds (default 10) raises "eventually: not within N s: <fn's last
-- error, or what it returned>". opts: interval (s, 0.05), pump (function(seconds): how to wait,
-- for example function(s) client:sleep(s) end, so clients keep running), what (a description
-- for the message). opts may be a number: the interval.
function M.eventually(fn, timeout, opts)
  if type(fn) ~= "function" then
    error("zklock.testing.eventually: bad argument #1: expected a function, got " .. tostring(fn), 2)
  end
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
    error("zklock.testing.eventually: bad argument #2: expected seconds (a number >= 0), got " .. tostring(timeout), 2)
  end
  if type(opts) == "number" then opts = { interval = opts } end
  if opts ~= nil and type(opts) ~= "table" then
    error("zklock.testing.eventually: bad argument #3: expected an options table, got " .. tostring(opts), 2)
  end
  opts = opts or {}
  local interval = opts.interval or 0.05
  local wait = opts.pump or shell.sleep
  local deadline = shell.now() + (timeout or 10)
  local last
  for _ = 1, 1000000 do
    local res = pack(pcall(fn))
    if res[1] and res[2] then return unpack_(res, 2, res.n) end
    if res[1] then
      last = "it returned " .. tostring(res[2]) .. (res[3] ~= nil and (", " .. tostring(res[3])) or "")
    else
      last = "it raised: " .. tostring(res[2])
    end
    if shell.now() >= deadline then break end
    wait(interval)
  end
  error(("eventually: %s not within %s s: %s"):format(opts.what or "the condition", tostring(timeout or 10),
    tostring(last)), 2)
end

local function with(start, opts, fn, fname)
  if type(fn) ~= "function" then
    error("zklock.testing." .. fname .. ": bad argument #2: expected a function, got " .. tostring(fn), 3)
  end
  local mark = registry.mark()
  local obj
  local res = pack(xpcall(function()
    obj = start(opts)
    return fn(obj)
  end, debug.traceback))
  local ok_stop, err_stop = registry.stop_since(mark)
  if obj and obj.stop then pcall(obj.stop, obj) end
  if not res[1] then error(res[2], 0) end
  if not ok_stop then error("zklock.testing." .. fname .. ": cleanup: " .. tostring(err_stop), 2) end
  return unpack_(res, 2, res.n)
end

-- with_server([opts,] fn) -> fn's results; fn(server)
function M.with_server(opts, fn)
  if type(opts) == "function" then opts, fn = nil, opts end
  return with(require("zklock.testing.servers").server, opts, fn, "with_server")
end

-- with_ensemble([opts,] fn) -> fn's results; fn(ensemble)
function M.with_ensemble(opts, fn)
  if type(opts) == "function" then opts, fn = nil, opts end
  return with(require("zklock.testing.ensemble").ensemble, opts, fn, "with_ensemble")
end

return M
