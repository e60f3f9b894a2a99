-- zklock.barrier: the double barrier, on the wire like Curator's DistributedDoubleBarrier.
--
-- Members are ephemeral nodes under the barrier path, each named by a random UUID. enter()
-- first watches <path>/ready; if it is missing it creates its member node and counts the
-- children: at member_qty or more it creates "ready" (everyone's watch fires), otherwise it
-- waits for "ready". leave() deletes the member nodes in Curator's order: a member that is not
-- the lowest name deletes its own node and waits for the lowest to go; the lowest waits for the
-- highest and deletes its node last, when it is the only one left. Whoever finds no members
-- left deletes "ready".
--
-- Unlike Curator (CURATOR-80, CURATOR-536), a member that gives up (timeout, error, session
-- loss) deletes its own node, so it neither counts for an enter nor holds up a leave.
local core = require("zklock.core")
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local Client = require("zklock.client").Client
local R = require("zklock.internal.recipe")

local M = {}

local Barrier = {}
Barrier.__index = Barrier
Barrier.__name = "zklock.double_barrier"
M.Barrier = Barrier

local READY = "ready"

-- A member's name: the core's random UUID (getrandom, as the lock nodes' names use), so the
-- host application's math.random is neither used nor reseeded.
local function uuid()
  local id, msg = core.uuid()
  if not id then check.raise("zklock: double_barrier: no member name: " .. tostring(msg)) end
  return id
end
M.uuid = uuid

local function b_check(self, fname)
  check.object(self, Barrier, "double_barrier", fname)
  check.open(self.client, fname)
end

-- ms left until deadline (nil: none) -> seconds for a wait (nil: forever)
local function left(deadline)
  if not deadline then return nil end
  return math.max(0, (deadline - core.now()) / 1000)
end

-- The options of a plain call made by an enter or leave with a timeout: its answer is waited
-- for no longer than the timeout leaves (else a silent server held enter(0.3) for the whole
-- op_timeout). enter(0)/leave(0) and no timeout: the client's op_timeout, as before.
local function within(c, deadline, timeout, opts)
  if not deadline or timeout == 0 then return opts end
  local rem = deadline - core.now()
  local op_ms = R.op_ms(c)
  if op_ms >= 0 and rem >= op_ms then return opts end
  opts = opts or {}
  opts.timeout = math.max(rem, 1) / 1000
  return opts
end

local function deadline_of(fname, timeout)
  local ms = check.timeout(fname, 1, timeout)
  if ms < 0 then return nil end
  return core.now() + ms
end

-- the session ended: its ephemeral nodes went with it
local GONE = { ZNONODE = true, ESESSION = true, ECLOSED = true, ZSESSIONEXPIRED = true }
-- a create or delete failed this way: the server may have applied it (its answer was lost:
-- zklock.outcome_unknown) and the session that owns the node lives on. UNKNOWN[name],
-- UNKNOWN_ST[number].
local UNKNOWN = setmetatable({}, { __index = function(_, code)
  return core.outcome_unknown(code) and not GONE[code]
end })
local UNKNOWN_ST = setmetatable({}, { __index = function(_, st)
  return core.outcome_unknown(st) and not GONE[E.name(st)]
end })

-- delete our own node, whatever happened (give-up paths). A delete that fails (a connection
-- loss) is handed to the client, which sends it again in the background while the session lives.
local function drop_own(self)
  if not self._node then return true end
  if self.client.state == "CLOSED" then -- closed while it waited: the node went with the session
    self._node = nil
    return true
  end
  local ok, _, code = self.client:delete(self._node)
  if not ok and not GONE[code] then R.discard(self.client, self._node) end
  self._node = nil
  return true
end

-- The coroutine of an enter or leave died while it waited (zklock.client's give-up records):
-- its node goes in the background, and the object is idle again.
local function forsake(self, rec)
  if self._waiting ~= rec then return end
  self._waiting = nil
  if self._node then R.discard(self.client, self._node) end
  -- in leave, as a leave that times out: "ready" goes too (left alone, it would let a later
  -- round's members through enter before they are member_qty)
  if self._state == "leaving" then R.discard(self.client, self.ready) end
  self._node = nil
  self._state = "idle"
end

-- Run method fn(self, ...) as a wait that a dying coroutine gives up (see forsake).
local function guarded(self, fn, ...)
  local c, own = self.client, self.own
  local rec
  rec = R.waiting(c, "double barrier", self.path, function() forsake(self, rec) end, function(st)
    if st == 0 or UNKNOWN_ST[st] then R.discard(c, own) end -- the member node its create made
  end)
  self._waiting = rec
  local ok, msg, code = fn(self, ...)
  R.done_waiting(c, rec)
  if self._waiting == rec then self._waiting = nil end
  return ok, msg, code
end

local function give_up(self, msg, code)
  drop_own(self)
  self._state = "idle"
  return nil, msg, code
end

local enter, leave

-- barrier:enter(timeout) -> true | nil, msg, code (ETIMEDOUT, ESESSION, ...)
--   timeout: seconds (nil: wait forever). On any failure this member's node is deleted, and so it
--   is when the calling coroutine dies while it waits (closed, killed by its host, collected).
function Barrier:enter(timeout)
  b_check(self, "enter")
  local deadline = deadline_of("enter", timeout)
  if self._state ~= "idle" then
    check.raise(("zklock: double_barrier:enter while %s (leave first)"):format(self._state))
  end
  self._state = "entering"
  return guarded(self, enter, timeout, deadline)
end

function enter(self, timeout, deadline)
  local c = self.client
  local stat, w, code = c:exists(self.ready, within(c, deadline, timeout, { watch = true }))
  if stat == nil then return give_up(self, w, code) end
  local node, msg
  node, msg, code = R.create(c, self.own, "", within(c, deadline, timeout, { ephemeral = true, parents = true }),
    self._waiting)
  if not node then
    if UNKNOWN[code] then
      self._node = self.own -- it may be there: delete it
      msg = msg .. " (this member did not enter: its node, if the server made it, is deleted)"
    end
    return give_up(self, msg, code)
  end
  self._node = node
  if not stat then
    local kids
    kids, msg, code = c:children(self.path, within(c, deadline, timeout))
    if not kids then return give_up(self, msg, code) end
    if #kids >= self.member_qty then
      local ok
      ok, msg, code = c:create(self.ready, "", within(c, deadline, timeout))
      if not ok and UNKNOWN[code] then
        -- its answer was lost: if "ready" is there the others are through, and so is this member
        -- (giving up would leave "ready" behind for a barrier this member never entered)
        local there = c:exists(self.ready)
        if there then ok, code = true, nil end
      end
      if not ok and code ~= "ZNODEEXISTS" then return give_up(self, msg, code) end
    else
      local fired
      fired, msg, code = w:wait(left(deadline))
      if not fired then
        if code == "ETIMEDOUT" then
          msg = E.message("ETIMEDOUT", ("double barrier %s: fewer than %d members arrived within %g s (this"
            .. " member's node was removed)"):format(check.short(self.path), self.member_qty, timeout))
        end
        return give_up(self, msg, code)
      end
    end
  end
  self._state = "entered"
  return true
end

local function filter_sort(kids)
  local out = {}
  for _, k in ipairs(kids) do
    if k ~= READY then out[#out + 1] = k end
  end
  table.sort(out) -- Java's String.compareTo: UTF-16 order; the names are ASCII (UUIDs)
  return out
end

-- barrier:leave(timeout) -> true | nil, msg, code
--   Waits until every member has left (Curator's order, see above). On timeout or error this
--   member's node is deleted (if it is still there) and "ready" too, as Curator does on timeout.
--   A coroutine that dies while it waits here takes its node with it too.
function Barrier:leave(timeout)
  b_check(self, "leave")
  local deadline = deadline_of("leave", timeout)
  if self._state ~= "entered" then
    check.raise(("zklock: double_barrier:leave while %s (enter first)"):format(self._state))
  end
  self._state = "leaving"
  return guarded(self, leave, timeout, deadline)
end

function leave(self, timeout, deadline)
  local c = self.client
  local should_exist = true
  local result, rmsg, rcode = true, nil, nil
  for _ = 1, 1e9 do
    local kids, msg, code = c:children(self.path, within(c, deadline, timeout))
    if not kids then
      if code ~= "ZNONODE" then return give_up(self, msg, code) end
      kids = {}
    end
    kids = filter_sort(kids)
    if #kids == 0 then break end
    local mine
    for i, k in ipairs(kids) do
      if k == self.id then mine = i end
    end
    if not mine and should_exist then
      self._node = nil
      return give_up(self, E.message("ELOST", ("double barrier %s: this member's node is gone (its session"
        .. " ended)"):format(check.short(self.path))), "ELOST")
    end
    if #kids == 1 then
      if should_exist and kids[1] ~= self.id then
        return give_up(self, E.message("ELOST", ("double barrier %s: the last member %s is not this one")
          :format(check.short(self.path), kids[1])), "ELOST")
      end
      if should_exist then
        local ok
        ok, msg, code = c:delete(self._node)
        if not ok and code ~= "ZNONODE" then return give_up(self, msg, code) end
        self._node = nil
      end
      break
    end
    local stat, w
    if mine == 1 then -- the lowest: wait for the highest to go
      stat, w, code = c:exists(self._base .. "/" .. kids[#kids], within(c, deadline, timeout, { watch = true }))
      if stat == nil then return give_up(self, w, code) end
    else -- delete our node, wait for the lowest to go
      stat, w, code = c:exists(self._base .. "/" .. kids[1], within(c, deadline, timeout, { watch = true }))
      if stat == nil then return give_up(self, w, code) end
      if should_exist then
        local ok
        ok, msg, code = c:delete(self._node)
        if not ok and code ~= "ZNONODE" then return give_up(self, msg, code) end
        self._node = nil
        should_exist = false
      end
    end
    if stat then
      local rem = left(deadline)
      if rem and rem <= 0 then
        result, rmsg, rcode = E.fail("ETIMEDOUT", ("double barrier %s: %d member(s) did not leave within %g s"
          .. " (this member's node was removed)"):format(check.short(self.path), #kids - (should_exist and 1 or 0),
          timeout))
        break
      end
      local fired
      fired, msg, code = w:wait(rem)
      if not fired and code ~= "ETIMEDOUT" then return give_up(self, msg, code) end
    end
  end
  if not result then drop_own(self) end
  local ok, msg, code = c:delete(self.ready)
  if not ok and code ~= "ZNONODE" and result then
    -- the ready node stays for another member to remove; leaving itself is done
    R.log(c, "warn", ("double barrier %s: could not delete %s: %s")
      :format(self.path, self.ready, msg))
  end
  self._state = "idle"
  if not result then return nil, rmsg, rcode end
  return true
end

-- barrier:node() -> this member's node path while entered (or entering), else nil
function Barrier:node()
  check.object(self, Barrier, "double_barrier", "node")
  return self._node
end

function Barrier:__tostring()
  return ("zklock.double_barrier(%s, %d members, %s)"):format(self.path, self.member_qty, self._state)
end

-- client:double_barrier(path, member_qty) -> barrier (Curator DistributedDoubleBarrier)
function Client:double_barrier(path, member_qty)
  check.open(self, "double_barrier")
  if type(path) ~= "string" then
    check.argerror("double_barrier", 1, "path: expected a string like \"/barriers/name\", got " .. check.describe(path))
  end
  local why = core.path_error(path)
  if why then check.argerror("double_barrier", 1, ("path %s, got %s"):format(why, check.describe(path))) end
  if type(member_qty) ~= "number" or member_qty ~= member_qty or member_qty < 1 or member_qty > 2147483647
     or math.floor(member_qty) ~= member_qty then
    check.argerror("double_barrier", 2, "member_qty: expected an integer >= 1, got " .. check.describe(member_qty))
  end
  local id = uuid()
  local base = path == "/" and "" or path
  return setmetatable({ client = self, path = path, member_qty = member_qty, id = id, _base = base,
                        own = base .. "/" .. id, ready = base .. "/" .. READY, _state = "idle" }, Barrier)
end

return M
