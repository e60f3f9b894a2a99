/* walk.c - what this client knows of its lock dirs, kept for the fair queue's waiters, and the
 * walk down it (docs/design.md, decision 5): when the node a waiter watched is gone, the nearest
 * node still sorting before its own is found in the listing it kept instead of a new listing.
 * Only queue.c calls it, and it decides only: every request is queue.c's (zkl__walk_plan and
 * zkl__walk_probed say what to do next). */
#include <string.h>

#include "queue.h"

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

/* ---------------------------------------------------------------- the walk */

/* the probe round's names */
static void probe_free(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    if (!q->probe) return;
    for (int i = 0; i < q->probe_n; i++)
        zkl__strfree(c, q->probe[i]);
    zkl__free(c, q->probe, (size_t)(q->probe_cap ? q->probe_cap : 1) * sizeof *q->probe);
    q->probe = NULL;
    q->probe_n = q->probe_i = q->probe_lost = q->probe_cap = 0;
}

/* The op stops relying on what the client knows of its dir (it holds, gave up, lost its node,
 * or the link dropped: the next listing decides again). */
void zkl__walk_drop(zkl_client *c, zkl_op *op) {
    probe_free(c, op);
    if (!QOP(op)->cache) return;
    zkl__dircache_unref(c, QOP(op)->cache);
    QOP(op)->cache = NULL;
}

/* A waiter keeps the listing that made it wait (shared with the client's other waiters on the
 * dir), for the walk (queue.c, predecessor_gone). Not for a downgrade's read node (granted at
 * once), the lease stage of a semaphore, or once a sequence has wrapped (new nodes would then sort
 * before old ones). */
void zkl__walk_keep(zkl_client *c, zkl_op *op, const char **sorted, int n,
                    const struct String_vector *v, int wrapped) {
    zkl_qop *q = QOP(op);
    int recipe_ok = q->recipe == ZKL_MUTEX || q->recipe == ZKL_LATCH || q->recipe == ZKL_READ ||
                    q->recipe == ZKL_WRITE;
    if (wrapped || !recipe_ok || q->stage > 1 || q->fixed_name) {
        zkl__walk_drop(c, op);
        return;
    }
    if (!q->cache) q->cache = zkl__dircache_ref(c, q->dir, q->recipe);
    if (!q->cache) return;
    unsigned serial = v && v == c->sorted_for ? c->listing_serial : 0;
    if (zkl__dircache_fill(c, q->cache, sorted, n, serial) < 0) zkl__walk_drop(c, op);
}

/* Was the deleted predecessor a mutex node that this client itself held? Then it was the head
 * when granted, and nothing sorted between it and us (it was our immediate predecessor), so we
 * are the head now. The server notifies the watch before it answers our own delete, so the
 * releasing op is still in the table; if not, the caller lists as usual. Mutex and latch only,
 * like the handoff on a watched head (queue.c, predecessor_gone): a write lock's holder may have
 * downgraded to a read node that sorts before us. That includes the semaphore's internal mutex
 * (stage 1), whose holder gives its node back through a cleanup op marked held_head. */
int zkl__walk_own_predecessor(zkl_client *c, zkl_op *op) {
    zkl_qop *q = QOP(op);
    if ((q->recipe != ZKL_MUTEX && q->recipe != ZKL_LATCH) || q->stage > 1 || !q->watch_path)
        return 0;
    for (zkl_op *o = c->ops; o; o = o->next) {
        if (o == op || !(o->kind->flags & ZKL_KIND_QUEUE) || QOP(o)->recipe != q->recipe) continue;
        /* a held user mutex, or the semaphore's internal mutex given back by its holder */
        int head =
            (QOP(o)->granted && !QOP(o)->stage) || (QOP(o)->held_head && o->phase == P_CLEANUP);
        if (head && QOP(o)->node && strcmp(QOP(o)->node, q->watch_path) == 0) return 1;
    }
    return 0;
}

/* 1 if no node that counts for a mutex or latch is left below name (name: the node to watch) */
static int head_below(zkl_op *op, const char *name) {
    zkl_qop *q = QOP(op);
    int found = 0, left = 0;
    if (q->recipe != ZKL_MUTEX && q->recipe != ZKL_LATCH) return 0;
    return !zkl__dircache_below(q->cache, name, 0, &found, &left) && found;
}

