-- The API reference checker (scripts/apidoc.lua --check) catches what it promises: a public
-- function or an option without an entry in types/, an entry naming nothing, a stale
-- docs/api.md. It runs as CI does, under lua5.4 against build/ (no server); tagged lua54, so the
-- LuaJIT run of the fast tier skips it.
-- output and exit status of a shell command (the status echoed: LuaJIT's popen close has none)
local function sh(cmd)
  local p = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"rc=$?\""))
  local out = p:read("*a")
  p:close()
  local body, code = out:match("^(.*)rc=(%d+)%s*$")
  return body, tonumber(code)
end

local function shq(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a"); f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s); f:close()
end

-- s with the first occurrence of `from` (plain text) replaced by `to`; fails if absent
local function replace(s, from, to)
  local i, j = s:find(from, 1, true)
  assert(i, "not found in types/zklock.lua: " .. from)
  return s:sub(1, i - 1) .. to .. s:sub(j + 1)
end

-- (without the sanitizer runtime the ASan suite preloads: this checks documentation, and LSan's
-- exit-time scan of this short process crashed in its tracer there, "Tracer caught signal 11")
local function apidoc(...)
  local argv = { "env", "-u", "LD_PRELOAD", "lua5.4", "scripts/apidoc.lua" }
  for _, a in ipairs({ ... }) do argv[#argv + 1] = shq(a) end
  return sh(table.concat(argv, " "))
end

describe("scripts/apidoc.lua --check #fast #lua54", function()
  local tmp
  before_each(function()
    tmp = sh("mktemp -d"):gsub("%s+$", "")
    local out, code = sh("cp -r types " .. shq(tmp .. "/types") .. " && cp docs/api.md " .. shq(tmp .. "/api.md"))
    assert(code == 0, out)
  end)
  after_each(function()
    if tmp and tmp:match("^/tmp/") then sh("rm -rf " .. shq(tmp)) end
  end)

  it("passes on the tree as committed", function()
    local out, code = apidoc("--check")
    assert.are.equal(0, code, out)
    assert.truthy(out:find("apidoc: ok", 1, true), out)
  end)

  it("reports a public function and an option that have no entry", function()
    local path = tmp .. "/types/zklock.lua"
    local s = read(path)
    -- drop client:session_timeout() with its documentation block
    local from = s:find("---The session timeout in seconds", 1, true)
    local _, to = s:find("function client:session_timeout() end\n", 1, true)
    assert(from and to)
    s = s:sub(1, from - 1) .. s:sub(to + 1)
    -- and the `keepalive` option of zklock.connect
    s = s:gsub("%-%-%-@field keepalive%? [^\n]*\n", "", 1)
    write(path, s)
    local out, code = apidoc("--check", "--meta", tmp .. "/types", "--doc", tmp .. "/api.md")
    assert.are_not.equal(0, code)
    assert.truthy(out:find("zklock.Client:session_timeout: public function at runtime has no entry", 1, true), out)
    assert.truthy(out:find("zklock.connect: option 'keepalive' (argument opts) is accepted but ---@class "
      .. "zklock.ConnectOptions", 1, true), out)
  end)

  it("reports entries that name nothing (a renamed function or option)", function()
    local path = tmp .. "/types/zklock.lua"
    local s = read(path)
    s = replace(s, "function client:tasks() end", "function client:task_count() end")
    s = replace(s, "---@field per_lock_timeout? number", "---@field lock_timeout? number")
    write(path, s)
    local out, code = apidoc("--check", "--meta", tmp .. "/types", "--doc", tmp .. "/api.md")
    assert.are_not.equal(0, code)
    assert.truthy(out:find("zklock.Client:task_count: documented at types/zklock.lua", 1, true), out)
    assert.truthy(out:find("zklock.Client:tasks: public function at runtime has no entry", 1, true), out)
    assert.truthy(out:find("documents option 'lock_timeout' that the call does not accept", 1, true), out)
    assert.truthy(out:find("option 'per_lock_timeout' (argument opts) is accepted", 1, true), out)
  end)

  it("reports a source-scanned option (zklock.testing) that has no entry", function()
    local path = tmp .. "/types/zklock/testing.lua"
    write(path, (read(path):gsub("%-%-%-@field sync_limit%? [^\n]*\n", "", 1)))
    local out, code = apidoc("--check", "--meta", tmp .. "/types", "--doc", tmp .. "/api.md")
    assert.are_not.equal(0, code)
    assert.truthy(out:find("zklock.testing.ensemble: option 'sync_limit'", 1, true), out)
  end)

  it("reports a stale docs/api.md, and writing it again fixes that", function()
    local doc = tmp .. "/api.md"
    write(doc, read(doc):gsub("Returns:", "Gives:", 1))
    local out, code = apidoc("--check", "--doc", doc)
    assert.are_not.equal(0, code)
    assert.truthy(out:find(doc .. " is stale", 1, true), out)
    local _, wcode = apidoc("--doc", doc)
    assert.are.equal(0, wcode)
    assert.are.equal(read("docs/api.md"), read(doc))
    out, code = apidoc("--check", "--doc", doc)
    assert.are.equal(0, code, out)
  end)
end)
