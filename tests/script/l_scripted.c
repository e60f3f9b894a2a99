/* l_scripted.c - zklock.scripted: the Lua module zklock.core over the fake ZooKeeper, for the
 * scripted Lua specs (spec/fast/scripted/, spec/support/scripted.lua). A test build only: CMake
 * target zklock_scripted, never installed; the real module contains none of this.
 *
 * require("zklock.scripted") returns a copy of zklock.core (the binding in csrc/lua compiled again,
 * its client userdata under another metatable name) in which
 *   - core.new makes the client on the fake (tests/script/fakezk.c) instead of libzookeeper;
 *   - core.now is the fake clock (so the Lua layer's deadlines and sleeps follow it too);
 *   - c:wait(ms) never sleeps: it processes what the fake has queued; asked to wait while nothing
 *     is queued and nothing is due, it raises (the main thread would wait for an answer that only
 *     the spec can give: run the call in a spawned coroutine);
 *   - core.fake scripts the server: requests, answers, watches, the session and the clock.
 * The spec puts it in place of zklock.core (package.loaded) before it loads zklock. */
#include <stdlib.h>
#include <string.h>

#include "fakezk.h"
#include "l_scripted.h"
#include "lzklock.h"

int luaopen_zklock_core(lua_State *L); /* the binding, as compiled for this module */

int zkl_scripted_client_new(const zkl_config *cfg, zkl_client **out) {
    if (fz_handle_open()) return ZKL_EINVAL; /* the fake serves one client at a time */
    return zkl__client_new_zk(cfg, &fz_table, out);
}

int zkl_scripted_wait(lua_State *L, zkl_client *c, int ms) {
    if (ms != 0 && fz_queued() == 0 && zkl_client_timeout_ms(c) != 0)
        return luaL_error(L,
                          "zklock.scripted: the main thread waits (%d ms) for the fake "
                          "ZooKeeper, which answers only what the spec scripts: start the call "
                          "in a spawned coroutine (s:spawn) and answer its requests",
                          ms);
    return zkl_client_wait(c, 0);
}

/* ------------------------------------------------------------------ requests */

static const char *const kinds[] = {"?",        "create", "delete", "exists",         "get",
                                    "children", "set",    "multi",  "remove_watches", "auth"};
static const char *const statuses[] = {"pending", "answered", "done"};

static fz_req *checkreq(lua_State *L, int arg) {
    lua_Integer i = luaL_checkinteger(L, arg);
    fz_req *r = fz_req_at((int)i);
    if (!r) luaL_argerror(L, arg, lua_pushfstring(L, "no request #%d", (int)i));
    return r;
}

static void setstr(lua_State *L, const char *k, const char *v) {
    if (!v) return;
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}
static void setint(lua_State *L, const char *k, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}
static void setbool(lua_State *L, const char *k, int v) {
    lua_pushboolean(L, v);
    lua_setfield(L, -2, k);
}

static const char *op_kind(int type) {
    switch (type) {
    case ZOO_CREATE_OP:
    case ZOO_CREATE_CONTAINER_OP:
    case ZOO_CREATE_TTL_OP:
        return "create";
    case ZOO_DELETE_OP:
        return "delete";
    case ZOO_SETDATA_OP:
        return "set";
    case ZOO_CHECK_OP:
        return "check";
    default:
        return "?";
    }
}

/* fake.req(i) -> { index, kind, path, data, mode, version, ephemeral, sequential, container,
 *   watch, connected, session, status, rc, created, ops } | nil */
static int f_req(lua_State *L) {
    fz_req *r = fz_req_at((int)luaL_checkinteger(L, 1));
    if (!r) return 0;
    lua_newtable(L);
    setint(L, "index", r->index);
    setstr(L, "kind", kinds[r->kind >= 1 && r->kind <= FZ_AUTH ? r->kind : 0]);
    setstr(L, "path", r->path);
    if (r->data) {
        lua_pushlstring(L, r->data, (size_t)r->len);
        lua_setfield(L, -2, "data");
    }
    setint(L, "mode", r->mode);
    if (r->kind == FZ_CREATE) {
        setbool(L, "ephemeral", (r->mode & ZOO_EPHEMERAL) != 0);
        setbool(L, "sequential", (r->mode & ZOO_SEQUENCE) != 0);
        setbool(L, "container", r->mode == ZOO_CONTAINER);
    }
    if (r->kind == FZ_DELETE || r->kind == FZ_SET) setint(L, "version", r->mode);
    setbool(L, "watch", r->watch);
    setbool(L, "connected", r->connected);
    setint(L, "session", r->session);
    setstr(L, "status", statuses[r->status >= 0 && r->status <= 2 ? r->status : 0]);
    setint(L, "rc", r->rc);
    setstr(L, "created", r->created);
    if (r->kind == FZ_MULTI && r->status == FZ_PENDING) {
        int n = fz_multi_n(r);
        lua_createtable(L, n, 0);
        for (int i = 0; i < n; i++) {
            int type, version;
            const char *path;
            if (fz_multi_op(r, i, &type, &path, &version) != 0) break;
            lua_createtable(L, 0, 3);
            setstr(L, "kind", op_kind(type));
            setstr(L, "path", path);
            setint(L, "version", version);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "ops");
    }
    return 1;
}

