/* queue.h - the fair queue (queue.c): Curator's InterProcessMutex and InterProcessReadWriteLock
 * node protocol, shared with the kinds built on it (the lease semaphore takes its internal mutex
 * through it). Not installed. */
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
    int parent_rc; /* why a parent could not be created (not NODEEXISTS), if so */
    int warned_wrap;
    int release_status;
    char *watch_path;
    int watch_is_head;
    int granted;             /* held at some point (its node was then the head, if exclusive) */
    int ahead;               /* nodes sorted before ours at its first listing (-1: not listed) */
    int held_head;           /* cleanup of a node that headed its mutex queue (the semaphore's
                                internal mutex, given back after the lease stage) */
    const void *watch_token; /* context of the armed watch */
    int drop_on_reply;       /* gave up while the watch-setting request was in flight */
    /* read side of a downgrade: a non-sequential node with the writer's sequence, granted at once
     */
    char *fixed_name;
    int grant_on_create;
    /* node data of this acquisition (zkl_lock_args.data); NULL: the client's identity */
    char *data;
    size_t data_len;
    int64_t owner; /* ephemeralOwner of own node (create or adopt reply), 0 unknown */
    /* while waiting: what this client knows of the dir (listing.c), for the walk down to the
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
/* set the node data of an acquisition made but not started (a copy; NULL: the identity) */
int zkl__queue_set_data(zkl_client *c, zkl_op *op, const char *data, size_t len);
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
/* the parents' create reply (records the first refusal in parent_rc) */
void zkl__queue_parent_reply(int rc, const char *name, const struct Stat *st, const void *token);
char *zkl__join_path(zkl_client *c, const char *dir, const char *name);
char *zkl__new_prefix(zkl_client *c, const char *token);
void zkl__set_str(zkl_client *c, char **slot, char *value);

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
