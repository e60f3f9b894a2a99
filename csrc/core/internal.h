/* internal.h - structures shared by the core's translation units. Not installed. */
#ifndef ZKL_INTERNAL_H
#define ZKL_INTERNAL_H

#include <pthread.h>
#include <zookeeper/zookeeper.h>

#include "naming.h"
#include "zk.h"
#include "zklock.h"

typedef struct zkl_op zkl_op;
typedef struct zkl_kind zkl_kind;
typedef struct zkl_listing zkl_listing;
typedef struct zkl_dircache zkl_dircache;
typedef struct zkl_inflight zkl_inflight;

/* Phases every op goes through (a kind may leave some out). */
enum {
    P_ACQUIRING = 1, /* working towards its result (a plain op: request not answered yet) */
    P_HELD,          /* a lock or lease is held */
    P_RELEASING,     /* user asked for release: delete own node, then RELEASED */
    P_CLEANUP,       /* gave up (timeout, cancel, error, abandon): delete own node silently */
    P_LOST,          /* session ended while held: waits for the user's release */
    P_DONE           /* freed once no reply names it any more and nobody reads its result */
};

/* The common header of every operation. Each kind (queue.c, semaphore.c, multi.c, plain.c)
 * embeds it as the first member of its own struct and describes itself with a zkl_kind table;
 * the session layer (client.c, op.c) only ever calls an op through that table. */
struct zkl_op {
    uint64_t id;
    uint16_t gen; /* replies and watch events of older generations are stale */
    const zkl_kind *kind;
    zkl_op *hnext;       /* hash chain */
    zkl_op *prev, *next; /* the client's list of live ops */
    int refs;            /* completions still to come that name this op */
    int phase;
    int user_gone;      /* no more events for this op */
    int pinned;         /* result readable until its event is consumed */
    int64_t deadline;   /* monotonic ms while P_ACQUIRING; 0 none */
    uint64_t parent_id; /* a component reports ACQUIRED/FAILED to this op's child_event hook
                           (a multi-lock's, until all are held); zkl__emit routes it */
    int multi_index;
    int parent_rc; /* why a container parent could not be made (node.c), if so: the first refusal */
    int parked;    /* its next ACQUIRED / FAILED / RELEASED / OP_DONE goes to the ready list */
    /* the client's batch of parents (queue.c) its last parent creates belong to; 0: none */
    uint32_t parents_batch;
};

/* What an op kind does when the session layer calls it. NULL entries are not called. */
struct zkl_kind {
    const char *name;
    size_t size;                             /* bytes of the kind's struct */
    unsigned flags;                          /* ZKL_KIND_* */
    void (*kick)(zkl_client *c, zkl_op *op); /* move on as far as the link allows */
    void (*suspended)(zkl_client *c, zkl_op *op, int suspended); /* link lost (1) / back (0) */
    void (*session_lost)(zkl_client *c, zkl_op *op, int status); /* nodes gone; status: why */
    void (*expire)(zkl_client *c, zkl_op *op);                   /* its deadline passed */
    int (*cancel)(zkl_client *c, zkl_op *op);                    /* the user withdraws it */
    void (*abandon)(zkl_client *c, zkl_op *op); /* the user is gone: clean up silently */
    void (*close)(zkl_client *c, zkl_op *op);   /* the client closes: final event */
    void (*child_event)(zkl_client *c, zkl_op *op, zkl_op *child, int type, int status);
    void (*free_fields)(zkl_client *c, zkl_op *op);
    /* kinds built on the fair queue (ZKL_KIND_QUEUE) may extend it: */
    void (*queue_head)(zkl_client *c, zkl_op *op);          /* its queue node heads the queue */
    void (*give_up)(zkl_client *c, zkl_op *op, int failed); /* failed (1) or abandoned (0) */
};

enum { ZKL_KIND_QUEUE = 1 }; /* the op is a zkl_qop (queue.h): a node in a lock dir's queue */

typedef struct zkl_auth {
    struct zkl_auth *next;
    char *scheme;
    char *cred;
    size_t len;
} zkl_auth;

