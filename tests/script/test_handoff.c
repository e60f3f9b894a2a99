/* test_handoff.c - the walk down the kept listing: when the watched node goes, a waiter checks
 * the next lower node of the listing that made it wait (getData with a watch) instead of listing
 * the dir again, and holds when none is left. Nodes gone (NONODE) are skipped, a reader skips
 * readers, the write side lists before it holds, and a dropped link, a wrapped sequence or a
 * give-up end the walk. */
#include "harness.h"
#include "internal.h" /* ZKL_WALK_MAX */

#define DIR "/ho"
#define W "__WRIT__"
#define R "__READ__"

static h_alloc A;

/* A client on a counting allocator (every block is checked freed at the end). */
static zkl_client *client(void) {
    h_alloc_init(&A, 0);
    return h_client_alloc(&A.a);
}

static void finish(zkl_client *c) {
    h_free(c);
    CHECK_INT(A.live, 0);
}

static uint64_t start(zkl_client *c, zkl_recipe r, fz_req **cr, fz_req **ls) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, r, DIR, -1, 0, &id), ZKL_OK);
    *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    return id;
}

/* the next request is a getData with a watch on name */
static fz_req *expect_get(const char *file, int line, const char *name) {
    fz_req *g = h_expect_req(file, line, FZ_GET, DIR "/");
    h_checks++;
    if (strcmp(g->path, h_join(DIR, name)) != 0)
        h_fail(file, line, "getData on %s, expected %s", g->path, h_join(DIR, name));
    h_checks++;
    if (g->watch != 1) h_fail(file, line, "getData on %s without a watch", g->path);
    return g;
}
#define EXPECT_GET(name) expect_get(__FILE__, __LINE__, (name))

/* the next request is an exists() without a watch on name (a probe of the walk) */
static fz_req *expect_exists(const char *file, int line, const char *name) {
    fz_req *e = h_expect_req(file, line, FZ_EXISTS, DIR "/");
    h_checks++;
    if (strcmp(e->path, h_join(DIR, name)) != 0)
        h_fail(file, line, "exists on %s, expected %s", e->path, h_join(DIR, name));
    h_checks++;
    if (e->watch != 0) h_fail(file, line, "exists on %s with a watch", e->path);
    return e;
}
#define EXPECT_EXISTS(name) expect_exists(__FILE__, __LINE__, (name))

static int64_t stat_of(zkl_client *c, int which) {
    zkl_stats st;
    zkl_client_stats(c, &st);
    return which == 0 ? st.lists : which == 1 ? st.gets : which == 2 ? st.handoffs : st.exists;
}
#define LISTS(c) stat_of((c), 0)
#define GETS(c) stat_of((c), 1)
#define HANDOFFS(c) stat_of((c), 2)
#define EXISTS(c) stat_of((c), 3)

/* Four other clients' nodes before ours. The predecessor goes: the three below it are checked
 * with exists() (no watch), pipelined, nearest first; the nearest one still there (o3) is
 * watched with getData, no listing. o3 goes: only o2 is left to check, so it is watched at once;
 * it is gone already (NONODE, no watch left) and was the last: the lock is ours, still without a
 * listing. Fails if the walk skips a node. */
