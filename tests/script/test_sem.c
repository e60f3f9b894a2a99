/* test_sem.c - the lease semaphore (internal mutex under <path>/locks, leases under
 * <path>/leases) and the multi-lock, on a scripted server. */
#include "harness.h"

#define SEM "/sem"
#define LOCKS SEM "/locks"
#define LEASES SEM "/leases"

/* Start a semaphore acquire; returns its id and the internal mutex's create + list. */
static uint64_t sem_start(zkl_client *c, int max, int qty, int timeout, fz_req **cr, fz_req **ls) {
    uint64_t id = 0;
    CHECK_INT(zkl_semaphore_acquire(c, SEM, max, qty, timeout, 0, &id), ZKL_OK);
    *cr = EXPECT_REQ(FZ_CREATE, LOCKS "/_c_");
    CHECK(h_is_protected((*cr)->path, LOCKS, "lock-"));
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, LOCKS);
    return id;
}

static void lease_grant(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = sem_start(c, 2, 1, -1, &cr, &ls);
    fz_create_ok(cr, 0, 0x10);
    fz_children_v(ls, h_seqname(cr, 0), NULL);
    h_pump(c);
    EXPECT_NO_EV(c);
    /* holding the internal mutex: create the lease, then list the leases with a watch */
    fz_req *lc = EXPECT_REQ(FZ_CREATE, LEASES "/_c_");
    CHECK(h_is_protected(lc->path, LEASES, "lease-"));
    CHECK_INT(lc->mode, ZOO_EPHEMERAL_SEQUENTIAL);
    fz_req *ll = EXPECT_REQ(FZ_CHILDREN, LEASES);
    CHECK_INT(ll->watch, 1);
    EXPECT_NO_REQ();
    fz_create_ok(lc, 5, 0x55);
    fz_children_v(ll, h_other(1, "lease-", 4), h_seqname(lc, 5), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    /* granted: the leases watch is taken back, the internal mutex given back */
    fz_req *rw = EXPECT_REQ(FZ_REMOVE_WATCHES, LEASES);
    CHECK_INT(rw->mode, ZWATCHTYPE_CHILD);
    fz_req *dl = EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_REQ();
    fz_reply(rw, ZOK);
    fz_reply(dl, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed_total(), 0);
    uint64_t ids[4] = {0};
    CHECK_INT(zkl_lease_ids(c, id, ids, 4), 1);
    CHECK_INT(ids[0], id);
    zkl_lock_info info;
    zkl_lock_info_get(c, id, &info);
    CHECK_STR(info.node, lc->created);
    CHECK_INT(info.token, 0x55);
    CHECK_INT(info.held, 1);

    /* the next acquire of this semaphore lists the leases without a watch (the last had room) */
    uint64_t id2 = sem_start(c, 2, 1, -1, &cr, &ls);
    fz_create_ok(cr, 1, 0x11);
    fz_children_v(ls, h_seqname(cr, 1), NULL);
    h_pump(c);
    fz_req *lc2 = EXPECT_REQ(FZ_CREATE, LEASES "/_c_");
    fz_req *ll2 = EXPECT_REQ(FZ_CHILDREN, LEASES);
    CHECK_INT(ll2->watch, 0);
    fz_create_ok(lc2, 6, 0x66);
    fz_children_v(ll2, h_seqname(lc, 5), h_seqname(lc2, 6), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id2, ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, cr->created), ZOK); /* no watch to take back */
    EXPECT_NO_REQ();

    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, lc->created), ZOK);
    CHECK_INT(zkl_lock_release(c, id2), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, lc2->created), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id, ZKL_OK);
    EXPECT_EV(c, ZKL_EV_RELEASED, id2, ZKL_OK);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);
    h_free(c);
}

/* Too many leases: wait on the leases watch while holding the internal mutex; the listing
 * after the watch fires sets none, so the grant has no watch to take back. */
