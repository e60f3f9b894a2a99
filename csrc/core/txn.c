/* txn.c - transactions: ZooKeeper's multi (create, set, delete, check), applied all or none in
 * one request. A write: never retried on its own (a connection lost with it in flight leaves
 * its outcome unknown, and the caller is told the ZooKeeper client's code, ZCONNECTIONLOSS or
 * ZOPERATIONTIMEOUT: see ZKL_OUTCOME_UNKNOWN_MAP); sent once connected when started while
 * disconnected; ended by a session loss (ESESSION), its timeout (ETIMEDOUT) or close (ECLOSED),
 * whose outcome is unknown too when it was in flight. Only the server's answer (per_op) says
 * that nothing was applied.
 * Results stay readable with zkl_txn_result_get() until the next event is taken. */
#include <string.h>

#include "internal.h"

typedef struct zkl_top {
    zkl_op op;
    int n;
    zkl_txn_op *args; /* copies of the caller's ops (paths and data owned here) */
    zoo_op_t *zops;   /* what the ZooKeeper client sends */
    zoo_op_result_t *zres;
    struct Stat *stats; /* one per op (set fills it) */
    char **bufs;        /* one per op: a created node's path */
    int rc;
    int per_op; /* the server answered: zres[] holds each op's outcome */
    int sent;   /* handed to the ZooKeeper client: without an answer, the outcome is unknown */
} zkl_top;

#define T(o) ((zkl_top *)(o))
#define TXN_PATH_BUF ZKL_NODE_MAX

static void txn_kick(zkl_client *c, zkl_op *op);
static void txn_close(zkl_client *c, zkl_op *op);
static void txn_session_lost(zkl_client *c, zkl_op *op, int status);
static void txn_expire(zkl_client *c, zkl_op *op);
static void txn_free_fields(zkl_client *c, zkl_op *op);

static const zkl_kind txn_kind = {
    .name = "transaction",
    .size = sizeof(zkl_top),
    .kick = txn_kick,
    .session_lost = txn_session_lost,
    .expire = txn_expire,
    .close = txn_close,
    .free_fields = txn_free_fields,
};

static void txn_free_fields(zkl_client *c, zkl_op *op) {
    zkl_top *t = T(op);
    for (int i = 0; i < t->n; i++) {
        if (t->args) {
            if (t->args[i].path) zkl__strfree(c, (char *)t->args[i].path);
            if (t->args[i].data) zkl__free(c, (char *)t->args[i].data, t->args[i].len + 1);
        }
        if (t->bufs && t->bufs[i]) zkl__free(c, t->bufs[i], TXN_PATH_BUF);
    }
    size_t n = (size_t)t->n;
    zkl__free(c, t->args, n * sizeof *t->args);
    zkl__free(c, t->zops, n * sizeof *t->zops);
    zkl__free(c, t->zres, n * sizeof *t->zres);
    zkl__free(c, t->stats, n * sizeof *t->stats);
    zkl__free(c, t->bufs, n * sizeof *t->bufs);
}

static void txn_done(zkl_client *c, zkl_op *op, int rc) {
    if (op->phase == P_DONE) return;
    /* the ZooKeeper client fails with ZSESSIONEXPIRED only requests queued after the last
     * connection broke, once the reconnect finds the session expired: no server applies them */
    if (rc == ZSESSIONEXPIRED) T(op)->sent = 0;
    if (rc == ZCLOSING || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE)
        rc = c->closed ? ZKL_ECLOSED : c->auth_failed ? ZAUTHFAILED : ZKL_ESESSION;
    T(op)->rc = rc;
    op->phase = P_DONE;
    zkl__emit(c, op, ZKL_EV_OP_DONE, rc);
}

static void txn_reply(int rc, const void *token) {
    zkl_client *c;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    if (op->phase == P_ACQUIRING && !zkl__conn_lost(rc) && !zkl__handle_gone(rc)) T(op)->per_op = 1;
    txn_done(c, op, rc);
    zkl__op_maybe_free(c, op);
}

static void txn_kick(zkl_client *c, zkl_op *op) {
    if (op->phase != P_ACQUIRING || op->refs > 0 || !zkl__connected(c)) return;
    zkl_top *t = T(op);
    for (int i = 0; i < t->n; i++) {
        const zkl_txn_op *a = &t->args[i];
        memset(&t->zres[i], 0, sizeof t->zres[i]);
        switch (a->type) {
        case ZKL_OP_CREATE: {
            int mode = ((a->flags & ZKL_CREATE_EPHEMERAL) ? ZOO_EPHEMERAL : 0) |
                       ((a->flags & ZKL_CREATE_SEQUENTIAL) ? ZOO_SEQUENCE : 0);
            if (a->flags & ZKL_CREATE_CONTAINER) mode = ZOO_CONTAINER;
            t->bufs[i][0] = '\0';
            zoo_create_op_init(&t->zops[i], a->path, a->data, a->data ? (int)a->len : -1,
                               zkl__acl(c, a->acl), mode, t->bufs[i], TXN_PATH_BUF);
            break;
        }
        case ZKL_OP_SET:
            zoo_set_op_init(&t->zops[i], a->path, a->data, a->data ? (int)a->len : -1, a->version,
                            &t->stats[i]);
            break;
        case ZKL_OP_DELETE:
            zoo_delete_op_init(&t->zops[i], a->path, a->version);
            break;
        default: /* ZKL_OP_CHECK (validated at start) */
            zoo_check_op_init(&t->zops[i], a->path, a->version);
            break;
        }
    }
    int rc = zkl__amulti(c, t->n, t->zops, t->zres, txn_reply, ZKL_TOKEN(op));
    if (rc == ZOK) {
        c->stats.ops++;
        op->refs++;
        t->sent = 1;
    } else if (!zkl__conn_lost(rc) && !zkl__handle_gone(rc)) {
        txn_done(c, op, rc); /* refused before sending (bad arguments, marshalling) */
    }
}

