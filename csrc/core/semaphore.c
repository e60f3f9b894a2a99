/* semaphore.c - Curator's InterProcessSemaphoreV2: leases under <path>/leases, taken while
 * holding an internal mutex under <path>/locks. The internal mutex is the fair queue (queue.c):
 * this kind extends it through the queue hooks of its kind table (queue_head: the internal mutex
 * is held, count the leases; give_up: leases made so far go to background cleanup).
 *
 * Stage 1: the internal mutex, as a mutex. Stage 2, in Curator's order: holding the internal
 * mutex, create our lease(s), then count every lease (ours included) with a children watch; wait,
 * still holding the mutex, until the count is within max; then give the mutex back. Only the
 * mutex holder ever watches leases. A granted acquisition of n leases becomes n holds, each
 * released on its own (this op is the first). */
#include <string.h>

#include "queue.h"

enum {
    S_LEASE_START = S_QUEUE_LAST, /* create the missing leases + list leases, once connected */
    S_LEASE_CREATE,               /* those in flight */
    S_LEASE_RELIST,               /* list again once connected */
    S_LEASE_LIST,                 /* list in flight (with a watch if lease_watched) */
    S_LEASE_WAIT, /* too many leases: children watch armed, internal mutex still held */
    S_LEASE_SCAN, /* a lease create's outcome is unknown: find and delete ours, then retry */
    S_LEASE_SCANNING
};

typedef struct zkl_sop {
    zkl_qop q; /* the internal mutex; after the grant, the first lease */
    int max_leases, qty;
    char *lease_dir, *lease_prefix;
    char **leases; /* lease nodes created so far (capacity qty) */
    int64_t *lease_czxid;
    int nleases;
    int lease_inflight; /* lease creates in flight */
    int lease_unknown, lease_nonode;
    int lease_parents_tried;
    int lease_watched;   /* the lease listing in flight arms a children watch */
    zkl_wentry lw;       /* on lease_dir in the client's index of watches, from a watched listing */
    uint64_t *split_ids; /* after the grant: the ids of the qty leases, this op's first */
} zkl_sop;

#define SOP(o) ((zkl_sop *)(o))

static void sem_kick(zkl_client *c, zkl_op *op);
static void sem_session_lost(zkl_client *c, zkl_op *op, int status);
static void sem_queue_head(zkl_client *c, zkl_op *op);
static void sem_give_up(zkl_client *c, zkl_op *op, int failed);
static void sem_free_fields(zkl_client *c, zkl_op *op);

static const zkl_kind sem_kind = {
    .name = "semaphore",
    .size = sizeof(zkl_sop),
    .flags = ZKL_KIND_QUEUE,
    .kick = sem_kick,
    .suspended = zkl__queue_suspended,
    .session_lost = sem_session_lost,
    .expire = zkl__queue_expire,
    .cancel = zkl__queue_cancel,
    .abandon = zkl__queue_abandon,
    .close = zkl__queue_close,
    .free_fields = sem_free_fields,
    .queue_head = sem_queue_head,
    .give_up = sem_give_up,
};

static void leases_clear(zkl_client *c, zkl_op *op) {
    for (int i = 0; i < SOP(op)->nleases; i++)
        zkl__strfree(c, SOP(op)->leases[i]);
    SOP(op)->nleases = 0;
}

static void sem_free_fields(zkl_client *c, zkl_op *op) {
    zkl_sop *s = SOP(op);
    zkl__windex_remove(c, &s->lw);
    zkl__strfree(c, s->lease_dir);
    zkl__strfree(c, s->lease_prefix);
    leases_clear(c, op);
    zkl__free(c, s->leases, (size_t)s->qty * sizeof *s->leases);
    zkl__free(c, s->lease_czxid, (size_t)s->qty * sizeof *s->lease_czxid);
    zkl__free(c, s->split_ids, (size_t)s->qty * sizeof *s->split_ids);
    zkl__queue_free_fields(c, op);
}

