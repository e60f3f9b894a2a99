/* test_loss.c - the loss clock counts from what the server last heard: the issue time of the newest
 * request it answered (answered.c), never from a push (a watch event) or a code the client makes
 * up. Session timeout 10 s: heartbeat after 2.5 s without a request, SUSPENDED after 6.666 s with
 * nothing answered, LOST at the answer's issue time + 9 s (10 s less a 1 s margin). */
#include "harness.h"
#include "internal.h"

#define DIR "/loss"

/* acquire and hold (own seq 1); create and list answered now */
static uint64_t hold(zkl_client *c) {
    uint64_t id = 0;
    CHECK_INT(zkl_lock_acquire(c, ZKL_MUTEX, DIR, -1, 0, &id), ZKL_OK);
    fz_req *cr = EXPECT_REQ(FZ_CREATE, DIR "/_c_");
    zkl_client_process(c);
    fz_req *ls = EXPECT_REQ(FZ_CHILDREN, DIR);
    fz_create_ok(cr, 1, 0x41);
    fz_children_v(ls, h_seqname(cr, 1), NULL);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_ACQUIRED, id, ZKL_OK);
    return id;
}

static uint64_t start_op(zkl_client *c, zkl_op_type type, const char *path, int watch) {
    zkl_op_args a = {type, path, "x", 1, 0, -1, 0, 0, watch, 0};
    uint64_t id = 0;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    return id;
}

/* Move the fake clock to t in steps of at most 250 ms, processing after each. */
static void advance_to(zkl_client *c, int64_t t) {
    while (fz_now() < t) {
        int64_t step = t - fz_now() > 250 ? 250 : t - fz_now();
        fz_advance(step);
        zkl_client_process(c);
    }
}

static fz_req *expect_heartbeat(const char *file, int line) {
    fz_req *hb = h_expect_req(file, line, FZ_EXISTS, "/");
    h_checks++;
    if (strcmp(hb->path, "/") != 0 || hb->watch)
        h_fail(file, line, "expected the heartbeat exists(\"/\") without a watch, got %s",
               hb->path);
    return hb;
}
#define EXPECT_HEARTBEAT() expect_heartbeat(__FILE__, __LINE__)

/* The issue's case: a holder with a data watch; the server pushes the watch event, then the link
 * goes silent (nothing answered, no reset). The push proves nothing about what the server
 * received: SUSPENDED 2T/3 and LOST T - margin after the issue time of the last answered request,
 * as if there had been no push. (The old rule counted from the push and said nothing here.) */
static void push_does_not_move_deadline(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    uint64_t id = hold(c);
    uint64_t g = start_op(c, ZKL_OP_GET, "/w", 1);
    fz_data_ok(EXPECT_REQ(FZ_GET, "/w"), "v", 0x10);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    advance_to(c, t0 + 2500);
    fz_req *hb1 = EXPECT_HEARTBEAT(); /* sent, never answered: the link is silent from here */
    (void)hb1;
    advance_to(c, t0 + 3000);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/w"), 1); /* the push */
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, g, ZKL_WATCH_CHANGED);
    EXPECT_NO_EV(c);
    advance_to(c, t0 + 5000);
    EXPECT_HEARTBEAT(); /* T/4 after the last one */
    advance_to(c, t0 + 6665);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    advance_to(c, t0 + 6666);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    EXPECT_NO_EV(c);
    EXPECT_HEARTBEAT(); /* sent at once: only its answer could end the suspension */
    advance_to(c, t0 + 8999);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    advance_to(c, t0 + 9000);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_LOST);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_lock_release(c, id), ZKL_ELOST);
    h_free(c);
}

/* The same push while the holder is otherwise idle: zkl_client_loss_ms() does not move. */
static void push_keeps_loss_ms(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    hold(c);
    uint64_t g = start_op(c, ZKL_OP_GET, "/w", 1);
    fz_data_ok(EXPECT_REQ(FZ_GET, "/w"), "v", 0x10);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    CHECK_INT(zkl_client_loss_ms(c), 9000);
    advance_to(c, t0 + 1000);
    CHECK_INT(fz_fire(ZOO_CHANGED_EVENT, "/w"), 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_WATCH, g, ZKL_WATCH_CHANGED);
    CHECK_INT(zkl_client_loss_ms(c), 8000);
    h_free(c);
}