/* Where the walk goes now that the watched node is gone (its name marked gone already), one of
 * the ZKL_WALK_* answers (queue.h). *next: the node to watch (WATCH; into the cache), *head:
 * whether nothing that counts is left below it. PROBE: q->probe holds the paths to check. */
int zkl__walk_plan(zkl_client *c, zkl_op *op, const char **next, int *head) {
    zkl_qop *q = QOP(op);
    if (!q->cache || !q->node) return ZKL_WALK_LIST;
    int found = 0, left = 0, writers = q->recipe == ZKL_READ;
    const char *own = strrchr(q->node, '/') + 1;
    *next = zkl__dircache_below(q->cache, own, writers, &found, &left);
    if (!found || left > ZKL_WALK_MAX) return ZKL_WALK_LIST;
    /* a probe costs the server a request per node, a listing one with every name: in a short
     * queue listing is cheaper */
    if (left > ZKL_WALK_CHEAP && (size_t)left * 8 > zkl__dircache_size(q->cache))
        return ZKL_WALK_LIST;
    if (!*next) return ZKL_WALK_GRANT;
    if (left == 1) {
        *head = head_below(op, *next);
        return ZKL_WALK_WATCH;
    }
    /* Several nodes to check: exists() without a watch on each, pipelined (one round trip; a
     * reply is a header, and a Stat for a node still there), then a watch on the nearest one
     * still there. In a drain across processes they are mostly gone. */
    const char *names[ZKL_WALK_MAX];
    int n = zkl__dircache_candidates(q->cache, own, writers, names, ZKL_WALK_MAX);
    probe_free(c, op);
    q->probe = zkl__alloc(c, (size_t)(n ? n : 1) * sizeof *q->probe);
    if (!q->probe) return ZKL_WALK_LIST;
    memset(q->probe, 0, (size_t)(n ? n : 1) * sizeof *q->probe);
    q->probe_cap = n;
    for (int i = 0; i < n; i++) {
        q->probe[i] = zkl__join_path(c, q->dir, names[i]);
        q->probe_n = i + 1;
        if (!q->probe[i]) {
            probe_free(c, op);
            return ZKL_WALK_LIST;
        }
    }
    return ZKL_WALK_PROBE;
}

/* Only probe_n - sent of the round's probes went out (the link is gone: those sent fail too). */
void zkl__walk_probes_unsent(zkl_client *c, zkl_op *op, int sent) {
    zkl_qop *q = QOP(op);
    q->probe_lost = 1;
    if (sent == 0) {
        probe_free(c, op);
        return;
    }
    for (int j = sent; j < q->probe_n; j++)
        zkl__strfree(c, q->probe[j]);
    q->probe_n = sent; /* the replies of those sent end the round */
}

/* One probe answered (rc of its exists()). PENDING until the round's last reply; then RELIST
 * (unsure: list once connected), GRANT (none left below) or WATCH (*next, *head). */
int zkl__walk_probed(zkl_client *c, zkl_op *op, int rc, const char **next, int *head) {
    zkl_qop *q = QOP(op);
    const char *path = q->probe[q->probe_i++];
    if (rc == ZNONODE && q->cache)
        zkl__dircache_gone(q->cache, strrchr(path, '/') + 1);
    else if (rc != ZOK)
        q->probe_lost = 1; /* connection loss, or anything else: unsure, list */
    if (q->probe_i < q->probe_n) return ZKL_WALK_PENDING;
    int lost = q->probe_lost || !q->cache || !q->node;
    probe_free(c, op);
    int found = 0, left = 0;
    *next = lost ? NULL
                 : zkl__dircache_below(q->cache, strrchr(q->node, '/') + 1, q->recipe == ZKL_READ,
                                       &found, &left);
    if (lost || !found) return ZKL_WALK_RELIST;
    if (!*next) return ZKL_WALK_GRANT;
    *head = head_below(op, *next); /* the nearest one still there */
    return ZKL_WALK_WATCH;
}
