/* answered.c - every request the core sends goes through here on its way to the seam (zk.h), so
 * the session layer knows what the server last heard from this client.
 *
 * The server expires a session a session timeout after the last packet it RECEIVED from the
 * client. We cannot see that moment, but we can bound it from below: a request's issue time (taken
 * when it is handed to the ZooKeeper client) comes no later than its send, which comes no later
 * than the server's receipt. So when the server answers a request (ZOK or one of its own refusals,
 * never a code the client makes up), the server heard from us at or after that request's issue
 * time. `answered_at` keeps the issue time of the newest answered request; client.c counts the
 * LOST deadline from it. Watch notifications and session events the server pushes prove nothing
 * about what it received, and never move it.
 *
 * Each request borrows a slot holding its issue time and the caller's completion and context; the
 * ZooKeeper client gets our completion and the slot's number instead, and we hand the answer on.
 * Slots are reused through a free list, so steady traffic allocates nothing. When no slot can be
 * had (out of memory) the request goes out untracked: its answer then moves nothing, which is on
 * the safe side. */
#include <string.h>

#include "internal.h"

enum { K_VOID = 1, K_STAT, K_DATA, K_STRINGS, K_STRING_STAT };

struct zkl_inflight {
    int64_t issued; /* monotonic ms */
    uint64_t seq;   /* its number (issue_seq) */
    union {
        void_completion_t v;
        stat_completion_t st;
        data_completion_t d;
        strings_completion_t strs;
        string_stat_completion_t ss;
    } done;
    const void *data;
    int kind;    /* K_*, 0 while free */
    size_t next; /* free list: next free slot + 1, 0 none */
};

/* The server's own answers: it received the request (and so touched the session) before it sent
 * them. Everything else (ZCONNECTIONLOSS, ZOPERATIONTIMEOUT, ZCLOSING, ZSESSIONEXPIRED,
 * ZINVALIDSTATE, ZSESSIONMOVED, ...) may have been made up by the client, or says nothing about
 * this session being alive: not counted. */
int zkl__server_answered(int rc) {
    switch (rc) {
    case ZOK:
    case ZNONODE:
    case ZNODEEXISTS:
    case ZBADVERSION:
    case ZNOTEMPTY:
    case ZNOAUTH:
    case ZNOCHILDRENFOREPHEMERALS:
    case ZINVALIDACL:
    case ZEPHEMERALONLOCALSESSION:
    case ZNOTREADONLY:
        return 1;
    default:
        return 0;
    }
}

/* A slot for a request issued now, or 0 (untracked). The number is slot index + 1. */
static size_t slot_take(zkl_client *c, int kind, const void *data) {
    if (!c->inflight_free) {
        size_t ncap = c->inflight_cap ? c->inflight_cap * 2 : 16;
        zkl_inflight *n = zkl__alloc(c, ncap * sizeof *n);
        if (!n) return 0;
        if (c->inflight_cap) memcpy(n, c->inflight, c->inflight_cap * sizeof *n);
        for (size_t i = c->inflight_cap; i < ncap; i++) {
            n[i].kind = 0;
            n[i].next = i + 1 < ncap ? i + 2 : 0;
        }
        zkl__free(c, c->inflight, c->inflight_cap * sizeof *c->inflight);
        c->inflight_free = c->inflight_cap + 1;
        c->inflight = n;
        c->inflight_cap = ncap;
    }
    size_t s = c->inflight_free;
    zkl_inflight *f = &c->inflight[s - 1];
    c->inflight_free = f->next;
    f->kind = kind;
    f->data = data;
    f->issued = zkl__now(c);
    f->seq = ++c->issue_seq;
    f->next = 0;
    c->inflight_n++;
    return s;
}

static void slot_put(zkl_client *c, size_t s) {
    zkl_inflight *f = &c->inflight[s - 1];
    f->kind = 0;
    f->next = c->inflight_free;
    c->inflight_free = s;
    c->inflight_n--;
}

/* The answer to slot s (its number as the completion's context) arrived with rc: note it, free the
 * slot and return what the caller needs (the slot array may move once the caller's completion
 * issues more requests). */
static zkl_inflight finish(const void *ctx, int rc) {
    zkl_client *c = zkl__current();
    zkl_inflight f;
    memset(&f, 0, sizeof f);
    size_t s = (size_t)(uintptr_t)ctx;
    if (!c || s == 0 || s > c->inflight_cap || !c->inflight[s - 1].kind) return f; /* not ours */
    f = c->inflight[s - 1];
    slot_put(c, s);
    if (zkl__server_answered(rc)) {
        if (f.issued > c->answered_at) c->answered_at = f.issued;
        if (f.seq > c->answered_seq) c->answered_seq = f.seq;
    }
    return f;
}

