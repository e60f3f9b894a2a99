/* test_session.c - connection loss and session expiry around the mutex: protected-prefix
 * adoption of a create whose reply was lost, re-create when no node carries the prefix, expiry
 * in every phase (creating, listing, watching, held, releasing), SUSPENDED/RECONNECTED, LOST by
 * the client's own timer, releases retried across a connection loss. */
#include "harness.h"

#define DIR "/s"

static uint64_t start(zkl_client *c, fz_req **cr, fz_req **ls) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    return id;
}

/* acquire and hold (own seq 1, czxid 0x41) */
static uint64_t hold(zkl_client *c, fz_req **cr) {
    fz_req *ls;
    uint64_t id = start(c, cr, &ls);
    fz_create_ok(*cr, 1, 0x41);
    fz_children_v(ls, h_seqname(*cr, 1), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    return id;
}

static void lost_create_reply(int server_created) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start(c, &cr, &ls);
    fz_disconnect();
    h_pump(c);
    CHECK_INT(cr->rc, ZCONNECTIONLOSS);
    CHECK_INT(ls->rc, ZCONNECTIONLOSS);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *scan = EXPECT_REQ(FZ_CHILDREN, DIR); /* look for our prefix */
    EXPECT_NO_REQ();
    const char *o1 = h_other(1, "lock-", 2);
    if (server_created) {
        const char *own = h_seqname(cr, 3);
        fz_children_v(scan, o1, own, NULL);
        h_pump(c);
        fz_req *ex = EXPECT_REQ(FZ_EXISTS, h_join(DIR, own)); /* its czxid is the token */
        CHECK_STR(ex->path, h_join(DIR, own));
        CHECK_INT(ex->watch, 0);
        EXPECT_NO_REQ();
        fz_stat_ok(ex, 0x333);
        h_pump(c);
        fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
        EXPECT_NO_REQ();
        fz_children_v(ls2, own, NULL); /* o1 left meanwhile */
        h_pump(c);
        EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
        zkl_lock_info info;
        zkl_lock_info_get(c, id, &info);
        CHECK_INT(info.token, 0x333);
        CHECK_STR(info.node, h_join(DIR, own));
        zkl_stats st;
        zkl_client_stats(c, &st);
        CHECK_INT(st.creates, 1); /* adopted, not created again */
        CHECK_INT(st.exists, 1);
    } else {
        fz_children_v(scan, o1, NULL);
        h_pump(c);
        fz_req *cr2 = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
        CHECK_STR(cr2->path, cr->path); /* the same protected prefix */
        fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
        EXPECT_NO_REQ();
        fz_create_ok(cr2, 3, 0x334);
        fz_children_v(ls2, h_seqname(cr2, 3), NULL);
        h_pump(c);
        EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
        zkl_lock_info info;
        zkl_lock_info_get(c, id, &info);
        CHECK_INT(info.token, 0x334);
    }
    EXPECT_NO_EV(c);
    h_free(c);
}

static void adopt_by_prefix(void) {
    lost_create_reply(1);
}
static void recreate_without_prefix(void) {
    lost_create_reply(0);
}

/* A node found by our protected prefix whose ephemeralOwner is not this session (a node of an
 * earlier, expired session: it vanishes with that session) is never adopted: the acquisition
 * creates its own node under a fresh prefix with the same token and is granted on that one, never
 * on the stranger, and no later scan or cleanup touches the stranger (the double-leader bug class
 * of CURATOR-696/653/620/504). rw: the same through the read-write lock's write side. */
