/* test_mutex.c - the mutex recipe on a scripted server: grant, pipelining, shared listings,
 * handoff, predecessor races, parents, try-once, late and stale arrivals, plain znode ops. */
#include "harness.h"

#define DIR "/lk"

/* Start a mutex acquire and take its create + pipelined list (after one process()). */
static uint64_t acquire(zkl_client *c, fz_req **cr, fz_req **ls) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    return id;
}

static void mutex_grant(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    EXPECT_NO_REQ(); /* the listing waits for the flush in process() */
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    /* create + getChildren pipelined before any reply */
    CHECK_INT(cr->status, FZ_PENDING);
    CHECK_INT(ls->status, FZ_PENDING);
    CHECK(h_is_protected(cr->path, DIR, "lock-"));
    CHECK_INT(cr->mode, ZOO_EPHEMERAL_SEQUENTIAL);
    CHECK_STR(cr->data, "me");
    CHECK_INT(ls->watch, 0);
    EXPECT_NO_EV(c);
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.held, 0);
    CHECK_STR(info.node, "");

    /* another client's node sorts after ours: we are first */
    CHECK_INT(fz_create_ok(cr, 7, 0x77), 0);
    CHECK_INT(fz_children_v(ls, h_other(1, "lock-", 8), h_seqname(cr, 7), NULL), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.held, 1);
    CHECK_INT(info.token, 0x77);
    CHECK_STR(info.node, h_join(DIR, h_seqname(cr, 7)));
    CHECK_INT(fz_armed_total(), 0);

    /* release: one delete of the own node, RELEASED when it is answered */
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    CHECK_INT(zkl_lock_release(c, id), ZKL_ENOTHELD);
    fz_req *del = EXPECT_REQ(FZ_DELETE, DIR "/");
    CHECK_STR(del->path, cr->created);
    CHECK_INT(del->mode, -1);
    EXPECT_NO_REQ();
    zkl_client_process(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_reply(del, ZOK), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id, ZKL_OK);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_lock_release(c, id), ZKL_ENOTFOUND);
    CHECK_INT(fz_live(), 0);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.creates, 1);
    CHECK_INT(st.lists, 1);
    CHECK_INT(st.deletes, 1);
    CHECK_INT(st.acquired, 1);
    h_free(c);
}

/* Waiter behind a non-head node: its deletion means a walk down the kept listing (getData on the
 * next lower node, no new listing); that one is the head, whose deletion grants. */
static void mutex_handoff(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = acquire(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 0), *o2 = h_other(2, "lock-", 1);
    fz_create_ok(cr, 2, 0x22);
    /* listing order is not sort order */
    fz_children_v(ls, h_seqname(cr, 2), o2, o1, NULL);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *g = EXPECT_REQ(FZ_GET, DIR "/");
    CHECK_STR(g->path, h_join(DIR, o2)); /* the immediate predecessor, not the head */
    CHECK_INT(g->watch, 1);
    EXPECT_NO_REQ();
    fz_data_ok(g, "other", 0x11);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed(h_join(DIR, o2)), 1);

    /* o2 gives up: we watch o1, the next lower node of our listing, now the head */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *g2 = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    CHECK_INT(g2->watch, 1);
    fz_data_ok(g2, "other", 0x10);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);

    /* the head goes: granted at once, no listing */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.handoffs, 1);
    CHECK_INT(st.lists, 1);
    CHECK_INT(st.gets, 2);
    CHECK_INT(st.watch_events, 2);
    zkl_lock_info info;
    zkl_lock_info_get(c, id, &info);
    CHECK_INT(info.token, 0x22);
    h_free(c);
}

/* The watched predecessor is gone before getData arrives (ZNONODE, no watch left): a non-head
 * predecessor means the next lower node is checked; a head predecessor means the lock is ours. */
