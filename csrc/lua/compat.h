/* compat.h - the Lua 5.2-5.4 C API the binding uses, for Lua 5.1, 5.2, 5.3 and LuaJIT.
 *
 * Included after lua.h and lauxlib.h. Keyed on LUA_VERSION_NUM; on 5.4 it defines nothing.
 * LuaJIT 2.1 reports 501 but already has some 5.2 functions (luaL_setfuncs, luaL_newlib,
 * luaL_testudata, luaL_setmetatable, lua_tointegerx): its lauxlib.h defines the macro
 * luaL_newlibtable alongside them, which PUC Lua 5.1 does not, so those are left alone there.
 *
 * Numbers: before 5.3 every number is a double. lua_pushinteger converts (exact up to 2^53,
 * which covers operation ids and zxids), luaL_checkinteger truncates 1.5 to 1 where 5.3 and
 * 5.4 raise; the Lua layer validates integer arguments itself. */
#ifndef ZKL_LUA_COMPAT_H
#define ZKL_LUA_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if !defined(LUA_VERSION_NUM) || LUA_VERSION_NUM < 501
#error "zklock needs Lua 5.1 or later (or LuaJIT)"
#endif

#if LUA_VERSION_NUM == 501
#if defined(LUAJIT_VERSION) || defined(luaL_newlibtable)
#define ZKL_LUA_HAS_52_AUXLIB 1 /* LuaJIT 2.1 */
#endif

#define lua_rawlen(L, i) lua_objlen(L, (i))

static inline int lua_absindex(lua_State *L, int i) {
    return (i > 0 || i <= LUA_REGISTRYINDEX) ? i : lua_gettop(L) + i + 1;
}

#ifndef ZKL_LUA_HAS_52_AUXLIB
/* Registers l into the table on top of the stack below nup upvalues, which it pops. */
static inline void luaL_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
    luaL_checkstack(L, nup + 1, "too many upvalues");
    for (; l->name; l++) {
        for (int i = 0; i < nup; i++)
            lua_pushvalue(L, -nup);
        lua_pushcclosure(L, l->func, nup);
        lua_setfield(L, -(nup + 2), l->name);
    }
    lua_pop(L, nup);
}

#define luaL_newlibtable(L, l) lua_createtable(L, 0, (int)(sizeof(l) / sizeof((l)[0]) - 1))
#define luaL_newlib(L, l) (luaL_newlibtable(L, l), luaL_setfuncs(L, l, 0))

static inline void luaL_setmetatable(lua_State *L, const char *tname) {
    luaL_getmetatable(L, tname);
    lua_setmetatable(L, -2);
}

/* luaL_checkudata without the error: the userdata at ud if its metatable is tname's, else NULL */
static inline void *luaL_testudata(lua_State *L, int ud, const char *tname) {
    void *p = lua_touserdata(L, ud);
    if (!p || !lua_getmetatable(L, ud)) return NULL;
    luaL_getmetatable(L, tname);
    int same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return same ? p : NULL;
}
#endif /* !ZKL_LUA_HAS_52_AUXLIB */
#endif /* 501 */

#if LUA_VERSION_NUM < 503
/* Before 5.3 a number is an integer when it is a double with no fraction that lua_Integer (64
 * bits: zklock builds for 64-bit targets only) holds. */
static inline int lua_isinteger(lua_State *L, int i) {
    if (lua_type(L, i) != LUA_TNUMBER) return 0;
    lua_Number n = lua_tonumber(L, i);
    return n >= -9223372036854775808.0 && n < 9223372036854775808.0 &&
           n == (lua_Number)(lua_Integer)n;
}
#endif

#if LUA_VERSION_NUM < 504
/* One user value at most before 5.4 (none on 5.1); the binding asks for none. */
#define lua_newuserdatauv(L, size, nuv) lua_newuserdata(L, (size))
#endif

#endif
