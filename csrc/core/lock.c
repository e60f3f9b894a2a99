/* lock.c - the lock recipes as state machines (Curator's InterProcessMutex and
 * InterProcessReadWriteLock wire format), plus plain znode operations.
 *
 * Acquire:  [parents] -> create + list (pipelined: one round trip) -> held, or
 *           getData+watch on the predecessor -> (deleted) -> held if it was the head, else list.
 * Give up:  timeout, cancel, error or abandon -> delete own node (wait for a late create reply;
 *           scan by protected prefix if a create's outcome is unknown), retried while the session
 *           lives. The user is told at once; the cleanup finishes in the background.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"

/* Replies after which the request's outcome is unknown. ZRUNTIMEINCONSISTENCY: the ZooKeeper
 * client dropped a connection without failing the requests sent on it, and fails them with this
 * code when the first reply on the next connection does not match. */
static int conn_lost(int rc) {
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZRUNTIMEINCONSISTENCY;
}
/* Replies that mean the handle is going away: the session machinery decides what happens. */
static int handle_gone(int rc) {
    return rc == ZSESSIONEXPIRED || rc == ZCLOSING || rc == ZINVALIDSTATE || rc == ZSESSIONMOVED;
}

/* Look up the op named by a completion token; drops the reference the request held. */
static zkl_op *reply_op(const void *token, zkl_client **cp) {
    zkl_client *c = zkl__current();
    *cp = c;
    if (!c) return NULL;
    zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(token));
    if (op) op->refs--;
    return op;
}

static char *join_path(zkl_client *c, const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = zkl__alloc(c, a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* A fresh "_c_<uuid4>-<token>" (Curator's protected-mode name), or NULL. */
static char *new_prefix(zkl_client *c, const char *token) {
    unsigned char rnd[16];
    char buf[80];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return NULL;
    if (zkl__protected_prefix_named(buf, sizeof buf, rnd, token) < 0) return NULL;
    return zkl__strdup(c, buf);
}

static void set_str(zkl_client *c, char **slot, char *value) {
    zkl__strfree(c, *slot);
    *slot = value;
}

static void leases_clear(zkl_client *c, zkl_op *op) {
    for (int i = 0; i < op->nleases; i++) zkl__strfree(c, op->leases[i]);
    op->nleases = 0;
}

void zkl__lock_free_fields(zkl_client *c, zkl_op *op) {
    zkl__strfree(c, op->dir);
    zkl__strfree(c, op->prefix);
    zkl__strfree(c, op->node);
    zkl__strfree(c, op->watch_path);
    zkl__strfree(c, op->fixed_name);
    zkl__strfree(c, op->lease_dir);
    zkl__strfree(c, op->lease_prefix);
    leases_clear(c, op);
    zkl__free(c, op->leases, (size_t)op->qty * sizeof *op->leases);
    zkl__free(c, op->lease_czxid, (size_t)op->qty * sizeof *op->lease_czxid);
    zkl__free(c, op->split_ids, (size_t)op->qty * sizeof *op->split_ids);
}

/* A background op that deletes `node` (or, with node NULL, every child of dir named with
 * prefix): used for nodes an op no longer owns itself (leases of a failed semaphore acquire,
 * the internal mutex node of a granted one). No event is ever reported for it. */
static void spawn_cleanup_as(zkl_client *c, const char *dir, const char *prefix, const char *node,
                             int held_head) {
    zkl_op *op = zkl__op_new(c, OPK_LOCK);
    if (!op) return; /* out of memory: the node stays until the session ends */
    op->user_gone = 1;
    op->held_head = held_head;
    op->phase = P_CLEANUP;
    op->recipe = ZKL_MUTEX;
    op->dir = zkl__strdup(c, dir);
    op->prefix = zkl__strdup(c, prefix);
    op->node = node ? zkl__strdup(c, node) : NULL;
    op->unknown = node == NULL;
    if (!op->dir || !op->prefix || (node && !op->node)) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return;
    }
    zkl__lock_kick(c, op);
    zkl__op_maybe_free(c, op);
}

static void spawn_cleanup(zkl_client *c, const char *dir, const char *prefix, const char *node) {
    spawn_cleanup_as(c, dir, prefix, node, 0);
}

/* Give every lease this op created (or may have created) to background cleanup. */
static void leases_abandon(zkl_client *c, zkl_op *op) {
    for (int i = 0; i < op->nleases; i++) spawn_cleanup(c, op->lease_dir, op->lease_prefix, op->leases[i]);
    if (op->lease_unknown) spawn_cleanup(c, op->lease_dir, op->lease_prefix, NULL);
    leases_clear(c, op);
    op->lease_unknown = 0;
}

static void watch_fired(zhandle_t *zh, int type, int state, const char *path, void *token);
static void lease_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *token);

/* Is another live op of this client waiting on a watch of the same path and kind? Then the
 * server-side watch (one per path and session) must stay. */
static int watch_shared(zkl_client *c, zkl_op *op, const char *path, int lease) {
    for (zkl_op *o = c->ops; o; o = o->next) {
        if (o == op || o->kind != OPK_LOCK || o->phase != P_ACQUIRING) continue;
        if (lease ? (o->stage == 2 && o->lease_dir && strcmp(o->lease_dir, path) == 0 &&
                     (o->step == S_LEASE_WAIT ||
                     ((o->step == S_LEASE_LIST || o->step == S_LEASE_CREATE) && o->lease_watched)))
                  : (o->watch_path && strcmp(o->watch_path, path) == 0 &&
                     (o->step == S_WAIT || o->step == S_DATA)))
            return 1;
    }
    return 0;
}

static void remove_reply(int rc, const void *data) { (void)rc, (void)data; }

/* Take back the watch an abandoned waiter left armed, so a release does not wake a waiter that is
 * gone (and the server does not keep the watch until then). Best effort: without a connection the
 * server drops it with the session at the latest. */
static void drop_watch(zkl_client *c, zkl_op *op, int lease) {
    const char *path = lease ? op->lease_dir : op->watch_path;
    if (!path || !c->zh || !op->watch_token || watch_shared(c, op, path, lease)) return;
    /* Remove every watch of this kind on the path (we checked no other op of ours needs it):
     * removing one watcher by its function and context only sends CheckWatches, which leaves the
     * server's watch in place. zookeeper.h declares the completion as void_completion_t *, but the
     * client stores and calls it as a plain void_completion_t (and asserts it is set). */
    c->zk->aremove_all_watches(c->zh, path, lease ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA, 0,
                            (void_completion_t *)(void (*)(void))remove_reply, NULL);
    op->watch_token = NULL;
}

/* ---------------------------------------------------------------- outcomes */

static void lease_stage_start(zkl_client *c, zkl_op *op);

static void acquired(zkl_client *c, zkl_op *op) {
    if (op->stage == 1) { /* the semaphore's internal mutex: now count leases while holding it */
        lease_stage_start(c, op);
        return;
    }
    c->stats.acquired++;
    op->phase = P_HELD;
    op->granted = 1;
    op->step = 0;
    op->deadline = 0;
    op->gen++;
    zkl__emit(c, op, ZKL_EV_ACQUIRED, ZKL_OK);
}

void zkl__lock_fail(zkl_client *c, zkl_op *op, int status) {
    if (op->phase != P_ACQUIRING) return;
    zkl__emit(c, op, ZKL_EV_FAILED, status);
    if (op->step == S_WAIT) drop_watch(c, op, 0);
    else if (op->step == S_LEASE_WAIT) drop_watch(c, op, 1);
    else if (op->step == S_DATA || op->step == S_LEASE_LIST || op->step == S_LEASE_CREATE)
        op->drop_on_reply = 1;
    if (op->stage) leases_abandon(c, op);
    if (op->stage == 2) op->held_head = 1; /* its node is the internal mutex it held */
    op->phase = P_CLEANUP;
    op->gen++; /* pending list/getData replies and armed watches are now stale */
    zkl__lock_kick(c, op);
}

void zkl__lock_session_lost(zkl_client *c, zkl_op *op) {
    /* Every ephemeral node of the old session is gone with it. */
    set_str(c, &op->node, NULL);
    leases_clear(c, op);
    op->lease_unknown = 0;
    op->unknown = 0;
    op->gen++;
    switch (op->phase) {
    case P_ACQUIRING:
        zkl__emit(c, op, ZKL_EV_FAILED, ZKL_ESESSION);
        op->phase = P_DONE;
        break;
    case P_HELD:
        zkl__emit(c, op, ZKL_EV_LOCK_STATE, ZKL_LOCK_LOST);
        op->phase = op->user_gone ? P_DONE : P_LOST;
        break;
    case P_RELEASING:
        zkl__emit(c, op, ZKL_EV_RELEASED, ZKL_ELOST);
        op->phase = P_DONE;
        break;
    case P_CLEANUP: op->phase = P_DONE; break;
    default: break;
    }
}

void zkl__lock_suspended(zkl_client *c, zkl_op *op, int suspended) {
    if (op->phase == P_HELD)
        zkl__emit(c, op, ZKL_EV_LOCK_STATE, suspended ? ZKL_LOCK_SUSPENDED : ZKL_LOCK_RECONNECTED);
}

/* ---------------------------------------------------------------- requests */

static void create_reply(int rc, const char *name, const struct Stat *st, const void *token);
static void list_reply(int rc, const struct String_vector *v, const void *token);
static void data_reply(int rc, const char *v, int len, const struct Stat *st, const void *token);
static void delete_reply(int rc, const void *token);
static void scan_reply(int rc, const struct String_vector *v, const void *token);
static void stat_reply(int rc, const struct Stat *st, const void *token);
static void parent_reply(int rc, const char *name, const struct Stat *st, const void *token);
static void watch_fired(zhandle_t *zh, int type, int state, const char *path, void *token);

/* Issue a request; on a synchronous failure treat it like a lost connection (retried when the
 * session is connected again) unless the handle is unusable. */
#define ISSUE(c, op, call)                         \
    do {                                           \
        int rc_ = (call);                          \
        if (rc_ == ZOK) op->refs++;                \
        else issue_failed(c, op, rc_);             \
    } while (0)

static void issue_failed(zkl_client *c, zkl_op *op, int rc) {
    if (rc == ZMARSHALLINGERROR || rc == ZBADARGUMENTS) {
        if (op->phase == P_ACQUIRING) zkl__lock_fail(c, op, rc);
    }
    /* otherwise the connection is gone; the next CONNECTED state kicks the op again */
}

/* ---------------------------------------------------------------- shared listings */

/* Listings of one lock dir asked for before the next flush go out as one getChildren. The server
 * answers a session's requests in order, so a listing sent after an op's create (or after the
 * watch notification that made it list again) reflects it: one reply serves every op that joined
 * before the send. With many waiters of one client on one lock the server answers one listing
 * per flush instead of one per waiter (10,000 pipelined listings of 10,000 children each exhaust
 * its memory). The flush runs at the start and end of every process(). */
struct zkl_listing {
    zkl_listing *next;
    zkl_client *c;
    char *dir;
    size_t n, cap;
    const void **tokens; /* op tokens (id and generation) at the time each op joined */
};

static void listing_free(zkl_listing *l) {
    zkl_client *c = l->c;
    zkl__strfree(c, l->dir);
    zkl__free(c, l->tokens, l->cap * sizeof *l->tokens);
    zkl__free(c, l, sizeof *l);
}

/* op joins the next listing of its dir with its current token: 0, or -1 when out of memory. */
static int listing_join(zkl_client *c, zkl_op *op) {
    zkl_listing *l;
    for (l = c->listings; l; l = l->next)
        if (strcmp(l->dir, op->dir) == 0) break;
    if (!l) {
        l = zkl__alloc(c, sizeof *l);
        if (!l) return -1;
        memset(l, 0, sizeof *l);
        l->c = c;
        l->dir = zkl__strdup(c, op->dir);
        if (!l->dir) {
            zkl__free(c, l, sizeof *l);
            return -1;
        }
        l->next = c->listings;
        c->listings = l;
    }
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 4;
        const void **t = zkl__alloc(c, ncap * sizeof *t);
        if (!t) return -1; /* an empty listing is simply freed at the flush */
        if (l->n) memcpy(t, l->tokens, l->n * sizeof *t);
        zkl__free(c, l->tokens, l->cap * sizeof *l->tokens);
        l->tokens = t;
        l->cap = ncap;
    }
    l->tokens[l->n++] = ZKL_TOKEN(op);
    op->refs++;
    return 0;
}

