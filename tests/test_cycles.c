/* test_cycles.c - the C API against a real ZooKeeper (ZK_HOSTS), run under ASan/LeakSanitizer and
 * valgrind by .ci/run: every recipe's happy path and give-up paths, client close with operations
 * pending, and the same scenario with an allocator that fails the Nth allocation, for every N,
 * which must never crash or leak. Skips (exit 77) without ZK_HOSTS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zklock.h"

static int checks, failures;
static int wait_cap = 1 << 30; /* shorter waits while allocations fail */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

/* Pump until the final event of `id` arrives (other events are dropped), or `ms` passes. */
static int wait_for(zkl_client *c, uint64_t id, int *status, int ms) {
    if (ms > wait_cap) ms = wait_cap;
    for (int waited = 0; waited < ms; waited += 10) {
        zkl_event ev;
        while (zkl_client_next_event(c, &ev)) {
            if (ev.id == id && ev.type != ZKL_EV_LOCK_STATE && ev.type != ZKL_EV_WARNING) {
                *status = ev.status;
                return ev.type;
            }
        }
        if (zkl_client_wait(c, 10) < 0) return -1;
    }
    return 0;
}

static int wait_connected(zkl_client *c, int ms) {
    for (int waited = 0; waited < ms; waited += 10) {
        if (zkl_client_state(c) == ZKL_STATE_CONNECTED) return 1;
        zkl_event ev;
        while (zkl_client_next_event(c, &ev)) {
        }
        if (zkl_client_wait(c, 10) < 0) return 0;
    }
    return zkl_client_state(c) == ZKL_STATE_CONNECTED;
}

static int children_count(zkl_client *c, const char *path) {
    zkl_op_args a = {ZKL_OP_CHILDREN, path, NULL, 0, 0, -1, 0, 0, 0, 0};
    uint64_t id;
    int st = 0;
    if (zkl_op_start(c, &a, &id) != ZKL_OK) return -1;
    zkl_event ev;
    for (int i = 0; i < 500; i++) {
        while (zkl_client_next_event(c, &ev)) {
            if (ev.id == id && ev.type == ZKL_EV_OP_DONE) {
                zkl_op_result r;
                st = ev.status;
                if (st == ZKL_ZNONODE) return 0;
                if (st != ZKL_OK || zkl_op_result_get(c, id, &r) != ZKL_OK) return -1;
                return r.nchildren;
            }
        }
        zkl_client_wait(c, 10);
    }
    return -1;
}

/* Returns the number of unexpected outcomes (used as-is with a failing allocator, where any
 * outcome is fine as long as nothing crashes or leaks). */
