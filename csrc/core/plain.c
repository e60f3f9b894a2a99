/* plain.c - plain znode operations (get, set, create, delete, children, exists): one request
 * each (a create with parents: its ancestors' creates pipelined ahead of it), reads retried
 * across a connection loss, an optional timeout, the result readable until its event is
 * consumed. A read may arm a one-shot watch (args.watch): the op then lives on in P_HELD after
 * its OP_DONE until the watch fires, the session ends or the client closes, and reports that
 * with one ZKL_EV_WATCH.
 *
 * Every such watch is registered with the ZooKeeper client under one watcher function and one
 * context (the client), not one per op: on every session event (each connection loss and each
 * reconnection) the 3.8 C client builds the list of its distinct (watcher, context) pairs with a
 * linear search per pair (collectWatchers), quadratic in their number - 0.7 s for a cache's 20,000
 * watches, the whole process stopped meanwhile. With one pair that list has one entry. The C
 * client then calls the watcher once per event and path; the armed reads are found here, by
 * path, in the client's index (windex.c) (the server, too, keeps one watch per path and
 * connection). The index is the client's for all its watches: lock waiters (queue.c) and lease
 * listings (semaphore.c) put theirs in it too, each under a watcher function of their own. */
#include <string.h>

#include "internal.h"

typedef struct zkl_pop {
    zkl_op op;
    zkl_op_args args;
    char *args_path, *args_data;
    int rc;
    char *res_data;
    size_t res_len;
    char **res_children;
    int res_nchildren;
    struct Stat res_stat;
    int parents_tried; /* ZKL_CREATE_PARENTS: rounds of making the ancestors */
    int watch_sent;    /* the last request went with the watcher (its answer may arm it) */
    zkl_wentry w;      /* while its watch is armed (P_HELD): in the client's index by path */
} zkl_pop;

#define P(o) ((zkl_pop *)(o))

static void plain_kick(zkl_client *c, zkl_op *op);
static void plain_close(zkl_client *c, zkl_op *op);
static void plain_session_lost(zkl_client *c, zkl_op *op, int status);
static void plain_expire(zkl_client *c, zkl_op *op);
static void plain_free_fields(zkl_client *c, zkl_op *op);
static void plain_abandon(zkl_client *c, zkl_op *op);

static const zkl_kind plain_kind = {
    .name = "plain",
    .size = sizeof(zkl_pop),
    .kick = plain_kick,
    .session_lost = plain_session_lost,
    .expire = plain_expire,
    .close = plain_close,
    .abandon = plain_abandon,
    .free_fields = plain_free_fields,
};

/* Whether an event of this type ends the watch that a read of this type armed (the C client's
 * tables: data for get and for exists of a node, creation for exists of a missing node,
 * children for children). */
static int ends_watch(int event, zkl_op_type type) {
    if (event == ZOO_DELETED_EVENT) return 1;
    if (event == ZOO_CHANGED_EVENT) return type == ZKL_OP_GET || type == ZKL_OP_EXISTS;
    if (event == ZOO_CREATED_EVENT) return type == ZKL_OP_EXISTS;
    if (event == ZOO_CHILD_EVENT) return type == ZKL_OP_CHILDREN;
    return 0;
}

static void windex_add(zkl_client *c, zkl_op *op) {
    (void)zkl__windex_add(c, &P(op)->w, op, P(op)->args.path, ZKL_WT_PLAIN); /* room was made */
}

static void windex_remove(zkl_client *c, zkl_op *op) {
    zkl__windex_remove(c, &P(op)->w);
}

static void plain_free_fields(zkl_client *c, zkl_op *op) {
    windex_remove(c, op);
    zkl__strfree(c, P(op)->args_path);
    zkl__free(c, P(op)->args_data, P(op)->args.len + 1);
    zkl__free(c, P(op)->res_data, P(op)->res_len + 1);
    for (int i = 0; i < P(op)->res_nchildren; i++)
        zkl__strfree(c, P(op)->res_children[i]);
    zkl__free(c, P(op)->res_children, (size_t)P(op)->res_nchildren * sizeof *P(op)->res_children);
}