static void list_reply(int rc, const struct String_vector *v, const void *token);

static void listing_reply(int rc, const struct String_vector *v, const void *data) {
    zkl_listing *l = (zkl_listing *)(uintptr_t)data;
    zkl_client *c = l->c;
    c->sorted_for = v; /* evaluate() sorts once per recipe and shares the result */
    for (size_t i = 0; i < l->n; i++) list_reply(rc, v, l->tokens[i]);
    zkl__free(c, (void *)c->sorted, c->sorted_n * sizeof *c->sorted);
    c->sorted_for = NULL;
    c->sorted = NULL;
    c->sorted_n = 0;
    listing_free(l);
}

void zkl__listings_flush(zkl_client *c) {
    zkl_listing **pp = &c->listings;
    while (*pp) {
        zkl_listing *l = *pp;
        if (l->n == 0) {
            *pp = l->next;
            listing_free(l);
            continue;
        }
        if (!c->zh) return; /* between handles: sent with the next one (stale tokens are ignored) */
        int rc = c->zk->aget_children(c->zh, l->dir, 0, listing_reply, l);
        if (rc != ZOK) { /* the handle refused it: keep it for the next flush */
            pp = &l->next;
            continue;
        }
        c->stats.lists++;
        *pp = l->next; /* the reply owns it now */
    }
}

/* The client is closing: unsent listings go, releasing the ops they kept. */
void zkl__listings_drop(zkl_client *c) {
    while (c->listings) {
        zkl_listing *l = c->listings;
        c->listings = l->next;
        for (size_t i = 0; i < l->n; i++) {
            zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(l->tokens[i]));
            if (op) {
                op->refs--;
                zkl__op_maybe_free(c, op);
            }
        }
        listing_free(l);
    }
}

/* A listing of op->dir for op's current token: shared when possible, else its own request. */
static void request_list(zkl_client *c, zkl_op *op) {
    if (listing_join(c, op) == 0) return;
    c->stats.lists++;
    ISSUE(c, op, c->zk->aget_children(c->zh, op->dir, 0, list_reply, ZKL_TOKEN(op)));
}

static void issue_create_and_list(zkl_client *c, zkl_op *op) {
    char *path = join_path(c, op->dir, op->fixed_name ? op->fixed_name : op->prefix);
    if (!path) {
        zkl__lock_fail(c, op, ZKL_ENOMEM);
        return;
    }
    op->gen++;
    op->step = S_CREATE;
    op->create_inflight = 1;
    c->stats.creates++;
    int rc = c->zk->acreate2(c->zh, path, c->identity, (int)c->identity_len, zkl__acl(c, op->acl),
                          op->fixed_name ? ZOO_EPHEMERAL : ZOO_EPHEMERAL_SEQUENTIAL, create_reply,
                          ZKL_TOKEN(op));
    zkl__strfree(c, path);
    if (rc != ZOK) {
        op->create_inflight = 0;
        op->step = S_START;
        issue_failed(c, op, rc);
        return;
    }
    op->refs++;
    if (op->grant_on_create) return; /* nothing to wait for: no list needed */
    /* Pipelined: the listing goes out after the create, so it includes our node. */
    request_list(c, op);
}

static void issue_parents(zkl_client *c, zkl_op *op) {
    /* Create every ancestor and the lock dir itself as containers, as Curator does; NODEEXISTS is
     * fine. All pipelined ahead of the create that needs them. */
    size_t len = strlen(op->dir), i;
    char *buf = zkl__alloc(c, len + 1);
    if (!buf) return;
    memcpy(buf, op->dir, len + 1);
    for (i = 1; i <= len; i++) {
        if (i == len || buf[i] == '/') {
            char save = buf[i];
            buf[i] = '\0';
            c->stats.creates++;
            ISSUE(c, op, c->zk->acreate2(c->zh, buf, "", 0, zkl__acl(c, op->acl), ZOO_CONTAINER,
                                      parent_reply, ZKL_TOKEN(op)));
            buf[i] = save;
        }
    }
    zkl__free(c, buf, len + 1);
}

