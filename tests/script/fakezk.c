/* fakezk.c - the scripted ZooKeeper (see fakezk.h). */
#define _GNU_SOURCE
#include "fakezk.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ------------------------------------------------------------------ state */

struct _zhandle {
    int gen;
    int state;
    int ever_connected;
    clientid_t cid;
    watcher_fn watcher;
    void *context;
    int timeout;
};

struct fz_req_private {
    int handle; /* generation of the handle it went out on */
    union {
        string_stat_completion_t ss;
        void_completion_t v;
        stat_completion_t st;
        data_completion_t d;
        strings_completion_t strs;
    } done;
    const void *ctx;
    zoo_op_result_t *mresults; /* a multi: the core's result slots, as long as its ops */
    watcher_fn wfn;            /* NULL with watch = 1: the handle's default watcher */
    void *wctx;
    /* the answer */
    struct Stat stat;
    char **children;
    int nchildren;
    char *data;
    int len;
    /* a multi: the core's ops (they live as long as the core's transaction) */
    const zoo_op_t *mops;
    int mcount;
};

enum { W_DATA = 1, W_EXIST, W_CHILD };

typedef struct wtch {
    char *path;
    int kind;
    watcher_fn fn;
    void *ctx;
} wtch;

enum { IT_REPLY = 1, IT_WATCH, IT_UP, IT_UP_NEW, IT_DOWN, IT_EXPIRE, IT_AUTH_FAILED };

typedef struct item {
    struct item *next;
    int type;
    int handle;
    fz_req *req;
    int ev;
    char *path;
    watcher_fn fn;
    void *ctx;
} item;

typedef struct node {
    char *path;
    char *data;
    int len;
    int64_t czxid, mzxid, owner;
    int version, cversion;
    int mode;
} node;

static struct {
    int inited;
    int64_t now;
    int efd, signaled;
    zhandle_t *zh;
    int handle_gen, opened, closed;
    int64_t next_session;
    fz_req **reqs;
    int nreqs, capreqs, taken;
    item *head, *tail;
    wtch *watches;
    int nwatches, capwatches;
    node *nodes;
    int nnodes, capnodes;
    int64_t zxid;
    char **live;
    int nlive, caplive;
    int refuse_remove; /* the next remove-watches call returns this at once (0: none) */
} F;

static void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) abort();
    return p;
}

static char *xstrdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

#define GROW(arr, n, cap)                                                                          \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? (cap)*2 : 16;                                                          \
            void *p_ = realloc((arr), (size_t)(cap) * sizeof *(arr));                              \
            if (!p_) abort();                                                                      \
            (arr) = p_;                                                                            \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------ fd */

static void sync_fd(void) {
    if (F.efd < 0) F.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (F.head && !F.signaled) {
        uint64_t one = 1;
        if (write(F.efd, &one, sizeof one) == sizeof one) F.signaled = 1;
    } else if (!F.head && F.signaled) {
        uint64_t v;
        if (read(F.efd, &v, sizeof v) == sizeof v) F.signaled = 0;
    }
}

static void push(item *it) {
    it->next = NULL;
    if (F.tail)
        F.tail->next = it;
    else
        F.head = it;
    F.tail = it;
    sync_fd();
}

static item *new_item(int type) {
    item *it = xmalloc(sizeof *it);
    it->type = type;
    it->handle = F.zh ? F.zh->gen : 0;
    return it;
}

static void item_free(item *it) {
    free(it->path);
    free(it);
}

/* ------------------------------------------------------------------ live nodes */

static void live_add(const char *path) {
    GROW(F.live, F.nlive, F.caplive);
    F.live[F.nlive++] = xstrdup(path);
}

static void live_del(const char *path) {
    for (int i = 0; i < F.nlive; i++)
        if (strcmp(F.live[i], path) == 0) {
            free(F.live[i]);
            F.live[i] = F.live[--F.nlive];
            return;
        }
}

static void live_clear(void) {
    for (int i = 0; i < F.nlive; i++)
        free(F.live[i]);
    F.nlive = 0;
}

int fz_live(void) {
    return F.nlive;
}
const char *fz_live_at(int i) {
    return i >= 0 && i < F.nlive ? F.live[i] : NULL;
}

/* ------------------------------------------------------------------ tree */

static void tree_drop_ephemerals(int64_t owner);

static void watches_clear(void) {
    for (int i = 0; i < F.nwatches; i++)
        free(F.watches[i].path);
    F.nwatches = 0;
}

static void req_free(fz_req *r) {
    struct fz_req_private *p = r->priv;
    for (int i = 0; i < p->nchildren; i++)
        free(p->children[i]);
    free(p->children);
    free(p->data);
    free(p);
    free(r->path);
    free(r->data);
    free(r->created);
    free(r);
}

void fz_reset(void) {
    while (F.head) {
        item *it = F.head;
        F.head = it->next;
        item_free(it);
    }
    F.tail = NULL;
    for (int i = 0; i < F.nreqs; i++)
        req_free(F.reqs[i]);
    free(F.reqs);
    watches_clear();
    free(F.watches);
    for (int i = 0; i < F.nnodes; i++) {
        free(F.nodes[i].path);
        free(F.nodes[i].data);
    }
    free(F.nodes);
    live_clear();
    free(F.live);
    free(F.zh);
    int efd = F.inited ? F.efd : -1; /* one eventfd for the whole run */
    if (efd >= 0 && F.signaled) {
        uint64_t v;
        if (read(efd, &v, sizeof v) != sizeof v) abort();
    }
    memset(&F, 0, sizeof F);
    F.inited = 1;
    F.efd = efd;
    F.now = 1000000;
    F.next_session = 0x100;
    F.zxid = 0x1000;
    sync_fd();
}

