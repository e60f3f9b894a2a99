/* internal.h - structures shared by the core's translation units. Not installed. */
#ifndef ZKL_INTERNAL_H
#define ZKL_INTERNAL_H

#include <pthread.h>
#include <zookeeper/zookeeper.h>

#include "naming.h"
#include "zk.h"
#include "zklock.h"

typedef struct zkl_op zkl_op;
typedef struct zkl_listing zkl_listing;

enum { OPK_LOCK = 1, OPK_PLAIN = 2, OPK_MULTI = 3 };

/* Lock phases. */
enum {
    P_ACQUIRING = 1, /* queue node being created / waited on */
    P_HELD,
    P_RELEASING,     /* user asked for release: delete own node, then RELEASED */
    P_CLEANUP,       /* gave up (timeout, cancel, error, abandon): delete own node silently */
    P_LOST,          /* session ended while held: waits for the user's release */
    P_DONE
};

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
    /* lease semaphore, after its internal mutex is held (stage 2) */
    S_LEASE_START,    /* create the missing leases + list leases with a watch, once connected */
    S_LEASE_CREATE,   /* those in flight */
    S_LEASE_RELIST,   /* list again once connected */
    S_LEASE_LIST,     /* list in flight (with a watch if lease_watched) */
    S_LEASE_WAIT,     /* too many leases: children watch armed, internal mutex still held */
    S_LEASE_SCAN,     /* a lease create's outcome is unknown: find and delete ours, then retry */
    S_LEASE_SCANNING
};

struct zkl_op {
    uint64_t id;
    uint16_t gen; /* replies and watch events of older generations are stale */
    int kind;
    zkl_op *hnext;             /* hash chain */
    zkl_op *prev, *next;       /* the client's list of live ops */
    int refs;                  /* completions still to come that name this op */
    int phase, step;
    int user_gone;             /* no more events for this op */
    int pinned;                /* plain op: result readable until its event is consumed */
    int create_inflight, delete_inflight, scan_inflight;
    int unknown;               /* a create's outcome is unknown: scan by prefix */
    int parents_tried;
    int parent_rc;             /* why a parent could not be created (not NODEEXISTS), if so */
    int try_once;
    int warned_wrap;
    int release_status;
    int64_t deadline;          /* monotonic ms; 0 none */
    zkl_recipe recipe;
    char *dir;                 /* lock path */
    char *prefix;              /* "_c_<uuid>-<token>" */
    char *node;                /* full path of own node, once known */
    char *watch_path;
    int watch_is_head;
    int granted;           /* held at some point (its node was then the head, if exclusive) */
    int held_head;             /* cleanup of a node that headed its mutex queue (the semaphore's
                                  internal mutex, given back after the lease stage) */
    const void *watch_token;   /* context of the armed watch (data watch on watch_path, or the
                                  leases children watch) */
    int drop_on_reply;         /* gave up while the watch-setting request was in flight */
    int64_t czxid;
    int acl;                   /* id of the ACL for the nodes this op creates (0: open) */
    /* read side of a downgrade: a non-sequential node with the writer's sequence, granted at once */
    char *fixed_name;
    int grant_on_create;
    /* lease semaphore: stage 1 = internal mutex under <path>/locks, 2 = leases under <path>/leases */
    int stage;
    int max_leases, qty;
    char *lease_dir, *lease_prefix;
    char **leases;             /* lease nodes created so far (capacity qty) */
    int64_t *lease_czxid;
    int nleases;
    int lease_inflight;        /* lease creates in flight */
    int lease_unknown, lease_nonode;
    int lease_parents_tried;
    int lease_watched;         /* the lease listing in flight arms a children watch */
    uint64_t *split_ids;       /* after the grant: the ids of the qty leases, this op's first */
    /* multi-lock: a component reports to its parent instead of to the user until all are held */
    uint64_t parent_id;
    int multi_index;
    int nitems, next_item, failed_index, multi_flags;
    struct zkl__multi_item *items;
    uint64_t *child_ids;
    /* plain ops */
    zkl_op_args args;
    char *args_path, *args_data;
    int rc;
    char *res_data;
    size_t res_len;
    char **res_children;
    int res_nchildren;
    struct Stat res_stat;
};

typedef struct zkl__multi_item {
    zkl_recipe recipe;
    char *path;
    int max_leases; /* > 0: a semaphore lease */
    int timeout_ms;
    int acl;
} zkl__multi_item;

typedef struct zkl_auth {
    struct zkl_auth *next;
    char *scheme;
    char *cred;
    size_t len;
} zkl_auth;

struct zkl_client {
    zkl_allocator alloc;
    const zkl_zk *zk;      /* every call into ZooKeeper, and the clock (zk.h) */
    char *hosts;
    int session_timeout_ms;
    char *identity;
    size_t identity_len;
    void (*log_fn)(void *ud, const char *msg);
    void *log_ud;
    int log_level;

    zhandle_t *zh;
    int epfd;
    int zkfd;              /* fd registered in epfd, -1 none */
    unsigned zkfd_events;
    int zkfd_state;        /* zoo_state() when zkfd was last registered */
    int64_t zk_deadline;   /* ZooKeeper's own next deadline (ms, monotonic), 0 none */
    int64_t reinit_at;     /* retry creating a handle at this time (0 none) */

