/* test_unknown.c - writes whose outcome is unknown: the server applies a request and its answer
 * is lost (the ZooKeeper client fails it with ZOPERATIONTIMEOUT or ZCONNECTIONLOSS, as it does
 * with every request in flight when no reply comes or the connection breaks). The core reports
 * such a write with that code, and zkl_outcome_unknown() says so; a lock node whose create ended
 * this way is adopted by its protected prefix (one node, never a second). Also the table itself:
 * every code in it is a known code, the client's made-up failures are in it, the server's answers
 * are not. */
#include <string.h>

#include "harness.h"

static const int CODES[] = {ZOPERATIONTIMEOUT, ZCONNECTIONLOSS, ZRUNTIMEINCONSISTENCY};
#define NCODES ((int)(sizeof CODES / sizeof CODES[0]))

/* ------------------------------------------------------------------ the table */

static void table(void) {
    int n = 0;
#define XX(name)                                                                                   \
    n++;                                                                                           \
    CHECK(strcmp(zkl_err_name(ZKL_##name), "EUNKNOWN") != 0);                                      \
    CHECK_STR(zkl_err_name(ZKL_##name), #name);                                                    \
    CHECK_INT(zkl_outcome_unknown(ZKL_##name), 1);
    ZKL_OUTCOME_UNKNOWN_MAP(XX)
#undef XX
    CHECK_INT(n, 10);
    /* what the ZooKeeper client hands a request in flight without an answer of the server
     * (ZSESSIONEXPIRED only to requests that never reached a live session: not listed) */
    const int made_up[] = {ZCONNECTIONLOSS, ZOPERATIONTIMEOUT, ZRUNTIMEINCONSISTENCY,
                           ZAUTHFAILED,     ZCLOSING,          ZSYSTEMERROR};
    for (size_t i = 0; i < sizeof made_up / sizeof made_up[0]; i++)
        CHECK_INT(zkl_outcome_unknown(made_up[i]), 1);
    /* the core's own, for a request it stopped waiting for */
    CHECK_INT(zkl_outcome_unknown(ZKL_ETIMEDOUT), 1);
    CHECK_INT(zkl_outcome_unknown(ZKL_ESESSION), 1);
    CHECK_INT(zkl_outcome_unknown(ZKL_ECLOSED), 1);
    /* answers of the server (nothing applied), refusals before sending, success */
    const int known[] = {ZOK,          ZNONODE,        ZNODEEXISTS, ZBADVERSION,   ZNOAUTH,
                         ZNOTEMPTY,    ZSESSIONMOVED,  ZINVALIDACL, ZBADARGUMENTS, ZINVALIDSTATE,
                         ZKL_EINVAL,   ZKL_ELOST,      ZKL_ENOMEM,  ZKL_ECANCELED, ZTHROTTLEDOP,
                         ZNOTREADONLY, ZSESSIONEXPIRED};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        CHECK_INT(zkl_outcome_unknown(known[i]), 0);
    CHECK_INT(zkl_outcome_unknown(-999999), 0);
}

/* ------------------------------------------------------------------ transactions */

/* create /t/a + set /t/b: the server applies both, the answer is lost */
static void txn_applied_answer_lost(void) {
    for (int k = 0; k < NCODES; k++) {
        zkl_client *c = h_client();
        fz_tree_add("/t", 0);
        fz_tree_add("/t/b", 0);
        zkl_txn_op ops[2] = {{ZKL_OP_CREATE, "/t/a", "x", 1, 0, -1, 0},
                             {ZKL_OP_SET, "/t/b", "y", 1, 0, -1, 0}};
        uint64_t id;
        CHECK_INT(zkl_txn_start(c, ops, 2, 0, &id), ZKL_OK);
        fz_req *r = EXPECT_REQ(FZ_MULTI, "");
        CHECK_INT(fz_apply_then_fail(r, CODES[k]), 0);
        fz_disconnect(); /* the client drops the connection after such a failure */
        h_pump(c);
        EXPECT_EV(c, ZKL_EV_OP_DONE, id, CODES[k]);
        CHECK_INT(zkl_outcome_unknown(CODES[k]), 1);
        CHECK(fz_tree_has("/t/a")); /* applied, though the caller was not told so */
        zkl_txn_result res[2];
        CHECK_INT(zkl_txn_result_get(c, id, res, 2), 2);
        CHECK_INT(res[0].rc, CODES[k]); /* no per-op answer: never "rolled back" */
        CHECK_INT(res[1].rc, CODES[k]);
        CHECK(res[0].path == NULL);
        CHECK_INT(res[0].sent, 1); /* it went out: its outcome is unknown */
        EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
        h_reconnect(c); /* the heartbeat answered: only then RECONNECTED */
        EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
        EXPECT_NO_REQ(); /* a write is never sent twice */
        h_free(c);
    }
}

/* In flight when the session expires or the client closes: ESESSION / ECLOSED, both unknown.
 * The server's refusal of a multi is known: nothing applied. */
static void txn_session_close_and_refusal(void) {
    zkl_txn_op ops[1] = {{ZKL_OP_CREATE, "/u", "x", 1, 0, -1, 0}};
    zkl_txn_result res[1];
    zkl_event ev;
    uint64_t id;
    int seen;
    /* sent, then the session expires: the fake fails it with ZSESSIONEXPIRED, as the ZooKeeper
     * client fails requests queued for a reconnect that finds the session expired: ESESSION,
     * sent = 0 (no server applies a request of an expired session) */
    zkl_client *c = h_client();
    CHECK_INT(zkl_txn_start(c, ops, 1, 0, &id), ZKL_OK);
    EXPECT_REQ(FZ_MULTI, "");
    fz_expire();
    h_pump(c);
    seen = 0;
    while (zkl_client_next_event(c, &ev) == 1) {
        if (ev.id != id || ev.type != ZKL_EV_OP_DONE) continue;
        seen = 1;
        CHECK_INT(ev.status, ZKL_ESESSION);
        CHECK_INT(zkl_txn_result_get(c, id, res, 1), 1);
        CHECK_INT(res[0].sent, 0);
    }
    CHECK(seen);
    CHECK_INT(zkl_outcome_unknown(ZKL_ESESSION), 1); /* in general: a presumed loss */
    h_free(c);

    /* started while disconnected, the session ends before it could be sent: sent = 0, nothing
     * was applied (the Lua layer says so) */
    c = h_client();
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_txn_start(c, ops, 1, 0, &id), ZKL_OK);
    EXPECT_NO_REQ();
    fz_expire();
    h_pump(c);
    seen = 0;
    while (zkl_client_next_event(c, &ev) == 1) {
        if (ev.id != id || ev.type != ZKL_EV_OP_DONE) continue;
        seen = 1;
        CHECK_INT(ev.status, ZKL_ESESSION);
        CHECK_INT(zkl_txn_result_get(c, id, res, 1), 1);
        CHECK_INT(res[0].sent, 0);
    }
    CHECK(seen);
    h_free(c);

    /* the server's refusal of a multi is known: nothing applied */
    c = h_client();
    CHECK_INT(zkl_txn_start(c, ops, 1, 0, &id), ZKL_OK);
    fz_req *r = EXPECT_REQ(FZ_MULTI, "");
    fz_reply(r, ZNODEEXISTS);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZNODEEXISTS);
    CHECK_INT(zkl_outcome_unknown(ZNODEEXISTS), 0);

    /* in flight when the client closes: ECLOSED, unknown */
    CHECK_INT(zkl_txn_start(c, ops, 1, 0, &id), ZKL_OK);
    EXPECT_REQ(FZ_MULTI, "");
    fz_drop_link();
    CHECK_INT(zkl_client_close(c), ZKL_OK);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZKL_ECLOSED);
    CHECK_INT(zkl_outcome_unknown(ZKL_ECLOSED), 1);
    zkl_client_free(c);
}

/* ------------------------------------------------------------------ plain writes */

static void plain_applied_answer_lost(void) {
    const int kinds[3] = {ZKL_OP_CREATE, ZKL_OP_SET, ZKL_OP_DELETE};
    for (int k = 0; k < NCODES; k++) {
        for (int j = 0; j < 3; j++) {
            zkl_client *c = h_client();
            if (kinds[j] != ZKL_OP_CREATE) fz_tree_add("/p", 0);
            zkl_op_args a = {kinds[j], "/p", "v", 1, 0, -1, 0, 0, 0, 0};
            uint64_t id;
            CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
            fz_req *r = fz_next();
            CHECK(r != NULL);
            if (!r) {
                h_free(c);
                continue;
            }
            CHECK_INT(fz_apply_then_fail(r, CODES[k]), 0);
            fz_disconnect();
            h_pump(c);
            EXPECT_EV(c, ZKL_EV_OP_DONE, id, CODES[k]);
            CHECK_INT(fz_tree_has("/p"), kinds[j] != ZKL_OP_DELETE); /* applied */
            EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
            h_reconnect(c); /* the heartbeat answered: only then RECONNECTED */
            EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
            EXPECT_NO_REQ(); /* not sent again */
            h_free(c);
        }
    }
}

/* ------------------------------------------------------------------ lock node creates */

typedef struct {
    const char *name;
    int recipe; /* ZKL_MUTEX, ZKL_READ, ZKL_WRITE, ZKL_LATCH; -1: the lease semaphore */
    const char *dir, *token;
    int adopt; /* 1: the node is adopted; 0: deleted, and one made under a fresh prefix */
} lock_case;

static const lock_case LOCKS[] = {
    {"mutex", ZKL_MUTEX, "/l/m", "-lock-", 1},
    {"read", ZKL_READ, "/l/rw", "__READ__", 1},
    {"write", ZKL_WRITE, "/l/rw", "__WRIT__", 1},
    {"latch", ZKL_LATCH, "/l/latch", "latch-", 1},
    {"semaphore lock", -1, "/l/s/locks", "-lock-", 1},
    /* semaphore.c: a lease whose create's outcome is unknown is found by its prefix and deleted,
     * then the lease is made under a fresh prefix (so that cleanup can never take it) */
    {"semaphore lease", -1, "/l/s/leases", "lease-", 0},
};

/* nodes of this session whose path starts with prefix */
static int live_with(const char *prefix) {
    int n = 0;
    for (int i = 0; i < fz_live(); i++)
        if (strncmp(fz_live_at(i), prefix, strlen(prefix)) == 0) n++;
    return n;
}

static void lock_create(const lock_case *lc, int code) {
    int failures_before = h_failures;
    zkl_client *c = h_client();
    fz_tree_add("/l", 0);
    fz_tree_add(lc->dir, 0);
    if (lc->recipe < 0) {
        fz_tree_add("/l/s", 0);
        fz_tree_add("/l/s/locks", 0);
        fz_tree_add("/l/s/leases", 0);
    }
    uint64_t id = 0;
    if (lc->recipe < 0)
        CHECK_INT(zkl_semaphore_acquire(c, "/l/s", 2, 1, -1, 0, &id), ZKL_OK);
    else
        CHECK_INT(zkl_lock_acquire(c, (zkl_recipe)lc->recipe, lc->dir, -1, 0, &id), ZKL_OK);
    /* serve everything until the create of the node under test goes out */
    char prefix[ZKL_NODE_MAX] = "";
    for (int step = 0; step < 50 && !prefix[0]; step++) {
        zkl_client_process(c);
        fz_req *r;
        while ((r = fz_next()) != NULL) {
            if (r->kind == FZ_CREATE && strncmp(r->path, lc->dir, strlen(lc->dir)) == 0 &&
                r->path[strlen(lc->dir)] == '/' && strstr(r->path, lc->token)) {
                snprintf(prefix, sizeof prefix, "%s", r->path);
                CHECK_INT(fz_apply_then_fail(r, code), 0);
                break;
            }
            fz_serve(r);
        }
        h_pump(c);
    }
    CHECK(prefix[0] != '\0');
    /* every other request in flight fails too, and the connection is given up */
    for (int i = 0; i < fz_nreqs(); i++)
        if (fz_req_at(i)->status == FZ_PENDING) fz_reply(fz_req_at(i), code);
    while (fz_next())
        ;
    fz_disconnect();
    h_pump(c);
    CHECK_INT(live_with(prefix), 1); /* the server made it */
    fz_connect();
    int acquired = 0;
    for (int step = 0; step < 100 && !acquired; step++) {
        h_pump(c);
        fz_serve_all();
        h_pump(c);
        zkl_event ev;
        while (zkl_client_next_event(c, &ev) == 1) {
            if (ev.id == id && ev.type == ZKL_EV_FAILED)
                h_fail(__FILE__, __LINE__, "%s: the acquisition failed: %s", lc->name,
                       zkl_err_name(ev.status));
            if (ev.id == id && ev.type == ZKL_EV_ACQUIRED) acquired = 1;
        }
    }
    CHECK(acquired);
    /* adopted by its protected prefix: one node, never a second (or, for a lease, the ghost
     * deleted and exactly one lease of this session) */
    CHECK_INT(live_with(prefix), lc->adopt);
    CHECK_INT(live_with(lc->dir), 1);
    int creates = 0;
    for (int i = 0; i < fz_nreqs(); i++)
        if (fz_req_at(i)->kind == FZ_CREATE && strcmp(fz_req_at(i)->path, prefix) == 0) creates++;
    CHECK_INT(creates, 1);
    if (h_failures > failures_before) fprintf(stderr, "# (%s, %s)\n", lc->name, zkl_err_name(code));
    h_free(c);
}

static void lock_creates_applied_answer_lost(void) {
    for (size_t i = 0; i < sizeof LOCKS / sizeof LOCKS[0]; i++)
        for (int k = 0; k < NCODES; k++)
            lock_create(&LOCKS[i], CODES[k]);
}

H_DEFINE_GROUP(g_unknown, {"table", table}, {"txn_applied_answer_lost", txn_applied_answer_lost},
               {"txn_session_close_and_refusal", txn_session_close_and_refusal},
               {"plain_applied_answer_lost", plain_applied_answer_lost},
               {"lock_creates_applied_answer_lost", lock_creates_applied_answer_lost});
