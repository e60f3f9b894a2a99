/* queue.h - the fair queue (queue.c: the state machine; walk.c: what waiters know of a dir and
 * the walk down it; lock.c: the public lock API): Curator's InterProcessMutex and
 * InterProcessReadWriteLock node protocol, shared with the kinds built on it (the lease semaphore
 * takes its internal mutex through it). Not installed. */
#ifndef ZKL_QUEUE_H
#define ZKL_QUEUE_H

#include "internal.h"

/* Steps while acquiring: what is in flight, or what to (re)issue once connected. */
enum {
    S_START = 1, /* issue create + list (after the connection is up) */
    S_CREATE,    /* create (and the pipelined list) in flight */
    S_LIST,      /* list in flight */
    S_RELIST,    /* list again once connected */
    S_DATA,      /* getData + watch on the predecessor in flight */
    S_WAIT,      /* watch armed */
    S_SCAN,      /* create outcome unknown: list to find our protected prefix once connected */
    S_SCANNING,  /* that list in flight */
    S_STAT,      /* found our node by prefix: exists() for its czxid in flight */
    S_PROBE,     /* walk: exists() (no watch) on the nodes below ours not known gone, in flight */
    S_QUEUE_LAST /* kinds built on the queue number their own steps from here */
};

/* A node in a lock dir's queue: a mutex or read-write lock acquisition, a held lease, or a
 * background cleanup of a node nobody owns any more. */
typedef struct zkl_qop {
    zkl_op op;
    int step;
    int stage; /* 0: plain queue op; > 0: owned by a kind built on the queue */
    zkl_recipe recipe;
    int acl; /* id of the ACL for the nodes this op creates (0: open) */
    int try_once;
    char *dir;     /* lock path */
    char *prefix;  /* "_c_<uuid>-<token>" */
    char *node;    /* full path of own node, once known */
    int64_t czxid; /* the fencing token */
    int create_inflight, delete_inflight, scan_inflight;
    int unknown; /* a create's outcome is unknown: scan by prefix */
    int parents_tried;
    int warned_wrap;
    int release_status;
    int deletes_sent; /* deletes of its own node sent: a ZNONODE to the only one means the
                         node was deleted by someone else (see delete_reply) */
    char *watch_path;
    int watch_is_head;
    int granted;             /* held at some point (its node was then the head, if exclusive) */
    int ahead;               /* nodes sorted before ours at its first listing (-1: not listed) */
    int held_head;           /* cleanup of a node that headed its mutex queue (the semaphore's
                                internal mutex, given back after the lease stage) */
    const void *watch_token; /* completion token of the request that arms the watch */
    zkl_wentry w;            /* on watch_path in the client's index of watches, while acquiring */
    int drop_on_reply;       /* gave up while the watch-setting request was in flight */
    /* read side of a downgrade: a non-sequential node with the writer's sequence, granted at once
     */
    char *fixed_name;
    int grant_on_create;
    /* node data of this acquisition (zkl_lock_args.data); NULL: the client's identity */
    char *data;
    size_t data_len;
    int64_t owner; /* ephemeralOwner of own node (create or adopt reply), 0 unknown */
    /* while waiting: what this client knows of the dir (walk.c), for the walk down to the
     * next node that still sorts before ours instead of a new listing; NULL: list again */
    zkl_dircache *cache;
    char **probe; /* the nodes of the probe round in flight, in the order sent (replies come so) */
    int probe_n, probe_i, probe_lost, probe_cap;
} zkl_qop;

#define QOP(o) ((zkl_qop *)(o))

extern const zkl_kind zkl__queue_kind;

/* for the kinds built on the queue: a new acquisition in phase ACQUIRING on dir with a fresh
 * protected prefix for token; the kind's struct must start with a zkl_qop */
int zkl__queue_new(zkl_client *c, const zkl_kind *kind, const char *dir, const char *token,
                   int timeout_ms, int acl, zkl_op **out);
int zkl__queue_start(zkl_client *c, zkl_op *op, uint64_t *id);
/* a lock or semaphore acquisition made but not started (the multi-lock links it first) */
int zkl__lock_new(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms, int acl,
                  zkl_op **out);
int zkl__semaphore_new(zkl_client *c, const char *path, int max_leases, int qty, int timeout_ms,
                       int acl, zkl_op **out);