/* Give every lease this op created (or may have created) to background cleanup. */
static void leases_abandon(zkl_client *c, zkl_op *op) {
    zkl_sop *s = SOP(op);
    for (int i = 0; i < s->nleases; i++)
        zkl__queue_cleanup(c, s->lease_dir, s->lease_prefix, s->leases[i], 0);
    if (s->lease_unknown) zkl__queue_cleanup(c, s->lease_dir, s->lease_prefix, NULL, 0);
    leases_clear(c, op);
    s->lease_unknown = 0;
}

/* Is another live op of this client waiting on a children watch of the same leases? Then the
 * server-side watch (one per path and session) must stay. */
static int lease_watch_shared(zkl_client *c, zkl_op *op, const char *path) {
    for (zkl_wentry *e = zkl__windex_first(c, ZKL_WT_LEASE, path); e; e = zkl__windex_next(e)) {
        zkl_op *o = e->op;
        if (o == op || o->phase != P_ACQUIRING) continue;
        if (QOP(o)->stage == 2 &&
            (QOP(o)->step == S_LEASE_WAIT ||
             ((QOP(o)->step == S_LEASE_LIST || QOP(o)->step == S_LEASE_CREATE) &&
              SOP(o)->lease_watched)))
            return 1;
    }
    return 0;
}

/* Take back the children watch on the leases (see the queue's drop_watch). */
static void drop_lease_watch(zkl_client *c, zkl_op *op) {
    const char *path = SOP(op)->lease_dir;
    if (!path || !c->zh || !QOP(op)->watch_token || lease_watch_shared(c, op, path)) return;
    zkl__remove_watches(c, path, ZWATCHTYPE_CHILD);
    QOP(op)->watch_token = NULL;
}

static void sem_give_up(zkl_client *c, zkl_op *op, int failed) {
    if (failed) {
        if (QOP(op)->step == S_LEASE_WAIT)
            drop_lease_watch(c, op);
        else if (QOP(op)->step == S_LEASE_LIST || QOP(op)->step == S_LEASE_CREATE)
            QOP(op)->drop_on_reply = 1;
    }
    zkl__windex_remove(c, &SOP(op)->lw); /* a watch left armed (abandoned) wakes nobody */
    if (QOP(op)->stage) leases_abandon(c, op);
    if (failed && QOP(op)->stage == 2)
        QOP(op)->held_head = 1; /* its node is the internal mutex it held */
}

static void sem_session_lost(zkl_client *c, zkl_op *op, int status) {
    zkl__windex_remove(c, &SOP(op)->lw); /* its watch went with the session */
    leases_clear(c, op);
    SOP(op)->lease_unknown = 0;
    zkl__queue_session_lost(c, op, status);
}

static void sem_queue_head(zkl_client *c, zkl_op *op);
static void issue_lease_creates(zkl_client *c, zkl_op *op);
static void issue_lease_list(zkl_client *c, zkl_op *op);
static void issue_lease_scan(zkl_client *c, zkl_op *op);

/* Lease steps are this file's; every other step and phase is the queue's. */
static void sem_kick(zkl_client *c, zkl_op *op) {
    int step = QOP(op)->step;
    if (op->phase == P_ACQUIRING && step >= S_LEASE_START) {
        if (!zkl__connected(c)) return;
        if (step == S_LEASE_START)
            issue_lease_creates(c, op);
        else if (step == S_LEASE_RELIST)
            issue_lease_list(c, op);
        else if (step == S_LEASE_SCAN)
            issue_lease_scan(c, op);
        return;
    }
    zkl__queue_kick(c, op);
}

static void lease_create_reply(int rc, const char *name, const struct Stat *st, const void *token);
static void lease_list_reply(int rc, const struct String_vector *v, const void *token);
static void lease_scan_reply(int rc, const struct String_vector *v, const void *token);
static void lease_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* A watched listing of the leases is on its way: index the op by its lease dir, which the one
 * lease watcher (the client its context) looks up. Fails the op without memory for an index. */