static void foreign_owner(zkl_recipe recipe, const char *token, int give_up) {
    zkl_client *c = h_client();
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, recipe, DIR, give_up ? 5000 : -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    CHECK(h_is_protected(cr->path, DIR, token));
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    (void)ls;
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *scan = EXPECT_REQ(FZ_CHILDREN, DIR);
    char stranger[256];
    snprintf(stranger, sizeof stranger, "%s", h_seqname(cr, 0)); /* heads the queue */
    fz_children_v(scan, stranger, NULL);
    h_pump(c);
    fz_req *ex = EXPECT_REQ(FZ_EXISTS, h_join(DIR, stranger));
    EXPECT_NO_REQ();
    fz_stat_owner(ex, 0x500, fz_session() + 77); /* another session's node */
    h_pump(c);
    fz_req *cr2 = EXPECT_REQ(FZ_CREATE, DIR "/_c_"); /* not adopted: created again */
    CHECK(h_is_protected(cr2->path, DIR, token));
    CHECK(strcmp(cr2->path, cr->path) != 0); /* under a fresh prefix */
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    if (give_up) {
        /* the stranger still heads the queue; the new node waits behind it and times out */
        fz_create_ok(cr2, 1, 0x501);
        fz_children_v(ls2, stranger, h_seqname(cr2, 1), NULL);
        h_pump(c);
        fz_req *gd = EXPECT_REQ(FZ_GET, h_join(DIR, stranger));
        fz_data_ok(gd, "old", 0x500);
        h_pump(c);
        h_advance(c, 5100);
        EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ETIMEDOUT);
        for (fz_req *r; (r = fz_next()) != NULL;) {
            CHECK(r->kind != FZ_DELETE || strcmp(r->path, h_join(DIR, stranger)) != 0);
            CHECK(r->kind != FZ_CHILDREN); /* no scan: our own node is known */
            if (r->kind == FZ_DELETE) {
                CHECK_STR(r->path, h_join(DIR, h_seqname(cr2, 1)));
                fz_reply(r, ZOK);
            } else if (r->status == FZ_PENDING) {
                fz_reply(r, ZOK);
            }
            h_pump(c);
        }
        CHECK_INT(fz_live(), 0);
    } else {
        fz_create_ok(cr2, 1, 0x501);
        fz_children_v(ls2, h_seqname(cr2, 1), NULL); /* the stranger vanished with its session */
        h_pump(c);
        EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
        zkl_lock_info info;
        zkl_lock_info_get(c, id, &info);
        CHECK_INT(info.token, 0x501);
        CHECK_STR(info.node, h_join(DIR, h_seqname(cr2, 1)));
    }
    EXPECT_NO_EV(c);
    h_free(c);
}

static void adopt_checks_owner(void) {
    foreign_owner(ZKL_MUTEX, "lock-", 0);
}
static void adopt_checks_owner_rw(void) {
    foreign_owner(ZKL_WRITE, "__WRIT__", 0);
}
static void adopt_foreign_then_timeout(void) {
    foreign_owner(ZKL_MUTEX, "lock-", 1);
}

/* A create answered ZOPERATIONTIMEOUT is as unknown as a lost one: scanned for, without any
 * connection loss. */
static void operation_timeout_scans(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start(c, &cr, &ls);
    fz_reply(cr, ZOPERATIONTIMEOUT);
    h_pump(c);
    fz_req *scan = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_children_v(ls, h_seqname(cr, 0), NULL); /* the stale pipelined listing: ignored */
    h_pump(c);
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    fz_children_v(scan, h_seqname(cr, 0), NULL);
    h_pump(c);
    fz_stat_ok(EXPECT_REQ(FZ_EXISTS, h_join(DIR, h_seqname(cr, 0))), 0x10);
    h_pump(c);
    fz_children_v(EXPECT_REQ(FZ_CHILDREN, DIR), h_seqname(cr, 0), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    h_free(c);
}

enum { X_CREATING, X_LISTING, X_WATCHING, X_HELD, X_RELEASING };

/* The session expires: pending acquires fail ESESSION, a held lock is LOST (release then
 * returns ELOST), a release in flight ends RELEASED with ELOST; a new session follows. */
static void expire_in(int phase) {
    zkl_client *c = h_client();
    fz_req *cr, *ls, *g = NULL, *del = NULL;
    uint64_t id = start(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 0);
    if (phase >= X_LISTING) {
        fz_create_ok(cr, 1, 0x51);
        h_pump(c);
    }
    if (phase == X_WATCHING) {
        fz_children_v(ls, o1, h_seqname(cr, 1), NULL);
        h_pump(c);
        g = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
        fz_data_ok(g, "o", 1);
        h_pump(c);
        CHECK_INT(fz_armed(h_join(DIR, o1)), 1);
    }
    if (phase >= X_HELD) {
        fz_children_v(ls, h_seqname(cr, 1), NULL);
        h_pump(c);
        EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    }
    if (phase == X_RELEASING) {
        CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
        del = EXPECT_REQ(FZ_DELETE, cr->created);
    }
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    int64_t s1 = zkl_client_session(c, NULL);
    CHECK(s1 != 0);
    fz_expire();
    h_pump(c);
    if (phase <= X_WATCHING) EXPECT_EV(c, ZKL_EV_FAILED, id, ZKL_ESESSION);
    if (phase == X_HELD) EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_LOST);
    if (phase == X_RELEASING) {
        CHECK_INT(del->rc, ZSESSIONEXPIRED);
        EXPECT_EV(c, ZKL_EV_RELEASED, id, ZKL_ELOST);
    }
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_state(c), ZKL_STATE_CONNECTING);
    CHECK_INT(fz_handles_closed(), 1); /* the old handle is closed, a new one opened */
    CHECK_INT(fz_handles_opened(), 2);
    CHECK_INT(fz_armed_total(), 0);
    if (phase == X_HELD) {
        zkl_lock_info info;
        CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
        CHECK_INT(info.held, 0);
        CHECK_INT(zkl_lock_release(c, id), ZKL_ELOST);
        CHECK_INT(zkl_lock_release(c, id), ZKL_ENOTFOUND);
    }
    /* late events of the old session change nothing */
    if (g) CHECK_INT(fz_fire(ZOO_DELETED_EVENT, h_join(DIR, o1)), 0);
    fz_connect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ(); /* nothing to clean up: the old session's nodes went with it */
    CHECK(zkl_client_session(c, NULL) != s1);
    CHECK_INT(zkl_client_session_count(c), 2);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.sessions_expired, 1);
    h_free(c);
}