static void walk_down_to_grant(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 1), *o2 = h_other(2, "lock-", 2);
    const char *o3 = h_other(3, "lock-", 3), *o4 = h_other(4, "lock-", 4);
    fz_create_ok(cr, 5, 0x55);
    fz_children_v(ls, o3, h_seqname(cr, 5), o1, o4, o2, NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(o4), "x", 4);
    h_pump(c);
    EXPECT_NO_REQ();
    CHECK_INT(fz_armed(h_join(DIR, o4)), 1);

    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o4)), 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *e3 = EXPECT_EXISTS(o3), *e2 = EXPECT_EXISTS(o2), *e1 = EXPECT_EXISTS(o1);
    EXPECT_NO_REQ(); /* not a listing */
    fz_stat_owner(e3, 3, 77);
    fz_stat_owner(e2, 2, 77);
    fz_reply(e1, ZNONODE);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed_total(), 0); /* the probes set no watch */
    fz_req *g3 = EXPECT_GET(o3);    /* the nearest one still there */
    EXPECT_NO_REQ();
    fz_data_ok(g3, "x", 3);
    h_pump(c);
    CHECK_INT(fz_armed(h_join(DIR, o3)), 1);
    EXPECT_NO_EV(c);

    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o3)), 1);
    h_pump(c);
    fz_req *g2 = EXPECT_GET(o2); /* the only one left: watched at once */
    EXPECT_NO_REQ();
    fz_reply(g2, ZNONODE); /* gone already: none left, the lock is ours */
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    CHECK_INT(fz_armed_total(), 0);
    CHECK_INT(LISTS(c), 1);
    CHECK_INT(GETS(c), 3);
    CHECK_INT(EXISTS(c), 3);
    CHECK_INT(HANDOFFS(c), 1);
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.token, 0x55);
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, cr->created), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id, ZKL_OK);
    CHECK_INT(fz_live(), 0);
    finish(c);
}

/* The watch fires right behind the reply that set it (both delivered in one pump), twice in a
 * row: the walk goes on from each. A data change on the watched node (a revocation request)
 * still means a full listing. */
static void walk_watch_fires_during_walk(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 1), *o2 = h_other(2, "lock-", 2);
    const char *o3 = h_other(3, "lock-", 3);
    fz_create_ok(cr, 4, 4);
    fz_children_v(ls, o1, o2, o3, h_seqname(cr, 4), NULL);
    h_pump(c);
    fz_req *g3 = EXPECT_GET(o3);
    CHECK_INT(fz_data_ok(g3, "x", 3), 0);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o3)), 1);
    h_pump(c);
    fz_req *e2 = EXPECT_EXISTS(o2), *e1 = EXPECT_EXISTS(o1);
    EXPECT_NO_REQ();
    fz_stat_owner(e2, 2, 77);
    fz_stat_owner(e1, 1, 77);
    h_pump(c);
    fz_req *g2 = EXPECT_GET(o2);
    EXPECT_NO_REQ();
    CHECK_INT(fz_data_ok(g2, "x", 2), 0);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    fz_req *g1 = EXPECT_GET(o1); /* the last one: watched at once */
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    fz_data_ok(g1, "x", 1);
    h_pump(c);
    /* o1 is told to give up (data changed): look at the whole dir again */
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    fz_children_v(ls2, o1, h_seqname(cr, 4), NULL);
    h_pump(c);
    fz_req *g1b = EXPECT_GET(o1);
    fz_data_ok(g1b, "x", 1);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    CHECK_INT(LISTS(c), 2);
    finish(c);
}

/* A reader watches the first writer; when it goes, the writers below its node are checked
 * (readers in between never are), and the nearest one still there is watched. With no writer
 * left the read lock is ours without a listing. */
static void walk_reader_skips_readers(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_READ, &cr, &ls);
    const char *w0 = h_other(1, W, 0), *r1 = h_other(2, R, 1), *w2 = h_other(3, W, 2);
    const char *r3 = h_other(4, R, 3), *w4 = h_other(5, W, 4), *r5 = h_other(6, R, 5);
    const char *w7 = h_other(7, W, 7);
    fz_create_ok(cr, 6, 6);
    fz_children_v(ls, r5, w7, h_seqname(cr, 6), r3, w4, w0, r1, w2, NULL);
    h_pump(c);
    fz_req *g0 = EXPECT_GET(w0); /* Curator's rule: the first writer */
    fz_data_ok(g0, "w", 0);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, w0)), 1);
    h_pump(c);
    fz_req *e4 = EXPECT_EXISTS(w4), *e2 = EXPECT_EXISTS(w2); /* r5, r3, r1 skipped */
    EXPECT_NO_REQ();
    fz_stat_owner(e4, 4, 77);
    fz_reply(e2, ZNONODE);
    h_pump(c);
    fz_req *g4 = EXPECT_GET(w4);
    EXPECT_NO_REQ();
    fz_data_ok(g4, "w", 4);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, w4)), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK); /* w0, w2, w4 seen gone: no writer left */
    EXPECT_NO_REQ();
    CHECK_INT(LISTS(c), 1);
    CHECK_INT(GETS(c), 2);
    CHECK_INT(EXISTS(c), 2);
    finish(c);
}