static int lease_index(zkl_client *c, zkl_op *op) {
    if (zkl__windex_add(c, &SOP(op)->lw, op, SOP(op)->lease_dir, ZKL_WT_LEASE) == ZOK) return 1;
    zkl__queue_fail(c, op, ZKL_ENOMEM);
    return 0;
}

/* the internal mutex is held: count leases while holding it */
static void sem_queue_head(zkl_client *c, zkl_op *op) {
    QOP(op)->stage = 2;
    QOP(op)->step = S_LEASE_START;
    op->gen++;
    sem_kick(c, op);
}

/* FNV-1a: the lease-listing hint keeps a hash, not a copy, of the dir (a collision only costs
 * a request). */
static uint64_t dir_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void issue_lease_creates(zkl_client *c, zkl_op *op) {
    char *path = zkl__join_path(c, SOP(op)->lease_dir, SOP(op)->lease_prefix);
    if (!path) {
        zkl__queue_fail(c, op, ZKL_ENOMEM);
        return;
    }
    /* the listing pipelined behind the creates arms a watch unless the last one showed room */
    int watched = !(c->lease_hint_dir == dir_hash(SOP(op)->lease_dir) && !c->lease_hint_full);
    if (watched && !lease_index(c, op)) {
        zkl__strfree(c, path);
        return;
    }
    op->gen++;
    QOP(op)->step = S_LEASE_CREATE;
    QOP(op)->watch_token = ZKL_TOKEN(op);
    if (SOP(op)->lease_nonode) {
        /* <path>/leases is missing (first use, or reaped): make it, as a container */
        SOP(op)->lease_nonode = 0;
        int rc = zkl__make_parents(c, op, SOP(op)->lease_dir, ZKL_PARENTS_SELF, QOP(op)->acl);
        if (rc != ZOK) zkl__queue_issue_failed(c, op, rc);
    }
    for (int i = SOP(op)->nleases; i < SOP(op)->qty; i++) {
        c->stats.creates++;
        int rc =
            zkl__acreate2(c, path, c->identity, (int)c->identity_len, zkl__acl(c, QOP(op)->acl),
                          ZOO_EPHEMERAL_SEQUENTIAL, lease_create_reply, ZKL_TOKEN(op));
        if (rc == ZOK) {
            op->refs++;
            SOP(op)->lease_inflight++;
        }
    }
    zkl__strfree(c, path);
    /* pipelined behind the creates; the step stays S_LEASE_CREATE until the list answers */
    SOP(op)->lease_watched = watched;
    c->stats.lists++;
    if (watched) {
        ZKL_ISSUE(c, op,
                  zkl__awget_children(c, SOP(op)->lease_dir, lease_watch_fired, c, lease_list_reply,
                                      ZKL_TOKEN(op)));
    } else {
        QOP(op)->watch_token = NULL;
        ZKL_ISSUE(c, op,
                  zkl__aget_children(c, SOP(op)->lease_dir, 0, lease_list_reply, ZKL_TOKEN(op)));
    }
}

/* List the leases. With `watched` the listing arms a children watch (to wait on if over max);
 * without, a grant leaves no watch to take back, and an over-max answer costs one more listing. */
static void issue_lease_list_as(zkl_client *c, zkl_op *op, int watched) {
    op->gen++;
    QOP(op)->step = S_LEASE_LIST;
    SOP(op)->lease_watched = watched;
    c->stats.lists++;
    if (watched) {
        if (!lease_index(c, op)) return;
        QOP(op)->watch_token = ZKL_TOKEN(op);
        ZKL_ISSUE(c, op,
                  zkl__awget_children(c, SOP(op)->lease_dir, lease_watch_fired, c, lease_list_reply,
                                      ZKL_TOKEN(op)));
    } else {
        QOP(op)->watch_token = NULL;
        ZKL_ISSUE(c, op,
                  zkl__aget_children(c, SOP(op)->lease_dir, 0, lease_list_reply, ZKL_TOKEN(op)));
    }
}

