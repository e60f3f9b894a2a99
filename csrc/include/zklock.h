/*
 * zklock.h - distributed lock recipes over ZooKeeper, compatible with Apache Curator.
 *
 * The core is a set of non-blocking state machines driven by the host:
 *
 *     zkl_client_new()        create a client (connects in the background)
 *     zkl_client_fd()         one fd that never changes for the life of the client;
 *                             poll it for readability
 *     zkl_client_timeout_ms() the longest the host may sleep before calling process
 *     zkl_client_process()    never blocks: drives ZooKeeper I/O, fires deadlines,
 *                             advances recipes, queues events
 *     zkl_client_next_event() drain finished operations and state changes
 *
 * Async contract:
 *   - Every operation that zkl_*_start() accepted (returned ZKL_OK) produces exactly one final
 *     event: ZKL_EV_ACQUIRED or ZKL_EV_FAILED for an acquire, ZKL_EV_RELEASED for a release,
 *     ZKL_EV_OP_DONE for a plain znode operation. An operation whose start returns an error
 *     produces no event.
 *   - Events are only queued inside zkl_client_process() (and zkl_client_close()), never while a
 *     ZooKeeper callback is on the stack, and are read with zkl_client_next_event().
 *   - An acquisition that timed out, was cancelled or failed keeps cleaning up in the background
 *     (its queue node is deleted, retried while the session lives); the caller need not wait.
 *
 * No function here blocks, except zkl_client_wait() (by design) and zkl_client_free(), which
 * closes the ZooKeeper session and may wait for the server to answer that.
 *
 * The library is single-threaded: one client must only be used from one thread at a time.
 */
#ifndef ZKLOCK_H
#define ZKLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ZKL_EXTERN __attribute__((visibility("default")))
#else
#define ZKL_EXTERN
#endif

#define ZKL_VERSION "0.1.0"

/* Error codes. zklock's own codes are below -1000; ZooKeeper's codes (zookeeper.h ZOO_ERRORS)
 * pass through unchanged, so a ZooKeeper error keeps its familiar number and name. */
#define ZKL_ERRNO_MAP(XX)                                                                  \
    XX(OK, 0, "success")                                                                   \
    XX(ETIMEDOUT, -1001, "timed out")                                                      \
    XX(ECANCELED, -1002, "canceled")                                                       \
    XX(ESESSION, -1003, "the ZooKeeper session expired")                                   \
    XX(ECLOSED, -1004, "the client is closed")                                             \
    XX(ELOST, -1005, "the lock was lost with the session")                                 \
    XX(EINVAL, -1006, "invalid argument")                                                  \
    XX(ENOMEM, -1007, "out of memory")                                                     \
    XX(ENOTHELD, -1008, "not held")                                                        \
    XX(ENOTFOUND, -1009, "no such operation")                                              \
    XX(ESEQWRAP, -1010, "sequence counter wrapped: names no longer sort in queue order")   \
    XX(ESYSTEM, -1011, "system call failed")                                               \
    XX(EOWNNODE, -1012, "the lock's own queue node disappeared")                           \
    XX(EDEADLK, -1013, "would deadlock")                                                   \
    XX(ZSYSTEMERROR, -1, "ZooKeeper system error")                                         \
    XX(ZRUNTIMEINCONSISTENCY, -2, "ZooKeeper runtime inconsistency")                       \
    XX(ZDATAINCONSISTENCY, -3, "ZooKeeper data inconsistency")                             \
    XX(ZCONNECTIONLOSS, -4, "connection to the server lost")                               \
    XX(ZMARSHALLINGERROR, -5, "error while marshalling or unmarshalling data")             \
    XX(ZUNIMPLEMENTED, -6, "operation not implemented by the server")                      \
    XX(ZOPERATIONTIMEOUT, -7, "operation timed out (outcome unknown)")                     \
    XX(ZBADARGUMENTS, -8, "invalid arguments")                                             \
    XX(ZINVALIDSTATE, -9, "invalid ZooKeeper handle state")                                \
    XX(ZNEWCONFIGNOQUORUM, -13, "no quorum for new config")                                \
    XX(ZRECONFIGINPROGRESS, -14, "reconfiguration in progress")                            \
    XX(ZSSLCONNECTIONERROR, -15, "SSL connection error")                                   \
    XX(ZAPIERROR, -100, "ZooKeeper API error")                                             \
    XX(ZNONODE, -101, "node does not exist")                                               \
    XX(ZNOAUTH, -102, "not authorized")                                                    \
    XX(ZBADVERSION, -103, "version conflict")                                              \
    XX(ZNOCHILDRENFOREPHEMERALS, -108, "ephemeral nodes may not have children")            \
    XX(ZNODEEXISTS, -110, "node already exists")                                           \
    XX(ZNOTEMPTY, -111, "node has children")                                               \
    XX(ZSESSIONEXPIRED, -112, "session expired")                                           \
    XX(ZINVALIDCALLBACK, -113, "invalid callback")                                         \
    XX(ZINVALIDACL, -114, "invalid ACL")                                                   \
    XX(ZAUTHFAILED, -115, "authentication failed")                                         \
    XX(ZCLOSING, -116, "ZooKeeper handle is closing")                                      \
    XX(ZNOTHING, -117, "no server responses to process")                                   \
    XX(ZSESSIONMOVED, -118, "session moved to another server")                             \
    XX(ZNOTREADONLY, -119, "state-changing request to a read-only server")                 \
    XX(ZEPHEMERALONLOCALSESSION, -120, "ephemeral node on a local session")                \
    XX(ZNOWATCHER, -121, "watcher not found")                                              \
    XX(ZRECONFIGDISABLED, -123, "reconfiguration disabled")                                \
    XX(ZSESSIONCLOSEDREQUIRESASLAUTH, -124, "session closed: SASL authentication required") \
    XX(ZTHROTTLEDOP, -127, "operation throttled by the server")

