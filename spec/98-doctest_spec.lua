-- Doc-tests: every ```lua block of README.md and docs/*.md that is a whole program (not marked
-- ```lua fragment: spec/support/doctest.lua, docs/development.md "Doc-tests") runs as a process
-- of its own with this build's paths against the fixture's server, the examples' hosts string
-- "127.0.0.1:2181" replaced by the server's, and must exit 0 within its bound. A failure names
-- the file and line of the block's fence and shows the program's output.
--   busted --lua=lua5.4 spec/98-doctest_spec.lua
-- #lua54 #nosan: the pages' examples are written for Lua 5.4 and run once, in the Lua 5.4 suite
-- (the calls they make run under ASan and LuaJIT in the other specs); the fast tier
-- (spec/fast/docs_spec.lua) checks the tags and links on every runtime.
local testing = require("zklock.testing")
local fixture = require("support.fixture")
local doctest = require("support.doctest")

local BOUND = 90 -- seconds per program: a few seconds each alone, generous on a busy 2-core machine

local programs = {}
for _, page in ipairs(doctest.pages(".")) do
  local blocks, err = doctest.blocks(assert(doctest.read(page)), page)
  if not blocks then error(err) end
  for _, b in ipairs(blocks) do
    if b.kind == "program" then programs[#programs + 1] = b end
  end
end

-- run(block, hosts) -> true, or nil, "FILE:LINE: ..." with the program's output
local function run(block, hosts)
  local w = testing.worker{ code = doctest.program(block, hosts) }
  local status, why = w:wait(BOUND)
  local out = w:output()
  w:stop()
  local where = ("%s:%d"):format(block.file, block.line)
  if status == nil then
    return nil, ("%s: the example did not end within %d s (%s); its output:\n%s"):format(where, BOUND,
      tostring(why), out)
  elseif status ~= 0 then
    return nil, ("%s: the example exited with status %d; its output:\n%s"):format(where, status, out)
  end
  return true
end

describe("doc-tests #lua54 #nosan", function()
  local zk
  fixture.server({}, {}, function(s) zk = s end)

  it("finds whole programs in the README and the docs pages", function()
    assert.is_true(#programs >= 2, "found " .. #programs .. " programs")
  end)

  for _, b in ipairs(programs) do
    it(("runs %s:%d"):format(b.file, b.line), function()
      local ok, err = run(b, zk.hosts)
      assert(ok, err)
    end)
  end

  it("fails, naming the file and line, on a broken example (planted)", function()
    local ok, err = run({ file = "planted.md", line = 7, code = table.concat({
      'local zklock = require("zklock")',
      'local client = assert(zklock.connect("127.0.0.1:2181"))',
      'local m = client:mutex("/doctest/planted")',
      'assert(m:acquire(5))',
      'print("token", m:tokn())   -- the planted bug: no such method',
    }, "\n") }, zk.hosts)
    assert.is_nil(ok)
    assert.matches("^planted%.md:7: the example exited with status 1", err)
    assert.matches("tokn", err, 1, true)
  end)
end)
