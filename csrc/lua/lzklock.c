/* lzklock.c - luaopen_zklock_core: constants, the error table and module functions. */
#include <poll.h>
#include <string.h>
#include <time.h>

#include "naming.h"

#include "lzklock.h"

int zkl_lua_fail(lua_State *L, int code, const char *context) {
    lua_pushnil(L);
    if (context)
        lua_pushfstring(L, "%s: %s: %s", zkl_err_name(code), context, zkl_strerror(code));
    else
        lua_pushfstring(L, "%s: %s", zkl_err_name(code), zkl_strerror(code));
    lua_pushstring(L, zkl_err_name(code));
    return 3;
}

static int l_strerror(lua_State *L) {
    lua_pushstring(L, zkl_strerror((int)luaL_checkinteger(L, 1)));
    return 1;
}

static int l_errname(lua_State *L) {
    lua_pushstring(L, zkl_err_name((int)luaL_checkinteger(L, 1)));
    return 1;
}

/* core.outcome_unknown(code) -> boolean: code (a number, or a name from core.errno) ended a
 * write that may have been applied (ZKL_OUTCOME_UNKNOWN_MAP). nil -> false; a name that is no
 * error code -> nil (the Lua layer raises). */
static int l_outcome_unknown(lua_State *L) {
    int code;
    if (lua_isnoneornil(L, 1)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (lua_type(L, 1) == LUA_TSTRING) {
        const char *name = lua_tostring(L, 1);
#define XX(n, c, msg)                                                                              \
    if (strcmp(name, #n) == 0) {                                                                   \
        lua_pushboolean(L, zkl_outcome_unknown(c));                                                \
        return 1;                                                                                  \
    }
        ZKL_ERRNO_MAP(XX)
#undef XX
        return 0;
    }
    code = (int)luaL_checkinteger(L, 1);
    lua_pushboolean(L, zkl_outcome_unknown(code));
    return 1;
}

/* core.uuid() -> a fresh random UUID (v4, lowercase), the one the lock nodes' names use
 * | nil, msg, code (ESYSTEM: getrandom failed) */
static int l_uuid(lua_State *L) {
    char out[37];
    int rc = zkl_uuid(out);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, "getrandom");
    lua_pushstring(L, out);
    return 1;
}

/* core.hostname() -> this machine's host name ("localhost" when unknown): the client's default
 * identity, and the one source every Lua module takes the host name from */
static int l_hostname(lua_State *L) {
    char host[256];
    zkl_host_name(host, sizeof host);
    lua_pushstring(L, host);
    return 1;
}

/* core.path_error(path) -> message | nil */
static int l_path_error(lua_State *L) {
    size_t len;
    const char *p = luaL_checklstring(L, 1, &len);
    const char *why = zkl_path_error(p, len);
    if (!why) return 0;
    lua_pushstring(L, why);
    return 1;
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* core.expire_session(hosts, session_id_hex, password, timeout_ms) -> true | nil, msg, code */
static int l_expire_session(lua_State *L) {
    const char *hosts = luaL_checkstring(L, 1);
    size_t n, pwlen;
    const char *hex = luaL_checklstring(L, 2, &n);
    const char *pw = luaL_checklstring(L, 3, &pwlen);
    int timeout = (int)luaL_optinteger(L, 4, 5000);
    luaL_argcheck(L, n > 0 && n <= 16, 2, "expected a session id as up to 16 hex digits");
    luaL_argcheck(L, pwlen == 16, 3, "expected the 16-byte session password");
    unsigned long long id = 0;
    for (size_t i = 0; i < n; i++) {
        int v = hexval((unsigned char)hex[i]);
        luaL_argcheck(L, v >= 0, 2, "expected a session id as hex digits");
        id = id * 16 + (unsigned)v;
    }
    int rc = zkl_expire_session(hosts, (int64_t)id, pw, timeout);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, "cannot expire session");
    lua_pushboolean(L, 1);
    return 1;
}

/* core.now() -> monotonic milliseconds (the clock the core's deadlines use) */
static int l_now(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec * 1000.0 + (lua_Number)ts.tv_nsec / 1e6);
    return 1;
}

/* core.poll(fds, timeout_ms) -> number of readable fds (waits on several clients at once) */
static int l_poll(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)lua_rawlen(L, 1);
    int timeout = (int)luaL_optinteger(L, 2, -1);
    luaL_argcheck(L, n >= 0 && n <= 1024, 1, "expected at most 1024 fds");
    struct pollfd *p = lua_newuserdata(L, (size_t)(n ? n : 1) * sizeof *p);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        p[i].fd = (int)luaL_checkinteger(L, -1);
        p[i].events = POLLIN;
        p[i].revents = 0;
        lua_pop(L, 1);
    }
    int r = poll(p, (nfds_t)n, timeout);
    lua_pushinteger(L, r < 0 ? 0 : r);
    return 1;
}

/* core.sort(names, recipe) -> new array sorted the way the recipe orders its queue */
static int l_sort(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int recipe = (int)luaL_checkinteger(L, 2);
    int n = (int)lua_rawlen(L, 1);
    const char **names = lua_newuserdata(L, (size_t)(n ? n : 1) * sizeof *names);
    zkl__sort_item *scratch = lua_newuserdata(L, (size_t)(n ? n : 1) * sizeof *scratch);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        names[i] = lua_tostring(L, -1);
        luaL_argcheck(L, names[i] != NULL, 1, "expected an array of strings");
        lua_pop(L, 1); /* the string stays alive: the table holds it */
    }
    zkl__sort_children(names, n, (zkl_recipe)recipe, scratch);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* core.sort_key(name, recipe) -> the text the recipe orders by */