/* An answered heartbeat moves the deadline to its issue time + T - margin; the next heartbeat
 * goes out T/4 after it (and timeout_ms says so). */
static void heartbeat_answer_moves_deadline(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    hold(c);
    CHECK_INT(zkl_client_timeout_ms(c), 2500); /* the heartbeat is the nearest deadline */
    advance_to(c, t0 + 2499);
    EXPECT_NO_REQ();
    advance_to(c, t0 + 2500);
    fz_req *hb = EXPECT_HEARTBEAT();
    EXPECT_NO_REQ();
    CHECK_INT(zkl_client_loss_ms(c), 6500); /* not answered yet: still from t0 */
    advance_to(c, t0 + 2600);
    fz_stat_ok(hb, 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_loss_ms(c), 2500 + 9000 - 2600);
    CHECK_INT(zkl_client_timeout_ms(c), 2400); /* next heartbeat at t0 + 5000 */
    advance_to(c, t0 + 5000);
    fz_stat_ok(EXPECT_HEARTBEAT(), 1);
    h_pump(c);
    CHECK_INT(zkl_client_loss_ms(c), 9000);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* A request answered late counts from when it was issued, not from when its answer came. */
static void late_answer_counts_from_issue(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    advance_to(c, t0 + 1000);
    uint64_t g = start_op(c, ZKL_OP_GET, "/slow", 0);
    fz_req *r = EXPECT_REQ(FZ_GET, "/slow");
    advance_to(c, t0 + 3400); /* no heartbeat: a request went out at t0 + 1000 */
    EXPECT_NO_REQ();
    fz_data_ok(r, "v", 0x10);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    CHECK_INT(zkl_client_loss_ms(c), 1000 + 9000 - 3400);
    h_free(c);
}

/* Codes the client makes up (ZOPERATIONTIMEOUT, ZCONNECTIONLOSS) prove nothing; the server's own
 * refusals (ZNONODE, ZNODEEXISTS, ZBADVERSION, ...) do. */
static void made_up_codes_do_not_count(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    advance_to(c, t0 + 1000);
    uint64_t a = start_op(c, ZKL_OP_SET, "/a", 0);
    uint64_t b = start_op(c, ZKL_OP_SET, "/b", 0);
    fz_reply(EXPECT_REQ(FZ_SET, "/a"), ZOPERATIONTIMEOUT);
    fz_reply(EXPECT_REQ(FZ_SET, "/b"), ZCONNECTIONLOSS);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, a, ZOPERATIONTIMEOUT);
    EXPECT_EV(c, ZKL_EV_OP_DONE, b, ZCONNECTIONLOSS);
    CHECK_INT(zkl_client_loss_ms(c), 8000); /* still from the session's start, t0 */
    uint64_t d = start_op(c, ZKL_OP_DELETE, "/d", 0);
    fz_reply(EXPECT_REQ(FZ_DELETE, "/d"), ZNONODE);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, d, ZNONODE);
    CHECK_INT(zkl_client_loss_ms(c), 9000);
    /* the whole table */
    static const int server[] = {
        ZOK,        ZNONODE, ZNODEEXISTS, ZBADVERSION, ZNOTEMPTY, ZNOAUTH, ZNOCHILDRENFOREPHEMERALS,
        ZINVALIDACL};
    static const int made_up[] = {ZCONNECTIONLOSS,       ZOPERATIONTIMEOUT, ZCLOSING,
                                  ZSESSIONEXPIRED,       ZINVALIDSTATE,     ZSESSIONMOVED,
                                  ZRUNTIMEINCONSISTENCY, ZMARSHALLINGERROR, ZSYSTEMERROR,
                                  ZAUTHFAILED,           ZBADARGUMENTS};
    for (size_t i = 0; i < sizeof server / sizeof *server; i++)
        CHECK_INT(zkl__server_answered(server[i]), 1);
    for (size_t i = 0; i < sizeof made_up / sizeof *made_up; i++)
        CHECK_INT(zkl__server_answered(made_up[i]), 0);
    h_free(c);
}

