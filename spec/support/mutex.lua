-- spec/support/mutex.lua: what the mutex specs (spec/1[013]-mutex-*_spec.lua) share.
local util = require("support.util")

local unpack_ = table.unpack or unpack

local pack, assert_code = util.pack, util.assert_code

-- Drive `clients` until `name` is the only child of `path` as client c sees it (within `timeout` s).
local function only_child_soon(c, path, name, timeout, clients)
  return util.wait_until(function()
    local ch = util.children(c, path)
    return #ch == 1 and ch[1] == name
  end, timeout, clients)
end

return {
  unpack_ = unpack_,
  pack = pack,
  assert_code = assert_code,
  only_child_soon = only_child_soon,
}
