/* plain.c - plain znode operations (get, set, create, delete, children, exists): one request
 * each (a create with parents: its ancestors' creates pipelined ahead of it), reads retried
 * across a connection loss, an optional timeout, the result readable until its event is
 * consumed. A read may arm a one-shot watch (args.watch): the op then lives on in P_HELD after
 * its OP_DONE until the watch fires, the session ends or the client closes, and reports that
 * with one ZKL_EV_WATCH. */
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
    int parents_tried;       /* ZKL_CREATE_PARENTS: rounds of making the ancestors */
    const void *watch_token; /* the watcher context the last request went with (NULL: none) */
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

static void plain_free_fields(zkl_client *c, zkl_op *op) {
    zkl__strfree(c, P(op)->args_path);
    zkl__free(c, P(op)->args_data, P(op)->args.len + 1);
    zkl__free(c, P(op)->res_data, P(op)->res_len + 1);
    for (int i = 0; i < P(op)->res_nchildren; i++)
        zkl__strfree(c, P(op)->res_children[i]);
    zkl__free(c, P(op)->res_children, (size_t)P(op)->res_nchildren * sizeof *P(op)->res_children);
}

/* Would answer rc of this read have armed its watch? */
static int arms_watch(const zkl_op *op, int rc) {
    const zkl_pop *p = (const zkl_pop *)op;
    return rc == ZOK || (rc == ZNONODE && p->args.type == ZKL_OP_EXISTS);
}

static void plain_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *t);

/* The ZooKeeper client forgets the watcher this op's last request registered: nobody waits for
 * it any more, and the client would otherwise list it in the SetWatches of every reconnection
 * until the node changed (a closed cache's thousands of watches, say). */
static void forget_watcher(zkl_client *c, zkl_op *op) {
    zkl_pop *p = P(op);
    if (!p->watch_token) return;
    ZooWatcherType type = p->args.type == ZKL_OP_CHILDREN ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA;
    zkl__forget_watcher(c, p->args.path, type, plain_watch_fired, (void *)p->watch_token);
    p->watch_token = NULL;
}

static void plain_done(zkl_client *c, zkl_op *op, int rc) {
    if (op->phase == P_DONE) return;
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
    } else if (P(op)->watch_token && arms_watch(op, rc)) {
        forget_watcher(c, op); /* abandoned while its read was on its way: armed for nobody */
    }
}

/* The watch's one event; the op is done then. */
static void watch_done(zkl_client *c, zkl_op *op, int status) {
    if (op->phase != P_HELD) return;
    op->phase = P_DONE;
    op->gen++; /* a later call of the watcher is stale */
    zkl__emit(c, op, ZKL_EV_WATCH, status);
    op->user_gone = 1;
}

static void plain_watch_fired(zhandle_t *zh, int type, int state, const char *path, void *t) {
    (void)state, (void)path;
    zkl_client *c = zkl__current(); /* watchers run inside the client's own process() */
    if (type == ZOO_SESSION_EVENT || !c || zh != c->zh) return;
    zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(t));
    if (!op || op->kind != &plain_kind || op->gen != ZKL_TOKEN_GEN(t)) return;
    if (op->phase != P_HELD) return;
    c->stats.watch_events++;
    watch_done(c, op, type);
    zkl__op_maybe_free(c, op);
}

static void plain_abandon(zkl_client *c, zkl_op *op) {
    op->user_gone = 1;
    if (op->phase == P_HELD) {
        forget_watcher(c, op);
        op->phase = P_DONE;
        op->gen++;
    } else if (op->phase == P_ACQUIRING) {
        P(op)->args.watch = 0; /* its answer arms nothing we wait for */
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
    if (zkl__conn_lost(rc) && P(op)->args.type != ZKL_OP_CREATE &&
        P(op)->args.type != ZKL_OP_DELETE && P(op)->args.type != ZKL_OP_SET) {
        op->phase = P_ACQUIRING; /* reads are safe to retry: again once connected */
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
    P(op)->watch_token = w ? t : NULL;
    switch (a->type) {
    case ZKL_OP_GET:
        rc = w ? zkl__awget(c, a->path, w, (void *)t, plain_data_reply, t)
               : zkl__aget(c, a->path, 0, plain_data_reply, t);
        break;
    case ZKL_OP_CHILDREN:
        rc = w ? zkl__awget_children(c, a->path, w, (void *)t, plain_children_reply, t)
               : zkl__aget_children(c, a->path, 0, plain_children_reply, t);
        break;
    case ZKL_OP_EXISTS:
        rc = w ? zkl__awexists(c, a->path, w, (void *)t, plain_stat_reply, t)
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