int64_t fz_now(void) {
    return F.now;
}
void fz_advance(int64_t ms) {
    F.now += ms;
}

/* ------------------------------------------------------------------ requests */

int fz_nreqs(void) {
    return F.nreqs;
}
fz_req *fz_req_at(int i) {
    return i >= 0 && i < F.nreqs ? F.reqs[i] : NULL;
}
fz_req *fz_next(void) {
    return F.taken < F.nreqs ? F.reqs[F.taken++] : NULL;
}
int fz_untaken(void) {
    return F.nreqs - F.taken;
}

int fz_unanswered(void) {
    int n = 0;
    for (int i = 0; i < F.nreqs; i++)
        n += F.reqs[i]->status == FZ_PENDING;
    return n;
}

int fz_queued(void) {
    int n = 0;
    for (item *it = F.head; it; it = it->next)
        n++;
    return n;
}

const char *fz_base(const char *path) {
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path;
}

static const char *kind_name(int k) {
    static const char *n[] = {"?",        "create", "delete", "exists",        "get",
                              "children", "set",    "multi",  "removeWatches", "auth"};
    return k >= 1 && k <= FZ_AUTH ? n[k] : "?";
}

void fz_dump(FILE *f) {
    for (int i = 0; i < F.nreqs; i++) {
        fz_req *r = F.reqs[i];
        fprintf(f, "  #%d %s %s mode=%d watch=%d status=%d rc=%d%s%s\n", i, kind_name(r->kind),
                r->path ? r->path : "-", r->mode, r->watch, r->status, r->rc,
                r->created ? " -> " : "", r->created ? r->created : "");
    }
}

static fz_req *record(zhandle_t *zh, int kind, const char *path, const void *ctx) {
    fz_req *r = xmalloc(sizeof *r);
    r->priv = xmalloc(sizeof *r->priv);
    r->index = F.nreqs;
    r->kind = kind;
    r->path = xstrdup(path);
    r->connected = zh->state == ZOO_CONNECTED_STATE;
    r->session = zh->cid.client_id;
    r->priv->handle = zh->gen;
    r->priv->ctx = ctx;
    GROW(F.reqs, F.nreqs, F.capreqs);
    F.reqs[F.nreqs++] = r;
    return r;
}

static int usable(zhandle_t *zh) {
    return zh && zh == F.zh && zh->state != ZOO_EXPIRED_SESSION_STATE;
}

/* ------------------------------------------------------------------ watches */

static void arm(fz_req *r, int kind) {
    zhandle_t *zh = F.zh;
    watcher_fn fn = r->priv->wfn ? r->priv->wfn : zh->watcher;
    void *ctx = r->priv->wfn ? r->priv->wctx : zh->context;
    for (int i = 0; i < F.nwatches; i++) /* the client keeps one watcher per (fn, ctx) and path */
        if (F.watches[i].kind == kind && F.watches[i].fn == fn && F.watches[i].ctx == ctx &&
            strcmp(F.watches[i].path, r->path) == 0)
            return;
    GROW(F.watches, F.nwatches, F.capwatches);
    F.watches[F.nwatches].path = xstrdup(r->path);
    F.watches[F.nwatches].kind = kind;
    F.watches[F.nwatches].fn = fn;
    F.watches[F.nwatches].ctx = ctx;
    F.nwatches++;
}

/* Whether (fn, ctx) is among the first n watches of list (the C client's watchers are told
 * apart by function and context only). */
static int seen_pair(const wtch *list, int n, watcher_fn fn, void *ctx) {
    for (int i = 0; i < n; i++)
        if (list[i].fn == fn && list[i].ctx == ctx) return 1;
    return 0;
}

/* One call per distinct (fn, ctx) among the hit watchers, as the C client's collectWatchers
 * merges the data, exists and child watchers of the path into one list. */
int fz_fire(int type, const char *path) {
    int n = 0;
    wtch *called = xmalloc((size_t)(F.nwatches ? F.nwatches : 1) * sizeof *called);
    for (int i = 0; i < F.nwatches;) {
        wtch *w = &F.watches[i];
        int hit =
            strcmp(w->path, path) == 0 &&
            ((type == ZOO_DELETED_EVENT) || (type == ZOO_CHANGED_EVENT && w->kind != W_CHILD) ||
             (type == ZOO_CREATED_EVENT && w->kind == W_EXIST) ||
             (type == ZOO_CHILD_EVENT && w->kind == W_CHILD));
        if (!hit) {
            i++;
            continue;
        }
        if (!seen_pair(called, n, w->fn, w->ctx)) {
            item *it = new_item(IT_WATCH);
            it->ev = type;
            it->path = xstrdup(path);
            it->fn = w->fn;
            it->ctx = w->ctx;
            push(it);
            called[n].fn = w->fn;
            called[n].ctx = w->ctx;
            n++;
        }
        free(w->path);
        F.watches[i] = F.watches[--F.nwatches];
    }
    free(called);
    return n;
}

int fz_watchers(void) {
    int n = 0;
    wtch *pairs = xmalloc((size_t)(F.nwatches ? F.nwatches : 1) * sizeof *pairs);
    for (int i = 0; i < F.nwatches; i++)
        if (!seen_pair(pairs, n, F.watches[i].fn, F.watches[i].ctx)) pairs[n++] = F.watches[i];
    free(pairs);
    return n;
}