static int f_nreqs(lua_State *L) {
    lua_pushinteger(L, fz_nreqs());
    return 1;
}

/* fake.next() -> index of the oldest request not taken yet | nil */
static int f_next(lua_State *L) {
    fz_req *r = fz_next();
    if (!r) return 0;
    lua_pushinteger(L, r->index);
    return 1;
}

static int f_untaken(lua_State *L) {
    lua_pushinteger(L, fz_untaken());
    return 1;
}
static int f_unanswered(lua_State *L) {
    lua_pushinteger(L, fz_unanswered());
    return 1;
}
static int f_queued(lua_State *L) {
    lua_pushinteger(L, fz_queued());
    return 1;
}

static int done(lua_State *L, int rc) {
    lua_pushboolean(L, rc == 0);
    return 1;
}

static int zk_rc(lua_State *L, int arg) {
    if (lua_type(L, arg) == LUA_TNUMBER) return (int)lua_tointeger(L, arg);
    const char *name = luaL_checkstring(L, arg);
    lua_getfield(L, lua_upvalueindex(1), name);
    if (!lua_isnumber(L, -1))
        luaL_argerror(L, arg, lua_pushfstring(L, "unknown result code '%s'", name));
    int rc = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return rc;
}

/* each answer returns true, or false when the request was answered (or completed) already */
static int f_reply(lua_State *L) {
    return done(L, fz_reply(checkreq(L, 1), zk_rc(L, 2)));
}
static int f_drop(lua_State *L) {
    return done(L, fz_drop(checkreq(L, 1)));
}
static int f_create_ok(lua_State *L) {
    fz_req *r = checkreq(L, 1);
    int seq = (int)luaL_optinteger(L, 2, 0);
    int64_t czxid = (int64_t)luaL_optinteger(L, 3, 0x2000 + r->index);
    if (!lua_isnoneornil(L, 4))
        return done(L, fz_create_ok_owner(r, seq, czxid, (int64_t)luaL_checkinteger(L, 4)));
    return done(L, fz_create_ok(r, seq, czxid));
}
static int f_children_ok(lua_State *L) {
    fz_req *r = checkreq(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)lua_rawlen(L, 2);
    const char **names = lua_newuserdata(L, (size_t)(n + 1) * sizeof *names);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        names[i] = lua_tostring(L, -1);
        if (!names[i]) luaL_argerror(L, 2, "expected an array of names (strings)");
        lua_pop(L, 1); /* the table keeps the string */
    }
    names[n] = NULL;
    return done(L, fz_children_ok(r, names));
}
static int f_data_ok(lua_State *L) {
    fz_req *r = checkreq(L, 1);
    size_t len = 0;
    const char *data = luaL_optlstring(L, 2, "", &len);
    return done(
        L, fz_data_ok_len(r, data, (int)len, (int64_t)luaL_optinteger(L, 3, 0x2000 + r->index)));
}
static int f_stat_ok(lua_State *L) {
    fz_req *r = checkreq(L, 1);
    int64_t czxid = (int64_t)luaL_optinteger(L, 2, 0x2000 + r->index);
    if (!lua_isnoneornil(L, 3))
        return done(L, fz_stat_owner(r, czxid, (int64_t)luaL_checkinteger(L, 3)));
    return done(L, fz_stat_ok(r, czxid));
}
/* fake.stat_version(i, version): the stat version of request i's coming answer */
static int f_stat_version(lua_State *L) {
    fz_stat_version(checkreq(L, 1), (int)luaL_checkinteger(L, 2));
    return 0;
}
/* fake.multi_answer(i, { rc, ... }, seq) */
static int f_multi_answer(lua_State *L) {
    fz_req *r = checkreq(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = fz_multi_n(r);
    luaL_argcheck(L, r->kind == FZ_MULTI, 1, "not a multi request");
    luaL_argcheck(L, (int)lua_rawlen(L, 2) == n, 2, "expected one result code per op");
    int *rcs = lua_newuserdata(L, (size_t)(n ? n : 1) * sizeof *rcs);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        rcs[i] = zk_rc(L, lua_gettop(L));
        lua_pop(L, 1);
    }
    return done(L, fz_multi_answer(r, rcs, (int)luaL_optinteger(L, 3, 0)));
}
static int f_serve(lua_State *L) {
    return done(L, fz_serve(checkreq(L, 1)));
}
static int f_serve_all(lua_State *L) {
    lua_pushinteger(L, fz_serve_all());
    return 1;
}
/* fake.apply(i) -> rc, created name: the tree takes the request, no answer is sent */
static int f_apply(lua_State *L) {
    int rc;
    char *name = NULL;
    fz_tree_apply(checkreq(L, 1), &rc, &name);
    lua_pushinteger(L, rc);
    if (name)
        lua_pushstring(L, name);
    else
        lua_pushnil(L);
    free(name);
    return 2;
}

