/* api.c - the public entry points. Each one runs its implementation under the client's mutex when
 * keepalive is on (a background thread may be driving the same client); otherwise it is a plain
 * call. Blocking happens only in zkl_client_wait, outside the mutex. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "internal.h"

static void enter(zkl_client *c) {
    if (c->ka) {
        pthread_mutex_lock(&c->mu);
        c->last_owner_ms = zkl__now(c);
    }
}

static void leave(zkl_client *c) {
    if (c->ka) {
        c->last_owner_ms = zkl__now(c);
        pthread_mutex_unlock(&c->mu);
    }
}

#define LOCKED(c, type, call)                                                                      \
    do {                                                                                           \
        enter(c);                                                                                  \
        type r_ = (call);                                                                          \
        leave(c);                                                                                  \
        return r_;                                                                                 \
    } while (0)

int zkl_client_process(zkl_client *c) {
    LOCKED(c, int, zkl__client_process(c));
}
int zkl_client_timeout_ms(zkl_client *c) {
    LOCKED(c, int, zkl__client_timeout_ms(c));
}
int zkl_client_next_event(zkl_client *c, zkl_event *ev) {
    LOCKED(c, int, zkl__client_next_event(c, ev));
}
int zkl_client_next_event_for(zkl_client *c, uint64_t id, zkl_event *ev) {
    LOCKED(c, int, zkl__client_next_event_for(c, id, ev));
}
int zkl_client_park(zkl_client *c, uint64_t id) {
    LOCKED(c, int, zkl__client_park(c, id));
}
int zkl_client_next_ready(zkl_client *c, zkl_event *ev) {
    LOCKED(c, int, zkl__client_next_ready(c, ev));
}
int zkl_client_state(const zkl_client *c) {
    zkl_client *m = (zkl_client *)c;
    LOCKED(m, int, zkl__client_state(c));
}
int zkl_client_session_count(const zkl_client *c) {
    zkl_client *m = (zkl_client *)c;
    LOCKED(m, int, zkl__client_session_count(c));
}
int zkl_client_flush(zkl_client *c) {
    LOCKED(c, int, zkl__client_flush(c));
}

int zkl_client_add_auth(zkl_client *c, const char *scheme, const char *cred, size_t len) {
    LOCKED(c, int, zkl__client_add_auth(c, scheme, cred, len));
}

int64_t zkl_client_session(const zkl_client *c, char passwd[16]) {
    zkl_client *m = (zkl_client *)c;
    LOCKED(m, int64_t, zkl__client_session(c, passwd));
}

int zkl_client_loss_ms(zkl_client *c) {
    LOCKED(c, int, zkl__client_loss_ms(c));
}

int zkl_client_session_timeout(const zkl_client *c) {
    zkl_client *m = (zkl_client *)c;
    LOCKED(m, int, zkl__client_session_timeout(c));
}

void zkl_client_stats(const zkl_client *c, zkl_stats *out) {
    zkl_client *m = (zkl_client *)c;
    enter(m);
    zkl__client_stats(c, out);
    leave(m);
}

int zkl_client_wait(zkl_client *c, int max_ms) {
    enter(c);
    if (c->closed) {
        leave(c);
        return ZKL_ECLOSED;
    }
    zkl__client_flush(c); /* what waits to be sent goes first: its replies end the poll */
    int t = zkl__client_timeout_ms(c);
    int fd = zkl_client_fd(c);
    leave(c);
    if (max_ms >= 0 && (t < 0 || max_ms < t)) t = max_ms;
    if (t != 0 && !c->ka) {
        /* nothing else reads the socket: what this wait finds is handed to the processing pass,
         * which then does not ask epoll again (one system call fewer per wait) */
        struct epoll_event ev;
        int n = epoll_wait(fd, &ev, 1, t);
        if (n >= 0) {
            c->ready_n = n;
            c->ready_fd = c->zkfd;
            c->ready_events = n == 1 ? ev.events : 0;
        }
    } else if (t != 0) {
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, t);
    }
    LOCKED(c, int, zkl__client_process(c));
}

/* close and free stop the keepalive thread first (it takes the mutex itself), then work alone */
int zkl_client_close(zkl_client *c) {
    return zkl__client_close(c);
}
void zkl_client_free(zkl_client *c) {
    zkl__client_destroy(c);
}

/* Background closes: counted, so that an exit handler can wait for them to end before the
 * process does. The first one also pins the shared object holding this code (RTLD_NODELETE), so
 * that unloading it (a Lua state closing unloads its C modules) cannot pull the code from under
 * a thread still closing; the exit handler then runs at exit. */
