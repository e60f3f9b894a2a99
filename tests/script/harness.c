/* harness.c - see harness.h; also the TAP runner (main). */
#include "harness.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

int h_checks, h_failures;

void h_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    h_failures++;
    fprintf(stderr, "# %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------------ clients */

zkl_client *h_client_alloc(const zkl_allocator *alloc) {
    fz_reset();
    zkl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.hosts = "fake:2181";
    cfg.session_timeout_ms = 10000;
    cfg.identity = "me";
    cfg.identity_len = 2;
    cfg.alloc = alloc;
    zkl_client *c = NULL;
    int rc = zkl__client_new_zk(&cfg, &fz_table, &c);
    CHECK_INT(rc, ZKL_OK);
    if (!c) return NULL;
    CHECK_INT(zkl_client_state(c), ZKL_STATE_CONNECTING);
    fz_connect();
    h_pump(c);
    CHECK_INT(zkl_client_state(c), ZKL_STATE_CONNECTED);
    zkl_event ev;
    CHECK(zkl_client_next_event(c, &ev) == 1 && ev.type == ZKL_EV_SESSION &&
          ev.status == ZKL_STATE_CONNECTED);
    return c;
}

zkl_client *h_client(void) {
    return h_client_alloc(NULL);
}

void h_pump(zkl_client *c) {
    for (int i = 0; i < 10000; i++) {
        zkl_client_process(c);
        if (!fz_queued()) return;
    }
    h_fail(__FILE__, __LINE__, "the fake still has deliveries queued after 10000 process() calls");
}

void h_advance(zkl_client *c, int64_t ms) {
    while (ms > 0) {
        int64_t step = ms > 1000 ? 1000 : ms;
        fz_advance(step);
        ms -= step;
        zkl_client_process(c);
    }
}

void h_reconnect_at(const char *file, int line, zkl_client *c) {
    fz_connect();
    h_pump(c);
    h_checks++;
    if (zkl_client_state(c) != ZKL_STATE_SUSPENDED)
        h_fail(file, line, "reconnected before the server answered anything sent since");
    fz_req *hb = h_expect_req(file, line, FZ_EXISTS, "/");
    h_checks++;
    if (strcmp(hb->path, "/") != 0 || hb->watch)
        h_fail(file, line, "the heartbeat is exists(\"/\") without a watch, got %s%s", hb->path,
               hb->watch ? " with a watch" : "");
    fz_stat_ok(hb, 1);
    h_pump(c);
}

void h_free(zkl_client *c) {
    if (!c) return;
    if (fz_unanswered()) fz_drop_link();
    zkl_client_free(c);
}

/* ------------------------------------------------------------------ requests */

static const char *kind_names[] = {"?",        "create", "delete", "exists",        "get",
                                   "children", "set",    "multi",  "removeWatches", "auth"};

/* returned instead of NULL, so a test goes on (failing) rather than crash: it is answered
 * already, so every fz_* answer on it returns -1 */
static fz_req missing = {-1, 0, "(missing)", NULL, 0, 0, 0, 0, 0, FZ_DONE, 0, NULL, NULL};

fz_req *h_expect_req(const char *file, int line, int kind, const char *prefix) {
    h_checks++;
    fz_req *r = fz_next();
    if (!r) {
        h_fail(file, line, "expected a %s request (%s), none was sent", kind_names[kind],
               prefix ? prefix : "any path");
        return &missing;
    }
    if (r->kind != kind || (prefix && strncmp(r->path, prefix, strlen(prefix)) != 0)) {
        h_fail(file, line, "expected %s %s..., got #%d %s %s", kind_names[kind],
               prefix ? prefix : "", r->index, kind_names[r->kind], r->path);
        return &missing;
    }
    return r;
}

void h_expect_no_req(const char *file, int line) {
    h_checks++;
    if (fz_untaken()) {
        fz_req *r = fz_req_at(fz_nreqs() - fz_untaken());
        h_fail(file, line, "expected no more requests, got %d, first #%d %s %s", fz_untaken(),
               r->index, kind_names[r->kind], r->path);
        while (fz_next()) {
        }
    }
}

int h_is_protected(const char *path, const char *dir, const char *token) {
    size_t d = strlen(dir);
    if (strncmp(path, dir, d) != 0 || strncmp(path + d, "/_c_", 4) != 0) return 0;
    const char *u = path + d + 4;
    for (int i = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? u[i] != '-' : !(isdigit((unsigned char)u[i]) || (u[i] >= 'a' && u[i] <= 'f')))
            return 0;
    }
    if (u[14] != '4') return 0; /* version 4 */
    return u[36] == '-' && strcmp(u + 37, token) == 0;
}