static int l_sort_key(lua_State *L) {
    lua_pushstring(L, zkl__sort_key(luaL_checkstring(L, 1), (zkl_recipe)luaL_checkinteger(L, 2)));
    return 1;
}

static const luaL_Reg funcs[] = {{"strerror", l_strerror},
                                 {"now", l_now},
                                 {"poll", l_poll},
                                 {"sort", l_sort},
                                 {"sort_key", l_sort_key},
                                 {"errname", l_errname},
                                 {"path_error", l_path_error},
                                 {"outcome_unknown", l_outcome_unknown},
                                 {"expire_session", l_expire_session},
                                 {"uuid", l_uuid},
                                 {"hostname", l_hostname},
                                 {NULL, NULL}};

#define SETINT(name, value)                                                                        \
    lua_pushinteger(L, (value));                                                                   \
    lua_setfield(L, -2, name)

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int luaopen_zklock_core(lua_State *L) {
    lua_newtable(L);
    luaL_setfuncs(L, funcs, 0);
    zkl_lua_client_register(L);
    zkl_lua_proc_register(L);
    zkl_lua_waker_register(L);

    lua_newtable(L); /* errno: NAME -> code */
#define XX(name, code, msg) SETINT(#name, code);
    ZKL_ERRNO_MAP(XX)
#undef XX
    lua_setfield(L, -2, "errno");

    lua_newtable(L); /* OUTCOME_UNKNOWN: the names of ZKL_OUTCOME_UNKNOWN_MAP, in its order */
    {
        int i = 0;
#define XX(name)                                                                                   \
    lua_pushliteral(L, #name);                                                                     \
    lua_rawseti(L, -2, ++i);
        ZKL_OUTCOME_UNKNOWN_MAP(XX)
#undef XX
    }
    lua_setfield(L, -2, "OUTCOME_UNKNOWN");

    SETINT("MUTEX", ZKL_MUTEX);
    SETINT("READ", ZKL_READ);
    SETINT("WRITE", ZKL_WRITE);
    SETINT("LATCH", ZKL_LATCH);
    SETINT("EV_ACQUIRED", ZKL_EV_ACQUIRED);
    SETINT("EV_FAILED", ZKL_EV_FAILED);
    SETINT("EV_RELEASED", ZKL_EV_RELEASED);
    SETINT("EV_LOCK_STATE", ZKL_EV_LOCK_STATE);
    SETINT("EV_SESSION", ZKL_EV_SESSION);
    SETINT("EV_OP_DONE", ZKL_EV_OP_DONE);
    SETINT("EV_WARNING", ZKL_EV_WARNING);
    SETINT("EV_WATCH", ZKL_EV_WATCH);
    SETINT("WATCH_CREATED", ZKL_WATCH_CREATED);
    SETINT("WATCH_DELETED", ZKL_WATCH_DELETED);
    SETINT("WATCH_CHANGED", ZKL_WATCH_CHANGED);
    SETINT("WATCH_CHILD", ZKL_WATCH_CHILD);
    SETINT("STATE_CONNECTING", ZKL_STATE_CONNECTING);
    SETINT("STATE_CONNECTED", ZKL_STATE_CONNECTED);
    SETINT("STATE_SUSPENDED", ZKL_STATE_SUSPENDED);
    SETINT("STATE_EXPIRED", ZKL_STATE_EXPIRED);
    SETINT("STATE_CLOSED", ZKL_STATE_CLOSED);
    SETINT("STATE_AUTH_FAILED", ZKL_STATE_AUTH_FAILED);
    SETINT("LOCK_SUSPENDED", ZKL_LOCK_SUSPENDED);
    SETINT("LOCK_RECONNECTED", ZKL_LOCK_RECONNECTED);
    SETINT("LOCK_LOST", ZKL_LOCK_LOST);
    SETINT("OP_GET", ZKL_OP_GET);
    SETINT("OP_CHILDREN", ZKL_OP_CHILDREN);
    SETINT("OP_EXISTS", ZKL_OP_EXISTS);
    SETINT("OP_CREATE", ZKL_OP_CREATE);
    SETINT("OP_SET", ZKL_OP_SET);
    SETINT("OP_DELETE", ZKL_OP_DELETE);
    SETINT("OP_CHECK", ZKL_OP_CHECK);
    SETINT("CREATE_EPHEMERAL", ZKL_CREATE_EPHEMERAL);
    SETINT("CREATE_SEQUENTIAL", ZKL_CREATE_SEQUENTIAL);
    SETINT("CREATE_CONTAINER", ZKL_CREATE_CONTAINER);
    SETINT("CREATE_PARENTS", ZKL_CREATE_PARENTS);
    SETINT("LOG_NONE", ZKL_LOG_NONE);
    SETINT("LOG_ERROR", ZKL_LOG_ERROR);
    SETINT("LOG_WARN", ZKL_LOG_WARN);
    SETINT("LOG_INFO", ZKL_LOG_INFO);
    SETINT("LOG_DEBUG", ZKL_LOG_DEBUG);
    lua_pushliteral(L, ZKL_VERSION);
    lua_setfield(L, -2, "_VERSION");
    return 1;
}
