---@meta zklock.adapters.luv

---zklock inside a libuv loop (lua-luv): a uv poll handle on `client:fd()` and one uv timer
---re-armed from `client:next_timeout_ms()`. Only coroutines made by `zluv.spawn` suspend on a
---zklock wait; they are resumed from uv callbacks, never from inside `client:process()`.
---
---```lua
---local uv, zluv = require("luv"), require("zklock.adapters.luv")
---zluv.attach(client, uv)
---zluv.spawn(client, function() assert(client:mutex("/locks/a"):acquire(5)) ... end)
---uv.run()
---```
---@class zklock.adapters.luv
---@field _NAME string `"zklock.adapters.luv"`.
---@field TOKEN table The value a spawned coroutine yields while it waits on zklock (other yields are left alone).
local zluv = {}

---Install the adapter (`client:use`), start the poll handle and the timer. Both handles are
---closed with the client (or by `detach`).
---
---Errors: raises if `client` is not a zklock client or another luv module is already in use.
---@param client zklock.Client
---@param uv? table The luv module (default `require("luv")`).
---@param opts? zklock.adapters.luv.AttachOptions
---@return zklock.Client client
function zluv.attach(client, uv, opts) end

---Options of `zklock.adapters.luv.attach`.
---@class zklock.adapters.luv.AttachOptions
---@field on_error? fun(err: any, co?: thread) Called when a spawned coroutine raises, or `client:process()` raises in a uv callback (default: the error and its traceback go to stderr and the loop carries on).

---Stop and close the handles (the client stays open; coroutines already waiting are resumed when
---their events arrive, so something must drive the client: attach it again).
---@param client zklock.Client
function zluv.detach(client) end

---Run `fn(...)` in a new coroutine at once, until it first waits. Its errors go to the
---attachment's `on_error`.
---
---Errors: raises if `fn` is not a function or `client` is not attached.
---@param client zklock.Client? The attached client whose `on_error` applies (nil: the default handler).
---@param fn function
---@param ... any Arguments for `fn`.
---@return thread co
function zluv.spawn(client, fn, ...) end

---Suspend the calling spawned coroutine on a uv timer.
---
---Errors: raises outside a coroutine made by `spawn`, or for a negative or non-number duration.
---@param seconds number
function zluv.sleep(seconds) end

return zluv
