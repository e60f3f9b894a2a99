/* queue.c - the fair queue: Curator's InterProcessMutex and InterProcessReadWriteLock as state
 * machines, also the internal mutex of the lease semaphore (semaphore.c builds on it through the
 * hooks of its kind table).
 *
 * Acquire:  [parents] -> create + list (pipelined: one round trip) -> held, or
 *           getData+watch on the predecessor -> (deleted) -> held if it was the head, else list.
 * Give up:  timeout, cancel, error or abandon -> delete own node (wait for a late create reply;
 *           scan by protected prefix if a create's outcome is unknown), retried while the session
 *           lives. The user is told at once; the cleanup finishes in the background.
 * Beside it: walk.c decides where a waiter goes from the listing it kept when its predecessor
 * is gone (this file sends what it decides), lock.c is the public lock API over the queue, and
 * node.c makes names, paths and container parents.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"

#define KICK(c, op) (op)->kind->kick((c), (op))

const zkl_kind zkl__queue_kind = {
    .name = "lock",
    .size = sizeof(zkl_qop),
    .flags = ZKL_KIND_QUEUE,
    .kick = zkl__queue_kick,
    .suspended = zkl__queue_suspended,
    .session_lost = zkl__queue_session_lost,
    .expire = zkl__queue_expire,
    .cancel = zkl__queue_cancel,
    .abandon = zkl__queue_abandon,
    .close = zkl__queue_close,
    .free_fields = zkl__queue_free_fields,
};

static void create_reply(int rc, const char *name, const struct Stat *st, const void *token);
static void list_reply(int rc, const struct String_vector *v, const void *token);
static void data_reply(int rc, const char *v, int len, const struct Stat *st, const void *token);
static void delete_reply(int rc, const void *token);
static void scan_reply(int rc, const struct String_vector *v, const void *token);
static void stat_reply(int rc, const struct Stat *st, const void *token);
static void watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx);
static void watch_node(zkl_client *c, zkl_op *op, const char *name, int is_head);
static void probe_reply(int rc, const struct Stat *st, const void *token);
static void issue_list(zkl_client *c, zkl_op *op);

/* ---------------------------------------------------------------- helpers */

void zkl__queue_free_fields(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    zkl__walk_drop(c, op);
    zkl__windex_remove(c, &q->w);
    zkl__strfree(c, q->dir);
    zkl__strfree(c, q->prefix);
    zkl__strfree(c, q->node);
    zkl__strfree(c, q->watch_path);
    zkl__strfree(c, q->fixed_name);
    if (q->data) zkl__free(c, q->data, q->data_len + 1);
}

static void ignore_reply(int rc, const void *data) {
    (void)rc, (void)data;
}

/* No memory for a cleanup op: delete at once without one (best effort: not retried after a
 * connection loss), rather than leave a node that others queue behind while the session lives. */
static void delete_now(zkl_client *c, const char *node) {
    if (!node || !zkl__connected(c)) return;
    c->stats.deletes++;
    zkl__adelete(c, node, -1, ignore_reply, NULL);
}

/* A background op that deletes `node` (or, with node NULL, every child of dir named with
 * prefix): used for nodes an op no longer owns itself (leases of a failed semaphore acquire,
 * the internal mutex node of a granted one). No event is ever reported for it. */
void zkl__queue_cleanup(zkl_client *c, const char *dir, const char *prefix, const char *node,
                        int held_head) {
    zkl_op *op = zkl__op_new(c, &zkl__queue_kind);
    if (!op) {
        delete_now(c, node);
        return;
    }
    zkl_qop *q = QOP(op);
    op->user_gone = 1;
    q->held_head = held_head;
    op->phase = P_CLEANUP;
    q->recipe = ZKL_MUTEX;
    q->dir = zkl__strdup(c, dir);
    q->prefix = zkl__strdup(c, prefix);
    q->node = node ? zkl__strdup(c, node) : NULL;
    q->unknown = node == NULL;
    if (!q->dir || !q->prefix || (node && !q->node)) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        delete_now(c, node);
        return;
    }
    KICK(c, op);
    zkl__op_maybe_free(c, op);
}

/* Is another live op of this client waiting on a data watch of the same path? Then the
 * server-side watch (one per path and session) must stay. */
static int watch_shared(zkl_client *c, zkl_op *op, const char *path) {
    for (zkl_wentry *e = zkl__windex_first(c, ZKL_WT_QUEUE, path); e; e = zkl__windex_next(e)) {
        zkl_op *o = e->op;
        if (o != op && o->phase == P_ACQUIRING &&
            (QOP(o)->step == S_WAIT || QOP(o)->step == S_DATA))
            return 1;
    }
    return 0;
}