static void issue_list(zkl_client *c, zkl_op *op) {
    op->gen++;
    op->step = S_LIST;
    request_list(c, op);
}

static void issue_delete(zkl_client *c, zkl_op *op) {
    op->delete_inflight = 1;
    c->stats.deletes++;
    int rc = c->zk->adelete(c->zh, op->node, -1, delete_reply, ZKL_TOKEN(op));
    if (rc == ZOK) op->refs++;
    else op->delete_inflight = 0;
}

static void issue_scan(zkl_client *c, zkl_op *op) {
    op->scan_inflight = 1;
    c->stats.lists++;
    if (op->phase == P_ACQUIRING) op->step = S_SCANNING;
    int rc = c->zk->aget_children(c->zh, op->dir, 0, scan_reply, ZKL_TOKEN(op));
    if (rc == ZOK) op->refs++;
    else {
        op->scan_inflight = 0;
        if (op->phase == P_ACQUIRING) op->step = S_SCAN;
    }
}

static void issue_lease_creates(zkl_client *c, zkl_op *op);
static void issue_lease_list(zkl_client *c, zkl_op *op);
static void issue_lease_scan(zkl_client *c, zkl_op *op);

/* Move the op forward as far as the connection allows. Called after every change. */
void zkl__lock_kick(zkl_client *c, zkl_op *op) {
    int connected = zkl__connected(c);
    switch (op->phase) {
    case P_ACQUIRING:
        if (!connected) return;
        if (op->step == S_START) issue_create_and_list(c, op);
        else if (op->step == S_RELIST) issue_list(c, op);
        else if (op->step == S_SCAN) issue_scan(c, op);
        else if (op->step == S_LEASE_START) issue_lease_creates(c, op);
        else if (op->step == S_LEASE_RELIST) issue_lease_list(c, op);
        else if (op->step == S_LEASE_SCAN) issue_lease_scan(c, op);
        return;
    case P_RELEASING:
    case P_CLEANUP:
        if (op->create_inflight || op->delete_inflight || op->scan_inflight) return;
        if (op->node) {
            if (connected) issue_delete(c, op);
        } else if (op->unknown) {
            if (connected) issue_scan(c, op);
        } else {
            if (op->phase == P_RELEASING) zkl__emit(c, op, ZKL_EV_RELEASED, op->release_status);
            op->phase = P_DONE;
        }
        return;
    default: return;
    }
}

/* ---------------------------------------------------------------- replies */

static void parent_reply(int rc, const char *name, const struct Stat *st, const void *token) {
    zkl_client *c;
    (void)name, (void)st;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    if (rc != ZOK && rc != ZNODEEXISTS && !conn_lost(rc) && !handle_gone(rc) && !op->parent_rc)
        op->parent_rc = rc; /* the first refusal is the cause; later ones follow from it */
    zkl__op_maybe_free(c, op);
}

