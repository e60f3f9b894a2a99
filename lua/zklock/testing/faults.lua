-- zklock.testing.faults: faults injected from outside a client. (The server-side faults are
-- Server methods: kill, pause/resume, restart.)
--   expire(client [, hosts [, timeout_ms]])
local M = {}

-- Expire a live client's session at the server: a second handle connects with the same
-- session id and password, then closes (test catalogue §2.2). The victim sees
-- SUSPENDED (a CONNECTING/CONNECTED flap) and then EXPIRED, typically within 100 ms.
function M.expire(client, hosts, timeout_ms)
  if client == nil then error("zklock.testing.expire: expected a zklock client as argument 1", 2) end
  local ok, core = pcall(require, "zklock.core")
  if not ok or type(core) ~= "table" or type(core.expire_session) ~= "function" then
    error("zklock.testing.expire: needs the C module zklock.core with expire_session() "
      .. "(build it and put zklock/core.so on package.cpath)"
      .. (ok and "" or (": " .. tostring(core))), 2)
  end
  if hosts == nil then
    local h = client.hosts
    if type(h) == "function" then h = h(client) end
    hosts = h
  end
  if type(hosts) ~= "string" or hosts == "" then
    error("zklock.testing.expire: cannot tell the client's hosts; pass them as argument 2", 2)
  end
  if type(client.session) ~= "function" then
    error("zklock.testing.expire: argument 1 has no session() method (expected a zklock client)", 2)
  end
  local sid, password = client:session()
  if sid == nil then return nil, "expire: client has no session: " .. tostring(password) end
  if type(sid) == "number" then sid = ("%016x"):format(sid) end   -- core takes 16 hex digits
  return core.expire_session(hosts, sid, password, timeout_ms or 5000)
end

return M