enum {
#define ZKL__ERR_ENUM(name, code, msg) ZKL_##name = (code),
    ZKL_ERRNO_MAP(ZKL__ERR_ENUM)
#undef ZKL__ERR_ENUM
};

/* Human-readable message for an error code; never NULL ("unknown error" for unknown codes). */
ZKL_EXTERN const char *zkl_strerror(int err);
/* Symbolic name ("ETIMEDOUT", "ZCONNECTIONLOSS"); "EUNKNOWN" for unknown codes. */
ZKL_EXTERN const char *zkl_err_name(int err);

/* Client connection states (zkl_client_state, ZKL_EV_SESSION). */
enum {
    ZKL_STATE_CONNECTING = 1,  /* no session yet (first connect, or after an expiry) */
    ZKL_STATE_CONNECTED = 2,   /* session established and connected */
    ZKL_STATE_SUSPENDED = 3,   /* session exists but the connection is lost: ownership uncertain */
    ZKL_STATE_EXPIRED = 4,     /* reported once when a session is lost; a new one is being made */
    ZKL_STATE_CLOSED = 5
};

/* Per-lock states reported with ZKL_EV_LOCK_STATE while a lock is held. */
enum { ZKL_LOCK_SUSPENDED = 1, ZKL_LOCK_RECONNECTED = 2, ZKL_LOCK_LOST = 3 };

/* Event types. */
enum {
    ZKL_EV_ACQUIRED = 1,   /* id = acquisition; status ZKL_OK */
    ZKL_EV_FAILED = 2,     /* id = acquisition; status = why (ETIMEDOUT, ECANCELED, ESESSION, ...) */
    ZKL_EV_RELEASED = 3,   /* id = acquisition; status ZKL_OK, or ZKL_ELOST if the session ended first */
    ZKL_EV_LOCK_STATE = 4, /* id = held acquisition; status = ZKL_LOCK_* */
    ZKL_EV_SESSION = 5,    /* id = 0; status = ZKL_STATE_* */
    ZKL_EV_OP_DONE = 6,    /* id = znode operation; status = ZooKeeper result */
    ZKL_EV_WARNING = 7     /* id = acquisition or 0; status = error code (e.g. ESEQWRAP) */
};

typedef struct zkl_event {
    uint64_t id;
    int type;
    int status;
} zkl_event;

/* Recipes. */
typedef enum {
    ZKL_MUTEX = 1, /* Curator InterProcessMutex: _c_<uuid>-lock-<seq> */
    ZKL_READ = 2,  /* Curator InterProcessReadWriteLock, read side: _c_<uuid>-__READ__<seq> */
    ZKL_WRITE = 3  /* write side: _c_<uuid>-__WRIT__<seq> */
} zkl_recipe;

