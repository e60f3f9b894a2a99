-- zklock.revoke: client:revoke(node), the asking side of Curator's cooperative revocation.
--
-- It writes "__REVOKE__" into a holder's lock (or lease) node, as Curator's
-- Revoker.attemptRevoke does; a holder that listens (zklock's on_revoke, Curator's
-- makeRevocable) is told and decides what to do. Any client may ask, for any recipe whose node
-- it can name (mutex, read-write lock sides, semaphore leases and the semaphore mutex).
local check = require("zklock.internal.args")
local E = require("zklock.internal.errors")
local hold = require("zklock.internal.hold")
local Client = require("zklock.client").Client

local REVOKE = hold.REVOKE

local OPTIONS = { timeout = function() return true end }

-- client:revoke(node, { timeout = s }) -> true | nil, msg, code
--   node: the full path of the holder's node (lock:node(), lease:node(), participants()).
--   ZNONODE: the node is gone (released, or never was); EINVAL: the node is not ephemeral, so
--   not a lock or lease node (its data is left alone).
function Client:revoke(node, opts)
  check.open(self, "revoke")
  if type(node) ~= "string" or node:sub(1, 1) ~= "/" then
    check.argerror("revoke", 1, "node: expected the full path of a holder's node (e.g. from lock:node() or "
      .. "participants()), got " .. check.describe(node))
  end
  if opts ~= nil and type(opts) ~= "table" then
    check.argerror("revoke", 2, "options: expected a table such as { timeout = 5 }, got " .. check.describe(opts))
  end
  opts = check.options("revoke", 2, opts, OPTIONS)
  local stat, msg, code = self:exists(node, opts)
  if stat == false then
    return E.fail("ZNONODE", ("revoke %s: no such node (its holder released it, or it is not a holder's node)")
      :format(check.short(node)))
  end
  if not stat then return nil, msg, code end
  local owner = stat.ephemeral_owner -- the session id in hex, all zeros for a persistent node
  if owner == 0 or (type(owner) == "string" and owner:match("^0*$")) then
    return E.fail("EINVAL", ("revoke %s: not a lock or lease node (it is not ephemeral); pass a holder's node, "
      .. "e.g. from participants()"):format(check.short(node)))
  end
  -- the version read above: a node deleted and made again meanwhile is left alone
  local ok
  ok, msg, code = self:set(node, REVOKE, stat.version, opts)
  if ok then return true end
  if code == "ZNONODE" then
    return E.fail("ZNONODE", ("revoke %s: the node went away (its holder released it)"):format(check.short(node)))
  end
  if code == "ZBADVERSION" then -- its data changed meanwhile (another request): ask again
    ok, msg, code = self:set(node, REVOKE, -1, opts)
    if ok then return true end
  end
  return nil, msg, code
end

return { REVOKE = REVOKE }
