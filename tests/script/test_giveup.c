/* test_giveup.c - every way to give up a mutex acquire (timeout on the fake clock, cancel,
 * abandon) in every phase (create in flight, list in flight, getData in flight, watch armed):
 * the caller hears at once (no event for abandon), the own node is deleted in the background
 * (after the late create reply when needed), late replies and watch events change nothing. */
#include "harness.h"

#define DIR "/g"

enum { BY_TIMEOUT, BY_CANCEL, BY_ABANDON };
enum { IN_CREATE, IN_LIST, IN_DATA, IN_WAIT };

static void give_up(int how, int phase) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, how == BY_TIMEOUT ? 500 : -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    const char *o1 = h_other(1, "lock-", 0), *own = h_seqname(cr, 1);
    const char *pred = h_join(DIR, o1);
    fz_req *g = NULL;
    if (phase >= IN_LIST) {
        fz_create_ok(cr, 1, 0x31);
        h_pump(c);
    }
    if (phase >= IN_DATA) {
        fz_children_v(ls, o1, own, NULL);
        h_pump(c);
        g = EXPECT_REQ(FZ_GET, pred);
    }
    if (phase >= IN_WAIT) {
        fz_data_ok(g, "o", 1);
        h_pump(c);
        CHECK_INT(fz_armed(pred), 1);
    }
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);

    /* give up */
    if (how == BY_TIMEOUT) {
        h_advance(c, 500); /* the deadline is 500 ms + 1 (the clock is truncated): not yet */
        EXPECT_NO_EV(c);
        CHECK_INT(zkl_client_timeout_ms(c) <= 1, 1);
        h_advance(c, 1);
        EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ETIMEDOUT);
    } else if (how == BY_CANCEL) {
        CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
        zkl_client_process(c);
        EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    } else {
        CHECK_INT(zkl_lock_abandon(c, id), ZKL_OK);
        zkl_client_process(c);
    }
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_ENOTFOUND);

    /* what is still in flight answers late */
    if (phase == IN_CREATE) {
        EXPECT_NO_REQ(); /* nothing to delete before the create answers */
        fz_create_ok(cr, 1, 0x31);
    }
    if (phase <= IN_LIST) fz_children_v(ls, o1, own, NULL); /* ignored: no getData follows */
    if (phase == IN_DATA) fz_data_ok(g, "o", 1);            /* its watch is set now */
    h_pump(c);

    /* the cleanup: exactly one delete of the own node; the armed watch may be taken back */
    fz_req *del = NULL, *rw = NULL, *r;
    int other = 0;
    while ((r = fz_next()) != NULL) {
        if (r->kind == FZ_DELETE && !del)
            del = r;
        else if (r->kind == FZ_REMOVE_WATCHES && !rw)
            rw = r;
        else
            other++;
    }
    CHECK(del != NULL);
    CHECK_STR(del ? del->path : NULL, h_join(DIR, own));
    CHECK_INT(other, 0);
    if (rw) {
        CHECK_STR(rw->path, pred);
        CHECK_INT(rw->mode, ZWATCHTYPE_DATA);
    }
    /* a waiter that gives up with a watch set takes it back (cancel and timeout) */
    if (phase >= IN_DATA && how != BY_ABANDON) CHECK(rw != NULL);
    if (phase < IN_DATA) CHECK(rw == NULL);
    if (rw) fz_reply(rw, ZOK);
    fz_reply(del, ZOK);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);
    /* the predecessor goes now: whoever still watches it, nothing happens */
    fz_fire(ZOO_DELETED_EVENT, pred);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.acquired, 0);
    h_free(c);
}

#define CASE(how, phase)                                                                           \
    static void how##_##phase(void) {                                                              \
        give_up(how, phase);                                                                       \
    }
CASE(BY_TIMEOUT, IN_CREATE)
CASE(BY_TIMEOUT, IN_LIST)
CASE(BY_TIMEOUT, IN_DATA)
CASE(BY_TIMEOUT, IN_WAIT)
CASE(BY_CANCEL, IN_CREATE)
CASE(BY_CANCEL, IN_LIST)
CASE(BY_CANCEL, IN_DATA)
CASE(BY_CANCEL, IN_WAIT)
CASE(BY_ABANDON, IN_CREATE)
CASE(BY_ABANDON, IN_LIST)
CASE(BY_ABANDON, IN_DATA)
CASE(BY_ABANDON, IN_WAIT)

/* Give up while the create's outcome is unknown (reply lost): after reconnect the op lists the
 * dir, finds its node by the protected prefix and deletes it. */
static void giveup_unknown_create(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    CHECK_INT(cr->rc, ZCONNECTIONLOSS);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    EXPECT_NO_REQ(); /* nothing goes out while disconnected */
    h_reconnect(c);  /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *scan = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    const char *own = h_seqname(cr, 6);
    fz_children_v(scan, h_other(1, "lock-", 5), own, NULL); /* the server had created it */
    h_pump(c);
    fz_req *del = EXPECT_REQ(FZ_DELETE, h_join(DIR, own));
    EXPECT_NO_REQ();
    fz_reply(del, ZOK);
    h_pump(c);
    /* a cleanup scans again after a delete (a semaphore may have left several) */
    fz_req *scan2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_children_v(scan2, h_other(1, "lock-", 5), NULL);
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    h_free(c);
}

H_DEFINE_GROUP(
    g_giveup, {"timeout_create_in_flight", BY_TIMEOUT_IN_CREATE},
    {"timeout_list_in_flight", BY_TIMEOUT_IN_LIST},
    {"timeout_getdata_in_flight", BY_TIMEOUT_IN_DATA}, {"timeout_watch_armed", BY_TIMEOUT_IN_WAIT},
    {"cancel_create_in_flight", BY_CANCEL_IN_CREATE}, {"cancel_list_in_flight", BY_CANCEL_IN_LIST},
    {"cancel_getdata_in_flight", BY_CANCEL_IN_DATA}, {"cancel_watch_armed", BY_CANCEL_IN_WAIT},
    {"abandon_create_in_flight", BY_ABANDON_IN_CREATE},
    {"abandon_list_in_flight", BY_ABANDON_IN_LIST},
    {"abandon_getdata_in_flight", BY_ABANDON_IN_DATA}, {"abandon_watch_armed", BY_ABANDON_IN_WAIT},
    {"unknown_create", giveup_unknown_create});