/* Remove every watch of this type on the path (the caller checked no other op of ours needs it):
 * removing one watcher by its function and context only sends CheckWatches, which leaves the
 * server's watch in place. zookeeper.h declares the completion as void_completion_t *, but the
 * client stores and calls it as a plain void_completion_t (and asserts it is set). */
void zkl__remove_watches(zkl_client *c, const char *path, int type) {
    zkl__aremove_all_watches(c, path, (ZooWatcherType)type, 0, ignore_reply, NULL);
}

/* Take back the watch an abandoned waiter left armed, so a release does not wake a waiter that is
 * gone (and the server does not keep the watch until then). Best effort: without a connection the
 * server drops it with the session at the latest. */
static void drop_watch(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    if (!q->watch_path || !c->zh || !q->watch_token || watch_shared(c, op, q->watch_path)) return;
    zkl__remove_watches(c, q->watch_path, ZWATCHTYPE_DATA);
    q->watch_token = NULL;
}

/* ---------------------------------------------------------------- outcomes */

void zkl__queue_acquired(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    /* An exclusive grant (a mutex, latch or write lock of the user, or the semaphore's internal
     * mutex) is the head of its queue: every node below it is gone for good. The client's other
     * waiters on this dir need not check those any more. */
    if (q->node && !q->fixed_name && (q->stage == 1 || op->kind == &zkl__queue_kind) &&
        (q->recipe == ZKL_MUTEX || q->recipe == ZKL_LATCH || q->recipe == ZKL_WRITE))
        zkl__dircache_floor(c, q->dir, q->recipe, strrchr(q->node, '/') + 1);
    zkl__walk_drop(c, op);
    zkl__windex_remove(c, &q->w);                /* no predecessor to wait for any more */
    if (q->stage == 1 && op->kind->queue_head) { /* a kind built on the queue takes over */
        op->kind->queue_head(c, op);
        return;
    }
    c->stats.acquired++;
    op->phase = P_HELD;
    q->granted = 1;
    q->step = 0;
    op->deadline = 0;
    op->gen++;
    zkl__emit(c, op, ZKL_EV_ACQUIRED, ZKL_OK);
}

void zkl__queue_fail(zkl_client *c, zkl_op *op, int status) {
    zkl_qop *q = QOP(op);
    if (op->phase != P_ACQUIRING) return;
    zkl__walk_drop(c, op);
    zkl__emit(c, op, ZKL_EV_FAILED, status);
    if (q->step == S_WAIT)
        drop_watch(c, op);
    else if (q->step == S_DATA)
        q->drop_on_reply = 1;
    zkl__windex_remove(c, &q->w); /* after drop_watch, which asks the others of the path */
    if (op->kind->give_up) op->kind->give_up(c, op, 1);
    op->phase = P_CLEANUP;
    op->gen++; /* pending list/getData replies and armed watches are now stale */
    KICK(c, op);
}

void zkl__queue_session_lost(zkl_client *c, zkl_op *op, int status) {
    /* Every ephemeral node of the old session is gone with it. */
    zkl__walk_drop(c, op);
    zkl__windex_remove(c, &QOP(op)->w); /* its watch went with the session */
    zkl__set_str(c, &QOP(op)->node, NULL);
    QOP(op)->unknown = 0;
    op->gen++;
    switch (op->phase) {
    case P_ACQUIRING:
        zkl__emit(c, op, ZKL_EV_FAILED, status);
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
    case P_CLEANUP:
        op->phase = P_DONE;
        break;
    default:
        break;
    }
}

void zkl__queue_suspended(zkl_client *c, zkl_op *op, int suspended) {
    /* the link dropped: a waiter lists again once its watch fires (correctness first); a probe
     * round in flight is over (its replies are stale): list once connected again */
    if (op->phase == P_ACQUIRING && suspended) {
        if (QOP(op)->step == S_PROBE) {
            op->gen++;
            QOP(op)->step = S_RELIST;
        }
        zkl__walk_drop(c, op);
    }
    if (op->phase == P_HELD)
        zkl__emit(c, op, ZKL_EV_LOCK_STATE, suspended ? ZKL_LOCK_SUSPENDED : ZKL_LOCK_RECONNECTED);
}

