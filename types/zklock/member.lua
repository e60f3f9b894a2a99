---@meta zklock.member

---Options of `client:member`.
---@class zklock.MemberOptions
---@field protected? boolean Name the node `_c_<uuid>-<name>` (Curator's protected names, one uuid per member): after a create whose answer was lost, the member finds its own node by that uuid instead of making a second one.
---@field sequential? boolean Append the server's 10-digit sequence number at the first creation; later creations reuse that name (as Curator's `PersistentNode` does). Without `protected`, a first create whose answer was lost may leave a second node until that session ends.
---@field acl? zklock.ACL ACL of the node (and of the parents made), default `"open"`.

---What a member did (`member:stats()`).
---@class zklock.MemberStats
---@field creates integer Nodes made (the first, and every re-creation).
---@field writes integer Data writes sent (`member:set`, and after a create that found the node there).

---An ephemeral node that stays (`client:member(path, data, opts)`; `zklock.type(m)` is
---`"member"`), on the wire Curator's `PersistentNode` in its ephemeral modes (and `GroupMember`,
---which is one at `<group>/<member id>`). An exists watch on the node tells when it is deleted:
---it is then made again at once, at the name it got first. After every reconnection (the same
---session or a new one) it is created again: on a new session this makes it (the old session
---took the old one); on the same session the create meets `ZNODEEXISTS` and the member writes
---its data to the node instead (the data may have changed while an answer was lost). Everything
---runs in the background while the client is pumped.
---@class zklock.Member
---@field client zklock.Client The client it runs on.
---@field path string The path it was made with (for `protected`/`sequential`, the name the generated one is made from).
local member = {}

---The node's full path; nil before its first creation.
---@return string?
function member:node() end

---The member's data (what it writes to its node).
---@return string
function member:data() end

---Change the data: kept, and written to the node in the background (and to every node made
---again later). `member:await` tells when it is in.
---
---Errors: raises on data that is not a string or too large, or a closed member.
---@param data string
---@return zklock.Member self
function member:set(data) end

---Whether, as far as the member knows, its node exists and holds its latest data (false while
---disconnected, or while a create or write is out).
---@return boolean
function member:is_current() end

---Wait until the node is made and holds the latest data (`is_current`): suspends a coroutine
---the client's scheduler or adapter owns, otherwise blocks while pumping the client.
---
---Errors: `nil, msg, code`: `ETIMEDOUT`; `ECLOSED` (the member or its client closed); the
---server's refusal of the create (`ZNOAUTH`, `ZINVALIDACL`, ...: the member then stops trying
---until the next reconnection). Raises on a bad timeout.
---@param timeout? number Seconds (nil: no limit).
---@return true|nil ok
---@return string? msg
---@return string? code
function member:await(timeout) end

---Set the handler: `fn(event, member, path)` for `"created"` (the node made: the first time and
---every time again), `"deleted"` (the node found deleted; being made again) and `"failed"`
---(path: the message; the server refused the create). It runs from the client's event dispatch
---and must not wait; an error in it is logged. Replaces the handler; `nil` removes it.
---@param fn? fun(event: "created"|"deleted"|"failed", member: zklock.Member, path: string)
---@return zklock.Member self
function member:on_change(fn) end

---Counts of what the member did.
---@return zklock.MemberStats
function member:stats() end

---Leave: stop, and delete the node in the background (retried while the session lives; a
---session that ends takes it anyway). A second close does nothing; `set` after it raises.
---@return true
function member:close() end

---Options of `client:group`.
---@class zklock.GroupOptions
---@field max_members? integer At most this many members (default: the cache's `max_nodes` bound, 100000); one more makes the group stop (`"failed"`; reads return `ERANGE`), as a cache's `max_nodes` does.

---The members of a group and their data (`client:group(path, opts)`; `zklock.type(g)` is
---`"group"`), kept by a cache of depth 1 (`client:cache`): a member's id is its node's name (the
---last path element, as Curator's `GroupMember` names it; for protected or sequential members
---the whole generated name). A member whose node is deleted and made again (its session ended
---and it came back) is seen to leave and join again, provided the new node stayed longer than a
---round trip (a cache may miss a node that came and went faster).
---@class zklock.Group
---@field client zklock.Client The client it runs on.
---@field path string The group node.
local group = {}

---The members as last seen: `{ [id] = data }` (empty while the group node does not exist),
---from memory.
---
---Errors: `nil, msg, "ERANGE"` after the group stopped at `max_members`. Raises on a closed group.
---@return table<string, string>|nil members
---@return string? msg
---@return string? code
function group:members() end

---The members' ids as last seen, sorted, from memory.
---
---Errors: as `members`.
---@return string[]|nil ids
---@return string? msg
---@return string? code
function group:ids() end

---Whether the last sync round of its cache (the first, or a resync) is complete.
---@return boolean
function group:is_initialized() end

---Wait until the group is initialized (its cache's `await`).
---
---Errors: as `cache:await`. Raises on a closed group or a bad timeout.
---@param timeout? number Seconds (nil: no limit).
---@return true|nil ok
---@return string? msg
---@return string? code
function group:await(timeout) end

---Set the handler: `fn(event, group, id, data)` for `"joined"`, `"updated"`, `"left"` (with the
---last data), `"initialized"` (id nil; after the first sync and after each resync) and
---`"failed"` (data: the message). It runs from the client's event dispatch and must not wait;
---an error in it is logged. Replaces the handler; `nil` removes it.
---@param fn? fun(event: "joined"|"updated"|"left"|"initialized"|"failed", group: zklock.Group, id?: string, data?: string)
---@return zklock.Group self
function group:on_change(fn) end

---Stop following (its cache closes). A second close does nothing; other calls after it raise.
---@return true
function group:close() end
