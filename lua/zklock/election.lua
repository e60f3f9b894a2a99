-- zklock.election: client:election(path), a read-only view of a leader election. It reports who
-- leads (the participant id and the fencing token of the head node), that nobody does, and every
-- change, without joining: it creates no node and is not among the participants.
--
-- Name: "election" names the thing viewed (the election at `path`); the calls that take part
-- are named after the role (client:leader, client:latch). "observer" would clash with
-- ZooKeeper's observer servers.
--
-- What it reads: one children watch on the election dir, armed again after every firing (an
-- exists watch on the dir while it is missing). A children watch is the one watch that hears
-- every change that matters: the head leaving (resignation, a lost session, a deleted node),
-- a first participant arriving in an empty dir, and the dir itself going (a reaped container).
-- A data or exists watch on the head alone would miss a new leader in an empty dir and need a
-- children watch there anyway. Cost: one getChildren per membership change (its reply grows
-- with the queue) and one getData of the head when the head changed; nothing while nobody
-- joins or leaves.
--
-- Order: the head is the first node as the participants order themselves: a dir of LeaderLatch
-- nodes (`...latch-<seq>`) as Curator's LeaderLatch sorts (by the text after `latch-`), anything
-- else as the mutex under LeaderSelector (by the text after `lock-`): core.sort, the sort the
-- recipes use.
--
-- Reports run from the client's event dispatch (while the client is pumped: a blocking call,
-- client:run, an adapter's loop), never from a coroutine of their own: nothing to spawn, and it
-- works under every host the client does. A term that was seen and ends is always reported
-- ("ended"), also when the next leader is already queued: an observer that reports only new
-- leaders cannot tell a resignation from a leader that stays. Changes between two listings can
-- be folded together (a leader that came and went between two looks is not seen); each
-- listing's outcome is reported in order.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local hold = require("zklock.internal.hold")
local watch = require("zklock.internal.watch")
local client_mod = require("zklock.client")
local Client = client_mod.Client
local recipe = require("zklock.internal.recipe")

local M = {}

local Election = {}
Election.__index = Election
Election.__name = "zklock.election"
M.Election = Election

local ZNONODE = core.errno.ZNONODE

-- Order node names as the participants do: -> sorted copy
local function order(names)
  local latch = #names > 0
  for _, n in ipairs(names) do
    if not n:find("latch-", 1, true) then latch = false break end
  end
  return core.sort(names, latch and core.LATCH or core.MUTEX)
end
M.order = order

local function emit(self, event, id, token)
  local fn = self._on_change
  if not fn then return end
  local ok, err = pcall(fn, event, self, id, token)
  if not ok then
    hold.log(self.client, "error", ("on_change handler of election %s failed (%s): %s")
      :format(check.short(self.path), event, tostring(err)))
  end
end

-- A new view: false (no leader) or { node, id, token }. Reports what changed, in order.
local function report(self, view)
  local old = self._view
  if old ~= nil and (old == view or (old and view and old.node == view.node)) then return end
  self._view = view
  self._changes = self._changes + 1
  if old then emit(self, "ended", old.id, old.token) end
  if view then emit(self, "leader", view.id, view.token) else emit(self, "none") end
  watch.notify(self._changed)
end

local look

-- A read failed: wait for the session handler (CONNECTED) unless connected already.
local function failed(self, st)
  self._error = ("%s: election %s: %s"):format(core.errname(st), self.path, core.strerror(st))
  watch.notify(self._changed)
  if self.client.state == "CONNECTED" and (st == core.errno.ZCONNECTIONLOSS or st == core.errno.ZOPERATIONTIMEOUT) then
    look(self) -- the connection came back before the failure was heard: look again now
  end
end

-- The listing of rec answered.
local function listed(self, rec, st, res)
  if st == ZNONODE then -- no election dir: nobody leads; an exists watch says when it is made
    self._rec = nil
    report(self, false)
    local erec
    local id, r = watch.start(self.client, "exists", core.OP_EXISTS, self.path, 0, {
      private = true,
      on_done = function(est)
        if self._rec ~= erec then return end
        if est == 0 then self._rec = nil; look(self) -- made meanwhile: list it
        elseif est ~= ZNONODE then self._rec = nil; failed(self, est) end
      end,
      on_fire = function(fst)
        if self._rec ~= erec then return end
        self._rec = nil
        if watch.TYPE_NAMES[fst] then look(self) end
      end,
    })
    if id then erec = r; self._rec = erec end
    return
  end
  if st ~= 0 then
    self._rec = nil
    return failed(self, st)
  end
  self._error = nil
  local names = order(res.children or {})
  if #names == 0 then return report(self, false) end
  local head = names[1]
  local cur = self._view
  if cur and cur.node == head then return end -- the same term: nothing to read
  recipe.background(self.client, core.OP_GET, self.path .. "/" .. head, nil, 0, -1, function(gst, gres)
    if self._closed or self._rec ~= rec then return end -- a newer listing is on its way
    if gst == 0 then
      report(self, { node = head, id = gres.data or "", token = gres.czxid })
    elseif gst ~= ZNONODE then -- ZNONODE: the head left; its deletion fires rec, which looks again
      failed(self, gst)
    end
  end)
end