struct zkl_client {
    zkl_allocator alloc;
    const zkl_zk *zk; /* every call into ZooKeeper, and the clock (zk.h) */
    char *hosts;
    int session_timeout_ms;
    char *identity;
    size_t identity_len;
    void (*log_fn)(void *ud, const char *msg);
    void *log_ud;
    int log_level;

    zhandle_t *zh;
    int epfd;
    int zkfd; /* fd registered in epfd, -1 none */
    unsigned zkfd_events;
    /* What zkl_client_wait's blocking epoll_wait found (1: ready_events on ready_fd, 0: nothing),
     * taken by the next processing pass instead of asking epoll again; -1: nothing known. Only
     * without the keepalive thread, which could read the socket in between. */
    int ready_n;
    int ready_fd;
    uint32_t ready_events;
    int zkfd_state;      /* zoo_state() when zkfd was last registered */
    int64_t zk_deadline; /* ZooKeeper's own next deadline (ms, monotonic), 0 none */
    int64_t reinit_at;   /* retry creating a handle at this time (0 none) */

    int state;         /* ZKL_STATE_* as last reported */
    int zk_connected;  /* what the session watcher last saw */
    int expired_flag;  /* the session watcher saw EXPIRED/AUTH_FAILED */
    int auth_failed;   /* ... AUTH_FAILED: terminal (ZKL_STATE_AUTH_FAILED) */
    int64_t opened_at; /* when the current handle was opened */
    int young_deaths;  /* sessions in a row that died before a session timeout (paced) */
    int64_t session_id;
    char passwd[16];
    int sessions;
    zkl_listing *listings;  /* lock dirs to list at the next flush (listing.c) */
    const void *sorted_for; /* the reply being shared, while it is dispatched */
    const char **sorted;    /* its children sorted for sorted_recipe (NULL: not yet) */
    size_t sorted_n;
    int sorted_recipe;
    unsigned listing_serial; /* counts shared listing replies (listing.c) */
    zkl_dircache *dircaches; /* what waiters of this client know of their lock dirs (walk.c) */
    /* the last lease listing: a hash of its dir and whether it was over max; when it had room,
     * the next acquire of that semaphore lists without a watch (none to take back on a grant) */
    uint64_t lease_hint_dir;
    int lease_hint_full;
    int64_t suspended_at;
    /* What the server last heard (answered.c): the issue time of the newest request it answered
     * (0 none; a new session starts at connect_floor), when the last request was issued, and
     * the requests in flight (slots; free list of slot numbers, 0 none). */
    int64_t answered_at;
    int64_t issued_at;
    zkl_inflight *inflight;
    size_t inflight_cap, inflight_free, inflight_n;
    uint64_t heartbeats;   /* heartbeats sent (answered.c) */
    int64_t connect_floor; /* the call into the ZooKeeper client that sent the connect request
                            * started then (0 unknown): the new session began no earlier */
    /* Requests are numbered as they are issued (issue_seq: the last number given). While
     * SUSPENDED, an answer to request resume_seq or a later one ends it: one sent since the link
     * came back (or since the silence began). answered_seq: the newest answered. */
    uint64_t issue_seq, answered_seq, resume_seq;
    unsigned link_ups;      /* times the session watcher saw the link come up */
    unsigned link_ups_seen; /* ... when the state last became CONNECTED */
    int closed;
    /* random bytes for protected node names, drawn from the kernel a pool at a time (queue.c) */
    unsigned char rnd_pool[4096];
    unsigned rnd_left;