static void issue_lease_list(zkl_client *c, zkl_op *op) {
    issue_lease_list_as(c, op, 1);
}

static void issue_lease_scan(zkl_client *c, zkl_op *op) {
    op->gen++;
    QOP(op)->step = S_LEASE_SCANNING;
    c->stats.lists++;
    ZKL_ISSUE(c, op, zkl__aget_children(c, SOP(op)->lease_dir, 0, lease_scan_reply, ZKL_TOKEN(op)));
}

static void lease_create_reply(int rc, const char *name, const struct Stat *st, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    SOP(op)->lease_inflight--;
    if (op->phase != P_ACQUIRING || QOP(op)->stage != 2) {
        /* given up (or session gone) meanwhile: whatever was created goes to cleanup */
        if (rc == ZOK)
            zkl__queue_cleanup(c, SOP(op)->lease_dir, SOP(op)->lease_prefix, name, 0);
        else if (zkl__conn_lost(rc))
            zkl__queue_cleanup(c, SOP(op)->lease_dir, SOP(op)->lease_prefix, NULL, 0);
    } else if (rc == ZOK) {
        char *node = zkl__strdup(c, name);
        if (!node || SOP(op)->nleases >= SOP(op)->qty) {
            zkl__queue_cleanup(c, SOP(op)->lease_dir, SOP(op)->lease_prefix, name, 0);
            zkl__strfree(c, node);
            if (!node) zkl__queue_fail(c, op, ZKL_ENOMEM);
        } else {
            SOP(op)->lease_czxid[SOP(op)->nleases] = st ? st->czxid : 0;
            SOP(op)->leases[SOP(op)->nleases++] = node;
        }
    } else if (rc == ZNONODE) {
        SOP(op)->lease_nonode = 1;
    } else if (zkl__conn_lost(rc)) {
        SOP(op)->lease_unknown = 1;
    } else if (!zkl__handle_gone(rc)) {
        zkl__queue_fail(c, op, rc);
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
    drop_lease_watch(c, op);
    zkl__windex_remove(c, &SOP(op)->lw); /* before lease_dir goes */
    if (QOP(op)->node) zkl__queue_cleanup(c, QOP(op)->dir, QOP(op)->prefix, QOP(op)->node, 1);
    zkl__set_str(c, &QOP(op)->node, NULL);
    SOP(op)->split_ids[0] = op->id;
    for (int i = 1; i < SOP(op)->nleases; i++) {
        zkl_op *l = zkl__op_new(c, &zkl__queue_kind);
        char *d = zkl__strdup(c, SOP(op)->lease_dir), *p = zkl__strdup(c, SOP(op)->lease_prefix);
        if (!l || !d || !p) {
            /* out of memory: give this lease back rather than hold it unaccounted */
            zkl__queue_cleanup(c, SOP(op)->lease_dir, SOP(op)->lease_prefix, SOP(op)->leases[i], 0);
            zkl__strfree(c, SOP(op)->leases[i]);
            SOP(op)->leases[i] = NULL;
            zkl__strfree(c, d);
            zkl__strfree(c, p);
            if (l) {
                l->phase = P_DONE;
                l->user_gone = 1;
                zkl__op_maybe_free(c, l);
            }
            SOP(op)->split_ids[i] = 0;
            continue;
        }
        QOP(l)->recipe = ZKL_MUTEX;
        l->phase = P_HELD;
        QOP(l)->dir = d;
        QOP(l)->prefix = p;
        QOP(l)->node = SOP(op)->leases[i];
        QOP(l)->czxid = SOP(op)->lease_czxid[i];
        SOP(op)->leases[i] = NULL;
        SOP(op)->split_ids[i] = l->id;
        c->stats.acquired++;
    }
    /* this op becomes the first lease */
    zkl__set_str(c, &QOP(op)->dir, SOP(op)->lease_dir);
    zkl__set_str(c, &QOP(op)->prefix, SOP(op)->lease_prefix);
    SOP(op)->lease_dir = NULL;
    SOP(op)->lease_prefix = NULL;
    QOP(op)->node = SOP(op)->leases[0];
    QOP(op)->czxid = SOP(op)->lease_czxid[0];
    SOP(op)->leases[0] = NULL;
    SOP(op)->nleases = 0;
    QOP(op)->stage = 0;
    zkl__queue_acquired(c, op);
}

static void lease_list_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    if (QOP(op)->drop_on_reply && op->phase != P_ACQUIRING && rc == ZOK &&
        QOP(op)->watch_token == token) {
        QOP(op)->drop_on_reply = 0;
        drop_lease_watch(c, op);
    }
    if (op->phase != P_ACQUIRING || QOP(op)->stage != 2 || op->gen != ZKL_TOKEN_GEN(token) ||
        (QOP(op)->step != S_LEASE_CREATE && QOP(op)->step != S_LEASE_LIST)) {
        zkl__op_maybe_free(c, op);
        return;
    }
    /* every create pipelined ahead of this list has been answered by now */
    if (SOP(op)->lease_unknown) {
        QOP(op)->step = S_LEASE_SCAN;
        sem_kick(c, op);
    } else if (SOP(op)->lease_nonode && op->parent_rc) {
        zkl__queue_fail(c, op, op->parent_rc);
    } else if (SOP(op)->lease_nonode) {
        if (SOP(op)->lease_parents_tried++ < ZKL_PARENT_ROUNDS) {
            QOP(op)->step = S_LEASE_START;
            sem_kick(c, op);
        } else {
            zkl__queue_fail(c, op, ZNONODE);
        }
    } else if (rc == ZOK) {
        int missing = 0;
        c->lease_hint_dir = dir_hash(SOP(op)->lease_dir);
        c->lease_hint_full = v->count > SOP(op)->max_leases;
        for (int i = 0; i < SOP(op)->nleases; i++) {
            if (!has_node(v, SOP(op)->leases[i])) { /* deleted by someone: make another */
                zkl__strfree(c, SOP(op)->leases[i]);
                SOP(op)->leases[i] = SOP(op)->leases[SOP(op)->nleases - 1];
                SOP(op)->lease_czxid[i] = SOP(op)->lease_czxid[SOP(op)->nleases - 1];
                SOP(op)->nleases--;
                i--;
                missing = 1;
            }
        }
        if (missing || SOP(op)->nleases < SOP(op)->qty) {
            QOP(op)->step = S_LEASE_START;
            sem_kick(c, op);
        } else if (v->count <= SOP(op)->max_leases) {
            grant_leases(c, op);
        } else if (QOP(op)->try_once) {
            zkl__queue_fail(c, op, ZKL_ETIMEDOUT);
        } else if (!SOP(op)->lease_watched) {
            issue_lease_list_as(c, op, 1); /* still over max: list again, this time to wait */
        } else {
            QOP(op)->step = S_LEASE_WAIT; /* the watch set by this list wakes us */
        }
    } else if (zkl__conn_lost(rc)) {
        QOP(op)->step = S_LEASE_RELIST;
        sem_kick(c, op);
    } else if (!zkl__handle_gone(rc)) {
        zkl__queue_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

static void lease_event(zkl_client *c, zkl_op *op, void *arg) {
    (void)arg;
    if (op->phase != P_ACQUIRING || QOP(op)->stage != 2) return;
    c->stats.watch_events++;
    /* the watch is used up: a listing that shows room grants without arming another */
    if (QOP(op)->step == S_LEASE_WAIT) issue_lease_list_as(c, op, 0);
}

/* The one watcher of every lease listing's watch, with the client as its context (see the
 * queue's watch_fired): the ops waiting on the path's leases are found in the client's index. */
static void lease_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)state;
    zkl_client *c = zkl__current(); /* watchers run inside the client's own process() */
    if (type == ZOO_SESSION_EVENT || !c || ctx != c || zh != c->zh || !path) return;
    zkl__windex_each(c, ZKL_WT_LEASE, path, lease_event, NULL);
}

