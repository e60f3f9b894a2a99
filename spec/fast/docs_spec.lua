-- README.md and docs/*.md, without a server: every relative link points to a file (and heading)
-- that exists, and every ```lua block is either a whole program or marked ```lua fragment
-- (spec/support/doctest.lua; the programs run in spec/98-doctest_spec.lua).
--   busted --lua=lua5.4 spec/fast/docs_spec.lua
local doctest = require("support.doctest")

describe("docs #fast", function()
  local pages = doctest.pages(".")

  it("finds the README and the docs pages", function()
    assert.are.equal("README.md", pages[1])
    for _, want in ipairs({ "docs/api.md", "docs/cli.md", "docs/design.md", "docs/development.md",
      "docs/openresty.md", "docs/recipes.md", "docs/testing.md" }) do
      local found = false
      for _, p in ipairs(pages) do found = found or p == want end
      assert.is_true(found, want .. " is not among the pages")
    end
  end)

  it("has no relative link to a missing file or heading", function()
    local problems = doctest.check_links(".", pages)
    assert.are.equal("", table.concat(problems, "\n"))
  end)

  it("has every ```lua block tagged as a program or a fragment, and programs in the README", function()
    local programs = 0
    for _, page in ipairs(pages) do
      local blocks, err = doctest.blocks(assert(doctest.read(page)), page)
      assert.is_nil(err)
      for _, b in ipairs(blocks) do
        if b.kind == "program" and page == "README.md" then programs = programs + 1 end
      end
    end
    assert.is_true(programs >= 1, "README.md has no whole-program example")
  end)

  it("the link checker finds a missing file, a missing heading and a bad fence (planted)", function()
    local files = {
      ["README.md"] = "# Top\n\n## The model\n\nSee [a](docs/x.md#there), [b](docs/gone.md), "
        .. "[c](#the-model), [d](#nope), `[e](not/a/link.md)` and [f](https://example.org/).\n",
      ["docs/x.md"] = "# X\n\n## Here\n\nBack to [the model](../README.md#the-model).\n",
    }
    local problems = doctest.check_links(".", { "README.md", "docs/x.md" }, function(p) return files[p] end)
    assert.are.same({
      "README.md:5: link docs/x.md#there: no heading #there in docs/x.md",
      "README.md:5: link docs/gone.md: no file docs/gone.md",
      "README.md:5: link #nope: no heading #nope in README.md",
    }, problems)
    local blocks, err = doctest.blocks("text\n```lua\nprint(1)\n```\n\n```lua fragment\nx()\n```\n", "p.md")
    assert.is_nil(err)
    assert.are.same({ "program", "fragment" }, { blocks[1].kind, blocks[2].kind })
    assert.are.same({ 2, 6 }, { blocks[1].line, blocks[2].line })
    assert.is_nil((doctest.blocks("```lua fragmnet\nx()\n```\n", "p.md")))
    assert.matches("p.md:1: unknown tag", select(2, doctest.blocks("```lua fragmnet\nx()\n```\n", "p.md")), 1, true)
    assert.matches("p.md:2: code block without", select(2, doctest.blocks("a\n```lua\nx()\n", "p.md")), 1, true)
  end)

  it("gives headings GitHub's anchors", function()
    local set = doctest.anchors("# The `zklock` command\n## Read-write lock, semaphores, multi-lock\n"
      .. "### ZooKeeper's own lock recipe: `zookeeper_lock`\n## Queues\n## Queues\n```sh\n# not a heading\n```\n")
    for _, a in ipairs({ "the-zklock-command", "read-write-lock-semaphores-multi-lock",
      "zookeepers-own-lock-recipe-zookeeper_lock", "queues", "queues-1" }) do
      assert.is_true(set[a], a)
    end
    assert.is_nil(set["not-a-heading"])
  end)
end)