void zkl__queue_expire(zkl_client *c, zkl_op *op) {
    zkl__queue_fail(c, op, ZKL_ETIMEDOUT);
}

void zkl__queue_close(zkl_client *c, zkl_op *op) {
    zkl__walk_drop(c, op);
    if (op->phase == P_ACQUIRING)
        zkl__emit(c, op, ZKL_EV_FAILED, ZKL_ECLOSED);
    else if (op->phase == P_RELEASING)
        zkl__emit(c, op, ZKL_EV_RELEASED, ZKL_OK);
    op->user_gone = 1;
    op->phase = P_DONE; /* closing the session deletes every ephemeral node at once */
}

/* ---------------------------------------------------------------- requests */

void zkl__queue_issue_failed(zkl_client *c, zkl_op *op, int rc) {
    if (rc == ZMARSHALLINGERROR || rc == ZBADARGUMENTS) {
        if (op->phase == P_ACQUIRING) zkl__queue_fail(c, op, rc);
    }
    /* otherwise the connection is gone; the next CONNECTED state kicks the op again */
}

/* A listing of the op's dir for its current token: shared when possible, else its own request. */
static void request_list(zkl_client *c, zkl_op *op) {
    if (zkl__listing_join(c, QOP(op)->dir, ZKL_TOKEN(op), list_reply) == 0) return;
    c->stats.lists++;
    ZKL_ISSUE(c, op, zkl__aget_children(c, QOP(op)->dir, 0, list_reply, ZKL_TOKEN(op)));
}

static void issue_create_and_list(zkl_client *c, zkl_op *op) {
    char *path = zkl__join_path(c, QOP(op)->dir,
                                QOP(op)->fixed_name ? QOP(op)->fixed_name : QOP(op)->prefix);
    if (!path) {
        zkl__queue_fail(c, op, ZKL_ENOMEM);
        return;
    }
    op->gen++;
    QOP(op)->step = S_CREATE;
    QOP(op)->create_inflight = 1;
    c->stats.creates++;
    const char *data = QOP(op)->data ? QOP(op)->data : c->identity;
    size_t dlen = QOP(op)->data ? QOP(op)->data_len : c->identity_len;
    int rc = zkl__acreate2(c, path, data, (int)dlen, zkl__acl(c, QOP(op)->acl),
                           QOP(op)->fixed_name ? ZOO_EPHEMERAL : ZOO_EPHEMERAL_SEQUENTIAL,
                           create_reply, ZKL_TOKEN(op));
    zkl__strfree(c, path);
    if (rc != ZOK) {
        QOP(op)->create_inflight = 0;
        QOP(op)->step = S_START;
        zkl__queue_issue_failed(c, op, rc);
        return;
    }
    op->refs++;
    if (QOP(op)->grant_on_create) return; /* nothing to wait for: no list needed */
    /* Pipelined: the listing goes out after the create, so it includes our node. */
    request_list(c, op);
}

/* Every ancestor and the lock dir itself as containers, as Curator does (node.c) */
static void issue_parents(zkl_client *c, zkl_op *op) {
    /* another op of this client has them in flight: they go ahead of our create (internal.h) */
    if (c->parents_pending > 0 && c->parents_dir && strcmp(c->parents_dir, QOP(op)->dir) == 0)
        return;
    char *dir = zkl__strdup(c, QOP(op)->dir);
    op->parents_batch = 0;
    if (dir) { /* out of memory: this batch is not shared */
        zkl__set_str(c, &c->parents_dir, dir);
        c->parents_pending = 0;
        if (++c->parents_batch == 0) c->parents_batch = 1; /* 0: no batch */
        op->parents_batch = c->parents_batch;
    }
    int refs = op->refs;
    int rc = zkl__make_parents(c, op, QOP(op)->dir, ZKL_PARENTS_ANCESTORS | ZKL_PARENTS_SELF,
                               QOP(op)->acl);
    if (op->parents_batch) c->parents_pending = op->refs - refs;
    if (rc != ZOK) zkl__queue_issue_failed(c, op, rc);
}

static void issue_list(zkl_client *c, zkl_op *op) {
    op->gen++;
    QOP(op)->step = S_LIST;
    request_list(c, op);
}

static void issue_delete(zkl_client *c, zkl_op *op) {
    QOP(op)->delete_inflight = 1;
    QOP(op)->deletes_sent++;
    c->stats.deletes++;
    int rc = zkl__adelete(c, QOP(op)->node, -1, delete_reply, ZKL_TOKEN(op));
    if (rc == ZOK)
        op->refs++;
    else
        QOP(op)->delete_inflight = 0;
}