static void void_done(int rc, const void *ctx) {
    zkl_inflight f = finish(ctx, rc);
    if (f.done.v) f.done.v(rc, f.data);
}
static void stat_done(int rc, const struct Stat *st, const void *ctx) {
    zkl_inflight f = finish(ctx, rc);
    if (f.done.st) f.done.st(rc, st, f.data);
}
static void data_done(int rc, const char *v, int len, const struct Stat *st, const void *ctx) {
    zkl_inflight f = finish(ctx, rc);
    if (f.done.d) f.done.d(rc, v, len, st, f.data);
}
static void strings_done(int rc, const struct String_vector *sv, const void *ctx) {
    zkl_inflight f = finish(ctx, rc);
    if (f.done.strs) f.done.strs(rc, sv, f.data);
}
static void string_stat_done(int rc, const char *v, const struct Stat *st, const void *ctx) {
    zkl_inflight f = finish(ctx, rc);
    if (f.done.ss) f.done.ss(rc, v, st, f.data);
}

/* After the call: the request went out (keep the slot for its completion) or was refused at once
 * (free the slot). The ZooKeeper client (3.8, zookeeper.c) refuses before it registers a
 * completion with every synchronous code (ZBADARGUMENTS, ZINVALIDSTATE, ZNOWATCHER from
 * remove-watches, ZSYSTEMERROR, ZUNIMPLEMENTED, ...) except ZMARSHALLINGERROR: that one is also
 * returned when queueing the bytes failed after the completion was registered, so the completion
 * may still run and the slot stays for it (a handle reset forgets it at worst). A local
 * remove-watches answers ZOK at once and runs no completion: its caller frees the slot. */
static int issued(zkl_client *c, size_t s, int rc) {
    if (rc == ZOK) c->issued_at = zkl__now(c);
    if (s && rc != ZOK && rc != ZMARSHALLINGERROR) slot_put(c, s);
    return rc;
}

#define CTX(s, data) ((s) ? (const void *)(uintptr_t)(s) : (data))
#define TAKE(c, k, fn, data, field)                                                                \
    size_t s = slot_take(c, k, data);                                                              \
    if (s) c->inflight[s - 1].done.field = fn

int zkl__acreate2(zkl_client *c, const char *path, const char *value, int len,
                  const struct ACL_vector *acl, int mode, string_stat_completion_t done,
                  const void *data) {
    TAKE(c, K_STRING_STAT, done, data, ss);
    return issued(c, s,
                  c->zk->acreate2(c->zh, path, value, len, acl, mode, s ? string_stat_done : done,
                                  CTX(s, data)));
}

int zkl__acreate2_ttl(zkl_client *c, const char *path, const char *value, int len,
                      const struct ACL_vector *acl, int mode, int64_t ttl_ms,
                      string_stat_completion_t done, const void *data) {
    TAKE(c, K_STRING_STAT, done, data, ss);
    return issued(c, s,
                  c->zk->acreate2_ttl(c->zh, path, value, len, acl, mode, ttl_ms,
                                      s ? string_stat_done : done, CTX(s, data)));
}

int zkl__adelete(zkl_client *c, const char *path, int version, void_completion_t done,
                 const void *data) {
    TAKE(c, K_VOID, done, data, v);
    return issued(c, s, c->zk->adelete(c->zh, path, version, s ? void_done : done, CTX(s, data)));
}

int zkl__aexists(zkl_client *c, const char *path, int watch, stat_completion_t done,
                 const void *data) {
    TAKE(c, K_STAT, done, data, st);
    return issued(c, s, c->zk->aexists(c->zh, path, watch, s ? stat_done : done, CTX(s, data)));
}

int zkl__awexists(zkl_client *c, const char *path, watcher_fn watcher, void *wctx,
                  stat_completion_t done, const void *data) {
    TAKE(c, K_STAT, done, data, st);
    return issued(c, s,
                  c->zk->awexists(c->zh, path, watcher, wctx, s ? stat_done : done, CTX(s, data)));
}

int zkl__aget(zkl_client *c, const char *path, int watch, data_completion_t done,
              const void *data) {
    TAKE(c, K_DATA, done, data, d);
    return issued(c, s, c->zk->aget(c->zh, path, watch, s ? data_done : done, CTX(s, data)));
}