int fz_armed(const char *path) {
    int n = 0;
    for (int i = 0; i < F.nwatches; i++)
        n += strcmp(F.watches[i].path, path) == 0;
    return n;
}

int fz_armed_total(void) {
    return F.nwatches;
}

static void remove_watches(const char *path, int wtype) {
    for (int i = 0; i < F.nwatches;) {
        wtch *w = &F.watches[i];
        int kindok = wtype == ZWATCHTYPE_ANY || (wtype == ZWATCHTYPE_CHILD && w->kind == W_CHILD) ||
                     (wtype == ZWATCHTYPE_DATA && w->kind != W_CHILD);
        if (kindok && strcmp(w->path, path) == 0) {
            free(w->path);
            F.watches[i] = F.watches[--F.nwatches];
        } else {
            i++;
        }
    }
}

/* ------------------------------------------------------------------ answers */

static int answer(fz_req *r, int rc) {
    if (!r || r->status != FZ_PENDING) return -1;
    r->status = FZ_ANSWERED;
    r->rc = rc;
    /* the server registers a watch when it processes the request */
    if (r->watch && F.zh && r->priv->handle == F.zh->gen) {
        if (r->kind == FZ_EXISTS && (rc == ZOK || rc == ZNONODE))
            arm(r, rc == ZOK ? W_DATA : W_EXIST);
        else if (r->kind == FZ_GET && rc == ZOK)
            arm(r, W_DATA);
        else if (r->kind == FZ_CHILDREN && rc == ZOK)
            arm(r, W_CHILD);
    }
    if (r->kind == FZ_REMOVE_WATCHES && rc == ZOK) remove_watches(r->path, r->mode);
    if (r->kind == FZ_DELETE && (rc == ZOK || rc == ZNONODE)) live_del(r->path);
    item *it = new_item(IT_REPLY);
    it->handle = r->priv->handle;
    it->req = r;
    push(it);
    return 0;
}

int fz_reply(fz_req *r, int rc) {
    return answer(r, rc);
}

int fz_drop(fz_req *r) {
    if (!r || r->status != FZ_PENDING) return -1;
    r->status = FZ_ANSWERED; /* no delivery: the link's loss fails it (ZCONNECTIONLOSS) */
    return 0;
}

int fz_multi_n(const fz_req *r) {
    return r && r->kind == FZ_MULTI ? r->priv->mcount : 0;
}

int fz_multi_op(const fz_req *r, int i, int *type, const char **path, int *version) {
    if (!r || r->kind != FZ_MULTI || i < 0 || i >= r->priv->mcount || !r->priv->mops) return -1;
    const zoo_op_t *op = &r->priv->mops[i];
    *type = op->type;
    *version = -1;
    switch (op->type) {
    case ZOO_CREATE_OP:
    case ZOO_CREATE_CONTAINER_OP:
    case ZOO_CREATE_TTL_OP:
        *path = op->create_op.path;
        break;
    case ZOO_DELETE_OP:
        *path = op->delete_op.path;
        *version = op->delete_op.version;
        break;
    case ZOO_SETDATA_OP:
        *path = op->set_op.path;
        *version = op->set_op.version;
        break;
    default:
        *path = op->check_op.path;
        *version = op->check_op.version;
        break;
    }
    return 0;
}

int fz_multi_answer(fz_req *r, const int *rcs, int seq) {
    if (!r || r->kind != FZ_MULTI || r->status != FZ_PENDING) return -1;
    struct fz_req_private *p = r->priv;
    int rc = ZOK;
    for (int i = 0; i < p->mcount; i++) {
        const zoo_op_t *op = &p->mops[i];
        if (p->mresults) {
            p->mresults[i].err = rcs[i];
            if (rcs[i] == ZOK && op->type == ZOO_SETDATA_OP && op->set_op.stat)
                p->mresults[i].stat = op->set_op.stat;
        }
        if (rcs[i] == ZOK && (op->type == ZOO_CREATE_OP || op->type == ZOO_CREATE_CONTAINER_OP) &&
            op->create_op.buf && op->create_op.buflen > 0) {
            if (op->create_op.flags & ZOO_SEQUENCE)
                snprintf(op->create_op.buf, (size_t)op->create_op.buflen, "%s%010d",
                         op->create_op.path, seq);
            else
                snprintf(op->create_op.buf, (size_t)op->create_op.buflen, "%s", op->create_op.path);
        }
        if (rc == ZOK && rcs[i] != ZOK) rc = rcs[i];
    }
    return answer(r, rc);
}

int fz_create_ok(fz_req *r, int seq, int64_t czxid) {
    if (!r || r->kind != FZ_CREATE || r->status != FZ_PENDING) return -1;
    char buf[2048];
    if (r->mode & ZOO_SEQUENCE)
        snprintf(buf, sizeof buf, "%s%010d", r->path, seq);
    else
        snprintf(buf, sizeof buf, "%s", r->path);
    r->created = xstrdup(buf);
    r->priv->stat.czxid = r->priv->stat.mzxid = czxid;
    r->priv->stat.ephemeralOwner = (r->mode & ZOO_EPHEMERAL) ? r->session : 0;
    if (r->mode & ZOO_EPHEMERAL) live_add(buf);
    return answer(r, ZOK);
}