static int is_read(const zkl_op *op) {
    zkl_op_type t = ((const zkl_pop *)op)->args.type;
    return t == ZKL_OP_GET || t == ZKL_OP_CHILDREN || t == ZKL_OP_EXISTS;
}

/* Would answer rc of this read have armed its watch? */
static int arms_watch(const zkl_op *op, int rc) {
    const zkl_pop *p = (const zkl_pop *)op;
    return rc == ZOK || (rc == ZNONODE && p->args.type == ZKL_OP_EXISTS);
}

static void plain_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* The ZooKeeper client's watch tables a read's watch goes in: children, or data (the get's and
 * the exists' tables, which the client removes together). */
static int child_watch(zkl_op_type type) {
    return type == ZKL_OP_CHILDREN;
}

/* Whether another armed read (not op) holds a watch of op's path in op's table. */
static int watched_by_other(zkl_client *c, const zkl_op *op) {
    const zkl_pop *me = (const zkl_pop *)op;
    for (zkl_wentry *e = zkl__windex_first(c, ZKL_WT_PLAIN, me->args.path); e;
         e = zkl__windex_next(e))
        if (e->op != op && child_watch(P(e->op)->args.type) == child_watch(me->args.type)) return 1;
    return 0;
}

/* op's watch is left for nobody (op abandoned, armed or on its way): unless another armed read
 * of the path shares it, the ZooKeeper client forgets our watcher of that path and table at
 * once. Every plain watch has the same watcher and context, so the removal is the path's and
 * table's as a whole: a read still armed there keeps it. Otherwise the client would list the
 * path in the SetWatches of every reconnection until the node changed (a closed cache's
 * thousands of watches, say). A read still on its way re-arms it with its answer. */
static void forget_watcher(zkl_client *c, zkl_op *op) {
    zkl_pop *p = P(op);
    if (!p->watch_sent) return;
    p->watch_sent = 0;
    if (watched_by_other(c, op)) return;
    ZooWatcherType type = child_watch(p->args.type) ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA;
    zkl__forget_watcher(c, p->args.path, type, plain_watch_fired, c);
}

static void plain_done(zkl_client *c, zkl_op *op, int rc) {
    if (op->phase == P_DONE) {
        /* a late answer (the read timed out): what it armed is nobody's */
        if (arms_watch(op, rc)) forget_watcher(c, op);
        return;
    }
    if (rc == ZCLOSING || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE)
        rc = c->closed ? ZKL_ECLOSED : c->auth_failed ? ZAUTHFAILED : ZKL_ESESSION;
    P(op)->rc = rc;
    op->phase = P_DONE;
    int was_gone = op->user_gone;
    zkl__emit(c, op, ZKL_EV_OP_DONE, rc);
    /* the server armed the watch with this answer: the op waits for it (P_HELD) */
    if (P(op)->args.watch && !was_gone && arms_watch(op, rc)) {
        op->phase = P_HELD;
        op->user_gone = 0;
        windex_add(c, op);
    } else if (arms_watch(op, rc)) {
        forget_watcher(c, op); /* abandoned while its read was on its way: armed for nobody */
    }
}

/* The watch's one event; the op is done then. */
static void watch_done(zkl_client *c, zkl_op *op, int status) {
    if (op->phase != P_HELD) return;
    windex_remove(c, op);
    op->phase = P_DONE;
    op->gen++; /* a later call of the watcher is stale */
    zkl__emit(c, op, ZKL_EV_WATCH, status);
    op->user_gone = 1;
}

/* The one watcher of every plain watch: the event ends the watch of each armed read of that
 * path whose kind it concerns (the C client calls it once per event, for all of them). */
static void plain_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)state;
    zkl_client *c = zkl__current(); /* watchers run inside the client's own process() */
    if (type == ZOO_SESSION_EVENT || !c || ctx != c || zh != c->zh || !path) return;
    zkl_wentry *e = zkl__windex_first(c, ZKL_WT_PLAIN, path), *next;
    for (; e; e = next) {
        next = zkl__windex_next(e); /* watch_done takes e out of the chain, and frees its op */
        zkl_op *op = e->op;
        if (!ends_watch(type, P(op)->args.type)) continue;
        c->stats.watch_events++;
        watch_done(c, op, type);
        zkl__op_maybe_free(c, op);
    }
}