static char *rot(void) {
    static char bufs[16][1300];
    static int k;
    return bufs[k++ & 15];
}

const char *h_seqname(const fz_req *create, int seq) {
    char *b = rot();
    snprintf(b, 1300, "%s%010d", create ? fz_base(create->path) : "?", seq);
    return b;
}

const char *h_other(int n, const char *token, int seq) {
    char *b = rot();
    snprintf(b, 1300, "_c_00000000-0000-4000-8000-%012d-%s%010d", n, token, seq);
    return b;
}

const char *h_join(const char *dir, const char *name) {
    char *b = rot();
    snprintf(b, 1300, "%s/%s", dir, name);
    return b;
}

/* ------------------------------------------------------------------ events */

static const char *ev_name(int t) {
    static const char *n[] = {"?",       "ACQUIRED", "FAILED",  "RELEASED", "LOCK_STATE",
                              "SESSION", "OP_DONE",  "WARNING", "WATCH"};
    return t >= 1 && t <= 8 ? n[t] : "?";
}

void h_expect_ev(const char *file, int line, zkl_client *c, int type, uint64_t id, int status) {
    zkl_event ev;
    h_checks++;
    if (!zkl_client_next_event(c, &ev)) {
        h_fail(file, line, "expected event %s id=%llu status=%d, got none", ev_name(type),
               (unsigned long long)id, status);
        return;
    }
    if (ev.type != type || ev.id != id || ev.status != status)
        h_fail(file, line, "expected event %s id=%llu status=%d, got %s id=%llu status=%d (%s)",
               ev_name(type), (unsigned long long)id, status, ev_name(ev.type),
               (unsigned long long)ev.id, ev.status, zkl_err_name(ev.status));
}

void h_expect_no_ev(const char *file, int line, zkl_client *c) {
    zkl_event ev;
    h_checks++;
    if (zkl_client_next_event(c, &ev))
        h_fail(file, line, "expected no event, got %s id=%llu status=%d", ev_name(ev.type),
               (unsigned long long)ev.id, ev.status);
}

/* ------------------------------------------------------------------ allocator */

/* Blocks carry their size in a header, so a wrong osize from the core is caught too. */
static void *h_realloc(void *ud, void *p, size_t osize, size_t nsize) {
    h_alloc *h = ud;
    if (nsize == 0) {
        if (p) {
            size_t *hdr = (size_t *)p - 2;
            if (hdr[0] != osize) {
                h_fail(__FILE__, __LINE__, "free of a %zu-byte block with osize %zu", hdr[0],
                       osize);
            }
            h->live--;
            h->bytes -= (long long)hdr[0];
            free(hdr);
        }
        return NULL;
    }
    if (p) { /* the core never grows blocks in place; support it anyway */
        size_t *hdr = (size_t *)p - 2;
        h->count++;
        if (h->fail_at && h->count == h->fail_at) {
            h->failed++;
            return NULL;
        }
        size_t *n = realloc(hdr, nsize + 2 * sizeof(size_t));
        if (!n) return NULL;
        h->bytes += (long long)nsize - (long long)n[0];
        n[0] = nsize;
        return n + 2;
    }
    h->count++;
    if (h->fail_at && h->count == h->fail_at) {
        h->failed++;
        return NULL;
    }
    size_t *hdr = malloc(nsize + 2 * sizeof(size_t));
    if (!hdr) return NULL;
    hdr[0] = nsize;
    h->live++;
    h->bytes += (long long)nsize;
    return hdr + 2;
}

void h_alloc_init(h_alloc *h, long fail_at) {
    memset(h, 0, sizeof *h);
    h->a.realloc = h_realloc;
    h->a.ud = h;
    h->fail_at = fail_at;
}

/* ------------------------------------------------------------------ runner */

