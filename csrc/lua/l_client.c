/* l_client.c - the zklock.client userdata: a thin binding over zkl_client. No recipe logic here:
 * locks are named by integer ids and every decision about waiting is made in lua/zklock/. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lzklock.h"

#define LOG_KEEP 256

/* How core.new makes a client and how c:wait waits: the real ones here; the scripted test module
 * (tests/script/l_scripted.c, never installed) compiles this file again with the fake
 * ZooKeeper's (a client on tests/script/fakezk.c, a wait that never sleeps). */
#ifndef ZKL_LUA_CLIENT_NEW
#define ZKL_LUA_CLIENT_NEW(cfg, out) zkl_client_new((cfg), (out))
#endif
#ifndef ZKL_LUA_CLIENT_WAIT
#define ZKL_LUA_CLIENT_WAIT(L, c, ms) zkl_client_wait((c), (ms))
#endif

typedef struct log_line {
    struct log_line *next;
    size_t len;
    char text[1];
} log_line;

/* The log list is written by the ZooKeeper client's log callback, which with keepalive also
 * runs on the keepalive thread, and read by c:logs() on the Lua thread: guarded by log_mu. */
typedef struct lclient {
    zkl_client *c;
    pthread_mutex_t log_mu;
    log_line *log_head, *log_tail;
    int log_count;
} lclient;

static lclient *check(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    if (!u->c) luaL_error(L, "zklock: the client is closed");
    return u;
}

static void on_log(void *ud, const char *msg) {
    lclient *u = ud;
    size_t n = strlen(msg);
    log_line *l = malloc(sizeof *l + n);
    if (!l) return;
    l->next = NULL;
    l->len = n;
    memcpy(l->text, msg, n + 1);
    pthread_mutex_lock(&u->log_mu);
    if (u->log_tail)
        u->log_tail->next = l;
    else
        u->log_head = l;
    u->log_tail = l;
    if (++u->log_count > LOG_KEEP) {
        log_line *old = u->log_head;
        u->log_head = old->next;
        free(old);
        u->log_count--;
    }
    pthread_mutex_unlock(&u->log_mu);
}

/* Detach the list under the mutex; the caller owns (and frees) what it returns. */
static log_line *take_logs(lclient *u, int *count) {
    pthread_mutex_lock(&u->log_mu);
    log_line *head = u->log_head;
    if (count) *count = u->log_count;
    u->log_head = u->log_tail = NULL;
    u->log_count = 0;
    pthread_mutex_unlock(&u->log_mu);
    return head;
}

static void free_log_list(log_line *l) {
    while (l) {
        log_line *next = l->next;
        free(l);
        l = next;
    }
}

/* core.new(hosts, session_timeout_ms, identity|nil, log_level, keepalive) -> client | nil, msg,
 * code */
static int l_new(lua_State *L) {
    zkl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.hosts = luaL_checkstring(L, 1);
    cfg.session_timeout_ms = (int)luaL_checkinteger(L, 2);
    if (!lua_isnoneornil(L, 3)) cfg.identity = luaL_checklstring(L, 3, &cfg.identity_len);
    cfg.log_level = (int)luaL_optinteger(L, 4, ZKL_LOG_NONE);
    cfg.keepalive = lua_toboolean(L, 5);
    lclient *u = lua_newuserdata(L, sizeof *u);
    memset(u, 0, sizeof *u);
    pthread_mutex_init(&u->log_mu, NULL);
    luaL_getmetatable(L, ZKL_CLIENT_MT);
    lua_setmetatable(L, -2);
    cfg.log_fn = on_log;
    cfg.log_ud = u;
    int rc = ZKL_LUA_CLIENT_NEW(&cfg, &u->c);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, "cannot create client");
    return 1;
}

static int l_close(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    if (u->c) zkl_client_close(u->c);
    return 0;
}

/* A finalizer must never block: a client collected without close() is closed and freed on a
 * background thread (zkl_client_free_nowait), which no longer calls back into this userdata. */
static int l_gc(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    if (u->c) {
        zkl_client_free_nowait(u->c);
        u->c = NULL;
    }
    free_log_list(take_logs(u, NULL));
    pthread_mutex_destroy(&u->log_mu);
    return 0;
}

/* c:free(): after c:close(), free at once (close already ended the session) */
static int l_free(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    if (u->c) {
        zkl_client_free(u->c);
        u->c = NULL;
    }
    free_log_list(take_logs(u, NULL));
    return 0;
}

