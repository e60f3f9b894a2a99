/* test_watch.c - one-shot watches on plain reads (zkl_op_args.watch): armed only by the answers
 * that arm one on the server, one ZKL_EV_WATCH per armed watch (fired, session lost, client
 * closed), kept across a connection loss, forgotten by zkl_lock_abandon, refused on writes. */
#include <string.h>

#include "harness.h"

static uint64_t start_read(zkl_client *c, zkl_op_type type, const char *path) {
    zkl_op_args a = {type, path, NULL, 0, 0, -1, 0, 0, 1, 0};
    uint64_t id = 0;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    return id;
}

/* get + watch: the request carries a watcher; CHANGED comes as one WATCH event after OP_DONE */
static void get_changed(void) {
    zkl_client *c = h_client();
    uint64_t id = start_read(c, ZKL_OP_GET, "/w");
    fz_req *g = EXPECT_REQ(FZ_GET, "/w");
    CHECK_INT(g->watch, 1);
    fz_data_ok(g, "v1", 0x10);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed("/w"), 1);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/w"), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, id, ZKL_WATCH_CHANGED);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_lock_abandon(c, id), ZKL_ENOTFOUND); /* done: forgotten */
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.watch_events, 1);
    h_free(c);
}

/* exists on a missing node watches its creation; children watches CHILD */
static void exists_and_children(void) {
    zkl_client *c = h_client();
    uint64_t e = start_read(c, ZKL_OP_EXISTS, "/e");
    uint64_t k = start_read(c, ZKL_OP_CHILDREN, "/k");
    fz_reply(EXPECT_REQ(FZ_EXISTS, "/e"), ZNONODE);
    fz_children_v(EXPECT_REQ(FZ_CHILDREN, "/k"), "a", NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, e, ZNONODE);
    EXPECT_EV(c, ZKL_EV_OP_DONE, k, ZOK);
    CHECK_INT(fz_fire(ZOO_CHILD_EVENT, "/k"), 1);
    CHECK_INT(fz_fire(ZOO_CREATED_EVENT, "/e"), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, k, ZKL_WATCH_CHILD);
    EXPECT_EV(c, ZKL_EV_WATCH, e, ZKL_WATCH_CREATED);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* answers that arm nothing (get on a missing node, a refusal) are followed by no WATCH event;
 * a watcher called again later (or for an answer that armed nothing) is ignored */
static void not_armed(void) {
    zkl_client *c = h_client();
    uint64_t g = start_read(c, ZKL_OP_GET, "/none");
    uint64_t k = start_read(c, ZKL_OP_CHILDREN, "/auth");
    fz_reply(EXPECT_REQ(FZ_GET, "/none"), ZNONODE);
    fz_reply(EXPECT_REQ(FZ_CHILDREN, "/auth"), ZNOAUTH);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZNONODE);
    EXPECT_EV(c, ZKL_EV_OP_DONE, k, ZNOAUTH);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_lock_abandon(c, g), ZKL_ENOTFOUND);
    CHECK_INT(fz_armed_total(), 0);
    h_free(c);
}

/* the session ends with watches armed: each ends with ESESSION, none hangs */
static void session_lost(void) {
    zkl_client *c = h_client();
    uint64_t g = start_read(c, ZKL_OP_GET, "/w");
    uint64_t e = start_read(c, ZKL_OP_EXISTS, "/x");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/w"), "v", 1);
    fz_stat_ok(EXPECT_REQ(FZ_EXISTS, "/x"), 2);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    EXPECT_EV(c, ZKL_EV_OP_DONE, e, ZOK);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_EV(c);
    fz_expire();
    h_pump(c);
    int seen_g = 0, seen_e = 0, seen_exp = 0;
    zkl_event ev;
    for (int i = 0; i < 10 && zkl_client_next_event(c, &ev); i++) {
        if (ev.type == ZKL_EV_WATCH && ev.id == g && ev.status == ZKL_ESESSION) seen_g++;
        if (ev.type == ZKL_EV_WATCH && ev.id == e && ev.status == ZKL_ESESSION) seen_e++;
        if (ev.type == ZKL_EV_SESSION && ev.status == ZKL_STATE_EXPIRED) seen_exp++;
    }
    CHECK_INT(seen_g, 1);
    CHECK_INT(seen_e, 1);
    CHECK_INT(seen_exp, 1);
    fz_connect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* a connection loss keeps the watch (the ZooKeeper client sets it again); a read whose answer
 * was lost is sent again, with its watcher */
static void connection_loss(void) {
    zkl_client *c = h_client();
    uint64_t g = start_read(c, ZKL_OP_GET, "/w");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/w"), "v", 1);
    uint64_t k = start_read(c, ZKL_OP_CHILDREN, "/k");
    EXPECT_REQ(FZ_CHILDREN, "/k");
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_EV(c);
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *k2 = EXPECT_REQ(FZ_CHILDREN, "/k");
    CHECK_INT(k2->watch, 1);
    fz_children_v(k2, NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, k, ZOK);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, "/w"), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, g, ZKL_WATCH_DELETED);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* close: an armed watch ends with ECLOSED before the last SESSION CLOSED event; a read still in
 * flight ends with its OP_DONE ECLOSED only */
