/* test_latch.c - the leader latch (ZKL_LATCH, Curator LeaderLatch's nodes) on a scripted server:
 * its node name and data, ordering by the text after "latch-", watching the immediate
 * predecessor, the handoff from the head, the ephemeralOwner check before leading, and giving up
 * (cancel, release) leaving no node. */
#include "harness.h"

#define DIR "/ld"

static uint64_t join(zkl_client *c, const char *id, fz_req **cr, fz_req **ls) {
    uint64_t op = 0;
    zkl_lock_args a = {ZKL_LATCH, DIR, -1, 0, id, strlen(id)};
    CHECK_INT(zkl_lock_acquire_ex(c, &a, &op), ZKL_OK);
    *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    return op;
}

/* Named and written like Curator's LeaderLatch; waits behind the immediate predecessor (sorted by
 * the sequence after "latch-", not by uuid), then leads once the head goes, without listing. */
static void latch_order_and_handoff(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = join(c, "worker-7", &cr, &ls);
    CHECK(h_is_protected(cr->path, DIR, "latch-"));
    CHECK_INT(cr->mode, ZOO_EPHEMERAL_SEQUENTIAL);
    CHECK_STR(cr->data, "worker-7");
    /* h_other(9, ...) has a uuid sorting after ours as a whole name: order must come from the
     * sequence only */
    const char *o1 = h_other(9, "latch-", 1), *o2 = h_other(1, "latch-", 2);
    CHECK_INT(fz_create_ok(cr, 3, 0x33), 0);
    CHECK_INT(fz_children_v(ls, h_seqname(cr, 3), o2, "config", o1, NULL), 0);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *g = EXPECT_REQ(FZ_GET, DIR "/");
    CHECK_STR(g->path, h_join(DIR, o2)); /* the immediate predecessor */
    CHECK_INT(g->watch, 1);
    fz_data_ok(g, "other", 0x22);
    h_pump(c);
    EXPECT_NO_REQ();
    /* o2 goes: o1 is still ahead in the kept listing, watch it (the head) without listing */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o2)), 1);
    h_pump(c);
    fz_req *g2 = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    EXPECT_NO_REQ();
    fz_data_ok(g2, "other", 0x11);
    h_pump(c);
    EXPECT_NO_EV(c);
    /* the head goes: leader at once */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1)), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    EXPECT_NO_REQ();
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.token, 0x33);
    CHECK_INT(info.held, 1);
    /* giving leadership up deletes the node */
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    fz_req *del = EXPECT_REQ(FZ_DELETE, DIR "/");
    CHECK_STR(del->path, cr->created);
    fz_reply(del, ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id, ZKL_OK);
    CHECK_INT(fz_live(), 0);
    h_free(c);
}

/* A node whose ephemeralOwner is not this session never leads: it is deleted and the latch
 * queues again with a new node (on which it leads). */
static void latch_foreign_owner(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = join(c, "p1", &cr, &ls);
    CHECK_INT(fz_create_ok_owner(cr, 4, 0x44, fz_session() + 1000), 0);
    CHECK_INT(fz_children_v(ls, h_seqname(cr, 4), NULL), 0);
    h_pump(c);
    EXPECT_NO_EV(c); /* not leader */
    fz_req *del = EXPECT_REQ(FZ_DELETE, DIR "/");
    CHECK_STR(del->path, cr->created);
    fz_req *cr2 = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    CHECK(h_is_protected(cr2->path, DIR, "latch-"));
    CHECK_STR(cr2->data, "p1");
    zkl_client_process(c);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_reply(del, ZOK);
    CHECK_INT(fz_create_ok(cr2, 5, 0x55), 0);
    CHECK_INT(fz_children_v(ls2, h_seqname(cr2, 5), NULL), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.token, 0x55);
    /* a handoff is checked too: a waiter whose create came back foreign does not lead when the
     * head goes, it lists (and finds out) instead */
    fz_req *cr3, *ls3;
    uint64_t id3 = join(c, "p3", &cr3, &ls3);
    CHECK_INT(fz_create_ok_owner(cr3, 6, 0x66, fz_session() + 1000), 0);
    CHECK_INT(fz_children_v(ls3, h_seqname(cr2, 5), h_seqname(cr3, 6), NULL), 0);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, h_seqname(cr2, 5)));
    fz_data_ok(g, "p1", 0x55);
    h_pump(c);
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    fz_req *d2 = EXPECT_REQ(FZ_DELETE, DIR "/");
    fz_reply(d2, ZOK);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, h_seqname(cr2, 5))), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id, ZKL_OK);
    EXPECT_NO_EV(c); /* no handoff onto the foreign node */
    fz_req *ls4 = EXPECT_REQ(FZ_CHILDREN, DIR);
    CHECK_INT(fz_children_v(ls4, h_seqname(cr3, 6), NULL), 0);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *d3 = EXPECT_REQ(FZ_DELETE, DIR "/");
    CHECK_STR(d3->path, cr3->created);
    fz_req *cr5 = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls5 = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_reply(d3, ZOK);
    CHECK_INT(fz_create_ok(cr5, 7, 0x77), 0);
    CHECK_INT(fz_children_v(ls5, h_seqname(cr5, 7), NULL), 0);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id3, ZKL_OK);
    h_free(c);
}

/* Giving up while waiting (cancel) deletes the node and takes the watch back. */
static void latch_cancel_cleans_up(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = join(c, "p2", &cr, &ls);
    const char *o1 = h_other(1, "latch-", 1);
    fz_create_ok(cr, 2, 0x22);
    fz_children_v(ls, o1, h_seqname(cr, 2), NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    fz_data_ok(g, "other", 0x11);
    h_pump(c);
    CHECK_INT(zkl_lock_cancel(c, id), ZKL_OK);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ECANCELED);
    fz_serve_all();
    h_pump(c);
    fz_serve_all();
    h_pump(c);
    CHECK_INT(fz_live(), 0);
    CHECK_INT(fz_armed(h_join(DIR, o1)), 0);
    h_free(c);
}

H_DEFINE_GROUP(g_latch, {"order_and_handoff", latch_order_and_handoff},
               {"foreign_owner", latch_foreign_owner},
               {"cancel_cleans_up", latch_cancel_cleans_up});