int fz_create_ok_owner(fz_req *r, int seq, int64_t czxid, int64_t owner) {
    if (!r || r->kind != FZ_CREATE || r->status != FZ_PENDING) return -1;
    r->priv->stat.ephemeralOwner = owner; /* kept: fz_create_ok sets it only for ephemerals */
    int rc = fz_create_ok(r, seq, czxid);
    r->priv->stat.ephemeralOwner = owner;
    return rc;
}

int fz_children_ok(fz_req *r, const char *const *names) {
    if (!r || r->kind != FZ_CHILDREN || r->status != FZ_PENDING) return -1;
    int n = 0;
    while (names && names[n])
        n++;
    struct fz_req_private *p = r->priv;
    p->children = xmalloc((size_t)(n ? n : 1) * sizeof *p->children);
    for (int i = 0; i < n; i++)
        p->children[i] = xstrdup(names[i]);
    p->nchildren = n;
    return answer(r, ZOK);
}

int fz_children_v(fz_req *r, ...) {
    const char *names[256];
    int n = 0;
    va_list ap;
    va_start(ap, r);
    for (const char *s; n < 255 && (s = va_arg(ap, const char *)) != NULL;)
        names[n++] = s;
    va_end(ap);
    names[n] = NULL;
    return fz_children_ok(r, names);
}

int fz_data_ok(fz_req *r, const char *data, int64_t czxid) {
    if (!r || r->kind != FZ_GET || r->status != FZ_PENDING) return -1;
    r->priv->data = xstrdup(data ? data : "");
    r->priv->len = data ? (int)strlen(data) : 0;
    r->priv->stat.czxid = czxid;
    return answer(r, ZOK);
}

void fz_stat_version(fz_req *r, int version) {
    if (r && r->priv) r->priv->stat.version = version;
}

int fz_data_ok_len(fz_req *r, const char *data, int len, int64_t czxid) {
    if (!r || r->kind != FZ_GET || r->status != FZ_PENDING || len < 0) return -1;
    r->priv->data = xmalloc((size_t)len + 1);
    if (len > 0) memcpy(r->priv->data, data, (size_t)len);
    r->priv->len = len;
    r->priv->stat.czxid = czxid;
    return answer(r, ZOK);
}

int fz_stat_owner(fz_req *r, int64_t czxid, int64_t owner) {
    if (!r || (r->kind != FZ_EXISTS && r->kind != FZ_SET) || r->status != FZ_PENDING) return -1;
    r->priv->stat.czxid = czxid;
    r->priv->stat.ephemeralOwner = owner;
    return answer(r, ZOK);
}

int fz_stat_ok(fz_req *r, int64_t czxid) {
    return fz_stat_owner(r, czxid, r ? r->session : 0);
}

/* Run r's completion with rc (its own answer if rc is the one recorded). */
static void complete(fz_req *r, int rc, int use_answer) {
    struct fz_req_private *p = r->priv;
    r->status = FZ_DONE;
    r->rc = rc;
    int ok = use_answer && rc == ZOK;
    switch (r->kind) {
    case FZ_CREATE:
        if (p->done.ss) p->done.ss(rc, ok ? r->created : NULL, ok ? &p->stat : NULL, p->ctx);
        break;
    case FZ_EXISTS:
    case FZ_SET:
        if (p->done.st) p->done.st(rc, ok ? &p->stat : NULL, p->ctx);
        break;
    case FZ_GET:
        if (p->done.d)
            p->done.d(rc, ok ? p->data : NULL, ok ? p->len : -1, ok ? &p->stat : NULL, p->ctx);
        break;
    case FZ_CHILDREN: {
        struct String_vector v = {p->nchildren, p->children};
        if (p->done.strs) p->done.strs(rc, ok ? &v : NULL, p->ctx);
        break;
    }
    default:
        if (p->done.v) p->done.v(rc, p->ctx);
        break;
    }
}

/* Fail every request of the current handle that has not completed yet. */
static void fail_outstanding(int rc) {
    for (int i = 0; i < F.nreqs; i++) {
        fz_req *r = F.reqs[i];
        if (r->status != FZ_DONE && F.zh && r->priv->handle == F.zh->gen) complete(r, rc, 0);
    }
}

/* Every watcher of the handle hears a session event, once per distinct (fn, ctx), as in the C
 * client. */
static void session_event(zhandle_t *zh, int state) {
    int n = 0;
    wtch *copy = xmalloc((size_t)(F.nwatches ? F.nwatches : 1) * sizeof *copy);
    for (int i = 0; i < F.nwatches; i++)
        if (!seen_pair(copy, n, F.watches[i].fn, F.watches[i].ctx)) copy[n++] = F.watches[i];
    if (zh->watcher) zh->watcher(zh, ZOO_SESSION_EVENT, state, "", zh->context);
    for (int i = 0; i < n && zh == F.zh; i++)
        copy[i].fn(zh, ZOO_SESSION_EVENT, state, "", copy[i].ctx);
    free(copy);
}

/* ------------------------------------------------------------------ session */

static void doom_pending(void) {
    /* requests not answered yet cannot be answered any more: the link is going */
    for (int i = 0; i < F.nreqs; i++)
        if (F.reqs[i]->status == FZ_PENDING) F.reqs[i]->status = FZ_ANSWERED;
}

void fz_connect(void) {
    push(new_item(IT_UP));
}

void fz_refuse_next_remove(int rc) {
    F.refuse_remove = rc;
}

void fz_connect_new_session(void) {
    push(new_item(IT_UP_NEW));
}