/* The write side walks too, but lists before it takes the lock: a holder's downgrade may have
 * made a read node with an old sequence, which the listing shows (and then it waits for it). */
static void walk_writer_lists_before_grant(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_WRITE, &cr, &ls);
    const char *w1 = h_other(1, W, 1), *r2 = h_other(2, R, 2);
    const char *down = h_other(3, R, 1); /* w1's holder downgraded: a read node with w1's key */
    fz_create_ok(cr, 3, 3);
    fz_children_v(ls, h_seqname(cr, 3), r2, w1, NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(r2), "r", 2);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, r2)), 1);
    h_pump(c);
    fz_req *g1 = EXPECT_GET(w1);
    EXPECT_NO_REQ();
    fz_reply(g1, ZNONODE);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    fz_children_v(ls2, h_seqname(cr, 3), down, NULL);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_data_ok(EXPECT_GET(down), "r", 1);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, down)), 1);
    h_pump(c);
    fz_children_v(EXPECT_REQ(FZ_CHILDREN, DIR), h_seqname(cr, 3), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    finish(c);
}

/* The link drops while the walk's probes are in flight: after the reconnect the waiter lists
 * again (the walk resumes from that listing). A link that drops while a watch is armed: the
 * watch survives the reconnect, and its event means a listing too. */
static void walk_reconnect_lists(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 1), *o2 = h_other(2, "lock-", 2);
    const char *o3 = h_other(3, "lock-", 3);
    fz_create_ok(cr, 4, 4);
    fz_children_v(ls, o1, o2, o3, h_seqname(cr, 4), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(o3), "x", 3);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o3)), 1);
    h_pump(c);
    fz_req *e2 = EXPECT_EXISTS(o2), *e1 = EXPECT_EXISTS(o1);
    fz_stat_owner(e2, 2, 77); /* answered, but the link drops before the other reply */
    fz_disconnect();
    h_pump(c);
    CHECK_INT(e1->rc, ZCONNECTIONLOSS);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_REQ();
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR); /* not a getData on o2 */
    EXPECT_NO_REQ();
    fz_children_v(ls2, o1, o2, h_seqname(cr, 4), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(o2), "x", 2);
    h_pump(c);
    /* the link drops with the watch on o2 armed; o2 goes while we are away */
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_REQ();
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    fz_req *ls3 = EXPECT_REQ(FZ_CHILDREN, DIR); /* the kept listing went with the link */
    EXPECT_NO_REQ();
    fz_children_v(ls3, o1, h_seqname(cr, 4), NULL);
    h_pump(c);
    fz_reply(EXPECT_GET(o1), ZNONODE); /* the head: ours */
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    CHECK_INT(LISTS(c), 3);
    finish(c);
}

/* The session expires during the walk: FAILED with ESESSION, nothing kept (the allocator's
 * count is back to zero), nothing more sent. */
static void walk_session_expired(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 1), *o2 = h_other(2, "lock-", 2);
    fz_create_ok(cr, 3, 3);
    fz_children_v(ls, o1, o2, h_seqname(cr, 3), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(o2), "x", 2);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    fz_req *g1 = EXPECT_GET(o1);
    fz_expire();
    h_pump(c);
    CHECK_INT(g1->rc, ZSESSIONEXPIRED);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ESESSION);
    finish(c);
}

/* Cancelled while the walk's getData is in flight: FAILED at once, the node is deleted; the late
 * reply then set a watch, which is taken back; a late NONODE leads nowhere either. */