static void lease_wait(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = sem_start(c, 1, 1, -1, &cr, &ls);
    fz_create_ok(cr, 0, 1);
    fz_children_v(ls, h_seqname(cr, 0), NULL);
    h_pump(c);
    fz_req *lc = EXPECT_REQ(FZ_CREATE, LEASES "/_c_"), *ll = EXPECT_REQ(FZ_CHILDREN, LEASES);
    fz_create_ok(lc, 8, 8);
    fz_children_v(ll, h_other(1, "lease-", 7), h_seqname(lc, 8), NULL);
    h_pump(c);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    CHECK_INT(fz_armed(LEASES), 1);
    CHECK_INT(fz_fire(ZOO_CHILD_EVENT, LEASES), 1);
    h_pump(c);
    fz_req *ll2 = EXPECT_REQ(FZ_CHILDREN, LEASES);
    CHECK_INT(ll2->watch, 0);
    EXPECT_NO_REQ();
    fz_children_v(ll2, h_seqname(lc, 8), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    fz_req *dl = EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_REQ();
    fz_reply(dl, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* Two semaphore waiters of one client queue on the internal mutex behind another client's node:
 * the first gets it when that node goes (head), takes its lease and gives the mutex back; the
 * second is handed the mutex by that delete without listing <path>/locks again. */
static void internal_mutex_handover(void) {
    zkl_client *c = h_client();
    uint64_t a = 0, b = 0;
    CHECK_INT(zkl_semaphore_acquire(c, SEM, 2, 1, -1, 0, &a), ZKL_OK);
    CHECK_INT(zkl_semaphore_acquire(c, SEM, 2, 1, -1, 0, &b), ZKL_OK);
    fz_req *ca = EXPECT_REQ(FZ_CREATE, LOCKS "/_c_"), *cb = EXPECT_REQ(FZ_CREATE, LOCKS "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, LOCKS);
    EXPECT_NO_REQ();
    const char *o = h_other(1, "lock-", 0);
    fz_create_ok(ca, 1, 1);
    fz_create_ok(cb, 2, 2);
    fz_children_v(ls, o, h_seqname(ca, 1), h_seqname(cb, 2), NULL);
    h_pump(c);
    fz_req *ga = EXPECT_REQ(FZ_GET, h_join(LOCKS, o)), *gb = EXPECT_REQ(FZ_GET, ca->created);
    fz_data_ok(ga, "o", 1);
    fz_data_ok(gb, "me", 1);
    h_pump(c);
    EXPECT_NO_REQ();
    fz_fire(ZOO_DELETED_EVENT, h_join(LOCKS, o));
    h_pump(c);
    fz_req *la = EXPECT_REQ(FZ_CREATE, LEASES "/_c_"), *lla = EXPECT_REQ(FZ_CHILDREN, LEASES);
    EXPECT_NO_REQ();
    fz_create_ok(la, 0, 0x20);
    fz_children_v(lla, h_seqname(la, 0), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, a, ZKL_OK);
    fz_req *rw = EXPECT_REQ(FZ_REMOVE_WATCHES, LEASES);
    fz_req *da = EXPECT_REQ(FZ_DELETE, ca->created);
    EXPECT_NO_REQ();
    /* the server notifies b's watch before it answers a's delete */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, ca->created), 1);
    fz_reply(rw, ZOK);
    fz_reply(da, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *lb = EXPECT_REQ(FZ_CREATE, LEASES "/_c_"); /* no listing of LOCKS first */
    fz_req *llb = EXPECT_REQ(FZ_CHILDREN, LEASES);
    EXPECT_NO_REQ();
    CHECK_INT(llb->watch, 0); /* the last listing had room */
    fz_create_ok(lb, 1, 0x21);
    fz_children_v(llb, h_seqname(la, 0), h_seqname(lb, 1), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, b, ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, cb->created), ZOK);
    EXPECT_NO_REQ();
    h_pump(c);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.handoffs, 2);
    CHECK_INT(fz_live(), 2); /* the two leases */
    h_free(c);
}

/* acquire_many: qty leases created under one hold of the mutex, each its own acquisition. */
static void acquire_many(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = sem_start(c, 3, 2, -1, &cr, &ls);
    fz_create_ok(cr, 0, 1);
    fz_children_v(ls, h_seqname(cr, 0), NULL);
    h_pump(c);
    fz_req *l1 = EXPECT_REQ(FZ_CREATE, LEASES "/_c_"), *l2 = EXPECT_REQ(FZ_CREATE, LEASES "/_c_");
    CHECK_STR(l1->path, l2->path);
    fz_req *ll = EXPECT_REQ(FZ_CHILDREN, LEASES);
    fz_create_ok(l1, 0, 0x30);
    fz_create_ok(l2, 1, 0x31);
    fz_children_v(ll, h_seqname(l1, 0), h_seqname(l1, 1), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    uint64_t ids[4] = {0};
    CHECK_INT(zkl_lease_ids(c, id, ids, 4), 2);
    CHECK_INT(ids[0], id);
    CHECK(ids[1] != 0 && ids[1] != id);
    zkl_lock_info info;
    zkl_lock_info_get(c, ids[1], &info);
    CHECK_STR(info.node, l2->created);
    CHECK_INT(info.token, 0x31);
    fz_reply(EXPECT_REQ(FZ_REMOVE_WATCHES, LEASES), ZOK);
    fz_reply(EXPECT_REQ(FZ_DELETE, cr->created), ZOK);
    CHECK_INT(zkl_lock_release(c, ids[1]), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, l2->created), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, ids[1], ZKL_OK);
    zkl_lock_info_get(c, id, &info);
    CHECK_INT(info.held, 1);
    h_free(c);
}

/* Giving up in the lease stage: the lease and the internal mutex node are both deleted. */
static void lease_stage_cancel(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = sem_start(c, 1, 1, -1, &cr, &ls);
    fz_create_ok(cr, 0, 1);
    fz_children_v(ls, h_seqname(cr, 0), NULL);
    h_pump(c);
    fz_req *lc = EXPECT_REQ(FZ_CREATE, LEASES "/_c_"), *ll = EXPECT_REQ(FZ_CHILDREN, LEASES);
    fz_create_ok(lc, 3, 3);
    fz_children_v(ll, h_other(1, "lease-", 2), h_seqname(lc, 3), NULL);
    h_pump(c);
    EXPECT_NO_REQ();
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    int dl = 0, dm = 0, rwn = 0, other = 0;
    for (fz_req *r; (r = fz_next()) != NULL;) {
        if (r->kind == FZ_DELETE && strcmp(r->path, lc->created) == 0)
            dl++;
        else if (r->kind == FZ_DELETE && strcmp(r->path, cr->created) == 0)
            dm++;
        else if (r->kind == FZ_REMOVE_WATCHES && strcmp(r->path, LEASES) == 0)
            rwn++;
        else
            other++;
        fz_reply(r, ZOK);
    }
    CHECK_INT(dl, 1);
    CHECK_INT(dm, 1);
    CHECK_INT(rwn, 1);
    CHECK_INT(other, 0);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);
    h_free(c);
}

