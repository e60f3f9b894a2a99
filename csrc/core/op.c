/* op.c - the table of live operations: ids, lookup by id (replies carry only an id and a
 * generation), the client being driven (replies find their op through it), freeing when nothing
 * refers to an op any more, and the events ops emit: a component reports to its parent op
 * through the parent's kind table, an OP_DONE result stays readable until the next event. Knows
 * no kind; calls only events.c and mem.c. */
#include <string.h>

#include "internal.h"

int zkl__conn_lost(int rc) {
    /* ZRUNTIMEINCONSISTENCY: the ZooKeeper client dropped a connection without failing the
     * requests sent on it, and fails them with this code when the first reply on the next
     * connection does not match. */
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZRUNTIMEINCONSISTENCY;
}

int zkl__handle_gone(int rc) {
    return rc == ZSESSIONEXPIRED || rc == ZCLOSING || rc == ZINVALIDSTATE || rc == ZSESSIONMOVED;
}

static size_t bucket_of(const zkl_client *c, uint64_t id) {
    return (size_t)(id * 0x9E3779B97F4A7C15ull >> 20) & (c->nbuckets - 1);
}

static int grow_table(zkl_client *c) {
    size_t nb = c->nbuckets ? c->nbuckets * 2 : 64, i;
    zkl_op **b = zkl__alloc(c, nb * sizeof *b);
    if (!b) return ZKL_ENOMEM;
    memset(b, 0, nb * sizeof *b);
    zkl_op **old = c->buckets;
    size_t oldn = c->nbuckets;
    c->buckets = b;
    c->nbuckets = nb;
    for (i = 0; i < oldn; i++) {
        zkl_op *op = old[i], *next;
        for (; op; op = next) {
            next = op->hnext;
            size_t k = bucket_of(c, op->id);
            op->hnext = b[k];
            b[k] = op;
        }
    }
    zkl__free(c, old, oldn * sizeof *old);
    return 0;
}

/* A new op of the given kind, zeroed (kind->size bytes), in phase 0: the kind sets it up. */
zkl_op *zkl__op_new(zkl_client *c, const zkl_kind *kind) {
    if (c->nops + 1 > c->nbuckets && grow_table(c) != 0) return NULL;
    if (zkl__ev_reserve(c, 2 * (c->nops + 1) + 16) != 0) return NULL;
    zkl_op *op = zkl__alloc(c, kind->size);
    if (!op) return NULL;
    memset(op, 0, kind->size);
    op->id = ++c->next_id;
    op->kind = kind;
    size_t k = bucket_of(c, op->id);
    op->hnext = c->buckets[k];
    c->buckets[k] = op;
    op->next = c->ops;
    if (c->ops) c->ops->prev = op;
    c->ops = op;
    c->nops++;
    return op;
}

zkl_op *zkl__op_find(zkl_client *c, uint64_t id) {
    if (!c->nbuckets) return NULL;
    zkl_op *op = c->buckets[bucket_of(c, id)];
    while (op && op->id != id)
        op = op->hnext;
    return op;
}

void zkl__op_maybe_free(zkl_client *c, zkl_op *op) {
    if (op->phase != P_DONE || op->refs > 0 || op->pinned) return;
    zkl_op **pp = &c->buckets[bucket_of(c, op->id)];
    while (*pp != op)
        pp = &(*pp)->hnext;
    *pp = op->hnext;
    if (op->prev)
        op->prev->next = op->next;
    else
        c->ops = op->next;
    if (op->next) op->next->prev = op->prev;
    c->nops--;
    if (op->parked) c->nparked--;
    if (op->kind->free_fields) op->kind->free_fields(c, op);
    zkl__free(c, op, op->kind->size);
}

void zkl__note_deadline(zkl_client *c, int64_t deadline) {
    if (deadline && (!c->next_deadline || deadline < c->next_deadline)) c->next_deadline = deadline;
}

int zkl__op_table_init(zkl_client *c) {
    return grow_table(c);
}

/* Completions run only inside the ZooKeeper calls of the session layer (client.c, WITH_CLIENT),
 * which records here the client it drives. */
static __thread zkl_client *current_client;

/* The client's clock: the seam's monotonic milliseconds (the fake's in the scripted tests). Here,
 * below the session layer, so the request layer (answered.c) can read it without calling up. */
int64_t zkl__now(const zkl_client *c) {
    return c->zk->now_ms();
}

zkl_client *zkl__current(void) {
    return current_client;
}

zkl_client *zkl__set_current(zkl_client *c) {
    zkl_client *was = current_client;
    current_client = c;
    return was;
}

/* The op named by a completion token, or NULL; drops the reference the request held. Replies
 * run only inside the client's own calls into ZooKeeper, so the client is the one being driven. */
zkl_op *zkl__reply_op(const void *token, zkl_client **cp) {
    zkl_client *c = zkl__current();
    *cp = c;
    if (!c) return NULL;
    zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(token));
    if (op) op->refs--;
    return op;
}