static int l_fd(lua_State *L) {
    lua_pushinteger(L, zkl_client_fd(check(L)->c));
    return 1;
}

static int l_timeout(lua_State *L) {
    lua_pushinteger(L, zkl_client_timeout_ms(check(L)->c));
    return 1;
}

static int l_process(lua_State *L) {
    int rc = zkl_client_process(check(L)->c);
    if (rc < 0) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, rc);
    return 1;
}

static int l_flush(lua_State *L) {
    int rc = zkl_client_flush(check(L)->c);
    if (rc < 0) return zkl_lua_fail(L, rc, NULL);
    return 0;
}

static int l_wait(lua_State *L) {
    lclient *u = check(L);
    int rc = ZKL_LUA_CLIENT_WAIT(L, u->c, (int)luaL_optinteger(L, 2, -1));
    if (rc < 0) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, rc);
    return 1;
}

/* c:next_event() -> id, type, status | nil */
static int l_next_event(lua_State *L) {
    zkl_event ev;
    if (!zkl_client_next_event(check(L)->c, &ev)) return 0;
    lua_pushinteger(L, (lua_Integer)ev.id);
    lua_pushinteger(L, ev.type);
    lua_pushinteger(L, ev.status);
    return 3;
}

/* c:wait_for(id, max_ms) -> type, status | nil: the blocking caller's fast path. When the only
 * queued event is the one that ends (or grants) operation id, pop it; else, if nothing is queued,
 * wait once (up to max_ms, as c:wait) and look again. nil: other events are queued, or the wait
 * ended without id's event: the caller pumps (dispatches) as usual. */
static int l_wait_for(lua_State *L) {
    lclient *u = check(L);
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
    int ms = (int)luaL_optinteger(L, 3, -1);
    zkl_event ev;
    int r = zkl_client_next_event_for(u->c, id, &ev);
    if (r == 0) {
        int rc = ZKL_LUA_CLIENT_WAIT(L, u->c, ms);
        if (rc < 0) return zkl_lua_fail(L, rc, NULL);
        r = zkl_client_next_event_for(u->c, id, &ev);
    }
    if (r != 1) return 0;
    lua_pushinteger(L, ev.type);
    lua_pushinteger(L, ev.status);
    return 2;
}

static int l_state(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    lua_pushinteger(L, u->c ? zkl_client_state(u->c) : ZKL_STATE_CLOSED);
    return 1;
}

/* c:session() -> id_hex, password | nil */
static int l_session(lua_State *L) {
    char pw[16], hex[32];
    int64_t id = zkl_client_session(check(L)->c, pw);
    if (!id) return 0;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)id);
    lua_pushstring(L, hex);
    lua_pushlstring(L, pw, sizeof pw);
    return 2;
}

/* c:session_id_decimal() -> the session id as Java prints a long (signed decimal, the form
 * Curator and Kazoo put into node names) | nil before the first session */
static int l_session_id_decimal(lua_State *L) {
    char pw[16], dec[24];
    int64_t id = zkl_client_session(check(L)->c, pw);
    if (!id) return 0;
    snprintf(dec, sizeof dec, "%lld", (long long)id);
    lua_pushstring(L, dec);
    return 1;
}

static int l_session_timeout(lua_State *L) {
    lua_pushinteger(L, zkl_client_session_timeout(check(L)->c));
    return 1;
}

/* c:loss_ms() -> ms until LOST if nothing more is answered, -1 without a session */
static int l_loss_ms(lua_State *L) {
    lua_pushinteger(L, zkl_client_loss_ms(check(L)->c));
    return 1;
}

static int l_session_count(lua_State *L) {
    lua_pushinteger(L, zkl_client_session_count(check(L)->c));
    return 1;
}

/* Park op id's waiter when `park` is true (zkl_client_park) -> whether it is parked. Parking
 * that finds no room (ENOMEM) or an event already queued leaves the op on the event queue. */
static int park_if(lclient *u, uint64_t id, int park) {
    return park && zkl_client_park(u->c, id) == ZKL_OK;
}

/* c:acquire(recipe, path, timeout_ms, acl, data, park) -> id, parked | nil, msg, code
 * data: the node's data for this acquisition (nil: the client's identity); park: park the
 * waiter in the same call (its grant or failure then comes through c:take_ready) */