static void issue_scan(zkl_client *c, zkl_op *op) {
    QOP(op)->scan_inflight = 1;
    c->stats.lists++;
    if (op->phase == P_ACQUIRING) QOP(op)->step = S_SCANNING;
    int rc = zkl__aget_children(c, QOP(op)->dir, 0, scan_reply, ZKL_TOKEN(op));
    if (rc == ZOK)
        op->refs++;
    else {
        QOP(op)->scan_inflight = 0;
        if (op->phase == P_ACQUIRING) QOP(op)->step = S_SCAN;
    }
}

/* Move the op forward as far as the connection allows. Called after every change. */
void zkl__queue_kick(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    int connected = zkl__connected(c);
    switch (op->phase) {
    case P_ACQUIRING:
        if (!connected) return;
        if (q->step == S_START)
            issue_create_and_list(c, op);
        else if (q->step == S_RELIST)
            issue_list(c, op);
        else if (q->step == S_SCAN)
            issue_scan(c, op);
        return;
    case P_RELEASING:
    case P_CLEANUP:
        if (q->create_inflight || q->delete_inflight || q->scan_inflight) return;
        if (q->node) {
            if (connected) issue_delete(c, op);
        } else if (q->unknown) {
            if (connected) issue_scan(c, op);
        } else {
            if (op->phase == P_RELEASING) zkl__emit(c, op, ZKL_EV_RELEASED, q->release_status);
            op->phase = P_DONE;
        }
        return;
    default:
        return;
    }
}

/* ---------------------------------------------------------------- replies */