void fz_disconnect(void) {
    doom_pending();
    push(new_item(IT_DOWN));
}

void fz_expire(void) {
    doom_pending();
    push(new_item(IT_EXPIRE));
}

void fz_auth_fail(void) {
    doom_pending();
    push(new_item(IT_AUTH_FAILED));
}

void fz_drop_link(void) {
    if (F.zh) F.zh->state = ZOO_CONNECTING_STATE;
}

int fz_state(void) {
    return F.zh ? F.zh->state : 0;
}
int64_t fz_session(void) {
    return F.zh ? F.zh->cid.client_id : 0;
}
int fz_handles_opened(void) {
    return F.opened;
}
int fz_handles_closed(void) {
    return F.closed;
}
int fz_handle_open(void) {
    return F.zh != NULL;
}

/* ------------------------------------------------------------------ the table */

static zhandle_t *t_init(const char *hosts, watcher_fn watcher, int recv_timeout,
                         const clientid_t *id, void *context, int flags, log_callback_fn log) {
    (void)hosts, (void)id, (void)flags, (void)log;
    if (F.zh) return NULL; /* one handle at a time */
    zhandle_t *zh = xmalloc(sizeof *zh);
    zh->gen = ++F.handle_gen;
    zh->state = ZOO_CONNECTING_STATE;
    zh->watcher = watcher;
    zh->context = context;
    zh->timeout = recv_timeout;
    F.zh = zh;
    F.opened++;
    sync_fd();
    return zh;
}

static int t_close(zhandle_t *zh) {
    if (!zh || zh != F.zh) return ZBADARGUMENTS;
    /* deliveries for this handle are dropped; whatever has not completed gets ZCLOSING */
    item **pp = &F.head;
    F.tail = NULL;
    while (*pp) {
        item *it = *pp;
        if (it->handle == zh->gen) {
            *pp = it->next;
            item_free(it);
        } else {
            F.tail = it;
            pp = &it->next;
        }
    }
    fail_outstanding(ZCLOSING);
    watches_clear();
    if (zh->ever_connected) {
        tree_drop_ephemerals(zh->cid.client_id);
        live_clear(); /* closing the session deletes its ephemeral nodes */
    }
    F.zh = NULL;
    F.closed++;
    free(zh);
    sync_fd();
    return ZOK;
}

static int t_interest(zhandle_t *zh, int *fd, int *interest, struct timeval *tv) {
    if (!zh || zh != F.zh) return ZBADARGUMENTS;
    *fd = F.efd;
    *interest = ZOOKEEPER_READ;
    int ms = zh->timeout / 3;
    tv->tv_sec = ms / 1000;
    tv->tv_usec = (ms % 1000) * 1000;
    return ZOK;
}

static int t_process(zhandle_t *zh, int events) {
    (void)events;
    if (!zh || zh != F.zh) return ZBADARGUMENTS;
    for (;;) {
        item *it = F.head;
        if (!it) {
            sync_fd();
            return ZNOTHING;
        }
        F.head = it->next;
        if (!F.head) F.tail = NULL;
        sync_fd();
        int skip = it->handle != zh->gen || (it->type == IT_REPLY && it->req->status == FZ_DONE);
        if (skip) { /* stale: look at the next one */
            item_free(it);
            continue;
        }
        switch (it->type) {
        case IT_REPLY:
            complete(it->req, it->req->rc, 1);
            break;
        case IT_WATCH:
            it->fn(zh, it->ev, zh->state, it->path, it->ctx);
            break;
        case IT_UP:
        case IT_UP_NEW:
            if (it->type == IT_UP_NEW && zh->ever_connected) {
                /* the server gave this handle another session: the old one's nodes are gone */
                tree_drop_ephemerals(zh->cid.client_id);
                live_clear();
                zh->cid.client_id = F.next_session++;
            }
            if (!zh->ever_connected) {
                zh->ever_connected = 1;
                zh->cid.client_id = F.next_session++;
                memset(zh->cid.passwd, 'p', sizeof zh->cid.passwd);
            }
            zh->state = ZOO_CONNECTED_STATE;
            session_event(zh, ZOO_CONNECTED_STATE);
            break;
        case IT_DOWN:
            zh->state = ZOO_CONNECTING_STATE;
            session_event(zh, ZOO_CONNECTING_STATE);
            if (zh == F.zh) fail_outstanding(ZCONNECTIONLOSS);
            break;
        case IT_AUTH_FAILED:
            zh->state = ZOO_AUTH_FAILED_STATE;
            session_event(zh, ZOO_AUTH_FAILED_STATE);
            if (zh == F.zh) {
                fail_outstanding(ZAUTHFAILED);
                watches_clear();
            }
            break;
        case IT_EXPIRE:
            zh->state = ZOO_EXPIRED_SESSION_STATE;
            session_event(zh, ZOO_EXPIRED_SESSION_STATE);
            if (zh == F.zh) {
                fail_outstanding(ZSESSIONEXPIRED);
                watches_clear();
                tree_drop_ephemerals(zh->cid.client_id);
                live_clear();
            }
            break;
        }
        item_free(it);
        return ZOK; /* one delivery per call, like zookeeper_process reading one reply */
    }
}