/* ------------------------------------------------------------------ multi-lock */

/* Grant one mutex component whose create + list are the next two requests. */
static fz_req *grant_next(zkl_client *c, const char *dir, int seq) {
    fz_req *cr = EXPECT_REQ(FZ_CREATE, h_join(dir, "_c_"));
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, dir);
    fz_create_ok(cr, seq, seq);
    fz_children_v(ls, h_seqname(cr, seq), NULL);
    h_pump(c);
    return cr;
}

static void multi_rollback(int flags) {
    zkl_client *c = h_client();
    zkl_multi_item items[3] = {
        {ZKL_MUTEX, "/m1", 0, -1, 0}, {ZKL_MUTEX, "/m2", 0, -1, 0}, {ZKL_MUTEX, "/m3", 0, -1, 0}};
    uint64_t id = 0;
    CHECK_INT(zkl_multi_acquire(c, items, 3, -1, flags, &id), ZKL_OK);
    /* components one after another */
    fz_req *c1 = grant_next(c, "/m1", 1);
    fz_req *c2 = grant_next(c, "/m2", 2);
    EXPECT_NO_EV(c);
    fz_req *c3 = EXPECT_REQ(FZ_CREATE, "/m3/_c_");
    zkl_client_process(c);
    fz_req *l3 = EXPECT_REQ(FZ_CHILDREN, "/m3");
    fz_reply(c3, ZNOAUTH);
    fz_reply(l3, ZNOAUTH);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ZNOAUTH);
    EXPECT_NO_EV(c);
    /* the held components are released, their deletes pipelined in rollback order */
    fz_req *d1 = EXPECT_REQ(FZ_DELETE, "/m"), *d2 = EXPECT_REQ(FZ_DELETE, "/m");
    EXPECT_NO_REQ();
    if (flags & ZKL_MULTI_ROLLBACK_GIVEN) {
        CHECK_STR(d1->path, c1->created);
        CHECK_STR(d2->path, c2->created);
    } else {
        CHECK_STR(d1->path, c2->created);
        CHECK_STR(d2->path, c1->created);
    }
    CHECK_INT(d1->status, FZ_PENDING);
    CHECK_INT(d2->status, FZ_PENDING);
    fz_reply(d1, ZOK);
    fz_reply(d2, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c); /* the components report nothing themselves */
    uint64_t ids[3] = {0};
    int failed = -5;
    CHECK_INT(zkl_multi_result(c, id, ids, 3, &failed), 0);
    CHECK_INT(failed, 2);
    CHECK_INT(zkl_multi_result(c, id, ids, 3, &failed), ZKL_ENOTFOUND);
    CHECK_INT(fz_live(), 0);
    h_free(c);
}

