/* test_parked.c - parked waiters (zkl_client_park, zkl_client_next_ready): a parked operation's
 * grant or failure skips the event queue and waits in the ready list, which a host's pump takes
 * in bulk; session, lock-state and plain-operation events stay on the event queue. The
 * transitions of one parked acquisition: granted at once (the event was queued before it could
 * be parked), waited then granted, given up while the create is in flight, the session lost
 * while parked, and the client closed while parked. */
#include "harness.h"

#define DIR "/parked"

#define EXPECT_READY(c, type, id, status)                                                          \
    expect_ready(__FILE__, __LINE__, (c), (type), (id), (status))
#define EXPECT_NO_READY(c) expect_no_ready(__FILE__, __LINE__, (c))

static void expect_ready(const char *file, int line, zkl_client *c, int type, uint64_t id,
                         int status) {
    zkl_event ev = {0, 0, 0};
    h_checks++;
    if (zkl_client_next_ready(c, &ev) != 1) {
        h_fail(file, line, "no ready event (wanted type %d id %llu)", type, (unsigned long long)id);
        return;
    }
    if (ev.type != type || ev.id != id || ev.status != status)
        h_fail(file, line,
               "ready event type %d id %llu status %s, wanted type %d id %llu status %s", ev.type,
               (unsigned long long)ev.id, zkl_err_name(ev.status), type, (unsigned long long)id,
               zkl_err_name(status));
}

static void expect_no_ready(const char *file, int line, zkl_client *c) {
    zkl_event ev = {0, 0, 0};
    h_checks++;
    if (zkl_client_next_ready(c, &ev) != 0)
        h_fail(file, line, "unexpected ready event type %d id %llu status %s", ev.type,
               (unsigned long long)ev.id, zkl_err_name(ev.status));
}

/* start a mutex acquisition and park it, as the Lua binding's c:acquire(..., park) does */
static uint64_t start_parked(zkl_client *c, fz_req **cr, fz_req **ls) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    CHECK_INT(zkl_client_park(c, id), ZKL_OK);
    CHECK_INT(zkl_client_park(c, id), ZKL_OK); /* again: a no-op */
    *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    return id;
}

static void parked_grant(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    zkl_event ev = {0, 0, 0};
    CHECK_INT(zkl_client_park(c, 12345), ZKL_ENOTFOUND);
    uint64_t id = start_parked(c, &cr, &ls);
    EXPECT_NO_READY(c);
    fz_create_ok(cr, 3, 0x33);
    fz_children_v(ls, h_seqname(cr, 3), NULL);
    CHECK_INT(zkl_client_timeout_ms(c) != 0, 1);
    int n = zkl_client_process(c);
    CHECK_INT(n, 1);                                      /* process() counts the ready event */
    CHECK_INT(zkl_client_timeout_ms(c), 0);               /* and the host must come back at once */
    EXPECT_NO_EV(c);                                      /* not on the event queue */
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), -1); /* a blocking caller pumps instead */
    EXPECT_READY(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_READY(c);
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.held, 1);
    CHECK_INT(info.token, 0x33);
    /* the release, parked too */
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    CHECK_INT(zkl_client_park(c, id), ZKL_OK);
    fz_req *del = EXPECT_REQ(FZ_DELETE, DIR "/");
    fz_reply(del, ZOK);
    h_pump(c);
    EXPECT_NO_EV(c);
    EXPECT_READY(c, ZKL_EV_RELEASED, id, ZKL_OK);
    EXPECT_NO_READY(c);
    CHECK_INT(zkl_client_park(c, id), ZKL_ENOTFOUND); /* it has said its last word */
    EXPECT_NO_REQ();
    h_free(c);
}

/* A grant already queued when the caller parks (its event came in the process() that started
 * it, before the caller looked): park says 1 and the event stays on the event queue. */
static void parked_grant_at_once(void) {
    zkl_client *c = h_client();
    uint64_t w = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_WRITE, DIR, -1, 0, &w), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_create_ok(cr, 1, 0x41);
    fz_children_v(ls, h_seqname(cr, 1), NULL);
    h_pump(c);
    CHECK_INT(zkl_client_park(c, w), 1);
    EXPECT_NO_READY(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, w, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    h_free(c);
}

static void parked_wait_then_grant(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start_parked(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 0);
    fz_create_ok(cr, 2, 0x22);
    fz_children_v(ls, o1, h_seqname(cr, 2), NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    fz_data_ok(g, "other", 0x11);
    h_pump(c);
    EXPECT_NO_READY(c);
    /* a plain read finishes meanwhile: its OP_DONE is on the event queue, not the ready list */
    uint64_t rid = 0;
    CHECK_INT(zkl_op_start(c, &(zkl_op_args){ZKL_OP_GET, "/x", NULL, 0, 0, -1, 0, 0, 0, 0}, &rid),
              ZKL_OK);
    CHECK_INT(zkl_client_park(c, rid), ZKL_OK); /* parked, but OP_DONE is never parked */
    fz_data_ok(EXPECT_REQ(FZ_GET, "/x"), "x", 5);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, rid, ZOK);
    EXPECT_NO_READY(c);
    /* the head goes: granted, in the ready list */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    EXPECT_READY(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_READY(c);
    /* the link goes while held: the lock state is the event queue's */
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    EXPECT_NO_READY(c);
    h_free(c);
}

static void parked_give_up_in_create(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start_parked(c, &cr, &ls);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    zkl_client_process(c);
    EXPECT_NO_EV(c);
    EXPECT_READY(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    /* the create answers late: its node is deleted, nobody is told */
    fz_create_ok(cr, 1, 0x31);
    fz_children_v(ls, h_seqname(cr, 1), NULL);
    h_pump(c);
    EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_EV(c);
    EXPECT_NO_READY(c);
    /* a parked waiter that goes away (abandon) while the create is in flight: nothing anywhere */
    fz_req *cr2, *ls2;
    uint64_t id2 = start_parked(c, &cr2, &ls2);
    CHECK_INT(zkl_lock_abandon(c, id2), ZKL_OK);
    fz_create_ok(cr2, 2, 0x32);
    fz_children_v(ls2, h_seqname(cr2, 2), NULL);
    h_pump(c);
    EXPECT_REQ(FZ_DELETE, cr2->created);
    EXPECT_NO_EV(c);
    EXPECT_NO_READY(c);
    h_free(c);
}

static void parked_session_lost(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start_parked(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 0);
    fz_create_ok(cr, 2, 0x22);
    fz_children_v(ls, o1, h_seqname(cr, 2), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_REQ(FZ_GET, h_join(DIR, o1)), "other", 0x11);
    h_pump(c);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_READY(c);
    /* it expires: the session's EXPIRED on the event queue, the waiter's FAILED in the ready list
     */
    fz_expire();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    EXPECT_READY(c, ZKL_EV_FAILED, id, ZKL_ESESSION);
    EXPECT_NO_READY(c);
    h_free(c);
}

static void parked_closed(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start_parked(c, &cr, &ls);
    (void)cr;
    (void)ls;
    zkl_client_close(c);
    EXPECT_READY(c, ZKL_EV_FAILED, id, ZKL_ECLOSED);
    EXPECT_NO_READY(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CLOSED);
    h_free(c);
}

H_DEFINE_GROUP(g_parked, {"parked_grant", parked_grant},
               {"parked_grant_at_once", parked_grant_at_once},
               {"parked_wait_then_grant", parked_wait_then_grant},
               {"parked_give_up_in_create", parked_give_up_in_create},
               {"parked_session_lost", parked_session_lost}, {"parked_closed", parked_closed});