/* The link stays up but nothing is answered for 2T/3: SUSPENDED. An answer to a request issued
 * before the silence does not end it; an answer to one issued since does (RECONNECTED). */
static void silence_suspends(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    uint64_t id = hold(c);
    advance_to(c, t0 + 2500);
    fz_req *hb1 = EXPECT_HEARTBEAT();
    advance_to(c, t0 + 5000);
    fz_req *hb1b = EXPECT_HEARTBEAT();
    advance_to(c, t0 + 6665);
    EXPECT_NO_EV(c);
    EXPECT_NO_REQ();
    CHECK_INT(zkl_client_state(c), ZKL_STATE_CONNECTED);
    advance_to(c, t0 + 6666);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    EXPECT_NO_EV(c);
    CHECK_INT(fz_state(), ZOO_CONNECTED_STATE); /* the link itself is up */
    zkl_lock_info info;
    zkl_lock_info_get(c, id, &info);
    CHECK_INT(info.suspended, 1);
    fz_req *hb2 = EXPECT_HEARTBEAT();
    fz_stat_ok(hb1, 1); /* both issued before the silence was noticed */
    fz_stat_ok(hb1b, 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_state(c), ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_client_loss_ms(c), 5000 + 9000 - 6666);
    advance_to(c, t0 + 6700);
    fz_stat_ok(hb2, 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_RECONNECTED);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_loss_ms(c), 6666 + 9000 - 6700);
    zkl_lock_info_get(c, id, &info);
    CHECK_INT(info.suspended, 0);
    h_free(c);
}

/* After a reconnect, the heartbeat sent at once is answered with a code the client made up: still
 * SUSPENDED; the next heartbeat (T/4 later) is answered by the server: RECONNECTED. No heartbeat
 * goes out while the link is down. */
static void reconnect_needs_server_answer(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    uint64_t id = hold(c);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    advance_to(c, t0 + 4000);
    EXPECT_NO_REQ(); /* the link is down */
    fz_connect();
    h_pump(c);
    fz_req *hb = EXPECT_HEARTBEAT();
    EXPECT_NO_EV(c);
    fz_reply(hb, ZOPERATIONTIMEOUT);
    h_pump(c);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_state(c), ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_client_loss_ms(c), 5000);
    advance_to(c, t0 + 6499);
    EXPECT_NO_REQ();
    advance_to(c, t0 + 6500);
    fz_req *hb2 = EXPECT_HEARTBEAT();
    fz_stat_ok(hb2, 1);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_RECONNECTED);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_loss_ms(c), 9000);
    h_free(c);
}

/* LOST at answered_at + T - margin, with answered_at moved by an answered heartbeat; timeout_ms
 * wakes the host for it. */
static void lost_at_answer_plus_timeout(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    uint64_t id = hold(c);
    advance_to(c, t0 + 2500);
    fz_req *hb = EXPECT_HEARTBEAT();
    advance_to(c, t0 + 2600);
    fz_stat_ok(hb, 1);
    h_pump(c);
    /* silence from here: heartbeats at 5000 and 7500, SUSPENDED at 2500 + 6666 (with one) */
    advance_to(c, t0 + 5000);
    EXPECT_HEARTBEAT();
    advance_to(c, t0 + 7500);
    EXPECT_HEARTBEAT();
    advance_to(c, t0 + 9165);
    EXPECT_NO_EV(c);
    advance_to(c, t0 + 9166);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_SUSPENDED);
    EXPECT_HEARTBEAT();
    EXPECT_NO_REQ();
    CHECK_INT(zkl_client_timeout_ms(c), 11500 - 9166);
    fz_advance(11499 - 9166);
    zkl_client_process(c);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_loss_ms(c), 1);
    CHECK_INT(zkl_client_timeout_ms(c), 1);
    fz_advance(1);
    zkl_client_process(c);
    EXPECT_EV(c, ZKL_EV_LOCK_STATE, id, ZKL_LOCK_LOST);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_EXPIRED);
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_loss_ms(c), -1); /* no session until the next one connects */
    h_free(c);
}

