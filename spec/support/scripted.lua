-- spec/support/scripted.lua: the vocabulary of the scripted Lua specs (spec/fast/scripted/).
--
-- The Lua library runs on zklock.scripted (tests/script/l_scripted.c, CMake target
-- zklock_scripted): zklock.core on the fake ZooKeeper of tests/script, whose clock is the fake
-- one. Nothing is answered unless the spec answers it, so a spec reads as the conversation:
--
--   local scripted = require("support.scripted")
--   local s = scripted.new()                      -- fresh fake, a client connected to it
--   local q = s.client:queue("/q")
--   local t = s:spawn(function() return q:put("x") end)  -- runs until it waits
--   s:expect("create", "/q/"):ok(7)               -- the next request; answer it; pump
--   assert.equal("qn-0000000007", t:returned())  -- what the call returned (t:failed(): msg, code)
--   s:close()
--
-- Requests are tables (fields of fake.req: kind, path, data, ephemeral, sequential, version,
-- watch, status, rc, created, ops) with methods: ok(...) answers with success (create: ok(seq,
-- czxid, owner); get: ok(data, czxid); children: ok({ names }); exists/set: ok(czxid, owner);
-- delete, remove_watches: ok(); multi: ok(seq) every op ZOK), fail("ZNONODE"), multi(rcs, seq),
-- serve() (from the fake's znode tree), apply() (the tree changes, no answer is sent), drop()
-- (the answer is lost: the next disconnect fails it). Each answer pumps the client.
--
-- Heartbeats: a client may send exists("/") when it has been idle or the link came back (the core's
-- liveness check); expect() and pending() skip them, advance() and reconnect() answer them,
-- s:heartbeats() answers the pending ones.
local M = {}

local unpack_ = table.unpack or unpack
local pack_ = table.pack or function(...) return { n = select("#", ...), ... } end

-- zklock on the scripted core, loaded once per spec file (busted restores package.loaded after
-- each file, so other files keep the real module).
local zk, core
local function load()
  if zk then return zk, core end
  for name in pairs(package.loaded) do
    if (name == "zklock" or name:match("^zklock%.")) and name ~= "zklock.scripted" then
      package.loaded[name] = nil
    end
  end
  core = require("zklock.scripted")
  package.loaded["zklock.core"] = core
  zk = require("zklock")
  return zk, core
end

local Req = {}
Req.__index = Req

local S = {}
S.__index = S

local function is_heartbeat(r)
  return r.kind == "exists" and r.path == "/"
end

local function req(s, i)
  local r = s.fake.req(i)
  r.s = s
  return setmetatable(r, Req)
end

function Req:refresh()
  local fresh = self.s.fake.req(self.index)
  for k, v in pairs(fresh) do self[k] = v end
  return self
end

local function answered(self, ok, what)
  if not ok then
    error(("request #%d (%s %s) was answered already: %s"):format(self.index, self.kind, self.path, what), 3)
  end
  self.s:pump()
  return self:refresh()
end

function Req:ok(a, b, c)
  local f = self.s.fake
  local k = self.kind
  if k == "create" then return answered(self, f.create_ok(self.index, a or 0, b, c), "ok")
  elseif k == "get" then return answered(self, f.data_ok(self.index, a or "", b), "ok")
  elseif k == "children" then return answered(self, f.children_ok(self.index, a or {}), "ok")
  elseif k == "exists" or k == "set" then return answered(self, f.stat_ok(self.index, a, b), "ok")
  elseif k == "multi" then
    local rcs = {}
    for i = 1, #(self.ops or {}) do rcs[i] = "ZOK" end
    return answered(self, f.multi_answer(self.index, rcs, a or 0), "ok")
  end
  return answered(self, f.reply(self.index, "ZOK"), "ok")
end

-- the stat version the next answer carries (get, exists, set): r:stat_version(3):ok(...)
function Req:stat_version(v)
  self.s.fake.stat_version(self.index, v)
  return self
end

function Req:fail(rc)
  assert(type(rc) == "string" and rc ~= "ZOK", "fail: expected a ZooKeeper error name such as 'ZNONODE'")
  return answered(self, self.s.fake.reply(self.index, rc), rc)
end

-- a multi's answer, one code per op
function Req:multi(rcs, seq)
  return answered(self, self.s.fake.multi_answer(self.index, rcs, seq or 0), "multi")
end

function Req:serve() return answered(self, self.s.fake.serve(self.index), "serve") end

-- the server applies the request to its tree; no answer is sent (follow with drop/disconnect)
function Req:apply()
  local rc, name = self.s.fake.apply(self.index)
  return rc, name
end

function Req:drop()
  assert(self.s.fake.drop(self.index), "drop: the request was answered already")
  return self
end

function Req:__tostring()
  return ("#%d %s %s"):format(self.index, self.kind, self.path)
end

---------------------------------------------------------------- the scripted client

-- scripted.new(opts) -> s: a fresh fake and a connected client. opts: session_timeout (s, 10),
-- identity ("me"), connect = false (leave the client CONNECTING), any other zklock.connect option.
-- The client's log lines (level error and worse unless opts.log_level) collect in s.log.
function M.new(opts)
  opts = opts or {}
  local zklock, c = load()
  local fake = c.fake
  fake.reset()
  local log = {}
  local o = { wait = false, session_timeout = opts.session_timeout or 10, identity = opts.identity or "me",
              log_level = opts.log_level or "error", log = function(line) log[#log + 1] = line end }
  for k, v in pairs(opts) do
    if k ~= "connect" then o[k] = v end
  end
  local client = assert(zklock.connect("fake:2181", o))
  local s = setmetatable({ zklock = zklock, core = c, fake = fake, client = client, tasks = {}, log = log }, S)
  if opts.connect ~= false then s:reconnect() end
  return s
end

-- Process until the fake has nothing queued and no spawned coroutine is ready (bounded).
function S:pump()
  local client, fake = self.client, self.fake
  for _ = 1, 10000 do
    if client.state == "CLOSED" then return self end
    client:process()
    if fake.queued() == 0 and client:next_timeout_ms() ~= 0 then return self end
  end
  error("scripted: the client did not settle after 10000 process() calls", 2)
end

-- A task: fn(...) in a coroutine spawned on the client, run until it waits.
local Task = {}
Task.__index = Task
function Task:returned()
  if not self.done and coroutine.status(self.co) == "dead" then
    error("the task raised: " .. table.concat(self.s.log, "\n"), 2)
  end
  if not self.done then error("the task has not finished", 2) end
  if not self.results[1] then error("the task raised: " .. tostring(self.results[2]), 2) end
  return unpack_(self.results, 2, self.results.n)
end
-- -> the (nil, msg, code) of a call that failed the usual way
function Task:failed()
  local ok, msg, code = self:returned()
  if ok ~= nil and ok ~= false then error("the task succeeded: " .. tostring(ok), 2) end
  return msg, code
end

-- Lua 5.1 cannot yield across pcall (LuaJIT and 5.2+ can): there a task that raises ends its
-- coroutine, and the error is in the client's log (s.log)
local PCALL_YIELDS = _VERSION ~= "Lua 5.1" or jit ~= nil

function S:spawn(fn, ...)
  local t = setmetatable({ done = false, s = self }, Task)
  local n, args = select("#", ...), { ... }
  t.co = self.client:spawn(function()
    if PCALL_YIELDS then
      t.results = pack_(pcall(fn, unpack_(args, 1, n)))
    else
      t.results = pack_(true, fn(unpack_(args, 1, n)))
    end
    t.done = true
  end)
  self.tasks[#self.tasks + 1] = t
  self:pump()
  return t
end

local function matches(r, kind, path)
  if r.kind ~= kind then return false end
  if path == nil then return true end
  return r.path:sub(1, #path) == path
end

-- The next request the spec has not looked at (heartbeats skipped): must be `kind` with a path
-- starting with `path` (nil: any).
function S:expect(kind, path)
  local fake = self.fake
  while true do
    local i = fake.next()
    if not i then
      error(("expected a %s request (%s), none was sent; log:\n%s"):format(kind, path or "any path", fake.dump()), 2)
    end
    local r = req(self, i)
    if not (self.skip_heartbeats ~= false and is_heartbeat(r)) then
      if not matches(r, kind, path) then
        error(("expected %s %s..., got %s; log:\n%s"):format(kind, path or "", tostring(r), fake.dump()), 2)
      end
      return r
    end
  end
end

-- Take every request not looked at yet (after serve_all, say): expect() starts after them.
function S:skip()
  while self.fake.next() do end
  return self
end

-- Nothing more was sent (heartbeats aside).
function S:expect_none()
  local fake = self.fake
  while true do
    local i = fake.next()
    if not i then return end
    local r = req(self, i)
    if not (self.skip_heartbeats ~= false and is_heartbeat(r)) then
      error(("expected no more requests, got %s; log:\n%s"):format(tostring(r), fake.dump()), 2)
    end
  end
end

-- Unanswered requests (kind and path prefix optional), oldest first, heartbeats skipped.
function S:pending(kind, path)
  local out = {}
  for i = 0, self.fake.nreqs() - 1 do
    local r = req(self, i)
    if r.status == "pending" and not is_heartbeat(r) and (kind == nil or matches(r, kind, path)) then
      out[#out + 1] = r
    end
  end
  return out
end

-- Answer every pending heartbeat (exists "/"); -> how many.
function S:heartbeats()
  local n = 0
  for i = 0, self.fake.nreqs() - 1 do
    local r = self.fake.req(i)
    if r.status == "pending" and is_heartbeat(r) then
      self.fake.stat_ok(i, 0, 0)
      n = n + 1
    end
  end
  if n > 0 then self:pump() end
  return n
end

-- Advance the fake clock by ms, in steps of at most a second, pumping (and answering heartbeats)
-- after each: the core never sees a whole session timeout pass without a process().
function S:advance(ms)
  while ms > 0 do
    local step = math.min(ms, 1000)
    self.fake.advance(step)
    ms = ms - step
    self:pump()
    self:heartbeats()
  end
  return self
end

-- Answer every pending request from the fake's znode tree until none is left (bounded).
function S:serve_all()
  for _ = 1, 1000 do
    self:pump()
    if self.fake.serve_all() == 0 then return self end
  end
  error("scripted: serve_all did not settle", 2)
end

-- The session: connection loss (unanswered requests fail ZCONNECTIONLOSS), reconnection to the
-- same session, expiry (a new session once reconnected).
function S:disconnect() self.fake.disconnect(); return self:pump() end
function S:reconnect()
  self.fake.connect()
  self:pump()
  -- the same session back: the core may stay SUSPENDED until the server answers a request sent
  -- since (its heartbeat)
  self:heartbeats()
  if self.client.state ~= "CONNECTED" then
    error("scripted: the client is " .. self.client.state .. " after the fake connected", 2)
  end
  return self
end
function S:expire() self.fake.expire(); return self:pump() end

-- Fire a watch event ("deleted", "changed", "child", "created") on path; -> watchers triggered.
function S:fire(kind, path)
  local n = self.fake.fire(kind, path)
  self:pump()
  return n
end

-- Close the client (the link is dropped first when requests are unanswered, so close does not
-- wait for their answers), then forget the fake's state (freed now: the module may be unloaded
-- before the process ends, and LeakSanitizer would count what its globals held).
function S:close()
  if self.client.state ~= "CLOSED" then
    if self.fake.unanswered() > 0 then self.fake.drop_link() end
    self.client:close()
  end
  self.fake.reset()
end

M.Req, M.S, M.Task = Req, S, Task
return M
