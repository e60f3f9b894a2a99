/* test_rw.c - the read-write lock on a scripted server: readers share, a writer waits for the
 * readers before it (listing again after every deletion: no handoff for read-write), a reader
 * waits for the first earlier writer only, downgrade. */
#include "harness.h"

#define DIR "/rw"
#define R "__READ__"
#define W "__WRIT__"

static uint64_t start(zkl_client *c, zkl_recipe rec, fz_req **cr, fz_req **ls) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, rec, DIR, -1, 0, &id), ZKL_OK);
    *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    CHECK(h_is_protected((*cr)->path, DIR, rec == ZKL_READ ? R : W));
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    return id;
}

static void readers_share(void) {
    zkl_client *c = h_client();
    uint64_t a = 0, b = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_READ, DIR, -1, 0, &a), ZKL_OK);
    CHECK_INT(zkl_lock_acquire(c, ZKL_READ, DIR, -1, 0, &b), ZKL_OK);
    fz_req *ca = EXPECT_REQ(FZ_CREATE, DIR "/_c_"), *cb = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR); /* shared */
    EXPECT_NO_REQ();
    fz_create_ok(ca, 1, 1);
    fz_create_ok(cb, 2, 2);
    /* another client's reader sorts first; a writer after us does not matter */
    fz_children_v(ls, h_other(1, W, 3), h_seqname(cb, 2), h_other(2, R, 0), h_seqname(ca, 1), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, a, ZKL_OK);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, b, ZKL_OK);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    h_free(c);
}

static void writer_waits_for_readers(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_WRITE, &cr, &ls);
    const char *r0 = h_other(1, R, 0), *r1 = h_other(2, R, 1), *own = h_seqname(cr, 2);
    fz_create_ok(cr, 2, 0x72);
    fz_children_v(ls, own, r1, r0, NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, r1)); /* the immediate predecessor */
    fz_data_ok(g, "r", 1);
    h_pump(c);
    fz_fire(ZOO_DELETED_EVENT, h_join(DIR, r1));
    h_pump(c);
    fz_req *g2 = EXPECT_REQ(FZ_GET, h_join(DIR, r0)); /* the next lower node, no listing */
    EXPECT_NO_REQ();
    fz_data_ok(g2, "r", 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    /* the head goes, but the write side never takes the lock without a listing (a downgrade's
     * read node has an old sequence) */
    fz_fire(ZOO_DELETED_EVENT, h_join(DIR, r0));
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *ls3 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    fz_children_v(ls3, own, h_other(3, R, 3), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.handoffs, 0);
    h_free(c);
}

static void reader_waits_for_writer(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start(c, ZKL_READ, &cr, &ls);
    const char *w0 = h_other(1, W, 0), *r1 = h_other(2, R, 1), *w2 = h_other(3, W, 2);
    const char *own = h_seqname(cr, 4);
    fz_create_ok(cr, 4, 4);
    fz_children_v(ls, r1, own, w2, w0, NULL);
    h_pump(c);
    /* the first earlier writer is watched, not the immediate predecessor */
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, w0));
    EXPECT_NO_REQ();
    fz_data_ok(g, "w", 1);
    h_pump(c);
    fz_fire(ZOO_DELETED_EVENT, h_join(DIR, w0));
    h_pump(c);
    /* the walk: the next lower writer of the kept listing (r1, a reader, does not count) */
    fz_req *g2 = EXPECT_REQ(FZ_GET, h_join(DIR, w2));
    EXPECT_NO_REQ();
    fz_data_ok(g2, "w", 1);
    h_pump(c);
    fz_fire(ZOO_DELETED_EVENT, h_join(DIR, w2));
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK); /* no writer left below: shares with r1 */
    EXPECT_NO_REQ();
    h_free(c);
}

