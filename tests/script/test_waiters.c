/* test_waiters.c - lock waiters' and lease listings' watches under the client's one watcher
 * context: every waiter of a client registers its predecessor's watch with the same watcher
 * function and the client as its context (queue.c, semaphore.c), so the ZooKeeper client holds
 * one (watcher, context) pair however many wait; an event reaches exactly the waiters of its
 * path (found in the client's index of watches by path), a give-up takes back only its own
 * path's watch, and a session loss ends every waiter and its watch. */
#include "harness.h"

/* A mutex waiter on dir behind another client's node: its watch (getData) armed. Returns the
 * watched path (static per call site: h_join's rotating buffers are copied into `pred`). */
static uint64_t park(zkl_client *c, const char *dir, int other, char *pred, size_t n) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, dir, -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, dir);
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, dir);
    const char *o = h_other(other, "lock-", 0);
    snprintf(pred, n, "%s", h_join(dir, o));
    fz_create_ok(cr, 1, 0x100 + other);
    fz_children_v(ls, h_seqname(cr, 1), o, NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, pred);
    CHECK_INT(g->watch, 1);
    fz_data_ok(g, "other", 0x10 + other);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    return id;
}

/* Three waiters on three locks: one (watcher, context) pair; each event reaches its own waiter
 * only (a data change makes that one list again; a deletion grants it). */
static void one_pair_own_events(void) {
    zkl_client *c = h_client();
    char pa[128], pb[128], pc[128];
    uint64_t a = park(c, "/wa", 1, pa, sizeof pa);
    uint64_t b = park(c, "/wb", 2, pb, sizeof pb);
    uint64_t d = park(c, "/wc", 3, pc, sizeof pc);
    CHECK_INT(fz_armed_total(), 3);
    CHECK_INT(fz_watchers(), 1); /* a context per waiter: 3 */

    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pb), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, b, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();

    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, pa), 1); /* a revocation request, say: a looks again */
    h_pump(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, "/wa");
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    fz_children_v(ls, fz_base(pa), h_seqname(fz_req_at(0), 1), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_REQ(FZ_GET, pa), "other", 0x11);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_watchers(), 1);

    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pc), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, d, ZKL_OK);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pa), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, a, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.watch_events, 4);
    CHECK_INT(st.acquired, 3);
    CHECK_INT(fz_armed_total(), 0);
    h_free(c);
}

/* A waiter that gives up takes back its own path's watch only; another waiter's stays and
 * still wakes it. */
static void give_up_own_only(void) {
    zkl_client *c = h_client();
    char pa[128], pb[128];
    uint64_t a = park(c, "/wa", 1, pa, sizeof pa);
    uint64_t b = park(c, "/wb", 2, pb, sizeof pb);
    CHECK_INT(zkl_lock_cancel(c, a), ZKL_OK);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, a, ZKL_ECANCELED);
    fz_req *rw = NULL, *del = NULL;
    for (fz_req *r; (r = fz_next());) {
        if (r->kind == FZ_REMOVE_WATCHES) {
            CHECK(rw == NULL);
            rw = r;
        } else if (r->kind == FZ_DELETE) {
            del = r;
        } else {
            CHECK(0);
        }
    }
    CHECK(rw != NULL && del != NULL);
    if (rw) CHECK_STR(rw->path, pa);
    if (rw) fz_reply(rw, ZOK);
    if (del) fz_reply(del, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed(pa), 0);
    CHECK_INT(fz_armed(pb), 1);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pa), 0); /* nobody watches it any more */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pb), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, b, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    h_free(c);
}

/* Two readers of one client behind another client's writer watch the same node: one watch,
 * one watcher call. One gives up: the watch stays (the other needs it) and wakes the other. */
static void shared_path_give_up(void) {
    zkl_client *c = h_client();
    uint64_t a = 0, b = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_READ, "/wr", -1, 0, &a), ZKL_OK);
    CHECK_INT(zkl_lock_acquire(c, ZKL_READ, "/wr", -1, 0, &b), ZKL_OK);
    fz_req *ca = EXPECT_REQ(FZ_CREATE, "/wr/_c_"), *cb = EXPECT_REQ(FZ_CREATE, "/wr/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, "/wr");
    const char *w = h_other(1, "__WRIT__", 0);
    char pw[128];
    snprintf(pw, sizeof pw, "%s", h_join("/wr", w));
    fz_create_ok(ca, 1, 1);
    fz_create_ok(cb, 2, 2);
    fz_children_v(ls, h_seqname(cb, 2), w, h_seqname(ca, 1), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_REQ(FZ_GET, pw), "w", 1);
    fz_data_ok(EXPECT_REQ(FZ_GET, pw), "w", 1);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed(pw), 1);
    CHECK_INT(fz_watchers(), 1);

    CHECK_INT(zkl_lock_cancel(c, a), ZKL_OK);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, a, ZKL_ECANCELED);
    fz_reply(EXPECT_REQ(FZ_DELETE, ca->created), ZOK); /* no removal of the shared watch */
    EXPECT_NO_REQ();
    h_pump(c);
    CHECK_INT(fz_armed(pw), 1);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pw), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, b, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.watch_events, 1); /* b's; a was gone */
    h_free(c);
}