-- List the dir with a watch, unless a watch is armed or a read in flight.
look = function(self)
  if self._closed or self._rec or self.client.state == "CLOSED" then return end
  local rec
  local id, r = watch.start(self.client, "children", core.OP_CHILDREN, self.path, 0, {
    private = true,
    on_done = function(st, res)
      if self._rec == rec and not self._closed then listed(self, rec, st, res) end
    end,
    on_fire = function(st)
      if self._rec ~= rec then return end
      self._rec = nil
      -- changed, deleted: look again; ESESSION: the session handler looks on the next session
      if watch.TYPE_NAMES[st] then look(self) end
    end,
  })
  if not id then return end
  rec = r
  self._rec = rec
end

-- One session handler per client looks again for every open election after a (re)connection.
local registry = setmetatable({}, { __mode = "k" }) -- client -> { [election] = true } (weak)

local function register(self)
  local c = self.client
  local set = registry[c]
  if not set then
    set = setmetatable({}, { __mode = "k" })
    registry[c] = set
    recipe.on_session(c, function(state)
      if state ~= "CONNECTED" then return end
      for e in pairs(set) do
        if not e._closed then look(e) end
      end
    end)
  end
  set[self] = true
end

-- client:election(path) -> election: starts watching at once (the first view arrives with the
-- first pump of the client).
function Client:election(path)
  check.open(self, "election")
  check.path("election", 1, path)
  local self_ = setmetatable({ client = self, path = path, _view = nil, _changes = 0, _closed = false,
                               _changed = watch.signal(self) }, Election)
  register(self_)
  look(self_)
  return self_
end

-- Wait (up to the client's op_timeout) for the first view when there is none yet.
local function first_view(self)
  if self._view ~= nil or self._closed then return end
  local ms = recipe.op_ms(self.client)
  local deadline = ms >= 0 and core.now() + ms or nil
  while self._view == nil and not self._error and not self._closed and self.client.state ~= "CLOSED" do
    local left = -1
    if deadline then
      left = math.ceil(deadline - core.now())
      if left <= 0 then break end
    end
    watch.wait_signal(self._changed, left)
  end
end

-- election:leader() -> id, token (the leader's participant id and the czxid of its node) |
--   false (nobody leads) | nil, msg, code (no view yet: the first read failed or timed out, or
--   the election is closed). Answers from the last listing (waits for the first one only); drives
--   the client first, so a change nobody pumped for is seen.
function Election:leader()
  check.object(self, Election, "election", "leader")
  if self._closed then
    return nil, ("ECLOSED: election %s is closed"):format(self.path), "ECLOSED"
  end
  hold.refresh(self.client)
  first_view(self)
  local v = self._view
  if v then return v.id, v.token end
  if v == false then return false end
  if self._error then return nil, self._error, self._error:match("^(%u+)") end
  return nil, ("ETIMEDOUT: no answer about election %s yet"):format(self.path), "ETIMEDOUT"
end

-- election:on_change(fn) -> election. fn(event, election, id, token) for each change, in order:
--   "leader", id, token   a term began (also the first view when someone leads)
--   "ended", id, token    the term seen before ended (resigned, lost, its node deleted); always
--                         before the next "leader" or "none"
--   "none"                nobody leads (also the first view of an empty or missing election)
-- Runs from the client's dispatch; it must not wait. Replaces the previous fn; nil removes it.
function Election:on_change(fn)
  check.object(self, Election, "election", "on_change")
  if fn ~= nil and type(fn) ~= "function" then
    check.argerror("on_change", 1, "expected a function(event, election, id, token) or nil, got "
      .. check.describe(fn))
  end
  self._on_change = fn
  return self
end

-- election:wait(timeout) -> true when a change was reported after the call | nil, msg, code
--   (ETIMEDOUT, ECLOSED). timeout: seconds (nil: forever).
function Election:wait(timeout)
  check.object(self, Election, "election", "wait")
  local ms = check.timeout("wait", 1, timeout)
  local seen = self._changes
  local deadline = ms >= 0 and core.now() + ms or nil
  while self._changes == seen and not self._closed and self.client.state ~= "CLOSED" do
    local left = -1
    if deadline then
      left = math.ceil(deadline - core.now())
      if left <= 0 then break end
    end
    watch.wait_signal(self._changed, left)
  end
  if self._changes ~= seen then return true end
  if self._closed or self.client.state == "CLOSED" then
    return nil, ("ECLOSED: election %s was closed while waiting for a change"):format(self.path), "ECLOSED"
  end
  return nil, ("ETIMEDOUT: no change of election %s within %g s"):format(self.path, timeout), "ETIMEDOUT"
end

-- election:participants() -> the participants' ids (node data), leader first | nil, msg, code.
-- A fresh read (one listing and a read per node), not the watched view.
function Election:participants()
  check.object(self, Election, "election", "participants")
  check.open(self.client, "participants")
  local names, msg, code = self.client:children(self.path)
  if not names then
    if code == "ZNONODE" then return {} end
    return nil, msg, code
  end
  local out = {}
  for _, name in ipairs(order(names)) do
    local data = self.client:get(self.path .. "/" .. name) -- nil if it went away meanwhile
    if data then out[#out + 1] = data end
  end
  return out
end

-- Stop watching (the armed watch is forgotten; no more reports). Idempotent.
function Election:close()
  check.object(self, Election, "election", "close")
  if self._closed then return true end
  self._closed = true
  self._on_change = nil
  local set = registry[self.client]
  if set then set[self] = nil end
  local rec = self._rec
  self._rec = nil
  if rec and self.client.state ~= "CLOSED" then watch.forget(self.client, rec) end
  watch.notify(self._changed)
  return true
end

function Election:__tostring()
  return ("zklock.election(%s%s)"):format(self.path, self._closed and ", closed" or "")
end

return M
