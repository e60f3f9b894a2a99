---@meta zklock.adapters.cqueues

---zklock inside a cqueues event loop (lua-cqueues). Coroutines run directly by the controller
---(`cq:wrap`) suspend on a condition variable while they wait; anything else blocks as usual.
---
---```lua
---local zcq = require("zklock.adapters.cqueues")
---zcq.attach(client, cq)
---cq:wrap(function() assert(client:mutex("/locks/a"):acquire(5)) ... end)
---assert(cq:loop())
---```
---@class zklock.adapters.cqueues
---@field _NAME string `"zklock.adapters.cqueues"`.
local zcq = {}

---Install the adapter (`client:use`) and wrap a pump coroutine into `cq`: it waits with
---`cqueues.poll(client)` and runs `client:process()`, until the client is closed. Attaching
---again replaces the previous attachment.
---
---Errors: raises if `client` is not a zklock client or `cq` not a cqueues controller.
---@param client zklock.Client
---@param cq table The cqueues controller.
---@param opts? zklock.adapters.cqueues.AttachOptions
---@return zklock.Client client
function zcq.attach(client, cq, opts) end

---Options of `zklock.adapters.cqueues.attach`.
---@class zklock.adapters.cqueues.AttachOptions
---@field on_error? fun(err: any) Called when `client:process()` raises (default: the error ends the pump and propagates from `cq:loop()`).

---End the pump (the client stays open). Coroutines already waiting keep waiting until their
---events arrive, so something must drive the client (attach it again, or call
---`client:process()`); new waits block.
---@param client zklock.Client
function zcq.detach(client) end

return zcq
