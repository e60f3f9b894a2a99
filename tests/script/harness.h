/* harness.h - checks, TAP output and client helpers shared by the scripted recipe tests. */
#ifndef HARNESS_H
#define HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fakezk.h"
#include "zklock.h"

extern int h_checks, h_failures;

void h_fail(const char *file, int line, const char *fmt, ...);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        h_checks++;                                                                                \
        if (!(cond)) h_fail(__FILE__, __LINE__, "check failed: %s", #cond);                        \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        h_checks++;                                                                                \
        if (a_ != b_) h_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);        \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        h_checks++;                                                                                \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            h_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",   \
                   b_ ? b_ : "(null)");                                                            \
    } while (0)

/* A test: a name and a function. Groups are arrays of these. */
typedef struct h_test {
    const char *name;
    void (*fn)(void);
} h_test;

#define H_GROUP(name)                                                                              \
    extern const h_test name[];                                                                    \
    extern const int name##_n
#define H_DEFINE_GROUP(name, ...)                                                                  \
    const h_test name[] = {__VA_ARGS__};                                                           \
    const int name##_n = (int)(sizeof name / sizeof name[0])

/* ------------------------------------------------------------------ clients */

/* A fresh fake and a client on it (identity "me", session timeout 10 s), connected: the
 * SESSION CONNECTED event is consumed. alloc may be NULL. */
zkl_client *h_client_alloc(const zkl_allocator *alloc);
zkl_client *h_client(void);
/* Run process() until nothing is queued in the fake. */
void h_pump(zkl_client *c);
/* Advance the fake clock by ms, in steps, processing after each (never a whole session
 * timeout without a process(), which the core would take as an expiry). */
void h_advance(zkl_client *c, int64_t ms);
/* The same session comes back after a connection loss (fz_connect): the core sends a heartbeat
 * (exists "/", no watch) at once and stays SUSPENDED until the server answers it; this checks
 * that request (the next one the test has not taken) and answers it. Pumped. */
void h_reconnect_at(const char *file, int line, zkl_client *c);
#define h_reconnect(c) h_reconnect_at(__FILE__, __LINE__, (c))
/* Free the client; the link is dropped first when requests are still unanswered (so that
 * close does not wait for their replies). */
void h_free(zkl_client *c);

/* ------------------------------------------------------------------ requests */

/* The next request the test has not looked at: must be of `kind` with path starting with
 * `prefix` (NULL: any). Returns it; otherwise a failure and a placeholder that is already
 * answered (every fz_* answer on it returns -1), so the test goes on failing instead of crashing.
 */
fz_req *h_expect_req(const char *file, int line, int kind, const char *prefix);
#define EXPECT_REQ(kind, prefix) h_expect_req(__FILE__, __LINE__, (kind), (prefix))
/* Nothing more was sent. */
void h_expect_no_req(const char *file, int line);
#define EXPECT_NO_REQ() h_expect_no_req(__FILE__, __LINE__)

/* The path of a protected create: <dir>/_c_<uuid4>-<token>, exactly. */
int h_is_protected(const char *path, const char *dir, const char *token);

/* Name (last component) the server gives a sequential create: fz_base(path) + %010d. */
const char *h_seqname(const fz_req *create, int seq);
/* A node of another client: "_c_<fixed uuid n>-<token><%010d seq>" (rotating static buffers). */
const char *h_other(int n, const char *token, int seq);
/* dir + "/" + name (rotating static buffers) */
const char *h_join(const char *dir, const char *name);

/* ------------------------------------------------------------------ events */

void h_expect_ev(const char *file, int line, zkl_client *c, int type, uint64_t id, int status);
#define EXPECT_EV(c, type, id, status) h_expect_ev(__FILE__, __LINE__, (c), (type), (id), (status))
void h_expect_no_ev(const char *file, int line, zkl_client *c);
#define EXPECT_NO_EV(c) h_expect_no_ev(__FILE__, __LINE__, (c))
/* The client's holder `held` (its create: `created`) releases and its own waiter `next`, which
 * watches the held node, takes over: the server notifies the watch before it answers the
 * delete. Checks the delete, then ACQUIRED for next and RELEASED for held, in that order. */
void h_own_handoff(const char *file, int line, zkl_client *c, uint64_t held, const fz_req *created,
                   uint64_t next);
#define OWN_HANDOFF(c, held, created, next)                                                        \
    h_own_handoff(__FILE__, __LINE__, (c), (held), (created), (next))

/* ------------------------------------------------------------------ allocator */

typedef struct h_alloc {
    zkl_allocator a;
    long count;      /* allocations so far */
    long fail_at;    /* fail the allocation with this number (1-based); 0 never */
    long failed;     /* allocations refused */
    long live;       /* blocks not freed */
    long long bytes; /* bytes not freed */
} h_alloc;

void h_alloc_init(h_alloc *h, long fail_at);

#endif