/* Parked waiters across a connection loss (the same session again: the watches stay with the
 * ZooKeeper client and still wake their own waiter), then across an expiry (every waiter
 * fails ESESSION, the held one is LOST, no watch is left; the old paths' events reach nobody). */
static void session_loss_parked(void) {
    zkl_client *c = h_client();
    char pa[128], pb[128], pc[128];
    uint64_t a = park(c, "/wa", 1, pa, sizeof pa);
    uint64_t b = park(c, "/wb", 2, pb, sizeof pb);
    uint64_t d = park(c, "/wc", 3, pc, sizeof pc);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    h_reconnect(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    CHECK_INT(fz_armed_total(), 3);
    CHECK_INT(fz_watchers(), 1);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pb), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, b, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();

    fz_expire();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_FAILED, d, ZKL_ESESSION); /* the newest op first */
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, b, ZKL_LOCK_LOST);
    EXPECT_EV(c, ZKL_EV_FAILED, a, ZKL_ESESSION);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed_total(), 0);
    CHECK_INT(fz_watchers(), 0);
    fz_connect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pa), 0);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pc), 0);
    h_pump(c);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    h_free(c);
}

/* A semaphore acquire of max 1 on sem that holds its internal mutex and waits on the leases
 * (another client holds the one lease): its children watch on <sem>/leases armed. */
static uint64_t lease_park(zkl_client *c, const char *sem, int other, fz_req **lease) {
    char locks[64], leases[64];
    snprintf(locks, sizeof locks, "%s/locks", sem);
    snprintf(leases, sizeof leases, "%s/leases", sem);
    uint64_t id = 0;
    CHECK_INT(zkl_semaphore_acquire(c, sem, 1, 1, -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, locks);
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, locks);
    fz_create_ok(cr, 0, 1);
    fz_children_v(ls, h_seqname(cr, 0), NULL);
    h_pump(c);
    fz_req *lc = EXPECT_REQ(FZ_CREATE, leases), *ll = EXPECT_REQ(FZ_CHILDREN, leases);
    CHECK_INT(ll->watch, 1);
    fz_create_ok(lc, 8, 8);
    fz_children_v(ll, h_other(other, "lease-", 7), h_seqname(lc, 8), NULL);
    h_pump(c);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    *lease = lc;
    return id;
}

/* Lease listings of two semaphores and a lock waiter: one pair per watcher function (two), and
 * a change of one semaphore's leases makes that one list again, nobody else. */
static void lease_listings_own_events(void) {
    zkl_client *c = h_client();
    char pa[128];
    uint64_t a = park(c, "/wa", 1, pa, sizeof pa);
    fz_req *l1, *l2;
    uint64_t s1 = lease_park(c, "/s1", 2, &l1);
    uint64_t s2 = lease_park(c, "/s2", 3, &l2);
    CHECK_INT(fz_armed_total(), 3);
    CHECK_INT(fz_watchers(), 2); /* the waiters' and the lease listings' (a context each: 3) */
    CHECK_INT(fz_fire(ZOO_CHILD_EVENT, "/s2/leases"), 1);
    h_pump(c);
    fz_req *ll = EXPECT_REQ(FZ_CHILDREN, "/s2/leases");
    CHECK_INT(ll->watch, 0);
    EXPECT_NO_REQ();
    fz_children_v(ll, h_seqname(l2, 8), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, s2, ZKL_OK);
    EXPECT_NO_EV(c);
    fz_reply(EXPECT_REQ(FZ_DELETE, "/s2/locks/"), ZOK); /* the internal mutex given back */
    EXPECT_NO_REQ();
    h_pump(c);
    CHECK_INT(fz_armed(pa), 1);
    CHECK_INT(fz_armed("/s1/leases"), 1);
    /* s1 gives up: its watch goes, not a's */
    CHECK_INT(zkl_lock_cancel(c, s1), ZKL_OK);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, s1, ZKL_ECANCELED);
    for (fz_req *r; (r = fz_next());) {
        if (r->kind == FZ_REMOVE_WATCHES) CHECK_STR(r->path, "/s1/leases");
        fz_reply(r, ZOK);
    }
    h_pump(c);
    (void)l1;
    CHECK_INT(fz_armed("/s1/leases"), 0);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, pa), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, a, ZKL_OK);
    EXPECT_NO_EV(c);
    h_free(c);
}

H_DEFINE_GROUP(g_waiters, {"one_pair_own_events", one_pair_own_events},
               {"give_up_own_only", give_up_own_only}, {"shared_path_give_up", shared_path_give_up},
               {"session_loss_parked", session_loss_parked},
               {"lease_listings_own_events", lease_listings_own_events});
