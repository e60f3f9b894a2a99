/* test_watch.c - one-shot watches on plain reads (zkl_op_args.watch): armed only by the answers
 * that arm one on the server, one ZKL_EV_WATCH per armed watch (fired, session lost, client
 * closed), kept across a connection loss, forgotten by zkl_lock_abandon, refused on writes. */
#include <stdio.h>
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

/* Every plain watch of a client is one watcher of the ZooKeeper client, one per path and table
 * (data: get and exists; children), so its local removal is the path's and table's as a whole:
 * abandoning a read removes it only when no other armed read of the path and table remains; the
 * others keep their watch and hear its event. Reads abandoned on their way, and a read whose
 * late answer came after its timeout, remove it once answered, under the same rule; a read still
 * on its way arms it again with its own answer. */
static void abandon_shared(void) {
    zkl_client *c = h_client();
    /* two gets and an exists of /s (one data watcher), a children read of /s (the child table) */
    uint64_t g1 = start_read(c, ZKL_OP_GET, "/s");
    uint64_t g2 = start_read(c, ZKL_OP_GET, "/s");
    uint64_t ex = start_read(c, ZKL_OP_EXISTS, "/s");
    uint64_t k = start_read(c, ZKL_OP_CHILDREN, "/s");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/s"), "v", 1);
    fz_data_ok(EXPECT_REQ(FZ_GET, "/s"), "v", 1);
    fz_stat_ok(EXPECT_REQ(FZ_EXISTS, "/s"), 1);
    fz_children_v(EXPECT_REQ(FZ_CHILDREN, "/s"), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g1, ZOK);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g2, ZOK);
    EXPECT_EV(c, ZKL_EV_OP_DONE, ex, ZOK);
    EXPECT_EV(c, ZKL_EV_OP_DONE, k, ZOK);
    CHECK_INT(fz_armed("/s"), 2); /* the data watcher and the child watcher */
    CHECK_INT(zkl_lock_abandon(c, g1), ZKL_OK);
    CHECK_INT(zkl_lock_abandon(c, ex), ZKL_OK); /* the exists shares the get's table */
    CHECK_INT(fz_armed("/s"), 2);               /* g2 still watches the data */
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/s"), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, g2, ZKL_WATCH_CHANGED);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed("/s"), 1); /* the child watcher */
    CHECK_INT(zkl_lock_abandon(c, k), ZKL_OK);
    CHECK_INT(fz_armed("/s"), 0); /* the last read of the child table */

    /* a get and a children read of /t: the get abandoned drops the data watcher only */
    uint64_t tg = start_read(c, ZKL_OP_GET, "/t");
    uint64_t tk = start_read(c, ZKL_OP_CHILDREN, "/t");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/t"), "v", 1);
    fz_children_v(EXPECT_REQ(FZ_CHILDREN, "/t"), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, tg, ZOK);
    EXPECT_EV(c, ZKL_EV_OP_DONE, tk, ZOK);
    CHECK_INT(zkl_lock_abandon(c, tg), ZKL_OK);
    CHECK_INT(fz_armed("/t"), 1);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/t"), 0); /* nobody's any more */
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, "/t"), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, tk, ZKL_WATCH_DELETED);
    EXPECT_NO_EV(c);

    /* on their way: a read abandoned before its answer leaves an armed one's watch alone */
    uint64_t a1 = start_read(c, ZKL_OP_GET, "/f");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/f"), "v", 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, a1, ZOK);
    uint64_t a2 = start_read(c, ZKL_OP_GET, "/f");
    fz_req *r2 = EXPECT_REQ(FZ_GET, "/f");
    CHECK_INT(zkl_lock_abandon(c, a2), ZKL_OK);
    fz_data_ok(r2, "v", 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed("/f"), 1);
    /* ... and one abandoned ahead of a later read's answer: that answer arms it again */
    uint64_t a3 = start_read(c, ZKL_OP_GET, "/f");
    uint64_t a4 = start_read(c, ZKL_OP_GET, "/f");
    fz_req *r3 = EXPECT_REQ(FZ_GET, "/f"), *r4 = EXPECT_REQ(FZ_GET, "/f");
    CHECK_INT(zkl_lock_abandon(c, a1), ZKL_OK);
    CHECK_INT(fz_armed("/f"), 0); /* a3 and a4 are not armed yet */
    CHECK_INT(zkl_lock_abandon(c, a3), ZKL_OK);
    fz_data_ok(r3, "v", 1);
    h_pump(c);
    CHECK_INT(fz_armed("/f"), 0);
    fz_data_ok(r4, "v", 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, a4, ZOK);
    CHECK_INT(fz_armed("/f"), 1);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/f"), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, a4, ZKL_WATCH_CHANGED);
    EXPECT_NO_EV(c);

    /* a watched read that timed out: its late answer armed the watcher for nobody */
    zkl_op_args late = {ZKL_OP_CHILDREN, "/l", NULL, 0, 0, -1, 0, 500, 1, 0};
    uint64_t lid = 0;
    CHECK_INT(zkl_op_start(c, &late, &lid), ZKL_OK);
    fz_req *lr = EXPECT_REQ(FZ_CHILDREN, "/l");
    h_advance(c, 510);
    EXPECT_EV(c, ZKL_EV_OP_DONE, lid, ZKL_ETIMEDOUT);
    fz_children_v(lr, "x", NULL);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed("/l"), 0);
    EXPECT_NO_REQ();
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.watch_events, 3);
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