typedef struct zkl_allocator {
    void *(*realloc)(void *ud, void *ptr, size_t osize, size_t nsize); /* nsize 0 frees */
    void *ud;
} zkl_allocator;

/* Log levels for the ZooKeeper client's own messages. */
enum { ZKL_LOG_NONE = 0, ZKL_LOG_ERROR = 1, ZKL_LOG_WARN = 2, ZKL_LOG_INFO = 3, ZKL_LOG_DEBUG = 4 };

typedef struct zkl_config {
    const char *hosts;           /* "127.0.0.1:2181,127.0.0.1:2182[/chroot]"; required */
    int session_timeout_ms;      /* requested session timeout; 0 = 10000 */
    const char *identity;        /* data stored in lock nodes; NULL = host name */
    size_t identity_len;
    int log_level;               /* ZKL_LOG_*; the ZooKeeper client's level is process-wide */
    void (*log_fn)(void *ud, const char *msg); /* NULL: messages are dropped */
    void *log_ud;
    const zkl_allocator *alloc;  /* NULL: malloc */
    int keepalive;               /* 1: a background thread keeps the session alive while the
                                  * owner thread stays away (blocking scripts); every public call
                                  * then takes the client's mutex. Never for nginx. */
} zkl_config;

typedef struct zkl_client zkl_client;

/* Create a client and start connecting. Returns ZKL_OK and sets *out, or ZKL_EINVAL (bad hosts or
 * timeout), ZKL_ENOMEM, ZKL_ESYSTEM (epoll or the ZooKeeper handle could not be created). */
ZKL_EXTERN int zkl_client_new(const zkl_config *cfg, zkl_client **out);

/* Stop everything: pending acquisitions fail with ZKL_ECLOSED, held locks are released by closing
 * the session (their nodes vanish at once), events for all of this are queued. May block while
 * the ZooKeeper client says goodbye to the server. Idempotent. Returns ZKL_OK. */
ZKL_EXTERN int zkl_client_close(zkl_client *c);

/* Close (if needed) and free. */
ZKL_EXTERN void zkl_client_free(zkl_client *c);

/* The pollable fd (an epoll fd owned by the client, stable for its whole life). Poll for POLLIN. */
ZKL_EXTERN int zkl_client_fd(zkl_client *c);

/* Milliseconds until process() must run again (ZooKeeper pings, deadlines); -1 = no deadline. */
ZKL_EXTERN int zkl_client_timeout_ms(zkl_client *c);

/* Drive everything without blocking. Returns the number of events queued, or a negative error
 * (ZKL_ECLOSED after close). */
ZKL_EXTERN int zkl_client_process(zkl_client *c);

/* Block up to max_ms (-1: up to timeout_ms()) for activity, then process(). Returns like process. */
ZKL_EXTERN int zkl_client_wait(zkl_client *c, int max_ms);

/* Pop the oldest event into *ev. Returns 1 if an event was returned, 0 if none. */
ZKL_EXTERN int zkl_client_next_event(zkl_client *c, zkl_event *ev);

ZKL_EXTERN int zkl_client_state(const zkl_client *c);

/* Current session id (0 when none) and its 16-byte password (for tests that expire sessions). */
ZKL_EXTERN int64_t zkl_client_session(const zkl_client *c, char passwd[16]);

/* Negotiated session timeout in ms (the requested one before the first connect). */
ZKL_EXTERN int zkl_client_session_timeout(const zkl_client *c);

/* Number of sessions this client has had (1 after the first connect, +1 after each expiry). */
ZKL_EXTERN int zkl_client_session_count(const zkl_client *c);

/* Counters since the client was created (requests this client sent, by kind, and what came
 * back); they make the cost of each recipe observable (benchmarks, herd tests). */
typedef struct zkl_stats {
    uint64_t creates, lists, gets, deletes, exists; /* lock-recipe requests sent */
    uint64_t ops;                                   /* plain znode operations sent */
    uint64_t watch_events;                          /* node watches that fired (not session) */
    uint64_t acquired, handoffs;                    /* grants; grants straight from a watch */
    uint64_t sessions_expired;
} zkl_stats;

ZKL_EXTERN void zkl_client_stats(const zkl_client *c, zkl_stats *out);

/* Add authentication ("digest", "user:pass") to the session, now and after every expiry.
 * Returns ZKL_OK, ZKL_EINVAL, ZKL_ENOMEM or a ZooKeeper error. */
