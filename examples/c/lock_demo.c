/* lock_demo.c - zklock's C API in one program: connect, take a mutex with a timeout, print its
 * fencing token, release it, close.
 *
 *   cc lock_demo.c $(pkg-config --cflags --libs zklock) -o lock_demo
 *   ./lock_demo [HOSTS [LOCK_PATH]]
 *
 * HOSTS defaults to $ZK_HOSTS, else 127.0.0.1:2181; LOCK_PATH to /zklock-demo/c-mutex.
 * Prints one line per step ("connected ...", "acquired ... token N", "try-once ...",
 * "released ...", "closed") and exits 0, or prints why on stderr and exits 1 (2: usage).
 *
 * The client never waits on its own: everything happens inside zkl_client_wait() (or, in a
 * program with an event loop, zkl_client_process() when zkl_client_fd() is readable or
 * zkl_client_timeout_ms() has passed), and results arrive as events read with
 * zkl_client_next_event(). This program has no loop of its own, so it pumps with
 * zkl_client_wait() until the event it is waiting for arrives.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zklock.h>

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Events nobody waits for are only reported: session changes, lock states, warnings. */
static void report(const zkl_event *ev) {
    static const char *const states[] = {"?",         "CONNECTING", "CONNECTED",
                                         "SUSPENDED", "EXPIRED",    "CLOSED"};
    static const char *const lock_states[] = {"?", "SUSPENDED", "RECONNECTED", "LOST"};
    if (ev->type == ZKL_EV_SESSION && ev->status >= 1 && ev->status <= 5)
        printf("session %s\n", states[ev->status]);
    else if (ev->type == ZKL_EV_LOCK_STATE && ev->status >= 1 && ev->status <= 3)
        printf("lock %" PRIu64 " %s\n", ev->id, lock_states[ev->status]);
    else if (ev->type == ZKL_EV_WARNING)
        printf("warning: %s\n", zkl_err_name(ev->status));
}

/* Pump the client until an event of `type` arrives for `id` (id 0 with ZKL_EV_SESSION: until the
 * session reaches state `status`), or `ms` pass. Returns 1 with *out filled, 0 on timeout, or a
 * negative zklock error. Final events of `id` other than `type` (FAILED instead of ACQUIRED)
 * also end the wait. */
static int await(zkl_client *c, uint64_t id, int type, int status, int ms, zkl_event *out) {
    int64_t end = now_ms() + ms;
    for (;;) {
        zkl_event ev;
        while (zkl_client_next_event(c, &ev)) {
            int final = ev.type == ZKL_EV_ACQUIRED || ev.type == ZKL_EV_FAILED ||
                        ev.type == ZKL_EV_RELEASED || ev.type == ZKL_EV_OP_DONE;
            if (id == 0 && ev.type == ZKL_EV_SESSION && ev.status == status) {
                *out = ev;
                return 1;
            }
            if (id != 0 && ev.id == id && (ev.type == type || final)) {
                *out = ev;
                return 1;
            }
            report(&ev);
        }
        int64_t left = end - now_ms();
        if (left <= 0) return 0;
        /* blocks until the client's fd is readable or its own deadline, at most `left` ms */
        int rc = zkl_client_wait(c, left > 1000 ? 1000 : (int)left);
        if (rc < 0) return rc;
    }
}

static int fail(const char *what, int err) {
    fprintf(stderr, "lock_demo: %s: %s (%s)\n", what, zkl_strerror(err), zkl_err_name(err));
    return 1;
}

