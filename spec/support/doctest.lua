-- support.doctest: the Lua examples and the relative links of README.md and docs/*.md.
--
-- The convention (docs/development.md, "Doc-tests"): a block fenced with ```lua is a whole
-- program, which spec/98-doctest_spec.lua runs against a real server; a block fenced with
-- ```lua fragment is a fragment (it assumes a `client`, your own functions, a host), read by
-- people only. Any other word after ```lua is an error, so a typo cannot turn a program into
-- something that is never run. docs/api.md is written by scripts/apidoc.lua from types/: its
-- examples are call sketches and count as fragments (the file is listed in GENERATED).
--
-- Plain Lua 5.1-5.4 (the link and fence checks run in the fast tier on every version).
local M = {}

M.GENERATED = { ["docs/api.md"] = true }

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("*a")
  f:close()
  return s
end
M.read = read

local function lines_of(text)
  local out = {}
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

-- The pages: README.md and docs/*.md, in a fixed order.
function M.pages(root)
  root = root or "."
  local pages = { "README.md" }
  local p = io.popen("ls " .. root .. "/docs/*.md 2>/dev/null")
  local names = {}
  for line in p:read("*a"):gmatch("[^\n]+") do names[#names + 1] = "docs/" .. line:match("([^/]+)$") end
  p:close()
  table.sort(names)
  for _, n in ipairs(names) do pages[#pages + 1] = n end
  return pages
end

-- blocks(text, name) -> list of { file = name, line = N (the fence's line), kind = "program" |
-- "fragment", code = source }, or nil, "FILE:LINE: message" for a bad fence (unknown tag, no end)
function M.blocks(text, name)
  local out, cur = {}, nil
  for i, line in ipairs(lines_of(text)) do
    if cur then
      if line:match("^%s*```%s*$") then
        cur.code = table.concat(cur.lines, "\n") .. "\n"
        cur.lines = nil
        out[#out + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    else
      local lang, info = line:match("^%s*```(%w*)%s*(.-)%s*$")
      if lang == "lua" then
        local kind
        if info == "" then
          kind = M.GENERATED[name] and "fragment" or "program"
        elseif info == "fragment" then
          kind = "fragment"
        else
          return nil, ("%s:%d: unknown tag %q after ```lua (a whole program has none; a fragment "
            .. "says ```lua fragment)"):format(name, i, info)
        end
        cur = { file = name, line = i, kind = kind, lines = {} }
      elseif lang then
        -- another language's block: skip to its end
        cur = { file = name, line = i, kind = "other", lines = {} }
      end
    end
  end
  if cur then return nil, ("%s:%d: code block without its closing ```"):format(name, cur.line) end
  local keep = {}
  for _, b in ipairs(out) do if b.kind ~= "other" then keep[#keep + 1] = b end end
  return keep
end

-- GitHub's heading anchors: lower case, punctuation dropped (but - and _), spaces to -, and
-- -1, -2, ... for repeats
function M.anchors(text)
  local set, seen, fenced = {}, {}, false
  for _, line in ipairs(lines_of(text)) do
    if line:match("^%s*```") then
      fenced = not fenced
    elseif not fenced then
      local h = line:match("^#+%s+(.-)%s*#*%s*$")
      if h then
        local a = h:lower():gsub("[^%w%s_%-]", ""):gsub("%s", "-")
        local n = seen[a]
        seen[a] = (n or 0) + 1
        set[n and (a .. "-" .. n) or a] = true
      end
      for id in line:gmatch('<a%s+name%s*=%s*"([^"]+)"') do set[id] = true end
      for id in line:gmatch('<a%s+id%s*=%s*"([^"]+)"') do set[id] = true end
    end
  end
  return set
end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

local function normalize(path)
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." and #parts > 0 and parts[#parts] ~= ".." then
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return table.concat(parts, "/")
end

-- links(text, name) -> list of { file, line, target } for every relative link (and image)
-- outside code blocks and code spans; web and mail links are left out
function M.links(text, name)
  local out, fenced = {}, false
  for i, line in ipairs(lines_of(text)) do
    if line:match("^%s*```") then
      fenced = not fenced
    elseif not fenced then
      local plain = line:gsub("`[^`]*`", "")
      for target in plain:gmatch("%]%(([^)%s]+)[^)]*%)") do
        if not target:match("^%a[%w+.-]*:") then out[#out + 1] = { file = name, line = i, target = target } end
      end
    end
  end
  return out
end

-- check_links(root, pages) -> list of "FILE:LINE: message" for links to a missing file or anchor
-- (read(path) may be replaced by a test)
function M.check_links(root, pages, reader)
  reader = reader or function(p) return read(root .. "/" .. p) end
  local problems, anchors = {}, {}
  local function anchors_of(p)
    if anchors[p] == nil then
      local t = reader(p)
      anchors[p] = t and M.anchors(t) or false
    end
    return anchors[p]
  end
  for _, page in ipairs(pages) do
    local text = reader(page)
    if not text then
      problems[#problems + 1] = page .. ": cannot be read"
    else
      for _, l in ipairs(M.links(text, page)) do
        local file, frag = l.target:match("^([^#]*)#?(.*)$")
        local path = file == "" and page or normalize(dirname(page) .. "/" .. file)
        local where = ("%s:%d: link %s"):format(l.file, l.line, l.target)
        local exists = reader(path) ~= nil or os.rename(root .. "/" .. path, root .. "/" .. path)
        if not exists then
          problems[#problems + 1] = where .. ": no file " .. path
        elseif frag ~= "" then
          if not path:match("%.md$") then
            problems[#problems + 1] = where .. ": an anchor into a file that is not Markdown"
          else
            local set = anchors_of(path)
            if not (set and set[frag]) then
              problems[#problems + 1] = where .. ": no heading #" .. frag .. " in " .. path
            end
          end
        end
      end
    end
  end
  return problems
end

-- program(block, hosts) -> the block's code with the examples' hosts string replaced
function M.program(block, hosts)
  return (block.code:gsub("127%.0%.0%.1:2181", (hosts:gsub("%%", "%%%%"))))
end

return M
