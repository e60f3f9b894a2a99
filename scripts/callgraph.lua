#!/usr/bin/env lua5.4
-- scripts/callgraph.lua: the file-level call graph of the C core (csrc/core/*.c), derived from
-- the sources, and a check that it has no cycle (docs/design.md, "Layers": no two files call
-- each other back, directly or through others).
--
--   lua5.4 scripts/callgraph.lua            check: exit 1 and name every cycle, exit 0 if none
--   lua5.4 scripts/callgraph.lua --edges    also print each edge: FILE -> FILE: functions
--   options: --dir DIR (default: this script's ../csrc/core)
--
-- How: comments, string and character literals are blanked out of each .c file. A function
-- defined at file scope (an identifier at brace depth 0 followed by a parameter list and `{`)
-- and not `static` belongs to its file. Any other file that names it (a call, or the function
-- taken as a pointer) depends on that file. Calls through kind tables (function pointers in a
-- struct) are not edges: that is the one way a lower layer may reach an upper one. Headers are
-- not scanned: a `static inline` function or a macro in internal.h belongs to no file.

local dir
local show_edges = false
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--edges" then
      show_edges = true
    elseif a == "--dir" then
      i = i + 1
      dir = arg[i]
    elseif a == "-h" or a == "--help" then
      io.write("usage: lua5.4 scripts/callgraph.lua [--edges] [--dir DIR]\n")
      os.exit(0)
    else
      io.stderr:write("callgraph.lua: unknown argument '", a, "' (see --help)\n")
      os.exit(2)
    end
    i = i + 1
  end
end
if not dir then
  local here = (arg[0] or ""):match("^(.*)/[^/]*$") or "."
  dir = here .. "/../csrc/core"
end

-- the .c files of dir, sorted
local files = {}
do
  local p = io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  for name in p:lines() do
    if name:match("%.c$") then files[#files + 1] = name end
  end
  p:close()
  table.sort(files)
  if #files == 0 then
    io.stderr:write("callgraph.lua: no .c files in '", dir, "' (--dir)\n")
    os.exit(2)
  end
end

-- the source with comments and literals replaced by spaces (newlines kept)
local function strip(src)
  local out, i, n = {}, 1, #src
  while i <= n do
    local c, d = src:sub(i, i), src:sub(i, i + 1)
    if d == "/*" then
      local e = src:find("*/", i + 2, true) or n - 1
      out[#out + 1] = src:sub(i, e + 1):gsub("[^\n]", " ")
      i = e + 2
    elseif d == "//" then
      local e = src:find("\n", i, true) or n + 1
      out[#out + 1] = string.rep(" ", e - i)
      i = e
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n do
        local x = src:sub(j, j)
        if x == "\\" then
          j = j + 2
        elseif x == c or x == "\n" then
          break
        else
          j = j + 1
        end
      end
      out[#out + 1] = c .. string.rep(" ", j - i - 1) .. c
      i = j + 1
    elseif c == "#" and (i == 1 or src:sub(i - 1, i - 1) == "\n") then
      -- a preprocessor line (with its continuations): #define bodies are scanned as code, so a
      -- macro that calls a function counts where it is defined; the directive word is blanked
      local e = i
      repeat
        e = src:find("\n", e, true) or n + 1
        local cont = src:sub(e - 1, e - 1) == "\\"
        if cont then e = e + 1 end
      until not cont or e > n
      local line = src:sub(i, e - 1)
      local body = line:match("^#%s*define%s+[%w_]+%b()(.*)$") or line:match("^#%s*define%s+[%w_]+(.*)$")
      if body then
        -- keep the body, inside braces so its names count as uses, not definitions
        out[#out + 1] = "{" .. body:gsub("\\\n", "  \n") .. "}" .. string.rep(" ", 0)
      else
        out[#out + 1] = line:gsub("[^\n]", " ")
      end
      i = e
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

-- definitions (non-static functions at depth 0) and uses (identifiers at depth > 0) of a file
local function scan(code)
  local defs, uses = {}, {}
  local depth, i, n = 0, 1, #code
  while i <= n do
    local s, e, word = code:find("^([%a_][%w_]*)", i)
    if s then
      if depth > 0 then
        uses[word] = true
      else
        -- a definition: NAME ( ... ) {   where the declaration does not say static
        local after = code:match("^%s*(%b())%s*{", e + 1)
        if after then
          -- the declaration's start: back to the previous ; } or start of file
          local k = s - 1
          while k > 0 and not code:sub(k, k):match("[;}]") do k = k - 1 end
          local decl = code:sub(k + 1, s - 1)
          if not decl:match("%f[%w_]static%f[^%w_]") then defs[word] = true end
        elseif code:match("^%s*=%s*{", e + 1) then
          -- a table with external linkage (a kind table): naming it is a dependency too
          local k = s - 1
          while k > 0 and not code:sub(k, k):match("[;}]") do k = k - 1 end
          if not code:sub(k + 1, s - 1):match("%f[%w_]static%f[^%w_]") then defs[word] = true end
        end
      end
      i = e + 1
    else
      local c = code:sub(i, i)
      if c == "{" then
        depth = depth + 1
      elseif c == "}" then
        depth = depth - 1
      end
      i = i + 1
    end
  end
  return defs, uses
end

local owner, uses_of = {}, {}
for _, f in ipairs(files) do
  local fh = assert(io.open(dir .. "/" .. f, "rb"))
  local code = strip(fh:read("a"))
  fh:close()
  local defs, uses = scan(code)
  for name in pairs(defs) do
    if owner[name] and owner[name] ~= f then
      io.stderr:write("callgraph.lua: ", name, " is defined in both ", owner[name], " and ", f, "\n")
      os.exit(2)
    end
    owner[name] = f
  end
  uses_of[f] = uses
end

-- edges: from -> to -> sorted list of functions
local edges = {}
for _, f in ipairs(files) do
  edges[f] = {}
  for name in pairs(uses_of[f]) do
    local to = owner[name]
    if to and to ~= f then
      edges[f][to] = edges[f][to] or {}
      table.insert(edges[f][to], name)
    end
  end
  for _, list in pairs(edges[f]) do table.sort(list) end
end

local function targets(f)
  local t = {}
  for to in pairs(edges[f]) do t[#t + 1] = to end
  table.sort(t)
  return t
end

if show_edges then
  for _, f in ipairs(files) do
    for _, to in ipairs(targets(f)) do
      print(string.format("%-12s -> %-12s %s", f, to, table.concat(edges[f][to], ", ")))
    end
  end
end

-- strongly connected components (Tarjan); every component of more than one file holds a cycle
local index, low, onstack, stack, sccs, counter = {}, {}, {}, {}, {}, 0
local function connect(v)
  counter = counter + 1
  index[v], low[v] = counter, counter
  stack[#stack + 1] = v
  onstack[v] = true
  for _, w in ipairs(targets(v)) do
    if not index[w] then
      connect(w)
      low[v] = math.min(low[v], low[w])
    elseif onstack[w] then
      low[v] = math.min(low[v], index[w])
    end
  end
  if low[v] == index[v] then
    local comp = {}
    repeat
      local w = table.remove(stack)
      onstack[w] = nil
      comp[#comp + 1] = w
    until w == v
    if #comp > 1 then
      table.sort(comp)
      sccs[#sccs + 1] = comp
    end
  end
end
for _, f in ipairs(files) do
  if not index[f] then connect(f) end
end

if #sccs == 0 then
  local ne = 0
  for _, f in ipairs(files) do ne = ne + #targets(f) end
  print(string.format("callgraph: %d files, %d file-to-file edges, no cycle", #files, ne))
  os.exit(0)
end

-- name a shortest cycle through each file of a component not named on one already, with the
-- functions on each edge
local function shortest_cycle(start, inside)
  local prev, queue, head, found = { [start] = false }, { start }, 1, nil
  while head <= #queue and not found do
    local v = queue[head]
    head = head + 1
    for _, w in ipairs(targets(v)) do
      if inside[w] then
        if w == start then
          found = v
          break
        elseif prev[w] == nil then
          prev[w] = v
          queue[#queue + 1] = w
        end
      end
    end
  end
  local path, v = { start }, found
  while v and v ~= start do
    table.insert(path, 2, v)
    v = prev[v]
  end
  path[#path + 1] = start
  return path
end

table.sort(sccs, function(a, b) return a[1] < b[1] end)
for _, comp in ipairs(sccs) do
  local inside, named = {}, {}
  for _, f in ipairs(comp) do inside[f] = true end
  for _, start in ipairs(comp) do
    if not named[start] then
      local path = shortest_cycle(start, inside)
      local parts = {}
      for k = 1, #path - 1 do
        named[path[k]] = true
        parts[#parts + 1] = path[k] .. " -(" .. table.concat(edges[path[k]][path[k + 1]], ", ") .. ")-> "
      end
      print("callgraph: cycle " .. table.concat(parts) .. start)
    end
  end
  print("  files calling each other (directly or through others): " .. table.concat(comp, " "))
end
os.exit(1)