static int l_acquire(lua_State *L) {
    lclient *u = check(L);
    int recipe = (int)luaL_checkinteger(L, 2);
    size_t len;
    const char *path = luaL_checklstring(L, 3, &len);
    int timeout = (int)luaL_checkinteger(L, 4);
    const char *why = zkl_path_error(path, len);
    if (why) return luaL_argerror(L, 3, lua_pushfstring(L, "lock path %s", why));
    zkl_lock_args a = {(zkl_recipe)recipe, path, timeout, (int)luaL_optinteger(L, 5, 0), NULL, 0};
    if (!lua_isnoneornil(L, 6)) a.data = luaL_checklstring(L, 6, &a.len);
    uint64_t id;
    int rc = zkl_lock_acquire_ex(u->c, &a, &id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, (lua_Integer)id);
    lua_pushboolean(L, park_if(u, id, lua_toboolean(L, 7)));
    return 2;
}

/* c:semaphore(path, max_leases, qty, timeout_ms, acl) -> id | nil, msg, code */
static int l_semaphore(lua_State *L) {
    lclient *u = check(L);
    size_t len;
    const char *path = luaL_checklstring(L, 2, &len);
    int max = (int)luaL_checkinteger(L, 3);
    int qty = (int)luaL_checkinteger(L, 4);
    int timeout = (int)luaL_checkinteger(L, 5);
    const char *why = zkl_path_error(path, len);
    if (why) return luaL_argerror(L, 2, lua_pushfstring(L, "semaphore path %s", why));
    uint64_t id;
    int rc =
        zkl_semaphore_acquire(u->c, path, max, qty, timeout, (int)luaL_optinteger(L, 6, 0), &id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, (lua_Integer)id);
    return 1;
}

/* c:lease_ids(id) -> array of lease ids (after ACQUIRED) */
static int l_lease_ids(lua_State *L) {
    lclient *u = check(L);
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2), ids[1024];
    int n = zkl_lease_ids(u->c, id, ids, 1024);
    if (n < 0) return zkl_lua_fail(L, n, NULL);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* c:downgrade(write_id) -> read id | nil, msg, code */
static int l_downgrade(lua_State *L) {
    lclient *u = check(L);
    uint64_t id;
    int rc = zkl_lock_downgrade(u->c, (uint64_t)luaL_checkinteger(L, 2), &id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, (lua_Integer)id);
    return 1;
}

/* c:multi(items, timeout_ms, flags) -> id | nil, msg, code
 * items: array of { recipe, path, max_leases, timeout_ms, acl } (array part: 1..5) */
static int l_multi(lua_State *L) {
    lclient *u = check(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)lua_rawlen(L, 2);
    int timeout = (int)luaL_checkinteger(L, 3);
    int flags = (int)luaL_optinteger(L, 4, 0);
    luaL_argcheck(L, n >= 1 && n <= 4096, 2, "expected 1 to 4096 items");
    zkl_multi_item *items = lua_newuserdata(L, (size_t)n * sizeof *items);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_rawgeti(L, -1, 1);
        items[i].recipe = (zkl_recipe)luaL_checkinteger(L, -1);
        lua_rawgeti(L, -2, 2);
        items[i].path = luaL_checkstring(L, -1); /* anchored by the items table */
        lua_rawgeti(L, -3, 3);
        items[i].max_leases = (int)luaL_checkinteger(L, -1);
        lua_rawgeti(L, -4, 4);
        items[i].timeout_ms = (int)luaL_checkinteger(L, -1);
        lua_rawgeti(L, -5, 5);
        items[i].acl = (int)luaL_optinteger(L, -1, 0);
        lua_pop(L, 6);
    }
    uint64_t id;
    int rc = zkl_multi_acquire(u->c, items, n, timeout, flags, &id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, (lua_Integer)id);
    return 1;
}

/* c:multi_result(id) -> ids | nil, failed_index (1-based) */
static int l_multi_result(lua_State *L) {
    lclient *u = check(L);
    uint64_t ids[4096];
    int failed = -1;
    int n = zkl_multi_result(u->c, (uint64_t)luaL_checkinteger(L, 2), ids, 4096, &failed);
    if (n < 0) return zkl_lua_fail(L, n, NULL);
    if (failed >= 0) {
        lua_pushnil(L);
        lua_pushinteger(L, failed + 1);
        return 2;
    }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* c:acl({ {perms, scheme, id}, ... }) -> acl id | nil, msg, code */
static int l_acl(lua_State *L) {
    lclient *u = check(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)lua_rawlen(L, 2);
    luaL_argcheck(L, n >= 1 && n <= 64, 2, "expected 1 to 64 ACL entries");
    zkl_acl_entry *e = lua_newuserdata(L, (size_t)n * sizeof *e);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_rawgeti(L, -1, 1);
        e[i].perms = (int)luaL_checkinteger(L, -1);
        lua_rawgeti(L, -2, 2);
        e[i].scheme = luaL_checkstring(L, -1); /* anchored by the entries table */
        lua_rawgeti(L, -3, 3);
        e[i].id = luaL_checkstring(L, -1);
        lua_pop(L, 4);
    }
    int rc = zkl_client_acl(u->c, e, n);
    if (rc < 0) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, rc);
    return 1;
}

