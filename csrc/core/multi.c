/* multi.c - Curator's InterProcessMultiLock, all or nothing: components are acquired one after
 * another in the order given (the Lua layer decides the order); when one fails, those already
 * held are given back in reverse order (their deletes are pipelined, so the server applies them
 * in that order) and the multi-lock fails naming the component. Each component gets its own
 * timeout, capped by the multi-lock's shared deadline. A component reports to its multi-lock
 * (child_event) until all are held; then each is an ordinary hold of its own. */
#include <string.h>

#include "queue.h"

typedef struct multi_item {
    zkl_recipe recipe;
    char *path;
    int max_leases; /* > 0: a semaphore lease */
    int timeout_ms;
    int acl;
} multi_item;

typedef struct zkl_mop {
    zkl_op op;
    int nitems, next_item, failed_index, flags;
    multi_item *items;
    uint64_t *child_ids;
} zkl_mop;

static void multi_child(zkl_client *c, zkl_op *op, zkl_op *ch, int type, int status);
static int multi_cancel(zkl_client *c, zkl_op *op);
static void multi_abandon(zkl_client *c, zkl_op *op);
static void multi_close(zkl_client *c, zkl_op *op);
static void multi_free_fields(zkl_client *c, zkl_op *op);

static const zkl_kind multi_kind = {
    .name = "multi-lock",
    .size = sizeof(zkl_mop),
    .cancel = multi_cancel,
    .abandon = multi_abandon,
    .close = multi_close,
    .child_event = multi_child,
    .free_fields = multi_free_fields,
};

static void multi_free_fields(zkl_client *c, zkl_op *op) {
    zkl_mop *m = (zkl_mop *)op;
    for (int i = 0; m->items && i < m->nitems; i++)
        zkl__strfree(c, m->items[i].path);
    zkl__free(c, m->items, (size_t)m->nitems * sizeof *m->items);
    zkl__free(c, m->child_ids, (size_t)m->nitems * sizeof *m->child_ids);
}

static void multi_finish(zkl_client *c, zkl_mop *m, int type, int status) {
    m->op.phase = P_DONE;
    m->op.pinned = 1; /* until zkl__multi_result() */
    zkl__emit(c, &m->op, type, status);
    m->op.user_gone = 1;
}

static void multi_rollback(zkl_client *c, zkl_mop *m, int failed, int status) {
    m->failed_index = failed;
    int given = m->flags & ZKL_MULTI_ROLLBACK_GIVEN;
    for (int k = 0; k < m->nitems; k++) {
        int i = given ? k : m->nitems - 1 - k;
        zkl_op *ch = m->child_ids[i] ? zkl__op_find(c, m->child_ids[i]) : NULL;
        if (ch && i != failed)
            ch->kind->abandon(c, ch);
        else if (ch)
            ch->parent_id = 0;
    }
    multi_finish(c, m, ZKL_EV_FAILED, status);
}

static void multi_start_next(zkl_client *c, zkl_mop *m) {
    multi_item *it = &m->items[m->next_item];
    int t = it->timeout_ms;
    if (m->op.deadline) {
        int64_t left = m->op.deadline - zkl__now(c);
        if (left <= 0) {
            multi_rollback(c, m, m->next_item, ZKL_ETIMEDOUT);
            return;
        }
        if (t < 0 || left < t) t = (int)left;
    }
    zkl_op *ch;
    int rc = it->max_leases > 0
                 ? zkl__semaphore_new(c, it->path, it->max_leases, 1, t, it->acl, &ch)
                 : zkl__lock_new(c, it->recipe, it->path, t, it->acl, &ch);
    if (rc != ZKL_OK) {
        multi_rollback(c, m, m->next_item, rc);
        return;
    }
    /* linked before it starts: a component that fails at once reports to this multi-lock */
    ch->parent_id = m->op.id;
    ch->multi_index = m->next_item;
    m->child_ids[m->next_item] = ch->id;
    uint64_t id;
    zkl__queue_start(c, ch, &id);
}

