/* naming.h - pure functions on znode names: Curator's naming, sort keys and predecessor choice.
 * No I/O, no allocation beyond what the caller passes; unit-tested against recorded child lists. */
#ifndef ZKL_NAMING_H
#define ZKL_NAMING_H

#include "zklock.h"
#include <stddef.h>

/* The token Curator puts between the protected prefix and the sequence number. */
const char *zkl__recipe_token(zkl_recipe r);

/* Write "_c_<uuid4>-<token>" (lowercase canonical UUIDv4 from 16 random bytes) into buf.
 * Returns the length, or -1 if buf is too small (it needs 40 + strlen(token) + 1 bytes). */
int zkl__protected_prefix(char *buf, size_t size, const unsigned char rnd[16], zkl_recipe r);

/* The same with any token (e.g. "lease-" for semaphore leases). */
int zkl__protected_prefix_named(char *buf, size_t size, const unsigned char rnd[16],
                                const char *token);

/* Sort key of a child name under recipe r, as Curator computes it, extended so that Kazoo's
 * "__lock__<seq>" (and for read-write "__rlock__<seq>") names sort by their sequence too. The
 * latch (Curator LeaderLatch) keys by the text after the last "latch-" only, as Curator does.
 * Returns a pointer into name. */
const char *zkl__sort_key(const char *name, zkl_recipe r);

/* 1 if the child counts as a writer for a reader of the read-write lock. */
int zkl__is_writer(const char *name);

/* 1 if a sort key is a negative sequence number: the parent's counter wrapped past 2^31. */
int zkl__key_wrapped(const char *key);

/* Scratch space for sorting: one per child. */
typedef struct zkl__sort_item {
    const char *key;
    const char *name;
} zkl__sort_item;

/* Sort names in place by (sort key, whole name); `scratch` holds n items. */
void zkl__sort_children(const char **names, int n, zkl_recipe r, zkl__sort_item *scratch);

typedef struct zkl__pick {
    int own;           /* index of own node in the sorted list, -1 if missing */
    int holds;         /* 1 if own node holds the lock */
    int watch;         /* index of the node to watch when not holding, else -1 */
    int watch_is_head; /* mutex and latch: the watched node is the head, so its deletion hands over
                        */
    int wrapped;       /* some key before own node is a negative (wrapped) sequence */
} zkl__pick;

/* Decide, on a sorted child list, whether `own` (a child name) holds the lock, and whom to watch:
 * mutex, latch and write side: the immediate predecessor; read side: the first earlier writer.
 * watch_is_head for the mutex and the latch. */
void zkl__pick_predecessor(const char *const *sorted, int n, const char *own, zkl_recipe r,
                           zkl__pick *out);

/* 1 if child name starts with prefix (protected-mode recovery). */
int zkl__has_prefix(const char *name, const char *prefix);

#endif
