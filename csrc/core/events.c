/* events.c - the client's event queue: a ring of zkl_event the user drains with
 * zkl_client_next_event, and the ready list, a second ring for the final events of parked ops
 * (zkl_client_park), drained with zkl_client_next_ready. Only the queues themselves: which op an
 * event names, and what happens to an op once its final event is out, is op.c's (zkl__emit). Calls
 * only mem.c. */
#include "internal.h"

/* Grow ring (*ev, *cap, *head, *len) to hold `need` events, oldest first from index 0. */
static int ring_grow(zkl_client *c, zkl_event **ev, size_t *cap, size_t *head, size_t len,
                     size_t need) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 64, i;
    while (ncap < need)
        ncap *= 2;
    zkl_event *nev = zkl__alloc(c, ncap * sizeof *nev);
    if (!nev) return ZKL_ENOMEM;
    for (i = 0; i < len; i++)
        nev[i] = (*ev)[(*head + i) % *cap];
    zkl__free(c, *ev, *cap * sizeof **ev);
    *ev = nev;
    *cap = ncap;
    *head = 0;
    return 0;
}

/* Make room for `extra` more events. Ops reserve room when they are created, so that emitting
 * an event (deep inside a ZooKeeper callback) practically never needs memory. */
int zkl__ev_reserve(zkl_client *c, size_t extra) {
    return ring_grow(c, &c->ev, &c->ev_cap, &c->ev_head, c->ev_len, c->ev_len + extra);
}

int zkl__ev_push(zkl_client *c, uint64_t id, int type, int status) {
    if (zkl__ev_reserve(c, 1) != 0) return ZKL_ENOMEM; /* only if the reservation was outgrown */
    zkl_event *e = &c->ev[(c->ev_head + c->ev_len) % c->ev_cap];
    e->id = id;
    e->type = type;
    e->status = status;
    c->ev_len++;
    return 0;
}

int zkl__ev_pop(zkl_client *c, zkl_event *out) {
    if (c->ev_len == 0) return 0;
    *out = c->ev[c->ev_head];
    c->ev_head = (c->ev_head + 1) % c->ev_cap;
    c->ev_len--;
    return 1;
}

void zkl__ev_free(zkl_client *c) {
    zkl__free(c, c->ev, c->ev_cap * sizeof *c->ev);
    c->ev = NULL;
    c->ev_cap = c->ev_head = c->ev_len = 0;
}

/* Room in the ready list for what is queued there, one event per parked op, and `extra` more. */
int zkl__rd_reserve(zkl_client *c, size_t extra) {
    return ring_grow(c, &c->rd, &c->rd_cap, &c->rd_head, c->rd_len, c->rd_len + c->nparked + extra);
}

void zkl__rd_push(zkl_client *c, uint64_t id, int type, int status) {
    zkl_event *e = &c->rd[(c->rd_head + c->rd_len) % c->rd_cap];
    e->id = id;
    e->type = type;
    e->status = status;
    c->rd_len++;
}

int zkl__rd_pop(zkl_client *c, zkl_event *out) {
    if (c->rd_len == 0) return 0;
    *out = c->rd[c->rd_head];
    c->rd_head = (c->rd_head + 1) % c->rd_cap;
    c->rd_len--;
    return 1;
}

void zkl__rd_free(zkl_client *c) {
    zkl__free(c, c->rd, c->rd_cap * sizeof *c->rd);
    c->rd = NULL;
    c->rd_cap = c->rd_head = c->rd_len = 0;
}
