/* test_plain.c - plain znode operations beyond one request: a create with its parents
 * (pipelined container creates; made again when the server reaps one before the node is in;
 * the first refusal reported), timeouts on the fake clock, bad arguments. */
#include <string.h>

#include "harness.h"

static zkl_op_args create_args(const char *path, int flags, int timeout_ms) {
    zkl_op_args a = {ZKL_OP_CREATE, path, "v", 1, flags, -1, 0, timeout_ms, 0, 0};
    return a;
}

/* /a/b/c with parents: /a and /a/b as containers, then the node, all before any reply */
static void create_with_parents(void) {
    zkl_client *c = h_client();
    zkl_op_args a = create_args("/a/b/c", ZKL_CREATE_PARENTS, 0);
    uint64_t id;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    fz_req *p1 = EXPECT_REQ(FZ_CREATE, "/a");
    fz_req *p2 = EXPECT_REQ(FZ_CREATE, "/a/b");
    fz_req *n = EXPECT_REQ(FZ_CREATE, "/a/b/c");
    EXPECT_NO_REQ();
    CHECK_STR(p1->path, "/a");
    CHECK_INT(p1->mode, ZOO_CONTAINER);
    CHECK_INT(p2->mode, ZOO_CONTAINER);
    CHECK_INT(n->mode, 0);
    fz_serve_all();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    CHECK(fz_tree_has("/a/b/c"));
    h_free(c);
}

/* The server reaps /a/b between its create and the node's: the node's create meets ZNONODE and
 * the parents are made again; a second reaping too. Gives up after 10 rounds. */
static void create_parents_reaped(void) {
    zkl_client *c = h_client();
    zkl_op_args a = create_args("/a/b/c", ZKL_CREATE_PARENTS, 0);
    uint64_t id;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    for (int round = 0; round < 2; round++) {
        fz_req *p1 = EXPECT_REQ(FZ_CREATE, "/a");
        fz_req *p2 = EXPECT_REQ(FZ_CREATE, "/a/b");
        fz_req *n = EXPECT_REQ(FZ_CREATE, "/a/b/c");
        EXPECT_NO_REQ();
        fz_reply(p1, round ? ZNODEEXISTS : ZOK);
        fz_reply(p2, ZOK);
        fz_reply(n, ZNONODE); /* reaped in between */
        h_pump(c);
        EXPECT_NO_EV(c);
    }
    fz_serve_all();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    while (fz_next()) /* the requests served above */
        ;
    /* a parent that never stays: ZNONODE after 10 rounds */
    a = create_args("/x/y", ZKL_CREATE_PARENTS, 0);
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    int rounds = 0;
    for (; rounds < 20; rounds++) {
        if (!fz_untaken()) break;
        fz_req *p = EXPECT_REQ(FZ_CREATE, "/x");
        fz_req *n = EXPECT_REQ(FZ_CREATE, "/x/y");
        fz_reply(p, ZOK);
        fz_reply(n, ZNONODE);
        h_pump(c);
    }
    CHECK_INT(rounds, 10);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZNONODE);
    h_free(c);
}

/* An ancestor refused (ZNOAUTH): the create fails with that cause, not with ZNONODE */
static void create_parent_refused(void) {
    zkl_client *c = h_client();
    zkl_op_args a = create_args("/a/b", ZKL_CREATE_PARENTS, 0);
    uint64_t id;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    fz_req *p = EXPECT_REQ(FZ_CREATE, "/a");
    fz_req *n = EXPECT_REQ(FZ_CREATE, "/a/b");
    fz_reply(p, ZNOAUTH);
    fz_reply(n, ZNONODE);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZNOAUTH);
    EXPECT_NO_REQ();
    h_free(c);
}

/* timeout_ms: the call ends with ETIMEDOUT at its deadline, on the fake clock, whether its
 * request is in flight or waiting for the link; a late reply changes nothing */
static void timeouts(void) {
    zkl_client *c = h_client();
    zkl_op_args g = {ZKL_OP_GET, "/t", NULL, 0, 0, -1, 0, 500, 0, 0};
    uint64_t id;
    CHECK_INT(zkl_op_start(c, &g, &id), ZKL_OK);
    fz_req *r = EXPECT_REQ(FZ_GET, "/t");
    h_advance(c, 490);
    EXPECT_NO_EV(c);
    h_advance(c, 20);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZKL_ETIMEDOUT);
    fz_data_ok(r, "late", 1);
    h_pump(c);
    EXPECT_NO_EV(c);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_op_start(c, &g, &id), ZKL_OK); /* waits for the link */
    h_advance(c, 600);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZKL_ETIMEDOUT);
    EXPECT_NO_EV(c);
    h_free(c);
}

/* a timed-out read whose request the connection loss failed is not sent again (it was, after
 * the reconnection: a request for nobody, a watched one's answer arming a watcher for nobody) */