static void downgrade(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t w = start(c, ZKL_WRITE, &cr, &ls), r = 0, bad = 0;
    CHECK_INT(zkl_lock_downgrade(c, w, &r), ZKL_ENOTHELD); /* not held yet */
    fz_create_ok(cr, 3, 0x93);
    fz_children_v(ls, h_seqname(cr, 3), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, w, ZKL_OK);
    CHECK_INT(zkl_lock_downgrade(c, w, &r), ZKL_OK);
    fz_req *rc = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    EXPECT_NO_REQ();
    zkl_client_process(c);
    EXPECT_NO_REQ(); /* granted on create: no listing */
    /* a read node carrying the writer's sequence, not sequential */
    CHECK(h_is_protected(rc->path, DIR, R "0000000003"));
    CHECK(strncmp(rc->path, cr->path, strlen(DIR) + 40) != 0); /* its own prefix */
    CHECK_INT(rc->mode, ZOO_EPHEMERAL);
    fz_create_ok(rc, 0, 0x94);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, r, ZKL_OK);
    zkl_lock_info info;
    zkl_lock_info_get(c, r, &info);
    CHECK_STR(info.node, rc->path);
    CHECK_INT(info.token, 0x94);
    /* the writer goes; the reader stays */
    CHECK_INT(zkl_lock_release(c, w), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, cr->created), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, w, ZKL_OK);
    zkl_lock_info_get(c, r, &info);
    CHECK_INT(info.held, 1);
    CHECK_INT(zkl_lock_downgrade(c, w, &bad), ZKL_ENOTFOUND);
    CHECK_INT(zkl_lock_downgrade(c, r, &bad), ZKL_ENOTFOUND); /* a read acquisition */
    CHECK_INT(zkl_lock_release(c, r), ZKL_OK);
    fz_reply(EXPECT_REQ(FZ_DELETE, rc->path), ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, r, ZKL_OK);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_live(), 0);
    h_free(c);
}

/* A writer queued behind a downgrading holder: the downgraded read node sorts before it (same
 * sequence as the old writer), so after the writer's node goes the waiter lists again and keeps
 * waiting for the reader. */
static void writer_waits_for_downgraded_reader(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls, *c2, *l2;
    uint64_t w = start(c, ZKL_WRITE, &cr, &ls), r = 0;
    fz_create_ok(cr, 3, 3);
    fz_children_v(ls, h_seqname(cr, 3), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, w, ZKL_OK);
    uint64_t w2 = start(c, ZKL_WRITE, &c2, &l2);
    fz_create_ok(c2, 4, 4);
    fz_children_v(l2, h_seqname(cr, 3), h_seqname(c2, 4), NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, cr->created);
    fz_data_ok(g, "me", 3);
    h_pump(c);
    CHECK_INT(zkl_lock_downgrade(c, w, &r), ZKL_OK);
    fz_req *rc = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    fz_create_ok(rc, 0, 5);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, r, ZKL_OK);
    CHECK_INT(zkl_lock_release(c, w), ZKL_OK);
    fz_req *d = EXPECT_REQ(FZ_DELETE, cr->created);
    fz_fire(ZOO_DELETED_EVENT, cr->created);
    fz_reply(d, ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, w, ZKL_OK);
    EXPECT_NO_EV(c); /* w2 is not granted by the handoff */
    fz_req *l3 = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_children_v(l3, fz_base(rc->path), h_seqname(c2, 4), NULL);
    h_pump(c);
    fz_req *g3 = EXPECT_REQ(FZ_GET, rc->path); /* waits for the downgraded reader */
    EXPECT_NO_EV(c);
    fz_data_ok(g3, "me", 5);
    h_pump(c);
    CHECK_INT(zkl_lock_release(c, r), ZKL_OK);
    fz_req *d2 = EXPECT_REQ(FZ_DELETE, rc->path);
    fz_fire(ZOO_DELETED_EVENT, rc->path);
    fz_reply(d2, ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, r, ZKL_OK);
    fz_children_v(EXPECT_REQ(FZ_CHILDREN, DIR), h_seqname(c2, 4), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, w2, ZKL_OK);
    h_free(c);
}

H_DEFINE_GROUP(g_rw, {"readers_share", readers_share},
               {"writer_waits_for_readers", writer_waits_for_readers},
               {"reader_waits_for_writer", reader_waits_for_writer}, {"downgrade", downgrade},
               {"writer_waits_for_downgraded_reader", writer_waits_for_downgraded_reader});
