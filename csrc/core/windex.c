/* windex.c - the client's index of armed watches by path. Every watch of a client (plain reads,
 * lock waiters, lease listings) is registered with the ZooKeeper client under one (watcher,
 * context) pair, so the C client's per-session-event walk of its pairs stays short; its watcher
 * is called once per event and path, and the ops that event concerns are found here: chains per
 * hash bucket, in the order the ops armed them (plain.c says why, queue.c and semaphore.c use it).
 * This file calls no other file of the core but mem.c and op.c (scripts/callgraph.lua). */
#include <string.h>

#include "internal.h"

uint32_t zkl__path_hash(const char *path) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

#define WBUCKET(c, h) ((c)->wbuckets + ((h) & ((c)->nwbuckets - 1)))

/* At the end of its chain (its tail kept: no walk, however many entries share a path): an event
 * reaches the ops of a path in the order they were armed. */
static void wchain_append(zkl_wbucket *b, zkl_wentry *e) {
    e->prev = b->tail;
    e->next = NULL;
    if (b->tail)
        b->tail->next = e;
    else
        b->head = e;
    b->tail = e;
}

/* A table with room for one more (doubled when full: chains stay short); ZKL_ENOMEM only when
 * there is no table at all. A table that cannot grow keeps working with longer chains. Each old
 * chain is walked once, its entries appended in order to their new chains: the entries of a path
 * keep their order (they all go to the same new chain), and a doubling costs the number of
 * entries, not that number times a chain's length. */
int zkl__windex_room(zkl_client *c) {
    if (c->nwbuckets && c->nwatched < c->nwbuckets) return 0;
    size_t nb = c->nwbuckets ? c->nwbuckets * 2 : 64;
    zkl_wbucket *b = zkl__alloc(c, nb * sizeof *b);
    if (!b) return c->nwbuckets ? 0 : ZKL_ENOMEM;
    memset(b, 0, nb * sizeof *b);
    zkl_wbucket *old = c->wbuckets;
    size_t oldn = c->nwbuckets;
    c->wbuckets = b;
    c->nwbuckets = nb;
    for (size_t i = 0; i < oldn; i++) {
        zkl_wentry *e = old[i].head, *next;
        for (; e; e = next) {
            next = e->next;
            wchain_append(WBUCKET(c, e->hash), e);
        }
    }
    zkl__free(c, old, oldn * sizeof *old);
    return 0;
}

int zkl__windex_add(zkl_client *c, zkl_wentry *e, zkl_op *op, const char *path, int table) {
    zkl__windex_remove(c, e);
    int rc = zkl__windex_room(c);
    if (rc != 0) return rc;
    e->op = op;
    e->path = path;
    e->table = table;
    e->hash = zkl__path_hash(path);
    e->seq = ++c->wseq;
    wchain_append(WBUCKET(c, e->hash), e);
    e->indexed = 1;
    c->nwatched++;
    return 0;
}

void zkl__windex_remove(zkl_client *c, zkl_wentry *e) {
    if (!e->indexed) return;
    zkl_wbucket *b = WBUCKET(c, e->hash);
    if (e->prev)
        e->prev->next = e->next;
    else
        b->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        b->tail = e->prev;
    e->next = e->prev = NULL;
    e->indexed = 0;
    c->nwatched--;
}

static zkl_wentry *wchain_find(zkl_wentry *e, int table, const char *path, uint32_t hash) {
    for (; e; e = e->next)
        if (e->hash == hash && e->table == table && strcmp(e->path, path) == 0) return e;
    return NULL;
}

zkl_wentry *zkl__windex_first(zkl_client *c, int table, const char *path) {
    if (!c->nwbuckets) return NULL;
    uint32_t h = zkl__path_hash(path);
    return wchain_find(WBUCKET(c, h)->head, table, path, h);
}

zkl_wentry *zkl__windex_next(const zkl_wentry *e) {
    return wchain_find(e->next, e->table, e->path, e->hash);
}

/* An entry a walk took: still indexed at this path (its op found by id first: an entry lives
 * inside its op, and a freed op is never touched). As a place to go on from it must also have
 * the arm number it had when the walk saw it: then it is still where it was (entries only join
 * a chain at its end). */
typedef struct {
    zkl_wentry *e;
    uint64_t id, seq;
} wcursor;

static int wcursor_indexed(zkl_client *c, const wcursor *k, int table, const char *path) {
    zkl_op *op = k->e ? zkl__op_find(c, k->id) : NULL;
    return op && k->e->indexed && k->e->op == op && k->e->table == table &&
           strcmp(k->e->path, path) == 0;
}

static int wcursor_in_place(zkl_client *c, const wcursor *k, int table, const char *path) {
    return wcursor_indexed(c, k, table, path) && k->e->seq == k->seq;
}

/* Marked first, then called in batches of entries still marked. Each batch after the first
 * starts from a cursor kept from the one before, checked still in place (fn may remove, re-arm or
 * move any entry): the entry that was next after the batch, or else the batch's own entries from
 * its last; only when none of them kept its place does the walk start from the chain's head
 * again. Every marked entry lies after a cursor that kept its place: those before it were called
 * or unmarked when the batch was taken, and entries only join a chain at its end (one that was
 * marked, taken out and armed again at the path keeps its mark: it is called at its new place). */
void zkl__windex_each(zkl_client *c, int table, const char *path,
                      void (*fn)(zkl_client *c, zkl_op *op, void *arg), void *arg) {
    enum { BATCH = 64 };
    uint32_t mark = ++c->wmark ? c->wmark : ++c->wmark; /* never 0: an entry's initial mark */
    for (zkl_wentry *e = zkl__windex_first(c, table, path); e; e = zkl__windex_next(e))
        e->mark = mark;
    zkl_wentry *from = zkl__windex_first(c, table, path);
    for (;;) {
        wcursor ks[BATCH + 1]; /* the batch, then the entry after it */
        int n = 0;
        zkl_wentry *e = from;
        for (; e && n < BATCH; e = zkl__windex_next(e)) {
            if (e->mark != mark) continue;
            e->mark = 0;
            ks[n++] = (wcursor){e, e->op->id, e->seq};
        }
        if (n == 0) return;
        while (e && e->mark != mark)
            e = zkl__windex_next(e);
        ks[n] = (wcursor){e, e ? e->op->id : 0, e ? e->seq : 0};
        for (int i = 0; i < n; i++)
            if (wcursor_indexed(c, &ks[i], table, path)) fn(c, ks[i].e->op, arg);
        from = NULL;
        if (wcursor_in_place(c, &ks[n], table, path))
            from = ks[n].e;
        else
            for (int i = n - 1; i >= 0 && !from; i--)
                if (wcursor_in_place(c, &ks[i], table, path)) from = zkl__windex_next(ks[i].e);
        if (!from) from = zkl__windex_first(c, table, path);
    }
}

void zkl__windex_free(zkl_client *c) {
    zkl__free(c, c->wbuckets, c->nwbuckets * sizeof *c->wbuckets);
    c->wbuckets = NULL;
    c->nwbuckets = c->nwatched = 0;
}