static int id_call(lua_State *L, int (*fn)(zkl_client *, uint64_t)) {
    lclient *u = check(L);
    int rc = fn(u->c, (uint64_t)luaL_checkinteger(L, 2));
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

/* c:release(id, park) -> true, parked | nil, msg, code */
static int l_release(lua_State *L) {
    lclient *u = check(L);
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
    int rc = zkl_lock_release(u->c, id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushboolean(L, 1);
    lua_pushboolean(L, park_if(u, id, lua_toboolean(L, 3)));
    return 2;
}

/* c:park(id) -> parked: op id's final (or granting) event will come through c:take_ready */
static int l_park(lua_State *L) {
    lclient *u = check(L);
    lua_pushboolean(L, park_if(u, (uint64_t)luaL_checkinteger(L, 2), 1));
    return 1;
}

/* c:take_ready(buf) -> n: every ready event of a parked op, in one call: buf[3i-2], buf[3i-1],
 * buf[3i] = id, type, status for i = 1..n (buf is reused; entries beyond 3n are left as they are,
 * but for 3n+1..3n+3, which may hold false). The slots of an event exist before it is taken out
 * of the core: a buffer that cannot grow raises with the event still ready (it is not lost). */
static int l_take_ready(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!u->c) {
        lua_pushinteger(L, 0);
        return 1;
    }
    zkl_event ev;
    int n = 0;
    for (;;) {
        /* the next triple's slots first (a write to an existing slot allocates nothing) */
        for (int k = 1; k <= 3; k++) {
            lua_pushboolean(L, 0);
            lua_rawseti(L, 2, 3 * n + k);
        }
        if (!zkl_client_next_ready(u->c, &ev)) break;
        lua_pushinteger(L, (lua_Integer)ev.id);
        lua_rawseti(L, 2, 3 * n + 1);
        lua_pushinteger(L, ev.type);
        lua_rawseti(L, 2, 3 * n + 2);
        lua_pushinteger(L, ev.status);
        lua_rawseti(L, 2, 3 * n + 3);
        n++;
    }
    lua_pushinteger(L, n);
    return 1;
}
static int l_cancel(lua_State *L) {
    return id_call(L, zkl_lock_cancel);
}
static int l_abandon(lua_State *L) {
    return id_call(L, zkl_lock_abandon);
}

/* c:info(id) -> node|false, token, held, suspended, ahead | nil, msg, code */
static int l_info(lua_State *L) {
    lclient *u = check(L);
    zkl_lock_info info;
    int rc = zkl_lock_info_get(u->c, (uint64_t)luaL_checkinteger(L, 2), &info);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    if (info.node[0])
        lua_pushstring(L, info.node);
    else
        lua_pushboolean(L, 0);
    lua_pushinteger(L, (lua_Integer)info.token);
    lua_pushboolean(L, info.held);
    lua_pushboolean(L, info.suspended);
    lua_pushinteger(L, info.ahead);
    return 5;
}

/* c:op(type, path, data|nil, flags, version, acl, timeout_ms, watch, ttl_ms) -> id | nil, msg,
 * code (acl: an id from c:acl; watch: arm a one-shot watch, GET/EXISTS/CHILDREN only; ttl_ms > 0:
 * a create of a TTL node) */
static int l_op(lua_State *L) {
    lclient *u = check(L);
    zkl_op_args a;
    memset(&a, 0, sizeof a);
    a.type = (zkl_op_type)luaL_checkinteger(L, 2);
    a.path = luaL_checkstring(L, 3);
    if (!lua_isnoneornil(L, 4)) a.data = luaL_checklstring(L, 4, &a.len);
    a.flags = (int)luaL_optinteger(L, 5, 0);
    a.version = (int)luaL_optinteger(L, 6, -1);
    a.acl = (int)luaL_optinteger(L, 7, 0);
    a.timeout_ms = (int)luaL_optinteger(L, 8, 0);
    a.watch = lua_toboolean(L, 9);
    a.ttl_ms = (int64_t)luaL_optinteger(L, 10, 0);
    uint64_t id;
    int rc = zkl_op_start(u->c, &a, &id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, (lua_Integer)id);
    return 1;
}

/* c:txn({ {type, path, data|nil, flags, version, acl}, ... }, timeout_ms) -> id | nil, msg, code
 * (the Lua layer validates; what it lets through that the core refuses comes back as EINVAL) */
static int l_txn(lua_State *L) {
    lclient *u = check(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    int timeout_ms = (int)luaL_optinteger(L, 3, 0);
    int n = (int)lua_rawlen(L, 2);
    if (n < 1 || n > ZKL_TXN_MAX) return zkl_lua_fail(L, ZKL_EINVAL, "transaction: 1 to 1000 ops");
    zkl_txn_op *ops = lua_newuserdata(L, (size_t)n * sizeof *ops); /* freed by the GC */
    memset(ops, 0, (size_t)n * sizeof *ops);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_rawgeti(L, -1, 1);
        ops[i].type = (zkl_op_type)luaL_checkinteger(L, -1);
        lua_rawgeti(L, -2, 2);
        ops[i].path = luaL_checkstring(L, -1);
        lua_rawgeti(L, -3, 3);
        if (!lua_isnil(L, -1)) ops[i].data = luaL_checklstring(L, -1, &ops[i].len);
        lua_rawgeti(L, -4, 4);
        ops[i].flags = (int)luaL_optinteger(L, -1, 0);
        lua_rawgeti(L, -5, 5);
        ops[i].version = (int)luaL_optinteger(L, -1, -1);
        lua_rawgeti(L, -6, 6);
        ops[i].acl = (int)luaL_optinteger(L, -1, 0);
        /* the strings stay referenced by the ops table (argument 2) until the call returns */
        lua_pop(L, 7);
    }
    uint64_t id;
    int rc = zkl_txn_start(u->c, ops, n, timeout_ms, &id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushinteger(L, (lua_Integer)id);
    return 1;
}

/* the outcome of a transaction: { rc, sent, results = { { rc, path, version, mzxid }, ... } } */
static int push_txn_result(lua_State *L, zkl_client *c, uint64_t id) {
    int n = zkl_txn_result_get(c, id, NULL, 0);
    if (n < 0) return zkl_lua_fail(L, n, NULL);
    zkl_txn_result *res = lua_newuserdata(L, (size_t)(n ? n : 1) * sizeof *res);
    zkl_txn_result_get(c, id, res, n);
    lua_createtable(L, 0, 2);
    lua_createtable(L, n, 0);
    int first_rc = 0;
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, res[i].rc);
        lua_setfield(L, -2, "rc");
        if (res[i].rc != 0 && !first_rc) first_rc = res[i].rc;
        if (res[i].path) {
            lua_pushstring(L, res[i].path);
            lua_setfield(L, -2, "path");
        }
        if (res[i].mzxid) {
            lua_pushinteger(L, res[i].version);
            lua_setfield(L, -2, "version");
            lua_pushinteger(L, (lua_Integer)res[i].mzxid);
            lua_setfield(L, -2, "mzxid");
        }
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "results");
    lua_pushinteger(L, first_rc);
    lua_setfield(L, -2, "rc");
    lua_pushboolean(L, n > 0 && res[0].sent);
    lua_setfield(L, -2, "sent");
    return 1;
}