static void walk_late_reply_after_cancel(int found) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 1), *o2 = h_other(2, "lock-", 2);
    fz_create_ok(cr, 3, 3);
    fz_children_v(ls, o1, o2, h_seqname(cr, 3), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(o2), "x", 2);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    fz_req *g1 = EXPECT_GET(o1);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    fz_req *del = EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_REQ();
    if (found)
        fz_data_ok(g1, "x", 1);
    else
        fz_reply(g1, ZNONODE);
    fz_reply(del, ZOK);
    h_pump(c);
    if (found) {
        fz_req *rw = EXPECT_REQ(FZ_REMOVE_WATCHES, h_join(DIR, o1));
        CHECK_STR(rw->path, h_join(DIR, o1));
        fz_reply(rw, ZOK);
        h_pump(c);
    }
    EXPECT_NO_REQ(); /* no walk, no grant */
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);
    finish(c);
}
static void walk_late_found_after_cancel(void) {
    walk_late_reply_after_cancel(1);
}
static void walk_late_nonode_after_cancel(void) {
    walk_late_reply_after_cancel(0);
}

/* The queue o0 (another client), a, o2 (another client), b; a and b are this client's, listed
 * by one shared listing. o0 goes: a holds (the client's floor for the dir is now a's node), b
 * watches o2. Returns the client; *ca is a's create. */
static zkl_client *own_grant_then_waiter(uint64_t *a, uint64_t *b, fz_req **ca, const char **o2) {
    zkl_client *c = client();
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, a), ZKL_OK);
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, b), ZKL_OK);
    *ca = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    fz_req *cb = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    const char *o0 = h_other(1, "lock-", 0);
    *o2 = h_other(2, "lock-", 2);
    fz_create_ok(*ca, 1, 1);
    fz_create_ok(cb, 3, 3);
    fz_children_v(ls, *o2, h_seqname(cb, 3), o0, h_seqname(*ca, 1), NULL);
    h_pump(c);
    fz_req *g0 = EXPECT_GET(o0);
    fz_req *g2 = EXPECT_GET(*o2);
    EXPECT_NO_REQ();
    fz_data_ok(g0, "x", 0);
    fz_data_ok(g2, "x", 2);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o0)), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, *a, ZKL_OK);
    EXPECT_NO_EV(c);
    return c;
}

/* a releases (its own delete marks its node gone); then o2 goes: b holds without checking a's
 * node, and without a listing. */
static void walk_floor_of_own_grant(void) {
    uint64_t a = 0, b = 0;
    fz_req *ca;
    const char *o2;
    zkl_client *c = own_grant_then_waiter(&a, &b, &ca, &o2);
    CHECK_INT(zkl_lock_release(c, a), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, ca->created), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, a, ZKL_OK);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, b, ZKL_OK); /* a sorts at the floor: gone, not checked */
    EXPECT_NO_REQ();
    CHECK_INT(GETS(c), 2);
    CHECK_INT(LISTS(c), 1);
    finish(c);
}

/* The same, but o2 goes while a still holds: the floor (a's grant) must not count a's own node
 * as gone. b watches a's node and holds only once a has released. Granting b at once (two
 * holders in one client) is what the soak caught: spec/91-soak, seed 293869 under LuaJIT. */
static void walk_floor_holder_still_holds(void) {
    uint64_t a = 0, b = 0;
    fz_req *ca;
    const char *o2;
    zkl_client *c = own_grant_then_waiter(&a, &b, &ca, &o2);
    /* o2 (between a and b) gives up while a holds */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    EXPECT_NO_EV(c); /* not ACQUIRED: a holds */
    fz_req *ga = EXPECT_GET(h_seqname(ca, 1));
    EXPECT_NO_REQ();
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, b, &info), ZKL_OK);
    CHECK_INT(info.held, 0);
    fz_data_ok(ga, "me", 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    /* a releases: b holds (its watch on a's node fires) */
    OWN_HANDOFF(c, a, ca, b);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    finish(c);
}