    zkl_op **buckets;
    size_t nbuckets, nops;
    /* armed watches by path (windex.c): plain reads, lock waiters (queue.c) and lease listings
     * (semaphore.c); each of the three registers its watches with the ZooKeeper client under one
     * watcher function and one context (the client), whatever the number of them */
    struct zkl_wbucket *wbuckets;
    size_t nwbuckets, nwatched;
    uint32_t wmark; /* the last mark zkl__windex_each gave */
    uint64_t wseq;  /* the last arm number zkl__windex_add gave */
    uint64_t next_id;
    zkl_op *ops;           /* list of live ops */
    int64_t next_deadline; /* earliest acquire deadline, 0 none */
    /* The last batch of container parents a lock op sent (queue.c): its lock dir, its number and
     * how many of its creates are unanswered. A lock op of this client meeting ZNONODE on that dir
     * meanwhile sends only its node's create: on the same session, it reaches the server after
     * them (ZNONODE again only if the server reaped them in between: a round of its own then). */
    char *parents_dir;
    uint32_t parents_batch;
    int parents_pending;

    zkl_event *ev;
    size_t ev_cap, ev_head, ev_len;
    /* the ready list: final (or granting) events of parked ops, taken in bulk by the host's pump
     * (zkl_client_next_ready); room for every parked op is reserved when it is parked */
    zkl_event *rd;
    size_t rd_cap, rd_head, rd_len;
    size_t nparked;
    zkl_op *last_done; /* plain op whose result is readable now */

    zkl_auth *auths;
    struct ACL_vector *acls; /* registered ACL lists; id n is acls[n - 1] */
    int nacls;
    zkl_stats stats;
    int in_callback; /* > 0 while a ZooKeeper call (and so our callbacks) is on the stack */
    /* keepalive: a thread that drives ZooKeeper I/O while the owner thread stays away */
    int ka;
    pthread_t ka_thread;
    pthread_mutex_t mu; /* recursive; taken by every public entry point when ka is on */
    int ka_stop;
    int64_t last_owner_ms;
};

/* mem.c: the client's allocator (a leaf) */
extern const zkl_allocator zkl__default_alloc;
void *zkl__alloc(zkl_client *c, size_t n);
void zkl__free(zkl_client *c, void *p, size_t n);
char *zkl__strdup(zkl_client *c, const char *s);
void zkl__strfree(zkl_client *c, char *s);

/* events.c: the event queue (calls mem.c only) */
int zkl__ev_reserve(zkl_client *c, size_t extra);
int zkl__ev_push(zkl_client *c, uint64_t id, int type, int status);
int zkl__ev_pop(zkl_client *c, zkl_event *out); /* 1: *out is the oldest event; 0: none */
void zkl__ev_free(zkl_client *c);
int zkl__rd_reserve(zkl_client *c, size_t extra);
void zkl__rd_push(zkl_client *c, uint64_t id, int type, int status); /* room was reserved */
int zkl__rd_pop(zkl_client *c, zkl_event *out);
void zkl__rd_free(zkl_client *c);

/* client.c: the session (called by the kinds; it calls them only through kind tables) */
int zkl__connected(const zkl_client *c);
int zkl__startable(const zkl_client *c); /* 0, or why no op can start (ECLOSED, ZAUTHFAILED) */
void zkl__refresh_interest(zkl_client *c);
struct ACL_vector *zkl__acl(zkl_client *c, int id);

/* answered.c: every request goes out through these (the seam's request calls, on c->zh), so the
 * session layer knows the issue time of the newest request the server answered (answered_at) */
int zkl__server_answered(int rc);
int zkl__acreate2(zkl_client *c, const char *path, const char *value, int len,
                  const struct ACL_vector *acl, int mode, string_stat_completion_t done,
                  const void *data);
int zkl__acreate2_ttl(zkl_client *c, const char *path, const char *value, int len,
                      const struct ACL_vector *acl, int mode, int64_t ttl_ms,
                      string_stat_completion_t done, const void *data);
int zkl__adelete(zkl_client *c, const char *path, int version, void_completion_t done,
                 const void *data);
int zkl__aexists(zkl_client *c, const char *path, int watch, stat_completion_t done,
                 const void *data);
int zkl__awexists(zkl_client *c, const char *path, watcher_fn watcher, void *wctx,
                  stat_completion_t done, const void *data);
int zkl__aget(zkl_client *c, const char *path, int watch, data_completion_t done, const void *data);
int zkl__awget(zkl_client *c, const char *path, watcher_fn watcher, void *wctx,
               data_completion_t done, const void *data);