/* c:result(id) -> { rc, data, children, czxid, mzxid, pzxid, version, ephemeral_owner,
 * num_children, ctime, mtime, cversion }, or for a transaction { rc, results } */
static int l_result(lua_State *L) {
    lclient *u = check(L);
    zkl_op_result r;
    uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
    int rc = zkl_op_result_get(u->c, id, &r);
    if (rc == ZKL_ENOTFOUND) return push_txn_result(L, u->c, id);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, r.rc);
    lua_setfield(L, -2, "rc");
    if (r.data) {
        lua_pushlstring(L, r.data, r.len);
        lua_setfield(L, -2, "data");
    }
    if (r.nchildren > 0 || r.rc == 0) {
        lua_createtable(L, r.nchildren, 0);
        for (int i = 0; i < r.nchildren; i++) {
            lua_pushstring(L, r.children[i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "children");
    }
    lua_pushinteger(L, (lua_Integer)r.czxid);
    lua_setfield(L, -2, "czxid");
    lua_pushinteger(L, (lua_Integer)r.mzxid);
    lua_setfield(L, -2, "mzxid");
    lua_pushinteger(L, (lua_Integer)r.pzxid);
    lua_setfield(L, -2, "pzxid");
    lua_pushinteger(L, r.version);
    lua_setfield(L, -2, "version");
    lua_pushinteger(L, r.num_children);
    lua_setfield(L, -2, "num_children");
    lua_pushinteger(L, (lua_Integer)r.ctime);
    lua_setfield(L, -2, "ctime");
    lua_pushinteger(L, (lua_Integer)r.mtime);
    lua_setfield(L, -2, "mtime");
    lua_pushinteger(L, r.cversion);
    lua_setfield(L, -2, "cversion");
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r.ephemeral_owner);
    lua_pushstring(L, hex);
    lua_setfield(L, -2, "ephemeral_owner");
    return 1;
}