static void expire_creating(void) {
    expire_in(X_CREATING);
}
static void expire_listing(void) {
    expire_in(X_LISTING);
}
static void expire_watching(void) {
    expire_in(X_WATCHING);
}
static void expire_held(void) {
    expire_in(X_HELD);
}
static void expire_releasing(void) {
    expire_in(X_RELEASING);
}

/* Connection loss while held: SUSPENDED, then RECONNECTED when the same session comes back and
 * the server has answered a request sent since (the heartbeat sent at once): the handshake alone
 * does not say when the server last heard from us. */
static void held_suspended_reconnected(void) {
    zkl_client *c = h_client();
    fz_req *cr;
    uint64_t id = hold(c, &cr);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    EXPECT_NO_EV(c);
    zkl_lock_info info;
    zkl_lock_info_get(c, id, &info);
    CHECK_INT(info.held, 1);
    CHECK_INT(info.suspended, 1);
    h_advance(c, 3000);
    EXPECT_NO_EV(c);
    fz_connect();
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_req *hb = EXPECT_REQ(FZ_EXISTS, "/");
    CHECK_STR(hb->path, "/");
    CHECK_INT(hb->watch, 0);
    EXPECT_NO_REQ();
    CHECK_INT(zkl_client_state(c), ZKL_STATE_SUSPENDED);
    fz_stat_ok(hb, 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_RECONNECTED);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    CHECK_INT(zkl_client_session_count(c), 1);
    zkl_lock_info_get(c, id, &info);
    CHECK_INT(info.suspended, 0);
    h_free(c);
}

/* Suspended too long: the holder is told LOST a session timeout less a margin (10 s - 1 s) after
 * it last heard from the server, before the server could have given the lock to anyone else. */
static void held_lost_by_timer(void) {
    zkl_client *c = h_client();
    fz_req *cr;
    uint64_t id = hold(c, &cr);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    h_advance(c, 8999);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_timeout_ms(c), 1);
    h_advance(c, 1);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_LOST);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_handles_closed(), 1);
    CHECK_INT(zkl_lock_release(c, id), ZKL_ELOST);
    h_free(c);
}

/* A client nobody drove for a whole session timeout takes its session as expired. */
static void not_driven_for_a_timeout(void) {
    zkl_client *c = h_client();
    fz_req *cr;
    uint64_t id = hold(c, &cr);
    fz_advance(10000);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_LOST);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* A release while disconnected waits; its delete lost with the connection is sent again. */
