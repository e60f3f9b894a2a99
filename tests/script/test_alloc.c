/* test_alloc.c - allocation failure at every allocation point. Each scenario runs against the
 * fake's znode tree (fz_serve_all) with a counting allocator: once to count its allocations (N),
 * then N more times, failing allocation k = 1..N. Every run must end cleanly:
 *   - a start call fails with ZKL_ENOMEM (and no event follows), or its one final event comes
 *     (ACQUIRED, or FAILED with ENOMEM / the scenario's own expected status);
 *   - the client goes quiet (no retry loop), every held lock releases with one RELEASED;
 *   - no node is left behind before the client is freed (each logged if so: see below);
 *   - after zkl_client_free the allocator's balance is zero (blocks and bytes), and the session
 *     was closed. */
#include <stdlib.h>

#include "harness.h"

static h_alloc A;
static zkl_client *C;
static zkl_event evlog[1024];
static int nlog;
static int counting;  /* the counting run: everything must succeed */
static long leftover; /* runs that ended with a node left behind */

/* Drains through the blocking caller's fast path too (zkl_client_next_event_for, on the id of the
 * newest event logged), so that every failing allocation also runs under it; it allocates nothing
 * and must hand out each event exactly once, as next_event does. */
static void drain(void) {
    zkl_event ev;
    for (;;) {
        uint64_t want = nlog ? evlog[nlog - 1].id : 0;
        if (zkl_client_next_event_for(C, want, &ev) != 1 && !zkl_client_next_event(C, &ev) &&
            !zkl_client_next_ready(C, &ev))
            break;
        if (nlog < (int)(sizeof evlog / sizeof evlog[0])) evlog[nlog++] = ev;
    }
}

/* Park op id (as the Lua binding does for a coroutine an adapter owns): OK; 1 when its final
 * event is queued already (a start that failed for memory in the same call) or ENOMEM: then its
 * events stay on the event queue; never anything else here. */
static void park(uint64_t id) {
    int rc = zkl_client_park(C, id);
    h_checks++;
    if (rc != ZKL_OK && ((rc != ZKL_ENOMEM && rc != 1) || counting))
        h_fail(__FILE__, __LINE__, "park returned %s (fail_at=%ld)", zkl_err_name(rc), A.fail_at);
}

/* Serve and process until nothing moves. */
static void drive(void) {
    for (int i = 0; i < 200; i++) {
        int served = fz_serve_all();
        h_pump(C);
        drain();
        if (!served && !fz_queued() && (fz_state() != ZOO_CONNECTED_STATE || !fz_unanswered()))
            return;
    }
    h_fail(__FILE__, __LINE__, "the client did not go quiet (fail_at=%ld)", A.fail_at);
}

/* The final event of acquisition id: 1 if ACQUIRED, 0 if FAILED (with an allowed status), -1 if
 * none or more than one or a bad status. `alt` is a status allowed besides ENOMEM (0: none). */
static int outcome(uint64_t id, int alt) {
    int n = 0, got = -1;
    for (int i = 0; i < nlog; i++) {
        if (evlog[i].id != id) continue;
        if (evlog[i].type == ZKL_EV_ACQUIRED)
            n++, got = 1;
        else if (evlog[i].type == ZKL_EV_FAILED) {
            n++;
            got = 0;
            if (evlog[i].status != ZKL_ENOMEM && (!alt || evlog[i].status != alt)) {
                h_fail(__FILE__, __LINE__, "id %llu FAILED with %s (fail_at=%ld)",
                       (unsigned long long)id, zkl_err_name(evlog[i].status), A.fail_at);
                return -1;
            }
        }
    }
    h_checks++;
    if (n != 1) {
        h_fail(__FILE__, __LINE__, "id %llu: %d final events (fail_at=%ld)", (unsigned long long)id,
               n, A.fail_at);
        if (getenv("ZKL_SCRIPT_VERBOSE")) {
            fz_dump(stderr);
            for (int i = 0; i < nlog; i++)
                fprintf(stderr, "  event type=%d id=%llu status=%s\n", evlog[i].type,
                        (unsigned long long)evlog[i].id, zkl_err_name(evlog[i].status));
        }
        return -1;
    }
    if (counting && got != 1 && !alt)
        h_fail(__FILE__, __LINE__, "id %llu not acquired in the counting run",
               (unsigned long long)id);
    return got;
}

