---@meta zklock.adapters.openresty

---zklock in nginx workers (lua-nginx-module + lua-resty-core; zklock.core must be the LuaJIT
---build). One client per worker, made in `init_worker_by_lua*`, driven by a timer pump;
---requests (rewrite, access, content) and timers wait on `ngx.semaphore`. Acquire and release
---in the same handler and set `lua_thread_cache_max_entries 0;`. Loading the module outside
---nginx raises.
---@class zklock.adapters.openresty
---@field _NAME string `"zklock.adapters.openresty"`.
local zngx = {}

---Make this worker's client (`zklock.connect` with `wait = false`, so the worker never waits
---for the session) and start its pump. Call it in `init_worker_by_lua*`.
---
---Errors: `nil, "EEXIST: ...", "EEXIST"` if this worker already has a client; `nil, msg, code`
---from `zklock.connect`.
---@param hosts string As for `zklock.connect`.
---@param connect_opts? zklock.ConnectOptions `wait` is always false here; never set `keepalive`.
---@param pump_opts? zklock.adapters.openresty.PumpOptions
---@return zklock.Client? client
---@return string? msg
---@return string? code
function zngx.start(hosts, connect_opts, pump_opts) end

---Install the adapter and start the pump for a client you made yourself.
---
---Errors: raises if `client` is not a zklock client or the pump timer cannot start.
---@param client zklock.Client
---@param pump_opts? zklock.adapters.openresty.PumpOptions
---@return zklock.Client client
function zngx.attach(client, pump_opts) end

---Options of the pump (`start`, `attach`).
---@class zklock.adapters.openresty.PumpOptions
---@field busy_interval? number Seconds between pumps while `client:pending() > 0` (default 0.001; nginx cannot watch the fd).
---@field idle_interval? number Longest pump period when idle, capped by `next_timeout_ms()` (default 0.1); a new operation wakes the pump at once.
---@field exit_grace? number On worker exit, seconds to keep serving in-flight requests before closing the session (default 10).

---This worker's client (from `start`), or nil.
---@return zklock.Client?
function zngx.client() end

---Close this worker's client now (its pump ends).
function zngx.stop() end

return zngx