int main(int argc, char **argv) {
    const char *hosts = getenv("ZK_HOSTS");
    const char *path = "/zklock-demo/c-mutex";
    if (argc > 3 || (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))) {
        fprintf(stderr, "usage: %s [HOSTS [LOCK_PATH]]\n", argv[0]);
        return 2;
    }
    if (argc > 1) hosts = argv[1];
    if (argc > 2) path = argv[2];
    if (!hosts || !*hosts) hosts = "127.0.0.1:2181";
    const char *bad = zkl_path_error(path, strlen(path));
    if (bad) {
        fprintf(stderr, "lock_demo: lock path %s %s\n", path, bad);
        return 2;
    }

    zkl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.hosts = hosts;
    cfg.session_timeout_ms = 10000;
    cfg.identity = "lock_demo";
    cfg.identity_len = strlen(cfg.identity);
    cfg.log_level = ZKL_LOG_NONE;

    zkl_client *c = NULL;
    int rc = zkl_client_new(&cfg, &c); /* returns at once: the connection is made in the pumps */
    if (rc != ZKL_OK) return fail("zkl_client_new", rc);

    int status = 1;
    zkl_event ev;
    zkl_lock_info info;
    uint64_t id = 0, other = 0;

    /* Not required (an acquire started now is sent once connected), but says where we are. */
    rc = await(c, 0, ZKL_EV_SESSION, ZKL_STATE_CONNECTED, 10000, &ev);
    if (rc <= 0) {
        fail("connecting", rc < 0 ? rc : ZKL_ETIMEDOUT);
        goto out;
    }
    printf("connected to %s, session 0x%" PRIx64 "\n", hosts,
           (uint64_t)zkl_client_session(c, NULL));

    /* Acquire with a 5 s timeout: one ACQUIRED or FAILED event follows. */
    rc = zkl_lock_acquire(c, ZKL_MUTEX, path, 5000, 0, &id);
    if (rc != ZKL_OK) {
        fail("zkl_lock_acquire", rc);
        goto out;
    }
    rc = await(c, id, ZKL_EV_ACQUIRED, 0, 10000, &ev);
    if (rc <= 0) {
        fail("acquiring", rc < 0 ? rc : ZKL_ETIMEDOUT);
        goto out;
    }
    if (ev.type != ZKL_EV_ACQUIRED) {
        fail("acquiring", ev.status); /* e.g. ETIMEDOUT: someone else held it for 5 s */
        goto out;
    }
    rc = zkl_lock_info_get(c, id, &info);
    if (rc != ZKL_OK) {
        fail("zkl_lock_info_get", rc);
        goto out;
    }
    /* The fencing token (the node's czxid) grows with every acquisition of this lock: pass it
     * with every write the lock protects, and have the store reject older tokens. */
    printf("acquired %s token %" PRId64 " node %s\n", path, info.token, info.node);

    /* A second acquisition, even from this client, queues like another process: with timeout 0
     * it tries once and fails with ETIMEDOUT while we hold the lock. */
    rc = zkl_lock_acquire(c, ZKL_MUTEX, path, 0, 0, &other);
    if (rc != ZKL_OK) {
        fail("zkl_lock_acquire (try once)", rc);
        goto out;
    }
    rc = await(c, other, ZKL_EV_FAILED, 0, 10000, &ev);
    if (rc <= 0 || ev.type != ZKL_EV_FAILED || ev.status != ZKL_ETIMEDOUT) {
        fprintf(stderr, "lock_demo: try-once while held: expected FAILED/ETIMEDOUT, got %s\n",
                rc <= 0                      ? "nothing"
                : ev.type == ZKL_EV_ACQUIRED ? "ACQUIRED"
                                             : zkl_err_name(ev.status));
        goto out;
    }
    printf("try-once while held: %s\n", zkl_err_name(ev.status));

    /* Release: RELEASED follows once the node is deleted. */
    rc = zkl_lock_release(c, id);
    if (rc != ZKL_OK) {
        fail("zkl_lock_release", rc); /* ZKL_ELOST: the session ended while we held it */
        goto out;
    }
    rc = await(c, id, ZKL_EV_RELEASED, 0, 10000, &ev);
    if (rc <= 0 || ev.status != ZKL_OK) {
        fail("releasing", rc < 0 ? rc : rc == 0 ? ZKL_ETIMEDOUT : ev.status);
        goto out;
    }
    printf("released %s\n", path);
    status = 0;

out:
    /* Close: may block briefly (it tells the server the session is over, so our nodes vanish at
     * once). Events queued by the close (the last is SESSION CLOSED) can still be read. */
    zkl_client_close(c);
    while (zkl_client_next_event(c, &ev)) {
        if (ev.type == ZKL_EV_SESSION && ev.status == ZKL_STATE_CLOSED) printf("closed\n");
    }
    zkl_client_free(c);
    return status;
}