static void multi_rollback_reverse(void) {
    multi_rollback(0);
}
static void multi_rollback_given(void) {
    multi_rollback(ZKL_MULTI_ROLLBACK_GIVEN);
}

/* A mutex and a semaphore lease together; then each released on its own. */
static void multi_success(void) {
    zkl_client *c = h_client();
    zkl_multi_item items[2] = {{ZKL_MUTEX, "/m1", 0, -1, 0}, {ZKL_MUTEX, SEM, 1, -1, 0}};
    uint64_t id = 0;
    CHECK_INT(zkl_multi_acquire(c, items, 2, -1, 0, &id), ZKL_OK);
    fz_req *c1 = grant_next(c, "/m1", 1);
    fz_req *cm = grant_next(c, LOCKS, 0);
    fz_req *lc = EXPECT_REQ(FZ_CREATE, LEASES "/_c_"), *ll = EXPECT_REQ(FZ_CHILDREN, LEASES);
    fz_create_ok(lc, 0, 0x40);
    fz_children_v(ll, h_seqname(lc, 0), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_EV(c);
    uint64_t ids[2] = {0};
    int failed = 0;
    CHECK_INT(zkl_multi_result(c, id, ids, 2, &failed), 2);
    CHECK_INT(failed, -1);
    fz_reply(EXPECT_REQ(FZ_REMOVE_WATCHES, LEASES), ZOK);
    fz_reply(EXPECT_REQ(FZ_DELETE, cm->created), ZOK);
    CHECK_INT(zkl_lock_release(c, ids[1]), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, lc->created), ZOK);
    CHECK_INT(zkl_lock_release(c, ids[0]), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, c1->created), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, ids[1], ZKL_OK);
    EXPECT_EV(c, ZKL_EV_RELEASED, ids[0], ZKL_OK);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);
    h_free(c);
}

