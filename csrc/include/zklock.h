/*
 * zklock.h - distributed lock recipes over ZooKeeper, compatible with Apache Curator.
 *
 * This header is zklock's supported public C API. It is installed with the library (libzklock.so
 * and libzklock.a, linked against the ZooKeeper C client's single-threaded flavour,
 * libzookeeper_st); compile with `cc app.c $(pkg-config --cflags --libs zklock)`.
 * examples/c/lock_demo.c shows a whole program. 64-bit targets only.
 *
 * The core is a set of non-blocking state machines driven by the host:
 *
 *     zkl_client_new()        create a client (connects in the background)
 *     zkl_client_fd()         one fd that never changes for the life of the client;
 *                             poll it for readability
 *     zkl_client_timeout_ms() the longest the host may sleep before calling process
 *     zkl_client_process()    drives ZooKeeper I/O, fires deadlines, advances recipes, queues
 *                             events; does not wait for I/O
 *     zkl_client_next_event() drain finished operations and state changes
 *
 * A host loop:  zkl_client_flush(c);
 *               poll(zkl_client_fd(c), POLLIN, zkl_client_timeout_ms(c)); zkl_client_process(c);
 *               while (zkl_client_next_event(c, &ev)) handle(&ev);
 * (the flush is optional: without it, requests that wait to be sent make the timeout 0 and go out
 * with the next process()), or, for a program without a loop of its own, zkl_client_wait(c, ms)
 * in place of flush + poll + process.
 * The host must drive the client when zkl_client_timeout_ms() says (at least every quarter of the
 * session timeout while idle): requests go out and answers are read only from process().
 *
 * Loss. The server expires a session a session timeout after the last packet it received from
 * the client; the client cannot see that moment, so it counts from a moment no later: the issue
 * time of the newest request the server answered (ZOK or one of the server's own refusals such
 * as ZNONODE; never a code the ZooKeeper client makes up, such as ZCONNECTIONLOSS or
 * ZOPERATIONTIMEOUT, and never a watch or session event the server pushes). While connected and
 * idle for a quarter of the session timeout, the client sends a request of its own (exists("/"),
 * no watch; under a chroot a missing chroot node answers ZNONODE, which counts): one small request
 * per quarter timeout, in place of the ZooKeeper client's own ping, whose answer it cannot see.
 * From that issue time (answered_at) and the negotiated timeout T:
 *   - SUSPENDED (session and locks) when the link drops, or when it stays up but nothing was
 *     answered for 2T/3; back to CONNECTED (locks RECONNECTED) only once the server answered a
 *     request sent after the link came back or the silence began (a heartbeat goes out at once);
 *   - LOST (locks) and EXPIRED (session) at answered_at + T - min(T/10, 1 s), connected or not:
 *     the server cannot have expired the session before then, so a holder that stops working when
 *     told LOST (or by zkl_client_loss_ms()) stops before anyone else can be granted its lock.
 *     A client not driven for that long reports it on its next process(), before reading
 *     anything. Not covered: a process paused or starved between checking and acting, a clock
 *     that jumps; the fencing token (zkl_lock_info) covers those.
 * See keepalive below for blocking programs.
 *
 * Async contract:
 *   - Every operation that zkl_*_start() accepted (returned ZKL_OK) produces exactly one final
 *     event: ZKL_EV_ACQUIRED or ZKL_EV_FAILED for an acquire, ZKL_EV_RELEASED for a release,
 *     ZKL_EV_OP_DONE for a plain znode operation. An operation whose start returns an error
 *     produces no event.
 *   - Events are queued by zkl_client_process() and zkl_client_close(), and by a call that ends
 *     an operation at once (zkl_lock_cancel(): its FAILED event; zkl_multi_acquire() whose first
 *     component cannot start). They reach the caller only through zkl_client_next_event(), never
 *     by a call back into the caller's code.
 *   - An acquisition that timed out, was cancelled or failed keeps cleaning up in the background
 *     (its queue node is deleted, retried while the session lives); the caller need not wait.
 *   - No callback of yours runs from inside the library, except the allocator (zkl_config.alloc)
 *     and the log function (zkl_config.log_fn).
 *
 * Blocking. These calls can wait, and for at most this long:
 *   - zkl_client_wait(c, max_ms): by design, waiting on the client's fd (epoll_wait; poll() with
 *     the keepalive thread), for max_ms (-1: until zkl_client_timeout_ms(), i.e. the next
 *     heartbeat, loss or connection deadline or an acquire's deadline); then it runs
 *     process(). It never holds the client's mutex while it waits.
 *   - zkl_client_close() and zkl_client_free(), in this order: (1) with keepalive, join the
 *     keepalive thread (up to its current sleep, at most 100 ms, plus the round it is running);
 *     (2) read the replies still due for requests in flight, for up to a third of the requested
 *     session timeout and at most 1 s; (3) zookeeper_close(): when connected it sends
 *     closeSession and waits up to 3 s for the send and then up to 1.5 s for the server's
 *     answer (ZooKeeper 3.8). Typically one round trip in all; worst case about 5.6 s. Steps
 *     (2) and (3) do not wait when the client is not connected.
 *   - zkl_expire_session() (testing aid): up to timeout_ms to connect, then zookeeper_close() as
 *     above (up to 4.5 s more).
 *   - zkl_client_process() (and zkl_client_wait()) in one rare case: when the server answered
 *     nothing for a session timeout less the margin (see "Loss": a silent server, or a client not
 *     driven that long) while its ZooKeeper handle still counted as connected, process() retires
 *     that handle with zookeeper_close(). The socket's read side is shut first, so the wait for
 *     the closeSession answer in (3) ends at once; only its send may wait, and only when the
 *     socket's send buffer is full.
 *   - Host name resolution: the ZooKeeper client resolves the hosts string with getaddrinfo() in
 *     zkl_client_new(), before each connection attempt while it has no socket, and once a minute
 *     while connected; it runs inside zkl_client_new(), zkl_client_process(), zkl_client_wait()
 *     and every call that issues requests (acquire, release, cancel, abandon, op_start,
 *     add_auth, ...). Numeric addresses (or names in /etc/hosts) resolve without waiting; a DNS
 *     name may wait for the resolver (its timeout and attempts, see resolv.conf). Hosts that must
 *     never block (nginx workers) should be given numeric addresses.
 *   - With keepalive on, every call that takes the client's mutex may wait while the keepalive
 *     thread finishes the process() round it is running (normally microseconds).
 *   zkl_client_new() does not wait for the connection or the session: it returns at once in
 *   state ZKL_STATE_CONNECTING (after resolving the hosts) and a ZKL_EV_SESSION event reports
 *   ZKL_STATE_CONNECTED later; operations started meanwhile are sent once connected, their
 *   timeouts running from the call. Everything else here returns without waiting for the network.
 *
 * Threads. The library is single-threaded: one client must only be used from one thread at a
 * time (the "owner"), and events, results and errors are read on that thread. Different clients
 * are independent. The ZooKeeper client's log level is process-wide (zoo_set_debug_level).
 *
 * Keepalive (zkl_config.keepalive = 1). For programs whose owner thread may stay away longer
 * than a third of the session timeout (a blocking script), zkl_client_new() starts one
 * background thread per client. It wakes at least every 100 ms (sooner when the client's fd is
 * readable or a deadline is due) and, only when no public entry point has been entered or left
 * for 100 ms, runs one process() round under the client's mutex: heartbeats go out, replies
 * are read, session changes and deadlines are handled. The events it produces wait in the queue
 * for the owner; the plain-op result the owner may be reading stays valid. It stops in
 * zkl_client_close() / zkl_client_free() and when the client is closed. With keepalive on, the
 * allocator and log_fn may be called on the keepalive thread (never concurrently with the owner's
 * calls into this client) and must be safe to call from there. Not for event-loop hosts (nginx):
 * drive them. The mutex (recursive) is taken, for the duration of the call, by every entry point
 * that takes a zkl_client except these: zkl_client_fd() (a constant), and zkl_client_close() /
 * zkl_client_free() (which stop the thread first and then work alone); zkl_client_free_nowait()
 * takes it only to detach the log function. zkl_client_wait() takes it before and after its poll,
 * not during. zkl_strerror(), zkl_err_name(), zkl_path_error(), zkl_uuid(), zkl_host_name() and
 * zkl_expire_session() touch no client. The mutex does not make the API safe to call from several
 * threads: results (zkl_op_result) and the event queue belong to the owner.
 *
 * Errors. Functions return ZKL_OK (0) or a negative code from ZKL_ERRNO_MAP below: zklock's own
 * codes (below -1000) and ZooKeeper's codes, passed through with their numbers (zookeeper.h).
 * Event statuses use the same codes. Each function lists the codes it can return; the lists
 * below name the causes. ZKL_EOWNNODE is reserved (the core never reports it: an acquisition
 * whose queue node vanishes queues again). The codes from ZKL_EDEADLK on are used only by the
 * Lua layer, and are listed here so that one table names every code zklock returns (zklock.errno,
 * zklock.strerror): EDEADLK (a read to write upgrade), EFORMAT (a queue item that is not a
 * Curator message), EDATA (a shared count's or atomic long's node of the wrong size), ERANGE (a
 * long beyond 2^53 on a Lua without 64-bit integers), ECONNECTING (zookeeper_lock before the
 * first session), EEXIST (a second OpenResty client in one worker), ESTALE and EBUSY (the test
 * kit's fenced resource). The final status of an acquisition (ZKL_EV_FAILED) is one of:
 *   ZKL_ETIMEDOUT  its timeout passed (or timeout 0 and the lock was not free at once)
 *   ZKL_ECANCELED  zkl_lock_cancel()
 *   ZKL_ESESSION   the session was lost (expired, or presumed lost) while it waited
 *   ZKL_ECLOSED    zkl_client_close()
 *   ZKL_ENOMEM     an allocation failed while it was under way
 *   a ZooKeeper code the server or the ZooKeeper client answered for a node the recipe needs,
 *                  e.g. ZNOAUTH (the ACL forbids creating the node or a parent), ZINVALIDACL,
 *                  ZNOCHILDRENFOREPHEMERALS (the lock path is under an ephemeral node), ZNONODE
 *                  (its parent was removed again after being re-created twice; semaphore
 *                  leases: three times), ZBADARGUMENTS or ZMARSHALLINGERROR.
 *   Connection loss (ZCONNECTIONLOSS, ZOPERATIONTIMEOUT) never ends an acquisition: it is ridden
 *   out while the session lives.
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
#define ZKL_ERRNO_MAP(XX)                                                                          \
    XX(OK, 0, "success")                                                                           \
    XX(ETIMEDOUT, -1001, "timed out")                                                              \
    XX(ECANCELED, -1002, "canceled")                                                               \
    XX(ESESSION, -1003, "the ZooKeeper session expired")                                           \
    XX(ECLOSED, -1004, "the client is closed")                                                     \
    XX(ELOST, -1005, "the lock was lost with the session")                                         \
    XX(EINVAL, -1006, "invalid argument")                                                          \
    XX(ENOMEM, -1007, "out of memory")                                                             \
    XX(ENOTHELD, -1008, "not held")                                                                \
    XX(ENOTFOUND, -1009, "no such operation")                                                      \
    XX(ESEQWRAP, -1010, "sequence counter wrapped: names no longer sort in queue order")           \
    XX(ESYSTEM, -1011, "system call failed")                                                       \
    XX(EOWNNODE, -1012, "the lock's own queue node disappeared")                                   \
    XX(EDEADLK, -1013, "would deadlock")                                                           \
    XX(EFORMAT, -1014, "not in the wire format the recipe expects")                                \
    XX(EDATA, -1015, "the node's data is not what the recipe stores there")                        \
    XX(ERANGE, -1016, "value out of the range this Lua represents exactly")                        \
    XX(ECONNECTING, -1017, "no session yet: the client is still connecting")                       \
    XX(EEXIST, -1018, "already exists")                                                            \
    XX(ESTALE, -1019, "stale fencing token: older than one the resource took")                     \
    XX(EBUSY, -1020, "the resource kept changing: attempts used up")                               \
    XX(ZSYSTEMERROR, -1, "ZooKeeper system error")                                                 \
    XX(ZRUNTIMEINCONSISTENCY, -2, "ZooKeeper runtime inconsistency")                               \
    XX(ZDATAINCONSISTENCY, -3, "ZooKeeper data inconsistency")                                     \
    XX(ZCONNECTIONLOSS, -4, "connection to the server lost")                                       \
    XX(ZMARSHALLINGERROR, -5, "error while marshalling or unmarshalling data")                     \
    XX(ZUNIMPLEMENTED, -6, "operation not implemented by the server")                              \
    XX(ZOPERATIONTIMEOUT, -7, "operation timed out (no answer from the server)")                   \
    XX(ZBADARGUMENTS, -8, "invalid arguments")                                                     \
    XX(ZINVALIDSTATE, -9, "invalid ZooKeeper handle state")                                        \
    XX(ZNEWCONFIGNOQUORUM, -13, "no quorum for new config")                                        \
    XX(ZRECONFIGINPROGRESS, -14, "reconfiguration in progress")                                    \
    XX(ZSSLCONNECTIONERROR, -15, "SSL connection error")                                           \
    XX(ZAPIERROR, -100, "ZooKeeper API error")                                                     \
    XX(ZNONODE, -101, "node does not exist")                                                       \
    XX(ZNOAUTH, -102, "not authorized")                                                            \
    XX(ZBADVERSION, -103, "version conflict")                                                      \
    XX(ZNOCHILDRENFOREPHEMERALS, -108, "ephemeral nodes may not have children")                    \
    XX(ZNODEEXISTS, -110, "node already exists")                                                   \
    XX(ZNOTEMPTY, -111, "node has children")                                                       \
    XX(ZSESSIONEXPIRED, -112, "session expired")                                                   \
    XX(ZINVALIDCALLBACK, -113, "invalid callback")                                                 \
    XX(ZINVALIDACL, -114, "invalid ACL")                                                           \
    XX(ZAUTHFAILED, -115, "authentication failed")                                                 \
    XX(ZCLOSING, -116, "ZooKeeper handle is closing")                                              \
    XX(ZNOTHING, -117, "no server responses to process")                                           \
    XX(ZSESSIONMOVED, -118, "session moved to another server")                                     \
    XX(ZNOTREADONLY, -119, "state-changing request to a read-only server")                         \
    XX(ZEPHEMERALONLOCALSESSION, -120, "ephemeral node on a local session")                        \
    XX(ZNOWATCHER, -121, "watcher not found")                                                      \
    XX(ZRECONFIGDISABLED, -123, "reconfiguration disabled")                                        \
    XX(ZSESSIONCLOSEDREQUIRESASLAUTH, -124, "session closed: SASL authentication required")        \
    XX(ZTHROTTLEDOP, -127, "operation throttled by the server")

enum {
#define ZKL__ERR_ENUM(name, code, msg) ZKL_##name = (code),
    ZKL_ERRNO_MAP(ZKL__ERR_ENUM)
#undef ZKL__ERR_ENUM
};

/* Outcome unknown. A write (create, set, delete, a transaction, the delete of a queue take)
 * that ends with one of these codes may or may not have been applied: the request may have
 * reached the server, and no answer of the server says what became of it. Retrying it blindly
 * may apply it twice; read back (or make the write idempotent) first. Any other code that ends
 * a write is the server's own answer (for a transaction: none of its ops was applied) or a
 * refusal before anything was sent. The ZooKeeper C client (3.8) fails the requests in flight
 * without an answer of the server with:
 *   ZCONNECTIONLOSS        the connection broke, or a connect failed, with requests out
 *   ZOPERATIONTIMEOUT      nothing came from the server for two thirds of the session timeout
 *                          (replies dropped, a stalled server or network)
 *   ZRUNTIMEINCONSISTENCY  a reply out of order: the client drops the connection (in the op
 *                          list of a multi the server answered, the same code marks an op rolled
 *                          back because another failed: that one was not applied)
 *   ZAUTHFAILED            the server rejected a credential and closed the connection (requests
 *                          written before the credential may have been applied)
 *   ZCLOSING               zookeeper_close() with requests out
 *   ZSYSTEMERROR           no socket could be made (requests queued for the next connection)
 *   ZSSLCONNECTIONERROR    TLS builds: the TLS handshake failed (likewise)
 * and zklock adds its own for a request it stopped waiting for while it was out:
 *   ETIMEDOUT              the call's timeout passed
 *   ESESSION               the session ended (expired, or presumed lost)
 *   ECLOSED                zkl_client_close()
 * Not in the list: ZINVALIDSTATE (returned only when a request is refused before it is sent),
 * ZSESSIONMOVED (the server's answer: the request was refused) and ZSESSIONEXPIRED: the client
 * fails with it the requests queued after the last connection broke (those in flight then failed
 * with that connection's code) once the reconnect finds the session expired, and the server
 * applies no request of an expired session; as the server's answer it is a refusal too. (The
 * core reports it as ZKL_ESESSION, which is listed: a session the core presumes lost may end
 * with requests in flight; a transaction's zkl_txn_result.sent tells the two apart.) */
