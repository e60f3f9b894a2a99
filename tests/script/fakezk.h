/* fakezk.h - a scripted ZooKeeper behind the core's zkl_zk table (csrc/core/zk.h).
 *
 * The fake records every request the core makes (kind, path, data, mode, watch) in order. The
 * test inspects them and answers any of them, in any order, with a chosen result; it fires watch
 * events on armed watchers, drives the session (connect, connection loss, expiry) and owns the
 * clock. Nothing reaches the core directly: answers, watch events and session transitions are
 * queued and delivered one per `process()` call, inside the table's process/close, as the real
 * client does; an eventfd (returned by `interest`) is readable while something is queued.
 *
 * Two ways to answer:
 *   scripted: fz_create_ok / fz_children_ok / fz_data_ok / fz_stat_ok / fz_reply(rc)
 *   tree:     fz_serve(req) / fz_serve_all() answer from a small in-memory znode tree (sequential
 *             names, containers, NONODE/NODEEXISTS/NOTEMPTY, watches fired on changes).
 * Both keep `live`: the nodes this client created that nobody has deleted (cleared when the
 * session ends), so a test can check that nothing was left behind.
 *
 * One fake per process (the table's clock has no context): fz_reset() before each test. */
#ifndef FAKEZK_H
#define FAKEZK_H

#include <stdint.h>
#include <stdio.h>

#include "zk.h"

enum {
    FZ_CREATE = 1,
    FZ_DELETE,
    FZ_EXISTS,
    FZ_GET,
    FZ_CHILDREN,
    FZ_SET,
    FZ_MULTI,
    FZ_REMOVE_WATCHES,
    FZ_AUTH
};

/* fz_req.status */
enum { FZ_PENDING = 0, FZ_ANSWERED = 1, FZ_DONE = 2 };

typedef struct fz_req {
    int index;  /* order of issue, from 0 */
    int kind;   /* FZ_* */
    char *path; /* as sent (a sequential create's path has no sequence yet) */
    char *data; /* create/set payload (NUL-terminated copy), else NULL */
    int len;
    int mode;        /* create: ZOO_* mode; delete/set: version; remove-watches: ZWATCHTYPE_* */
    int watch;       /* 1: arms a watch if answered OK (exists: also on NONODE) */
    int connected;   /* the link was up when the core sent it */
    int64_t session; /* session id of the handle it went out on (0 before the first connect) */
    int status;      /* FZ_PENDING, FZ_ANSWERED (queued), FZ_DONE (completion ran) */
    int rc;          /* the result its completion got, once FZ_DONE */
    char *created;   /* create answered OK: the full name */
    struct fz_req_private *priv;
} fz_req;

/* the table to hand to zkl__client_new_zk */
extern const zkl_zk fz_table;

void fz_reset(void);   /* forget everything (requests, tree, watches, clock back to 1000000) */
void fz_dump(FILE *f); /* the request log, for debugging a test */

/* clock */
int64_t fz_now(void);
void fz_advance(int64_t ms); /* only the clock; the test calls zkl_client_process itself */

/* requests */
int fz_nreqs(void);
fz_req *fz_req_at(int i);
fz_req *fz_next(void);   /* oldest request the test has not taken yet (a cursor), or NULL */
int fz_untaken(void);    /* how many fz_next() would still return */
int fz_unanswered(void); /* requests neither answered nor completed */
int fz_queued(void);     /* deliveries waiting for process() */
const char *fz_base(const char *path); /* text after the last '/' */

/* scripted answers: 0, or -1 if the request was already answered or completed */
int fz_reply(fz_req *r, int rc); /* any kind, empty payload */
/* the answer is lost: nothing is delivered; the next connection loss (fz_disconnect) fails it
 * with ZCONNECTIONLOSS, though a tree change made with fz_tree_apply stays */
