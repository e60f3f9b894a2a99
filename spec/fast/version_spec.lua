-- One version everywhere (docs/development.md, "Releasing"). Its single source is `#define ZKL_VERSION` in
-- csrc/include/zklock.h: the binding exports it as zklock.core._VERSION and zklock._VERSION is
-- that value, so a mismatch here means a stale build, or a copy that drifted (zklock.testing's own
-- _VERSION, a rockspec not written from rockspec/zklock.rockspec.in).
--   busted --lua=lua5.4 spec/fast/version_spec.lua
local zklock = require("zklock")

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function run(cmd) -- -> ok, output (Lua 5.1 / LuaJIT and 5.4 report exit codes differently)
  local out = os.tmpname()
  local a, _, c = os.execute(cmd .. " >" .. out .. " 2>&1")
  local text = read(out)
  os.remove(out)
  if type(a) == "number" then return a == 0, text end
  return a == true and (c == nil or c == 0), text
end

describe("version #fast", function()
  local header = read("csrc/include/zklock.h"):match('\n#define ZKL_VERSION "([^"]*)"')

  it("is X.Y.Z in csrc/include/zklock.h", function()
    assert.is_string(header, "no #define ZKL_VERSION in csrc/include/zklock.h")
    assert.matches("^%d+%.%d+%.%d+$", header)
  end)

  it("is the header's in the loaded zklock.core (a stale build fails here) and zklock", function()
    assert.are.equal(header, require("zklock.core")._VERSION)
    assert.are.equal(header, zklock._VERSION)
  end)

  it("is the header's in zklock.testing", function()
    assert.are.equal(header, require("zklock.testing")._VERSION)
  end)

  it("is the header's in CMake (the SONAME and zklock.pc come from its regex)", function()
    -- the same extraction as CMakeLists.txt, applied to the header
    local cm = read("CMakeLists.txt")
    local reads = 'file(STRINGS csrc/include/zklock.h ZKL_VERSION_LINE REGEX "^#define ZKL_VERSION \\"")'
    assert.truthy(cm:find(reads, 1, true), "CMakeLists.txt no longer reads ZKL_VERSION from the header")
    local pc = io.open("build/pkgconfig/zklock.pc.in", "rb")
    if pc then -- configured with the C API (the default, as .ci/run does)
      local text = pc:read("*a")
      pc:close()
      assert.are.equal(header, text:match("\nVersion: ([^\n]*)"))
    end
  end)

  it("names the committed rockspecs, which are what the template gives", function()
    -- without a sanitizer runtime preloaded into the shell (the ASan suite runs this file too,
    -- and LeakSanitizer reports bash's own allocations at its exit)
    local ok, out = run("env -u LD_PRELOAD bash scripts/release.sh --check")
    assert.is_true(ok, out)
    assert.matches("rockspec/zklock%-scm%-1%.rockspec is what", out)
    local released = io.open("rockspec/zklock-" .. header .. "-1.rockspec", "rb")
    if released then
      released:close()
      assert.matches("rockspec/zklock%-" .. header:gsub("%.", "%%.") .. "%-1%.rockspec is what", out)
    end
  end)
end)