static int t_state(zhandle_t *zh) {
    return zh ? zh->state : 0;
}
static int t_recv_timeout(zhandle_t *zh) {
    return zh ? zh->timeout : 0;
}
static const clientid_t *t_client_id(zhandle_t *zh) {
    return zh ? &zh->cid : NULL;
}
static const void *t_get_context(zhandle_t *zh) {
    return zh ? zh->context : NULL;
}
static int t_resolution_delay(zhandle_t *zh, int ms) {
    (void)zh, (void)ms;
    return ZOK;
}
static void t_debug_level(ZooLogLevel l) {
    (void)l;
}

static int t_add_auth(zhandle_t *zh, const char *scheme, const char *cert, int len,
                      void_completion_t done, const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_AUTH, scheme, data);
    r->data = xmalloc((size_t)len + 1);
    if (len > 0) memcpy(r->data, cert, (size_t)len);
    r->len = len;
    r->priv->done.v = done;
    return ZOK;
}

static void set_data(fz_req *r, const char *value, int len) {
    r->data = xmalloc(len > 0 ? (size_t)len + 1 : 1);
    if (len > 0 && value) memcpy(r->data, value, (size_t)len);
    r->len = len > 0 ? len : 0;
}

static int t_acreate2(zhandle_t *zh, const char *path, const char *value, int len,
                      const struct ACL_vector *acl, int mode, string_stat_completion_t done,
                      const void *data) {
    (void)acl;
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_CREATE, path, data);
    set_data(r, value, len);
    r->mode = mode;
    r->priv->done.ss = done;
    return ZOK;
}

/* a TTL create is recorded as a create with its mode (ZOO_PERSISTENT*_WITH_TTL) */
static int t_acreate2_ttl(zhandle_t *zh, const char *path, const char *value, int len,
                          const struct ACL_vector *acl, int mode, int64_t ttl,
                          string_stat_completion_t done, const void *data) {
    if (ttl <= 0) return ZBADARGUMENTS;
    return t_acreate2(zh, path, value, len, acl, mode, done, data);
}

static int t_awexists(zhandle_t *zh, const char *path, watcher_fn watcher, void *wctx,
                      stat_completion_t done, const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_EXISTS, path, data);
    r->watch = watcher != NULL;
    r->priv->wfn = watcher;
    r->priv->wctx = wctx;
    r->priv->done.st = done;
    return ZOK;
}

static int t_adelete(zhandle_t *zh, const char *path, int version, void_completion_t done,
                     const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_DELETE, path, data);
    r->mode = version;
    r->priv->done.v = done;
    return ZOK;
}

static int t_aexists(zhandle_t *zh, const char *path, int watch, stat_completion_t done,
                     const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_EXISTS, path, data);
    r->watch = watch != 0;
    r->priv->done.st = done;
    return ZOK;
}

static int t_aget(zhandle_t *zh, const char *path, int watch, data_completion_t done,
                  const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_GET, path, data);
    r->watch = watch != 0;
    r->priv->done.d = done;
    return ZOK;
}

static int t_awget(zhandle_t *zh, const char *path, watcher_fn watcher, void *wctx,
                   data_completion_t done, const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_GET, path, data);
    r->watch = watcher != NULL;
    r->priv->wfn = watcher;
    r->priv->wctx = wctx;
    r->priv->done.d = done;
    return ZOK;
}

static int t_aget_children(zhandle_t *zh, const char *path, int watch, strings_completion_t done,
                           const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_CHILDREN, path, data);
    r->watch = watch != 0;
    r->priv->done.strs = done;
    return ZOK;
}

static int t_awget_children(zhandle_t *zh, const char *path, watcher_fn watcher, void *wctx,
                            strings_completion_t done, const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_CHILDREN, path, data);
    r->watch = watcher != NULL;
    r->priv->wfn = watcher;
    r->priv->wctx = wctx;
    r->priv->done.strs = done;
    return ZOK;
}

static int t_aset(zhandle_t *zh, const char *path, const char *buf, int len, int version,
                  stat_completion_t done, const void *data) {
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_SET, path, data);
    set_data(r, buf, len);
    r->mode = version;
    r->priv->done.st = done;
    return ZOK;
}

static int t_amulti(zhandle_t *zh, int count, const zoo_op_t *ops, zoo_op_result_t *results,
                    void_completion_t done, const void *data) {
    (void)count, (void)ops, (void)results;
    if (!usable(zh)) return ZINVALIDSTATE;
    fz_req *r = record(zh, FZ_MULTI, "", data);
    r->priv->mresults = results;
    r->priv->done.v = done;
    r->priv->mops = ops;
    r->priv->mcount = count;
    return ZOK;
}

static int t_aremove_all_watches(zhandle_t *zh, const char *path, ZooWatcherType type, int local,
                                 void_completion_t *done, const void *data) {
    (void)local;
    if (!usable(zh)) return ZINVALIDSTATE;
    if (F.refuse_remove) { /* refused before a completion is registered: nothing recorded */
        int rc = F.refuse_remove;
        F.refuse_remove = 0;
        return rc;
    }
    fz_req *r = record(zh, FZ_REMOVE_WATCHES, path, data);
    r->mode = (int)type;
    /* zookeeper.h's type is void_completion_t *, the client calls it as a void_completion_t */
    r->priv->done.v = (void_completion_t)(void (*)(void))done;
    return ZOK;
}

/* One watcher (function and context) of path, forgotten by the client alone (local): the fake
 * drops it, so a later event of the path reaches nobody, as it would. Only the local form is
 * modelled (the core never sends CheckWatches). */