static void timeout_then_loss(void) {
    zkl_client *c = h_client();
    zkl_op_args g = {ZKL_OP_GET, "/t", NULL, 0, 0, -1, 0, 500, 0, 0};
    zkl_op_args w = {ZKL_OP_CHILDREN, "/w", NULL, 0, 0, -1, 0, 500, 1, 0};
    uint64_t id, wid;
    CHECK_INT(zkl_op_start(c, &g, &id), ZKL_OK);
    CHECK_INT(zkl_op_start(c, &w, &wid), ZKL_OK);
    EXPECT_REQ(FZ_GET, "/t");
    EXPECT_REQ(FZ_CHILDREN, "/w");
    h_advance(c, 510);
    EXPECT_EV(c, ZKL_EV_OP_DONE, wid, ZKL_ETIMEDOUT); /* one deadline: this order */
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZKL_ETIMEDOUT);
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    h_reconnect(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *r;
    while ((r = fz_next()) != NULL) { /* the old code's second sends: answer them */
        CHECK(0);
        if (r->kind == FZ_GET)
            fz_data_ok(r, "late", 1);
        else
            fz_children_v(r, NULL);
        h_pump(c);
    }
    EXPECT_NO_EV(c);
    CHECK_INT(fz_armed("/w"), 0);
    h_free(c);
}

static void bad_args(void) {
    zkl_client *c = h_client();
    uint64_t id;
    zkl_op_args a = create_args("/a", 16, 0);
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL); /* unknown flag */
    a = create_args("/a", 0, -1);
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL); /* negative timeout */
    a = create_args("/a", 0, 0);
    a.acl = 7;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL); /* unknown ACL id */
    a = create_args("/a", ZKL_CREATE_EPHEMERAL, 0);
    a.ttl_ms = 1000;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL); /* a TTL on an ephemeral node */
    a = create_args("/a", ZKL_CREATE_CONTAINER, 0);
    a.ttl_ms = 1000;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL); /* ... or on a container */
    a = create_args("/a", 0, 0);
    a.ttl_ms = -1;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_EINVAL); /* a negative TTL */
    zkl_op_args g = {ZKL_OP_GET, "/a", NULL, 0, 0, -1, 0, 0, 0, 1000};
    CHECK_INT(zkl_op_start(c, &g, &id), ZKL_EINVAL); /* a TTL on a read */
    EXPECT_NO_REQ();
    h_free(c);
}

/* ttl_ms > 0: the create goes out as a TTL create, sequential or not */
static void create_ttl(void) {
    zkl_client *c = h_client();
    uint64_t id, id2;
    zkl_op_args a = create_args("/t", 0, 0);
    a.ttl_ms = 1500;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    a = create_args("/s-", ZKL_CREATE_SEQUENTIAL, 0);
    a.ttl_ms = 1500;
    CHECK_INT(zkl_op_start(c, &a, &id2), ZKL_OK);
    fz_req *r = EXPECT_REQ(FZ_CREATE, "/t");
    CHECK_INT(r->mode, ZOO_PERSISTENT_WITH_TTL);
    r = EXPECT_REQ(FZ_CREATE, "/s-");
    CHECK_INT(r->mode, ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL);
    EXPECT_NO_REQ();
    fz_serve_all();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id2, ZOK);
    h_free(c);
}

/* Transactions (txn.c): sent once connected, one multi request; a connection lost while it is in
 * flight ends it with ZCONNECTIONLOSS and it is never sent again (a write: its outcome is
 * unknown); a session lost before it was sent ends it with ESESSION; timeouts on the fake clock. */
static void txn_lifecycle(void) {
    zkl_client *c = h_client();
    zkl_txn_op ops[2] = {{ZKL_OP_CHECK, "/lock/n", NULL, 0, 0, -1, 0},
                         {ZKL_OP_SET, "/data", "v", 1, 0, -1, 0}};
    uint64_t id;
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_txn_start(c, ops, 2, 0, &id), ZKL_OK);
    EXPECT_NO_REQ(); /* waits for the link */
    h_reconnect(c);  /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    fz_req *r = EXPECT_REQ(FZ_MULTI, "");
    EXPECT_NO_REQ();
    fz_reply(r, ZOK);
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZOK);
    zkl_txn_result res[2];
    CHECK_INT(zkl_txn_result_get(c, id, res, 2), 2);
    CHECK_INT(res[0].rc, ZOK);
    CHECK_INT(zkl_txn_result_get(c, id + 1, res, 2), ZKL_ENOTFOUND);

    /* in flight when the connection drops: ZCONNECTIONLOSS, not sent again after reconnecting */
    CHECK_INT(zkl_txn_start(c, ops, 2, 0, &id), ZKL_OK);
    EXPECT_REQ(FZ_MULTI, "");
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZCONNECTIONLOSS); /* its reply first, then the state */
    CHECK_INT(zkl_txn_result_get(c, id, res, 2), 2);
    CHECK_INT(res[1].rc, ZCONNECTIONLOSS); /* no answer: every op carries the status */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    h_reconnect(c); /* the same session: RECONNECTED once its heartbeat is answered */
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_CONNECTED);
    EXPECT_NO_REQ();

    /* not sent yet when the session expires: ESESSION */
    fz_disconnect();
    h_pump(c);
    EXPECT_EV(c, ZKL_EV_SESSION, 0, ZKL_STATE_SUSPENDED);
    CHECK_INT(zkl_txn_start(c, ops, 2, 0, &id), ZKL_OK);
    fz_expire();
    h_pump(c);
    int saw = 0;
    zkl_event ev;
    while (zkl_client_next_event(c, &ev))
        if (ev.type == ZKL_EV_OP_DONE && ev.id == id) saw = ev.status;
    CHECK_INT(saw, ZKL_ESESSION);
    h_free(c);
}