#define ZKL_OUTCOME_UNKNOWN_MAP(XX)                                                                \
    XX(ZCONNECTIONLOSS)                                                                            \
    XX(ZOPERATIONTIMEOUT)                                                                          \
    XX(ZRUNTIMEINCONSISTENCY)                                                                      \
    XX(ZAUTHFAILED)                                                                                \
    XX(ZCLOSING)                                                                                   \
    XX(ZSYSTEMERROR)                                                                               \
    XX(ZSSLCONNECTIONERROR)                                                                        \
    XX(ETIMEDOUT)                                                                                  \
    XX(ESESSION)                                                                                   \
    XX(ECLOSED)

/* 1 if a write that ended with code err may have been applied (ZKL_OUTCOME_UNKNOWN_MAP), else 0. */
ZKL_EXTERN int zkl_outcome_unknown(int err);

/* Human-readable message for an error code; never NULL ("unknown error" for unknown codes). */
ZKL_EXTERN const char *zkl_strerror(int err);
/* Symbolic name ("ETIMEDOUT", "ZCONNECTIONLOSS"); "EUNKNOWN" for unknown codes. */
ZKL_EXTERN const char *zkl_err_name(int err);

/* Client connection states (zkl_client_state, ZKL_EV_SESSION). */
enum {
    ZKL_STATE_CONNECTING = 1, /* no session yet (first connect, or after an expiry) */
    ZKL_STATE_CONNECTED = 2,  /* session established and connected */
    ZKL_STATE_SUSPENDED = 3,  /* session exists but the connection is lost, or nothing was
                                 answered for 2/3 of the timeout: ownership uncertain (see "Loss") */
    ZKL_STATE_EXPIRED = 4,    /* reported once when a session is lost; a new one is being made */
    ZKL_STATE_CLOSED = 5,
    ZKL_STATE_AUTH_FAILED = 6 /* the server refused the credentials (zkl_client_add_auth): reported
                                 once; pending operations fail with ZAUTHFAILED, new ones are
                                 refused with it, and no session is opened again. Terminal. */
};