H_GROUP(g_mutex);
H_GROUP(g_giveup);
H_GROUP(g_session);
H_GROUP(g_plain);
H_GROUP(g_rw);
H_GROUP(g_sem);
H_GROUP(g_alloc);
H_GROUP(g_watch);
H_GROUP(g_latch);
H_GROUP(g_handoff);
H_GROUP(g_unknown);
H_GROUP(g_loss);
H_GROUP(g_fast);
H_GROUP(g_parked);
H_GROUP(g_waiters);
H_GROUP(g_windex);

static const struct {
    const char *name;
    const h_test *tests;
    const int *n;
} groups[] = {
    {"mutex", g_mutex, &g_mutex_n},
    {"giveup", g_giveup, &g_giveup_n},
    {"session", g_session, &g_session_n},
    {"plain", g_plain, &g_plain_n},
    {"rw", g_rw, &g_rw_n},
    {"sem", g_sem, &g_sem_n},
    {"alloc", g_alloc, &g_alloc_n},
    {"watch", g_watch, &g_watch_n},
    {"latch", g_latch, &g_latch_n},
    {"handoff", g_handoff, &g_handoff_n},
    {"unknown", g_unknown, &g_unknown_n},
    {"loss", g_loss, &g_loss_n},
    {"fast", g_fast, &g_fast_n},
    {"parked", g_parked, &g_parked_n},
    {"waiters", g_waiters, &g_waiters_n},
    {"windex", g_windex, &g_windex_n},
};

/* an argument names a group ("mutex") or one test ("mutex.grant") */
static int wanted(int argc, char **argv, const char *group, const char *test) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++) {
        size_t n = strlen(group);
        if (strcmp(argv[i], group) == 0) return 1;
        if (test && strncmp(argv[i], group, n) == 0 && argv[i][n] == '.' &&
            strcmp(argv[i] + n + 1, test) == 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int ngroups = (int)(sizeof groups / sizeof groups[0]), total = 0, failed = 0, k = 0;
    for (int g = 0; g < ngroups; g++)
        for (int t = 0; t < *groups[g].n; t++)
            total += wanted(argc, argv, groups[g].name, groups[g].tests[t].name);
    if (total == 0) {
        fprintf(stderr,
                "usage: %s [group|group.test...]; groups: mutex giveup session rw sem alloc\n",
                argv[0]);
        return 2;
    }
    printf("1..%d\n", total);
    for (int g = 0; g < ngroups; g++) {
        for (int t = 0; t < *groups[g].n; t++) {
            const h_test *ht = &groups[g].tests[t];
            if (!wanted(argc, argv, groups[g].name, ht->name)) continue;
            int c0 = h_checks, f0 = h_failures;
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            ht->fn();
            clock_gettime(CLOCK_MONOTONIC, &b);
            int checks = h_checks - c0, fails = h_failures - f0;
            double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
            k++;
            if (checks == 0) {
                printf("not ok %d - %s.%s # asserted nothing\n", k, groups[g].name, ht->name);
                failed++;
            } else if (fails) {
                printf("not ok %d - %s.%s # %d of %d checks failed\n", k, groups[g].name, ht->name,
                       fails, checks);
                failed++;
            } else {
                printf("ok %d - %s.%s # %d checks, %.1f ms\n", k, groups[g].name, ht->name, checks,
                       ms);
            }
            fflush(stdout);
        }
    }
    fz_reset();
    printf("# %d tests, %d failed, %d checks\n", total, failed, h_checks);
    return failed ? 1 : 0;
}

void h_own_handoff(const char *file, int line, zkl_client *c, uint64_t held, const fz_req *created,
                   uint64_t next) {
    h_checks++;
    if (zkl_lock_release(c, held) != ZKL_OK)
        h_fail(file, line, "release of %llu refused", (unsigned long long)held);
    fz_req *del = h_expect_req(file, line, FZ_DELETE, created->created);
    h_checks++;
    if (fz_fire(ZOO_DELETED_EVENT, created->created) != 1)
        h_fail(file, line, "no watch on %s fired", created->created);
    fz_reply(del, ZOK);
    h_pump(c);
    h_expect_ev(file, line, c, ZKL_EV_ACQUIRED, next, ZKL_OK);
    h_expect_ev(file, line, c, ZKL_EV_RELEASED, held, ZKL_OK);
}