static void plain_abandon(zkl_client *c, zkl_op *op) {
    op->user_gone = 1;
    if (op->phase == P_HELD) {
        windex_remove(c, op);
        forget_watcher(c, op);
        op->phase = P_DONE;
        op->gen++;
    } else if (op->phase == P_ACQUIRING) {
        P(op)->args.watch = 0; /* its answer arms nothing we wait for */
        /* a read nobody waits for that has not gone out (or must go again after a connection
         * loss) is not sent: done now */
        if (is_read(op) && op->refs == 0) op->phase = P_DONE;
    }
    zkl__op_maybe_free(c, op);
}

static int set_result_data(zkl_client *c, zkl_op *op, const char *v, size_t len) {
    P(op)->res_data = zkl__alloc(c, len + 1);
    if (!P(op)->res_data) return ZKL_ENOMEM;
    if (len) memcpy(P(op)->res_data, v, len);
    P(op)->res_data[len] = '\0';
    P(op)->res_len = len;
    return ZOK;
}

static void plain_stat_common(zkl_client *c, zkl_op *op, int rc, const struct Stat *st) {
    if (rc == ZOK && st) P(op)->res_stat = *st;
    /* reads are safe to retry: again once connected (not one that timed out meanwhile, nor one
     * abandoned: nobody reads its answer) */
    if (zkl__conn_lost(rc) && op->phase != P_DONE && !op->user_gone && is_read(op)) {
        op->phase = P_ACQUIRING;
        plain_kick(c, op);
        return;
    }
    plain_done(c, op, rc);
}

static void plain_data_reply(int rc, const char *v, int len, const struct Stat *st, const void *t) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(t, &c);
    if (!op) return;
    if (rc == ZOK && set_result_data(c, op, v, len > 0 ? (size_t)len : 0) != ZOK) rc = ZKL_ENOMEM;
    plain_stat_common(c, op, rc, st);
    zkl__op_maybe_free(c, op);
}

static void plain_stat_reply(int rc, const struct Stat *st, const void *t) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(t, &c);
    if (!op) return;
    plain_stat_common(c, op, rc, st);
    zkl__op_maybe_free(c, op);
}

static void plain_create_reply(int rc, const char *name, const struct Stat *st, const void *t) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(t, &c);
    if (!op) return;
    if (rc == ZNONODE && (P(op)->args.flags & ZKL_CREATE_PARENTS) && op->phase == P_ACQUIRING) {
        if (op->parent_rc) {
            rc = op->parent_rc; /* the first refusal (e.g. ZNOAUTH) is the cause */
        } else if (P(op)->parents_tried < ZKL_PARENT_ROUNDS) {
            /* an ancestor was reaped (or never made) before the node went in: make them again;
             * every ancestor's reply came before this one */
            plain_kick(c, op);
            zkl__op_maybe_free(c, op);
            return;
        }
    }
    /* the node was made: a name that cannot be copied (out of memory) leaves the result without
     * it, but the create is still reported done, never as a failure a caller would retry */
    if (rc == ZOK && name) (void)set_result_data(c, op, name, strlen(name));
    plain_stat_common(c, op, rc, st);
    zkl__op_maybe_free(c, op);
}

static void plain_void_reply(int rc, const void *t) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(t, &c);
    if (!op) return;
    plain_stat_common(c, op, rc, NULL);
    zkl__op_maybe_free(c, op);
}