/* Drains the events and returns how many WATCH events came, counting them per op in got[] (ids
 * found in ids[0..n-1]) with their status in st[]; any other event fails the test. */
static int drain_watches(zkl_client *c, const uint64_t *ids, int n, int *got, int *st) {
    zkl_event ev;
    int total = 0;
    for (int i = 0; i < n; i++)
        got[i] = 0;
    while (zkl_client_next_event(c, &ev)) {
        CHECK_INT(ev.type, ZKL_EV_WATCH);
        for (int i = 0; i < n; i++)
            if (ids[i] == ev.id) got[i]++, st[i] = ev.status;
        total++;
    }
    return total;
}

/* Many armed watches are one watcher for the ZooKeeper client: on every session event it builds
 * the list of its distinct (watcher, context) pairs with a linear search per pair, which took
 * 0.7 s for 20,000 pairs. Each event still reaches exactly the reads it ends: CHANGED the data
 * watches of the path (two reads of one node both hear it), CHILD the children watch, DELETED
 * all three, CREATED the exists watch of the missing node; across a connection loss too. */
#define NW 100
static void many_one_watcher(void) {
    zkl_client *c = h_client();
    uint64_t gets[NW], kids[NW], again, ex;
    char path[32];
    for (int i = 0; i < NW; i++) {
        snprintf(path, sizeof path, "/m/p%03d", i);
        gets[i] = start_read(c, ZKL_OP_GET, path);
        kids[i] = start_read(c, ZKL_OP_CHILDREN, path);
    }
    again = start_read(c, ZKL_OP_GET, "/m/p000");
    ex = start_read(c, ZKL_OP_EXISTS, "/m/x");
    for (int i = 0; i < NW; i++) {
        snprintf(path, sizeof path, "/m/p%03d", i);
        fz_data_ok(EXPECT_REQ(FZ_GET, path), "v", 0x10 + i);
        fz_children_v(EXPECT_REQ(FZ_CHILDREN, path), NULL);
    }
    fz_data_ok(EXPECT_REQ(FZ_GET, "/m/p000"), "v", 0x10);
    fz_reply(EXPECT_REQ(FZ_EXISTS, "/m/x"), ZNONODE);
    h_pump(c);
    zkl_event ev;
    for (int i = 0; i < 2 * NW + 2; i++) {
        CHECK(zkl_client_next_event(c, &ev));
        CHECK_INT(ev.type, ZKL_EV_OP_DONE);
    }
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed_total(), 2 * NW + 1); /* the two gets of /m/p000: one watch */
    CHECK_INT(fz_watchers(), 1);

    uint64_t ids[5] = {gets[1], kids[1], gets[0], kids[0], again};
    int got[5], st[5];
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/m/p001"), 1);
    h_pump(c);
    CHECK_INT(drain_watches(c, ids, 5, got, st), 1);
    CHECK_INT(got[0], 1);
    CHECK_INT(st[0], ZKL_WATCH_CHANGED);
    CHECK_INT(fz_fire(ZOO_CHILD_EVENT, "/m/p001"), 1);
    h_pump(c);
    CHECK_INT(drain_watches(c, ids, 5, got, st), 1);
    CHECK_INT(got[1], 1);
    CHECK_INT(st[1], ZKL_WATCH_CHILD);
    CHECK_INT(fz_fire(ZOO_DELETED_EVENT, "/m/p000"), 1);
    h_pump(c);
    CHECK_INT(drain_watches(c, ids, 5, got, st), 3);
    CHECK_INT(got[2] + got[3] + got[4], 3);
    CHECK_INT(st[2], ZKL_WATCH_DELETED);
    CHECK_INT(st[3], ZKL_WATCH_DELETED);
    CHECK_INT(st[4], ZKL_WATCH_DELETED);
    CHECK_INT(fz_fire(ZOO_CREATED_EVENT, "/m/x"), 1);
    h_pump(c);
    ids[0] = ex;
    CHECK_INT(drain_watches(c, ids, 1, got, st), 1);
    CHECK_INT(st[0], ZKL_WATCH_CREATED);

    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    h_reconnect(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_watchers(), 1);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/m/p099"), 1);
    h_pump(c);
    ids[0] = gets[NW - 1];
    CHECK_INT(drain_watches(c, ids, 1, got, st), 1);
    CHECK_INT(got[0], 1);
    zkl_stats sts;
    zkl_client_stats(c, &sts);
    CHECK_INT(sts.watch_events, 7);
    h_free(c);
}