static void lease_scan_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    if (op->phase == P_ACQUIRING && QOP(op)->stage == 2 && QOP(op)->step == S_LEASE_SCANNING &&
        op->gen == ZKL_TOKEN_GEN(token)) {
        if (rc == ZOK || rc == ZNONODE) {
            /* Start the lease set afresh: delete everything carrying our prefix, then create. */
            for (int i = 0; rc == ZOK && v && i < v->count; i++) {
                if (zkl__has_prefix(v->data[i], SOP(op)->lease_prefix)) {
                    char *full = zkl__join_path(c, SOP(op)->lease_dir, v->data[i]);
                    if (full)
                        zkl__queue_cleanup(c, SOP(op)->lease_dir, SOP(op)->lease_prefix, full, 0);
                    zkl__strfree(c, full);
                }
            }
            leases_clear(c, op);
            SOP(op)->lease_unknown = 0;
            /* a fresh prefix, so the cleanups above can never take the new leases */
            zkl__set_str(c, &SOP(op)->lease_prefix, zkl__new_prefix(c, "lease-"));
            QOP(op)->step = S_LEASE_START;
            if (!SOP(op)->lease_prefix)
                zkl__queue_fail(c, op, ZKL_ENOMEM);
            else
                sem_kick(c, op);
        } else if (zkl__conn_lost(rc) || zkl__handle_gone(rc)) {
            QOP(op)->step = S_LEASE_SCAN;
            sem_kick(c, op);
        } else {
            zkl__queue_fail(c, op, rc);
        }
    }
    zkl__op_maybe_free(c, op);
}