ZKL_EXTERN int zkl_client_add_auth(zkl_client *c, const char *scheme, const char *cred, size_t len);

/* ACLs for the nodes a lock creates (its queue nodes and the parents it makes). Register a list
 * once per client and pass its id to acquisitions; id 0 is the open ACL (world:anyone, all).
 * Example: {ZKL_PERM_ALL, "auth", ""} (the creating session's authenticated identities, e.g. after
 * digest auth) plus {ZKL_PERM_READ, "world", "anyone"} lets everyone watch but only holders of the
 * credentials create, change or delete. Returns the id (> 0), ZKL_EINVAL or ZKL_ENOMEM. */
enum { ZKL_PERM_READ = 1, ZKL_PERM_WRITE = 2, ZKL_PERM_CREATE = 4, ZKL_PERM_DELETE = 8,
       ZKL_PERM_ADMIN = 16, ZKL_PERM_ALL = 31 };

typedef struct zkl_acl_entry {
    int perms;
    const char *scheme; /* "world", "auth", "digest", "ip", ... */
    const char *id;
} zkl_acl_entry;

ZKL_EXTERN int zkl_client_acl(zkl_client *c, const zkl_acl_entry *entries, int n);

/* Check a lock path. Returns NULL if valid, else a static message saying what is wrong. */
ZKL_EXTERN const char *zkl_path_error(const char *path, size_t len);

/* Start acquiring a lock on `path` with the given recipe.
 * timeout_ms: -1 wait forever; 0 try once (fail with ETIMEDOUT if not first); >0 deadline.
 * acl: 0 (open) or an id from zkl_client_acl(), for the queue node and any parent it creates.
 * On ZKL_OK, *id names the acquisition and one ACQUIRED or FAILED event follows.
 * Errors: ZKL_EINVAL (bad path, recipe or acl id), ZKL_ECLOSED, ZKL_ENOMEM. */
ZKL_EXTERN int zkl_lock_acquire(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms,
                                int acl, uint64_t *id);

/* Downgrade: while holding write acquisition `write_id` of a read-write lock, take its read side
 * at once (Curator 5.5+: a non-sequential read node carrying the writer's sequence, so no queued
 * writer can slip in between). One ACQUIRED or FAILED event follows. Errors: ZKL_ENOTFOUND (not a
 * write acquisition), ZKL_ENOTHELD, ZKL_ECLOSED, ZKL_ENOMEM. */
ZKL_EXTERN int zkl_lock_downgrade(zkl_client *c, uint64_t write_id, uint64_t *id);

/* Start taking `qty` leases of a Curator InterProcessSemaphoreV2 at `path` (layout <path>/locks for
 * its internal mutex, <path>/leases for leases) allowing `max_leases` holders. All or none: one
 * ACQUIRED event when all qty leases are held, or FAILED (with nothing left behind). After
 * ACQUIRED, each lease is its own acquisition: see zkl_lease_ids(). timeout_ms as for locks.
 * Errors: ZKL_EINVAL (path, max_leases < 1, qty < 1 or qty > max_leases), ZKL_ECLOSED, ZKL_ENOMEM. */
ZKL_EXTERN int zkl_semaphore_acquire(zkl_client *c, const char *path, int max_leases, int qty,
                                     int timeout_ms, int acl, uint64_t *id);

/* After ACQUIRED for a semaphore acquisition: write up to n lease ids (the first is `id` itself)
 * and return how many; each is released with zkl_lock_release(). ZKL_ENOTFOUND otherwise. */
ZKL_EXTERN int zkl_lease_ids(zkl_client *c, uint64_t id, uint64_t *ids, int n);

/* Multi-lock (Curator InterProcessMultiLock), all or nothing. Components are acquired in the
 * order given; if one fails, those already held are released in reverse order and the multi-lock
 * fails with that component's status. Each component waits at most its own timeout_ms (-1: no
 * limit of its own), and all of them together at most timeout_ms (-1: none). One ACQUIRED or
 * FAILED event follows; then call zkl_multi_result() once.
 * Errors: ZKL_EINVAL (n < 1, a bad path or recipe), ZKL_ECLOSED, ZKL_ENOMEM. */
typedef struct zkl_multi_item {
    zkl_recipe recipe; /* ZKL_MUTEX, ZKL_READ or ZKL_WRITE, ignored when max_leases > 0 */
    const char *path;
    int max_leases;    /* > 0: one lease of the semaphore at path (1: a semaphore mutex) */
    int timeout_ms;
    int acl;
} zkl_multi_item;