int zkl__awget(zkl_client *c, const char *path, watcher_fn watcher, void *wctx,
               data_completion_t done, const void *data) {
    TAKE(c, K_DATA, done, data, d);
    return issued(c, s,
                  c->zk->awget(c->zh, path, watcher, wctx, s ? data_done : done, CTX(s, data)));
}

int zkl__aget_children(zkl_client *c, const char *path, int watch, strings_completion_t done,
                       const void *data) {
    TAKE(c, K_STRINGS, done, data, strs);
    return issued(c, s,
                  c->zk->aget_children(c->zh, path, watch, s ? strings_done : done, CTX(s, data)));
}

int zkl__awget_children(zkl_client *c, const char *path, watcher_fn watcher, void *wctx,
                        strings_completion_t done, const void *data) {
    TAKE(c, K_STRINGS, done, data, strs);
    return issued(
        c, s,
        c->zk->awget_children(c->zh, path, watcher, wctx, s ? strings_done : done, CTX(s, data)));
}

int zkl__aset(zkl_client *c, const char *path, const char *buf, int len, int version,
              stat_completion_t done, const void *data) {
    TAKE(c, K_STAT, done, data, st);
    return issued(c, s,
                  c->zk->aset(c->zh, path, buf, len, version, s ? stat_done : done, CTX(s, data)));
}

int zkl__amulti(zkl_client *c, int count, const zoo_op_t *ops, zoo_op_result_t *results,
                void_completion_t done, const void *data) {
    TAKE(c, K_VOID, done, data, v);
    return issued(c, s,
                  c->zk->amulti(c->zh, count, ops, results, s ? void_done : done, CTX(s, data)));
}

/* zookeeper.h declares this completion as void_completion_t *; the client stores and calls it as
 * a plain void_completion_t (see queue.c, zkl__remove_watches) */
int zkl__aremove_all_watches(zkl_client *c, const char *path, ZooWatcherType type, int local,
                             void_completion_t done, const void *data) {
    TAKE(c, K_VOID, done, data, v);
    void_completion_t fn = s ? void_done : done;
    int rc =
        issued(c, s,
               c->zk->aremove_all_watches(c->zh, path, type, local,
                                          (void_completion_t *)(void (*)(void))fn, CTX(s, data)));
    if (s && local && rc == ZOK) slot_put(c, s); /* done locally: no completion runs */
    return rc;
}

/* The ZooKeeper client forgets one watcher of path (its function and context) at once, locally:
 * no request, no completion. The server's watch, if armed, stays until it fires (the client then
 * finds no watcher) or the connection ends; a reconnection's SetWatches no longer lists the path
 * unless another watcher of this kind remains. */
int zkl__forget_watcher(zkl_client *c, const char *path, ZooWatcherType type, watcher_fn watcher,
                        void *wctx) {
    if (!c->zh) return ZINVALIDSTATE;
    return c->zk->aremove_watches(c->zh, path, type, watcher, wctx, 1, NULL, NULL);
}

/* The handle is gone (closed or replaced): every completion it owed has run (the client runs them
 * with ZCLOSING on close), except those of requests refused in a way that may or may not have
 * registered one. Forget them. */
void zkl__inflight_reset(zkl_client *c) {
    size_t i;
    c->inflight_free = 0;
    for (i = c->inflight_cap; i > 0; i--) {
        c->inflight[i - 1].kind = 0;
        c->inflight[i - 1].next = c->inflight_free;
        c->inflight_free = i;
    }
    c->inflight_n = 0;
}

void zkl__inflight_free(zkl_client *c) {
    zkl__free(c, c->inflight, c->inflight_cap * sizeof *c->inflight);
    c->inflight = NULL;
    c->inflight_cap = c->inflight_free = c->inflight_n = 0;
}

/* ---------------------------------------------------------------- heartbeat */

static void heartbeat_reply(int rc, const struct Stat *st, const void *data) {
    (void)rc, (void)st, (void)data; /* the answer itself is all it is for (see finish) */
}

/* A cheap request of our own: exists("/") without a watch. Under a chroot a missing chroot node
 * answers ZNONODE, which counts as an answer all the same. */
void zkl__heartbeat(zkl_client *c) {
    if (!c->zh) return;
    c->heartbeats++;
    if (zkl__aexists(c, "/", 0, heartbeat_reply, NULL) != ZOK)
        c->issued_at = zkl__now(c); /* refused: try again a quarter timeout later, not at once */
}
