-- zklock.testing.registry: every server and ensemble this process started, and stop_all(),
-- which also runs when the Lua state is closed (busted closes it on exit).
--   register(obj), unregister(obj), stop_all()
local M = {}
---------------------------------------------------------------- registry and shutdown

local live = {}   -- servers and ensembles with something left to clean up
local serial = 0  -- every registration gets the next number (mark / stop_since)
local serials = setmetatable({}, { __mode = "k" })

local function register(obj)
  for _, o in ipairs(live) do if o == obj then return end end
  live[#live + 1] = obj
  serial = serial + 1
  serials[obj] = serial
end

local function unregister(obj)
  for i = #live, 1, -1 do
    if live[i] == obj then table.remove(live, i) end
  end
end

---------------------------------------------------------------- stop_all

function M.stop_all()
  local objs = {}
  for i, o in ipairs(live) do objs[i] = o end
  -- signal everything first so the JVMs shut down in parallel
  for _, o in ipairs(objs) do
    local nodes = o.nodes or { o }
    for _, node in ipairs(nodes) do node:_signal("TERM"); node:_signal("CONT") end
  end
  local errs = {}
  for _, o in ipairs(objs) do
    local ok, err
    if o.nodes then                      -- an ensemble: it removes its nodes' dirs
      ok, err = pcall(o.stop, o)
    else
      ok, err = pcall(o.stop, o, { keep_dir = false })
    end
    if not ok then errs[#errs + 1] = tostring(err) end
  end
  for i = #live, 1, -1 do live[i] = nil end
  if #errs > 0 then return nil, table.concat(errs, "\n") end
  return true
end

-- Run stop_all when the Lua state is closed (os.exit(code, true), end of script, busted exit).
do
  local function on_close() pcall(M.stop_all) end
  local sentinel
  if newproxy then                       -- Lua 5.1 / LuaJIT: only userdata has __gc
    sentinel = newproxy(true)
    getmetatable(sentinel).__gc = on_close
  else
    sentinel = setmetatable({}, { __gc = on_close })
  end
  M._sentinel = sentinel
  -- anchor it in the registry too, so it lives until the state closes even if the
  -- module table is dropped
  local ok, reg = pcall(function() return debug.getregistry() end)
  if ok and type(reg) == "table" then reg["zklock.testing.sentinel"] = sentinel end
end
M.register, M.unregister = register, unregister

-- mark() -> a number; stop_since(mark) stops (newest first) what was registered after it and is
-- still live: servers, ensembles, proxies, workers. -> true | nil, errors
function M.mark() return serial end

function M.stop_since(mark)
  local objs = {}
  for _, o in ipairs(live) do
    if (serials[o] or 0) > mark then objs[#objs + 1] = o end
  end
  table.sort(objs, function(a, b) return serials[a] > serials[b] end)
  local errs = {}
  for _, o in ipairs(objs) do
    local ok, err
    if o.nodes then ok, err = pcall(o.stop, o)
    else ok, err = pcall(o.stop, o, { keep_dir = false }) end
    if not ok then errs[#errs + 1] = tostring(err) end
    unregister(o)
  end
  if #errs > 0 then return nil, table.concat(errs, "\n") end
  return true
end

return M