static void release_across_connection_loss(void) {
    zkl_client *c = h_client();
    fz_req *cr;
    uint64_t id = hold(c, &cr);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    CHECK_INT(zkl_lock_release(c, id), ZKL_OK);
    h_pump(c);
    EXPECT_NO_REQ();
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_EV(c); /* releasing: no RECONNECTED for it */
    fz_req *d1 = EXPECT_REQ(FZ_DELETE, cr->created);
    EXPECT_NO_REQ();
    fz_disconnect(); /* this delete's reply is lost too */
    h_pump(c);
    CHECK_INT(d1->rc, ZCONNECTIONLOSS);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_NO_EV(c);
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *d2 = EXPECT_REQ(FZ_DELETE, cr->created);
    fz_reply(d2, ZNONODE); /* the first one had been applied */
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_RELEASED, id, ZKL_OK);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    h_free(c);
}

/* A waiter's getData lost with the connection: it lists again after reconnect. */
static void waiter_relists_after_reconnect(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start(c, &cr, &ls);
    const char *o1 = h_other(1, "lock-", 0);
    fz_create_ok(cr, 1, 1);
    fz_children_v(ls, o1, h_seqname(cr, 1), NULL);
    h_pump(c);
    fz_req *g = EXPECT_REQ(FZ_GET, h_join(DIR, o1));
    fz_disconnect();
    h_pump(c);
    CHECK_INT(g->rc, ZCONNECTIONLOSS);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *ls2 = EXPECT_REQ(FZ_CHILDREN, DIR);
    EXPECT_NO_REQ();
    fz_children_v(ls2, h_seqname(cr, 1), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    h_free(c);
}

/* Closing the client: a pending acquire fails ECLOSED, a release in flight completes, the
 * session is closed (its nodes vanish with it). */
static void close_with_work_pending(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t held = hold(c, &cr);
    uint64_t waiting = start(c, &cr, &ls);
    CHECK_INT(zkl_lock_release(c, held), ZKL_OK);
    fz_drop_link(); /* so that close does not wait for replies */
    CHECK_INT(zkl_client_close(c), ZKL_OK);
    EXPECT_EV(c, ZKL_EV_FAILED, waiting, ZKL_ECLOSED);
    EXPECT_EV(c, ZKL_EV_RELEASED, held, ZKL_OK);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CLOSED);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_handles_closed(), 1);
    CHECK_INT(fz_handle_open(), 0);
    CHECK_INT(zkl_client_process(c), ZKL_ECLOSED);
    uint64_t x;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &x), ZKL_ECLOSED);
    zkl_client_free(c);
}

/* A server that expires every session as soon as it is made: the client keeps opening new ones,
 * the first at once, then paced (100 ms doubling to 10 s): at most a dozen in a minute, where an
 * unpaced client opens one per process() call. A session that lived a session timeout resets
 * the pace. */
static void reopen_paced(void) {
    zkl_client *c = h_client();
    int opened0 = fz_handles_opened();
    int64_t end = fz_now() + 60000;
    while (fz_now() < end) {
        if (fz_handle_open() && fz_state() != ZOO_CONNECTED_STATE) {
            fz_connect();
            h_pump(c);
        }
        if (fz_state() == ZOO_CONNECTED_STATE) {
            fz_expire();
            h_pump(c);
        }
        h_advance(c, 10);
    }
    int opened = fz_handles_opened() - opened0;
    CHECK(opened >= 8);  /* it keeps trying: 0, 0.1, 0.2, ... 6.4, 10, 10 ... s */
    CHECK(opened <= 14); /* and never faster than the pace */
    zkl_stats st;
    zkl_client_stats(c, &st);
    /* every session expired: the first one's, and each one opened since (the last re-open may
     * still be waiting for its time) */
    CHECK(st.sessions_expired == (uint64_t)opened || st.sessions_expired == (uint64_t)opened + 1);
    /* a healthy session (it lives a whole session timeout) resets the pace: the next opens at once
     */
    while (!fz_handle_open())
        h_advance(c, 10);
    fz_connect();
    h_pump(c);
    for (int i = 0; i < 10; i++) { /* the server answers its heartbeats */
        h_advance(c, 1000);
        fz_serve_all();
        h_pump(c);
    }
    CHECK_INT(fz_state(), ZOO_CONNECTED_STATE);
    int before = fz_handles_opened();
    fz_expire();
    h_pump(c);
    CHECK_INT(fz_handles_opened(), before + 1);
    h_free(c);
}

/* The server refuses the credentials: reported once (AUTH_FAILED), pending work fails with
 * ZAUTHFAILED, new work is refused with it, and no session is opened again, ever. */