static void close_ends_watches(void) {
    zkl_client *c = h_client();
    uint64_t g = start_read(c, ZKL_OP_GET, "/w");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/w"), "v", 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    uint64_t k = start_read(c, ZKL_OP_CHILDREN, "/k");
    EXPECT_REQ(FZ_CHILDREN, "/k");
    fz_drop_link();
    zkl_client_close(c);
    zkl_event ev;
    int watch_closed = 0, read_closed = 0;
    for (int i = 0; i < 2 && zkl_client_next_event(c, &ev); i++) {
        watch_closed += ev.type == ZKL_EV_WATCH && ev.id == g && ev.status == ZKL_ECLOSED;
        read_closed += ev.type == ZKL_EV_OP_DONE && ev.id == k && ev.status == ZKL_ECLOSED;
    }
    CHECK_INT(watch_closed, 1);
    CHECK_INT(read_closed, 1);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CLOSED);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* abandon: an armed watch is forgotten, and the ZooKeeper client forgets its watcher at once (a
 * reconnection's SetWatches would list it otherwise); a read in flight too, once answered */
static void abandon(void) {
    zkl_client *c = h_client();
    uint64_t g = start_read(c, ZKL_OP_GET, "/w");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/w"), "v", 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    CHECK_INT(fz_armed("/w"), 1);
    CHECK_INT(zkl_lock_abandon(c, g), ZKL_OK);
    CHECK_INT(fz_armed("/w"), 0);
    CHECK_INT(zkl_lock_abandon(c, g), ZKL_ENOTFOUND);
    uint64_t k = start_read(c, ZKL_OP_CHILDREN, "/k");
    fz_req *kr = EXPECT_REQ(FZ_CHILDREN, "/k");
    CHECK_INT(zkl_lock_abandon(c, k), ZKL_OK);
    fz_children_v(kr, NULL);
    h_pump(c);
    CHECK_INT(fz_armed("/k"), 0);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/w"), 0);
    CHECK_INT(fz_fire(ZOO_CHILD_EVENT, "/k"), 0);
    EXPECT_NO_REQ();
    h_pump(c);
    EXPECT_NO_EV(c);
    h_free(c);
}

static void bad_args(void) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    static const zkl_op_type writes[] = {ZKL_OP_CREATE, ZKL_OP_SET, ZKL_OP_DELETE};
    for (int i = 0; i < 3; i++) {
        zkl_op_args a = {writes[i], "/w", "v", 1, 0, -1, 0, 0, 1, 0};
        CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL);
    }
    zkl_op_args a = {ZKL_OP_GET, "/w", NULL, 0, 0, -1, 0, 0, 2, 0};
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL);
    a.watch = -1;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL);
    EXPECT_NO_REQ();
    h_free(c);
}

H_DEFINE_GROUP(g_watch, {"get_changed", get_changed}, {"exists_and_children", exists_and_children},
               {"not_armed", not_armed}, {"session_lost", session_lost},
               {"connection_loss", connection_loss}, {"close_ends_watches", close_ends_watches},
               {"abandon", abandon}, {"bad_args", bad_args});
