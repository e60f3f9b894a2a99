-- luacheck configuration for zklock:  luacheck lua spec bench examples
-- (Debian: apt-get install lua-check). Warnings are reported, not silenced: this file only
-- describes the environments the code runs in.

-- Everything runs on Lua 5.4 and on LuaJIT (OpenResty): accept the globals of either, so
-- compatibility code such as `table.unpack or unpack` or `jit` checks is not flagged.
std = "lua54+luajit"
max_line_length = 120
-- `_` and `_name` mark values that are unused on purpose; an unused `self` in a method is fine.
self = false
ignore = { "21[123]/_.*" }

exclude_files = { "build*/**", "bench/out/**", "**/.luarocks/**", "lua_modules/**" }

-- busted specs: describe/it/setup/... and luassert's assert.* (only the spec files themselves;
-- spec/support/ holds workers and helpers that run as plain Lua processes)
files["spec/**/*_spec.lua"] = { std = "+busted" }

-- OpenResty: code that runs inside nginx workers sees `ngx` (and `ndk`), and lua-nginx-module
-- keeps the original coroutine functions it replaces as coroutine._resume, ._status, ...
local openresty = {
  std = "+ngx_lua",
  read_globals = {
    coroutine = { fields = { "_create", "_resume", "_running", "_status", "_wrap", "_yield" } },
  },
}
files["lua/zklock/adapters/openresty.lua"] = openresty
files["examples/openresty/**/*.lua"] = openresty
files["bench/drivers/openresty/*.lua"] = openresty
files["spec/support/nginx/**/*.lua"] = openresty
