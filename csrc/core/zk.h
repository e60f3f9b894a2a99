/* zk.h - the seam in front of the ZooKeeper C client.
 *
 * Every call the core makes into libzookeeper_st, and its clock, goes through one table of
 * functions. The real table (zk_real.c) is the library itself; the scripted recipe tests
 * (tests/script/) plug in their own, which records each request and answers it with replies,
 * watch events and session transitions in an order the test chooses. Completions and watchers
 * must still run only inside `process`, `interest` or `close`, as the real client runs them. */
#ifndef ZKL_ZK_H
#define ZKL_ZK_H

#include <stdint.h>
#include <sys/time.h>
#include <zookeeper/zookeeper.h>

typedef struct zkl_zk {
    /* session */
    zhandle_t *(*init)(const char *hosts, watcher_fn watcher, int recv_timeout,
                       const clientid_t *id, void *context, int flags, log_callback_fn log);
    int (*close)(zhandle_t *zh);
    int (*interest)(zhandle_t *zh, int *fd, int *interest, struct timeval *tv);
    int (*process)(zhandle_t *zh, int events);
    int (*state)(zhandle_t *zh);
    int (*recv_timeout)(zhandle_t *zh);
    const clientid_t *(*client_id)(zhandle_t *zh);
    const void *(*get_context)(zhandle_t *zh);
    int (*set_servers_resolution_delay)(zhandle_t *zh, int delay_ms);
    void (*set_debug_level)(ZooLogLevel level);
    int (*add_auth)(zhandle_t *zh, const char *scheme, const char *cert, int len,
                    void_completion_t done, const void *data);
    /* requests */
    int (*acreate2)(zhandle_t *zh, const char *path, const char *value, int len,
                    const struct ACL_vector *acl, int mode, string_stat_completion_t done,
                    const void *data);
    int (*adelete)(zhandle_t *zh, const char *path, int version, void_completion_t done,
                   const void *data);
    int (*aexists)(zhandle_t *zh, const char *path, int watch, stat_completion_t done,
                   const void *data);
    int (*aget)(zhandle_t *zh, const char *path, int watch, data_completion_t done,
                const void *data);
    int (*awget)(zhandle_t *zh, const char *path, watcher_fn watcher, void *wctx,
                 data_completion_t done, const void *data);
    int (*aget_children)(zhandle_t *zh, const char *path, int watch, strings_completion_t done,
                         const void *data);
    int (*awget_children)(zhandle_t *zh, const char *path, watcher_fn watcher, void *wctx,
                          strings_completion_t done, const void *data);
    int (*aset)(zhandle_t *zh, const char *path, const char *buf, int len, int version,
                stat_completion_t done, const void *data);
    int (*amulti)(zhandle_t *zh, int count, const zoo_op_t *ops, zoo_op_result_t *results,
                  void_completion_t done, const void *data);
    /* zookeeper.h declares the completion as void_completion_t *; the client calls it as a
     * plain void_completion_t (see queue.c, zkl__remove_watches) */
    int (*aremove_all_watches)(zhandle_t *zh, const char *path, ZooWatcherType type, int local,
                               void_completion_t *done, const void *data);
    /* monotonic milliseconds */
    int64_t (*now_ms)(void);
    /* exists with a watcher of our own (plain-op watches, plain.c) */
    int (*awexists)(zhandle_t *zh, const char *path, watcher_fn watcher, void *wctx,
                    stat_completion_t done, const void *data);
    /* create of a TTL node (plain.c, zkl_op_args.ttl_ms) */
    int (*acreate2_ttl)(zhandle_t *zh, const char *path, const char *value, int len,
                        const struct ACL_vector *acl, int mode, int64_t ttl,
                        string_stat_completion_t done, const void *data);
    /* remove one watcher (function and context) of the path; the core only uses it with local
     * set: the client forgets the watcher at once, sends nothing and runs no completion
     * (plain.c: a watch nobody waits for leaves the SetWatches of the next reconnection) */
    int (*aremove_watches)(zhandle_t *zh, const char *path, ZooWatcherType type, watcher_fn watcher,
                           void *wctx, int local, void_completion_t *done, const void *data);
} zkl_zk;

/* the ZooKeeper C client itself, and CLOCK_MONOTONIC */
extern const zkl_zk zkl__zk_real;

/* zkl_client_new on another table (the scripted tests' fake server) */
struct zkl_config;
struct zkl_client;
int zkl__client_new_zk(const struct zkl_config *cfg, const zkl_zk *zk, struct zkl_client **out);

#endif
