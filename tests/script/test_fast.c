/* test_fast.c - zkl_client_next_event_for, the blocking caller's fast path (the Lua binding's
 * c:wait_for): it pops the waited-for operation's event only when that is the only event queued,
 * and leaves everything else (other operations, session and lock states) to next_event(). The
 * transitions of one acquisition: granted at once, waited then granted, given up while the
 * create is in flight, and the session lost while it waits. */
#include "harness.h"

#define DIR "/fast"

static uint64_t start(zkl_client *c, fz_req **cr, fz_req **ls) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    return id;
}

/* An acquisition of DIR queued behind one other node (its name in *o1 unless o1 is NULL) and
 * parked on a watch of it: the create and listing answered, the other node's data read. */
static uint64_t start_parked(zkl_client *c, const char **o1) {
    fz_req *cr, *ls;
    uint64_t id = start(c, &cr, &ls);
    const char *other = h_other(1, "lock-", 0);
    if (o1) *o1 = other;
    fz_create_ok(cr, 2, 0x22);
    fz_children_v(ls, other, h_seqname(cr, 2), NULL);
    h_pump(c);
    fz_data_ok(EXPECT_REQ(FZ_GET, h_join(DIR, other)), "other", 0x11);
    h_pump(c);
    return id;
}

static void fast_grant_at_once(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    zkl_event ev = {0, 0, 0};
    uint64_t id = start(c, &cr, &ls);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 0); /* nothing yet: the caller waits */
    fz_create_ok(cr, 3, 0x33);
    fz_children_v(ls, h_seqname(cr, 3), NULL);
    h_pump(c);
    CHECK_INT(zkl_client_next_event_for(c, id + 1, &ev), -1); /* not the one waited for */
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 1);
    CHECK_INT(ev.type, ZKL_EV_ACQUIRED);
    CHECK_INT(ev.status, ZKL_OK);
    CHECK(ev.id == id);
    EXPECT_NO_EV(c);
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.held, 1);
    CHECK_INT(info.token, 0x33);
    /* the release's event comes the same way */
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    fz_req *del = EXPECT_REQ(FZ_DELETE, DIR "/");
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 0);
    fz_reply(del, ZOK);
    h_pump(c);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 1);
    CHECK_INT(ev.type, ZKL_EV_RELEASED);
    CHECK_INT(ev.status, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    h_free(c);
}

static void fast_wait_then_grant(void) {
    zkl_client *c = h_client();
    zkl_event ev = {0, 0, 0};
    const char *o1;
    uint64_t id = start_parked(c, &o1);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 0); /* parked: nothing queued */
    /* a plain read of the same client finishes meanwhile: its event is not ours */
    uint64_t rid = 0;
    CHECK_INT(zkl_op_start(c, &(zkl_op_args){ZKL_OP_GET, "/x", NULL, 0, 0, -1, 0, 0, 0, 0}, &rid),
              ZKL_OK);
    fz_req *r = EXPECT_REQ(FZ_GET, "/x");
    fz_data_ok(r, "x", 5);
    h_pump(c);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), -1);
    EXPECT_EV(c, ZKL_EV_OP_DONE, rid, ZOK);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 0);
    /* the head goes: granted, one event, ours */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 1);
    CHECK_INT(ev.type, ZKL_EV_ACQUIRED);
    CHECK_INT(ev.status, ZKL_OK);
    EXPECT_NO_EV(c);
    h_free(c);
}

static void fast_give_up_in_create(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    zkl_event ev = {0, 0, 0};
    uint64_t id = start(c, &cr, &ls);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    zkl_client_process(c);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 1);
    CHECK_INT(ev.type, ZKL_EV_FAILED);
    CHECK_INT(ev.status, ZKL_ECANCELED);
    EXPECT_NO_EV(c);
    /* the create answers late: its node is deleted, nobody is told */
    fz_create_ok(cr, 1, 0x31);
    fz_children_v(ls, h_seqname(cr, 1), NULL);
    h_pump(c);
    EXPECT_REQ(FZ_DELETE, cr->created);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 0);
    EXPECT_NO_EV(c);
    h_free(c);
}

static void fast_session_lost_while_parked(void) {
    zkl_client *c = h_client();
    zkl_event ev = {0, 0, 0};
    uint64_t id = start_parked(c, NULL);
    /* the link goes: the session event is not the waiter's, it stays for next_event */
    fz_disconnect();
    h_pump(c);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), -1);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 0);
    /* then it expires: FAILED comes with the session's EXPIRED, so both go through next_event */
    fz_expire();
    h_pump(c);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), -1);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ESESSION);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), -1);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    CHECK_INT(zkl_client_next_event_for(c, id, &ev), 0);
    h_free(c);
}

H_DEFINE_GROUP(g_fast, {"fast_grant_at_once", fast_grant_at_once},
               {"fast_wait_then_grant", fast_wait_then_grant},
               {"fast_give_up_in_create", fast_give_up_in_create},
               {"fast_session_lost_while_parked", fast_session_lost_while_parked});