static void mutex_predecessor_gone_before_watch(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = acquire(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 3), *o2 = h_other(2, "lock-", 4);
    fz_create_ok(cr, 5, 0x55);
    fz_children_v(ls, o1, o2, h_seqname(cr, 5), NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, o2));
    fz_reply(g, ZNONODE);
    h_pump(c);
    CHECK_INT(fz_armed_total(), 0);
    EXPECT_NO_EV(c);
    fz_req *g2 = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    EXPECT_NO_REQ();
    fz_reply(g2, ZNONODE); /* the head is gone too: ours without listing */
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    h_free(c);
}

/* A data change on the watched node (Curator's revocation request) makes the waiter look again. */
static void mutex_data_changed_relists(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = acquire(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 0);
    fz_create_ok(cr, 1, 0x5);
    fz_children_v(ls, o1, h_seqname(cr, 1), NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    fz_data_ok(g, "x", 1);
    h_pump(c);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    fz_children_v(ls2, h_seqname(cr, 1), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    h_free(c);
}

/* Two waiters of one client: one listing serves both creates; the second waits behind the first
 * (not the head), and the first's release hands over without a listing: 4 requests per
 * acquisition (create, list, getData, delete). */
static void mutex_own_client_handoff(void) {
    zkl_client *c = h_client();
    uint64_t a = 0, b = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &a), ZKL_OK);
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &b), ZKL_OK);
    fz_req *ca = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    fz_req *cb = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    CHECK(strcmp(ca->path, cb->path) != 0); /* a fresh protected prefix each */
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR); /* one shared listing */
    EXPECT_NO_REQ();
    const char *o1 = h_other(1, "lock-", 0);
    fz_create_ok(ca, 1, 0x101);
    fz_create_ok(cb, 2, 0x102);
    fz_children_v(ls, h_seqname(cb, 2), h_seqname(ca, 1), o1, NULL);
    h_pump(c);
    fz_req *ga = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    fz_req *gb = EXPECT_REQ(FZ_GET, ca->created);
    EXPECT_NO_REQ();
    fz_data_ok(ga, "o", 1);
    fz_data_ok(gb, "me", 0x101);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1));
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, a, ZKL_OK);
    EXPECT_NO_REQ();
    /* a releases: the server notifies b's watch before it answers the delete */
    OWN_HANDOFF(c, a, ca, b);
    EXPECT_NO_REQ(); /* no listing for b */
    CHECK_INT(zkl_lock_release(c, b), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, cb->created), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, b, ZKL_OK);
    EXPECT_NO_EV(c);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.creates + st.lists + st.gets + st.deletes, 8 - 1); /* the listing is shared */
    CHECK_INT(st.handoffs, 2);
    CHECK_INT(fz_live(), 0);
    h_free(c);
}

/* timeout 0: one look; not first means ETIMEDOUT and the node is deleted. */
static void mutex_try_once(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, 0, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_create_ok(cr, 4, 4);
    fz_children_v(ls, h_other(1, "lock-", 3), h_seqname(cr, 4), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ETIMEDOUT);
    fz_req *d = EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_REQ(); /* no getData */
    fz_reply(d, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);

    /* and first: granted */
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, 0, 0, &id), ZKL_OK);
    cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_create_ok(cr, 5, 5);
    fz_children_v(ls, h_seqname(cr, 5), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    h_free(c);
}

/* The lock dir is missing: the create fails NONODE; every ancestor is created as a container,
 * pipelined ahead of a second create + list. The first pipelined list's reply is of an older
 * generation and is ignored. */