static int valid_op(const zkl_client *c, const zkl_txn_op *a) {
    if (!a->path || a->path[0] != '/' || a->acl < 0 || a->acl > c->nacls) return 0;
    if (a->len > 0 && !a->data) return 0;
    switch (a->type) {
    case ZKL_OP_CREATE:
        return !(a->flags & ~(ZKL_CREATE_EPHEMERAL | ZKL_CREATE_SEQUENTIAL | ZKL_CREATE_CONTAINER));
    case ZKL_OP_SET:
    case ZKL_OP_DELETE:
    case ZKL_OP_CHECK:
        return a->flags == 0;
    default:
        return 0;
    }
}

int zkl__txn_start(zkl_client *c, const zkl_txn_op *ops, int n, int timeout_ms, uint64_t *id) {
    int why = zkl__startable(c);
    if (why) return why;
    if (!ops || n < 1 || n > ZKL_TXN_MAX || timeout_ms < 0) return ZKL_EINVAL;
    for (int i = 0; i < n; i++)
        if (!valid_op(c, &ops[i])) return ZKL_EINVAL;
    zkl_op *op = zkl__op_new(c, &txn_kind);
    if (!op) return ZKL_ENOMEM;
    zkl_top *t = T(op);
    size_t sz = (size_t)n;
    t->args = zkl__alloc(c, sz * sizeof *t->args);
    t->zops = zkl__alloc(c, sz * sizeof *t->zops);
    t->zres = zkl__alloc(c, sz * sizeof *t->zres);
    t->stats = zkl__alloc(c, sz * sizeof *t->stats);
    t->bufs = zkl__alloc(c, sz * sizeof *t->bufs);
    /* zeroed as soon as allocated: free_fields walks all n entries of whatever exists */
    if (t->args) memset(t->args, 0, sz * sizeof *t->args);
    if (t->zres) memset(t->zres, 0, sz * sizeof *t->zres);
    if (t->stats) memset(t->stats, 0, sz * sizeof *t->stats);
    if (t->bufs) memset(t->bufs, 0, sz * sizeof *t->bufs);
    t->n = n;
    int ok = t->args && t->zops && t->zres && t->stats && t->bufs;
    for (int i = 0; ok && i < n; i++) {
        t->args[i] = ops[i];
        t->args[i].path = zkl__strdup(c, ops[i].path);
        t->args[i].data = NULL;
        if (ops[i].data) {
            char *d = zkl__alloc(c, ops[i].len + 1);
            if (d) {
                if (ops[i].len) memcpy(d, ops[i].data, ops[i].len);
                d[ops[i].len] = '\0';
            }
            t->args[i].data = d;
            ok = d != NULL;
        }
        t->bufs[i] = zkl__alloc(c, TXN_PATH_BUF);
        ok = ok && t->args[i].path && t->bufs[i];
    }
    if (!ok) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    op->phase = P_ACQUIRING;
    if (timeout_ms > 0) {
        op->deadline = zkl__now(c) + timeout_ms + 1; /* the clock is truncated: never early */
        zkl__note_deadline(c, op->deadline);
    }
    *id = op->id;
    txn_kick(c, op);
    zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__txn_result_get(zkl_client *c, uint64_t id, zkl_txn_result *out, int n) {
    zkl_op *op = c->last_done;
    if (!op || op->id != id || op->kind != &txn_kind) return ZKL_ENOTFOUND;
    zkl_top *t = T(op);
    int k = 0;
    for (; out && k < n && k < t->n; k++) {
        memset(&out[k], 0, sizeof out[k]);
        /* without the server's answer (timeout, connection or session loss, close) each op
         * carries the transaction's status, and zres was never filled in */
        out[k].rc = t->per_op ? t->zres[k].err : t->rc;
        out[k].sent = t->sent;
        if (t->per_op && t->args[k].type == ZKL_OP_CREATE && t->zres[k].err == ZOK && t->bufs[k][0])
            out[k].path = t->bufs[k];
        if (t->per_op && t->args[k].type == ZKL_OP_SET && t->zres[k].err == ZOK) {
            out[k].version = t->stats[k].version;
            out[k].mzxid = t->stats[k].mzxid;
        }
    }
    return t->n;
}

static void txn_close(zkl_client *c, zkl_op *op) {
    if (op->user_gone) return;
    T(op)->rc = ZKL_ECLOSED;
    zkl__emit(c, op, ZKL_EV_OP_DONE, ZKL_ECLOSED);
    op->phase = P_DONE;
}

/* The session is gone: a transaction still waiting to be sent fails; one in flight fails through
 * its reply. */
static void txn_session_lost(zkl_client *c, zkl_op *op, int status) {
    if (op->phase == P_ACQUIRING && op->refs == 0) txn_done(c, op, status);
}

static void txn_expire(zkl_client *c, zkl_op *op) {
    txn_done(c, op, ZKL_ETIMEDOUT);
}