/* A read nobody waits for any more is not sent again: one abandoned on its way is not re-sent
 * after a connection loss, one abandoned before it went out is never sent. The armed read of
 * the same path abandoned while disconnected drops the watcher; the client then closes with
 * nothing left (ASan: no leak, no use after free of the index). */
static void abandon_unsent(void) {
    zkl_client *c = h_client();
    uint64_t held = start_read(c, ZKL_OP_GET, "/p");
    fz_data_ok(EXPECT_REQ(FZ_GET, "/p"), "v", 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, held, ZOK);
    uint64_t fly = start_read(c, ZKL_OP_GET, "/p");
    EXPECT_REQ(FZ_GET, "/p");
    CHECK_INT(zkl_lock_abandon(c, fly), ZKL_OK);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    uint64_t queued = start_read(c, ZKL_OP_CHILDREN, "/q"); /* waits for the connection */
    CHECK_INT(zkl_lock_abandon(c, queued), ZKL_OK);
    CHECK_INT(zkl_lock_abandon(c, held), ZKL_OK); /* while disconnected */
    CHECK_INT(fz_armed("/p"), 0);
    h_reconnect(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    uint64_t again = start_read(c, ZKL_OP_GET, "/p");
    EXPECT_REQ(FZ_GET, "/p");
    CHECK_INT(zkl_lock_abandon(c, again), ZKL_OK);
    zkl_client_close(c);
    h_free(c);
}

H_DEFINE_GROUP(g_watch, {"get_changed", get_changed}, {"exists_and_children", exists_and_children},
               {"not_armed", not_armed}, {"session_lost", session_lost},
               {"connection_loss", connection_loss}, {"close_ends_watches", close_ends_watches},
               {"abandon", abandon}, {"abandon_shared", abandon_shared}, {"bad_args", bad_args},
               {"many_one_watcher", many_one_watcher}, {"abandon_unsent", abandon_unsent});