/* Per-lock states reported with ZKL_EV_LOCK_STATE while a lock is held. */
enum { ZKL_LOCK_SUSPENDED = 1, ZKL_LOCK_RECONNECTED = 2, ZKL_LOCK_LOST = 3 };

/* Event types. */
enum {
    ZKL_EV_ACQUIRED = 1, /* id = acquisition; status ZKL_OK */
    ZKL_EV_FAILED = 2,   /* id = acquisition; status = why (ETIMEDOUT, ECANCELED, ESESSION, ...) */
    ZKL_EV_RELEASED =
        3, /* id = acquisition; status ZKL_OK, or ZKL_ELOST if the session ended first */
    ZKL_EV_LOCK_STATE = 4, /* id = held acquisition; status = ZKL_LOCK_* */
    ZKL_EV_SESSION = 5,    /* id = 0; status = ZKL_STATE_* */
    ZKL_EV_OP_DONE = 6,    /* id = znode operation; status = ZooKeeper result */
    ZKL_EV_WARNING = 7,    /* id = acquisition or 0; status = error code (e.g. ESEQWRAP) */
    ZKL_EV_WATCH = 8       /* id = plain operation started with watch = 1; status = ZKL_WATCH_* or
                              an error code: see "Watches" at zkl_op_args */
};
/* Event statuses in full:
 *   ACQUIRED    ZKL_OK.
 *   FAILED      see "Errors" at the top (ETIMEDOUT, ECANCELED, ESESSION, ECLOSED, ENOMEM or a
 *               ZooKeeper refusal); for a multi-lock also the start errors of a component
 *               (ZKL_EINVAL for a bad acl id, ZKL_ENOMEM, ZKL_ECLOSED).
 *   RELEASED    ZKL_OK (node deleted; also for a release in flight when the client is closed),
 *               ZKL_ELOST (the session ended before the delete was confirmed), or the server's
 *               refusal to delete (e.g. ZNOAUTH): the node then stays until the session ends.
 *   LOCK_STATE  ZKL_LOCK_SUSPENDED (connection lost or server silent, ownership uncertain;
 *               see "Loss" at the top), ZKL_LOCK_RECONNECTED
 *               (the same session is back), ZKL_LOCK_LOST (the session is gone: the hold is
 *               over; zkl_lock_release() then returns ZKL_ELOST).
 *   SESSION     ZKL_STATE_CONNECTED, SUSPENDED, EXPIRED (then CONNECTING again: the client opens
 *               a new session by itself; a credential the server rejects, AUTH_FAILED, counts
 *               as an expiry too), CLOSED (the last event of a closed client).
 *   OP_DONE     ZKL_OK or the ZooKeeper result (ZNONODE, ZNODEEXISTS, ZNOAUTH, ZBADVERSION,
 *               ZNOTEMPTY, ZNOCHILDRENFOREPHEMERALS, ZINVALIDACL, ZBADARGUMENTS, ...);
 *               ZCONNECTIONLOSS or ZOPERATIONTIMEOUT for a create, set or delete whose outcome is
 *               unknown (reads are retried once connected instead); ZKL_ESESSION (the session
 *               ended while it was in flight); ZKL_ECLOSED; ZKL_ENOMEM (copying the result).
 *               A write's status in ZKL_OUTCOME_UNKNOWN_MAP: it may have been applied.
 *   WATCH       ZKL_WATCH_CREATED, _DELETED, _CHANGED, _CHILD (the watch fired), ZKL_ESESSION
 *               (the session ended with the watch armed: it is gone) or ZKL_ECLOSED.
 *   WARNING     ZKL_ESEQWRAP with the acquisition's id (the lock dir's sequence counter wrapped:
 *               names no longer sort in queue order), or, with id 0, the server's refusal (e.g.
 *               ZNOAUTH) to delete the node of an acquisition given up in the background. */