int zkl__aget_children(zkl_client *c, const char *path, int watch, strings_completion_t done,
                       const void *data);
int zkl__awget_children(zkl_client *c, const char *path, watcher_fn watcher, void *wctx,
                        strings_completion_t done, const void *data);
int zkl__aset(zkl_client *c, const char *path, const char *buf, int len, int version,
              stat_completion_t done, const void *data);
int zkl__amulti(zkl_client *c, int count, const zoo_op_t *ops, zoo_op_result_t *results,
                void_completion_t done, const void *data);
int zkl__aremove_all_watches(zkl_client *c, const char *path, ZooWatcherType type, int local,
                             void_completion_t done, const void *data);
int zkl__forget_watcher(zkl_client *c, const char *path, ZooWatcherType type, watcher_fn watcher,
                        void *wctx);
void zkl__inflight_reset(zkl_client *c);
void zkl__inflight_free(zkl_client *c);
void zkl__heartbeat(zkl_client *c);

/* op.c: the table of live ops, the client being driven and its clock, events of ops */
int64_t zkl__now(const zkl_client *c);
zkl_client *zkl__current(void);
zkl_client *zkl__set_current(zkl_client *c); /* returns the one it replaces */
int zkl__emit(zkl_client *c, zkl_op *op, int type, int status);
void zkl__release_last_done(zkl_client *c);
zkl_op *zkl__op_new(zkl_client *c, const zkl_kind *kind);
zkl_op *zkl__op_find(zkl_client *c, uint64_t id);
zkl_op *zkl__reply_op(const void *token, zkl_client **cp);
void zkl__op_maybe_free(zkl_client *c, zkl_op *op);
int zkl__op_table_init(zkl_client *c);
void zkl__note_deadline(zkl_client *c, int64_t deadline);
void zkl__ops_each(zkl_client *c, void (*fn)(zkl_client *, zkl_op *, int), int arg);

/* listing.c: shared listings of lock dirs */
int zkl__listing_join(zkl_client *c, const char *dir, const void *token, strings_completion_t done);
void zkl__listings_flush(zkl_client *c);
void zkl__listings_drop(zkl_client *c);

/* The walk (walk.c) checks at most this many nodes below a waiter's own before it lists instead */
#define ZKL_WALK_MAX 256
/* up to this many are always probed; more only when a listing would be 8 times their number */
#define ZKL_WALK_CHEAP 8

/* How many times a create makes its container parents (again) when it meets ZNONODE: the server
 * reaps an emptied container at any moment, also between a parent's create and the child's. */
#define ZKL_PARENT_ROUNDS 10

/* node.c: paths, protected prefixes, container parents (for every kind that creates nodes) */
char *zkl__join_path(zkl_client *c, const char *dir, const char *name);
char *zkl__new_prefix(zkl_client *c, const char *token);
void zkl__set_str(zkl_client *c, char **slot, char *value);
enum { ZKL_PARENTS_ANCESTORS = 1, ZKL_PARENTS_SELF = 2 };
int zkl__make_parents(zkl_client *c, zkl_op *op, const char *path, int which, int acl);
void zkl__parents_reply(int rc, const char *name, const struct Stat *st, const void *token);

/* replies after which a request's outcome is unknown, and replies that mean the handle is going
 * away (the session layer decides what happens then) */
int zkl__conn_lost(int rc);
int zkl__handle_gone(int rc);

/* Completion and watcher contexts encode (op id, generation) in the pointer value itself, so no
 * allocation is needed and a late reply for a freed op is simply not found. */
#define ZKL_TOKEN(op) ((const void *)(uintptr_t)(((op)->id << 16) | (op)->gen))
/* 48 bits of op id: a 32-bit pointer would wrap ids after 65,536 ops and a late reply could
 * reach the wrong op */
_Static_assert(sizeof(uintptr_t) >= 8, "zklock needs 64-bit pointers (completion tokens)");
#define ZKL_TOKEN_ID(t) ((uint64_t)(uintptr_t)(t) >> 16)
#define ZKL_TOKEN_GEN(t) ((uint16_t)((uintptr_t)(t)&0xffff))