static void multi_child(zkl_client *c, zkl_op *op, zkl_op *ch, int type, int status) {
    zkl_mop *m = (zkl_mop *)op;
    if (op->phase != P_ACQUIRING) {
        ch->parent_id = 0;
        if (type == ZKL_EV_ACQUIRED)
            ch->kind->abandon(c, ch); /* nobody wants it any more */
        else
            ch->user_gone = 1;
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

static int multi_cancel(zkl_client *c, zkl_op *op) {
    zkl_mop *m = (zkl_mop *)op;
    if (op->phase != P_ACQUIRING) return ZKL_ENOTHELD;
    zkl_op *ch = zkl__op_find(c, m->child_ids[m->next_item]);
    if (ch)
        ch->kind->cancel(c, ch); /* its failure rolls the multi-lock back */
    else
        multi_rollback(c, m, m->next_item, ZKL_ECANCELED);
    return ZKL_OK;
}

static void multi_abandon(zkl_client *c, zkl_op *op) {
    zkl_mop *m = (zkl_mop *)op;
    for (int i = 0; i < m->nitems; i++) {
        zkl_op *ch = m->child_ids[i] ? zkl__op_find(c, m->child_ids[i]) : NULL;
        if (ch) ch->kind->abandon(c, ch);
    }
    op->user_gone = 1;
    op->pinned = 0;
    op->phase = P_DONE;
    zkl__op_maybe_free(c, op);
}

static void multi_close(zkl_client *c, zkl_op *op) {
    if (op->phase == P_ACQUIRING) zkl__emit(c, op, ZKL_EV_FAILED, ZKL_ECLOSED);
    op->phase = P_DONE;
    op->pinned = 0;
}

int zkl__multi_acquire(zkl_client *c, const zkl_multi_item *items, int n, int timeout_ms, int flags,
                       uint64_t *id) {
    int why = zkl__startable(c);
    if (why) return why;
    if (!items || n < 1) return ZKL_EINVAL;
    for (int i = 0; i < n; i++) {
        const zkl_multi_item *it = &items[i];
        if (!it->path || zkl_path_error(it->path, strlen(it->path))) return ZKL_EINVAL;
        if (it->max_leases <= 0 && it->recipe != ZKL_MUTEX && it->recipe != ZKL_READ &&
            it->recipe != ZKL_WRITE)
            return ZKL_EINVAL;
    }
    zkl_mop *m = (zkl_mop *)zkl__op_new(c, &multi_kind);
    if (!m) return ZKL_ENOMEM;
    m->op.phase = P_ACQUIRING;
    m->failed_index = -1;
    m->flags = flags;
    m->items = zkl__alloc(c, (size_t)n * sizeof *m->items);
    m->child_ids = zkl__alloc(c, (size_t)n * sizeof *m->child_ids);
    if (!m->items || !m->child_ids) {
        zkl__free(c, m->items, (size_t)n * sizeof *m->items);
        zkl__free(c, m->child_ids, (size_t)n * sizeof *m->child_ids);
        m->items = NULL;
        m->child_ids = NULL;
        m->op.phase = P_DONE;
        zkl__op_maybe_free(c, &m->op);
        return ZKL_ENOMEM;
    }
    m->nitems = n;
    memset(m->child_ids, 0, (size_t)n * sizeof *m->child_ids);
    memset(m->items, 0, (size_t)n * sizeof *m->items);
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
        m->op.phase = P_DONE;
        zkl__op_maybe_free(c, &m->op);
        return ZKL_ENOMEM;
    }
    if (timeout_ms >= 0) m->op.deadline = zkl__now(c) + timeout_ms;
    *id = m->op.id;
    multi_start_next(c, m); /* if the first component cannot start, a FAILED event is queued */
    if (!c->in_callback) zkl__refresh_interest(c);
    return ZKL_OK;
}

int zkl__multi_result(zkl_client *c, uint64_t id, uint64_t *ids, int n, int *failed_index) {
    zkl_op *op = zkl__op_find(c, id);
    if (!op || op->kind != &multi_kind) return ZKL_ENOTFOUND;
    zkl_mop *m = (zkl_mop *)op;
    int k = 0;
    if (failed_index) *failed_index = m->failed_index;
    if (m->failed_index < 0)
        for (int i = 0; i < m->nitems && k < n; i++)
            ids[k++] = m->child_ids[i];
    op->pinned = 0;
    zkl__op_maybe_free(c, op);
    return k;
}