/* While requests flow (each answered), no heartbeat is added: idle traffic only. */
static void no_heartbeat_while_requests_flow(void) {
    zkl_client *c = h_client();
    int64_t t0 = fz_now();
    for (int i = 1; i <= 10; i++) {
        advance_to(c, t0 + 2000 * i);
        uint64_t g = start_op(c, ZKL_OP_GET, "/busy", 0);
        fz_data_ok(EXPECT_REQ(FZ_GET, "/busy"), "v", 0x10);
        h_pump(c);
        EXPECT_EV(c, ZKL_EV_OP_DONE, g, ZOK);
    }
    EXPECT_NO_REQ();
    EXPECT_NO_EV(c);
    CHECK_INT(zkl_client_state(c), ZKL_STATE_CONNECTED);
    CHECK_INT(zkl_client_loss_ms(c), 9000);
    CHECK_INT(c->heartbeats, 0);
    h_free(c);
}

/* A first session whose connect took longer than a session timeout (the server was away): it
 * counts from the process() call that sent the connect request, not from the handle's opening,
 * so it is not taken as lost the moment it connects. No session: -1. */
static void new_session_counts_from_connect(void) {
    fz_reset();
    zkl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.hosts = "fake:2181";
    cfg.session_timeout_ms = 10000;
    zkl_client *c = NULL;
    CHECK_INT(zkl__client_new_zk(&cfg, &fz_table, &c), ZKL_OK);
    if (!c) return;
    CHECK_INT(zkl_client_loss_ms(c), -1);
    int64_t t0 = fz_now();
    advance_to(c, t0 + 20000);
    CHECK_INT(zkl_client_state(c), ZKL_STATE_CONNECTING);
    CHECK_INT(zkl_client_loss_ms(c), -1);
    fz_connect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    CHECK_INT(zkl_client_loss_ms(c), 9000);
    EXPECT_NO_REQ();
    zkl_client_close(c);
    CHECK_INT(zkl_client_loss_ms(c), -1);
    h_free(c);
}

static void remove_reply(int rc, const void *data) {
    (void)rc, (void)data;
}

/* A request the ZooKeeper client refuses synchronously (here remove-watches with ZNOWATCHER,
 * returned before it registers a completion) gives its answer slot back at once: a slot kept for
 * a completion that never runs would count as a request in flight for the rest of the handle. */
static void sync_refusal_frees_slot(void) {
    zkl_client *c = h_client();
    size_t before = c->inflight_n;
    fz_refuse_next_remove(ZNOWATCHER);
    CHECK_INT(zkl__aremove_all_watches(c, "/w", ZWATCHTYPE_DATA, 0, remove_reply, NULL),
              ZNOWATCHER);
    CHECK_INT(c->inflight_n, before);
    EXPECT_NO_REQ();
    /* a request that went out keeps its slot until answered */
    CHECK_INT(zkl__aremove_all_watches(c, "/w", ZWATCHTYPE_DATA, 0, remove_reply, NULL), ZOK);
    CHECK_INT(c->inflight_n, before + 1);
    fz_req *r = EXPECT_REQ(FZ_REMOVE_WATCHES, "/w");
    fz_reply(r, ZNOWATCHER);
    h_pump(c);
    CHECK_INT(c->inflight_n, before);
    h_free(c);
}

H_DEFINE_GROUP(g_loss, {"push_does_not_move_deadline", push_does_not_move_deadline},
               {"push_keeps_loss_ms", push_keeps_loss_ms},
               {"heartbeat_answer_moves_deadline", heartbeat_answer_moves_deadline},
               {"late_answer_counts_from_issue", late_answer_counts_from_issue},
               {"made_up_codes_do_not_count", made_up_codes_do_not_count},
               {"silence_suspends", silence_suspends},
               {"reconnect_needs_server_answer", reconnect_needs_server_answer},
               {"lost_at_answer_plus_timeout", lost_at_answer_plus_timeout},
               {"no_heartbeat_while_requests_flow", no_heartbeat_while_requests_flow},
               {"new_session_counts_from_connect", new_session_counts_from_connect},
               {"sync_refusal_frees_slot", sync_refusal_frees_slot});
