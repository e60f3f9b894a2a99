-- spec/support/boundaries.lua: the module-boundary rules of docs/design.md ("Layers"), checked
-- on the Lua sources by spec/fast/boundaries_spec.lua. Pure Lua 5.1-5.4, no parser library.
--
--   (a) no require cycle between zklock's modules. Every require("zklock...") in a module counts,
--       also one inside a function (a lazy require is still a dependency). A module naming itself
--       is not a cycle.
--   (b) no module reads or writes `x._name` (or calls `x:_name()`) of an object that is not its
--       own. "Own" is:
--         - `self` inside a method (`function X:m`, `function X.m(self`, `X.m = function(self`)
--           of a class X the file defines (X is bound in the file to a table constructor or a
--           setmetatable(...) call, not to something it required);
--         - `self` inside a local helper function of a file that defines a class (helpers such
--           as `local function arm(self)` take the file's own object);
--         - a name the file binds to a table constructor or setmetatable(...) (an object made in
--           that file: a record, a wait, a watch).
--       Names starting with two underscores (metamethods, __index) are not `_` fields.
--       ALLOW below lists the exceptions, each with its reason.
--   (c) no module gets at the client's raw core handle: `X.core` (or X["core"], X:core) where X
--       is a name bound to require("zklock.internal.recipe") or require("zklock.internal.hold")
--       (or to such a name: `local H = hold`), or such a require(...) indexed at once. The
--       recipes start core work through the typed helpers of those two modules instead.
--       CORE_ALLOW below lists who may, each with its reason (and, for a pending exemption, the
--       most uses it may keep). The client's own `_c` field is rule (b)'s business.
local M = {}

-- Exceptions to rule (b): file -> reason. Keep this short; each entry is part of the design.
M.ALLOW = {
  -- The recipe interface (slots, waits, the core handle) is the one place that touches the
  -- client's private fields on the recipes' behalf: docs/design.md, "Module boundaries".
  ["lua/zklock/internal/recipe.lua"] = "the recipe interface and slot API",
  -- lua-nginx-module keeps the coroutine functions it replaces as coroutine._resume, ...
  ["lua/zklock/adapters/openresty.lua#coroutine"] = "ngx's coroutine._resume and friends",
  -- zklock.testing is one package (the harness): its modules share helpers they keep out of
  -- the documented API (shell's file writer, a server's signal, the ensemble's partition)
  ["lua/zklock/testing/servers.lua#shell"] = "zklock.testing: shell's file writer",
  ["lua/zklock/testing/net.lua#shell"] = "zklock.testing: shell's file writer",
  ["lua/zklock/testing/nemesis.lua#shell"] = "zklock.testing: shell's file writer",
  ["lua/zklock/testing/ensemble.lua#shell"] = "zklock.testing: shell's file writer",
  ["lua/zklock/testing/workers.lua#shell"] = "zklock.testing: shell's file writer",
  ["lua/zklock/testing/nemesis.lua#ens"] = "zklock.testing: the nemesis partitions an ensemble",
  ["lua/zklock/testing/registry.lua#node"] = "zklock.testing: the registry signals its servers",
  ["lua/zklock/testing/init.lua#registry"] = "zklock.testing: the registry's sentinel, for specs",
  ["lua/zklock/testing/ensemble.lua#(...)]"] = "zklock.testing: an ensemble starts its servers",
}

-- Exceptions to rule (c): file -> { why = reason, max = most uses allowed (nil: any) }.
M.CORE_ALLOW = {
  ["lua/zklock/internal/recipe.lua"] = { why = "defines recipe.core, for zklock.internal.hold" },
  ["lua/zklock/internal/hold.lua"] = { why = "owns the grants: starts, releases and abandons them" },
}

-- The modules whose `core` field is (or hands out) the raw core handle.
local CORE_MODULES = { ["zklock.internal.recipe"] = true, ["zklock.internal.hold"] = true }

-- Uses of the raw core handle in a stripped source: { { line, text } }.
local function core_uses(code, strings)
  local aliases = {}
  for name, k in code:gmatch('([%a_][%w_]*)%s*=%s*require%s*%(?%s*"\1(%d+)\1"%s*%)?') do
    if CORE_MODULES[strings[tonumber(k)]] then aliases[name] = true end
  end
  -- a name bound to one of those names is one too (`local H = hold`), to a fixed point
  for _ = 1, 10 do
    local grew = false
    for name, from, after in code:gmatch("([%a_][%w_]*)%s*=%s*([%a_][%w_]*)%s*(.?)") do
      if aliases[from] and not aliases[name] and not after:find("^[.:%[(]") then
        aliases[name], grew = true, true
      end
    end
    if not grew then break end
  end
  local uses = {}
  local lineno = 0
  local function is_core_key(k) return strings[tonumber(k)] == "core" end
  for line in (code .. "\n"):gmatch("(.-)\n") do
    lineno = lineno + 1
    for name in line:gmatch("([%a_][%w_]*)%s*[.:]%s*core%f[^%w_]") do
      if aliases[name] then uses[#uses + 1] = { lineno, name .. ".core" } end
    end
    for name, k in line:gmatch('([%a_][%w_]*)%s*%[%s*"\1(%d+)\1"%s*%]') do
      if aliases[name] and is_core_key(k) then uses[#uses + 1] = { lineno, name .. '["core"]' } end
    end
    for k, rest in line:gmatch('require%s*%(?%s*"\1(%d+)\1"%s*%)?%s*([.:%[][^%(]*)') do
      local key = rest:match("^[.:]%s*([%a_][%w_]*)")
      local idx = rest:match('^%[%s*"\1(%d+)\1"')
      if CORE_MODULES[strings[tonumber(k)]] and (key == "core" or (idx and is_core_key(idx))) then
        uses[#uses + 1] = { lineno, 'require("' .. strings[tonumber(k)] .. '").core' }
      end
    end
  end
  return uses
end

-- Module name of a source path: lua/zklock/a/b.lua -> zklock.a.b, .../init.lua -> its directory.
function M.module_name(path)
  local rel = path:match("^lua/(.*)%.lua$") or path:match("lua/(zklock/.*)%.lua$")
  if not rel then return nil end
  rel = rel:gsub("/init$", "")
  return (rel:gsub("/", "."))
end

-- The code of a Lua source with comments removed and every string literal replaced by a
-- placeholder that keeps its text in `strings` (for require names) and its line breaks.
local function strip(src)
  local out, strings = {}, {}
  local i, n = 1, #src
  while i <= n do
    local c = src:sub(i, i)
    if c == "-" and src:sub(i, i + 1) == "--" then
      local eq = src:match("^%[(=*)%[", i + 2)
      if eq then
        local close = src:find("]" .. eq .. "]", i + 4 + #eq, true)
        local stop = close and close + #eq + 1 or n
        out[#out + 1] = (src:sub(i, stop):gsub("[^\n]", ""))
        i = stop + 1
      else
        local nl = src:find("\n", i, true) or n + 1
        i = nl
      end
    elseif c == "[" and src:match("^%[=*%[", i) then
      local eq = src:match("^%[(=*)%[", i)
      local close = src:find("]" .. eq .. "]", i + 2 + #eq, true)
      local stop = close and close + #eq + 1 or n
      strings[#strings + 1] = src:sub(i + 2 + #eq, (close or n + 1) - 1)
      out[#out + 1] = '"\1' .. #strings .. '\1"' .. (src:sub(i, stop):gsub("[^\n]", ""))
      i = stop + 1
    elseif c == '"' or c == "'" then
      local j, buf = i + 1, {}
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then buf[#buf + 1] = src:sub(j, j + 1); j = j + 2
        elseif d == c or d == "\n" then break
        else buf[#buf + 1] = d; j = j + 1 end
      end
      strings[#strings + 1] = table.concat(buf)
      out[#out + 1] = '"\1' .. #strings .. '\1"'
      i = j + 1
    else
      local j = src:find("[-%[\"']", i) or n + 1
      if j == i then j = i + 1 end
      out[#out + 1] = src:sub(i, j - 1)
      i = j
    end
  end
  return table.concat(out), strings
end
M.strip = strip

-- zklock modules a stripped source requires (set of names).
local function requires(code, strings)
  local set = {}
  for k in code:gmatch('require%s*%(?%s*"\1(%d+)\1"') do
    local name = strings[tonumber(k)]
    if name == "zklock" or name:match("^zklock%.") then set[name] = true end
  end
  return set
end

local KEYWORDS = { ["function"] = 1, ["do"] = 1, ["if"] = 1, ["repeat"] = 1, ["end"] = -1, ["until"] = -1 }

-- Problems of rule (b) in one file: { "path:line: text" }.
local function fields(path, code)
  local problems = {}
  -- classes and objects the file makes
  local made = {}
  for name in code:gmatch("local%s+([%a_][%w_]*)%s*=%s*{") do made[name] = true end
  for name in code:gmatch("local%s+([%a_][%w_]*)%s*=%s*setmetatable%s*%(") do made[name] = true end
  for name in code:gmatch("[\n;]%s*([%a_][%w_]*)%s*=%s*{") do made[name] = true end
  for name in code:gmatch("[\n;]%s*([%a_][%w_]*)%s*=%s*setmetatable%s*%(") do made[name] = true end
  local has_class = false
  for cls in code:gmatch("function%s+([%a_][%w_]*)[:.]") do
    if made[cls] then has_class = true end
  end
  -- walk tokens line by line, keeping a stack of enclosing blocks; a function block records
  -- whether its `self` is own
  local stack = {} -- entries: { fn = true, own_self = bool } or { fn = false }
  local function self_is_own()
    for k = #stack, 1, -1 do
      if stack[k].fn then return stack[k].own_self end
    end
    return false
  end
  -- `_` fields the file's own objects carry: keys of its table constructors, and fields its
  -- own methods assign on self (checked after the walk, once all are known)
  local declared = {}
  for f in code:gmatch("[{,]%s*(_[%a_][%w_]*)%s*=[^=]") do declared[f] = true end
  for f in ("\n" .. code):gmatch("\n%s*(_[%a_][%w_]*)%s*=[^=]") do declared[f] = true end
  local uses = {}
  local lineno = 0
  for line in (code .. "\n"):gmatch("(.-)\n") do
    lineno = lineno + 1
    -- events on this line in source order: block keywords and `x._name` uses
    local events = {}
    local pos = 1
    while true do
      local s, e, word = line:find("([%a_][%w_]*)", pos)
      if not s then break end
      local prev = s > 1 and line:sub(s - 1, s - 1) or ""
      if prev ~= "." and prev ~= ":" and KEYWORDS[word] then events[#events + 1] = { s, e = e, word = word } end
      pos = e + 1
    end
    pos = 1
    while true do -- a call's or an index's result: `f(x)._name`, `t[i]:_name()` (never own)
      local s, e, close, name = line:find("([%)%]])%s*[.:]%s*(_[%a_][%w_]*)", pos)
      if not s then break end
      if name:sub(1, 2) ~= "__" then events[#events + 1] = { s, pre = "(...)" .. close, name = name } end
      pos = e + 1
    end
    pos = 1
    while true do
      local s, e, pre, name = line:find("([%a_][%w_.]*)%s*[.:]%s*(_[%a_][%w_]*)", pos)
      if not s then break end
      if name:sub(1, 2) ~= "__" then
        -- an assignment target: `x._f =` or one of a list `x._f, y._g, ... =`
        local assign = line:find("^%s*=[^=]", e + 1) or line:find("^%s*,[%w_.%s,]*=[^=]", e + 1)
        events[#events + 1] = { s, pre = pre, name = name, assign = assign }
      end
      pos = e + 1
    end
    table.sort(events, function(a, b) return a[1] < b[1] end)
    for _, ev in ipairs(events) do
      local word = ev.word
      if word and KEYWORDS[word] > 0 then
        local entry = { fn = word == "function" }
        if entry.fn then
          local rest = line:sub(ev.e + 1)
          local cls, sep = rest:match("^%s*([%a_][%w_]*)[%w_.]-([:.])[%a_][%w_]*%s*%(")
          local params = rest:match("%((.-)%)") or ""
          local first = params:match("^%s*([%a_][%w_]*)")
          if cls and (sep == ":" or first == "self") then
            entry.own_self = made[cls] == true
          elseif first ~= "self" then
            entry.own_self = self_is_own() -- `self`, if used, is an upvalue of the enclosing function
          else
            -- `X.m = function(self` or `local function f(self`
            local lhs = line:sub(1, ev[1] - 1):match("([%a_][%w_]*)[%w_.]*%s*=%s*$")
            if lhs and made[lhs] then entry.own_self = true
            else entry.own_self = has_class end
          end
        end
        stack[#stack + 1] = entry
      elseif word then
        if #stack > 0 then stack[#stack] = nil end
      else
        local pre, name = ev.pre, ev.name
        local own_self = pre == "self" and (self_is_own() or made.self)
        if (own_self or made[pre]) and ev.assign then declared[name] = true end
        if not own_self and not M.ALLOW[path .. "#" .. pre] then
          uses[#uses + 1] = { lineno, pre, name, plain = not pre:find(".", 1, true) }
        end
      end
    end
  end
  -- a plain name (not a chain like a.b._c) using a field this file's objects carry is taken
  -- as one of them; everything else is another module's object
  for _, u in ipairs(uses) do
    local at, pre, name = u[1], u[2], u[3]
    if not (u.plain and (declared[name] or made[pre])) then
      problems[#problems + 1] = ("%s:%d: %s.%s is not this module's own object"):format(path, at, pre, name)
    end
  end
  return problems
end

-- Check sources: files = { [path] = source text }. -> { problem lines } (empty: all rules hold)
function M.check(files)
  local problems, graph, paths = {}, {}, {}
  for path in pairs(files) do paths[#paths + 1] = path end
  table.sort(paths)
  for _, path in ipairs(paths) do
    local code, strings = strip(files[path])
    local name = M.module_name(path)
    if name then graph[name] = requires(code, strings) end
    if not M.ALLOW[path] then
      for _, p in ipairs(fields(path, code)) do problems[#problems + 1] = p end
    end
    -- (c) the raw core handle
    local allow = M.CORE_ALLOW[path]
    local uses = core_uses(code, strings)
    if not allow then
      for _, u in ipairs(uses) do
        problems[#problems + 1] = ("%s:%d: %s: the raw core handle outside zklock.internal.hold; "
          .. "use a typed helper"):format(path, u[1], u[2])
      end
    elseif allow.max and #uses > allow.max then
      problems[#problems + 1] = ("%s: %d uses of the raw core handle, more than the %d its pending "
        .. "exemption allows (%s)"):format(path, #uses, allow.max, allow.why)
    end
  end
  -- (a) cycles: depth-first search, reporting each cycle once (by its smallest module)
  local names = {}
  for name in pairs(graph) do names[#names + 1] = name end
  table.sort(names)
  local seen_cycle = {}
  for _, start in ipairs(names) do
    local path, on = { start }, { [start] = true }
    local function visit(node)
      local deps = {}
      for d in pairs(graph[node] or {}) do deps[#deps + 1] = d end
      table.sort(deps)
      for _, d in ipairs(deps) do
        if d == start and node ~= start then
          local smallest = start
          for _, x in ipairs(path) do if x < smallest then smallest = x end end
          if smallest == start then
            local key = table.concat(path, " -> ")
            if not seen_cycle[key] then
              seen_cycle[key] = true
              problems[#problems + 1] = "require cycle: " .. key .. " -> " .. start
            end
          end
        elseif graph[d] and not on[d] and d > start then
          on[d] = true; path[#path + 1] = d
          visit(d)
          path[#path] = nil; on[d] = nil
        end
      end
    end
    visit(start)
  end
  return problems
end

-- The sources under dir (lua/zklock) as { [path] = text }, paths relative to the repository.
function M.read_tree(dir)
  local files = {}
  local p = assert(io.popen("find " .. dir .. " -name '*.lua' | sort"))
  for path in p:lines() do
    local f = assert(io.open(path))
    files[path] = f:read("*a")
    f:close()
  end
  p:close()
  return files
end

return M