static int count_ev(uint64_t id, int type, int status) {
    int n = 0;
    for (int i = 0; i < nlog; i++)
        n += evlog[i].id == id && evlog[i].type == type && evlog[i].status == status;
    return n;
}

/* A start call's result: OK, or ENOMEM (never in the counting run). */
static int started(int rc) {
    h_checks++;
    if (rc == ZKL_OK) return 1;
    if (rc != ZKL_ENOMEM || counting)
        h_fail(__FILE__, __LINE__, "start returned %s (fail_at=%ld)", zkl_err_name(rc), A.fail_at);
    return 0;
}

static void release(uint64_t id) {
    CHECK_INT(zkl_lock_release(C, id), ZKL_OK);
    drive();
    CHECK_INT(count_ev(id, ZKL_EV_RELEASED, ZKL_OK), 1);
}

static void acquire_release(zkl_recipe rec, const char *path) {
    uint64_t id;
    if (!started(zkl_lock_acquire(C, rec, path, -1, 0, &id))) return;
    drive();
    if (outcome(id, 0) == 1) release(id);
}

static void release_leases(uint64_t id);

/* Mutex acquisitions and releases whose waiters are parked: each final event comes once, from
 * the ready list (or, when parking found no memory, from the event queue). */
static void sc_parked(void) {
    uint64_t ids[3] = {0, 0, 0};
    int ok[3];
    for (int i = 0; i < 3; i++) {
        ok[i] = started(zkl_lock_acquire(C, ZKL_MUTEX, "/pk", -1, 0, &ids[i]));
        if (ok[i]) park(ids[i]);
    }
    for (int round = 0; round < 4; round++) {
        drive();
        for (int i = 0; i < 3; i++) {
            if (!ok[i]) continue;
            if (count_ev(ids[i], ZKL_EV_ACQUIRED, ZKL_OK)) {
                ok[i] = 0;
                CHECK_INT(zkl_lock_release(C, ids[i]), ZKL_OK);
                park(ids[i]);
                drive();
                CHECK_INT(count_ev(ids[i], ZKL_EV_RELEASED, ZKL_OK), 1);
            } else if (count_ev(ids[i], ZKL_EV_FAILED, ZKL_ENOMEM)) {
                ok[i] = 0;
            }
        }
    }
    for (int i = 0; i < 3; i++)
        if (ids[i]) outcome(ids[i], 0);
}

/* Acquisitions that contend with each other: whichever is granted is released (which may let
 * the next one in), until each has its final event; then each must have exactly one. */