/* fn on every live op; fn may free the op it is given */
void zkl__ops_each(zkl_client *c, void (*fn)(zkl_client *, zkl_op *, int), int arg) {
    zkl_op *op = c->ops, *next;
    for (; op; op = next) {
        next = op->next;
        fn(c, op, arg);
    }
}

/* ---------------------------------------------------------------- events of ops */

/* Queue an event for op (NULL: a session event). An op with a parent (a multi-lock's component,
 * multi.c) reports its outcome (ACQUIRED or FAILED) to the parent's child_event hook instead of
 * the user; with the parent gone nobody wants it, and an acquired component is abandoned. */
int zkl__emit(zkl_client *c, zkl_op *op, int type, int status) {
    if (op && op->parent_id && (type == ZKL_EV_ACQUIRED || type == ZKL_EV_FAILED)) {
        zkl_op *parent = zkl__op_find(c, op->parent_id);
        if (parent && parent->kind->child_event) {
            parent->kind->child_event(c, parent, op, type, status);
            return 0;
        }
        op->parent_id = 0; /* the parent is gone: nobody wants the result */
        if (type == ZKL_EV_ACQUIRED)
            op->kind->abandon(c, op);
        else
            op->user_gone = 1;
        return 0;
    }
    if (op && op->user_gone) return 0;
    if (op && op->parked && type != ZKL_EV_OP_DONE && type != ZKL_EV_LOCK_STATE &&
        type != ZKL_EV_WATCH && type != ZKL_EV_WARNING && type != ZKL_EV_SESSION) {
        /* its waiter is parked: straight to the ready list (room reserved by zkl__client_park) */
        op->parked = 0;
        c->nparked--;
        zkl__rd_push(c, op->id, type, status);
        if (type != ZKL_EV_ACQUIRED) op->user_gone = 1;
        return 0;
    }
    if (zkl__ev_push(c, op ? op->id : 0, type, status) != 0) return ZKL_ENOMEM;
    if (op && (type == ZKL_EV_FAILED || type == ZKL_EV_RELEASED || type == ZKL_EV_OP_DONE)) {
        if (type == ZKL_EV_OP_DONE) op->pinned = 1;
        op->user_gone = 1;
    }
    return 0;
}

/* The plain op whose result the user could read since the last event is let go. */
void zkl__release_last_done(zkl_client *c) {
    zkl_op *op = c->last_done;
    if (op) {
        c->last_done = NULL;
        op->pinned = 0;
        zkl__op_maybe_free(c, op);
    }
}

/* The fast path of a caller that waits for one operation: pop the oldest event only when it is the
 * only one queued and it ends (or grants) operation `id`. 1: popped; 0: nothing queued; -1: other
 * events are queued (the caller dispatches them in order). */
int zkl__client_next_event_for(zkl_client *c, uint64_t id, zkl_event *out) {
    if (c->rd_len) return -1; /* parked waiters are ready: the pump hands them over */
    if (c->ev_len == 0) return 0;
    const zkl_event *e = &c->ev[c->ev_head];
    if (c->ev_len != 1 || e->id != id || e->type == ZKL_EV_SESSION ||
        e->type == ZKL_EV_LOCK_STATE || e->type == ZKL_EV_WATCH || e->type == ZKL_EV_WARNING)
        return -1;
    return zkl__client_next_event(c, out);
}

/* Park op `id`'s waiter: its next ACQUIRED, FAILED or RELEASED event goes to the ready list
 * instead of the event queue (room for it is reserved here, so the completion path never needs
 * memory). ZKL_OK: parked; 1: not parked, an event of the op is queued already (the caller
 * takes it from the event queue as usual); ZKL_ENOTFOUND: no such op, or it reports nothing any
 * more; ZKL_ENOMEM. */
int zkl__client_park(zkl_client *c, uint64_t id) {
    for (size_t i = 0; i < c->ev_len; i++) /* e.g. a start that failed in the same call */
        if (c->ev[(c->ev_head + i) % c->ev_cap].id == id) return 1;
    zkl_op *op = zkl__op_find(c, id);
    if (!op || op->user_gone) return ZKL_ENOTFOUND;
    if (op->parked) return ZKL_OK;
    if (zkl__rd_reserve(c, 1) != 0) return ZKL_ENOMEM;
    op->parked = 1;
    c->nparked++;
    return ZKL_OK;
}

/* Pop the oldest ready event (of a parked op) into *out: 1, or 0 when the ready list is empty. */
int zkl__client_next_ready(zkl_client *c, zkl_event *out) {
    return zkl__rd_pop(c, out);
}

int zkl__client_next_event(zkl_client *c, zkl_event *out) {
    zkl__release_last_done(c);
    if (!zkl__ev_pop(c, out)) return 0;
    if (out->type == ZKL_EV_OP_DONE) {
        zkl_op *op = zkl__op_find(c, out->id);
        if (op) c->last_done = op;
    }
    return 1;
}
