/* events.c - the client's event queue: a ring of zkl_event the user drains with
 * zkl_client_next_event. Only the queue itself: which op an event names, and what happens to an
 * op once its final event is out, is op.c's (zkl__emit). Calls only mem.c. */
#include "internal.h"

/* Make room for `extra` more events. Ops reserve room when they are created, so that emitting
 * an event (deep inside a ZooKeeper callback) practically never needs memory. */
int zkl__ev_reserve(zkl_client *c, size_t extra) {
    if (c->ev_len + extra <= c->ev_cap) return 0;
    size_t ncap = c->ev_cap ? c->ev_cap : 64, i;
    while (ncap < c->ev_len + extra)
        ncap *= 2;
    zkl_event *nev = zkl__alloc(c, ncap * sizeof *nev);
    if (!nev) return ZKL_ENOMEM;
    for (i = 0; i < c->ev_len; i++)
        nev[i] = c->ev[(c->ev_head + i) % c->ev_cap];
    zkl__free(c, c->ev, c->ev_cap * sizeof *c->ev);
    c->ev = nev;
    c->ev_cap = ncap;
    c->ev_head = 0;
    return 0;
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