static void mutex_parents_and_stale_list(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, "/a/b", -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, "/a/b/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, "/a/b");
    fz_reply(cr, ZNONODE);
    h_pump(c);
    fz_req *p1 = EXPECT_REQ(FZ_CREATE, "/a");
    fz_req *p2 = EXPECT_REQ(FZ_CREATE, "/a/b");
    fz_req *cr2 = EXPECT_REQ(FZ_CREATE, "/a/b/_c_");
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, "/a/b");
    EXPECT_NO_REQ();
    CHECK_STR(p1->path, "/a");
    CHECK_STR(p2->path, "/a/b");
    CHECK_INT(p1->mode, ZOO_CONTAINER);
    CHECK_INT(p2->mode, ZOO_CONTAINER);
    CHECK_STR(cr2->path, cr->path); /* same protected prefix */
    /* the old listing answers now, without our node: stale, ignored (no restart) */
    fz_children_v(ls, NULL);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    fz_reply(p1, ZNODEEXISTS);
    fz_create_ok(p2, 0, 0x2);
    fz_create_ok(cr2, 0, 0x3);
    fz_children_v(ls2, h_seqname(cr2, 0), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();

    /* a parent we may not create: the acquire fails with that cause */
    uint64_t id2 = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, "/x", -1, 0, &id2), ZKL_OK);
    fz_req *cx = EXPECT_REQ(FZ_CREATE, "/x/_c_");
    zkl_client_process(c);
    fz_req *lx = EXPECT_REQ(FZ_CHILDREN, "/x");
    fz_reply(cx, ZNONODE);
    fz_reply(lx, ZNONODE);
    h_pump(c);
    fz_req *px = EXPECT_REQ(FZ_CREATE, "/x");
    fz_req *cx2 = EXPECT_REQ(FZ_CREATE, "/x/_c_");
    fz_req *lx2 = EXPECT_REQ(FZ_CHILDREN, "/x");
    fz_reply(px, ZNOAUTH);
    fz_reply(cx2, ZNONODE);
    fz_reply(lx2, ZNONODE);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id2, ZKL_ZNOAUTH);
    EXPECT_NO_REQ(); /* nothing was created: nothing to delete */
    EXPECT_NO_EV(c);
    h_free(c);
}