static pthread_mutex_t bg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bg_cv = PTHREAD_COND_INITIALIZER;
static int bg_running;
static pthread_once_t bg_once = PTHREAD_ONCE_INIT;

static void bg_wait_all(void) {
    pthread_mutex_lock(&bg_mu);
    while (bg_running > 0)
        pthread_cond_wait(&bg_cv, &bg_mu);
    pthread_mutex_unlock(&bg_mu);
}

static void bg_init(void) {
    Dl_info info;
    if (dladdr((void *)&zkl_client_free_nowait, &info) && info.dli_fname)
        dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE); /* NULL for an executable */
    atexit(bg_wait_all);
}

static void *bg_free(void *arg) {
    zkl__client_destroy(arg);
    pthread_mutex_lock(&bg_mu);
    bg_running--;
    pthread_cond_broadcast(&bg_cv);
    pthread_mutex_unlock(&bg_mu);
    return NULL;
}

void zkl_client_free_nowait(zkl_client *c) {
    if (!c) return;
    enter(c);
    c->log_fn = NULL; /* the caller's log sink may be gone once this returns */
    leave(c);
    pthread_once(&bg_once, bg_init);
    pthread_mutex_lock(&bg_mu);
    bg_running++;
    pthread_mutex_unlock(&bg_mu);
    pthread_t t;
    pthread_attr_t attr;
    int ok = pthread_attr_init(&attr) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &attr, bg_free, c) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!ok) bg_free(c); /* no thread: close here, blocking */
}

int zkl_lock_acquire(zkl_client *c, zkl_recipe recipe, const char *path, int timeout_ms, int acl,
                     uint64_t *id) {
    LOCKED(c, int, zkl__lock_acquire(c, recipe, path, timeout_ms, acl, id));
}
int zkl_lock_acquire_ex(zkl_client *c, const zkl_lock_args *a, uint64_t *id) {
    LOCKED(c, int, zkl__lock_acquire_ex(c, a, id));
}
int zkl_client_acl(zkl_client *c, const zkl_acl_entry *entries, int n) {
    LOCKED(c, int, zkl__client_acl(c, entries, n));
}
int zkl_lock_downgrade(zkl_client *c, uint64_t write_id, uint64_t *id) {
    LOCKED(c, int, zkl__lock_downgrade(c, write_id, id));
}
int zkl_semaphore_acquire(zkl_client *c, const char *path, int max_leases, int qty, int timeout_ms,
                          int acl, uint64_t *id) {
    LOCKED(c, int, zkl__semaphore_acquire(c, path, max_leases, qty, timeout_ms, acl, id));
}
int zkl_lease_ids(zkl_client *c, uint64_t id, uint64_t *ids, int n) {
    LOCKED(c, int, zkl__lease_ids(c, id, ids, n));
}
int zkl_lock_release(zkl_client *c, uint64_t id) {
    LOCKED(c, int, zkl__lock_release(c, id));
}
int zkl_lock_cancel(zkl_client *c, uint64_t id) {
    LOCKED(c, int, zkl__lock_cancel(c, id));
}
int zkl_lock_abandon(zkl_client *c, uint64_t id) {
    LOCKED(c, int, zkl__lock_abandon(c, id));
}
int zkl_lock_info_get(zkl_client *c, uint64_t id, zkl_lock_info *out) {
    LOCKED(c, int, zkl__lock_info_get(c, id, out));
}
int zkl_multi_acquire(zkl_client *c, const zkl_multi_item *items, int n, int timeout_ms, int flags,
                      uint64_t *id) {
    LOCKED(c, int, zkl__multi_acquire(c, items, n, timeout_ms, flags, id));
}
int zkl_multi_result(zkl_client *c, uint64_t id, uint64_t *ids, int n, int *failed_index) {
    LOCKED(c, int, zkl__multi_result(c, id, ids, n, failed_index));
}
int zkl_op_start(zkl_client *c, const zkl_op_args *args, uint64_t *id) {
    LOCKED(c, int, zkl__op_start(c, args, id));
}
int zkl_op_result_get(zkl_client *c, uint64_t id, zkl_op_result *out) {
    LOCKED(c, int, zkl__op_result_get(c, id, out));
}
int zkl_txn_start(zkl_client *c, const zkl_txn_op *ops, int n, int timeout_ms, uint64_t *id) {
    LOCKED(c, int, zkl__txn_start(c, ops, n, timeout_ms, id));
}
int zkl_txn_result_get(zkl_client *c, uint64_t id, zkl_txn_result *out, int n) {
    LOCKED(c, int, zkl__txn_result_get(c, id, out, n));
}