static int l_add_auth(lua_State *L) {
    lclient *u = check(L);
    const char *scheme = luaL_checkstring(L, 2);
    size_t len;
    const char *cred = luaL_checklstring(L, 3, &len);
    int rc = zkl_client_add_auth(u->c, scheme, cred, len);
    if (rc != ZKL_OK) return zkl_lua_fail(L, rc, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

/* c:logs() -> array of the ZooKeeper client's log lines since the last call, or nil if none */
static int l_logs(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    int count;
    log_line *head = take_logs(u, &count);
    if (!head) return 0; /* nil: the client reads this after every pump, mostly with nothing */
    lua_createtable(L, count, 0);
    int i = 1;
    for (log_line *l = head; l; l = l->next) {
        lua_pushlstring(L, l->text, l->len);
        lua_rawseti(L, -2, i++);
    }
    free_log_list(head);
    return 1;
}

/* c:stats() -> table of counters (see zkl_stats) */
static int l_stats(lua_State *L) {
    zkl_stats s;
    zkl_client_stats(check(L)->c, &s);
    lua_createtable(L, 0, 10);
#define F(name)                                                                                    \
    lua_pushinteger(L, (lua_Integer)s.name);                                                       \
    lua_setfield(L, -2, #name)
    F(creates);
    F(lists);
    F(gets);
    F(deletes);
    F(exists);
    F(ops);
    F(watch_events);
    F(acquired);
    F(handoffs);
    F(sessions_expired);
#undef F
    return 1;
}

static int l_tostring(lua_State *L) {
    lclient *u = luaL_checkudata(L, 1, ZKL_CLIENT_MT);
    lua_pushfstring(L, "zklock.client (%s)", u->c ? "open" : "closed");
    return 1;
}

static const luaL_Reg meta[] = {{"__gc", l_gc}, {"__tostring", l_tostring}, {NULL, NULL}};

static const luaL_Reg methods[] = {{"close", l_close},
                                   {"free", l_free},
                                   {"fd", l_fd},
                                   {"timeout", l_timeout},
                                   {"process", l_process},
                                   {"wait", l_wait},
                                   {"flush", l_flush},
                                   {"next_event", l_next_event},
                                   {"wait_for", l_wait_for},
                                   {"park", l_park},
                                   {"take_ready", l_take_ready},
                                   {"state", l_state},
                                   {"session", l_session},
                                   {"session_id_decimal", l_session_id_decimal},
                                   {"session_timeout", l_session_timeout},
                                   {"session_count", l_session_count},
                                   {"loss_ms", l_loss_ms},
                                   {"acquire", l_acquire},
                                   {"release", l_release},
                                   {"cancel", l_cancel},
                                   {"abandon", l_abandon},
                                   {"info", l_info},
                                   {"op", l_op},
                                   {"result", l_result},
                                   {"txn", l_txn},
                                   {"add_auth", l_add_auth},
                                   {"logs", l_logs},
                                   {"stats", l_stats},
                                   {"semaphore", l_semaphore},
                                   {"lease_ids", l_lease_ids},
                                   {"downgrade", l_downgrade},
                                   {"multi", l_multi},
                                   {"multi_result", l_multi_result},
                                   {"acl", l_acl},
                                   {NULL, NULL}};

void zkl_lua_client_register(lua_State *L) {
    luaL_newmetatable(L, ZKL_CLIENT_MT);
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_pushcfunction(L, l_new);
    lua_setfield(L, -2, "new");
}
