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

/* ---------------------------------------------------------------- what waiters know of a dir */

struct zkl_dircache {
    zkl_dircache *next;
    char *dir;
    zkl_recipe order; /* ZKL_MUTEX, ZKL_READ (both sides of a read-write lock) or ZKL_LATCH */
    int users;        /* waiters that refer to it */
    unsigned serial;  /* the shared listing it was filled from (0: a private one) */
    size_t n, cap;
    const char **names; /* sorted */
    const char **keys;  /* their sort keys (pointers into names) */
    unsigned char *gone;
    char *blob; /* the names' bytes */
    size_t blob_len;
    char *floor;     /* every node sorting at or below it is gone (NULL: none known) */
    char *floor_key; /* its key (into floor) */
};

static zkl_recipe order_of(zkl_recipe r) {
    return r == ZKL_READ || r == ZKL_WRITE ? ZKL_READ : r == ZKL_LATCH ? ZKL_LATCH : ZKL_MUTEX;
}

/* the order of zkl__sort_children: the key, then the whole name */
static int cmp_node(const char *ka, const char *na, const char *kb, const char *nb) {
    int r = strcmp(ka, kb);
    return r ? r : strcmp(na, nb);
}

static void dircache_clear(zkl_client *c, zkl_dircache *d) {
    if (d->cap) {
        zkl__free(c, d->names, d->cap * sizeof *d->names);
        zkl__free(c, d->keys, d->cap * sizeof *d->keys);
        zkl__free(c, d->gone, d->cap);
        zkl__free(c, d->blob, d->blob_len);
    }
    d->names = d->keys = NULL;
    d->gone = NULL;
    d->blob = NULL;
    d->n = d->cap = d->blob_len = 0;
    d->serial = 0;
}

zkl_dircache *zkl__dircache_ref(zkl_client *c, const char *dir, zkl_recipe r) {
    zkl_dircache *d;
    r = order_of(r);
    for (d = c->dircaches; d; d = d->next)
        if (d->order == r && strcmp(d->dir, dir) == 0) break;
    if (!d) {
        d = zkl__alloc(c, sizeof *d);
        if (!d) return NULL;
        memset(d, 0, sizeof *d);
        d->order = r;
        d->dir = zkl__strdup(c, dir);
        if (!d->dir) {
            zkl__free(c, d, sizeof *d);
            return NULL;
        }
        d->next = c->dircaches;
        c->dircaches = d;
    }
    d->users++;
    return d;
}

void zkl__dircache_unref(zkl_client *c, zkl_dircache *d) {
    if (!d || --d->users > 0) return;
    zkl_dircache **pp = &c->dircaches;
    while (*pp && *pp != d)
        pp = &(*pp)->next;
    if (*pp) *pp = d->next;
    dircache_clear(c, d);
    zkl__strfree(c, d->floor);
    zkl__strfree(c, d->dir);
    zkl__free(c, d, sizeof *d);
}

int zkl__dircache_fill(zkl_client *c, zkl_dircache *d, const char *const *sorted, int n,
                       unsigned serial) {
    if (serial && d->serial == serial && d->names) return 0; /* filled from this reply already */
    /* A later listing replaces an earlier one: the server answers in order, so it holds every
     * node of the earlier one still there, and none of those this client has seen go. */
    dircache_clear(c, d);
    size_t len = 1, un = n > 0 ? (size_t)n : 0, cap = un ? un : 1;
    for (size_t i = 0; i < un; i++)
        len += strlen(sorted[i]) + 1;
    d->names = zkl__alloc(c, cap * sizeof *d->names);
    d->keys = zkl__alloc(c, cap * sizeof *d->keys);
    d->gone = zkl__alloc(c, cap);
    d->blob = zkl__alloc(c, len);
    d->cap = cap;
    d->blob_len = len;
    if (!d->names || !d->keys || !d->gone || !d->blob) {
        zkl__free(c, d->names, cap * sizeof *d->names);
        zkl__free(c, d->keys, cap * sizeof *d->keys);
        zkl__free(c, d->gone, cap);
        zkl__free(c, d->blob, len);
        d->names = d->keys = NULL;
        d->gone = NULL;
        d->blob = NULL;
        d->cap = d->blob_len = 0;
        return -1;
    }
    d->n = un;
    char *p = d->blob;
    for (size_t i = 0; i < un; i++) {
        size_t l = strlen(sorted[i]) + 1;
        memcpy(p, sorted[i], l);
        d->names[i] = p;
        d->keys[i] = zkl__sort_key(p, d->order);
        d->gone[i] = 0;
        p += l;
    }
    d->serial = serial;
    return 0;
}