static void txn_timeout_and_bad_args(void) {
    zkl_client *c = h_client();
    zkl_txn_op op = {ZKL_OP_CREATE, "/a", "v", 1, 0, -1, 0};
    uint64_t id;
    CHECK_INT(zkl_txn_start(c, &op, 1, 500, &id), ZKL_OK);
    EXPECT_REQ(FZ_MULTI, "");
    h_advance(c, 400);
    EXPECT_NO_EV(c);
    h_advance(c, 200);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZKL_ETIMEDOUT);
    CHECK_INT(zkl_txn_start(c, NULL, 1, 0, &id), ZKL_EINVAL);
    CHECK_INT(zkl_txn_start(c, &op, 0, 0, &id), ZKL_EINVAL);
    CHECK_INT(zkl_txn_start(c, &op, ZKL_TXN_MAX + 1, 0, &id), ZKL_EINVAL);
    CHECK_INT(zkl_txn_start(c, &op, 1, -1, &id), ZKL_EINVAL);
    zkl_txn_op bad[] = {
        {ZKL_OP_CREATE, "/a", NULL, 0, ZKL_CREATE_PARENTS, -1, 0},  /* no parents in a txn */
        {ZKL_OP_CHECK, "/a", NULL, 0, ZKL_CREATE_EPHEMERAL, -1, 0}, /* flags on a check */
        {ZKL_OP_GET, "/a", NULL, 0, 0, -1, 0},                      /* a read */
        {ZKL_OP_SET, "a", "v", 1, 0, -1, 0},                        /* relative path */
        {ZKL_OP_SET, NULL, "v", 1, 0, -1, 0},                       /* no path */
        {ZKL_OP_SET, "/a", NULL, 3, 0, -1, 0},                      /* len without data */
        {ZKL_OP_CREATE, "/a", "v", 1, 0, -1, 9},                    /* unknown ACL id */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_INT(zkl_txn_start(c, &bad[i], 1, 0, &id), ZKL_EINVAL);
    EXPECT_NO_REQ();
    h_free(c);
}

/* The server made the node, but the copy of its name fails (out of memory): the create is
 * reported done (ZKL_OK) without the name, never as a failure a caller would retry. */
static void create_ok_name_copy_fails(void) {
    h_alloc A;
    h_alloc_init(&A, 0);
    zkl_client *c = h_client_alloc(&A.a);
    zkl_op_args a = {ZKL_OP_CREATE, "/n", "x", 1, ZKL_CREATE_SEQUENTIAL, -1, 0, 0, 0, 0};
    uint64_t id;
    CHECK_INT(zkl_op_start(c, &a, &id), ZKL_OK);
    fz_req *r = EXPECT_REQ(FZ_CREATE, "/n");
    fz_create_ok(r, 7, 0x77);
    A.fail_at = A.count + 1; /* the next allocation: the copy of the created name */
    h_pump(c);
    CHECK_INT(A.failed, 1);
    EXPECT_EV(c, ZKL_EV_OP_DONE, id, ZKL_OK);
    zkl_op_result res;
    CHECK_INT(zkl_op_result_get(c, id, &res), ZKL_OK);
    CHECK_INT(res.rc, ZKL_OK);
    CHECK(res.data == NULL);
    CHECK_INT(res.czxid, 0x77);
    h_free(c);
}

H_DEFINE_GROUP(g_plain, {"create_with_parents", create_with_parents},
               {"create_parents_reaped", create_parents_reaped},
               {"create_parent_refused", create_parent_refused}, {"timeouts", timeouts},
               {"timeout_then_loss", timeout_then_loss},
               {"create_ok_name_copy_fails", create_ok_name_copy_fails}, {"bad_args", bad_args},
               {"create_ttl", create_ttl}, {"txn_lifecycle", txn_lifecycle},
               {"txn_timeout_and_bad_args", txn_timeout_and_bad_args});