static int t_aremove_watches(zhandle_t *zh, const char *path, ZooWatcherType type,
                             watcher_fn watcher, void *wctx, int local, void_completion_t *done,
                             const void *data) {
    (void)done, (void)data;
    if (!zh || zh != F.zh) return ZBADARGUMENTS;
    if (!local) return ZUNIMPLEMENTED;
    int n = 0;
    for (int i = 0; i < F.nwatches;) {
        wtch *w = &F.watches[i];
        int kindok = type == ZWATCHTYPE_ANY || (type == ZWATCHTYPE_CHILD && w->kind == W_CHILD) ||
                     (type == ZWATCHTYPE_DATA && w->kind != W_CHILD);
        if (kindok && w->fn == watcher && w->ctx == wctx && strcmp(w->path, path) == 0) {
            free(w->path);
            F.watches[i] = F.watches[--F.nwatches];
            n++;
        } else {
            i++;
        }
    }
    return n ? ZOK : ZNOWATCHER;
}

static int64_t t_now_ms(void) {
    return F.now;
}

const zkl_zk fz_table = {
    t_init,
    t_close,
    t_interest,
    t_process,
    t_state,
    t_recv_timeout,
    t_client_id,
    t_get_context,
    t_resolution_delay,
    t_debug_level,
    t_add_auth,
    t_acreate2,
    t_adelete,
    t_aexists,
    t_aget,
    t_awget,
    t_aget_children,
    t_awget_children,
    t_aset,
    t_amulti,
    t_aremove_all_watches,
    t_now_ms,
    t_awexists,
    t_acreate2_ttl,
    t_aremove_watches,
};

/* ------------------------------------------------------------------ tree server */

static node *find(const char *path) {
    for (int i = 0; i < F.nnodes; i++)
        if (strcmp(F.nodes[i].path, path) == 0) return &F.nodes[i];
    return NULL;
}

/* parent path of path into buf ("/" for a top-level node) */
static void parent_of(const char *path, char *buf, size_t size) {
    const char *s = strrchr(path, '/');
    size_t n = s && s != path ? (size_t)(s - path) : 1;
    if (n >= size) n = size - 1;
    memcpy(buf, path, n);
    buf[n] = '\0';
}

static int is_child(const char *parent, const char *path) {
    size_t n = strlen(parent);
    if (strcmp(parent, "/") == 0) n = 0;
    if (strncmp(path, parent, n) != 0 || path[n] != '/') return 0;
    return strchr(path + n + 1, '/') == NULL && path[n + 1] != '\0';
}

int fz_tree_has(const char *path) {
    return strcmp(path, "/") == 0 || find(path) != NULL;
}

int fz_tree_children(const char *path) {
    int n = 0;
    for (int i = 0; i < F.nnodes; i++)
        n += is_child(path, F.nodes[i].path);
    return n;
}

static node *add_node(const char *path, int mode, int64_t owner, const char *data, int len) {
    GROW(F.nodes, F.nnodes, F.capnodes);
    node *n = &F.nodes[F.nnodes++];
    memset(n, 0, sizeof *n);
    n->path = xstrdup(path);
    n->data = xmalloc((size_t)len + 1);
    if (len > 0) memcpy(n->data, data, (size_t)len);
    n->len = len;
    n->czxid = n->mzxid = ++F.zxid;
    n->owner = owner;
    n->mode = mode;
    return n;
}

static void del_node(node *n) {
    char parent[2048];
    char *path = n->path;
    free(n->data);
    *n = F.nodes[--F.nnodes];
    parent_of(path, parent, sizeof parent);
    fz_fire(ZOO_DELETED_EVENT, path);
    fz_fire(ZOO_CHILD_EVENT, parent);
    free(path);
}

int fz_tree_add(const char *path, int ephemeral_other) {
    if (find(path)) return ZNODEEXISTS;
    char parent[2048];
    parent_of(path, parent, sizeof parent);
    if (!fz_tree_has(parent)) return ZNONODE;
    add_node(path, ephemeral_other ? ZOO_EPHEMERAL : 0, ephemeral_other ? 0x7777 : 0, "", 0);
    fz_fire(ZOO_CREATED_EVENT, path);
    fz_fire(ZOO_CHILD_EVENT, parent);
    return ZOK;
}

int fz_tree_del(const char *path) {
    node *n = find(path);
    if (!n) return ZNONODE;
    if (fz_tree_children(path)) return ZNOTEMPTY;
    live_del(path);
    del_node(n);
    return ZOK;
}

static void tree_drop_ephemerals(int64_t owner) {
    for (int i = 0; i < F.nnodes;) {
        if (owner && F.nodes[i].owner == owner) {
            char *path = F.nodes[i].path;
            free(F.nodes[i].data);
            F.nodes[i] = F.nodes[--F.nnodes];
            free(path); /* the session is gone: its watches went with it */
        } else {
            i++;
        }
    }
}