/* index of the first entry not sorting below (key, name) */
static size_t lower_bound(const zkl_dircache *d, const char *key, const char *name) {
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_node(d->keys[mid], d->names[mid], key, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void zkl__dircache_gone(zkl_dircache *d, const char *name) {
    if (!d || !name || !d->n) return;
    size_t i = lower_bound(d, zkl__sort_key(name, d->order), name);
    if (i < d->n && strcmp(d->names[i], name) == 0) d->gone[i] = 1;
}

static zkl_dircache *dircache_find(zkl_client *c, const char *dir, zkl_recipe r) {
    zkl_dircache *d;
    for (d = c->dircaches; d; d = d->next)
        if (d->order == r && strcmp(d->dir, dir) == 0) break;
    return d;
}

void zkl__dircache_gone_in(zkl_client *c, const char *dir, zkl_recipe r, const char *name) {
    zkl__dircache_gone(dircache_find(c, dir, order_of(r)), name);
}

void zkl__dircache_floor(zkl_client *c, const char *dir, zkl_recipe r, const char *name) {
    r = order_of(r);
    zkl_dircache *d = dircache_find(c, dir, r);
    if (!d || !name) return;
    const char *key = zkl__sort_key(name, r);
    if (d->floor && cmp_node(key, name, d->floor_key, d->floor) <= 0) return;
    char *f = zkl__strdup(c, name);
    if (!f) return; /* only knowledge lost */
    zkl__strfree(c, d->floor);
    d->floor = f;
    d->floor_key = (char *)zkl__sort_key(f, r);
}

/* Walk down from name over the nodes that still count; calls back each, nearest first, until
 * it returns 0. Returns 0 when name is not in the cache. */
static int walk_below(const zkl_dircache *d, const char *name, int writers_only,
                      int (*each)(const char *node, void *ud), void *ud) {
    if (!d || !name || !d->n) return 0;
    const char *key = zkl__sort_key(name, d->order);
    size_t i = lower_bound(d, key, name);
    if (i >= d->n || strcmp(d->names[i], name) != 0) return 0;
    /* below the floor everything is gone; the floor node itself was granted to this client and
     * counts until it is seen gone (its holder may hold it still) */
    size_t stop = d->floor ? lower_bound(d, d->floor_key, d->floor) : 0;
    while (i > stop) {
        i--;
        if (d->gone[i]) continue;
        if (writers_only && !zkl__is_writer(d->names[i])) continue;
        if (!each(d->names[i], ud)) break;
    }
    return 1;
}

size_t zkl__dircache_size(const zkl_dircache *d) {
    return d ? d->n : 0;
}

typedef struct {
    const char *first;
    int n;
} below_acc;

static int count_one(const char *node, void *ud) {
    below_acc *a = ud;
    if (!a->first) a->first = node;
    return ++a->n <= ZKL_WALK_MAX;
}

const char *zkl__dircache_below(const zkl_dircache *d, const char *name, int writers_only,
                                int *found, int *left) {
    below_acc a = {NULL, 0};
    *found = walk_below(d, name, writers_only, count_one, &a);
    *left = a.n;
    return a.first;
}

typedef struct {
    const char **out;
    int n, max;
} collect_acc;

static int collect_one(const char *node, void *ud) {
    collect_acc *a = ud;
    a->out[a->n++] = node;
    return a->n < a->max;
}

int zkl__dircache_candidates(const zkl_dircache *d, const char *name, int writers_only,
                             const char **out, int max) {
    collect_acc a = {out, 0, max};
    if (max <= 0) return 0;
    walk_below(d, name, writers_only, collect_one, &a);
    return a.n;
}