void zkl__queue_kick(zkl_client *c, zkl_op *op);
void zkl__queue_fail(zkl_client *c, zkl_op *op, int status);
void zkl__queue_acquired(zkl_client *c, zkl_op *op);
void zkl__queue_session_lost(zkl_client *c, zkl_op *op, int status);
void zkl__queue_suspended(zkl_client *c, zkl_op *op, int suspended);
void zkl__queue_expire(zkl_client *c, zkl_op *op);
int zkl__queue_cancel(zkl_client *c, zkl_op *op);
void zkl__queue_abandon(zkl_client *c, zkl_op *op);
void zkl__queue_close(zkl_client *c, zkl_op *op);
void zkl__queue_free_fields(zkl_client *c, zkl_op *op);
/* a background op that deletes node (or, with node NULL, every child of dir named with prefix) */
void zkl__queue_cleanup(zkl_client *c, const char *dir, const char *prefix, const char *node,
                        int held_head);
/* take back a watch of this type on path, unless in_use says another op of ours needs it */
void zkl__remove_watches(zkl_client *c, const char *path, int type);

/* walk.c: what this client knows of a lock dir, and the walk down it */
/* What this client knows of a lock dir, kept for its waiters: the last listing sorted for one
 * order (mutex, read-write or latch), the nodes since seen gone, and a floor (every node sorting
 * below it is gone: a node of this client was granted an exclusive hold there; the floor node
 * itself counts until it is seen gone, as its holder may hold it still). Nodes made by
 * sequential creates only get higher sequences, so a waiter finds in it every node that can
 * still sort before its own (see walk.c). */
zkl_dircache *zkl__dircache_ref(zkl_client *c, const char *dir, zkl_recipe r);
void zkl__dircache_unref(zkl_client *c, zkl_dircache *d);
/* refill from a sorted listing (serial: the shared listing it came from, 0 a private one);
 * -1 when out of memory (the cache is then empty) */
int zkl__dircache_fill(zkl_client *c, zkl_dircache *d, const char *const *sorted, int n,
                       unsigned serial);
void zkl__dircache_gone(zkl_dircache *d, const char *name);
/* the same, by dir: name (a node of this client) was deleted by the client itself */
void zkl__dircache_gone_in(zkl_client *c, const char *dir, zkl_recipe r, const char *name);
/* name (a node of this client) was granted an exclusive hold: every node below it is gone */
void zkl__dircache_floor(zkl_client *c, const char *dir, zkl_recipe r, const char *name);
/* The nearest node sorting below name that is neither known gone nor below the floor
 * (writers_only: only writers count): its name, or NULL when none. *found is 0 when name itself
 * is not in the cache (the caller must then list); *left counts such nodes, up to
 * ZKL_WALK_MAX + 1. */
/* (ZKL_WALK_MAX, ZKL_WALK_CHEAP: internal.h, where the scripted tests see them) */
size_t zkl__dircache_size(const zkl_dircache *d);
const char *zkl__dircache_below(const zkl_dircache *d, const char *name, int writers_only,
                                int *found, int *left);
/* the names of those nodes (up to max), nearest first; returns how many */
int zkl__dircache_candidates(const zkl_dircache *d, const char *name, int writers_only,
                             const char **out, int max);

/* the op stops relying on the dir's cache (and drops a probe round's names) */
void zkl__walk_drop(zkl_client *c, zkl_op *op);
/* a waiter keeps the sorted listing that made it wait (v: the reply, for its serial) */
void zkl__walk_keep(zkl_client *c, zkl_op *op, const char **sorted, int n,
                    const struct String_vector *v, int wrapped);
/* 1 if the deleted node the op watched was a mutex or latch node this client itself held */
int zkl__walk_own_predecessor(zkl_client *c, zkl_op *op);
/* What the walk says to do (queue.c does it): */
enum {
    ZKL_WALK_LIST = 1, /* list the dir now */
    ZKL_WALK_RELIST,   /* list once connected (S_RELIST) */
    ZKL_WALK_GRANT,    /* nothing that counts is left below the op's node */
    ZKL_WALK_WATCH,    /* watch *next (*head: nothing that counts is left below it) */
    ZKL_WALK_PROBE,    /* send exists() on each path of q->probe (q->probe_n of them) */
    ZKL_WALK_PENDING   /* more probe replies are due */
};
/* the watched node is gone: where to go from the kept listing */
int zkl__walk_plan(zkl_client *c, zkl_op *op, const char **next, int *head);
/* only the first `sent` probes went out (the link is gone) */
void zkl__walk_probes_unsent(zkl_client *c, zkl_op *op, int sent);
/* a probe's reply (rc of its exists()) */
int zkl__walk_probed(zkl_client *c, zkl_op *op, int rc, const char **next, int *head);

/* Issue a request; on a synchronous failure treat it like a lost connection (retried when the
 * session is connected again) unless the arguments were refused. */
#define ZKL_ISSUE(c, op, call)                                                                     \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ == ZOK)                                                                            \
            (op)->refs++;                                                                          \
        else                                                                                       \
            zkl__queue_issue_failed(c, op, rc_);                                                   \
    } while (0)
void zkl__queue_issue_failed(zkl_client *c, zkl_op *op, int rc);

#endif