/* Unlocked implementations of the public entry points; api.c wraps them with the client's
 * mutex when keepalive is on. */
int zkl__client_next_event(zkl_client *c, zkl_event *ev);
int zkl__client_next_event_for(zkl_client *c, uint64_t id, zkl_event *ev);
int zkl__client_park(zkl_client *c, uint64_t id);
int zkl__client_next_ready(zkl_client *c, zkl_event *ev);
int zkl__client_process(zkl_client *c);
int zkl__process(zkl_client *c, int owner);
int zkl__client_timeout_ms(zkl_client *c);
int zkl__client_flush(zkl_client *c);
int zkl__client_close(zkl_client *c);
void zkl__client_stats(const zkl_client *c, zkl_stats *out);
int zkl__client_state(const zkl_client *c);
int zkl__client_session_count(const zkl_client *c);
int zkl__client_session_timeout(const zkl_client *c);
int zkl__client_loss_ms(zkl_client *c);
int64_t zkl__client_session(const zkl_client *c, char passwd[16]);
int zkl__client_add_auth(zkl_client *c, const char *scheme, const char *cred, size_t len);
void zkl__client_destroy(zkl_client *c);
int zkl__lock_acquire_ex(zkl_client *c, const zkl_lock_args *a, uint64_t *id);
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
void zkl__windex_free(zkl_client *c); /* windex.c: the index of armed watches, at free */

/* The client's index of armed watches by path (windex.c). Every watch of a table (plain reads,
 * lock waiters' predecessors, lease listings) goes to the ZooKeeper client under the table's one
 * watcher function and the client as its context: on every session event the 3.8 C client
 * walks its distinct (watcher, context) pairs with a linear search per pair, so a context per
 * watch costs time quadratic in their number. The watcher finds the ops by path here. */
enum { ZKL_WT_PLAIN = 1, ZKL_WT_QUEUE, ZKL_WT_LEASE };
typedef struct zkl_wentry {
    struct zkl_wentry *next, *prev;
    zkl_op *op;
    const char *path; /* owned by the op; kept while indexed */
    uint32_t hash;
    int table; /* ZKL_WT_* */
    int indexed;
    uint32_t mark; /* zkl__windex_each: still to be called */
    uint64_t seq;  /* arm number: unchanged while the entry keeps its place in its chain */
} zkl_wentry;
/* a chain of the index: its tail kept, so an entry joins it at once however long it is */
typedef struct zkl_wbucket {
    zkl_wentry *head, *tail;
} zkl_wbucket;
uint32_t zkl__path_hash(const char *path);
/* a table with room for one more: ZKL_ENOMEM only when there is no table at all */
int zkl__windex_room(zkl_client *c);
/* at the end of its path's chain (events reach a path's ops in the order they were armed);
 * ZKL_ENOMEM when there is no table (zkl__windex_room first) */
int zkl__windex_add(zkl_client *c, zkl_wentry *e, zkl_op *op, const char *path, int table);
void zkl__windex_remove(zkl_client *c, zkl_wentry *e);
/* the first entry of this table and path, and the next one after e (in the order armed) */
zkl_wentry *zkl__windex_first(zkl_client *c, int table, const char *path);
zkl_wentry *zkl__windex_next(const zkl_wentry *e);
/* Calls fn(c, op, arg) once for each op indexed in this table at this path when the call
 * begins, in the order armed, if it is still indexed there by then: fn may arm, move or end any
 * op's watch (the ZooKeeper client calls a watcher once per path for all our ops there). */
void zkl__windex_each(zkl_client *c, int table, const char *path,
                      void (*fn)(zkl_client *c, zkl_op *op, void *arg), void *arg);
int zkl__op_result_get(zkl_client *c, uint64_t id, zkl_op_result *out);
int zkl__txn_start(zkl_client *c, const zkl_txn_op *ops, int n, int timeout_ms, uint64_t *id);
int zkl__txn_result_get(zkl_client *c, uint64_t id, zkl_txn_result *out, int n);

#endif