/* Our own node is missing from the listing (deleted by someone): queue again. */
static void mutex_own_node_missing(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = acquire(c, &cr, &ls);
    fz_create_ok(cr, 3, 3);
    fz_children_v(ls, h_other(1, "lock-", 1), NULL);
    h_pump(c);
    fz_req *cr2 = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    fz_create_ok(cr2, 4, 4);
    fz_children_v(ls2, h_seqname(cr2, 4), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    zkl_lock_info info;
    zkl_lock_info_get(c, id, &info);
    CHECK_INT(info.token, 4);
    h_free(c);
}

/* Late arrivals: a watch event for a waiter that was released, a reply after a cancel. */
static void mutex_late_arrivals(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = acquire(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 0);
    /* cancel with create + list in flight: FAILED at once, the late create reply is deleted and
     * the list reply ignored */
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_ENOTFOUND);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    EXPECT_NO_REQ();
    fz_create_ok(cr, 1, 1);
    fz_children_v(ls, o1, h_seqname(cr, 1), NULL);
    h_pump(c);
    fz_req *d = EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_REQ(); /* no getData from the ignored listing */
    fz_reply(d, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);

    /* a watch that fires after its waiter gave up */
    uint64_t id2 = acquire(c, &cr, &ls);
    fz_create_ok(cr, 2, 2);
    fz_children_v(ls, o1, h_seqname(cr, 2), NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    fz_data_ok(g, "o", 1);
    h_pump(c);
    CHECK_INT(zkl_lock_cancel(c, id2), ZKL_OK);
    fz_req *rw = EXPECT_REQ(FZ_REMOVE_WATCHES, h_join(DIR, o1));
    CHECK_INT(rw->mode, ZWATCHTYPE_DATA);
    fz_req *d2 = EXPECT_REQ(FZ_DELETE, cr->created);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id2, ZKL_ECANCELED);
    /* the watch fires before the removal is answered: ignored */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    fz_reply(rw, ZNOWATCHER);
    fz_reply(d2, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    CHECK_INT(fz_live(), 0);
    CHECK_INT(zkl_lock_info_get(c, id2, &(zkl_lock_info){0}), ZKL_ENOTFOUND);
    h_free(c);
}

/* Plain znode operations: results, and reads retried across a connection loss. */
static void plain_ops(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    zkl_op_args a = {ZKL_OP_CREATE, "/p", "v1", 2, 1 | 2, -1, 0, 0, 0, 0};
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    fz_req *r = EXPECT_REQ(FZ_CREATE, "/p");
    CHECK_INT(r->mode, ZOO_EPHEMERAL_SEQUENTIAL);
    CHECK_STR(r->data, "v1");
    fz_create_ok(r, 9, 0x99);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    zkl_op_result res;
    CHECK_INT(zkl_op_result_get(c, id, &res), ZKL_OK);
    CHECK_STR(res.data, "/p0000000009");
    CHECK_INT(res.czxid, 0x99);

    zkl_op_args g = {ZKL_OP_GET, "/p0000000009", NULL, 0, 0, -1, 0, 0, 0, 0};
    CHECK_INT(zkl_op_start(c, &g, &id), ZKL_OK);
    r = EXPECT_REQ(FZ_GET, "/p0000000009");
    CHECK_INT(r->watch, 0);
    fz_disconnect(); /* the read fails with ZCONNECTIONLOSS: sent again after reconnect */
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    r = EXPECT_REQ(FZ_GET, "/p0000000009");
    fz_data_ok(r, "v1", 0x99);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    CHECK_INT(zkl_op_result_get(c, id, &res), ZKL_OK);
    CHECK_INT((int)res.len, 2);
    CHECK(res.data && memcmp(res.data, "v1", 2) == 0);

    zkl_op_args ch = {ZKL_OP_CHILDREN, "/", NULL, 0, 0, -1, 0, 0, 0, 0};
    CHECK_INT(zkl_op_start(c, &ch, &id), ZKL_OK);
    fz_children_v(EXPECT_REQ(FZ_CHILDREN, "/"), "p0000000009", "q", NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    CHECK_INT(zkl_op_result_get(c, id, &res), ZKL_OK);
    CHECK_INT(res.nchildren, 2);
    CHECK(res.nchildren == 2 && strcmp(res.children[1], "q") == 0);

    /* a delete is not retried: its outcome is unknown */
    zkl_op_args d = {ZKL_OP_DELETE, "/p0000000009", NULL, 0, 0, 3, 0, 0, 0, 0};
    CHECK_INT(zkl_op_start(c, &d, &id), ZKL_OK);
    r = EXPECT_REQ(FZ_DELETE, "/p0000000009");
    CHECK_INT(r->mode, 3);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZKL_ZCONNECTIONLOSS); /* its completion runs first */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_REQ();
    CHECK_INT(zkl_op_start(c, &(zkl_op_args){ZKL_OP_GET, "nope", NULL, 0, 0, -1, 0, 0, 0, 0}, &id),
              ZKL_EINVAL);
    h_free(c);
}

/* An ancestor reaped while the parents are being made: /a is made, then reaped before /a/b's
 * create, so /a/b and the node meet ZNONODE. That is no refusal: the parents are made again and
 * the lock is granted (it used to fail the acquire with ZNONODE). */
static void mutex_parent_reaped_while_making_parents(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, "/a/b", -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, "/a/b/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, "/a/b");
    fz_reply(cr, ZNONODE);
    fz_reply(ls, ZNONODE);
    h_pump(c);
    for (int round = 0; round < 3; round++) {
        fz_req *p1 = EXPECT_REQ(FZ_CREATE, "/a");
        fz_req *p2 = EXPECT_REQ(FZ_CREATE, "/a/b");
        fz_req *cr2 = EXPECT_REQ(FZ_CREATE, "/a/b/_c_");
        fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, "/a/b");
        EXPECT_NO_REQ();
        fz_create_ok(p1, 0, 0x10 + round);
        fz_reply(p2, ZNONODE); /* /a reaped in between */
        fz_reply(cr2, ZNONODE);
        fz_reply(ls2, ZNONODE);
        h_pump(c);
        EXPECT_NO_EV(c); /* not failed: made again */
    }
    fz_serve_all();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    h_free(c);
}