/* ---------------------------------------------------------------- public API */

int zkl__semaphore_new(zkl_client *c, const char *path, int max_leases, int qty, int timeout_ms,
                       int acl, zkl_op **out) {
    zkl_op *op;
    int why = zkl__startable(c);
    if (why) return why;
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
    int rc =
        zkl__queue_new(c, &sem_kind, locks, zkl__recipe_token(ZKL_MUTEX), timeout_ms, acl, &op);
    zkl__free(c, locks, n + 7);
    if (rc != ZKL_OK) {
        zkl__free(c, leases, n + 8);
        return rc;
    }
    zkl_sop *s = SOP(op);
    s->q.stage = 1;
    s->max_leases = max_leases;
    s->qty = qty;
    s->lease_dir = leases;
    s->lease_prefix = zkl__new_prefix(c, "lease-");
    s->leases = zkl__alloc(c, (size_t)qty * sizeof *s->leases);
    s->lease_czxid = zkl__alloc(c, (size_t)qty * sizeof *s->lease_czxid);
    s->split_ids = zkl__alloc(c, (size_t)qty * sizeof *s->split_ids);
    if (!s->lease_prefix || !s->leases || !s->lease_czxid || !s->split_ids) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    memset(s->split_ids, 0, (size_t)qty * sizeof *s->split_ids);
    *out = op;
    return ZKL_OK;
}

int zkl__semaphore_acquire(zkl_client *c, const char *path, int max_leases, int qty, int timeout_ms,
                           int acl, uint64_t *id) {
    zkl_op *op;
    int rc = zkl__semaphore_new(c, path, max_leases, qty, timeout_ms, acl, &op);
    return rc != ZKL_OK ? rc : zkl__queue_start(c, op, id);
}

int zkl__lease_ids(zkl_client *c, uint64_t id, uint64_t *ids, int n) {
    zkl_op *op = zkl__op_find(c, id);
    if (!op || op->kind != &sem_kind || !SOP(op)->split_ids) return ZKL_ENOTFOUND;
    int k = 0;
    for (int i = 0; i < SOP(op)->qty && k < n; i++)
        if (SOP(op)->split_ids[i]) ids[k++] = SOP(op)->split_ids[i];
    return k;
}