static int scenario(const char *hosts, const zkl_allocator *alloc, const char *base, int strict) {
    zkl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.hosts = hosts;
    cfg.session_timeout_ms = 4000;
    cfg.alloc = alloc;
    zkl_client *c = NULL, *d = NULL;
    int bad = 0, st = 0, type;
    uint64_t a = 0, b = 0, e = 0; /* stay 0 when a start fails under the failing allocator */
    char path[256], sem[256], rw[256];
    snprintf(path, sizeof path, "%s/mutex", base);
    snprintf(sem, sizeof sem, "%s/sem", base);
    snprintf(rw, sizeof rw, "%s/rw", base);
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        int ok_ = (cond); /* evaluated once: conditions have side effects */                       \
        if (strict) {                                                                              \
            checks++;                                                                              \
            if (!ok_) {                                                                            \
                failures++;                                                                        \
                fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
            }                                                                                      \
        }                                                                                          \
        if (!ok_) bad++;                                                                           \
    } while (0)
    if (zkl_client_new(&cfg, &c) != ZKL_OK) return 1;
    if (zkl_client_new(&cfg, &d) != ZKL_OK) {
        zkl_client_free(c);
        return 1;
    }
    EXPECT(wait_connected(c, 5000) && wait_connected(d, 5000));

    /* uncontended cycles */
    for (int i = 0; i < 20; i++) {
        if (zkl_lock_acquire(c, ZKL_MUTEX, path, 5000, 0, &a) != ZKL_OK) {
            bad++;
            continue;
        }
        type = wait_for(c, a, &st, 5000);
        EXPECT(type == ZKL_EV_ACQUIRED);
        if (type != ZKL_EV_ACQUIRED) continue;
        zkl_lock_info info;
        EXPECT(zkl_lock_info_get(c, a, &info) == ZKL_OK && info.held && info.token > 0 &&
               strstr(info.node, "-lock-") != NULL);
        EXPECT(zkl_lock_release(c, a) == ZKL_OK);
        EXPECT(wait_for(c, a, &st, 5000) == ZKL_EV_RELEASED && st == ZKL_OK);
    }

    /* contention: timeout, try-once and cancel from another client */
    if (zkl_lock_acquire(c, ZKL_MUTEX, path, 5000, 0, &a) == ZKL_OK &&
        wait_for(c, a, &st, 5000) == ZKL_EV_ACQUIRED) {
        EXPECT(zkl_lock_acquire(d, ZKL_MUTEX, path, 200, 0, &b) == ZKL_OK);
        EXPECT(wait_for(d, b, &st, 3000) == ZKL_EV_FAILED && st == ZKL_ETIMEDOUT);
        EXPECT(zkl_lock_acquire(d, ZKL_MUTEX, path, 0, 0, &b) == ZKL_OK);
        EXPECT(wait_for(d, b, &st, 3000) == ZKL_EV_FAILED && st == ZKL_ETIMEDOUT);
        EXPECT(zkl_lock_acquire(d, ZKL_MUTEX, path, -1, 0, &b) == ZKL_OK);
        for (int i = 0; i < 20; i++)
            zkl_client_wait(d, 5);
        EXPECT(zkl_lock_cancel(d, b) == ZKL_OK);
        EXPECT(wait_for(d, b, &st, 3000) == ZKL_EV_FAILED && st == ZKL_ECANCELED);
        EXPECT(zkl_lock_release(c, a) == ZKL_OK);
        EXPECT(wait_for(c, a, &st, 5000) == ZKL_EV_RELEASED);
    } else {
        bad++;
    }

    /* semaphore: two leases at once, each released on its own */
    if (zkl_semaphore_acquire(c, sem, 3, 2, 5000, 0, &a) == ZKL_OK &&
        wait_for(c, a, &st, 5000) == ZKL_EV_ACQUIRED) {
        uint64_t ids[4];
        int n = zkl_lease_ids(c, a, ids, 4);
        EXPECT(n == 2);
        for (int i = 0; i < n; i++) {
            EXPECT(zkl_lock_release(c, ids[i]) == ZKL_OK);
            EXPECT(wait_for(c, ids[i], &st, 5000) == ZKL_EV_RELEASED);
        }
    } else {
        bad++;
    }

    /* read-write: write, downgrade, release both */
    if (zkl_lock_acquire(c, ZKL_WRITE, rw, 5000, 0, &a) == ZKL_OK &&
        wait_for(c, a, &st, 5000) == ZKL_EV_ACQUIRED) {
        EXPECT(zkl_lock_downgrade(c, a, &b) == ZKL_OK);
        EXPECT(wait_for(c, b, &st, 5000) == ZKL_EV_ACQUIRED);
        EXPECT(zkl_lock_release(c, a) == ZKL_OK);
        EXPECT(wait_for(c, a, &st, 5000) == ZKL_EV_RELEASED);
        EXPECT(zkl_lock_release(c, b) == ZKL_OK);
        EXPECT(wait_for(c, b, &st, 5000) == ZKL_EV_RELEASED);
    } else {
        bad++;
    }

    /* multi-lock that fails on its second component: the first is given back */
    if (zkl_lock_acquire(d, ZKL_WRITE, rw, 5000, 0, &e) == ZKL_OK &&
        wait_for(d, e, &st, 5000) == ZKL_EV_ACQUIRED) {
        zkl_multi_item items[2] = {{ZKL_MUTEX, path, 0, -1, 0}, {ZKL_READ, rw, 0, 200, 0}};
        EXPECT(zkl_multi_acquire(c, items, 2, 3000, 0, &a) == ZKL_OK);
        EXPECT(wait_for(c, a, &st, 5000) == ZKL_EV_FAILED && st == ZKL_ETIMEDOUT);
        int failed = -1;
        uint64_t ids[2];
        EXPECT(zkl_multi_result(c, a, ids, 2, &failed) == 0 && failed == 1);
        EXPECT(zkl_lock_release(d, e) == ZKL_OK);
        EXPECT(wait_for(d, e, &st, 5000) == ZKL_EV_RELEASED);
    } else {
        bad++;
    }

    /* nothing left behind (cleanup is background: give it a moment) */
    int left = -1;
    for (int i = 0; i < 100; i++) {
        left = children_count(d, path) + children_count(d, rw);
        int s = children_count(d, sem);
        (void)s;
        if (left == 0) break;
        zkl_client_wait(c, 10);
    }
    EXPECT(left == 0);

    /* close with an acquisition pending and one held */
    if (zkl_lock_acquire(c, ZKL_MUTEX, path, 5000, 0, &a) == ZKL_OK &&
        wait_for(c, a, &st, 5000) == ZKL_EV_ACQUIRED) {
        EXPECT(zkl_lock_acquire(d, ZKL_MUTEX, path, -1, 0, &b) == ZKL_OK);
        for (int i = 0; i < 20; i++)
            zkl_client_wait(d, 5);
        zkl_client_close(d);
        zkl_event ev;
        int got = 0;
        while (zkl_client_next_event(d, &ev))
            if (ev.id == b && ev.type == ZKL_EV_FAILED && ev.status == ZKL_ECLOSED) got = 1;
        EXPECT(got);
        EXPECT(zkl_client_process(d) == ZKL_ECLOSED);
    } else {
        bad++;
    }
    zkl_client_free(d);
    zkl_client_free(c); /* held lock goes with the session */
    return bad;
}