static void auth_failed_is_terminal(void) {
    zkl_client *c = h_client();
    fz_req *cr, *ls;
    uint64_t id = start(c, &cr, &ls);
    (void)ls;
    zkl_op_args a = {ZKL_OP_GET, "/x", NULL, 0, 0, -1, 0, 0, 0, 0};
    uint64_t get;
    CHECK_INT(zkl_op_start(c, &a, &get), ZKL_OK);
    fz_auth_fail();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_FAILED, id, ZAUTHFAILED);
    EXPECT_EV(c, ZKL_EV_OP_DONE, get, ZAUTHFAILED);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_AUTH_FAILED);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_state(c), ZKL_STATE_AUTH_FAILED);
    int opened = fz_handles_opened();
    h_advance(c, 60000);
    CHECK_INT(fz_handles_opened(), opened);
    EXPECT_NO_EV(c);
    uint64_t x;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &x), ZAUTHFAILED);
    CHECK_INT(zkl_op_start(c, &a, &x), ZAUTHFAILED);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.sessions_expired, 0);
    h_free(c);
}

/* A session loss fails every pending call, not only acquisitions: a plain call in flight and
 * one still waiting for the link both end with ESESSION (they used to wait for ever). */
static void expiry_fails_plain_calls(void) {
    zkl_client *c = h_client();
    zkl_op_args a = {ZKL_OP_GET, "/x", NULL, 0, 0, -1, 0, 0, 0, 0};
    uint64_t sent, waiting;
    CHECK_INT(zkl_op_start(c, &a, &sent), ZKL_OK);
    EXPECT_REQ(FZ_GET, "/x");
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_op_start(c, &a, &waiting), ZKL_OK); /* not sent: no link */
    h_pump(c);                                        /* the read in flight is retried later */
    EXPECT_NO_EV(c);
    fz_expire();
    h_pump(c);
    /* both wait for the link now (the read in flight was lost with it): newest first */
    EXPECT_EV(c, ZKL_EV_OP_DONE, waiting, ZKL_ESESSION);
    EXPECT_EV(c, ZKL_EV_OP_DONE, sent, ZKL_ESESSION);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* The link comes back on the same handle with a session other than the one we had: the old
 * session is gone, so the hold is LOST and the session EXPIRED (as on an expiry), before the
 * client starts over; never silently carried into the new session. */
static void held_new_session_same_handle(void) {
    zkl_client *c = h_client();
    fz_req *cr;
    uint64_t id = hold(c, &cr);
    int64_t s1 = zkl_client_session(c, NULL);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    EXPECT_NO_EV(c);
    fz_connect_new_session();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_LOST);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    zkl_lock_info info;
    CHECK_INT(zkl_lock_info_get(c, id, &info), ZKL_OK);
    CHECK_INT(info.held, 0);
    CHECK_INT(zkl_lock_release(c, id), ZKL_ELOST);
    zkl_stats st;
    zkl_client_stats(c, &st);
    CHECK_INT(st.sessions_expired, 1);
    fz_connect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_EV(c);
    CHECK(zkl_client_session(c, NULL) != s1);
    h_free(c);
}

H_DEFINE_GROUP(g_session, {"reopen_paced", reopen_paced},
               {"expiry_fails_plain_calls", expiry_fails_plain_calls},
               {"auth_failed_is_terminal", auth_failed_is_terminal},
               {"adopt_by_prefix", adopt_by_prefix},
               {"recreate_without_prefix", recreate_without_prefix},
               {"adopt_checks_owner", adopt_checks_owner},
               {"adopt_checks_owner_rw", adopt_checks_owner_rw},
               {"adopt_foreign_then_timeout", adopt_foreign_then_timeout},
               {"operation_timeout_scans", operation_timeout_scans},
               {"expire_creating", expire_creating}, {"expire_listing", expire_listing},
               {"expire_watching", expire_watching}, {"expire_held", expire_held},
               {"expire_releasing", expire_releasing},
               {"held_suspended_reconnected", held_suspended_reconnected},
               {"held_lost_by_timer", held_lost_by_timer},
               {"held_new_session_same_handle", held_new_session_same_handle},
               {"not_driven_for_a_timeout", not_driven_for_a_timeout},
               {"release_across_connection_loss", release_across_connection_loss},
               {"waiter_relists_after_reconnect", waiter_relists_after_reconnect},
               {"close_with_work_pending", close_with_work_pending});
