#!/usr/bin/env lua5.4
-- scripts/apidoc.lua: the API reference of zklock from its one documented source, the LuaLS
-- meta files in types/ (also the editors' type stubs).
--
--   lua5.4 scripts/apidoc.lua            write docs/api.md from types/
--   lua5.4 scripts/apidoc.lua --check    fail (exit 1, one line per problem) when
--       (a) docs/api.md is not what the generator writes (stale);
--       (b) a public function or field exists at runtime but has no entry in types/, or an
--           entry in types/ names something that does not exist (a rename);
--       (c) an option accepted by a public call has no entry in its options class, or the
--           class documents an option the call does not accept.
--   options: --meta DIR (default types), --doc FILE (default docs/api.md),
--            --root DIR (the source tree, default: this script's ..), --cpath PATTERN
--            (default ROOT/build/?.so: build the Lua 5.4 module first).
--
-- How (b) finds the public API: it loads the real modules, connects a client with
-- { wait = false } to an unused loopback port (no server needed), makes one object of each kind
-- without acquiring, and lists every non-underscore key of the module tables, of each object and
-- of its metatables' __index chain (TARGETS below; adapters are found by listing
-- lua/zklock/adapters/). How (c) finds options: check.options(fname, argn, opts, SPEC) is
-- wrapped while each options-taking call runs once (PROBES below); the SPEC keys it receives for
-- the options argument are the accepted options (the call is stopped right there, nothing is
-- sent). Calls that read their options without check.options (the adapters, zklock.testing) are
-- scanned in the source instead (SCANS below): every `opts.NAME` read in the named functions.
-- A new check.options("name", ...) in lua/zklock/*.lua that no probe reaches is a problem too.
---------------------------------------------------------------- command line

local args = { meta = nil, doc = nil, root = nil, cpath = nil, check = false }
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--check" then args.check = true
    elseif a == "--meta" or a == "--doc" or a == "--root" or a == "--cpath" then
      args[a:sub(3)] = arg[i + 1]; i = i + 1
    elseif a == "-h" or a == "--help" then
      io.write("usage: lua5.4 scripts/apidoc.lua [--check] [--meta DIR] [--doc FILE] [--root DIR] [--cpath PATTERN]\n")
      os.exit(0)
    else
      io.stderr:write("apidoc: unknown argument ", a, "\n"); os.exit(2)
    end
    i = i + 1
  end
end
local script_dir = (arg[0]:match("^(.*)/[^/]*$") or ".")
local ROOT = args.root or (script_dir == "scripts" and "." or (script_dir .. "/.."))
local META = args.meta or (ROOT .. "/types")
local DOC = args.doc or (ROOT .. "/docs/api.md")

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a"); f:close()
  return s
end

local function lines_of(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

local function shq(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

---------------------------------------------------------------- the meta files

-- The files in the order the reference shows them: zklock.lua first, then the others by path.
local function meta_files(dir)
  local files = lines_of("cd " .. shq(dir) .. " && find . -name '*.lua' | LC_ALL=C sort")
  table.sort(files, function(a, b)
    if a == "./zklock.lua" then return b ~= "./zklock.lua" end
    if b == "./zklock.lua" then return false end
    return a < b
  end)
  for i, f in ipairs(files) do files[i] = f:gsub("^%./", "") end
  return files
end

-- A LuaLS type at the start of s: balanced brackets and quotes; at depth 0 whitespace ends it
-- unless it follows ':', '|' or ',' or a '|' comes next. Returns type, rest.
local function split_type(s)
  s = s:gsub("^%s+", "")
  local depth, i, n, q = 0, 1, #s, nil
  while i <= n do
    local c = s:sub(i, i)
    if q then
      if c == q then q = nil end
    elseif c == '"' or c == "'" or c == "`" then q = c
    elseif c:match("[%(%[{<]") then depth = depth + 1
    elseif c:match("[%)%]}>]") then depth = depth - 1
    elseif c:match("%s") and depth == 0 then
      local prev = s:sub(1, i - 1):match("(%S)%s*$")
      local nxt = s:match("^%s*(%S)", i)
      if not (prev == ":" or prev == "|" or prev == "," or nxt == "|") then break end
    end
    i = i + 1
  end
  return (s:sub(1, i - 1):gsub("%s+$", "")), (s:sub(i):gsub("^%s+", ""))
end

local function clean_desc(s) return (s:gsub("^#%s*", ""):gsub("%s+$", "")) end

local KNOWN_TAGS = { class = true, field = true, param = true, ["return"] = true, alias = true, meta = true,
                     overload = true, nodiscard = true, async = true, deprecated = true, see = true }

-- Parse every meta file: { classes = {name -> class}, items = {class|alias in order},
-- funcs = {key -> func}, problems = {...} }.
local function parse(dir)
  local api = { classes = {}, items = {}, funcs = {}, problems = {} }
  local function problem(fmt, ...) api.problems[#api.problems + 1] = fmt:format(...) end
  for _, rel in ipairs(meta_files(dir)) do
    local text = assert(read(dir .. "/" .. rel), "cannot read " .. rel)
    local bind = {}  -- local name or dotted table -> class
    local block, block_line = {}, nil
    local ln = 0
    local function flush(code)
      if #block == 0 then return end
      local where = ("%s:%d"):format(rel, block_line)
      local desc, tags = {}, {}
      for _, l in ipairs(block) do
        local tag, rest = l:match("^@(%w+)%s*(.*)$")
        if tag then
          if not KNOWN_TAGS[tag] then problem("%s: unknown annotation @%s", where, tag) end
          tags[#tags + 1] = { tag = tag, text = rest }
        elseif l:match("^|") and #tags > 0 then
          local t = tags[#tags]; t.variants = t.variants or {}; t.variants[#t.variants + 1] = l:sub(2)
        elseif #tags == 0 then
          desc[#desc + 1] = l:gsub("^ ", "")
        else
          problem("%s: description text after an annotation: %s", where, l)
        end
      end
      block, block_line = {}, nil
      local cls, alias
      for _, t in ipairs(tags) do
        if t.tag == "class" then
          local name, parent = t.text:match("^([%w_.]+)%s*:%s*([%w_.]+)")
          name = name or t.text:match("^([%w_.]+)")
          cls = { kind = "class", name = name, parent = parent, desc = desc, fields = {}, funcs = {},
                  file = rel, where = where }
        elseif t.tag == "alias" then
          local name, ty = t.text:match("^([%w_.]+)%s*(.*)$")
          alias = { kind = "alias", name = name, type = ty, variants = t.variants, desc = desc, file = rel }
        end
      end
      if cls then
        for _, t in ipairs(tags) do
          if t.tag == "field" then
            local name, opt, rest = t.text:match("^([%w_]+)(%??)%s+(.*)$")
            if not name then problem("%s: malformed @field %s", where, t.text)
            else
              local ty, d = split_type(rest)
              cls.fields[#cls.fields + 1] = { name = name, optional = opt == "?", type = ty, desc = clean_desc(d) }
            end
          end
        end
        if api.classes[cls.name] then problem("%s: class %s defined twice", where, cls.name) end
        api.classes[cls.name] = cls
        api.items[#api.items + 1] = cls
        local lname = code and code:match("^local%s+([%w_]+)%s*=")
        local tname = code and code:match("^([%w_.]+)%s*=%s*{")
        if lname or tname then
          cls.display = lname or tname
          bind[cls.display] = cls
        end
        return
      end
      if alias then api.items[#api.items + 1] = alias; return end
      local owner, sep, fname, params = (code or ""):match("^function%s+([%w_.]-)([.:])([%w_]+)%s*%((.-)%)")
      if not owner then
        problem("%s: documentation block not followed by a class, alias or function", where)
        return
      end
      local c = bind[owner]
      if not c then
        problem("%s: function %s%s%s: %s is not a documented class table", where, owner, sep, fname, owner)
        return
      end
      local f = { name = fname, sep = sep, class = c, desc = desc, params = {}, returns = {}, where = where,
                  key = c.name .. sep .. fname, display = owner .. sep .. fname, arglist = params }
      for _, t in ipairs(tags) do
        if t.tag == "param" then
          local name, opt, rest = t.text:match("^([%w_]+)(%??)%s+(.*)$")
          if not name then name, opt, rest = t.text:match("^(%.%.%.)(%??)%s+(.*)$") end
          if not name then problem("%s: malformed @param %s", where, t.text)
          else
            local ty, d = split_type(rest)
            f.params[#f.params + 1] = { name = name, optional = opt == "?", type = ty, desc = clean_desc(d) }
          end
        elseif t.tag == "return" then
          local ty, rest = split_type(t.text)
          local name, d = rest:match("^([%a_][%w_]*)%s*(.*)$")
          if not name then name, d = rest:match("^(%.%.%.)%s*(.*)$") end
          if not name or rest:match("^#") then name, d = nil, rest end
          f.returns[#f.returns + 1] = { type = ty, name = name, desc = clean_desc(d or "") }
        end
      end
      -- the declared argument list must name the documented parameters, in order
      local declared = {}
      for a in params:gmatch("[^,%s]+") do declared[#declared + 1] = a end
      local documented = {}
      for _, p in ipairs(f.params) do documented[#documented + 1] = p.name end
      if table.concat(declared, ",") ~= table.concat(documented, ",") then
        problem("%s: %s(%s): @param names (%s) differ from the argument list", where, f.key, params,
          table.concat(documented, ", "))
      end
      if api.funcs[f.key] then problem("%s: %s documented twice", where, f.key) end
      api.funcs[f.key] = f
      c.funcs[#c.funcs + 1] = f
    end
    for line in (text .. "\n"):gmatch("(.-)\r?\n") do
      ln = ln + 1
      local doc = line:match("^%-%-%-(.*)$")
      if doc and not line:match("^%-%-%-%-") then
        if not doc:match("^@meta") then -- @meta names the file's module: nothing to render
          if #block == 0 then block_line = ln end
          block[#block + 1] = doc
        end
      elseif line:match("^%s*$") or line:match("^%-%-") then
        flush(nil)
      else
        flush(line)
      end
    end
    flush(nil)
  end
  return api
end

-- Fields of a class with those of its parents (parents first).
local function all_fields(api, cls, seen)
  seen = seen or {}
  if not cls or seen[cls] then return {} end
  seen[cls] = true
  local out = {}
  if cls.parent then
    for _, f in ipairs(all_fields(api, api.classes[cls.parent], seen)) do out[#out + 1] = f end
  end
  for _, f in ipairs(cls.fields) do out[#out + 1] = f end
  return out
end

local function is_options_class(name) return name:match("Options$") ~= nil end
local function options_class_of(api, p)
  local name = p.type:gsub("%?$", "")
  local c = api.classes[name]
  if c and is_options_class(name) then return c end
  return nil
end

---------------------------------------------------------------- docs/api.md

local function cell(s) return (s:gsub("|", "\\|"):gsub("\n", " ")) end
-- `T?` for an optional T; a union or function type is parenthesized first: `(A|B)?`.
local function opttype(t, optional)
  if not optional then return t end
  if t:find("|", 1, true) or t:match("^fun%(") then return "(" .. t .. ")?" end
  return t .. "?"
end
local function code(s) return "`" .. s .. "`" end

-- GitHub's heading anchors: lower case, punctuation other than '-' and '_' dropped, spaces -> '-'.
local function anchor(s) return (s:lower():gsub("[^%w%s_-]", ""):gsub("%s", "-")) end

local function split_errors(desc)
  local body, errors, in_errors = {}, {}, false
  for _, l in ipairs(desc) do
    if l:match("^Errors:") then in_errors = true; l = l:gsub("^Errors:%s*", "") end
    if in_errors and l == "" then in_errors = false end
    if in_errors then errors[#errors + 1] = l else body[#body + 1] = l end
  end
  while body[#body] == "" do body[#body] = nil end
  return table.concat(body, "\n"), table.concat(errors, " ")
end

local function field_table(out, fields)
  out[#out + 1] = "| name | type | description |"
  out[#out + 1] = "| --- | --- | --- |"
  for _, f in ipairs(fields) do
    out[#out + 1] = ("| %s | %s | %s |"):format(code(f.name), code(cell(opttype(f.type, f.optional))), cell(f.desc))
  end
end

local function generate(api)
  local out = {}
  local function w(s) out[#out + 1] = s end
  w("# zklock API reference")
  w("")
  w("<!-- Generated by scripts/apidoc.lua from types/ (the LuaLS meta files); do not edit. -->")
  w("<!-- After changing types/: lua5.4 scripts/apidoc.lua; CI runs it with --check. -->")
  w("")
  w("Written from the LuaLS meta files in `types/` (point your editor's `workspace.library` at")
  w("that directory for completion and type checks). Every public function and option of the")
  w("library has an entry there; `lua5.4 scripts/apidoc.lua --check` (CI) fails otherwise.")
  w("Types read as in LuaLS: `T?` may be nil, `A|B` either, `T[]` an array, `fun(...)` a function.")
  w("")
  w("## Contents")
  w("")
  for _, it in ipairs(api.items) do
    if it.kind == "class" and not is_options_class(it.name) then
      local title = it.name
      w(("- [%s](#%s)"):format(title, anchor(title)))
    end
  end
  w("- [Types](#types)")
  for _, it in ipairs(api.items) do
    if it.kind == "class" and not is_options_class(it.name) then
      w("")
      w("## " .. it.name)
      w("")
      local body = split_errors(it.desc)
      if body ~= "" then w(body); w("") end
      if #it.fields > 0 then
        field_table(out, all_fields(api, it))
        w("")
      end
      for _, f in ipairs(it.funcs) do
        local names = {}
        for _, p in ipairs(f.params) do names[#names + 1] = p.name end
        w(("### %s(%s)"):format(f.display, table.concat(names, ", ")))
        w("")
        local fbody, errors = split_errors(f.desc)
        if fbody ~= "" then w(fbody); w("") end
        if #f.params > 0 then
          w("| parameter | type | description |")
          w("| --- | --- | --- |")
          for _, p in ipairs(f.params) do
            w(("| %s | %s | %s |"):format(code(p.name), code(cell(opttype(p.type, p.optional))), cell(p.desc)))
          end
          w("")
          for _, p in ipairs(f.params) do
            local oc = options_class_of(api, p)
            if oc then
              local obody = split_errors(oc.desc)
              w(("Options (`%s`, %s):%s"):format(p.name, oc.name, obody ~= "" and (" " .. obody:gsub("\n", " ")) or ""))
              w("")
              field_table(out, all_fields(api, oc))
              w("")
            end
          end
        end
        if #f.returns > 0 then
          w("Returns:")
          w("")
          for _, r in ipairs(f.returns) do
            local parts = { code(r.type) }
            if r.name then parts[#parts + 1] = "**" .. r.name .. "**" end
            if r.desc ~= "" then parts[#parts + 1] = "— " .. r.desc end
            w("- " .. table.concat(parts, " "))
          end
          w("")
        end
        if errors ~= "" then w("Errors: " .. errors); w("") end
      end
    end
  end
  w("## Types")
  w("")
  for _, it in ipairs(api.items) do
    if it.kind == "alias" then
      w(("### %s"):format(it.name))
      w("")
      local body = split_errors(it.desc)
      if body ~= "" then w(body); w("") end
      w(code(it.type ~= "" and it.type or "(see the variants)"))
      w("")
    end
  end
  while out[#out] == "" do out[#out] = nil end
  return (table.concat(out, "\n"):gsub("\n\n\n+", "\n\n")) .. "\n"
end

---------------------------------------------------------------- write mode

local api = parse(META)
if not args.check then
  if #api.problems > 0 then
    for _, p in ipairs(api.problems) do io.stderr:write("apidoc: ", p, "\n") end
    os.exit(1)
  end
  local f = assert(io.open(DOC, "wb"))
  f:write(generate(api)); f:close()
  io.write(("apidoc: wrote %s\n"):format(DOC))
  os.exit(0)
end

---------------------------------------------------------------- check mode

local problems = {}
local function problem(fmt, ...) problems[#problems + 1] = fmt:format(...) end
for _, p in ipairs(api.problems) do problems[#problems + 1] = p end

-- (a) stale docs/api.md
do
  local want, have = generate(api), read(DOC)
  if have ~= want then
    local detail = "missing"
    if have then
      local i = 1
      local wl, hl = {}, {}
      for l in want:gmatch("[^\n]*") do wl[#wl + 1] = l end
      for l in have:gmatch("[^\n]*") do hl[#hl + 1] = l end
      while wl[i] == hl[i] and i <= #wl do i = i + 1 end
      detail = ("first difference at line %d"):format(i)
    end
    problem("%s is stale (%s): run lua5.4 scripts/apidoc.lua and commit it", DOC, detail)
  end
end

-- The real modules.
package.path = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;" .. package.path
package.cpath = (args.cpath or (ROOT .. "/build/?.so")) .. ";" .. package.cpath
local ok_core, core_err = pcall(require, "zklock.core")
if not ok_core then
  io.stderr:write("apidoc: cannot load zklock.core (build it first: cmake -S . -B build && cmake --build build): ",
    tostring(core_err), "\n")
  os.exit(2)
end
local check = require("zklock.internal.args")
local zklock = require("zklock")
local testing = require("zklock.testing")

-- Wrap check.options: while a probe runs, record the SPEC keys of every call, and stop the probe
-- (raise ABORT) at the call that validates the probed argument, before anything is sent.
local ABORT = setmetatable({}, { __tostring = function() return "apidoc probe stop" end })
local probe = nil
local orig_options = check.options
check.options = function(fname, argn, opts, known)
  if probe then
    local keys = {}
    for k in pairs(known) do keys[k] = true end
    probe.records[#probe.records + 1] = { fname = fname, argn = argn, keys = keys }
    if argn == probe.argn then error(ABORT, 0) end
  end
  return orig_options(fname, argn, opts, known)
end

local E = { zklock = zklock }
E.hosts = "127.0.0.1:" .. testing.free_ports(1)[1]
E.client = assert(zklock.connect(E.hosts, { wait = false }))
E.mutex = E.client:mutex("/apidoc/mutex")
E.rw = E.client:rwlock("/apidoc/rwlock")
E.sem = E.client:semaphore("/apidoc/semaphore", 2)
E.smx = E.client:semaphore_mutex("/apidoc/semaphore-mutex")
E.ml = E.client:multilock({ E.mutex, E.smx })
E.sc = E.client:shared_count("/apidoc/count")
E.al = E.client:atomic_long("/apidoc/long")
E.bar = E.client:double_barrier("/apidoc/barrier", 2)
E.zkl = E.client:zookeeper_lock("/apidoc/zklock")
E.leader = E.client:leader("/apidoc/leader", function() end, { id = "apidoc" })
E.latch = E.client:latch("/apidoc/latch", { id = "apidoc" })
E.cache = E.client:cache("/apidoc/cache")
E.member = E.client:member("/apidoc/members/m", "x")
E.group = E.client:group("/apidoc/members")
E.election = E.client:election("/apidoc/election")

local function load_adapter(name)
  local stubs = {}
  local function stub(mod, value)
    if not pcall(require, mod) then package.preload[mod] = function() return value end; stubs[#stubs + 1] = mod end
  end
  local had_ngx = rawget(_G, "ngx")
  if name == "openresty" and not had_ngx then
    _G.ngx = { timer = {} }   -- the module refuses to load outside nginx; it only needs to load
    stub("ngx.semaphore", {})
  elseif name == "cqueues" then
    stub("cqueues", {}); stub("cqueues.condition", {})
  end
  local ok, m = pcall(require, "zklock.adapters." .. name)
  if name == "openresty" and not had_ngx then _G.ngx = nil end
  for _, s in ipairs(stubs) do package.preload[s] = nil; package.loaded[s] = nil end
  if not ok then problem("zklock.adapters.%s: cannot be loaded: %s", name, tostring(m)); return nil end
  return m
end

-- (b) What is walked: class name -> the runtime value. `methods`: a class table without an
-- instance (its documented fields cannot be checked, its functions can).
local TARGETS = {
  { class = "zklock", value = zklock },
  { class = "zklock.errno", value = zklock.errno },
  { class = "zklock.retry", value = zklock.retry },
  { class = "zklock.metrics", value = zklock.metrics },
  { class = "zklock.Transaction", value = E.client:transaction() },
  { class = "zklock.Queue",
    value = E.client:queue("/apidoc/queue", { format = "curator", lock_path = "/apidoc/ql" }) },
  { class = "zklock.QueueMessage", value = setmetatable({ name = "queue-0000000000", node = "/apidoc/queue/queue-0000000000",
    lock = "/apidoc/ql/queue-0000000000" }, require("zklock.queue").Message) },
  { class = "zklock.metrics.Prometheus", value = zklock.metrics.prometheus() },
  { class = "zklock.metrics.SharedDict", value = zklock.metrics.shared_dict({}), methods = true },
  { class = "zklock.Client", value = E.client },
  { class = "zklock.Lock", value = E.mutex },
  { class = "zklock.Lock", value = E.rw.read },
  { class = "zklock.RWLock", value = E.rw },
  { class = "zklock.Semaphore", value = E.sem },
  { class = "zklock.Lease", value = require("zklock.semaphore").Lease, methods = true },
  { class = "zklock.SemaphoreMutex", value = E.smx },
  { class = "zklock.MultiLock", value = E.ml },
  { class = "zklock.Watch", value = require("zklock.internal.watch").Watch, methods = true },
  { class = "zklock.SharedCount", value = E.sc },
  { class = "zklock.AtomicLong", value = E.al },
  { class = "zklock.DoubleBarrier", value = E.bar },
  { class = "zklock.ZookeeperLock", value = E.zkl },
  { class = "zklock.Leader", value = E.leader },
  { class = "zklock.Latch", value = E.latch },
  { class = "zklock.Cache", value = E.cache },
  { class = "zklock.Member", value = E.member },
  { class = "zklock.Group", value = E.group },
  { class = "zklock.Election", value = E.election },
  { class = "zklock.testing", value = testing },
  { class = "zklock.testing.Config", value = testing.config },
  { class = "zklock.testing.Server", value = require("zklock.testing.servers").Server, methods = true },
  { class = "zklock.testing.Ensemble", value = require("zklock.testing.ensemble").Ensemble, methods = true },
  { class = "zklock.testing.Net", value = require("zklock.testing.net").Net, methods = true },
  { class = "zklock.testing.Nemesis", value = require("zklock.testing.nemesis").Nemesis, methods = true },
  { class = "zklock.testing.Worker", value = require("zklock.testing.workers").Worker, methods = true },
  { class = "zklock.testing.Fenced", value = require("zklock.testing.fenced").Fenced, methods = true },
  { class = "zklock.testing.check", value = testing.check },
  { class = "zklock.testing.Recorder", value = testing.check.Recorder, methods = true },
}
for _, f in ipairs(lines_of("cd " .. shq(ROOT .. "/lua/zklock/adapters") .. " && ls *.lua | LC_ALL=C sort")) do
  local name = f:gsub("%.lua$", "")
  local m = load_adapter(name)
  if m then TARGETS[#TARGETS + 1] = { class = "zklock.adapters." .. name, value = m } end
  if m and name == "openresty" then -- one_worker's handle and job context (need nginx to make)
    TARGETS[#TARGETS + 1] = { class = "zklock.adapters.openresty.OneWorker", value = m._OneWorker, methods = true }
    TARGETS[#TARGETS + 1] = { class = "zklock.adapters.openresty.Job", value = m._Job, methods = true }
    TARGETS[#TARGETS + 1] = { class = "zklock.adapters.openresty.SharedCache", value = m._SharedCache,
                              methods = true }
  end
end

-- Every non-underscore string key of v and of its metatables' __index chain: name -> type.
local function public_names(v)
  local out, seen = {}, {}
  local function add(t)
    for k, x in next, t do
      if type(k) == "string" and not k:match("^_") and out[k] == nil then out[k] = type(x) end
    end
  end
  if type(v) == "table" then add(v) end
  local mt = getmetatable(v)
  while type(mt) == "table" and not seen[mt] do
    seen[mt] = true
    local idx = rawget(mt, "__index")
    if type(idx) ~= "table" then break end
    add(idx)
    mt = getmetatable(idx)
  end
  return out
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

local reached, nfuncs, nfields = {}, 0, 0
for _, t in ipairs(TARGETS) do
  local cls = api.classes[t.class]
  local names = public_names(t.value)
  if not cls then
    problem("%s: exists at runtime but types/ has no ---@class %s", t.class, t.class)
  else
    reached[t.class] = true
    local doc_funcs, doc_fields = {}, {}
    for _, f in ipairs(cls.funcs) do doc_funcs[f.name] = f end
    for _, f in ipairs(all_fields(api, cls)) do doc_fields[f.name] = f end
    local where = cls.file
    for _, name in ipairs(sorted_keys(names)) do
      local ty = names[name]
      if ty == "function" then
        nfuncs = nfuncs + 1
        local fld = doc_fields[name]
        if not doc_funcs[name] and not (fld and fld.type:match("^fun")) then
          local disp = cls.display or "x"
          local sep = (cls.funcs[1] and cls.funcs[1].sep) or (t.value ~= nil and getmetatable(t.value) and ":" or ".")
          problem("%s%s%s: public function at runtime has no entry in types/%s"
            .. " (add `function %s%s%s(...) end` with its ---@param/---@return)",
            t.class, sep, name, where, disp, sep, name)
        end
      elseif not t.methods then
        nfields = nfields + 1
        if not doc_fields[name] and not doc_funcs[name] then
          problem("%s.%s: public field at runtime (%s) has no entry in types/%s"
            .. " (add `---@field %s <type> <text>` to ---@class %s)",
            t.class, name, ty, where, name, t.class)
        end
      end
    end
    for name, f in pairs(doc_funcs) do
      if names[name] ~= "function" then
        problem("%s: documented at types/%s but %s at runtime", f.key, f.where,
          names[name] and ("a " .. names[name]) or "absent")
      end
    end
    if not t.methods then
      for name in pairs(doc_fields) do
        if names[name] == nil and not name:match("^_") then
          problem("%s.%s: documented field (types/%s) does not exist at runtime", t.class, name, cls.where)
        end
      end
    end
  end
end
-- a documented class with functions must be one that the walk reaches
for _, it in ipairs(api.items) do
  if it.kind == "class" and #it.funcs > 0 and not reached[it.name] then
    problem("%s: documented functions (types/%s) but the checker reaches no such object:"
      .. " add it to TARGETS in scripts/apidoc.lua",
      it.name, it.file)
  end
end

-- (c) options. PROBES: meta function key -> a call of it with options table `o` (the argument
-- position is the documented parameter's). Add one when a new call takes options through
-- check.options.
local PROBES = {
  ["zklock.connect"] = function(o) return zklock.connect(E.hosts, o) end,
  ["zklock.retry.fixed"] = function(o) return zklock.retry.fixed(o) end,
  ["zklock.retry.exponential"] = function(o) return zklock.retry.exponential(o) end,
  ["zklock.Client:mutex"] = function(o) return E.client:mutex("/apidoc/p", o) end,
  ["zklock.Client:rwlock"] = function(o) return E.client:rwlock("/apidoc/p", o) end,
  ["zklock.Client:semaphore"] = function(o) return E.client:semaphore("/apidoc/p", 2, o) end,
  ["zklock.Client:semaphore_mutex"] = function(o) return E.client:semaphore_mutex("/apidoc/p", o) end,
  ["zklock.Client:multilock"] = function(o) return E.client:multilock({ E.mutex }, o) end,
  ["zklock.Client:leader"] = function(o) return E.client:leader("/apidoc/p", function() end, o) end,
  ["zklock.Client:latch"] = function(o) return E.client:latch("/apidoc/p", o) end,
  ["zklock.Client:create"] = function(o) return E.client:create("/apidoc/p", "", o) end,
  ["zklock.Transaction:create"] = function(o) return E.client:transaction():create("/apidoc/p", "", o) end,
  ["zklock.Client:get"] = function(o) return E.client:get("/apidoc/p", o) end,
  ["zklock.Client:children"] = function(o) return E.client:children("/apidoc/p", o) end,
  ["zklock.Client:exists"] = function(o) return E.client:exists("/apidoc/p", o) end,
  ["zklock.Client:set"] = function(o) return E.client:set("/apidoc/p", "", -1, o) end,
  ["zklock.Client:delete"] = function(o) return E.client:delete("/apidoc/p", -1, o) end,
  ["zklock.Client:revoke"] = function(o) return E.client:revoke("/apidoc/p", o) end,
  ["zklock.Client:atomic_long"] = function(o) return E.client:atomic_long("/apidoc/p", o) end,
  ["zklock.Client:queue"] = function(o) return E.client:queue("/apidoc/p", o) end,
  ["zklock.Client:cache"] = function(o) return E.client:cache("/apidoc/p", o) end,
  ["zklock.Client:member"] = function(o) return E.client:member("/apidoc/p", "", o) end,
  ["zklock.Client:group"] = function(o) return E.client:group("/apidoc/p", o) end,
  ["zklock.Client:zookeeper_lock"] = function(o) return E.client:zookeeper_lock("/apidoc/p", o) end,
  ["zklock.Lock:acquire"] = function(o) return E.mutex:acquire(0, o) end,
  ["zklock.Semaphore:acquire"] = function(o) return E.sem:acquire(0, o) end,
  ["zklock.Semaphore:acquire_many"] = function(o) return E.sem:acquire_many(1, 0, o) end,
  ["zklock.SemaphoreMutex:acquire"] = function(o) return E.smx:acquire(0, o) end,
  ["zklock.MultiLock:acquire"] = function(o) return E.ml:acquire(0, o) end,
}
-- SCANS: calls that read options without check.options. key -> { { file, function, vars } }:
-- the options are every NAME read as VAR.NAME in those functions' bodies.
local SCANS = {
  ["zklock.adapters.cqueues.attach"] = { { "lua/zklock/adapters/cqueues.lua", "M.attach", { "opts" } } },
  ["zklock.adapters.luv.attach"] = { { "lua/zklock/adapters/luv.lua", "M.attach", { "opts" } } },
  ["zklock.adapters.openresty.attach"] = { { "lua/zklock/adapters/openresty.lua", "M.attach", { "opts" } } },
  ["zklock.adapters.openresty.one_worker"] = { { "lua/zklock/adapters/openresty.lua", "M.one_worker", { "opts" } } },
  ["zklock.adapters.openresty.shared_cache"] = {
    { "lua/zklock/adapters/openresty.lua", "M.shared_cache", { "opts" } },
  },
  ["zklock.testing.server"] = {
    { "lua/zklock/testing/servers.lua", "defaults", { "o" } },
    { "lua/zklock/testing/servers.lua", "Server:_spawn", { "self.opts" } },
  },
  ["zklock.testing.ensemble"] = {
    { "lua/zklock/testing/servers.lua", "defaults", { "o" } },
    { "lua/zklock/testing/servers.lua", "Server:_spawn", { "self.opts" } },
    { "lua/zklock/testing/servers.lua", "write_config", { "o" } },
    { "lua/zklock/testing/ensemble.lua", "M.ensemble", { "o" } },
  },
  ["zklock.testing.Server:stop"] = { { "lua/zklock/testing/servers.lua", "Server:stop", { "opts" } } },
  ["zklock.testing.spawn"] = { { "lua/zklock/testing/processes.lua", "M.spawn", { "o" } } },
  ["zklock.testing.proxy"] = { { "lua/zklock/testing/net.lua", "M.proxy", { "opts" } } },
  ["zklock.testing.nemesis"] = { { "lua/zklock/testing/nemesis.lua", "M.new", { "opts" } } },
  ["zklock.testing.worker"] = { { "lua/zklock/testing/workers.lua", "M.worker", { "opts" } } },
  ["zklock.testing.fenced"] = { { "lua/zklock/testing/fenced.lua", "M.fenced", { "opts" } } },
}

local function esc(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

local function function_body(rel, fname)
  local text = read(ROOT .. "/" .. rel)
  if not text then return nil, "no such file" end
  local out, inside = {}, false
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if not inside then
      if line:match("^function%s+" .. esc(fname) .. "%s*%(")
        or line:match("^local%s+function%s+" .. esc(fname) .. "%s*%(") then
        inside = true
      end
    elseif line:match("^end") then
      return table.concat(out, "\n")
    else
      out[#out + 1] = (line:gsub("%-%-.*$", ""))
    end
  end
  return nil, "no top-level function " .. fname
end

local checked_classes, nopts = {}, 0
local probed_fnames = {}
local function compare_options(key, pname, cls, got)
  checked_classes[cls.name] = true
  local doc = {}
  for _, f in ipairs(all_fields(api, cls)) do doc[f.name] = true end
  for _, name in ipairs(sorted_keys(got)) do
    nopts = nopts + 1
    if not doc[name] then
      problem("%s: option '%s' (argument %s) is accepted but ---@class %s (types/%s) has no ---@field %s",
        key, name, pname, cls.name, cls.file, name)
    end
  end
  for _, name in ipairs(sorted_keys(doc)) do
    if not got[name] then
      problem("%s: ---@class %s (types/%s) documents option '%s' that the call does not accept",
        key, cls.name, cls.file, name)
    end
  end
end

for _, key in ipairs(sorted_keys(api.funcs)) do
  local f = api.funcs[key]
  for i, p in ipairs(f.params) do
    local oc = options_class_of(api, p)
    if oc then
      if PROBES[key] then
        probe = { argn = i, records = {} }
        local ok, err = pcall(PROBES[key], {})
        local rec = probe
        probe = nil
        local got, hit = {}, false
        for _, r in ipairs(rec.records) do
          probed_fnames[r.fname] = true
          if r.argn == i then hit = true; for k in pairs(r.keys) do got[k] = true end end
        end
        if not hit then
          problem("%s: the probe never reached check.options for argument %d (%s): %s", key, i, p.name,
            ok and "it returned" or tostring(err))
        elseif not ok and err ~= ABORT then
          problem("%s: probe failed: %s", key, tostring(err))
        end
        compare_options(key, p.name, oc, got)
      elseif SCANS[key] then
        local got = {}
        for _, s in ipairs(SCANS[key]) do
          local body, why = function_body(s[1], s[2])
          if not body then
            problem("%s: cannot scan %s in %s: %s (update SCANS in scripts/apidoc.lua)", key, s[2], s[1], why)
          else
            for _, var in ipairs(s[3]) do
              for name in body:gmatch("%f[%w_.]" .. esc(var) .. "%.([%a_][%w_]*)") do got[name] = true end
            end
          end
        end
        compare_options(key, p.name, oc, got)
      end
    end
  end
end
-- every options class that some documented call takes must be checked through one of them
for _, key in ipairs(sorted_keys(api.funcs)) do
  for _, p in ipairs(api.funcs[key].params) do
    local oc = options_class_of(api, p)
    if oc and not checked_classes[oc.name] then
      checked_classes[oc.name] = true
      problem("%s: options class %s (argument %s) is checked by no probe or scan:"
        .. " add one to PROBES or SCANS in scripts/apidoc.lua",
        key, oc.name, p.name)
    end
  end
end
-- and every check.options("name", ...) of the library must have been reached by some probe
for _, rel in ipairs(lines_of("cd " .. shq(ROOT) .. " && ls lua/zklock/*.lua | LC_ALL=C sort")) do
  local text = read(ROOT .. "/" .. rel) or ""
  local ln = 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    ln = ln + 1
    for fname in line:gmatch("check%.options%(%s*\"([%w_]+)\"") do
      if not probed_fnames[fname] then
        problem("%s:%d: check.options(\"%s\", ...) is reached by no probe: document its options (a ---@class"
          .. " ...Options taken by a ---@param opts?) and add a probe to PROBES in scripts/apidoc.lua",
          rel, ln, fname)
      end
    end
  end
end

E.client:close()

if #problems > 0 then
  for _, p in ipairs(problems) do io.write("apidoc: ", p, "\n") end
  io.write(("apidoc: %d problem(s)\n"):format(#problems))
  os.exit(1)
end
io.write(("apidoc: ok: %s up to date; every public function (%d) and field (%d) of %d runtime objects and"
  .. " every option (%d) has its entry in %s\n"):format(DOC, nfuncs, nfields, #TARGETS, nopts, META))
os.exit(0)