    int state;             /* ZKL_STATE_* as last reported */
    int zk_connected;      /* what the session watcher last saw */
    int expired_flag;      /* the session watcher saw EXPIRED/AUTH_FAILED */
    int64_t session_id;
    char passwd[16];
    int sessions;
    zkl_listing *listings;  /* lock dirs to list at the next flush (lock.c, shared listings) */
    const void *sorted_for; /* the reply being shared, while it is dispatched */
    const char **sorted;    /* its children sorted for sorted_recipe (NULL: not yet) */
    size_t sorted_n;
    int sorted_recipe;
    /* the last lease listing: a hash of its dir and whether it was over max; when it had room,
     * the next acquire of that semaphore lists without a watch (none to take back on a grant) */
    uint64_t lease_hint_dir;
    int lease_hint_full;
    int64_t suspended_at;
    int64_t last_heard_ms; /* last time data arrived on a live link (bounds the server's expiry) */
    int64_t last_process_ms; /* when process() last ran (pings only go out from there) */
    int closed;

    zkl_op **buckets;
    size_t nbuckets, nops;
    uint64_t next_id;
    zkl_op *ops;           /* list of live ops */
    int64_t next_deadline; /* earliest acquire deadline, 0 none */

    zkl_event *ev;
    size_t ev_cap, ev_head, ev_len;
    zkl_op *last_done;     /* plain op whose result is readable now */

    zkl_auth *auths;
    struct ACL_vector *acls; /* registered ACL lists; id n is acls[n - 1] */
    int nacls;
    zkl_stats stats;
    int in_callback;       /* > 0 while a ZooKeeper call (and so our callbacks) is on the stack */
    /* keepalive: a thread that drives ZooKeeper I/O while the owner thread stays away */
    int ka;
    pthread_t ka_thread;
    pthread_mutex_t mu;    /* recursive; taken by every public entry point when ka is on */
    int ka_stop;
    int64_t last_owner_ms;
};

/* client.c */
void *zkl__alloc(zkl_client *c, size_t n);
void zkl__free(zkl_client *c, void *p, size_t n);
char *zkl__strdup(zkl_client *c, const char *s);
void zkl__strfree(zkl_client *c, char *s);
int64_t zkl__now(const zkl_client *c);
int zkl__emit(zkl_client *c, zkl_op *op, int type, int status);
zkl_op *zkl__op_new(zkl_client *c, int kind);
zkl_op *zkl__op_find(zkl_client *c, uint64_t id);
void zkl__op_maybe_free(zkl_client *c, zkl_op *op);
int zkl__connected(const zkl_client *c);
void zkl__note_deadline(zkl_client *c, int64_t deadline);
void zkl__refresh_interest(zkl_client *c);
zkl_client *zkl__current(void);

/* Completion and watcher contexts encode (op id, generation) in the pointer value itself, so no
 * allocation is needed and a late reply for a freed op is simply not found. */
#define ZKL_TOKEN(op) ((const void *)(uintptr_t)(((op)->id << 16) | (op)->gen))
#define ZKL_TOKEN_ID(t) ((uint64_t)(uintptr_t)(t) >> 16)
#define ZKL_TOKEN_GEN(t) ((uint16_t)((uintptr_t)(t)&0xffff))

/* Unlocked implementations of the public entry points; api.c wraps them with the client's
 * mutex when keepalive is on. */
int zkl__client_next_event(zkl_client *c, zkl_event *ev);
int zkl__client_process(zkl_client *c);
int zkl__process(zkl_client *c, int owner);
int zkl__client_timeout_ms(zkl_client *c);
int zkl__client_close(zkl_client *c);
void zkl__client_stats(const zkl_client *c, zkl_stats *out);
int zkl__client_state(const zkl_client *c);
int zkl__client_session_count(const zkl_client *c);
int zkl__client_session_timeout(const zkl_client *c);
int64_t zkl__client_session(const zkl_client *c, char passwd[16]);
int zkl__client_add_auth(zkl_client *c, const char *scheme, const char *cred, size_t len);
void zkl__client_destroy(zkl_client *c);
int zkl__lock_acquire(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms, int acl,
                      uint64_t *id);
int zkl__client_acl(zkl_client *c, const zkl_acl_entry *entries, int n);
struct ACL_vector *zkl__acl(zkl_client *c, int id);
int zkl__lock_downgrade(zkl_client *c, uint64_t write_id, uint64_t *id);
int zkl__semaphore_acquire(zkl_client *c, const char *path, int max_leases, int qty, int timeout_ms,
                           int acl, uint64_t *id);
int zkl__lease_ids(zkl_client *c, uint64_t id, uint64_t *ids, int n);
int zkl__lock_release(zkl_client *c, uint64_t id);
int zkl__lock_cancel(zkl_client *c, uint64_t id);
int zkl__lock_abandon(zkl_client *c, uint64_t id);
int zkl__lock_info_get(zkl_client *c, uint64_t id, zkl_lock_info *out);
int zkl__multi_acquire(zkl_client *c, const zkl_multi_item *items, int n, int timeout_ms, int flags,
                       uint64_t *id);
int zkl__multi_result(zkl_client *c, uint64_t id, uint64_t *ids, int n, int *failed_index);
int zkl__op_start(zkl_client *c, const zkl_op_args *args, uint64_t *id);
int zkl__op_result_get(zkl_client *c, uint64_t id, zkl_op_result *out);

/* lock.c */
void zkl__lock_kick(zkl_client *c, zkl_op *op);
void zkl__listings_flush(zkl_client *c);
void zkl__listings_drop(zkl_client *c);
void zkl__lock_fail(zkl_client *c, zkl_op *op, int status);
void zkl__lock_session_lost(zkl_client *c, zkl_op *op);
void zkl__lock_suspended(zkl_client *c, zkl_op *op, int suspended);
void zkl__lock_free_fields(zkl_client *c, zkl_op *op);
void zkl__plain_kick(zkl_client *c, zkl_op *op);
void zkl__multi_child(zkl_client *c, zkl_op *child, int type, int status);
void zkl__multi_free_fields(zkl_client *c, zkl_op *op);
void zkl__plain_free_fields(zkl_client *c, zkl_op *op);

#endif