int fz_drop(fz_req *r);
int fz_create_ok(fz_req *r, int seq, int64_t czxid); /* sequential: path + %010d seq */
int fz_create_ok_owner(fz_req *r, int seq, int64_t czxid, int64_t owner); /* ephemeralOwner */
int fz_children_ok(fz_req *r, const char *const *names);                  /* NULL-terminated */
int fz_children_v(fz_req *r, ...);                                        /* names..., NULL */
int fz_data_ok(fz_req *r, const char *data, int64_t czxid);
/* the version in the stat of r's next scripted answer (get, exists, set) */
void fz_stat_version(fz_req *r, int version);
int fz_data_ok_len(fz_req *r, const char *data, int len, int64_t czxid); /* any bytes */
int fz_stat_ok(fz_req *r, int64_t czxid); /* an ephemeral node of r's own session */
int fz_stat_owner(fz_req *r, int64_t czxid, int64_t owner); /* ... of session `owner` */

/* multi (a transaction): the ops the core sent (type ZOO_CREATE_OP, ZOO_DELETE_OP,
 * ZOO_SETDATA_OP, ZOO_CHECK_OP; version -1 for a create), readable while it is unanswered, and
 * its answer: rcs[i] for op i (the multi's own rc is the first that is not ZOK); a create that is
 * ZOK gets its path, + %010d seq when sequential */
int fz_multi_n(const fz_req *r);
int fz_multi_op(const fz_req *r, int i, int *type, const char **path, int *version);
int fz_multi_answer(fz_req *r, const int *rcs, int seq);

/* watches: fire an event (ZOO_DELETED_EVENT, ZOO_CHANGED_EVENT, ZOO_CHILD_EVENT,
 * ZOO_CREATED_EVENT) on the armed one-shot watchers of path; returns how many watcher calls it
 * made (one per distinct function and context, as the C client merges them) */
int fz_fire(int type, const char *path);
int fz_armed(const char *path); /* watchers armed on path (any kind) */
int fz_armed_total(void);
/* distinct (function, context) pairs among the armed watchers: the list the C client builds,
 * with a linear search per pair, on every session event */
int fz_watchers(void);

/* the next remove-watches request is refused synchronously with rc (ZNOWATCHER, as the
 * ZooKeeper client does when no watcher of ours is on the path): no completion will run */
void fz_refuse_next_remove(int rc);

/* session (queued like answers) */
void fz_connect(void); /* CONNECTED: a new session on a fresh handle, else the same session */
/* CONNECTED on the same handle, but with a session other than the one it had (the old one is
 * gone with its ephemeral nodes) */
void fz_connect_new_session(void);
void fz_disconnect(
    void);               /* connection loss: CONNECTING, unanswered requests fail ZCONNECTIONLOSS */
void fz_expire(void);    /* EXPIRED: unanswered requests fail ZSESSIONEXPIRED, watches dropped */
void fz_auth_fail(void); /* AUTH_FAILED: unanswered requests fail ZAUTHFAILED, watches dropped */
void fz_drop_link(void); /* the link goes down silently (no event): for tearing down */
int fz_state(void);      /* zoo_state of the current handle, 0 when none */
int64_t fz_session(void); /* current session id */
int fz_handles_opened(void);
int fz_handles_closed(void);
int fz_handle_open(void); /* 1 while the core holds an open handle */

/* tree server */
int fz_serve(fz_req *r); /* answer r from the tree (applying creates/deletes/sets) */
int fz_serve_all(void);  /* fz_serve every unanswered request, oldest first; returns how many */
int fz_tree_apply(fz_req *r, int *rc, char **name);     /* apply r to the tree without answering */
int fz_tree_add(const char *path, int ephemeral_other); /* a node (of another session if 1) */
int fz_tree_del(const char *path);                      /* delete a node, firing its watches */
int fz_tree_has(const char *path);
int fz_tree_children(const char *path);

/* The server applies r (a create, delete or set; a multi: each of its ops, checks ignored, in
 * order, without the all-or-none rollback) to the tree, and its answer is lost: the request
 * fails with rc (ZOPERATIONTIMEOUT, ZCONNECTIONLOSS), as the ZooKeeper client fails requests in
 * flight. 0, or -1 if r was already answered or completed. */
int fz_apply_then_fail(fz_req *r, int rc);

/* nodes this client created and nobody deleted yet (this session) */
int fz_live(void);
const char *fz_live_at(int i);

#endif