/* ------------------------------------------------------------------ watches, session, clock */

static int f_fire(lua_State *L) {
    static const char *const names[] = {"deleted", "changed", "child", "created", NULL};
    /* zookeeper.h's event types are variables, not constants */
    const int types[] = {ZOO_DELETED_EVENT, ZOO_CHANGED_EVENT, ZOO_CHILD_EVENT, ZOO_CREATED_EVENT};
    int t = luaL_checkoption(L, 1, NULL, names);
    lua_pushinteger(L, fz_fire(types[t], luaL_checkstring(L, 2)));
    return 1;
}
static int f_armed(lua_State *L) {
    lua_pushinteger(L, lua_isnoneornil(L, 1) ? fz_armed_total() : fz_armed(luaL_checkstring(L, 1)));
    return 1;
}
static int f_reset(lua_State *L) {
    luaL_argcheck(L, !fz_handle_open(), 1, "a client still has the fake open: close it first");
    fz_reset();
    return 0;
}
static int f_connect(lua_State *L) {
    fz_connect();
    return 0;
}
static int f_disconnect(lua_State *L) {
    fz_disconnect();
    return 0;
}
static int f_expire(lua_State *L) {
    fz_expire();
    return 0;
}
static int f_auth_fail(lua_State *L) {
    fz_auth_fail();
    return 0;
}
static int f_drop_link(lua_State *L) {
    fz_drop_link();
    return 0;
}
static int f_state(lua_State *L) {
    const struct { /* zookeeper.h's states are variables, not constants */
        int st;
        const char *name;
    } s[] = {{ZOO_CONNECTED_STATE, "CONNECTED"},
             {ZOO_CONNECTING_STATE, "CONNECTING"},
             {ZOO_EXPIRED_SESSION_STATE, "EXPIRED"},
             {ZOO_AUTH_FAILED_STATE, "AUTH_FAILED"}};
    int st = fz_state();
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (s[i].st == st) {
            lua_pushstring(L, s[i].name);
            return 1;
        }
    lua_pushstring(L, fz_handle_open() ? "?" : "NONE");
    return 1;
}
static int f_session(lua_State *L) {
    lua_pushinteger(L, fz_session());
    return 1;
}
static int f_handle_open(lua_State *L) {
    lua_pushboolean(L, fz_handle_open());
    return 1;
}
static int f_now(lua_State *L) {
    lua_pushnumber(L, (lua_Number)fz_now());
    return 1;
}
static int f_advance(lua_State *L) {
    lua_Integer ms = luaL_checkinteger(L, 1);
    luaL_argcheck(L, ms >= 0, 1, "expected milliseconds >= 0");
    fz_advance((int64_t)ms);
    return 0;
}

/* ------------------------------------------------------------------ tree */

static int f_tree_add(lua_State *L) {
    lua_pushinteger(L, fz_tree_add(luaL_checkstring(L, 1), lua_toboolean(L, 2)));
    return 1;
}
static int f_tree_del(lua_State *L) {
    lua_pushinteger(L, fz_tree_del(luaL_checkstring(L, 1)));
    return 1;
}
static int f_tree_has(lua_State *L) {
    lua_pushboolean(L, fz_tree_has(luaL_checkstring(L, 1)));
    return 1;
}
static int f_tree_children(lua_State *L) {
    lua_pushinteger(L, fz_tree_children(luaL_checkstring(L, 1)));
    return 1;
}
/* fake.live() -> { path, ... }: nodes this client created that nobody deleted (this session) */
static int f_live(lua_State *L) {
    int n = fz_live();
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, fz_live_at(i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}
/* fake.dump() -> the request log as text */
static int f_dump(lua_State *L) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; i < fz_nreqs(); i++) {
        fz_req *r = fz_req_at(i);
        char line[512];
        snprintf(line, sizeof line, "#%d %s %s mode=%d watch=%d %s rc=%d%s%s\n", i,
                 kinds[r->kind >= 1 && r->kind <= FZ_AUTH ? r->kind : 0], r->path ? r->path : "-",
                 r->mode, r->watch, statuses[r->status >= 0 && r->status <= 2 ? r->status : 0],
                 r->rc, r->created ? " -> " : "", r->created ? r->created : "");
        luaL_addstring(&b, line);
    }
    luaL_pushresult(&b);
    return 1;
}

