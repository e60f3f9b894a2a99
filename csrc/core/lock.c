/* lock.c - the public lock API over the fair queue (queue.c): acquire a mutex, read-write lock
 * side or latch node, downgrade a write lock, release, what a hold knows (node, token), and
 * cancel or abandon an operation of any kind (through its kind table). */
#include <limits.h>
#include <string.h>

#include "queue.h"

#define KICK(c, op) (op)->kind->kick((c), (op))

int zkl__lock_new(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms, int acl,
                  zkl_op **out) {
    int why = zkl__startable(c);
    if (why) return why;
    if (!path || zkl_path_error(path, strlen(path))) return ZKL_EINVAL;
    if (recipe != ZKL_MUTEX && recipe != ZKL_READ && recipe != ZKL_WRITE && recipe != ZKL_LATCH)
        return ZKL_EINVAL;
    int rc =
        zkl__queue_new(c, &zkl__queue_kind, path, zkl__recipe_token(recipe), timeout_ms, acl, out);
    if (rc == ZKL_OK) QOP(*out)->recipe = recipe;
    return rc;
}

/* the node data of an acquisition made but not started (a copy; NULL: the identity) */
static int set_data(zkl_client *c, zkl_op *op, const char *data, size_t len) {
    zkl_qop *q = QOP(op);
    if (q->data) zkl__free(c, q->data, q->data_len + 1);
    q->data = NULL;
    q->data_len = 0;
    if (!data) return ZKL_OK;
    q->data = zkl__alloc(c, len + 1);
    if (!q->data) return ZKL_ENOMEM;
    memcpy(q->data, data, len);
    q->data[len] = '\0';
    q->data_len = len;
    return ZKL_OK;
}

int zkl__lock_acquire_ex(zkl_client *c, const zkl_lock_args *a, uint64_t *id) {
    zkl_op *op;
    if (!a || !id) return c->closed ? ZKL_ECLOSED : ZKL_EINVAL;
    if ((!a->data && a->len != 0) || a->len > (size_t)INT_MAX) {
        int why = zkl__startable(c);
        return why ? why : ZKL_EINVAL;
    }
    int rc = zkl__lock_new(c, a->recipe, a->path, a->timeout_ms, a->acl, &op);
    if (rc != ZKL_OK) return rc;
    if (a->data && set_data(c, op, a->data, a->len) != ZKL_OK) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    return zkl__queue_start(c, op, id);
}

int zkl__lock_acquire(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms, int acl,
                      uint64_t *id) {
    zkl_lock_args a = {recipe, path, timeout_ms, acl, NULL, 0};
    return zkl__lock_acquire_ex(c, &a, id);
}

int zkl__lock_downgrade(zkl_client *c, uint64_t write_id, uint64_t *id) {
    zkl_op *op, *w = zkl__op_find(c, write_id);
    int why = zkl__startable(c);
    if (why) return why;
    if (!w || !(w->kind->flags & ZKL_KIND_QUEUE) || w->user_gone || QOP(w)->recipe != ZKL_WRITE)
        return ZKL_ENOTFOUND;
    if (w->phase != P_HELD || !QOP(w)->node) return ZKL_ENOTHELD;
    const char *seq = zkl__sort_key(strrchr(QOP(w)->node, '/') + 1, ZKL_WRITE);
    int rc = zkl__queue_new(c, &zkl__queue_kind, QOP(w)->dir, zkl__recipe_token(ZKL_READ), -1,
                            QOP(w)->acl, &op);
    if (rc != ZKL_OK) return rc;
    zkl_qop *q = QOP(op);
    q->recipe = ZKL_READ;
    q->grant_on_create = 1;
    size_t a = strlen(q->prefix), b = strlen(seq);
    q->fixed_name = zkl__alloc(c, a + b + 1);
    if (!q->fixed_name) {
        op->phase = P_DONE;
        zkl__op_maybe_free(c, op);
        return ZKL_ENOMEM;
    }
    memcpy(q->fixed_name, q->prefix, a);
    memcpy(q->fixed_name + a, seq, b + 1);
    return zkl__queue_start(c, op, id);
}

/* a lock, lease or semaphore acquisition the user still owns */
static zkl_op *user_lock(zkl_client *c, uint64_t id) {
    zkl_op *op = zkl__op_find(c, id);
    return op && (op->kind->flags & ZKL_KIND_QUEUE) && !op->user_gone ? op : NULL;
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
    QOP(op)->release_status = ZKL_OK;
    KICK(c, op);
    zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__lock_info_get(zkl_client *c, uint64_t id, zkl_lock_info *out) {
    zkl_op *op = user_lock(c, id);
    if (!op) return ZKL_ENOTFOUND;
    zkl_qop *q = QOP(op);
    out->node[0] = '\0';
    if (q->node) {
        size_t n = strlen(q->node);
        if (n >= sizeof out->node) n = sizeof out->node - 1;
        memcpy(out->node, q->node, n);
        out->node[n] = '\0';
    }
    out->token = q->czxid;
    out->ahead = q->ahead;
    out->held = op->phase == P_HELD;
    out->suspended = op->phase == P_HELD && c->state == ZKL_STATE_SUSPENDED;
    return ZKL_OK;
}

/* The user withdraws an op of any kind: it fails with ECANCELED (an op that cannot be cancelled
 * in its phase says so). */
int zkl__lock_cancel(zkl_client *c, uint64_t id) {
    zkl_op *op = zkl__op_find(c, id);
    if (!op || op->user_gone || !op->kind->cancel) return ZKL_ENOTFOUND;
    int rc = op->kind->cancel(c, op);
    zkl__op_maybe_free(c, op);
    zkl__refresh_interest(c);
    return rc;
}

/* The user is gone from an op of any kind: no more events, its node is cleaned up silently. */
int zkl__lock_abandon(zkl_client *c, uint64_t id) {
    zkl_op *op = zkl__op_find(c, id);
    if (!op || op->user_gone || !op->kind->abandon) return ZKL_ENOTFOUND;
    op->kind->abandon(c, op); /* may free it */
    if (!c->closed) zkl__refresh_interest(c);
    return ZKL_OK;
}