/* An allocator that fails from the Nth allocation on. */
static long fail_at, allocs;
static void *failing_realloc(void *ud, void *p, size_t osize, size_t nsize) {
    (void)ud, (void)osize;
    if (nsize == 0) {
        free(p);
        return NULL;
    }
    if (++allocs >= fail_at) return NULL;
    return realloc(p, nsize);
}

int main(void) {
    const char *hosts = getenv("ZK_HOSTS");
    if (!hosts || !*hosts) {
        fprintf(stderr, "test_cycles: ZK_HOSTS not set, skipping\n");
        return 77;
    }
    char base[128];
    snprintf(base, sizeof base, "/zklock-ctest/%d", (int)getpid());
    CHECK(scenario(hosts, NULL, base, 1) == 0);

    /* every allocation, in turn, fails once the scenario reaches it */
    zkl_allocator a = {failing_realloc, NULL};
    long total = 0;
    fail_at = 1L << 40;
    allocs = 0;
    char b2[160];
    snprintf(b2, sizeof b2, "%s/count", base);
    scenario(hosts, &a, b2, 0);
    total = allocs;
    int step = total > 25 ? (int)(total / 25) : 1; /* bound the run: about 25 failure points */
    wait_cap = 300;
    /* a different sample of failure points each run (printed, to reproduce: ZKL_FAIL_OFFSET) */
    long offset =
        getenv("ZKL_FAIL_OFFSET") ? atol(getenv("ZKL_FAIL_OFFSET")) : (long)getpid() % step;
    printf("cycles: failing allocations %ld, %ld, ... (ZKL_FAIL_OFFSET=%ld)\n", 1 + offset,
           1 + offset + step, offset);
    for (long n = 1 + offset; n <= total; n += step) {
        fail_at = n;
        allocs = 0;
        snprintf(b2, sizeof b2, "%s/f%ld", base, n);
        scenario(hosts, &a, b2, 0); /* any outcome is fine; ASan/valgrind check the rest */
    }
    checks++;
    printf("cycles: %d checks, %d failed (%ld allocations per scenario, %ld failure points)\n",
           checks, failures, total, (total + step - 1) / step);
    return failures ? 1 : 0;
}