/* A wrapped sequence in the listing: no walk (new nodes may sort before old ones): list again. */
static void walk_not_after_wrap(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    const char *neg = h_other(1, "lock-", -7), *o2 = h_other(2, "lock-", 2);
    fz_create_ok(cr, 3, 3);
    fz_children_v(ls, o2, h_seqname(cr, 3), neg, NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WARNING, id, ZKL_ESEQWRAP);
    fz_data_ok(EXPECT_GET(o2), "x", 2);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    fz_children_v(ls2, h_seqname(cr, 3), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    finish(c);
}

/* Cancelled while the walk's probes are in flight: FAILED at once, the node is deleted; the late
 * probe replies lead nowhere (no watch, no grant). */
static void walk_probes_after_cancel(void) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 1), *o2 = h_other(2, "lock-", 2);
    const char *o3 = h_other(3, "lock-", 3);
    fz_create_ok(cr, 4, 4);
    fz_children_v(ls, o1, o2, o3, h_seqname(cr, 4), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(o3), "x", 3);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o3)), 1);
    h_pump(c);
    fz_req *e2 = EXPECT_EXISTS(o2), *e1 = EXPECT_EXISTS(o1);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    fz_req *del = EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_REQ();
    fz_reply(e2, ZNONODE);
    fz_reply(e1, ZNONODE); /* "none left": must not grant a cancelled op */
    fz_reply(del, ZOK);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed_total(), 0);
    CHECK_INT(fz_live(), 0);
    finish(c);
}

/* Many nodes below the one that went, none seen gone and no grant of ours under them: more than
 * ZKL_WALK_MAX to check, or more than ZKL_WALK_CHEAP in a listing less than 8 times their number,
 * so the waiter lists again; the listing leaves only the live ones, and the walk goes on from it.
 */
static void too_far(int N) {
    zkl_client *c = client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_MUTEX, &cr, &ls);
    /* others with sequences 1..N; ours N + 1 */
    static char names[ZKL_WALK_MAX + 3][80];
    const char *list[ZKL_WALK_MAX + 4];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "%s", h_other(i + 1, "lock-", i + 1));
        list[i] = names[i];
    }
    fz_create_ok(cr, N + 1, 1);
    snprintf(names[N], sizeof names[N], "%s", h_seqname(cr, N + 1));
    list[N] = names[N];
    list[N + 1] = NULL;
    fz_children_ok(ls, list);
    h_pump(c);
    fz_data_ok(EXPECT_GET(names[N - 1]), "x", 1);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, names[N - 1])), 1);
    h_pump(c);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR); /* N - 1 left: list */
    EXPECT_NO_REQ();
    fz_children_v(ls2, names[N], names[1], names[3], NULL);
    h_pump(c);
    fz_data_ok(EXPECT_GET(names[3]), "x", 1);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, names[3])), 1);
    h_pump(c);
    fz_reply(EXPECT_GET(names[1]), ZNONODE); /* one left: watched at once; gone: ours */
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    CHECK_INT(LISTS(c), 2);
    finish(c);
}

static void walk_too_far_lists(void) {
    too_far(ZKL_WALK_MAX + 2);
}
static void walk_short_queue_lists(void) {
    too_far(ZKL_WALK_CHEAP + 2);
}

H_DEFINE_GROUP(g_handoff, {"walk_down_to_grant", walk_down_to_grant},
               {"watch_fires_during_walk", walk_watch_fires_during_walk},
               {"reader_skips_readers", walk_reader_skips_readers},
               {"writer_lists_before_grant", walk_writer_lists_before_grant},
               {"reconnect_lists", walk_reconnect_lists}, {"session_expired", walk_session_expired},
               {"late_found_after_cancel", walk_late_found_after_cancel},
               {"late_nonode_after_cancel", walk_late_nonode_after_cancel},
               {"floor_of_own_grant", walk_floor_of_own_grant},
               {"floor_holder_still_holds", walk_floor_holder_still_holds},
               {"not_after_wrap", walk_not_after_wrap}, {"too_far_lists", walk_too_far_lists},
               {"probes_after_cancel", walk_probes_after_cancel},
               {"short_queue_lists", walk_short_queue_lists});