static void settle(const uint64_t *ids, const int *ok, int n, int lease) {
    int done[8] = {0};
    for (int round = 0; round < n + 1; round++) {
        drive();
        for (int i = 0; i < n; i++) {
            if (!ok[i] || done[i]) continue;
            if (count_ev(ids[i], ZKL_EV_ACQUIRED, ZKL_OK)) {
                done[i] = 1;
                if (lease)
                    release_leases(ids[i]);
                else
                    release(ids[i]);
            } else if (count_ev(ids[i], ZKL_EV_FAILED, ZKL_ENOMEM)) {
                done[i] = 1;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (ok[i]) outcome(ids[i], 0);
}

/* ------------------------------------------------------------------ scenarios */

static void sc_locks(void) {
    uint64_t ab[2] = {0, 0}, w = 0, r = 0, op = 0, wop = 0;
    int ok[2];
    /* an exists watch on the (missing) mutex dir: the locks below create it */
    zkl_op_args wargs = {ZKL_OP_EXISTS, "/m", NULL, 0, 0, -1, 0, 0, 1, 0};
    int wok = started(zkl_op_start(C, &wargs, &wop));
    drive();
    ok[0] = started(zkl_lock_acquire(C, ZKL_MUTEX, "/m", -1, 0, &ab[0]));
    ok[1] = started(zkl_lock_acquire(C, ZKL_MUTEX, "/m", -1, 0, &ab[1])); /* one waits */
    settle(ab, ok, 2, 0);
    if (started(zkl_lock_acquire(C, ZKL_WRITE, "/d/rw", -1, 0, &w))) {
        drive();
        if (outcome(w, 0) == 1) {
            int sr = started(zkl_lock_downgrade(C, w, &r));
            drive();
            release(w);
            if (sr && outcome(r, 0) == 1) release(r);
        }
    }
    acquire_release(ZKL_READ, "/d/rw");
    zkl_op_args args = {ZKL_OP_CHILDREN, "/m", NULL, 0, 0, -1, 0, 0, 0, 0};
    if (started(zkl_op_start(C, &args, &op))) {
        drive();
        int n = 0;
        for (int i = 0; i < nlog; i++)
            n += evlog[i].id == op && evlog[i].type == ZKL_EV_OP_DONE;
        CHECK_INT(n, 1);
    }
    if (wok) {
        int done = 0, armed = 0, fired = 0;
        for (int i = 0; i < nlog; i++) {
            if (evlog[i].id != wop) continue;
            done += evlog[i].type == ZKL_EV_OP_DONE;
            armed += evlog[i].type == ZKL_EV_OP_DONE &&
                     (evlog[i].status == ZOK || evlog[i].status == ZNONODE);
            fired += evlog[i].type == ZKL_EV_WATCH;
        }
        CHECK_INT(done, 1);
        CHECK(fired <= 1);
        CHECK(fired <= armed);
        if (counting) CHECK_INT(fired, 1);
    }
}

/* The walk's probe round (walk.c): three nodes of another session sort below the waiter's own;
 * the two far ones go unseen, the watched one's deletion makes the waiter probe the two (exists),
 * find them gone and hold without listing again. */
static void sc_walk(void) {
    static const char *const other[] = {"/w/x-lock-0000000001", "/w/x-lock-0000000002",
                                        "/w/x-lock-0000000003"};
    uint64_t id = 0;
    acquire_release(ZKL_MUTEX, "/w"); /* makes /w and moves its sequence past the others' */
    acquire_release(ZKL_MUTEX, "/w");
    for (int i = 0; i < 3; i++)
        fz_tree_add(other[i], 1);
    zkl_stats before, after;
    zkl_client_stats(C, &before);
    int ok = started(zkl_lock_acquire(C, ZKL_MUTEX, "/w", -1, 0, &id));
    drive();
    fz_tree_del(other[0]);
    fz_tree_del(other[1]);
    fz_tree_del(other[2]);
    drive();
    zkl_client_stats(C, &after);
    if (counting) { /* the round did run: two probes, no listing after the first */
        CHECK_INT((int)(after.exists - before.exists), 2);
        CHECK_INT((int)(after.lists - before.lists), 1);
    }
    if (ok && outcome(id, 0) == 1) release(id);
}

static void release_leases(uint64_t id) {
    uint64_t ids[4];
    int n = zkl_lease_ids(C, id, ids, 4);
    CHECK(n >= 1 && n <= 2);
    for (int i = 0; i < n; i++)
        release(ids[i]);
}

static void sc_sem(void) {
    uint64_t s[2] = {0, 0}, m = 0;
    int ok[2];
    ok[0] = started(zkl_semaphore_acquire(C, "/s", 2, 2, -1, 0, &s[0]));
    drive();
    ok[1] = started(zkl_semaphore_acquire(C, "/s", 2, 1, -1, 0, &s[1])); /* waits for a lease */
    settle(s, ok, 2, 1);
    zkl_multi_item items[2] = {{ZKL_MUTEX, "/m1", 0, -1, 0}, {ZKL_MUTEX, "/s2", 1, -1, 0}};
    if (started(zkl_multi_acquire(C, items, 2, -1, 0, &m))) {
        drive();
        if (outcome(m, 0) == 1) {
            uint64_t ids[2] = {0, 0};
            CHECK_INT(zkl_multi_result(C, m, ids, 2, NULL), 2);
            release(ids[1]);
            release(ids[0]);
        } else {
            int failed = -1;
            uint64_t ids[2];
            CHECK_INT(zkl_multi_result(C, m, ids, 2, &failed), 0);
            CHECK(failed == 0 || failed == 1);
        }
    }
}

/* the newest create still unanswered, or NULL */
static fz_req *pending_create(void) {
    for (int i = fz_nreqs() - 1; i >= 0; i--) {
        fz_req *r = fz_req_at(i);
        if (r->kind == FZ_CREATE && r->status == FZ_PENDING) return r;
    }
    return NULL;
}

static void sc_session(void) {
    uint64_t a = 0, b = 0;
    int sa = started(zkl_lock_acquire(C, ZKL_MUTEX, "/m", -1, 0, &a));
    fz_req *cr = pending_create();
    if (cr) { /* the server applies the create, its reply is lost with the connection */
        int rc;
        char *name = NULL;
        fz_tree_apply(cr, &rc, &name);
        free(name);
    }
    fz_disconnect();
    h_pump(C);
    fz_connect();
    drive(); /* adopted by its protected prefix */
    int held = sa ? outcome(a, 0) : 0;
    int sb = started(zkl_lock_acquire(C, ZKL_MUTEX, "/m", -1, 0, &b));
    drive();
    fz_expire();
    h_pump(C);
    fz_connect();
    drive();
    if (held == 1) {
        CHECK_INT(count_ev(a, ZKL_EV_LOCK_STATE, ZKL_LOCK_LOST), 1);
        CHECK_INT(zkl_lock_release(C, a), ZKL_ELOST);
    }
    if (sb) outcome(b, held == 1 ? ZKL_ESESSION : 0);
    if (sb && held != 1 && count_ev(b, ZKL_EV_ACQUIRED, ZKL_OK)) { /* b took the lock: lost too */
        CHECK_INT(zkl_lock_release(C, b), ZKL_ELOST);
    }
    acquire_release(ZKL_MUTEX, "/m");
}

/* A transaction of three ops (paths and data copied into the op), served, then one whose
 * connection drops in flight: each started transaction gets exactly one OP_DONE. */
static void sc_txn(void) {
    zkl_txn_op ops[3] = {{ZKL_OP_CREATE, "/t", "data", 4, 0, -1, 0},
                         {ZKL_OP_SET, "/t", "more data", 9, 0, -1, 0},
                         {ZKL_OP_CHECK, "/t", NULL, 0, 0, -1, 0}};
    uint64_t a = 0, b = 0;
    int sa = started(zkl_txn_start(C, ops, 3, 0, &a));
    drive();
    if (sa)
        CHECK_INT(count_ev(a, ZKL_EV_OP_DONE, ZOK) + count_ev(a, ZKL_EV_OP_DONE, ZKL_ENOMEM), 1);
    int sb = started(zkl_txn_start(C, ops + 1, 2, 0, &b));
    fz_disconnect();
    h_pump(C);
    fz_connect();
    drive();
    if (sb) {
        int n = 0;
        for (int i = 0; i < nlog; i++)
            n += evlog[i].id == b && evlog[i].type == ZKL_EV_OP_DONE;
        CHECK_INT(n, 1);
    }
}

/* ------------------------------------------------------------------ the sweep */

/* One run with allocation fail_at failing; returns the number of allocations made. */
static long run(void (*scenario)(void), long fail_at) {
    h_alloc_init(&A, fail_at);
    nlog = 0;
    fz_reset();
    zkl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.hosts = "fake:2181";
    cfg.session_timeout_ms = 10000;
    cfg.identity = "me";
    cfg.identity_len = 2;
    cfg.alloc = &A.a;
    C = NULL;
    int rc = zkl__client_new_zk(&cfg, &fz_table, &C);
    h_checks++;
    if (rc != ZKL_OK) {
        if (rc != ZKL_ENOMEM || counting)
            h_fail(__FILE__, __LINE__, "client_new: %s", zkl_err_name(rc));
    } else {
        fz_connect();
        drive();
        scenario();
        drive();
        h_checks++;
        if (fz_live()) {
            leftover++;
            if (counting)
                h_fail(__FILE__, __LINE__, "node left behind in the counting run: %s",
                       fz_live_at(0));
            else if (getenv("ZKL_SCRIPT_VERBOSE"))
                fprintf(stderr, "# fail_at=%ld: %d node(s) left until the session ends, e.g. %s\n",
                        fail_at, fz_live(), fz_live_at(0));
        }
        zkl_client_free(C);
        CHECK_INT(fz_handle_open(), 0); /* the session is closed: whatever was left is gone */
    }
    h_checks++;
    if (A.live != 0 || A.bytes != 0)
        h_fail(__FILE__, __LINE__, "fail_at=%ld: %ld blocks, %lld bytes not freed", fail_at, A.live,
               A.bytes);
    if (fail_at) CHECK_INT(A.failed, fail_at <= A.count ? 1 : 0);
    return A.count;
}

static void sweep(const char *name, void (*scenario)(void)) {
    counting = 1;
    long n = run(scenario, 0);
    long n2 = run(scenario, 0);
    CHECK_INT(n, n2); /* deterministic */
    counting = 0;
    leftover = 0;
    int f0 = h_failures;
    for (long k = 1; k <= n && h_failures - f0 < 20; k++)
        run(scenario, k);
    printf(
        "# alloc sweep %s: %ld allocation points, each failed once; %ld run(s) left a node until "
        "the session closed\n",
        name, n, leftover);
}

/* ------------------------------------------------------------------ targeted */

/* A fresh client on a counting allocator that fails nothing yet. */
static void fresh(void) {
    h_alloc_init(&A, 0);
    nlog = 0;
    counting = 0;
    C = h_client_alloc(&A.a);
}

static void finish(void) {
    h_free(C);
    CHECK_INT(A.live, 0);
}

/* Every allocation zkl_multi_acquire makes (the components' first start included), failed in
 * turn: the call returns ENOMEM with no event, or the multi-lock gets exactly one final event and
 * no other id gets one. */
static void multi_start_oom(void) {
    zkl_multi_item items[2] = {{ZKL_MUTEX, "/m1", 0, -1, 0}, {ZKL_MUTEX, "/m2", 0, -1, 0}};
    fresh();
    uint64_t m;
    long before = A.count;
    CHECK_INT(zkl_multi_acquire(C, items, 2, -1, 0, &m), ZKL_OK);
    long n = A.count - before;
    finish();
    CHECK(n > 3);
    for (long k = 1; k <= n; k++) {
        fresh();
        A.fail_at = A.count + k;
        int rc = zkl_multi_acquire(C, items, 2, -1, 0, &m);
        CHECK(rc == ZKL_OK || rc == ZKL_ENOMEM);
        drive();
        int mine = 0, others = 0;
        for (int i = 0; i < nlog; i++) {
            if (evlog[i].type != ZKL_EV_ACQUIRED && evlog[i].type != ZKL_EV_FAILED) continue;
            if (rc == ZKL_OK && evlog[i].id == m)
                mine++;
            else
                others++;
        }
        if (rc == ZKL_OK) CHECK_INT(mine, 1);
        if (others)
            h_fail(__FILE__, __LINE__, "k=%ld: a final event for an id the caller never got", k);
        h_checks++;
        finish();
    }
}

/* The semaphore's grant gives its internal mutex node back through a background delete. Every
 * allocation of the process() call that grants, failed in turn: the node must still be deleted
 * (or the acquisition fail and delete it), or every other acquirer of the semaphore waits behind
 * it for as long as this session lives. */
static void sem_grant_oom(void) {
    long n = 0;
    for (long k = 0; k <= n; k++) {
        fresh();
        uint64_t id;
        fz_tree_add("/s", 0);
        fz_tree_add("/s/locks", 0);
        fz_tree_add("/s/leases", 0);
        CHECK_INT(zkl_semaphore_acquire(C, "/s", 1, 1, -1, 0, &id), ZKL_OK);
        /* serve until the lease listing is the one request left */
        for (int i = 0; i < 20; i++) {
            fz_req *last = fz_req_at(fz_nreqs() - 1);
            if (last && last->kind == FZ_CHILDREN && strcmp(last->path, "/s/leases") == 0) break;
            fz_serve_all();
            h_pump(C);
        }
        fz_serve_all();
        long before = A.count;
        if (k) A.fail_at = A.count + k;
        h_pump(C); /* the listing's reply grants */
        if (!k) n = A.count - before;
        drive();
        if (getenv("ZKL_SCRIPT_VERBOSE"))
            fprintf(stderr, "# k=%ld n=%ld locks=%d\n", k, n, fz_tree_children("/s/locks"));
        CHECK_INT(fz_tree_children("/s/locks"), 0);
        finish();
    }
    CHECK(n > 0);
}

static void alloc_locks(void) {
    sweep("locks", sc_locks);
}
static void alloc_sem(void) {
    sweep("sem", sc_sem);
}
static void alloc_session(void) {
    sweep("session", sc_session);
}
static void alloc_txn(void) {
    sweep("txn", sc_txn);
}
static void alloc_walk(void) {
    sweep("walk", sc_walk);
}
static void alloc_parked(void) {
    sweep("parked", sc_parked);
}

H_DEFINE_GROUP(g_alloc, {"locks", alloc_locks}, {"sem", alloc_sem}, {"session", alloc_session},
               {"txn", alloc_txn}, {"walk", alloc_walk}, {"parked", alloc_parked},
               {"multi_start_oom", multi_start_oom}, {"sem_grant_oom", sem_grant_oom});