/* fake.lua_alloc_fail(n): every Lua allocation that grows fails once n more have succeeded (n < 0:
 * none fails any more, and Lua's own allocator is back: this module may be unloaded before the
 * state is closed). Lua retries a failed allocation after an emergency collection, so one
 * failure alone would not be seen: they fail until the spec says otherwise. */
static lua_Alloc lua_alloc_orig;
static void *lua_alloc_ud;
static long lua_alloc_left = -1;
static void *failing_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)ud;
    if (nsize > 0 && (ptr == NULL || nsize > osize) && lua_alloc_left >= 0) {
        if (lua_alloc_left == 0) return NULL;
        lua_alloc_left--;
    }
    return lua_alloc_orig(lua_alloc_ud, ptr, osize, nsize);
}
static int f_lua_alloc_fail(lua_State *L) {
    long n = (long)luaL_checkinteger(L, 1);
    if (n < 0) {
        if (lua_alloc_orig) lua_setallocf(L, lua_alloc_orig, lua_alloc_ud);
        lua_alloc_orig = NULL;
        lua_alloc_left = -1;
        return 0;
    }
    if (!lua_alloc_orig) {
        lua_alloc_orig = lua_getallocf(L, &lua_alloc_ud);
        lua_setallocf(L, failing_lua_alloc, NULL);
    }
    lua_alloc_left = n;
    return 0;
}

static const luaL_Reg fake_funcs[] = {{"req", f_req},
                                      {"lua_alloc_fail", f_lua_alloc_fail},
                                      {"nreqs", f_nreqs},
                                      {"next", f_next},
                                      {"untaken", f_untaken},
                                      {"unanswered", f_unanswered},
                                      {"queued", f_queued},
                                      {"reply", f_reply},
                                      {"drop", f_drop},
                                      {"create_ok", f_create_ok},
                                      {"children_ok", f_children_ok},
                                      {"data_ok", f_data_ok},
                                      {"stat_ok", f_stat_ok},
                                      {"multi_answer", f_multi_answer},
                                      {"stat_version", f_stat_version},
                                      {"serve", f_serve},
                                      {"serve_all", f_serve_all},
                                      {"apply", f_apply},
                                      {"fire", f_fire},
                                      {"armed", f_armed},
                                      {"reset", f_reset},
                                      {"connect", f_connect},
                                      {"disconnect", f_disconnect},
                                      {"expire", f_expire},
                                      {"auth_fail", f_auth_fail},
                                      {"drop_link", f_drop_link},
                                      {"state", f_state},
                                      {"session", f_session},
                                      {"handle_open", f_handle_open},
                                      {"now", f_now},
                                      {"advance", f_advance},
                                      {"tree_add", f_tree_add},
                                      {"tree_del", f_tree_del},
                                      {"tree_has", f_tree_has},
                                      {"tree_children", f_tree_children},
                                      {"live", f_live},
                                      {"dump", f_dump},
                                      {NULL, NULL}};

#define RC(name)                                                                                   \
    { #name, name }
static const struct {
    const char *name;
    int rc;
} zk_codes[] = {RC(ZOK),
                RC(ZSYSTEMERROR),
                RC(ZRUNTIMEINCONSISTENCY),
                RC(ZCONNECTIONLOSS),
                RC(ZOPERATIONTIMEOUT),
                RC(ZBADARGUMENTS),
                RC(ZINVALIDSTATE),
                RC(ZAPIERROR),
                RC(ZNONODE),
                RC(ZNOAUTH),
                RC(ZBADVERSION),
                RC(ZNOCHILDRENFOREPHEMERALS),
                RC(ZNODEEXISTS),
                RC(ZNOTEMPTY),
                RC(ZSESSIONEXPIRED),
                RC(ZINVALIDACL),
                RC(ZAUTHFAILED),
                RC(ZCLOSING),
                RC(ZNOTHING),
                RC(ZSESSIONMOVED),
                RC(ZNOWATCHER)};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int luaopen_zklock_scripted(lua_State *L) {
    luaopen_zklock_core(L);
    lua_pushcfunction(L, f_now);
    lua_setfield(L, -2, "now");
    lua_newtable(L); /* fake */
    lua_newtable(L); /* its result codes, also the upvalue of the answers */
    for (size_t i = 0; i < sizeof zk_codes / sizeof zk_codes[0]; i++) {
        lua_pushinteger(L, zk_codes[i].rc);
        lua_setfield(L, -2, zk_codes[i].name);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "rc");
    luaL_setfuncs(L, fake_funcs, 1);
    lua_setfield(L, -2, "fake");
    return 1;
}
