/* test_plain.c - plain znode operations beyond one request: a create with its parents
 * (pipelined container creates; made again when the server reaps one before the node is in;
 * the first refusal reported), timeouts on the fake clock, bad arguments. */
#include <string.h>

#include "harness.h"

static zkl_op_args create_args(const char *path, int flags, int timeout_ms) {
    zkl_op_args a = {ZKL_OP_CREATE, path, "v", 1, flags, -1, 0, timeout_ms, 0};
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
    zkl_op_args g = {ZKL_OP_GET, "/t", NULL, 0, 0, -1, 0, 500, 0};
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
    EXPECT_NO_REQ();
    h_free(c);
}

H_DEFINE_GROUP(g_plain, {"create_with_parents", create_with_parents},
               {"create_parents_reaped", create_parents_reaped},
               {"create_parent_refused", create_parent_refused}, {"timeouts", timeouts},
               {"bad_args", bad_args});