typedef struct zkl_event {
    uint64_t id;
    int type;
    int status;
} zkl_event;

/* Recipes. */
typedef enum {
    ZKL_MUTEX = 1, /* Curator InterProcessMutex: _c_<uuid>-lock-<seq> */
    ZKL_READ = 2,  /* Curator InterProcessReadWriteLock, read side: _c_<uuid>-__READ__<seq> */
    ZKL_WRITE = 3, /* write side: _c_<uuid>-__WRIT__<seq> */
    ZKL_LATCH = 4  /* Curator LeaderLatch: _c_<uuid>-latch-<seq>, ordered by the text after the
                      last "latch-"; held (leader) while first. Before granting, the node's
                      ephemeralOwner is checked to be this client's current session. Pass the
                      participant id as the node data (zkl_lock_acquire_ex). */
} zkl_recipe;

typedef struct zkl_allocator {
    void *(*realloc)(void *ud, void *ptr, size_t osize, size_t nsize); /* nsize 0 frees */
    void *ud;
} zkl_allocator;

/* Log levels for the ZooKeeper client's own messages. */
enum { ZKL_LOG_NONE = 0, ZKL_LOG_ERROR = 1, ZKL_LOG_WARN = 2, ZKL_LOG_INFO = 3, ZKL_LOG_DEBUG = 4 };

typedef struct zkl_config {
    const char *hosts;      /* "127.0.0.1:2181,127.0.0.1:2182[/chroot]"; required */
    int session_timeout_ms; /* requested session timeout; 0 = 10000 */
    const char *identity;   /* data stored in lock nodes; NULL = host name */
    size_t identity_len;
    int log_level; /* ZKL_LOG_*; the ZooKeeper client's level is process-wide */
    void (*log_fn)(void *ud, const char *msg); /* NULL: messages are dropped */
    void *log_ud;
    const zkl_allocator *alloc; /* NULL: malloc */
    int keepalive;              /* 1: a background thread keeps the session alive while the
                                 * owner thread stays away (blocking scripts); public calls then
                                 * take the client's mutex (see "Keepalive" at the top). Never
                                 * for nginx. */
} zkl_config;

typedef struct zkl_client zkl_client;

/* Create a client and start connecting. Does not wait for the connection: the client starts in
 * ZKL_STATE_CONNECTING and a ZKL_EV_SESSION event says ZKL_STATE_CONNECTED once the session is
 * up. Blocks only while the hosts are resolved (see "Blocking"). With cfg->keepalive, starts the
 * keepalive thread. cfg must not be NULL; *out is set to NULL on failure.
 * Errors: ZKL_EINVAL (hosts NULL or empty, session_timeout_ms < 0, a malformed hosts string such
 * as a missing port or an invalid chroot, or a resolver failure the ZooKeeper client maps to
 * EINVAL), ZKL_ENOMEM, ZKL_ESYSTEM (no host resolved, epoll_create1 failed, the ZooKeeper
 * handle could not be made, or the keepalive thread or its mutex could not be created). */
ZKL_EXTERN int zkl_client_new(const zkl_config *cfg, zkl_client **out);

/* Stop everything: pending acquisitions (and multi-locks) fail with ZKL_ECLOSED, releases in
 * flight report RELEASED with ZKL_OK, plain operations OP_DONE with ZKL_ECLOSED; held locks get
 * no event: closing the session deletes their nodes at once. The last event is ZKL_EV_SESSION
 * with ZKL_STATE_CLOSED. Events stay readable with zkl_client_next_event() until
 * zkl_client_free(); every id is unknown afterwards (ZKL_ENOTFOUND) and the calls that start
 * something return ZKL_ECLOSED. Blocks: joins the keepalive thread, reads the replies still due
 * (at most a third of the session timeout, 1 s), then zookeeper_close() (up to 4.5 s), see
 * "Blocking". Call it from the owner thread. Idempotent. Always returns ZKL_OK. */
ZKL_EXTERN int zkl_client_close(zkl_client *c);