static void plain_children_reply(int rc, const struct String_vector *v, const void *t) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(t, &c);
    if (!op) return;
    if (rc == ZOK && v && v->count > 0) {
        P(op)->res_children = zkl__alloc(c, (size_t)v->count * sizeof *P(op)->res_children);
        if (!P(op)->res_children) rc = ZKL_ENOMEM;
        for (int i = 0; rc == ZOK && i < v->count; i++) {
            P(op)->res_children[i] = zkl__strdup(c, v->data[i]);
            P(op)->res_nchildren = i + 1;
            if (!P(op)->res_children[i]) rc = ZKL_ENOMEM;
        }
    }
    plain_stat_common(c, op, rc, NULL);
    zkl__op_maybe_free(c, op);
}

static void plain_kick(zkl_client *c, zkl_op *op) {
    if (op->phase != P_ACQUIRING || op->refs > 0 || !zkl__connected(c)) return;
    const zkl_op_args *a = &P(op)->args;
    int rc;
    const void *t = ZKL_TOKEN(op);
    watcher_fn w = a->watch ? plain_watch_fired : NULL;
    P(op)->watch_sent = w != NULL;
    switch (a->type) {
    case ZKL_OP_GET:
        rc = w ? zkl__awget(c, a->path, w, c, plain_data_reply, t)
               : zkl__aget(c, a->path, 0, plain_data_reply, t);
        break;
    case ZKL_OP_CHILDREN:
        rc = w ? zkl__awget_children(c, a->path, w, c, plain_children_reply, t)
               : zkl__aget_children(c, a->path, 0, plain_children_reply, t);
        break;
    case ZKL_OP_EXISTS:
        rc = w ? zkl__awexists(c, a->path, w, c, plain_stat_reply, t)
               : zkl__aexists(c, a->path, 0, plain_stat_reply, t);
        break;
    case ZKL_OP_SET:
        rc = zkl__aset(c, a->path, a->data, (int)a->len, a->version, plain_stat_reply, t);
        break;
    case ZKL_OP_DELETE:
        rc = zkl__adelete(c, a->path, a->version, plain_void_reply, t);
        break;
    case ZKL_OP_CREATE: {
        int mode = ((a->flags & ZKL_CREATE_EPHEMERAL) ? ZOO_EPHEMERAL : 0) |
                   ((a->flags & ZKL_CREATE_SEQUENTIAL) ? ZOO_SEQUENCE : 0);
        if (a->flags & ZKL_CREATE_CONTAINER) mode = ZOO_CONTAINER;
        if (a->flags & ZKL_CREATE_PARENTS) {
            /* every ancestor as a container, ahead of the create (a refused one: it meets
             * ZNONODE, and the reply says why) */
            P(op)->parents_tried++;
            zkl__make_parents(c, op, a->path, ZKL_PARENTS_ANCESTORS, a->acl);
        }
        if (a->ttl_ms > 0)
            rc = zkl__acreate2_ttl(c, a->path, a->data, (int)a->len, zkl__acl(c, a->acl),
                                   (a->flags & ZKL_CREATE_SEQUENTIAL)
                                       ? ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL
                                       : ZOO_PERSISTENT_WITH_TTL,
                                   a->ttl_ms, plain_create_reply, t);
        else
            rc = zkl__acreate2(c, a->path, a->data, (int)a->len, zkl__acl(c, a->acl), mode,
                               plain_create_reply, t);
        break;
    }
    default:
        rc = ZBADARGUMENTS;
    }
    if (rc == ZOK) {
        c->stats.ops++;
        op->refs++; /* in flight: the reply (or a retry after a connection loss) moves it on */
    } else if (rc == ZBADARGUMENTS || rc == ZMARSHALLINGERROR) {
        plain_done(c, op, rc);
    }
}

