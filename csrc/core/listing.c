/* listing.c - shared listings of lock dirs.
 *
 * Listings of one lock dir asked for before the next flush go out as one getChildren. The server
 * answers a session's requests in order, so a listing sent after an op's create (or after the
 * watch notification that made it list again) reflects it: one reply serves every op that joined
 * before the send. With many waiters of one client on one lock the server answers one listing
 * per flush instead of one per waiter (10,000 pipelined listings of 10,000 children each exhaust
 * its memory). The flush runs at the start and end of every process(). While a shared reply is
 * handed to its ops, c->sorted caches its children sorted for one recipe (queue.c fills it). */
#include <string.h>

#include "internal.h"

struct zkl_listing {
    zkl_listing *next;
    zkl_client *c;
    char *dir;
    strings_completion_t done; /* called once per joined op, with that op's token */
    size_t n, cap;
    const void **tokens; /* op tokens (id and generation) at the time each op joined */
};

static void listing_free(zkl_listing *l) {
    zkl_client *c = l->c;
    zkl__strfree(c, l->dir);
    zkl__free(c, l->tokens, l->cap * sizeof *l->tokens);
    zkl__free(c, l, sizeof *l);
}

/* The op named by token joins the next listing of dir; its reply goes to done(rc, v, token).
 * 0, or -1 when out of memory (the caller then lists on its own). */
int zkl__listing_join(zkl_client *c, const char *dir, const void *token,
                      strings_completion_t done) {
    zkl_listing *l;
    for (l = c->listings; l; l = l->next)
        if (l->done == done && strcmp(l->dir, dir) == 0) break;
    if (!l) {
        l = zkl__alloc(c, sizeof *l);
        if (!l) return -1;
        memset(l, 0, sizeof *l);
        l->c = c;
        l->done = done;
        l->dir = zkl__strdup(c, dir);
        if (!l->dir) {
            zkl__free(c, l, sizeof *l);
            return -1;
        }
        l->next = c->listings;
        c->listings = l;
    }
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 4;
        const void **t = zkl__alloc(c, ncap * sizeof *t);
        if (!t) return -1; /* an empty listing is simply freed at the flush */
        if (l->n) memcpy(t, l->tokens, l->n * sizeof *t);
        zkl__free(c, l->tokens, l->cap * sizeof *l->tokens);
        l->tokens = t;
        l->cap = ncap;
    }
    zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(token));
    l->tokens[l->n++] = token;
    if (op) op->refs++;
    return 0;
}

static void listing_reply(int rc, const struct String_vector *v, const void *data) {
    zkl_listing *l = (zkl_listing *)(uintptr_t)data;
    zkl_client *c = l->c;
    if (++c->listing_serial == 0) c->listing_serial = 1; /* 0 means a private listing */
    c->sorted_for = v;
    for (size_t i = 0; i < l->n; i++)
        l->done(rc, v, l->tokens[i]);
    zkl__free(c, (void *)c->sorted, c->sorted_n * sizeof *c->sorted);
    c->sorted_for = NULL;
    c->sorted = NULL;
    c->sorted_n = 0;
    listing_free(l);
}

void zkl__listings_flush(zkl_client *c) {
    zkl_listing **pp = &c->listings;
    while (*pp) {
        zkl_listing *l = *pp;
        if (l->n == 0) {
            *pp = l->next;
            listing_free(l);
            continue;
        }
        if (!c->zh) return; /* between handles: sent with the next one (stale tokens are ignored) */
        int rc = zkl__aget_children(c, l->dir, 0, listing_reply, l);
        if (rc != ZOK) { /* the handle refused it: keep it for the next flush */
            pp = &l->next;
            continue;
        }
        c->stats.lists++;
        *pp = l->next; /* the reply owns it now */
    }
}

/* The session ended or the client is closing: unsent listings go, releasing the ops they kept. */
void zkl__listings_drop(zkl_client *c) {
    while (c->listings) {
        zkl_listing *l = c->listings;
        c->listings = l->next;
        for (size_t i = 0; i < l->n; i++) {
            zkl_op *op = zkl__op_find(c, ZKL_TOKEN_ID(l->tokens[i]));
            if (op) {
                op->refs--;
                zkl__op_maybe_free(c, op);
            }
        }
        listing_free(l);
    }
}