/* Close (if needed, blocking like zkl_client_close()) and free. NULL is ignored. */
ZKL_EXTERN void zkl_client_free(zkl_client *c);
/* Like zkl_client_free(), but never blocks: the client is closed and freed on a detached thread
 * (its log function is no longer called once this returns). For finalizers. The first call pins
 * the shared object holding the library (RTLD_NODELETE), so unloading it cannot pull the code
 * from under that thread, and registers an exit handler that waits for those threads: a program
 * that ends without closing still ends its sessions (and so its locks) at exit. If no thread can
 * be started, it closes and frees on the caller's thread, blocking like zkl_client_free(). */
ZKL_EXTERN void zkl_client_free_nowait(zkl_client *c);

/* The pollable fd (an epoll fd owned by the client, stable for its whole life). Poll for POLLIN;
 * do not read it or close it. Never fails; no mutex. */
ZKL_EXTERN int zkl_client_fd(zkl_client *c);

/* Milliseconds until process() must run again (ZooKeeper's own deadlines, the next heartbeat,
 * the SUSPENDED and LOST deadlines of "Loss", acquire deadlines); 0 when events are
 * queued or listings wait to be sent; -1 = no deadline (after close). Never fails. */
ZKL_EXTERN int zkl_client_timeout_ms(zkl_client *c);

/* Drive everything without waiting for I/O: send what is due, read up to 64 replies, handle
 * session changes and deadlines, queue events. Returns the number of events queued by this call
 * (>= 0). Errors: ZKL_ECLOSED (after zkl_client_close()). Blocking exceptions: host name
 * resolution, and retiring a handle after the client went undriven for a session timeout (see
 * "Blocking"). */
ZKL_EXTERN int zkl_client_process(zkl_client *c);

/* Send the requests that wait for the next process() (the listings that acquisitions made since
 * then share, one per lock directory), without reading anything. A host that ran code which
 * acquired calls it before waiting on the fd: the replies then wake the wait, and the process()
 * that would only have sent them and found the socket empty is saved. Returns 0. Errors:
 * ZKL_ECLOSED. Never blocks. */
ZKL_EXTERN int zkl_client_flush(zkl_client *c);

/* Send what waits to be sent (zkl_client_flush()), then block up to max_ms (-1: up to
 * zkl_client_timeout_ms(); 0: do not wait) until the client's fd is readable, then process().
 * Returns like process: the number of events queued, or ZKL_ECLOSED (at once, without waiting,
 * after close). A signal may end the wait early. */
ZKL_EXTERN int zkl_client_wait(zkl_client *c, int max_ms);

/* Pop the oldest event into *ev. Returns 1 if an event was returned, 0 if none. Works after
 * close. Ends the validity of the previous plain operation's result (zkl_op_result_get). */
ZKL_EXTERN int zkl_client_next_event(zkl_client *c, zkl_event *ev);

/* For a caller that waits for one operation (the Lua binding's blocking wait): pop the oldest
 * event into *ev only if it is the only event queued and it ends or grants operation id (not a
 * SESSION, LOCK_STATE, WATCH or WARNING event). Returns 1 if popped (as next_event() would), 0 if
 * no event is queued, -1 if other events are queued: drain those with next_event(). */
ZKL_EXTERN int zkl_client_next_event_for(zkl_client *c, uint64_t id, zkl_event *ev);

/* Parked waiters: a host that resumes many waiters from one pump parks each waiting operation;
 * its next ACQUIRED, FAILED or RELEASED event then skips the event queue and goes to the ready
 * list, which the pump drains in bulk with zkl_client_next_ready() (after the event queue, so
 * that session changes are seen first). Room for the event is reserved here: the completion
 * path needs no memory. Other events of the op (LOCK_STATE, WARNING, a plain operation's
 * OP_DONE) still go to the event queue. Returns ZKL_OK (parked; parking again is a no-op), 1
 * (not parked: an event of the op is queued already, take it with next_event()), ZKL_ENOTFOUND
 * (no such op, or it has reported its final event), ZKL_ENOMEM. */
ZKL_EXTERN int zkl_client_park(zkl_client *c, uint64_t id);

/* Pop the oldest ready event (of a parked operation) into *ev: 1, or 0 when none is ready.
 * Works after close (pending parked acquisitions fail with ZKL_ECLOSED there). */
ZKL_EXTERN int zkl_client_next_ready(zkl_client *c, zkl_event *ev);

/* The client's state (ZKL_STATE_*) as last reported by process(). Never fails. */
ZKL_EXTERN int zkl_client_state(const zkl_client *c);

/* Current session id (0 unless CONNECTED or SUSPENDED) and its 16-byte password (for tests that
 * expire sessions; passwd may be NULL). Never fails. */
ZKL_EXTERN int64_t zkl_client_session(const zkl_client *c, char passwd[16]);

/* Negotiated session timeout in ms (the requested one while not connected). Never fails. */
ZKL_EXTERN int zkl_client_session_timeout(const zkl_client *c);

/* Milliseconds until the client declares the session LOST if the server answers nothing more
 * (>= 0; 0: due now, the next process() reports it), or -1 when there is no session (connecting,
 * expired, closed). The deadline is counted from what the server last heard from this client:
 * the issue time of the newest request it answered (while connected, the client sends a cheap
 * request of its own after a quarter of the session timeout without one), plus the negotiated
 * session timeout, less a margin of a tenth of it (at most 1 s). The server cannot expire the
 * session before then, so a holder acting on its lock stops in time if it stops at this
 * deadline; nothing bounds a process that is paused or starved, or a clock that jumps (the
 * fencing token covers those). Never fails. */
ZKL_EXTERN int zkl_client_loss_ms(zkl_client *c);

/* Number of sessions this client has had (1 after the first connect, +1 after each expiry).
 * Never fails. */
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

/* Copy the counters into *out. Never fails. */
ZKL_EXTERN void zkl_client_stats(const zkl_client *c, zkl_stats *out);

/* Add authentication ("digest", "user:pass") to the session, now and after every expiry. The
 * credential is kept (and sent with every new session) whenever the call gets past its argument
 * checks, also when sending it now fails; the server's answer arrives asynchronously (a rejected
 * credential ends the session: see ZKL_EV_SESSION).
 * Errors: ZKL_ECLOSED, ZKL_EINVAL (scheme NULL or empty, cred NULL), ZKL_ENOMEM, or the ZooKeeper
 * client's synchronous error for sending it now: ZINVALIDSTATE (the handle is not connecting
 * or connected yet, or is expired), ZSYSTEMERROR (its allocation failed), ZMARSHALLINGERROR. */
ZKL_EXTERN int zkl_client_add_auth(zkl_client *c, const char *scheme, const char *cred, size_t len);