int zkl__op_start(zkl_client *c, const zkl_op_args *args, uint64_t *id) {
    int why = zkl__startable(c);
    if (why) return why;
    if (!args->path || args->type < ZKL_OP_GET || args->type > ZKL_OP_DELETE) return ZKL_EINVAL;
    if (args->path[0] != '/' || args->acl < 0 || args->acl > c->nacls || args->timeout_ms < 0 ||
        (args->flags & ~(ZKL_CREATE_EPHEMERAL | ZKL_CREATE_SEQUENTIAL | ZKL_CREATE_CONTAINER |
                         ZKL_CREATE_PARENTS)))
        return ZKL_EINVAL;
    /* a TTL node is a persistent one (sequential or not) made by a create */
    if (args->ttl_ms < 0 ||
        (args->ttl_ms > 0 && (args->type != ZKL_OP_CREATE ||
                              (args->flags & (ZKL_CREATE_EPHEMERAL | ZKL_CREATE_CONTAINER)))))
        return ZKL_EINVAL;
    if (args->watch != 0 &&
        (args->watch != 1 || (args->type != ZKL_OP_GET && args->type != ZKL_OP_CHILDREN &&
                              args->type != ZKL_OP_EXISTS)))
        return ZKL_EINVAL;
    /* an armed watch must be found by path: the index exists before the read starts */
    if (args->watch && zkl__windex_room(c) != 0) return ZKL_ENOMEM;
    zkl_op *op = zkl__op_new(c, &plain_kind);
    if (!op) return ZKL_ENOMEM;
    P(op)->args = *args;
    P(op)->args_path = zkl__strdup(c, args->path);
    P(op)->args_data = zkl__alloc(c, args->len + 1);
    if (!P(op)->args_path || !P(op)->args_data) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    if (args->len) memcpy(P(op)->args_data, args->data, args->len);
    P(op)->args_data[args->len] = '\0';
    P(op)->args.path = P(op)->args_path;
    P(op)->args.data = args->data ? P(op)->args_data : NULL;
    op->phase = P_ACQUIRING;
    if (args->timeout_ms > 0) {
        op->deadline = zkl__now(c) + args->timeout_ms + 1; /* the clock is truncated: never early */
        zkl__note_deadline(c, op->deadline);
    }
    *id = op->id;
    plain_kick(c, op);
    zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__op_result_get(zkl_client *c, uint64_t id, zkl_op_result *out) {
    zkl_op *op = c->last_done;
    if (!op || op->id != id || op->kind != &plain_kind) return ZKL_ENOTFOUND;
    memset(out, 0, sizeof *out);
    out->rc = P(op)->rc;
    out->data = P(op)->res_data;
    out->len = P(op)->res_len;
    out->nchildren = P(op)->res_nchildren;
    out->children = (const char *const *)P(op)->res_children;
    out->czxid = P(op)->res_stat.czxid;
    out->mzxid = P(op)->res_stat.mzxid;
    out->pzxid = P(op)->res_stat.pzxid;
    out->ephemeral_owner = P(op)->res_stat.ephemeralOwner;
    out->version = P(op)->res_stat.version;
    out->num_children = P(op)->res_stat.numChildren;
    out->ctime = P(op)->res_stat.ctime;
    out->mtime = P(op)->res_stat.mtime;
    out->cversion = P(op)->res_stat.cversion;
    return ZKL_OK;
}

static void plain_close(zkl_client *c, zkl_op *op) {
    if (op->phase == P_HELD) {
        watch_done(c, op, ZKL_ECLOSED);
        return;
    }
    if (op->user_gone) return;
    P(op)->rc = ZKL_ECLOSED;
    zkl__emit(c, op, ZKL_EV_OP_DONE, ZKL_ECLOSED);
    op->phase = P_DONE;
}

/* The session is gone: an operation still waiting to be sent fails too (one in flight fails
 * through its reply). A plain operation never outlives the session it was started in. */
static void plain_session_lost(zkl_client *c, zkl_op *op, int status) {
    if (op->phase == P_HELD) watch_done(c, op, status); /* its watch went with the session */
    if (op->phase == P_ACQUIRING && op->refs == 0) plain_done(c, op, status);
}

static void plain_expire(zkl_client *c, zkl_op *op) {
    plain_done(c, op, ZKL_ETIMEDOUT);
}