/* zkl_lock_acquire_ex: the create carries the acquisition's own data (NULs included), empty data
 * when asked, the identity without data; bad arguments are refused before anything is sent. */
static void acquire_ex_data(void) {
    zkl_client *c = h_client();
    uint64_t id = 0, id2 = 0, id3 = 0;
    zkl_lock_args a = {ZKL_MUTEX, DIR, -1, 0, "part\0-1", 7};
    CHECK_INT(zkl_lock_acquire_ex(c, &a, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    CHECK(h_is_protected(cr->path, DIR, "lock-"));
    CHECK_INT(cr->len, 7);
    CHECK(memcmp(cr->data, "part\0-1", 7) == 0);
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    zkl_lock_args e = {ZKL_MUTEX, DIR, -1, 0, "", 0};
    CHECK_INT(zkl_lock_acquire_ex(c, &e, &id2), ZKL_OK);
    fz_req *cr2 = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    CHECK_INT(cr2->len, 0);
    zkl_lock_args n = {ZKL_MUTEX, DIR, -1, 0, NULL, 0};
    CHECK_INT(zkl_lock_acquire_ex(c, &n, &id3), ZKL_OK);
    fz_req *cr3 = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    CHECK_STR(cr3->data, "me");
    /* refused: nothing sent, nothing started */
    uint64_t bad = 0;
    zkl_lock_args b1 = {ZKL_MUTEX, DIR, -1, 0, NULL, 3};
    CHECK_INT(zkl_lock_acquire_ex(c, &b1, &bad), ZKL_EINVAL);
    zkl_lock_args b2 = {(zkl_recipe)99, DIR, -1, 0, "x", 1};
    CHECK_INT(zkl_lock_acquire_ex(c, &b2, &bad), ZKL_EINVAL);
    zkl_lock_args b3 = {ZKL_MUTEX, "rel", -1, 0, "x", 1};
    CHECK_INT(zkl_lock_acquire_ex(c, &b3, &bad), ZKL_EINVAL);
    zkl_lock_args b4 = {ZKL_MUTEX, DIR, -1, 7, "x", 1};
    CHECK_INT(zkl_lock_acquire_ex(c, &b4, &bad), ZKL_EINVAL);
    CHECK_INT(zkl_lock_acquire_ex(c, NULL, &bad), ZKL_EINVAL);
    CHECK_INT(zkl_lock_acquire_ex(c, &a, NULL), ZKL_EINVAL);
    zkl_client_process(c);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    /* the first is granted, the others watch their predecessors */
    CHECK_INT(fz_create_ok(cr, 1, 0x11), 0);
    CHECK_INT(fz_create_ok(cr2, 2, 0x12), 0);
    CHECK_INT(fz_create_ok(cr3, 3, 0x13), 0);
    CHECK_INT(fz_children_v(ls, h_seqname(cr, 1), NULL), 0);
    CHECK_INT(fz_children_v(ls2, h_seqname(cr, 1), h_seqname(cr2, 2), h_seqname(cr3, 3), NULL), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    fz_req *g1 = EXPECT_REQ(FZ_GET, DIR "/");
    fz_req *g2 = EXPECT_REQ(FZ_GET, DIR "/");
    (void)g1, (void)g2;
    /* closing frees the copies (the alloc group checks the accounting) */
    h_free(c);
}

/* zkl_client_flush() sends the listing an acquire left for the next process(), and reads
 * nothing: a reply already waiting stays queued (no event), and the listing is not sent again. */
static void mutex_flush_sends_listing(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    EXPECT_NO_REQ();
    CHECK_INT(zkl_client_timeout_ms(c), 0); /* something waits to be sent */
    CHECK_INT(fz_create_ok(cr, 3, 0x33), 0);
    CHECK_INT(zkl_client_flush(c), ZKL_OK);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    CHECK_INT(fz_queued(), 1); /* the create's reply was not read */
    EXPECT_NO_EV(c);
    CHECK(zkl_client_timeout_ms(c) != 0); /* nothing left to send: the host may sleep */
    CHECK_INT(zkl_client_flush(c), ZKL_OK);
    EXPECT_NO_REQ();
    CHECK_INT(fz_children_v(ls, h_seqname(cr, 3), NULL), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    h_free(c);
}

/* Protected names draw their UUIDs from a pool refilled every 16 names: across refills every
 * name is still a well-formed protected name, and no two are the same. */
static void protected_names_unique_across_pool_refills(void) {
    zkl_client *c = h_client();
    enum { N = 40 };
    char *names[N];
    for (int i = 0; i < N; i++) {
        uint64_t id = 0;
        char dir[32];
        snprintf(dir, sizeof dir, DIR "%d", i);
        CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, dir, -1, 0, &id), ZKL_OK);
        fz_req *cr = EXPECT_REQ(FZ_CREATE, dir);
        CHECK(h_is_protected(cr->path, dir, "lock-"));
        names[i] = strdup(cr->path + strlen(dir));
        zkl_client_flush(c);
        EXPECT_REQ(FZ_CHILDREN, dir);
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < i; j++)
            CHECK(strcmp(names[i], names[j]) != 0);
    for (int i = 0; i < N; i++)
        free(names[i]);
    h_free(c);
}

/* A release whose only delete meets ZNONODE: someone else deleted the node while it was held,
 * and RELEASED says so (ZNONODE, for the binding to report the hold lost). After a resend across
 * a connection loss, ZNONODE may be the first delete's own effect: RELEASED OK. */
static void mutex_release_node_gone(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = acquire(c, &cr, &ls);
    CHECK_INT(fz_create_ok(cr, 1, 0x11), 0);
    CHECK_INT(fz_children_v(ls, h_seqname(cr, 1), NULL), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    fz_req *del = EXPECT_REQ(FZ_DELETE, DIR "/");
    CHECK_INT(fz_reply(del, ZNONODE), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id, ZNONODE);
    EXPECT_NO_EV(c);

    uint64_t id2 = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR "2", -1, 0, &id2), ZKL_OK);
    cr = EXPECT_REQ(FZ_CREATE, DIR "2/_c_");
    zkl_client_process(c);
    ls = EXPECT_REQ(FZ_CHILDREN, DIR "2");
    CHECK_INT(fz_create_ok(cr, 2, 0x22), 0);
    CHECK_INT(fz_children_v(ls, h_seqname(cr, 2), NULL), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id2, ZKL_OK);
    CHECK_INT(zkl_lock_release(c, id2), ZKL_OK);
    del = EXPECT_REQ(FZ_DELETE, DIR "2/");
    fz_disconnect();
    h_pump(c);
    CHECK_INT(del->rc, ZCONNECTIONLOSS);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    h_reconnect(c); /* the heartbeat answered: only then RECONNECTED */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *del2 = EXPECT_REQ(FZ_DELETE, DIR "2/");
    CHECK_STR(del2->path, del->path);
    CHECK_INT(fz_reply(del2, ZNONODE), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id2, ZKL_OK);
    EXPECT_NO_EV(c);
    h_free(c);
}

H_DEFINE_GROUP(g_mutex, {"acquire_ex_data", acquire_ex_data},
               {"parent_reaped_while_making_parents", mutex_parent_reaped_while_making_parents},
               {"grant", mutex_grant}, {"release_node_gone", mutex_release_node_gone},
               {"handoff", mutex_handoff},
               {"predecessor_gone_before_watch", mutex_predecessor_gone_before_watch},
               {"data_changed_relists", mutex_data_changed_relists},
               {"own_client_handoff", mutex_own_client_handoff}, {"try_once", mutex_try_once},
               {"parents_and_stale_list", mutex_parents_and_stale_list},
               {"own_node_missing", mutex_own_node_missing}, {"late_arrivals", mutex_late_arrivals},
               {"plain_ops", plain_ops}, {"flush_sends_listing", mutex_flush_sends_listing},
               {"protected_names_unique_across_pool_refills",
                protected_names_unique_across_pool_refills});