/* ACLs for the nodes a lock creates (its queue nodes and the parents it makes). Register a list
 * once per client and pass its id to acquisitions; id 0 is the open ACL (world:anyone, all).
 * Example: {ZKL_PERM_ALL, "auth", ""} (the creating session's authenticated identities, e.g. after
 * digest auth) plus {ZKL_PERM_READ, "world", "anyone"} lets everyone watch but only holders of the
 * credentials create, change or delete. Returns the id (> 0), ZKL_EINVAL (entries NULL, n < 1 or
 * n > 64, an entry with an empty scheme, a NULL id or perms outside 1..ZKL_PERM_ALL) or
 * ZKL_ENOMEM. Registered lists live as long as the client. */
enum {
    ZKL_PERM_READ = 1,
    ZKL_PERM_WRITE = 2,
    ZKL_PERM_CREATE = 4,
    ZKL_PERM_DELETE = 8,
    ZKL_PERM_ADMIN = 16,
    ZKL_PERM_ALL = 31
};

typedef struct zkl_acl_entry {
    int perms;
    const char *scheme; /* "world", "auth", "digest", "ip", ... */
    const char *id;
} zkl_acl_entry;

ZKL_EXTERN int zkl_client_acl(zkl_client *c, const zkl_acl_entry *entries, int n);

/* Check a lock path (as acquire does). Returns NULL if valid, else a static message saying what is
 * wrong (empty, relative, the root, longer than 1024 bytes, NUL or control characters, a trailing
 * '/', empty, '.' or '..' components, under /zookeeper). Touches no client. */
ZKL_EXTERN const char *zkl_path_error(const char *path, size_t len);

/* Write a fresh random UUID (version 4, lowercase canonical form: 36 characters and a NUL) into
 * out, from getrandom(), formatted as the lock nodes' protected names format theirs. Returns
 * ZKL_OK, or ZKL_ESYSTEM when getrandom() fails. Touches no client. */
ZKL_EXTERN int zkl_uuid(char out[37]);

/* Write this machine's host name (gethostname()) into buf (size bytes, NUL-terminated, cut to
 * fit); "localhost" when it cannot be read or is empty. The client's default identity is this
 * name. Touches no client. */
ZKL_EXTERN void zkl_host_name(char *buf, size_t size);

/* Start acquiring a lock on `path` with the given recipe.
 * timeout_ms: -1 wait forever; 0 try once (fail with ETIMEDOUT if not first, or if the server
 * has not answered within the client's requested session timeout); >0 deadline.
 * acl: 0 (open) or an id from zkl_client_acl(), for the queue node and any parent it creates.
 * On ZKL_OK, *id names the acquisition and one ACQUIRED or FAILED event follows (FAILED statuses:
 * see "Errors" at the top); while held, LOCK_STATE events report connection and session loss.
 * The C core has no reentrancy: a second acquisition of a lock this client holds queues behind
 * the first like another process would (the Lua layer adds per-coroutine reentrancy).
 * Errors: ZKL_ECLOSED, ZKL_EINVAL (path rejected by zkl_path_error(), unknown recipe, acl not 0
 * and not an id from zkl_client_acl()), ZKL_ENOMEM (also when getrandom() fails to give the
 * node's uuid). */
ZKL_EXTERN int zkl_lock_acquire(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms,
                                int acl, uint64_t *id);

/* zkl_lock_acquire() with more to say, for recipes whose nodes carry their own data (a leader
 * election's participant id, as Curator's LeaderSelector and LeaderLatch write it):
 *   data, len: the queue node's data for this acquisition (len bytes, may contain NULs; "" with
 *              len 0 for empty data); data NULL (len must then be 0) = the client's identity
 *              (zkl_config.identity), as zkl_lock_acquire() writes.
 * The other fields are zkl_lock_acquire()'s arguments. zkl_lock_acquire(c, r, p, t, acl, id) is
 * zkl_lock_acquire_ex with {r, p, t, acl, NULL, 0}. Events and errors as for zkl_lock_acquire(),
 * plus ZKL_EINVAL for a NULL args or id, data NULL with len not 0, or len > INT_MAX. (The server
 * refuses a request larger than its jute.maxbuffer, 1 MiB by default, by dropping the
 * connection: keep path + data well below it.) */
typedef struct zkl_lock_args {
    zkl_recipe recipe; /* ZKL_MUTEX, ZKL_READ, ZKL_WRITE or ZKL_LATCH */
    const char *path;
    int timeout_ms;
    int acl;
    const char *data;
    size_t len;
} zkl_lock_args;

ZKL_EXTERN int zkl_lock_acquire_ex(zkl_client *c, const zkl_lock_args *a, uint64_t *id);

/* Downgrade: while holding write acquisition `write_id` of a read-write lock, take its read side
 * at once (Curator 5.5+: a non-sequential read node carrying the writer's sequence, so no queued
 * writer can slip in between). One ACQUIRED or FAILED event follows; the write side stays held
 * until released. Errors: ZKL_ECLOSED, ZKL_ENOTFOUND (unknown id, not a write acquisition, or
 * its final event was already queued), ZKL_ENOTHELD (the write side is pending, releasing or
 * lost), ZKL_ENOMEM. */
ZKL_EXTERN int zkl_lock_downgrade(zkl_client *c, uint64_t write_id, uint64_t *id);

/* Start taking `qty` leases of a Curator InterProcessSemaphoreV2 at `path` (layout <path>/locks for
 * its internal mutex, <path>/leases for leases) allowing `max_leases` holders. All or none: one
 * ACQUIRED event when all qty leases are held, or FAILED (with nothing left behind). After
 * ACQUIRED, each lease is its own acquisition: see zkl_lease_ids(). timeout_ms as for locks.
 * Errors: ZKL_ECLOSED, ZKL_EINVAL (path, max_leases < 1, qty < 1 or qty > max_leases, acl id),
 * ZKL_ENOMEM. FAILED statuses: see "Errors" at the top. */
ZKL_EXTERN int zkl_semaphore_acquire(zkl_client *c, const char *path, int max_leases, int qty,
                                     int timeout_ms, int acl, uint64_t *id);

/* After ACQUIRED for a semaphore acquisition: write up to n lease ids (the first is `id` itself)
 * and return how many (0 before the grant, or after a failure while it still cleans up); each is
 * released with zkl_lock_release(). Errors: ZKL_ENOTFOUND (unknown id, or not a semaphore
 * acquisition). */
ZKL_EXTERN int zkl_lease_ids(zkl_client *c, uint64_t id, uint64_t *ids, int n);