/* The shared deadline caps the waiting component: it times out, the held one is released. */
static void multi_shared_deadline(void) {
    zkl_client *c = h_client();
    zkl_multi_item items[2] = {{ZKL_MUTEX, "/m1", 0, -1, 0}, {ZKL_WRITE, "/m2", 0, 60000, 0}};
    uint64_t id = 0;
    CHECK_INT(zkl_multi_acquire(c, items, 2, 800, 0, &id), ZKL_OK);
    fz_req *c1 = grant_next(c, "/m1", 1);
    fz_req *c2 = EXPECT_REQ(FZ_CREATE, "/m2/_c_");
    zkl_client_process(c);
    fz_req *l2 = EXPECT_REQ(FZ_CHILDREN, "/m2");
    const char *o = h_other(1, "__WRIT__", 0);
    fz_create_ok(c2, 1, 1);
    fz_children_v(l2, o, h_seqname(c2, 1), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_REQ(FZ_GET, h_join("/m2", o)), "o", 1);
    h_pump(c);
    h_advance(c, 799);
    EXPECT_NO_EV(c);
    h_advance(c, 2);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ETIMEDOUT);
    int d1 = 0, d2 = 0, rw = 0, other = 0;
    for (fz_req *r; (r = fz_next()) != NULL;) {
        if (r->kind == FZ_DELETE && strcmp(r->path, c1->created) == 0)
            d1++;
        else if (r->kind == FZ_DELETE && strcmp(r->path, c2->created) == 0)
            d2++;
        else if (r->kind == FZ_REMOVE_WATCHES)
            rw++;
        else
            other++;
        fz_reply(r, ZOK);
    }
    CHECK_INT(d1, 1);
    CHECK_INT(d2, 1);
    CHECK_INT(rw, 1);
    CHECK_INT(other, 0);
    h_pump(c);
    int failed = -5;
    uint64_t ids[2];
    CHECK_INT(zkl_multi_result(c, id, ids, 2, &failed), 0);
    CHECK_INT(failed, 1);
    CHECK_INT(fz_live(), 0);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* Cancelling the multi-lock while its second component waits. */
static void multi_cancel(void) {
    zkl_client *c = h_client();
    zkl_multi_item items[2] = {{ZKL_MUTEX, "/m1", 0, -1, 0}, {ZKL_MUTEX, "/m2", 0, -1, 0}};
    uint64_t id = 0;
    CHECK_INT(zkl_multi_acquire(c, items, 2, -1, 0, &id), ZKL_OK);
    fz_req *c1 = grant_next(c, "/m1", 1);
    fz_req *c2 = EXPECT_REQ(FZ_CREATE, "/m2/_c_");
    zkl_client_process(c);
    EXPECT_REQ(FZ_CHILDREN, "/m2");
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    fz_req *d1 = EXPECT_REQ(FZ_DELETE, c1->created);
    EXPECT_NO_REQ();
    fz_reply(d1, ZOK);
    fz_create_ok(c2, 2, 2); /* the late create reply: deleted */
    h_pump(c);
    fz_reply(EXPECT_REQ(FZ_DELETE, c2->created), ZOK);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);
    int failed = -5;
    uint64_t ids[2];
    CHECK_INT(zkl_multi_result(c, id, ids, 2, &failed), 0);
    CHECK_INT(failed, 1);
    h_free(c);
}

H_DEFINE_GROUP(g_sem, {"lease_grant", lease_grant}, {"lease_wait", lease_wait},
               {"internal_mutex_handover", internal_mutex_handover}, {"acquire_many", acquire_many},
               {"lease_stage_cancel", lease_stage_cancel},
               {"multi_rollback_reverse", multi_rollback_reverse},
               {"multi_rollback_given", multi_rollback_given}, {"multi_success", multi_success},
               {"multi_shared_deadline", multi_shared_deadline}, {"multi_cancel", multi_cancel});