static void create_reply(int rc, const char *name, const struct Stat *st, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    QOP(op)->create_inflight = 0;
    if (rc == ZOK) {
        zkl__set_str(c, &QOP(op)->node, zkl__strdup(c, name));
        QOP(op)->czxid = st ? st->czxid : 0;
        QOP(op)->owner = st ? st->ephemeralOwner : 0;
        QOP(op)->unknown = 0;
        if (!QOP(op)->node) {
            QOP(op)->unknown = 1; /* out of memory: find it again by prefix and delete it */
            zkl__queue_fail(c, op, ZKL_ENOMEM);
        }
    } else if (zkl__conn_lost(rc)) {
        QOP(op)->unknown = 1; /* the server may have created it: protected-mode recovery */
    }
    if (op->phase != P_ACQUIRING) {
        KICK(c, op); /* abandoned meanwhile: delete what was created */
        zkl__op_maybe_free(c, op);
        return;
    }
    if (rc == ZOK) {
        if (QOP(op)->grant_on_create)
            zkl__queue_acquired(c, op);
        else
            QOP(op)->step = S_LIST; /* the pipelined list reply comes next */
    } else if (rc == ZNONODE && op->parent_rc) {
        zkl__queue_fail(c, op, op->parent_rc); /* e.g. ZNOAUTH: we may not create the parent */
    } else if (rc == ZNONODE && QOP(op)->parents_tried < ZKL_PARENT_ROUNDS &&
               !QOP(op)->grant_on_create) {
        QOP(op)->parents_tried++;
        QOP(op)->step = S_START;
        issue_parents(c, op);
        issue_create_and_list(c, op); /* also makes the pipelined list reply stale */
    } else if (zkl__conn_lost(rc)) {
        op->gen++;
        QOP(op)->step = S_SCAN;
        KICK(c, op);
    } else if (zkl__handle_gone(rc)) {
        op->gen++;
        QOP(op)->step = S_START;
    } else {
        zkl__queue_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

static void restart_attempt(zkl_client *c, zkl_op *op) {
    /* Own node vanished (deleted by someone else, or its parent was removed): queue again. */
    zkl__walk_drop(c, op);
    zkl__set_str(c, &QOP(op)->node, NULL);
    QOP(op)->step = S_START;
    KICK(c, op);
}

/* The latch claims leadership only on a node whose ephemeralOwner is this client's current
 * session (Curator's double-leader bugs came from leading on a node of a session that was gone).
 * Other recipes trust their node: it was created or adopted on the live session. */
static int own_session_node(zkl_client *c, zkl_op *op) {
    if (QOP(op)->recipe != ZKL_LATCH) return 1;
    const clientid_t *id = c->zh ? c->zk->client_id(c->zh) : NULL;
    return id && QOP(op)->owner != 0 && QOP(op)->owner == id->client_id;
}

/* Watch a node that sorts before ours (name: in the op's dir): getData with a watch. */
static void watch_node(zkl_client *c, zkl_op *op, const char *name, int is_head) {
    char *wp = zkl__join_path(c, QOP(op)->dir, name);
    if (!wp) {
        zkl__queue_fail(c, op, ZKL_ENOMEM);
        return;
    }
    zkl__windex_remove(c, &QOP(op)->w); /* before its path goes */
    zkl__set_str(c, &QOP(op)->watch_path, wp);
    if (zkl__windex_add(c, &QOP(op)->w, op, wp, ZKL_WT_QUEUE) != ZOK) {
        zkl__queue_fail(c, op, ZKL_ENOMEM);
        return;
    }
    QOP(op)->watch_is_head = is_head;
    QOP(op)->step = S_DATA;
    QOP(op)->watch_token = ZKL_TOKEN(op);
    /* getData, not exists: on a node that is already gone it leaves no watch behind. The
     * watcher's context is the client, as for every waiter (see watch_fired). */
    c->stats.gets++;
    ZKL_ISSUE(c, op, zkl__awget(c, wp, watch_fired, c, data_reply, ZKL_TOKEN(op)));
}

static void evaluate(zkl_client *c, zkl_op *op, const struct String_vector *v) {
    int n = v ? v->count : 0;
    const char *own = strrchr(QOP(op)->node, '/') + 1;
    const char **names = zkl__alloc(c, (size_t)(n ? n : 1) * sizeof *names);
    zkl__sort_item *scratch = zkl__alloc(c, (size_t)(n ? n : 1) * sizeof *scratch);
    if (!names || !scratch) {
        zkl__free(c, names, (size_t)(n ? n : 1) * sizeof *names);
        zkl__free(c, scratch, (size_t)(n ? n : 1) * sizeof *scratch);
        zkl__queue_fail(c, op, ZKL_ENOMEM);
        return;
    }
    if (v && v == c->sorted_for && c->sorted && c->sorted_recipe == (int)QOP(op)->recipe) {
        memcpy(names, c->sorted, (size_t)n * sizeof *names); /* a shared listing, sorted already */
    } else {
        for (int i = 0; i < n; i++)
            names[i] = v->data[i];
        zkl__sort_children(names, n, QOP(op)->recipe, scratch);
        if (v && v == c->sorted_for && n > 0) { /* keep it for the other ops of this listing */
            const char **keep = zkl__alloc(c, (size_t)n * sizeof *keep);
            if (keep) {
                zkl__free(c, (void *)c->sorted, c->sorted_n * sizeof *c->sorted);
                memcpy(keep, names, (size_t)n * sizeof *keep);
                c->sorted = keep;
                c->sorted_n = (size_t)n;
                c->sorted_recipe = (int)QOP(op)->recipe;
            }
        }
    }
    zkl__pick pick;
    zkl__pick_predecessor(names, n, own, QOP(op)->recipe, &pick);
    if (QOP(op)->ahead < 0 && pick.own >= 0) QOP(op)->ahead = pick.own; /* contenders seen */
    if (pick.wrapped && !QOP(op)->warned_wrap) {
        QOP(op)->warned_wrap = 1;
        zkl__emit(c, op, ZKL_EV_WARNING, ZKL_ESEQWRAP);
    }
    if (pick.own < 0) {
        restart_attempt(c, op);
    } else if (pick.holds && !own_session_node(c, op)) {
        /* a latch node this session does not own (never expected: a node of an old session is
         * forgotten when the session ends): never lead on it; delete it and queue anew */
        zkl__queue_cleanup(c, QOP(op)->dir, QOP(op)->prefix, QOP(op)->node, 0);
        restart_attempt(c, op);
    } else if (pick.holds || QOP(op)->grant_on_create) {
        zkl__queue_acquired(c, op);
    } else if (QOP(op)->try_once) {
        zkl__queue_fail(c, op, ZKL_ETIMEDOUT);
    } else {
        zkl__walk_keep(c, op, names, n, v, pick.wrapped);
        watch_node(c, op, names[pick.watch], pick.watch_is_head);
    }
    zkl__free(c, names, (size_t)(n ? n : 1) * sizeof *names);
    zkl__free(c, scratch, (size_t)(n ? n : 1) * sizeof *scratch);
}

static void list_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    if (op->phase == P_ACQUIRING && QOP(op)->step == S_LIST && op->gen == ZKL_TOKEN_GEN(token)) {
        if (rc == ZOK)
            evaluate(c, op, v);
        else if (zkl__conn_lost(rc)) {
            QOP(op)->step = S_RELIST;
            KICK(c, op);
        } else if (rc == ZNONODE)
            restart_attempt(c, op);
        else if (!zkl__handle_gone(rc))
            zkl__queue_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

/* No node that counts is left below ours: the lock is ours, except on the write side (it lists:
 * a downgrade's read node has an old sequence) and for a latch node of another session. */
static int walk_grant(zkl_client *c, zkl_op *op) {
    if (QOP(op)->recipe == ZKL_WRITE || !own_session_node(c, op)) return 0;
    c->stats.handoffs++;
    zkl__queue_acquired(c, op);
    return 1;
}

/* The walk down the kept listing (see predecessor_gone; walk.c decides, this sends). Returns 0
 * when the op must list. */
static int walk(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    const char *next = NULL;
    int head = 0;
    switch (zkl__walk_plan(c, op, &next, &head)) {
    case ZKL_WALK_GRANT:
        return walk_grant(c, op);
    case ZKL_WALK_WATCH:
        op->gen++; /* a late reply or event about the node watched before is stale now */
        watch_node(c, op, next, head);
        return 1;
    case ZKL_WALK_PROBE:
        break;
    default:
        return 0;
    }
    op->gen++;
    q->step = S_PROBE;
    for (int i = 0; i < q->probe_n; i++) {
        c->stats.exists++;
        int rc = zkl__aexists(c, q->probe[i], 0, probe_reply, ZKL_TOKEN(op));
        if (rc != ZOK) { /* the link is gone: those sent fail too; list once connected */
            zkl__walk_probes_unsent(c, op, i);
            if (i == 0) {
                q->step = S_RELIST;
                KICK(c, op);
            }
            return 1;
        }
        op->refs++;
    }
    return 1;
}

static void probe_reply(int rc, const struct Stat *st, const void *token) {
    zkl_client *c;
    (void)st;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    zkl_qop *q = QOP(op);
    if (op->phase == P_ACQUIRING && q->step == S_PROBE && op->gen == ZKL_TOKEN_GEN(token) &&
        q->probe_i < q->probe_n) {
        const char *next = NULL;
        int head = 0;
        switch (zkl__walk_probed(c, op, rc, &next, &head)) {
        case ZKL_WALK_RELIST:
            q->step = S_RELIST;
            KICK(c, op);
            break;
        case ZKL_WALK_GRANT:
            if (!walk_grant(c, op)) issue_list(c, op);
            break;
        case ZKL_WALK_WATCH:
            op->gen++;
            watch_node(c, op, next, head); /* the nearest one still there */
            break;
        default: /* more replies to come */
            break;
        }
    }
    zkl__op_maybe_free(c, op);
}

/* The watched node is gone. A waiter that kept its listing walks down it instead of listing
 * again: every node that can still sort before ours was in that listing (sequence numbers only
 * grow, and it was taken after our create), so it watches the nearest one not known gone (for a
 * reader: the nearest writer), after checking the others with exists() when there are several,
 * and holds when none is left. A drain of N waiters across processes then moves bytes per
 * handoff that do not grow with N. The write side still lists before it takes the lock: a
 * holder's downgrade makes a read node with an old sequence, which no listing of ours has seen.
 * Without a kept listing (none yet, the link dropped since, a wrapped sequence), or with more
 * than ZKL_WALK_MAX nodes to check, it lists, as Curator does. */
static void predecessor_gone(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    if (q->cache && q->watch_path) zkl__dircache_gone(q->cache, strrchr(q->watch_path, '/') + 1);
    if ((q->watch_is_head || zkl__walk_own_predecessor(c, op)) && own_session_node(c, op)) {
        c->stats.handoffs++;
        zkl__queue_acquired(c, op);
        return;
    }
    if (walk(c, op)) return;
    issue_list(c, op);
}

static void data_reply(int rc, const char *v, int len, const struct Stat *st, const void *token) {
    zkl_client *c;
    (void)v, (void)len, (void)st;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    if (QOP(op)->drop_on_reply && op->phase != P_ACQUIRING && rc == ZOK &&
        QOP(op)->watch_token == token) {
        QOP(op)->drop_on_reply = 0;
        drop_watch(c, op); /* gave up while this getData was in flight: its watch is now set */
    }
    if (op->phase == P_ACQUIRING && QOP(op)->step == S_DATA && op->gen == ZKL_TOKEN_GEN(token)) {
        if (rc == ZOK)
            QOP(op)->step = S_WAIT;
        else if (rc == ZNONODE)
            predecessor_gone(c, op);
        else if (zkl__conn_lost(rc)) {
            QOP(op)->step = S_RELIST;
            KICK(c, op);
        } else if (!zkl__handle_gone(rc))
            zkl__queue_fail(c, op, rc);
    }
    zkl__op_maybe_free(c, op);
}

static void waiter_event(zkl_client *c, zkl_op *op, void *arg) {
    int type = *(const int *)arg;
    if (op->phase != P_ACQUIRING) return;
    if (QOP(op)->step != S_WAIT && QOP(op)->step != S_DATA) return;
    c->stats.watch_events++;
    if (type == ZOO_DELETED_EVENT)
        predecessor_gone(c, op);
    else
        issue_list(c, op); /* data changed (e.g. a revocation request): look again */
}

/* The one watcher of every waiter's watch, with the client as its context: on every session
 * event the 3.8 C client walks its distinct (watcher, context) pairs with a linear search per
 * pair, so a context per waiter cost time quadratic in their number (10,000 waiters of one
 * client: about 0.13 s per event, the process stopped). The ZooKeeper client calls it once per
 * event and path; the waiters watching that path are found in the client's index. */
static void watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)state;
    zkl_client *c = zkl__current(); /* watchers run inside the client's own process() */
    if (type == ZOO_SESSION_EVENT || !c || ctx != c || zh != c->zh || !path) return;
    zkl__windex_each(c, ZKL_WT_QUEUE, path, waiter_event, &type);
}

static void delete_reply(int rc, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    QOP(op)->delete_inflight = 0;
    if (rc == ZNONODE && op->phase == P_RELEASING && QOP(op)->deletes_sent == 1)
        /* the release's only delete found no node: someone else deleted it while it was held
         * (after a resend, ZNONODE may be our own first delete's effect: that counts as done) */
        QOP(op)->release_status = ZNONODE;
    if (rc == ZOK || rc == ZNONODE) {
        /* the client's other waiters on this dir need not check it (it may be the floor) */
        if (QOP(op)->node && QOP(op)->dir)
            zkl__dircache_gone_in(c, QOP(op)->dir, QOP(op)->recipe,
                                  strrchr(QOP(op)->node, '/') + 1);
        zkl__set_str(c, &QOP(op)->node, NULL);
    } else if (!zkl__conn_lost(rc) && !zkl__handle_gone(rc)) {
        /* e.g. ZNOAUTH: the node cannot be deleted by us; report it and stop trying */
        if (op->phase == P_RELEASING)
            QOP(op)->release_status = rc;
        else
            zkl__emit(c, NULL, ZKL_EV_WARNING, rc);
        zkl__set_str(c, &QOP(op)->node, NULL);
        QOP(op)->unknown = 0;
    }
    KICK(c, op); /* connection loss: retried by the kick after reconnect */
    zkl__op_maybe_free(c, op);
}

static void scan_reply(int rc, const struct String_vector *v, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    QOP(op)->scan_inflight = 0;
    const char *found = NULL;
    if (rc == ZOK && v) {
        for (int i = 0; i < v->count && !found; i++)
            if (zkl__has_prefix(v->data[i], QOP(op)->prefix)) found = v->data[i];
    }
    if (rc == ZOK || rc == ZNONODE) {
        if (found) zkl__set_str(c, &QOP(op)->node, zkl__join_path(c, QOP(op)->dir, found));
        /* Cleaning up: after deleting this one, scan again (a semaphore may have made several). */
        if (!found || op->phase == P_ACQUIRING) QOP(op)->unknown = 0;
    }
    if (op->phase == P_ACQUIRING && QOP(op)->step == S_SCANNING) {
        if (rc == ZOK && found && QOP(op)->node) {
            QOP(op)->step = S_STAT; /* adopt it: read its czxid for the fencing token, then list */
            c->stats.exists++;
            ZKL_ISSUE(c, op, zkl__aexists(c, QOP(op)->node, 0, stat_reply, ZKL_TOKEN(op)));
        } else if (rc == ZOK || rc == ZNONODE) {
            QOP(op)->step = S_START;
            KICK(c, op);
        } else if (zkl__conn_lost(rc) || zkl__handle_gone(rc)) {
            QOP(op)->step = S_SCAN;
            KICK(c, op);
        } else {
            zkl__queue_fail(c, op, rc);
        }
    } else {
        KICK(c, op);
    }
    zkl__op_maybe_free(c, op);
}

static void not_ours(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    if (!q->fixed_name) {
        /* same token (the text after "_c_<uuid>-"), new uuid */
        size_t skip = 3 + 36 + 1;
        char *fresh = strlen(q->prefix) >= skip ? zkl__new_prefix(c, q->prefix + skip) : NULL;
        if (!fresh) {
            zkl__set_str(c, &q->node, NULL);
            zkl__queue_fail(c, op, ZKL_ENOMEM);
            return;
        }
        zkl__set_str(c, &q->prefix, fresh);
    }
    restart_attempt(c, op);
}

static void stat_reply(int rc, const struct Stat *st, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    if (op->phase == P_ACQUIRING && QOP(op)->step == S_STAT) {
        const clientid_t *me = c->zh ? c->zk->client_id(c->zh) : NULL;
        if (rc == ZOK && st && (!me || st->ephemeralOwner != me->client_id)) {
            /* A node with our prefix that this session does not own was made by an earlier,
             * expired session: it vanishes with that session and must never grant us anything.
             * Create our own under a fresh prefix, so no later scan can find it again. */
            not_ours(c, op);
        } else if (rc == ZOK && st) {
            QOP(op)->czxid = st->czxid;
            QOP(op)->owner = st->ephemeralOwner;
            issue_list(c, op);
        } else if (rc == ZNONODE) {
            restart_attempt(c, op);
        } else if (zkl__conn_lost(rc) || zkl__handle_gone(rc)) {
            QOP(op)->step = S_SCAN; /* look for it again */
            KICK(c, op);
        } else {
            zkl__queue_fail(c, op, rc);
        }
    }
    zkl__op_maybe_free(c, op);
}

/* ---------------------------------------------------------------- making and ending queue ops */

int zkl__queue_new(zkl_client *c, const zkl_kind *kind, const char *dir, const char *token,
                   int timeout_ms, int acl, zkl_op **out) {
    if (acl < 0 || acl > c->nacls) return ZKL_EINVAL;
    zkl_op *op = zkl__op_new(c, kind);
    if (!op) return ZKL_ENOMEM;
    zkl_qop *q = QOP(op);
    q->recipe = ZKL_MUTEX;
    op->phase = P_ACQUIRING;
    q->step = S_START;
    q->acl = acl;
    q->ahead = -1;
    q->dir = zkl__strdup(c, dir);
    q->prefix = zkl__new_prefix(c, token);
    if (!q->dir || !q->prefix) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    if (timeout_ms == 0) {
        /* one look at the queue, but the answers it needs may never come: with no session (never
         * connected, or between sessions) no LOST would end the wait. Bounded like a plain call. */
        q->try_once = 1;
        op->deadline = zkl__now(c) + c->session_timeout_ms + 1;
        zkl__note_deadline(c, op->deadline);
    } else if (timeout_ms > 0) {
        op->deadline = zkl__now(c) + timeout_ms + 1; /* the clock is truncated to ms: never early */
        zkl__note_deadline(c, op->deadline);
    }
    *out = op;
    return ZKL_OK;
}

int zkl__queue_start(zkl_client *c, zkl_op *op, uint64_t *id) {
    *id = op->id;
    KICK(c, op);
    /* Called by users, and by a multi-lock from inside a completion: ZooKeeper must not be
     * re-entered there; process() refreshes its interest on the way out anyway. */
    if (!c->in_callback) zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__queue_cancel(zkl_client *c, zkl_op *op) {
    if (op->phase != P_ACQUIRING) return ZKL_ENOTHELD;
    zkl__queue_fail(c, op, ZKL_ECANCELED);
    return ZKL_OK;
}

void zkl__queue_abandon(zkl_client *c, zkl_op *op) {
    zkl__walk_drop(c, op);
    op->user_gone = 1;
    op->parent_id = 0;
    if (op->phase == P_ACQUIRING) {
        zkl__windex_remove(c, &QOP(op)->w); /* its watch, if armed, wakes nobody */
        if (op->kind->give_up) op->kind->give_up(c, op, 0);
        op->phase = P_CLEANUP;
        op->gen++;
    } else if (op->phase == P_HELD) {
        op->phase = P_CLEANUP;
    } else if (op->phase == P_LOST) {
        op->phase = P_DONE;
    }
    KICK(c, op);
    zkl__op_maybe_free(c, op);
}