/* Multi-lock (Curator InterProcessMultiLock), all or nothing. Components are acquired in the
 * order given; if one fails, those already held are released in reverse order and the multi-lock
 * fails with that component's status. Each component waits at most its own timeout_ms (-1: no
 * limit of its own), and all of them together at most timeout_ms (-1: none). One ACQUIRED or
 * FAILED event follows; then call zkl_multi_result() once. A shared timeout_ms of 0 fails at once
 * with ETIMEDOUT (it is a deadline, not "try once"; a component's own timeout_ms 0 does try once).
 * zkl_lock_cancel() and zkl_lock_abandon() accept the multi-lock's id.
 * Errors: ZKL_ECLOSED, ZKL_EINVAL (items NULL, n < 1, a path rejected by zkl_path_error(), a
 * recipe other than MUTEX/READ/WRITE where max_leases <= 0), ZKL_ENOMEM. A component's acl id is
 * checked when it starts: a bad one ends the multi-lock with FAILED/ZKL_EINVAL. */
typedef struct zkl_multi_item {
    zkl_recipe recipe; /* ZKL_MUTEX, ZKL_READ or ZKL_WRITE, ignored when max_leases > 0 */
    const char *path;
    int max_leases; /* > 0: one lease of the semaphore at path (1: a semaphore mutex) */
    int timeout_ms;
    int acl;
} zkl_multi_item;

/* flags for zkl_multi_acquire */
enum { ZKL_MULTI_ROLLBACK_GIVEN = 1 /* on failure release in the given order, not in reverse */ };

ZKL_EXTERN int zkl_multi_acquire(zkl_client *c, const zkl_multi_item *items, int n, int timeout_ms,
                                 int flags, uint64_t *id);

/* After the multi-lock's event: on ACQUIRED, write the components' acquisition ids (in item order;
 * each is then released on its own) and return their number; on FAILED, set *failed_index to the
 * component that failed and return 0 (failed_index may be NULL). Frees the multi-lock's own
 * record. Errors: ZKL_ENOTFOUND (unknown id, not a multi-lock, or already called). */
ZKL_EXTERN int zkl_multi_result(zkl_client *c, uint64_t id, uint64_t *ids, int n,
                                int *failed_index);

/* Release a held acquisition (or one semaphore lease). On ZKL_OK a RELEASED event follows once the
 * node is deleted (retried across connection loss while the session lives).
 * Errors: ZKL_ENOTFOUND (unknown id, a multi-lock id: release its components, an acquisition
 * whose final event was already queued, or any id after close), ZKL_ENOTHELD (pending, or
 * already releasing), ZKL_ELOST (the session ended while held; the acquisition is forgotten, no
 * event follows). */
ZKL_EXTERN int zkl_lock_release(zkl_client *c, uint64_t id);

/* Withdraw a pending acquisition or multi-lock: a FAILED event with ZKL_ECANCELED follows and the
 * queue node is deleted in the background. Errors: ZKL_ENOTFOUND (unknown id, or its final event
 * was already queued), ZKL_ENOTHELD (not pending any more: held, releasing or lost; release it). */
ZKL_EXTERN int zkl_lock_cancel(zkl_client *c, uint64_t id);

/* Release without waiting (for garbage collection paths): the node is deleted in the background
 * and no further event follows for this id. Works on pending, held and lost acquisitions and on
 * multi-locks (every component). Also forgets a plain operation's armed watch (no WATCH event
 * follows); a plain read not yet sent is not sent, one on its way is not sent again after a
 * connection loss (a write goes out as started). Errors: ZKL_ENOTFOUND (unknown id, or its
 * final event was already queued). */
ZKL_EXTERN int zkl_lock_abandon(zkl_client *c, uint64_t id);

#define ZKL_NODE_MAX 1200 /* longest node path: a 1024-byte lock path plus a protected name */

typedef struct zkl_lock_info {
    char node[ZKL_NODE_MAX]; /* full path of the queue node, "" while unknown */
    int64_t token;           /* fencing token: czxid of the node (0 until known; kept after LOST) */
    int held;                /* 1 while held (0 while pending, releasing, or after LOST) */
    int suspended;           /* 1 while the connection is lost */
    int ahead; /* nodes that sorted before this one at its first listing (the contenders it saw;
                  0 for an uncontended grant), -1 when it never listed (a downgrade's read side) */
} zkl_lock_info;

/* Fill *out for a live acquisition. Errors: ZKL_ENOTFOUND (unknown id, a multi-lock id, or its
 * final event (FAILED, RELEASED) was already queued). */
ZKL_EXTERN int zkl_lock_info_get(zkl_client *c, uint64_t id, zkl_lock_info *out);

/* Plain znode operations (used for participants, tests and examples). One ZKL_EV_OP_DONE follows
 * (statuses: see the event list above). Results are read with zkl_op_result_get() right after
 * next_event() returned the OP_DONE event and stay valid until the next call to next_event(),
 * process() or wait(). One started while disconnected is sent once connected; a session loss
 * ends it with ZKL_ESESSION, its timeout (timeout_ms > 0) with ZKL_ETIMEDOUT (a write's outcome
 * is then unknown: the server may still apply it). */
typedef enum {
    ZKL_OP_GET = 1,      /* data + stat */
    ZKL_OP_CHILDREN = 2, /* children names */
    ZKL_OP_EXISTS = 3,   /* stat */
    ZKL_OP_CREATE = 4,   /* created path (flags: ZKL_CREATE_*); data NULL with ZKL_OK when the
                            node was made but its name could not be copied (out of memory) */
    ZKL_OP_SET = 5,      /* stat */
    ZKL_OP_DELETE = 6,
    ZKL_OP_CHECK = 7 /* transactions only: the node exists (and has `version`, unless -1) */
} zkl_op_type;

/* CREATE flags. PARENTS makes every missing ancestor first, as containers with the same ACL,
 * pipelined ahead of the create, and makes them again (up to 10 times) when the server reaps one
 * before the node is in. */
enum {
    ZKL_CREATE_EPHEMERAL = 1,
    ZKL_CREATE_SEQUENTIAL = 2,
    ZKL_CREATE_CONTAINER = 4,
    ZKL_CREATE_PARENTS = 8
};

typedef struct zkl_op_args {
    zkl_op_type type;
    const char *path;
    const char *data; /* create/set */
    size_t len;
    int flags;      /* create: ZKL_CREATE_* */
    int version;    /* set/delete; -1 any */
    int acl;        /* create: an ACL id from zkl_client_acl; 0 = open to everyone */
    int timeout_ms; /* > 0: end with ZKL_ETIMEDOUT after this long; 0: no limit */
    int watch;      /* GET, EXISTS, CHILDREN: 1 arms a one-shot ZooKeeper watch (see below) */
    int64_t ttl_ms; /* CREATE: > 0 makes a TTL node (ZooKeeper's PERSISTENT[_SEQUENTIAL]_WITH_TTL:
                       the server deletes it once it has had no child for this long and was not
                       changed; not EPHEMERAL or CONTAINER). The server must run with
                       zookeeper.extendedTypesEnabled=true, else the create ends ZUNIMPLEMENTED. */
} zkl_op_args;