static void create_reply(int rc, const char *name, const struct Stat *st, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    op->create_inflight = 0;
    if (rc == ZOK) {
        set_str(c, &op->node, zkl__strdup(c, name));
        op->czxid = st ? st->czxid : 0;
        op->unknown = 0;
        if (!op->node) {
            op->unknown = 1; /* out of memory: find it again by prefix and delete it */
            zkl__lock_fail(c, op, ZKL_ENOMEM);
        }
    } else if (conn_lost(rc)) {
        op->unknown = 1; /* the server may have created it: protected-mode recovery */
    }
    if (op->phase != P_ACQUIRING) {
        zkl__lock_kick(c, op); /* abandoned meanwhile: delete what was created */
        zkl__op_maybe_free(c, op);
        return;
    }
    if (rc == ZOK) {
        if (op->grant_on_create) acquired(c, op);
        else op->step = S_LIST; /* the pipelined list reply comes next */
    } else if (rc == ZNONODE && op->parent_rc) {
        zkl__lock_fail(c, op, op->parent_rc); /* e.g. ZNOAUTH: we may not create the parent */
    } else if (rc == ZNONODE && op->parents_tried < 2 && !op->grant_on_create) {
        op->parents_tried++;
        op->step = S_START;
        issue_parents(c, op);
        issue_create_and_list(c, op); /* also makes the pipelined list reply stale */
    } else if (conn_lost(rc)) {
        op->gen++;
        op->step = S_SCAN;
        zkl__lock_kick(c, op);
    } else if (handle_gone(rc)) {
        op->gen++;
        op->step = S_START;
    } else {
        zkl__lock_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

static void restart_attempt(zkl_client *c, zkl_op *op) {
    /* Own node vanished (deleted by someone else, or its parent was removed): queue again. */
    set_str(c, &op->node, NULL);
    op->step = S_START;
    zkl__lock_kick(c, op);
}

static void evaluate(zkl_client *c, zkl_op *op, const struct String_vector *v) {
    int n = v ? v->count : 0;
    const char *own = strrchr(op->node, '/') + 1;
    const char **names = zkl__alloc(c, (size_t)(n ? n : 1) * sizeof *names);
    zkl__sort_item *scratch = zkl__alloc(c, (size_t)(n ? n : 1) * sizeof *scratch);
    if (!names || !scratch) {
        zkl__free(c, names, (size_t)(n ? n : 1) * sizeof *names);
        zkl__free(c, scratch, (size_t)(n ? n : 1) * sizeof *scratch);
        zkl__lock_fail(c, op, ZKL_ENOMEM);
        return;
    }
    if (v && v == c->sorted_for && c->sorted && c->sorted_recipe == (int)op->recipe) {
        memcpy(names, c->sorted, (size_t)n * sizeof *names); /* a shared listing, sorted already */
    } else {
        for (int i = 0; i < n; i++) names[i] = v->data[i];
        zkl__sort_children(names, n, op->recipe, scratch);
        if (v && v == c->sorted_for && n > 0) { /* keep it for the other ops of this listing */
            const char **keep = zkl__alloc(c, (size_t)n * sizeof *keep);
            if (keep) {
                zkl__free(c, (void *)c->sorted, c->sorted_n * sizeof *c->sorted);
                memcpy(keep, names, (size_t)n * sizeof *keep);
                c->sorted = keep;
                c->sorted_n = (size_t)n;
                c->sorted_recipe = (int)op->recipe;
            }
        }
    }
    zkl__pick pick;
    zkl__pick_predecessor(names, n, own, op->recipe, &pick);
    if (pick.wrapped && !op->warned_wrap) {
        op->warned_wrap = 1;
        zkl__emit(c, op, ZKL_EV_WARNING, ZKL_ESEQWRAP);
    }
    if (pick.own < 0) {
        restart_attempt(c, op);
    } else if (pick.holds || op->grant_on_create) {
        acquired(c, op);
    } else if (op->try_once) {
        zkl__lock_fail(c, op, ZKL_ETIMEDOUT);
    } else {
        char *wp = join_path(c, op->dir, names[pick.watch]);
        if (!wp) {
            zkl__lock_fail(c, op, ZKL_ENOMEM);
        } else {
            set_str(c, &op->watch_path, wp);
            op->watch_is_head = pick.watch_is_head;
            op->step = S_DATA;
            op->watch_token = ZKL_TOKEN(op);
            /* getData, not exists: on a node that is already gone it leaves no watch behind */
            c->stats.gets++;
            ISSUE(c, op, c->zk->awget(c->zh, wp, watch_fired, (void *)ZKL_TOKEN(op), data_reply,
                                   ZKL_TOKEN(op)));
        }
    }
    zkl__free(c, names, (size_t)(n ? n : 1) * sizeof *names);
    zkl__free(c, scratch, (size_t)(n ? n : 1) * sizeof *scratch);
}

static void list_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    if (op->phase == P_ACQUIRING && op->step == S_LIST && op->gen == ZKL_TOKEN_GEN(token)) {
        if (rc == ZOK) evaluate(c, op, v);
        else if (conn_lost(rc)) {
            op->step = S_RELIST;
            zkl__lock_kick(c, op);
        } else if (rc == ZNONODE) restart_attempt(c, op);
        else if (!handle_gone(rc)) zkl__lock_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

/* The predecessor is gone: with a mutex, if it was the head at our last listing, nothing can sort
 * before us any more (sequence numbers only grow), so the lock is ours without listing again. */
/* Was the deleted predecessor a mutex node that this client itself held? Then it was the head
 * when granted, and nothing sorted between it and us (it was our immediate predecessor), so we
 * are the head now. The server notifies the watch before it answers our own delete, so the
 * releasing op is still in the table; if not, the caller lists as usual. Mutex only, like the
 * handoff above: a write lock's holder may have downgraded to a read node that sorts before us.
 * That includes the semaphore's internal mutex (stage 1), whose holder gives its node back
 * through a cleanup op marked held_head. */
static int own_exclusive_predecessor(zkl_client *c, const zkl_op *op) {
    if (op->recipe != ZKL_MUTEX || op->stage > 1 || !op->watch_path) return 0;
    for (const zkl_op *o = c->ops; o; o = o->next) {
        if (o == op || o->kind != OPK_LOCK || o->recipe != ZKL_MUTEX) continue;
        /* a held user mutex, or the semaphore's internal mutex given back by its holder */
        int head = (o->granted && !o->stage) || (o->held_head && o->phase == P_CLEANUP);
        if (head && o->node && strcmp(o->node, op->watch_path) == 0) return 1;
    }
    return 0;
}

static void predecessor_gone(zkl_client *c, zkl_op *op) {
    if (op->watch_is_head || own_exclusive_predecessor(c, op)) {
        c->stats.handoffs++;
        acquired(c, op);
    }
    else issue_list(c, op);
}

static void data_reply(int rc, const char *v, int len, const struct Stat *st, const void *token) {
    zkl_client *c;
    (void)v, (void)len, (void)st;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    if (op->drop_on_reply && op->phase != P_ACQUIRING && rc == ZOK && op->watch_token == token) {
        op->drop_on_reply = 0;
        drop_watch(c, op, 0); /* gave up while this getData was in flight: its watch is now set */
    }
    if (op->phase == P_ACQUIRING && op->step == S_DATA && op->gen == ZKL_TOKEN_GEN(token)) {
        if (rc == ZOK) op->step = S_WAIT;
        else if (rc == ZNONODE) predecessor_gone(c, op);
        else if (conn_lost(rc)) {
            op->step = S_RELIST;
            zkl__lock_kick(c, op);
        } else if (!handle_gone(rc)) zkl__lock_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

static void watch_fired(zhandle_t *zh, int type, int state, const char *path, void *token) {
    (void)state, (void)path;
    zkl_client *c = zkl__current(); /* watchers run inside the client's own process() */
    if (type == ZOO_SESSION_EVENT || !c || zh != c->zh) return;
    c->stats.watch_events++;
    zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(token));
    if (!op || op->phase != P_ACQUIRING || op->gen != ZKL_TOKEN_GEN(token)) return;
    if (op->step != S_WAIT && op->step != S_DATA) return;
    if (type == ZOO_DELETED_EVENT) predecessor_gone(c, op);
    else issue_list(c, op); /* data changed (e.g. a revocation request): look again */
}

static void delete_reply(int rc, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    op->delete_inflight = 0;
    if (rc == ZOK || rc == ZNONODE) {
        set_str(c, &op->node, NULL);
    } else if (!conn_lost(rc) && !handle_gone(rc)) {
        /* e.g. ZNOAUTH: the node cannot be deleted by us; report it and stop trying */
        if (op->phase == P_RELEASING) op->release_status = rc;
        else zkl__emit(c, NULL, ZKL_EV_WARNING, rc);
        set_str(c, &op->node, NULL);
        op->unknown = 0;
    }
    zkl__lock_kick(c, op); /* connection loss: retried by the kick after reconnect */
    zkl__op_maybe_free(c, op);
}

static void scan_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    op->scan_inflight = 0;
    const char *found = NULL;
    if (rc == ZOK && v) {
        for (int i = 0; i < v->count && !found; i++)
            if (zkl__has_prefix(v->data[i], op->prefix)) found = v->data[i];
    }
    if (rc == ZOK || rc == ZNONODE) {
        if (found) set_str(c, &op->node, join_path(c, op->dir, found));
        /* Cleaning up: after deleting this one, scan again (a semaphore may have made several). */
        if (!found || op->phase == P_ACQUIRING) op->unknown = 0;
    }
    if (op->phase == P_ACQUIRING && op->step == S_SCANNING) {
        if (rc == ZOK && found && op->node) {
            op->step = S_STAT; /* adopt it: read its czxid for the fencing token, then list */
            c->stats.exists++;
            ISSUE(c, op, c->zk->aexists(c->zh, op->node, 0, stat_reply, ZKL_TOKEN(op)));
        } else if (rc == ZOK || rc == ZNONODE) {
            op->step = S_START;
            zkl__lock_kick(c, op);
        } else if (conn_lost(rc) || handle_gone(rc)) {
            op->step = S_SCAN;
            zkl__lock_kick(c, op);
        } else {
            zkl__lock_fail(c, op, rc);
        }
    } else {
        zkl__lock_kick(c, op);
    }
    zkl__op_maybe_free(c, op);
}

static void stat_reply(int rc, const struct Stat *st, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    if (op->phase == P_ACQUIRING && op->step == S_STAT) {
        if (rc == ZOK && st) {
            op->czxid = st->czxid;
            issue_list(c, op);
        } else if (rc == ZNONODE) {
            restart_attempt(c, op);
        } else if (conn_lost(rc) || handle_gone(rc)) {
            op->step = S_SCAN; /* look for it again */
            zkl__lock_kick(c, op);
        } else {
            zkl__lock_fail(c, op, rc);
        }
    }
    zkl__op_maybe_free(c, op);
}


/* ---------------------------------------------------------------- lease semaphore, stage 2
 * Curator's InterProcessSemaphoreV2 order: holding the internal mutex, create our lease(s), then
 * count every lease (ours included) with a children watch; wait, still holding the mutex, until
 * the count is within max; then release the mutex. Only the mutex holder ever watches leases. */

static void lease_create_reply(int rc, const char *name, const struct Stat *st, const void *token);
static void lease_list_reply(int rc, const struct String_vector *v, const void *token);
static void lease_scan_reply(int rc, const struct String_vector *v, const void *token);
static void lease_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *token);

static void lease_stage_start(zkl_client *c, zkl_op *op) {
    op->stage = 2;
    op->step = S_LEASE_START;
    op->gen++;
    zkl__lock_kick(c, op);
}

/* FNV-1a: the lease-listing hint keeps a hash, not a copy, of the dir (a collision only costs
 * a request). */
static uint64_t dir_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void issue_lease_creates(zkl_client *c, zkl_op *op) {
    char *path = join_path(c, op->lease_dir, op->lease_prefix);
    if (!path) {
        zkl__lock_fail(c, op, ZKL_ENOMEM);
        return;
    }
    op->gen++;
    op->step = S_LEASE_CREATE;
    op->watch_token = ZKL_TOKEN(op);
    if (op->lease_nonode) {
        /* <path>/leases is missing (first use, or reaped): make it, as a container */
        op->lease_nonode = 0;
        c->stats.creates++;
        ISSUE(c, op, c->zk->acreate2(c->zh, op->lease_dir, "", 0, zkl__acl(c, op->acl), ZOO_CONTAINER,
                                  parent_reply, ZKL_TOKEN(op)));
    }
    for (int i = op->nleases; i < op->qty; i++) {
        c->stats.creates++;
        int rc = c->zk->acreate2(c->zh, path, c->identity, (int)c->identity_len, zkl__acl(c, op->acl),
                              ZOO_EPHEMERAL_SEQUENTIAL, lease_create_reply, ZKL_TOKEN(op));
        if (rc == ZOK) {
            op->refs++;
            op->lease_inflight++;
        }
    }
    zkl__strfree(c, path);
    /* pipelined behind the creates; the step stays S_LEASE_CREATE until the list answers */
    int watched = !(c->lease_hint_dir == dir_hash(op->lease_dir) && !c->lease_hint_full);
    op->lease_watched = watched;
    c->stats.lists++;
    if (watched) {
        ISSUE(c, op, c->zk->awget_children(c->zh, op->lease_dir, lease_watch_fired, (void *)ZKL_TOKEN(op),
                                        lease_list_reply, ZKL_TOKEN(op)));
    } else {
        op->watch_token = NULL;
        ISSUE(c, op, c->zk->aget_children(c->zh, op->lease_dir, 0, lease_list_reply, ZKL_TOKEN(op)));
    }
}

/* List the leases. With `watched` the listing arms a children watch (to wait on if over max);
 * without, a grant leaves no watch to take back, and an over-max answer costs one more listing. */
static void issue_lease_list_as(zkl_client *c, zkl_op *op, int watched) {
    op->gen++;
    op->step = S_LEASE_LIST;
    op->lease_watched = watched;
    c->stats.lists++;
    if (watched) {
        op->watch_token = ZKL_TOKEN(op);
        ISSUE(c, op, c->zk->awget_children(c->zh, op->lease_dir, lease_watch_fired, (void *)ZKL_TOKEN(op),
                                        lease_list_reply, ZKL_TOKEN(op)));
    } else {
        op->watch_token = NULL;
        ISSUE(c, op, c->zk->aget_children(c->zh, op->lease_dir, 0, lease_list_reply, ZKL_TOKEN(op)));
    }
}

static void issue_lease_list(zkl_client *c, zkl_op *op) {
    issue_lease_list_as(c, op, 1);
}

static void issue_lease_scan(zkl_client *c, zkl_op *op) {
    op->gen++;
    op->step = S_LEASE_SCANNING;
    c->stats.lists++;
    ISSUE(c, op, c->zk->aget_children(c->zh, op->lease_dir, 0, lease_scan_reply, ZKL_TOKEN(op)));
}

static void lease_create_reply(int rc, const char *name, const struct Stat *st, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    op->lease_inflight--;
    if (op->phase != P_ACQUIRING || op->stage != 2) {
        /* given up (or session gone) meanwhile: whatever was created goes to cleanup */
        if (rc == ZOK) spawn_cleanup(c, op->lease_dir, op->lease_prefix, name);
        else if (conn_lost(rc)) spawn_cleanup(c, op->lease_dir, op->lease_prefix, NULL);
    } else if (rc == ZOK) {
        char *node = zkl__strdup(c, name);
        if (!node || op->nleases >= op->qty) {
            spawn_cleanup(c, op->lease_dir, op->lease_prefix, name);
            zkl__strfree(c, node);
            if (!node) zkl__lock_fail(c, op, ZKL_ENOMEM);
        } else {
            op->lease_czxid[op->nleases] = st ? st->czxid : 0;
            op->leases[op->nleases++] = node;
        }
    } else if (rc == ZNONODE) {
        op->lease_nonode = 1;
    } else if (conn_lost(rc)) {
        op->lease_unknown = 1;
    } else if (!handle_gone(rc)) {
        zkl__lock_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

static int has_node(const struct String_vector *v, const char *full) {
    const char *name = strrchr(full, '/') + 1;
    for (int i = 0; v && i < v->count; i++)
        if (strcmp(v->data[i], name) == 0) return 1;
    return 0;
}

static void grant_leases(zkl_client *c, zkl_op *op) {
    /* Give the internal mutex back (in the background), then turn each lease into its own held
     * acquisition so that every lease is released on its own. The list that granted us armed a
     * children watch on the leases: take it back. */
    drop_watch(c, op, 1);
    if (op->node) spawn_cleanup_as(c, op->dir, op->prefix, op->node, 1);
    set_str(c, &op->node, NULL);
    op->split_ids[0] = op->id;
    for (int i = 1; i < op->nleases; i++) {
        zkl_op *l = zkl__op_new(c, OPK_LOCK);
        char *d = zkl__strdup(c, op->lease_dir), *p = zkl__strdup(c, op->lease_prefix);
        if (!l || !d || !p) {
            /* out of memory: give this lease back rather than hold it unaccounted */
            spawn_cleanup(c, op->lease_dir, op->lease_prefix, op->leases[i]);
            zkl__strfree(c, op->leases[i]);
            op->leases[i] = NULL;
            zkl__strfree(c, d);
            zkl__strfree(c, p);
            if (l) {
                l->phase = P_DONE;
                l->user_gone = 1;
                zkl__op_maybe_free(c, l);
            }
            op->split_ids[i] = 0;
            continue;
        }
        l->recipe = ZKL_MUTEX;
        l->phase = P_HELD;
        l->dir = d;
        l->prefix = p;
        l->node = op->leases[i];
        l->czxid = op->lease_czxid[i];
        op->leases[i] = NULL;
        op->split_ids[i] = l->id;
        c->stats.acquired++;
    }
    /* this op becomes the first lease */
    set_str(c, &op->dir, op->lease_dir);
    set_str(c, &op->prefix, op->lease_prefix);
    op->lease_dir = NULL;
    op->lease_prefix = NULL;
    op->node = op->leases[0];
    op->czxid = op->lease_czxid[0];
    op->leases[0] = NULL;
    op->nleases = 0;
    op->stage = 0;
    acquired(c, op);
}

static void lease_list_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    if (op->drop_on_reply && op->phase != P_ACQUIRING && rc == ZOK && op->watch_token == token) {
        op->drop_on_reply = 0;
        drop_watch(c, op, 1);
    }
    if (op->phase != P_ACQUIRING || op->stage != 2 || op->gen != ZKL_TOKEN_GEN(token) ||
        (op->step != S_LEASE_CREATE && op->step != S_LEASE_LIST)) {
        zkl__op_maybe_free(c, op);
        return;
    }
    /* every create pipelined ahead of this list has been answered by now */
    if (op->lease_unknown) {
        op->step = S_LEASE_SCAN;
        zkl__lock_kick(c, op);
    } else if (op->lease_nonode && op->parent_rc) {
        zkl__lock_fail(c, op, op->parent_rc);
    } else if (op->lease_nonode) {
        if (op->lease_parents_tried++ < 3) {
            op->step = S_LEASE_START;
            zkl__lock_kick(c, op);
        } else {
            zkl__lock_fail(c, op, ZNONODE);
        }
    } else if (rc == ZOK) {
        int missing = 0;
        c->lease_hint_dir = dir_hash(op->lease_dir);
        c->lease_hint_full = v->count > op->max_leases;
        for (int i = 0; i < op->nleases; i++) {
            if (!has_node(v, op->leases[i])) { /* deleted by someone: make another */
                zkl__strfree(c, op->leases[i]);
                op->leases[i] = op->leases[op->nleases - 1];
                op->lease_czxid[i] = op->lease_czxid[op->nleases - 1];
                op->nleases--;
                i--;
                missing = 1;
            }
        }
        if (missing || op->nleases < op->qty) {
            op->step = S_LEASE_START;
            zkl__lock_kick(c, op);
        } else if (v->count <= op->max_leases) {
            grant_leases(c, op);
        } else if (op->try_once) {
            zkl__lock_fail(c, op, ZKL_ETIMEDOUT);
        } else if (!op->lease_watched) {
            issue_lease_list_as(c, op, 1); /* still over max: list again, this time to wait */
        } else {
            op->step = S_LEASE_WAIT; /* the watch set by this list wakes us */
        }
    } else if (conn_lost(rc)) {
        op->step = S_LEASE_RELIST;
        zkl__lock_kick(c, op);
    } else if (!handle_gone(rc)) {
        zkl__lock_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

static void lease_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *token) {
    (void)state, (void)path;
    zkl_client *c = zkl__current(); /* watchers run inside the client's own process() */
    if (type == ZOO_SESSION_EVENT || !c || zh != c->zh) return;
    c->stats.watch_events++;
    zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(token));
    if (!op || op->phase != P_ACQUIRING || op->stage != 2 || op->gen != ZKL_TOKEN_GEN(token)) return;
    /* the watch is used up: a listing that shows room grants without arming another */
    if (op->step == S_LEASE_WAIT) issue_lease_list_as(c, op, 0);
}

static void lease_scan_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = reply_op(token, &c);
    if (!op) return;
    if (op->phase == P_ACQUIRING && op->stage == 2 && op->step == S_LEASE_SCANNING &&
        op->gen == ZKL_TOKEN_GEN(token)) {
        if (rc == ZOK || rc == ZNONODE) {
            /* Start the lease set afresh: delete everything carrying our prefix, then create. */
            for (int i = 0; rc == ZOK && v && i < v->count; i++) {
                if (zkl__has_prefix(v->data[i], op->lease_prefix)) {
                    char *full = join_path(c, op->lease_dir, v->data[i]);
                    if (full) spawn_cleanup(c, op->lease_dir, op->lease_prefix, full);
                    zkl__strfree(c, full);
                }
            }
            leases_clear(c, op);
            op->lease_unknown = 0;
            /* a fresh prefix, so the cleanups above can never take the new leases */
            set_str(c, &op->lease_prefix, new_prefix(c, "lease-"));
            op->step = S_LEASE_START;
            if (!op->lease_prefix) zkl__lock_fail(c, op, ZKL_ENOMEM);
            else zkl__lock_kick(c, op);
        } else if (conn_lost(rc) || handle_gone(rc)) {
            op->step = S_LEASE_SCAN;
            zkl__lock_kick(c, op);
        } else {
            zkl__lock_fail(c, op, rc);
        }
    }
    zkl__op_maybe_free(c, op);
}

/* ---------------------------------------------------------------- public lock API */

/* A new acquisition in phase ACQUIRING on dir with a fresh protected prefix for `token`. */
static int new_acquire(zkl_client *c, const char *dir, const char *token, int timeout_ms, int acl,
                       zkl_op **out) {
    if (acl < 0 || acl > c->nacls) return ZKL_EINVAL;
    zkl_op *op = zkl__op_new(c, OPK_LOCK);
    if (!op) return ZKL_ENOMEM;
    op->recipe = ZKL_MUTEX;
    op->phase = P_ACQUIRING;
    op->step = S_START;
    op->acl = acl;
    op->dir = zkl__strdup(c, dir);
    op->prefix = new_prefix(c, token);
    if (!op->dir || !op->prefix) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    if (timeout_ms == 0) op->try_once = 1;
    else if (timeout_ms > 0) {
        op->deadline = zkl__now(c) + timeout_ms + 1; /* the clock is truncated to ms: never early */
        zkl__note_deadline(c, op->deadline);
    }
    *out = op;
    return ZKL_OK;
}

static int start(zkl_client *c, zkl_op *op, uint64_t *id) {
    *id = op->id;
    zkl__lock_kick(c, op);
    /* Called by users, and by a multi-lock from inside a completion: ZooKeeper must not be
     * re-entered there; process() refreshes its interest on the way out anyway. */
    if (!c->in_callback) zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__lock_acquire(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms, int acl,
                      uint64_t *id) {
    zkl_op *op;
    if (c->closed) return ZKL_ECLOSED;
    if (!path || zkl_path_error(path, strlen(path))) return ZKL_EINVAL;
    if (recipe != ZKL_MUTEX && recipe != ZKL_READ && recipe != ZKL_WRITE) return ZKL_EINVAL;
    int rc = new_acquire(c, path, zkl__recipe_token(recipe), timeout_ms, acl, &op);
    if (rc != ZKL_OK) return rc;
    op->recipe = recipe;
    return start(c, op, id);
}

int zkl__lock_downgrade(zkl_client *c, uint64_t write_id, uint64_t *id) {
    zkl_op *op, *w = zkl__op_find(c, write_id);
    if (c->closed) return ZKL_ECLOSED;
    if (!w || w->kind != OPK_LOCK || w->user_gone || w->recipe != ZKL_WRITE) return ZKL_ENOTFOUND;
    if (w->phase != P_HELD || !w->node) return ZKL_ENOTHELD;
    const char *seq = zkl__sort_key(strrchr(w->node, '/') + 1, ZKL_WRITE);
    int rc = new_acquire(c, w->dir, zkl__recipe_token(ZKL_READ), -1, w->acl, &op);
    if (rc != ZKL_OK) return rc;
    op->recipe = ZKL_READ;
    op->grant_on_create = 1;
    size_t a = strlen(op->prefix), b = strlen(seq);
    op->fixed_name = zkl__alloc(c, a + b + 1);
    if (!op->fixed_name) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    memcpy(op->fixed_name, op->prefix, a);
    memcpy(op->fixed_name + a, seq, b + 1);
    return start(c, op, id);
}

int zkl__semaphore_acquire(zkl_client *c, const char *path, int max_leases, int qty, int timeout_ms,
                           int acl, uint64_t *id) {
    zkl_op *op;
    if (c->closed) return ZKL_ECLOSED;
    if (!path || zkl_path_error(path, strlen(path))) return ZKL_EINVAL;
    if (max_leases < 1 || qty < 1 || qty > max_leases) return ZKL_EINVAL;
    size_t n = strlen(path);
    char *locks = zkl__alloc(c, n + 7), *leases = zkl__alloc(c, n + 8);
    if (!locks || !leases) {
        zkl__free(c, locks, n + 7);
        zkl__free(c, leases, n + 8);
        return ZKL_ENOMEM;
    }
    memcpy(locks, path, n);
    memcpy(locks + n, "/locks", 7);
    memcpy(leases, path, n);
    memcpy(leases + n, "/leases", 8);
    int rc = new_acquire(c, locks, zkl__recipe_token(ZKL_MUTEX), timeout_ms, acl, &op);
    zkl__free(c, locks, n + 7);
    if (rc != ZKL_OK) {
        zkl__free(c, leases, n + 8);
        return rc;
    }
    op->stage = 1;
    op->max_leases = max_leases;
    op->qty = qty;
    op->lease_dir = leases;
    op->lease_prefix = new_prefix(c, "lease-");
    op->leases = zkl__alloc(c, (size_t)qty * sizeof *op->leases);
    op->lease_czxid = zkl__alloc(c, (size_t)qty * sizeof *op->lease_czxid);
    op->split_ids = zkl__alloc(c, (size_t)qty * sizeof *op->split_ids);
    if (!op->lease_prefix || !op->leases || !op->lease_czxid || !op->split_ids) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    memset(op->split_ids, 0, (size_t)qty * sizeof *op->split_ids);
    return start(c, op, id);
}

int zkl__lease_ids(zkl_client *c, uint64_t id, uint64_t *ids, int n) {
    zkl_op *op = zkl__op_find(c, id);
    if (!op || op->kind != OPK_LOCK || !op->split_ids) return ZKL_ENOTFOUND;
    int k = 0;
    for (int i = 0; i < op->qty && k < n; i++)
        if (op->split_ids[i]) ids[k++] = op->split_ids[i];
    return k;
}

static zkl_op *user_lock(zkl_client *c, uint64_t id) {
    zkl_op *op = zkl__op_find(c, id);
    return op && op->kind == OPK_LOCK && !op->user_gone ? op : NULL;
}

int zkl__lock_release(zkl_client *c, uint64_t id) {
    zkl_op *op = user_lock(c, id);
    if (!op) return ZKL_ENOTFOUND;
    if (op->phase == P_LOST) {
        op->user_gone = 1;
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ELOST;
    }
    if (op->phase != P_HELD) return ZKL_ENOTHELD;
    op->phase = P_RELEASING;
    op->release_status = ZKL_OK;
    zkl__lock_kick(c, op);
    zkl__refresh_interest(c);
    return ZKL_OK;
}

static void multi_rollback(zkl_client *c, zkl_op *m, int failed, int status);

int zkl__lock_cancel(zkl_client *c, uint64_t id) {
    zkl_op *op = zkl__op_find(c, id);
    if (op && op->kind == OPK_MULTI && !op->user_gone) {
        if (op->phase != P_ACQUIRING) return ZKL_ENOTHELD;
        zkl_op *ch = zkl__op_find(c, op->child_ids[op->next_item]);
        if (ch) zkl__lock_fail(c, ch, ZKL_ECANCELED); /* rolls the multi-lock back */
        else multi_rollback(c, op, op->next_item, ZKL_ECANCELED);
        zkl__refresh_interest(c);
        return ZKL_OK;
    }
    op = user_lock(c, id);
    if (!op) return ZKL_ENOTFOUND;
    if (op->phase != P_ACQUIRING) return ZKL_ENOTHELD;
    zkl__lock_fail(c, op, ZKL_ECANCELED);
    zkl__op_maybe_free(c, op);
    zkl__refresh_interest(c);
    return ZKL_OK;
}

static void abandon_op(zkl_client *c, zkl_op *op) {
    op->user_gone = 1;
    op->parent_id = 0;
    if (op->phase == P_ACQUIRING) {
        if (op->stage) leases_abandon(c, op);
        op->phase = P_CLEANUP;
        op->gen++;
    } else if (op->phase == P_HELD) {
        op->phase = P_CLEANUP;
    } else if (op->phase == P_LOST) {
        op->phase = P_DONE;
    }
    zkl__lock_kick(c, op);
    zkl__op_maybe_free(c, op);
}

int zkl__lock_abandon(zkl_client *c, uint64_t id) {
    zkl_op *op = zkl__op_find(c, id);
    if (op && op->kind == OPK_MULTI && !op->user_gone) {
        for (int i = 0; i < op->nitems; i++) {
            zkl_op *ch = op->child_ids[i] ? zkl__op_find(c, op->child_ids[i]) : NULL;
            if (ch) abandon_op(c, ch);
        }
        op->user_gone = 1;
        op->pinned = 0;
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_OK;
    }
    op = user_lock(c, id);
    if (!op) return ZKL_ENOTFOUND;
    abandon_op(c, op);
    if (!c->closed) zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__lock_info_get(zkl_client *c, uint64_t id, zkl_lock_info *out) {
    zkl_op *op = user_lock(c, id);
    if (!op) return ZKL_ENOTFOUND;
    out->node[0] = '\0';
    if (op->node) {
        size_t n = strlen(op->node);
        if (n >= sizeof out->node) n = sizeof out->node - 1;
        memcpy(out->node, op->node, n);
        out->node[n] = '\0';
    }
    out->token = op->czxid;
    out->held = op->phase == P_HELD;
    out->suspended = op->phase == P_HELD && c->state == ZKL_STATE_SUSPENDED;
    return ZKL_OK;
}


/* ---------------------------------------------------------------- multi-lock
 * Curator's InterProcessMultiLock, all or nothing: components are acquired one after another in
 * the order given (the Lua layer decides the order); when one fails, those already held are given
 * back in reverse order (their deletes are pipelined, so the server applies them in that order)
 * and the multi-lock fails naming the component. Each component gets its own timeout, capped by
 * the multi-lock's shared deadline. */

void zkl__multi_free_fields(zkl_client *c, zkl_op *op) {
    for (int i = 0; i < op->nitems; i++) zkl__strfree(c, op->items[i].path);
    zkl__free(c, op->items, (size_t)op->nitems * sizeof *op->items);
    zkl__free(c, op->child_ids, (size_t)op->nitems * sizeof *op->child_ids);
}

static void multi_finish(zkl_client *c, zkl_op *m, int type, int status) {
    m->phase = P_DONE;
    m->pinned = 1; /* until zkl__multi_result() */
    zkl__emit(c, m, type, status);
    m->user_gone = 1;
}

static void multi_rollback(zkl_client *c, zkl_op *m, int failed, int status) {
    m->failed_index = failed;
    int given = m->multi_flags & ZKL_MULTI_ROLLBACK_GIVEN;
    for (int k = 0; k < m->nitems; k++) {
        int i = given ? k : m->nitems - 1 - k;
        zkl_op *ch = m->child_ids[i] ? zkl__op_find(c, m->child_ids[i]) : NULL;
        if (ch && i != failed) abandon_op(c, ch);
        else if (ch) ch->parent_id = 0;
    }
    multi_finish(c, m, ZKL_EV_FAILED, status);
}

static void multi_start_next(zkl_client *c, zkl_op *m) {
    zkl__multi_item *it = &m->items[m->next_item];
    int t = it->timeout_ms;
    if (m->deadline) {
        int64_t left = m->deadline - zkl__now(c);
        if (left <= 0) {
            multi_rollback(c, m, m->next_item, ZKL_ETIMEDOUT);
            return;
        }
        if (t < 0 || left < t) t = (int)left;
    }
    uint64_t id;
    int rc = it->max_leases > 0 ? zkl__semaphore_acquire(c, it->path, it->max_leases, 1, t, it->acl, &id)
                                : zkl__lock_acquire(c, it->recipe, it->path, t, it->acl, &id);
    if (rc != ZKL_OK) {
        multi_rollback(c, m, m->next_item, rc);
        return;
    }
    zkl_op *ch = zkl__op_find(c, id);
    ch->parent_id = m->id;
    ch->multi_index = m->next_item;
    m->child_ids[m->next_item] = id;
}

void zkl__multi_child(zkl_client *c, zkl_op *ch, int type, int status) {
    zkl_op *m = zkl__op_find(c, ch->parent_id);
    if (!m || m->kind != OPK_MULTI || m->phase != P_ACQUIRING) {
        ch->parent_id = 0;
        if (type == ZKL_EV_ACQUIRED) abandon_op(c, ch); /* nobody wants it any more */
        else ch->user_gone = 1;
        return;
    }
    if (type == ZKL_EV_FAILED) {
        ch->user_gone = 1;
        multi_rollback(c, m, ch->multi_index, status);
        return;
    }
    if (++m->next_item < m->nitems) {
        multi_start_next(c, m);
        return;
    }
    for (int i = 0; i < m->nitems; i++) {
        zkl_op *x = zkl__op_find(c, m->child_ids[i]);
        if (x) x->parent_id = 0; /* from now on each component reports to the user itself */
    }
    multi_finish(c, m, ZKL_EV_ACQUIRED, ZKL_OK);
}

int zkl__multi_acquire(zkl_client *c, const zkl_multi_item *items, int n, int timeout_ms,
                      int flags, uint64_t *id) {
    if (c->closed) return ZKL_ECLOSED;
    if (!items || n < 1) return ZKL_EINVAL;
    for (int i = 0; i < n; i++) {
        const zkl_multi_item *it = &items[i];
        if (!it->path || zkl_path_error(it->path, strlen(it->path))) return ZKL_EINVAL;
        if (it->max_leases <= 0 && it->recipe != ZKL_MUTEX && it->recipe != ZKL_READ &&
            it->recipe != ZKL_WRITE)
            return ZKL_EINVAL;
    }
    zkl_op *m = zkl__op_new(c, OPK_MULTI);
    if (!m) return ZKL_ENOMEM;
    m->phase = P_ACQUIRING;
    m->nitems = n;
    m->failed_index = -1;
    m->multi_flags = flags;
    m->items = zkl__alloc(c, (size_t)n * sizeof *m->items);
    m->child_ids = zkl__alloc(c, (size_t)n * sizeof *m->child_ids);
    if (!m->items || !m->child_ids) {
        zkl__free(c, m->items, (size_t)n * sizeof *m->items);
        zkl__free(c, m->child_ids, (size_t)n * sizeof *m->child_ids);
        m->items = NULL;
        m->child_ids = NULL;
        m->nitems = 0;
        m->phase = P_DONE;
        zkl__op_maybe_free(c, m);
        return ZKL_ENOMEM;
    }
    memset(m->child_ids, 0, (size_t)n * sizeof *m->child_ids);
    int oom = 0;
    for (int i = 0; i < n; i++) {
        m->items[i].recipe = items[i].recipe;
        m->items[i].max_leases = items[i].max_leases;
        m->items[i].timeout_ms = items[i].timeout_ms;
        m->items[i].acl = items[i].acl;
        m->items[i].path = zkl__strdup(c, items[i].path);
        if (!m->items[i].path) oom = 1;
    }
    if (oom) {
        m->phase = P_DONE;
        zkl__op_maybe_free(c, m);
        return ZKL_ENOMEM;
    }
    if (timeout_ms >= 0) m->deadline = zkl__now(c) + timeout_ms;
    *id = m->id;
    multi_start_next(c, m); /* if the first component cannot start, a FAILED event is queued */
    if (!c->in_callback) zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__multi_result(zkl_client *c, uint64_t id, uint64_t *ids, int n, int *failed_index) {
    zkl_op *m = zkl__op_find(c, id);
    if (!m || m->kind != OPK_MULTI) return ZKL_ENOTFOUND;
    int k = 0;
    if (failed_index) *failed_index = m->failed_index;
    if (m->failed_index < 0)
        for (int i = 0; i < m->nitems && k < n; i++) ids[k++] = m->child_ids[i];
    m->pinned = 0;
    zkl__op_maybe_free(c, m);
    return k;
}

/* ---------------------------------------------------------------- plain znode operations */

void zkl__plain_free_fields(zkl_client *c, zkl_op *op) {
    zkl__strfree(c, op->args_path);
    zkl__free(c, op->args_data, op->args.len + 1);
    zkl__free(c, op->res_data, op->res_len + 1);
    for (int i = 0; i < op->res_nchildren; i++) zkl__strfree(c, op->res_children[i]);
    zkl__free(c, op->res_children, (size_t)op->res_nchildren * sizeof *op->res_children);
}

static void plain_done(zkl_client *c, zkl_op *op, int rc) {
    if (op->phase == P_DONE) return;
    if (rc == ZCLOSING || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE) rc = c->closed ? ZKL_ECLOSED : ZKL_ESESSION;
    op->rc = rc;
    op->phase = P_DONE;
    zkl__emit(c, op, ZKL_EV_OP_DONE, rc);
}

static int set_result_data(zkl_client *c, zkl_op *op, const char *v, size_t len) {
    op->res_data = zkl__alloc(c, len + 1);
    if (!op->res_data) return ZKL_ENOMEM;
    if (len) memcpy(op->res_data, v, len);
    op->res_data[len] = '\0';
    op->res_len = len;
    return ZOK;
}

static void plain_stat_common(zkl_client *c, zkl_op *op, int rc, const struct Stat *st) {
    if (rc == ZOK && st) op->res_stat = *st;
    if (conn_lost(rc) && op->args.type != ZKL_OP_CREATE && op->args.type != ZKL_OP_DELETE &&
        op->args.type != ZKL_OP_SET) {
        op->phase = P_ACQUIRING; /* reads are safe to retry: again once connected */
        zkl__plain_kick(c, op);
        return;
    }
    plain_done(c, op, rc);
}

static void plain_data_reply(int rc, const char *v, int len, const struct Stat *st, const void *t) {
    zkl_client *c;
    zkl_op *op = reply_op(t, &c);
    if (!op) return;
    if (rc == ZOK && set_result_data(c, op, v, len > 0 ? (size_t)len : 0) != ZOK) rc = ZKL_ENOMEM;
    plain_stat_common(c, op, rc, st);
    zkl__op_maybe_free(c, op);
}

static void plain_stat_reply(int rc, const struct Stat *st, const void *t) {
    zkl_client *c;
    zkl_op *op = reply_op(t, &c);
    if (!op) return;
    plain_stat_common(c, op, rc, st);
    zkl__op_maybe_free(c, op);
}

static void plain_create_reply(int rc, const char *name, const struct Stat *st, const void *t) {
    zkl_client *c;
    zkl_op *op = reply_op(t, &c);
    if (!op) return;
    if (rc == ZOK && set_result_data(c, op, name, strlen(name)) != ZOK) rc = ZKL_ENOMEM;
    plain_stat_common(c, op, rc, st);
    zkl__op_maybe_free(c, op);
}

static void plain_void_reply(int rc, const void *t) {
    zkl_client *c;
    zkl_op *op = reply_op(t, &c);
    if (!op) return;
    plain_stat_common(c, op, rc, NULL);
    zkl__op_maybe_free(c, op);
}

static void plain_children_reply(int rc, const struct String_vector *v, const void *t) {
    zkl_client *c;
    zkl_op *op = reply_op(t, &c);
    if (!op) return;
    if (rc == ZOK && v && v->count > 0) {
        op->res_children = zkl__alloc(c, (size_t)v->count * sizeof *op->res_children);
        if (!op->res_children) rc = ZKL_ENOMEM;
        for (int i = 0; rc == ZOK && i < v->count; i++) {
            op->res_children[i] = zkl__strdup(c, v->data[i]);
            op->res_nchildren = i + 1;
            if (!op->res_children[i]) rc = ZKL_ENOMEM;
        }
    }
    plain_stat_common(c, op, rc, NULL);
    zkl__op_maybe_free(c, op);
}

void zkl__plain_kick(zkl_client *c, zkl_op *op) {
    if (op->phase != P_ACQUIRING || op->refs > 0 || !zkl__connected(c)) return;
    const zkl_op_args *a = &op->args;
    int rc;
    const void *t = ZKL_TOKEN(op);
    switch (a->type) {
    case ZKL_OP_GET: rc = c->zk->aget(c->zh, a->path, 0, plain_data_reply, t); break;
    case ZKL_OP_CHILDREN: rc = c->zk->aget_children(c->zh, a->path, 0, plain_children_reply, t); break;
    case ZKL_OP_EXISTS: rc = c->zk->aexists(c->zh, a->path, 0, plain_stat_reply, t); break;
    case ZKL_OP_SET:
        rc = c->zk->aset(c->zh, a->path, a->data, (int)a->len, a->version, plain_stat_reply, t);
        break;
    case ZKL_OP_DELETE: rc = c->zk->adelete(c->zh, a->path, a->version, plain_void_reply, t); break;
    case ZKL_OP_CREATE: {
        int mode = ((a->flags & 1) ? ZOO_EPHEMERAL : 0) | ((a->flags & 2) ? ZOO_SEQUENCE : 0);
        if (a->flags & 4) mode = ZOO_CONTAINER;
        rc = c->zk->acreate2(c->zh, a->path, a->data, (int)a->len, zkl__acl(c, a->acl), mode,
                          plain_create_reply, t);
        break;
    }
    default: rc = ZBADARGUMENTS;
    }
    if (rc == ZOK) {
        c->stats.ops++;
        op->refs++;
        op->phase = P_HELD; /* in flight */
    } else if (rc == ZBADARGUMENTS || rc == ZMARSHALLINGERROR) {
        plain_done(c, op, rc);
    }
}

int zkl__op_start(zkl_client *c, const zkl_op_args *args, uint64_t *id) {
    if (c->closed) return ZKL_ECLOSED;
    if (!args->path || args->type < ZKL_OP_GET || args->type > ZKL_OP_DELETE) return ZKL_EINVAL;
    if (args->path[0] != '/' || args->acl < 0 || args->acl > c->nacls) return ZKL_EINVAL;
    zkl_op *op = zkl__op_new(c, OPK_PLAIN);
    if (!op) return ZKL_ENOMEM;
    op->args = *args;
    op->args_path = zkl__strdup(c, args->path);
    op->args_data = zkl__alloc(c, args->len + 1);
    if (!op->args_path || !op->args_data) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    if (args->len) memcpy(op->args_data, args->data, args->len);
    op->args_data[args->len] = '\0';
    op->args.path = op->args_path;
    op->args.data = args->data ? op->args_data : NULL;
    op->phase = P_ACQUIRING;
    *id = op->id;
    zkl__plain_kick(c, op);
    zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__op_result_get(zkl_client *c, uint64_t id, zkl_op_result *out) {
    zkl_op *op = c->last_done;
    if (!op || op->id != id) return ZKL_ENOTFOUND;
    memset(out, 0, sizeof *out);
    out->rc = op->rc;
    out->data = op->res_data;
    out->len = op->res_len;
    out->nchildren = op->res_nchildren;
    out->children = (const char *const *)op->res_children;
    out->czxid = op->res_stat.czxid;
    out->mzxid = op->res_stat.mzxid;
    out->pzxid = op->res_stat.pzxid;
    out->ephemeral_owner = op->res_stat.ephemeralOwner;
    out->version = op->res_stat.version;
    out->num_children = op->res_stat.numChildren;
    return ZKL_OK;
}