int fz_tree_apply(fz_req *r, int *rcp, char **namep) {
    int rc = ZOK;
    char parent[2048], name[2048];
    node *n = find(r->path);
    *namep = NULL;
    switch (r->kind) {
    case FZ_CREATE: {
        parent_of(r->path, parent, sizeof parent);
        node *p = find(parent);
        if (!fz_tree_has(parent)) {
            rc = ZNONODE;
            break;
        }
        if (p && (p->mode & ZOO_EPHEMERAL)) {
            rc = ZNOCHILDRENFOREPHEMERALS;
            break;
        }
        if (r->mode & ZOO_SEQUENCE) {
            int seq = p ? p->cversion : 0;
            snprintf(name, sizeof name, "%s%010d", r->path, seq);
        } else {
            snprintf(name, sizeof name, "%s", r->path);
        }
        if (find(name)) {
            rc = ZNODEEXISTS;
            break;
        }
        if (p) p->cversion++;
        int eph = (r->mode & ZOO_EPHEMERAL) != 0;
        add_node(name, r->mode, eph ? r->session : 0, r->data, r->len);
        if (eph) live_add(name);
        *namep = xstrdup(name);
        fz_fire(ZOO_CREATED_EVENT, name);
        fz_fire(ZOO_CHILD_EVENT, parent);
        break;
    }
    case FZ_DELETE:
        if (!n)
            rc = ZNONODE;
        else if (fz_tree_children(r->path))
            rc = ZNOTEMPTY;
        else if (r->mode >= 0 && r->mode != n->version)
            rc = ZBADVERSION;
        else {
            parent_of(r->path, parent, sizeof parent);
            node *p = find(parent);
            if (p) p->cversion++;
            live_del(r->path);
            del_node(n);
        }
        break;
    case FZ_SET:
        if (!n)
            rc = ZNONODE;
        else if (r->mode >= 0 && r->mode != n->version)
            rc = ZBADVERSION;
        else {
            free(n->data);
            n->data = xmalloc((size_t)r->len + 1);
            if (r->len) memcpy(n->data, r->data, (size_t)r->len);
            n->len = r->len;
            n->version++;
            n->mzxid = ++F.zxid;
            fz_fire(ZOO_CHANGED_EVENT, r->path);
        }
        break;
    case FZ_EXISTS:
    case FZ_GET:
        rc = n || strcmp(r->path, "/") == 0 ? ZOK : ZNONODE;
        break;
    case FZ_CHILDREN:
        rc = fz_tree_has(r->path) ? ZOK : ZNONODE;
        break;
    case FZ_REMOVE_WATCHES:
        rc = fz_armed(r->path) ? ZOK : ZNOWATCHER;
        break;
    default:
        rc = ZOK;
        break;
    }
    *rcp = rc;
    return 0;
}

int fz_serve(fz_req *r) {
    if (!r || r->status != FZ_PENDING) return -1;
    if (!F.zh || r->priv->handle != F.zh->gen || F.zh->state != ZOO_CONNECTED_STATE) return -1;
    int rc;
    char *name;
    fz_tree_apply(r, &rc, &name);
    struct fz_req_private *p = r->priv;
    node *n = find(name ? name : r->path);
    if (n && rc == ZOK) {
        p->stat.czxid = n->czxid;
        p->stat.mzxid = n->mzxid;
        p->stat.version = n->version;
        p->stat.ephemeralOwner = n->owner;
        p->stat.dataLength = n->len;
        p->stat.numChildren = fz_tree_children(n->path);
    }
    if (r->kind == FZ_CREATE && rc == ZOK) {
        r->created = name;
    } else {
        free(name);
    }
    if (r->kind == FZ_GET && rc == ZOK) {
        p->data = xmalloc(n ? (size_t)n->len + 1 : 1);
        if (n && n->len) memcpy(p->data, n->data, (size_t)n->len);
        p->len = n ? n->len : 0;
    }
    if (r->kind == FZ_CHILDREN && rc == ZOK) {
        int k = fz_tree_children(r->path), j = 0;
        p->children = xmalloc((size_t)(k ? k : 1) * sizeof *p->children);
        for (int i = 0; i < F.nnodes; i++)
            if (is_child(r->path, F.nodes[i].path))
                p->children[j++] = xstrdup(fz_base(F.nodes[i].path));
        p->nchildren = j;
    }
    return answer(r, rc);
}

int fz_serve_all(void) {
    int n = 0;
    for (int i = 0; i < F.nreqs; i++)
        if (F.reqs[i]->status == FZ_PENDING && fz_serve(F.reqs[i]) == 0) n++;
    return n;
}

/* ------------------------------------------------------------------ applied, answer lost */

int fz_apply_then_fail(fz_req *r, int rc) {
    if (!r || r->status != FZ_PENDING) return -1;
    int trc;
    char *name = NULL;
    if (r->kind != FZ_MULTI) {
        fz_tree_apply(r, &trc, &name);
        free(name);
        return answer(r, rc);
    }
    for (int i = 0; i < r->priv->mcount; i++) {
        const zoo_op_t *op = &r->priv->mops[i];
        fz_req one;
        memset(&one, 0, sizeof one);
        one.session = r->session;
        switch (op->type) {
        case ZOO_CREATE_OP:
            one.kind = FZ_CREATE;
            one.path = (char *)op->create_op.path;
            one.data = (char *)op->create_op.data;
            one.len = op->create_op.datalen > 0 ? op->create_op.datalen : 0;
            one.mode = op->create_op.flags;
            break;
        case ZOO_DELETE_OP:
            one.kind = FZ_DELETE;
            one.path = (char *)op->delete_op.path;
            one.mode = op->delete_op.version;
            break;
        case ZOO_SETDATA_OP:
            one.kind = FZ_SET;
            one.path = (char *)op->set_op.path;
            one.data = (char *)op->set_op.data;
            one.len = op->set_op.datalen > 0 ? op->set_op.datalen : 0;
            one.mode = op->set_op.version;
            break;
        default: /* a check changes nothing */
            continue;
        }
        fz_tree_apply(&one, &trc, &name);
        free(name);
        name = NULL;
    }
    return answer(r, rc);
}