/* Watches. A GET, EXISTS or CHILDREN started with watch = 1 arms a one-shot watch on its path
 * when its result says the server set one: GET and CHILDREN with ZKL_OK, EXISTS with ZKL_OK or
 * ZNONODE (then it watches for the creation). Exactly one ZKL_EV_WATCH event with the same id
 * follows such an OP_DONE (and none follows any other result), queued by process() like every
 * event: status ZKL_WATCH_CREATED, _DELETED or _CHANGED (GET, EXISTS) or _CHILD (CHILDREN; also
 * _DELETED when the node itself goes) when the watch fires; ZKL_ESESSION when the session ends
 * first (the server drops a session's watches with it); ZKL_ECLOSED at zkl_client_close(). A
 * watch lives across connection loss (the ZooKeeper client sets it again on reconnect). The
 * path is the operation's own. Operations watching the same path and kind share one ZooKeeper
 * watch, and each gets its own event; every watch of a client is one watcher for the ZooKeeper
 * client, so their number costs no time when the connection is lost or made again.
 * zkl_lock_abandon(c, id) forgets an armed watch (or one a read still on its way will arm): no
 * event follows. When no other armed operation of the client watches that path for data (GET,
 * EXISTS) or for children (CHILDREN), as the abandoned one did, the ZooKeeper client drops the
 * watch locally too, so a reconnection no longer sets it again; the server's one-shot watch
 * stays until it fires (to no one) or the connection ends. */
enum {
    ZKL_WATCH_CREATED = 1, /* the values of ZooKeeper's ZOO_*_EVENT */
    ZKL_WATCH_DELETED = 2,
    ZKL_WATCH_CHANGED = 3,
    ZKL_WATCH_CHILD = 4
};

/* Errors: ZKL_ECLOSED, ZAUTHFAILED (the client is in ZKL_STATE_AUTH_FAILED), ZKL_EINVAL (path
 * NULL or not starting with '/', unknown type or flags, ACL id unknown, negative timeout, watch
 * not 0 or 1, or 1 on a write, ttl_ms < 0, or > 0 on anything but a persistent create; other
 * path problems come back as OP_DONE with ZBADARGUMENTS), ZKL_ENOMEM. */
ZKL_EXTERN int zkl_op_start(zkl_client *c, const zkl_op_args *args, uint64_t *id);

typedef struct zkl_op_result {
    int rc;
    const char *data; /* GET: node data (may be NULL for empty); CREATE: created path */
    size_t len;
    int nchildren; /* CHILDREN */
    const char *const *children;
    int64_t czxid, mzxid, pzxid, ephemeral_owner;
    int32_t version, num_children;
    int64_t ctime, mtime; /* ms since the epoch, server clock (create, last set) */
    int32_t cversion;     /* changes to the children: 0 for a node that never had a child */
} zkl_op_result;

/* Errors: ZKL_ENOTFOUND (id is not the operation whose OP_DONE event next_event() just returned).
 */
ZKL_EXTERN int zkl_op_result_get(zkl_client *c, uint64_t id, zkl_op_result *out);

/* Transactions: ZooKeeper's multi. All ops are applied in order, atomically, or none is.
 * One ZKL_EV_OP_DONE follows: ZOK, or the first failing op's error (read each op's outcome with
 * zkl_txn_result_get()). Ops: ZKL_OP_CREATE (flags EPHEMERAL/SEQUENTIAL/CONTAINER; no PARENTS),
 * ZKL_OP_SET, ZKL_OP_DELETE (version -1: any) and ZKL_OP_CHECK (the node exists with `version`,
 * or at all with -1). A transaction is a write: never retried by the core; a connection lost
 * while it was in flight ends it with ZCONNECTIONLOSS (its outcome unknown), a session loss with
 * ZKL_ESESSION, timeout_ms (> 0) with ZKL_ETIMEDOUT (outcome unknown if it was sent).
 * Errors: ZKL_ECLOSED, ZAUTHFAILED, ZKL_EINVAL (ops NULL, n < 1 or > ZKL_TXN_MAX, a path NULL or
 * not starting with '/', an unknown type, flags not allowed for the type, data NULL with len > 0,
 * an unknown ACL id, timeout_ms < 0), ZKL_ENOMEM. */
#define ZKL_TXN_MAX 1000
typedef struct zkl_txn_op {
    zkl_op_type type;
    const char *path;
    const char *data; /* create/set; NULL: no data */
    size_t len;
    int flags;   /* create: ZKL_CREATE_EPHEMERAL | _SEQUENTIAL | _CONTAINER; else 0 */
    int version; /* set/delete/check; -1 any */
    int acl;     /* create: an ACL id from zkl_client_acl; 0 = open */
} zkl_txn_op;

ZKL_EXTERN int zkl_txn_start(zkl_client *c, const zkl_txn_op *ops, int n, int timeout_ms,
                             uint64_t *id);

typedef struct zkl_txn_result {
    int rc;           /* this op's outcome (ZOK; the failing op's error; ZRUNTIMEINCONSISTENCY for
                         the ops the server skipped after it; the transaction's status for every
                         op when the server never answered) */
    const char *path; /* CREATE: the created node's path (with its sequence), else NULL */
    int32_t version;  /* SET: the node's new version */
    int64_t mzxid;    /* SET: the node's new mzxid */
    int sent;         /* 1 if the request may have reached the server while the session lived (then
                         a status in ZKL_OUTCOME_UNKNOWN_MAP leaves its outcome unknown); 0 if not: it
                         ended before it was handed to the ZooKeeper client (no connection), or the
                         client failed it with ZSESSIONEXPIRED (reported as ZKL_ESESSION): nothing was
                         applied */
} zkl_txn_result;

/* After the transaction's OP_DONE event (and before the next next_event(), process() or wait()):
 * write up to n op outcomes into out (in op order) and return the number of ops.
 * Errors: ZKL_ENOTFOUND (id is not the transaction whose OP_DONE event was just returned). */
ZKL_EXTERN int zkl_txn_result_get(zkl_client *c, uint64_t id, zkl_txn_result *out, int n);

/* Testing aid: expire a session from outside by opening a second handle with the same id and
 * password and closing it. Blocks up to timeout_ms while connecting, then in zookeeper_close()
 * (up to 4.5 s, see "Blocking"). Touches no zkl_client (call it from any thread).
 * Errors: ZKL_ESYSTEM (the ZooKeeper handle could not be made: bad or unresolvable hosts),
 * ZKL_ESESSION (the server says the session is already gone), ZKL_ETIMEDOUT (no connection
 * within timeout_ms). */
ZKL_EXTERN int zkl_expire_session(const char *hosts, int64_t session_id, const char passwd[16],
                                  int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