/* flags for zkl_multi_acquire */
enum { ZKL_MULTI_ROLLBACK_GIVEN = 1 /* on failure release in the given order, not in reverse */ };

ZKL_EXTERN int zkl_multi_acquire(zkl_client *c, const zkl_multi_item *items, int n,
                                 int timeout_ms, int flags, uint64_t *id);

/* After the multi-lock's event: on ACQUIRED, write the components' acquisition ids (in item order;
 * each is then released on its own) and return their number; on FAILED, set *failed_index to the
 * component that failed and return 0. Frees the multi-lock's own record. ZKL_ENOTFOUND otherwise. */
ZKL_EXTERN int zkl_multi_result(zkl_client *c, uint64_t id, uint64_t *ids, int n, int *failed_index);

/* Release a held acquisition. On ZKL_OK a RELEASED event follows once the node is deleted
 * (retried across connection loss while the session lives).
 * Errors: ZKL_ENOTFOUND (unknown id), ZKL_ENOTHELD (pending, or already releasing),
 * ZKL_ELOST (the session ended while held; the acquisition is forgotten, no event follows). */
ZKL_EXTERN int zkl_lock_release(zkl_client *c, uint64_t id);

/* Withdraw a pending acquisition: a FAILED event with ZKL_ECANCELED follows and the queue node is
 * deleted in the background. Errors: ZKL_ENOTFOUND, ZKL_ENOTHELD (already acquired: release it). */
ZKL_EXTERN int zkl_lock_cancel(zkl_client *c, uint64_t id);

/* Release without waiting (for garbage collection paths): the node is deleted in the background
 * and no event follows. Works on pending and held acquisitions. */
ZKL_EXTERN int zkl_lock_abandon(zkl_client *c, uint64_t id);

#define ZKL_NODE_MAX 1200 /* longest node path: a 1024-byte lock path plus a protected name */

typedef struct zkl_lock_info {
    char node[ZKL_NODE_MAX]; /* full path of the queue node, "" while unknown */
    int64_t token;      /* fencing token: czxid of the node (0 until known) */
    int held;           /* 1 while held */
    int suspended;      /* 1 while the connection is lost */
} zkl_lock_info;

/* Fill *out for a live acquisition. */
ZKL_EXTERN int zkl_lock_info_get(zkl_client *c, uint64_t id, zkl_lock_info *out);

/* Plain znode operations (used for participants, tests and examples). One ZKL_EV_OP_DONE follows.
 * Results are read with zkl_op_result() right after next_event() returned the OP_DONE event and
 * stay valid until the next call to next_event() or process(). */
typedef enum {
    ZKL_OP_GET = 1,      /* data + stat */
    ZKL_OP_CHILDREN = 2, /* children names */
    ZKL_OP_EXISTS = 3,   /* stat */
    ZKL_OP_CREATE = 4,   /* created path (flags: 1 ephemeral, 2 sequential, 4 container) */
    ZKL_OP_SET = 5,      /* stat */
    ZKL_OP_DELETE = 6
} zkl_op_type;

typedef struct zkl_op_args {
    zkl_op_type type;
    const char *path;
    const char *data; /* create/set */
    size_t len;
    int flags;        /* create */
    int version;      /* set/delete; -1 any */
    int acl;          /* create: an ACL id from zkl_client_acl; 0 = open (world: all) */
} zkl_op_args;

ZKL_EXTERN int zkl_op_start(zkl_client *c, const zkl_op_args *args, uint64_t *id);

typedef struct zkl_op_result {
    int rc;
    const char *data; /* GET: node data (may be NULL for empty); CREATE: created path */
    size_t len;
    int nchildren;    /* CHILDREN */
    const char *const *children;
    int64_t czxid, mzxid, pzxid, ephemeral_owner;
    int32_t version, num_children;
} zkl_op_result;

ZKL_EXTERN int zkl_op_result_get(zkl_client *c, uint64_t id, zkl_op_result *out);

/* Testing aid: expire a session from outside by opening a second handle with the same id and
 * password and closing it. Blocks up to timeout_ms. Returns ZKL_OK or an error. */
ZKL_EXTERN int zkl_expire_session(const char *hosts, int64_t session_id, const char passwd[16],
                                  int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
