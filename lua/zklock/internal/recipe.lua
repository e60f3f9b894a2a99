-- zklock.internal.recipe: the recipe interface, what zklock's recipe modules use of a client.
-- Not for applications; see docs/design.md, "Module boundaries".
--
-- This is the one module that touches a client's private fields on the recipes' behalf
-- (spec/fast/boundaries_spec.lua allows it and no other). It requires no zklock module, so
-- any module may require it without making a cycle with zklock.client.
--
-- Per-client state of a recipe module goes in a slot, never in a field of its own on the client:
--   recipe.slot(client, key[, make]) -> the client's table for key, made on first use (by
--     make() when given, else {}). One key per module, named after it ("watch", "counters", ...).
--   recipe.peek(client, key) -> that table, or nil when nothing made it yet (never makes one).
-- The client drops its slots with itself; a module that must act on close registers nothing:
-- the client calls the module that owns a slot (zklock.internal.watch today) from Client:close.
--
-- Typed helpers over the core: a recipe module starts core work only through these (and the
-- grant helpers of zklock.internal.hold); spec/fast/boundaries_spec.lua fails when any other
-- module gets at the raw core handle.
--   recipe.op(client, optype, path, data, flags, version, acl_id, ms[, watch]) -> core op id
--     | nil, msg, code: start a plain op (its waiter is the caller's business).
--   recipe.result(client, id) -> the result table of a finished op.
--   recipe.abandon(client, id): forget op id (no event comes for it); nothing on a closed client.
--   recipe.txn(client, ops, ms) -> core op id | nil, msg, code: start a multi-op transaction
--     (ops in the core's { optype, path, data, flags, version } form; ms 0: no timeout).
--   recipe.session_decimal(client) -> the session id as Java prints a long ("-123..."), or nil
--     while the client has no session.
-- recipe.core(client), the raw core handle, is for zklock.internal.hold alone (it owns the grants:
-- acquire, downgrade, semaphore, multi, release, info); the boundary check enforces that, with
-- no exemption.
local recipe = {}

function recipe.slot(self, key, make)
  local slots = self._slots
  local t = slots[key]
  if t == nil then
    t = make and make() or {}
    slots[key] = t
  end
  return t
end

function recipe.peek(self, key) return self._slots[key] end

-- recipe.on_session(client, fn): a recipe's own session hook, fn(state, client), run before the
-- user's handler; added for the client's life (the user's client:on_session replaces only its own)
function recipe.on_session(self, fn) local hs = self._session_handlers; hs[#hs + 1] = fn end

function recipe.op(self, optype, path, data, flags, version, acl_id, ms, watch)
  return self._c:op(optype, path, data, flags, version, acl_id, ms, watch)
end
function recipe.result(self, id) return self._c:result(id) end
function recipe.abandon(self, id)
  if self.state ~= "CLOSED" then pcall(self._c.abandon, self._c, id) end
end

function recipe.txn(self, ops, ms) return self._c:txn(ops, ms) end
function recipe.session_decimal(self) return self._c:session_id_decimal() end

function recipe.core(self) return self._c end -- zklock.internal.hold only (see the header)
function recipe.refresh(self) return self:_refresh() end
function recipe.waiter(self, id, grant) return self:_waiter(id, grant) end
function recipe.await(self, w, adapter, parked) return self:_await(w, adapter, parked) end
function recipe.owner(self) return self:_owner() end -- the adapter owning the caller, or nil
-- Called once by zklock.client with its class: where the interface adds nothing the client's own
-- methods stand in for the three wrappers above (a Lua call less each, on every acquire).
function recipe.bind(Client)
  recipe.refresh, recipe.waiter, recipe.await = Client._refresh, Client._waiter, Client._await
  recipe.owner = Client._owner
end
function recipe.poll(self) return self:_pump(0) end
function recipe.track(self, id, hold) self._holds[id] = hold end -- hold nil: untrack
function recipe.log(self, level, msg) return self:_emit(level, msg) end
function recipe.explain(self, status) return self:_explain(status) end
function recipe.reap_soon(self) self._next_reap = 0 end
function recipe.op_ms(self) return self._op_ms end       -- plain calls' default timeout (-1: none)
function recipe.max_data(self) return self._max_data end -- largest request payload allowed
function recipe.max_watch_bytes(self) return self._max_watch_bytes end -- the caches' watch budget
-- the bytes one watch of path adds to the SetWatches message the ZooKeeper client sends on a
-- reconnection: a string's length (4) and the path as the server knows it (with the chroot)
function recipe.watch_cost(self, path) return 4 + #self._chroot + #path end
function recipe.metrics(self) return self._metrics end -- the reporter (zklock.metrics), or nil
function recipe.acl_id(self, v) return self:_acl_id(v) end -- the core's id for an acl option

-- Give-up records: a recipe made of plain calls (double barrier, zookeeper_lock) that creates a
-- node and then waits registers the wait, so that the coroutine dying meanwhile (closed with
-- coroutine.close, killed by its host, collected) is a give-up like a timeout: the reaper of dead
-- owners (Client:reap_dead_owners, run from every pump, from an adapter's own reaper, and at the
-- next pump after a waiter is abandoned) calls drop() and abandons the record's create in flight.
--   recipe.waiting(client, kind, path, drop, orphan) -> record, or nil when the caller is the main
--     thread (it cannot die while it waits). orphan(status, result): what to do when the
--     record's create (recipe.create) completes after its coroutine went away.
--   recipe.done_waiting(client, record): the wait ended (whatever the outcome): forget it.
--   recipe.create(client, path, data, opts, record): client:create, its waiter known to record;
--     -> created path, result (its czxid, ...) | nil, msg, code.
--   recipe.discard(client, path): delete path in the background (Client:_discard).
function recipe.waiting(self, kind, path, drop, orphan)
  local co, main = coroutine.running()
  if not co or main then return nil end
  local rec = { kind = kind, path = path, drop = drop, orphan = orphan,
                owner_ref = setmetatable({ co }, { __mode = "v" }) }
  self._giveups[rec] = true
  return rec
end
function recipe.done_waiting(self, rec)
  if rec then self._giveups[rec] = nil end
end
-- A container a call made for its own wait (a queue's node made by a take on a missing queue) is
-- reaped by the server only once it had a child: the call deletes it when it ends without one,
-- and registers it meanwhile, so that client:close deletes it before the session ends.
--   recipe.made(client, path) -> token; recipe.unmade(client, token): the call ended.
function recipe.made(self, path)
  local tok = { path }
  self._made[tok] = path
  return tok
end
function recipe.unmade(self, tok)
  if tok then self._made[tok] = nil end
end
function recipe.create(self, path, data, opts, rec) return self:_create(path, data, opts, rec) end
function recipe.discard(self, path) return self:_discard(path) end
--   recipe.orphan(client, id, fn): fn(status, result) when core op id is done (nobody waits for it).
--   recipe.background(client, optype, path, data, flags, version, fn): start a core op nobody
--     waits for, fn(status, result) when it is done (Client:_background). -> id | nil, msg, code
function recipe.orphan(self, id, fn) return self:_orphan(id, fn) end
function recipe.background(self, optype, path, data, flags, version, fn)
  return self:_background(optype, path, data, flags, version, fn)
end

return recipe
