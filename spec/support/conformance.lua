-- The families of grants the hold protocol covers (docs/design.md, "One hold protocol"), as a
-- table the conformance specs iterate: spec/21-conformance_spec.lua (a real server) and
-- spec/fast/conformance_spec.lua (argument checks, no server; Lua 5.1-5.4 and LuaJIT).
--
-- Each family:
--   name            how the tests name it
--   new(c, path)    the acquirer: the object whose acquire(timeout) returns a grant
--   blocker(c, path) an acquirer on another client whose grant keeps new()'s from being granted
--   same            acquire returns the acquirer itself (false: a grant of its own, the lease)
--   dirs(path)      the directories its nodes live in (empty after every test)
--   nodes(g)        the nodes of grant g while held (one, or one per component)
--   lists           the acquirer's participants() lists the grant's directory (a listing
--                   without the grant's node is evidence that it is gone)
--   revocable       the acquirer takes on_revoke (its grants watch their own node)
local M = {}

local function single(g) return { g:node() } end

M.families = {
  {
    name = "mutex", lists = true, revocable = true, same = true,
    new = function(c, path) return c:mutex(path) end,
    dirs = function(path) return { path } end,
    nodes = single,
  },
  {
    name = "read lock", lists = true, revocable = true, same = true,
    new = function(c, path) return c:rwlock(path).read end,
    blocker = function(c, path) return c:rwlock(path).write end,
    dirs = function(path) return { path } end,
    nodes = single,
  },
  {
    name = "write lock", lists = true, revocable = true, same = true,
    new = function(c, path) return c:rwlock(path).write end,
    dirs = function(path) return { path } end,
    nodes = single,
  },
  {
    name = "semaphore mutex", lists = true, revocable = true, same = true,
    new = function(c, path) return c:semaphore_mutex(path) end,
    dirs = function(path) return { path .. "/leases", path .. "/locks" } end,
    nodes = single,
  },
  {
    name = "lease", lists = true, revocable = true, same = false,
    new = function(c, path) return c:semaphore(path, 1) end,
    dirs = function(path) return { path .. "/leases", path .. "/locks" } end,
    nodes = single,
  },
  {
    name = "multi-lock", same = true,
    new = function(c, path) return c:multilock({ c:mutex(path .. "/a"), c:mutex(path .. "/b") }) end,
    dirs = function(path) return { path .. "/a", path .. "/b" } end,
    nodes = function(g) return g:nodes() end,
  },
  {
    name = "zookeeper_lock", same = true,
    new = function(c, path) return c:zookeeper_lock(path) end,
    dirs = function(path) return { path } end,
    nodes = single,
  },
}

for _, f in ipairs(M.families) do
  f.blocker = f.blocker or f.new
  f.slug = f.name:gsub("[^%w]", "-")
end

-- The names every grant offers, and every acquirer.
M.GRANT_METHODS = { "release", "is_held", "token", "node", "on_lost", "transaction" }
M.ACQUIRER_METHODS = { "acquire", "cancel" }

-- Grants that no acquire returns: a leader's term (client:leader runs a function while it
-- leads) and a latch's leadership (the latch joins by itself). They answer is_held, token, node,
-- on_lost and transaction for the current term; these checks do not apply to them: acquire's
-- timeouts and return value, cancel, release (close() leaves the election instead), <close> and
-- collection of a grant (there is no grant object apart from the election's own).
-- new(c, path[, opts]): opts are the constructor's options (max_hold: every term is bounded).
M.elections = {
  {
    name = "leader term",
    new = function(c, path, opts) return c:leader(path, function(lo) lo:sleep(30) end, opts) end,
  },
  {
    name = "latch leadership", rejoins = true, -- it joins again by itself after a loss
    new = function(c, path, opts) return c:latch(path, opts) end,
  },
}
M.ELECTION_METHODS = { "is_held", "token", "node", "on_lost", "transaction" }

-- Timeouts that must raise (argument #1 of acquire, naming "timeout").
M.BAD_TIMEOUTS = {
  { 0 / 0, "NaN" }, { -1, "-1" }, { -1e-9, "-1e-09" }, { -math.huge, "-inf" }, { "5", "\"5\"" }, { {}, "table" },
  { true, "boolean" },
}

return M
