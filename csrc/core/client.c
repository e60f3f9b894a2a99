/* client.c - the session layer: the ZooKeeper session behind one stable fd, I/O, session states,
 * deadlines, keepalive, the client's lifecycle, credentials and ACLs. It knows no recipe: ops are
 * called through their kind tables (op.c keeps the table of live ops, events.c the event queue,
 * mem.c the allocator; the kinds live in queue.c, semaphore.c, multi.c, plain.c and txn.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* ---------------------------------------------------------------- memory */

static void acl_free(zkl_client *c, struct ACL_vector *v);

/* ---------------------------------------------------------------- current client */

/* Completions run only inside zookeeper_process/interest/close, which only this file calls; the
 * client being driven is recorded (op.c, zkl__current) so completions can find it from their
 * integer token. */
#define WITH_CLIENT(c, stmt)                                                                       \
    do {                                                                                           \
        zkl_client *saved_ = zkl__set_current(c);                                                  \
        (c)->in_callback++;                                                                        \
        stmt;                                                                                      \
        (c)->in_callback--;                                                                        \
        zkl__set_current(saved_);                                                                  \
    } while (0)

/* ---------------------------------------------------------------- logging */

static void zk_log(const char *msg) {
    zkl_client *c = zkl__current();
    if (c && c->log_fn) c->log_fn(c->log_ud, msg);
}

static ZooLogLevel zk_level(int level) {
    switch (level) {
    case ZKL_LOG_DEBUG:
        return ZOO_LOG_LEVEL_DEBUG;
    case ZKL_LOG_INFO:
        return ZOO_LOG_LEVEL_INFO;
    case ZKL_LOG_WARN:
        return ZOO_LOG_LEVEL_WARN;
    default:
        return ZOO_LOG_LEVEL_ERROR;
    }
}

/* The ZooKeeper client's events for what epoll reported on its socket, limited to the interest
 * it registered. An error or hang-up counts as both, so zookeeper_process meets it and closes. */
static int zk_events_of(const zkl_client *c, uint32_t got) {
    int events = 0;
    if (got & (EPOLLIN | EPOLLERR | EPOLLHUP)) events |= ZOOKEEPER_READ;
    if (got & (EPOLLOUT | EPOLLERR | EPOLLHUP)) events |= ZOOKEEPER_WRITE;
    return events & ((c->zkfd_events & EPOLLIN ? ZOOKEEPER_READ : 0) |
                     (c->zkfd_events & EPOLLOUT ? ZOOKEEPER_WRITE : 0));
}

/* ---------------------------------------------------------------- session */

/* The ZooKeeper client's own view. It can drop a connection without any session event: when a
 * request's immediate send fails it closes the socket and marks the handle not connected. So the
 * session events alone are not enough; its state is consulted as well. */
static int zk_link_up(const zkl_client *c) {
    int s = c->zk->state(c->zh);
    return s == ZOO_CONNECTED_STATE || s == ZOO_READONLY_STATE;
}

int zkl__startable(const zkl_client *c) {
    return c->closed ? ZKL_ECLOSED : c->state == ZKL_STATE_AUTH_FAILED ? ZAUTHFAILED : 0;
}

int zkl__connected(const zkl_client *c) {
    return c->zh && c->state == ZKL_STATE_CONNECTED && zk_link_up(c);
}

static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    zkl_client *c = ctx;
    (void)path;
    if (type != ZOO_SESSION_EVENT || !c || zh != c->zh) return;
    if (state == ZOO_CONNECTED_STATE || state == ZOO_READONLY_STATE) {
        c->zk_connected = 1;
        c->resume_seq = c->issue_seq + 1; /* only a request sent from now on proves anything */
        c->link_ups++;
    } else if (state == ZOO_EXPIRED_SESSION_STATE)
        c->expired_flag = 1;
    else if (state == ZOO_AUTH_FAILED_STATE)
        c->expired_flag = c->auth_failed = 1; /* terminal: see session_expired */
    else
        c->zk_connected = 0;
}

static int open_handle(zkl_client *c) {
    zhandle_t *zh;
    WITH_CLIENT(
        c, zh = c->zk->init(c->hosts, session_watcher, c->session_timeout_ms, NULL, c, 0, zk_log));
    if (!zh) {
        c->reinit_at = zkl__now(c) + 1000;
        return ZKL_ESYSTEM;
    }
    c->zh = zh;
    c->opened_at = zkl__now(c);
    c->reinit_at = 0;
    c->zk_connected = 0;
    c->expired_flag = 0;
    c->answered_at = c->connect_floor = 0;
    c->zk->set_servers_resolution_delay(zh, 60 * 1000);
    for (zkl_auth *a = c->auths; a; a = a->next)
        c->zk->add_auth(zh, a->scheme, a->cred, (int)a->len, NULL, NULL);
    return 0;
}

static void close_handle(zkl_client *c) {
    zhandle_t *zh = c->zh;
    if (!zh) return;
    /* Completions still pending run now with ZCLOSING; they see c->zh == NULL. */
    c->zh = NULL;
    c->zk_connected = 0;
    WITH_CLIENT(c, c->zk->close(zh));
    zkl__inflight_reset(c); /* every completion the handle owed has run */
    if (c->zkfd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->zkfd, NULL);
        c->zkfd = -1;
    }
    c->zk_deadline = 0;
}

static void op_suspended(zkl_client *c, zkl_op *op, int s) {
    if (op->kind->suspended) op->kind->suspended(c, op, s);
}

static void op_kick(zkl_client *c, zkl_op *op, int unused) {
    (void)unused;
    if (op->kind->kick) op->kind->kick(c, op);
    zkl__op_maybe_free(c, op);
}

static void op_session_lost(zkl_client *c, zkl_op *op, int status) {
    if (op->kind->session_lost) op->kind->session_lost(c, op, status);
    zkl__op_maybe_free(c, op);
}

/* How long to wait before opening the next session. A session that lived a session timeout or
 * longer was healthy, and so is the first one to die young: the next opens at once. Sessions that
 * keep dying young (a server that expires them, a misconfiguration) are re-opened after a delay
 * that doubles each time, from REOPEN_MIN_MS up to REOPEN_MAX_MS: no path of the client can open
 * sessions in a storm. */
#define REOPEN_MIN_MS 100
#define REOPEN_MAX_MS 10000

static int64_t reopen_delay(zkl_client *c, int64_t now) {
    int64_t lived = c->opened_at ? now - c->opened_at : 0;
    if (lived >= c->session_timeout_ms) {
        c->young_deaths = 0;
        return 0;
    }
    if (++c->young_deaths == 1) return 0;
    int64_t d = REOPEN_MIN_MS;
    for (int i = 2; i < c->young_deaths && d < REOPEN_MAX_MS; i++)
        d *= 2;
    return d < REOPEN_MAX_MS ? d : REOPEN_MAX_MS;
}

/* The session is gone (server said EXPIRED, or the connection was lost for longer than the session
 * timeout): every op learns it, and a new session is started behind the same fd, at once or after
 * a paced delay. An authentication failure is terminal: it is reported once (AUTH_FAILED), every
 * pending operation fails with ZAUTHFAILED and no session is opened again. */
static void session_expired(zkl_client *c) {
    int auth = c->auth_failed;
    c->expired_flag = 0;
    close_handle(c);
    zkl__ops_each(c, op_session_lost, auth ? ZAUTHFAILED : ZKL_ESESSION);
    zkl__listings_drop(c); /* every token in them is stale now */
    c->session_id = 0;
    c->suspended_at = 0;
    if (auth) {
        c->state = ZKL_STATE_AUTH_FAILED;
        c->reinit_at = 0;
        zkl__emit(c, NULL, ZKL_EV_SESSION, ZKL_STATE_AUTH_FAILED);
        return;
    }
    c->stats.sessions_expired++;
    c->state = ZKL_STATE_EXPIRED;
    zkl__emit(c, NULL, ZKL_EV_SESSION, ZKL_STATE_EXPIRED);
    c->state = ZKL_STATE_CONNECTING;
    int64_t now = zkl__now(c), delay = reopen_delay(c, now);
    if (delay == 0)
        open_handle(c);
    else
        c->reinit_at = now + delay; /* process() opens it then */
}

/* The negotiated session timeout (the requested one before the first connect). */
static int64_t session_limit(const zkl_client *c) {
    return c->zh ? c->zk->recv_timeout(c->zh) : c->session_timeout_ms;
}

static int has_session(const zkl_client *c) {
    return c->zh && (c->state == ZKL_STATE_CONNECTED || c->state == ZKL_STATE_SUSPENDED);
}

/* When the session must be taken as lost if nothing more is answered. The server expires it no
 * sooner than a session timeout after it last received a packet from us, and it received one no
 * earlier than answered_at (the issue time of the newest request it answered, answered.c). The
 * margin covers the two clocks' rates and our own lateness in noticing. */
static int64_t lost_deadline(const zkl_client *c) {
    int64_t limit = session_limit(c);
    int64_t margin = limit / 10 < 1000 ? limit / 10 : 1000;
    return c->answered_at + limit - margin;
}

/* With the link up, nothing answered for this long: ownership is uncertain (SUSPENDED). Two
 * thirds of the timeout, the bound after which the ZooKeeper client gives up on a silent server
 * itself (it counts from any input, a pushed event too; we count from answers only). */
static int64_t silent_deadline(const zkl_client *c) {
    return c->answered_at + session_limit(c) * 2 / 3;
}

/* While the link is up, a request of our own when none went out for a quarter of the timeout:
 * the ZooKeeper client's pings (after a third) never reach us, an answered request does. */
static int64_t heartbeat_due(const zkl_client *c) {
    return c->issued_at + session_limit(c) / 4;
}

/* The LOST deadline passed (nothing answered in time): the session is given up as expired. When
 * the ZooKeeper client still counts its link as up (a server silent after a push, replies lost one
 * way), closing the handle would send closeSession. That must not reach the server: it would end
 * the session, and free the lock to the next waiter, at the moment LOST is declared instead of a
 * margin later, before the owner (a keepalive client's, say) has read the LOST. Nor may
 * zookeeper_close wait up to 1.5 s for its answer inside process(). So the socket is shut both
 * ways first: the send fails at once (the client sends with MSG_NOSIGNAL), nothing is waited for,
 * and the server expires the session on its own clock, no sooner than the margin after LOST. */
static void lost_by_timer(zkl_client *c) {
    if (c->zh && zk_link_up(c) && c->zkfd >= 0) shutdown(c->zkfd, SHUT_RDWR);
    session_expired(c);
}

static void suspend(zkl_client *c, int64_t now) {
    c->state = ZKL_STATE_SUSPENDED;
    c->suspended_at = now;
    c->resume_seq = c->issue_seq + 1; /* an answer to a request sent from now on ends it */
    zkl__emit(c, NULL, ZKL_EV_SESSION, ZKL_STATE_SUSPENDED);
    zkl__ops_each(c, op_suspended, 1);
}

static void handle_session(zkl_client *c) {
    if (c->closed || c->state == ZKL_STATE_AUTH_FAILED) return;
    if (c->expired_flag) {
        session_expired(c);
        return;
    }
    if (!c->zh) return;
    if (c->zk_connected && !zk_link_up(c)) c->zk_connected = 0; /* dropped silently */
    int64_t now = zkl__now(c);
    if (c->zk_connected && c->state == ZKL_STATE_CONNECTED && c->link_ups != c->link_ups_seen) {
        /* the link went down and came back within one pass, unseen: requests in flight failed */
        suspend(c, now);
    }
    if (c->zk_connected && c->state == ZKL_STATE_SUSPENDED) {
        const clientid_t *id = c->zk->client_id(c->zh);
        if (!id || id->client_id != c->session_id) {
            /* not the session we had: the old one is gone, with whatever it held; every op
             * learns it (LOST, ESESSION) before anything runs in a new session */
            session_expired(c);
            return;
        } else if (c->answered_seq < c->resume_seq) {
            /* the same session, but only an answer to a request sent since the link came back
             * (or the silence began) proves the server still keeps it */
            if (c->issue_seq < c->resume_seq) zkl__heartbeat(c);
            return;
        } else {
            c->state = ZKL_STATE_CONNECTED;
            c->link_ups_seen = c->link_ups;
            c->suspended_at = 0;
            zkl__emit(c, NULL, ZKL_EV_SESSION, ZKL_STATE_CONNECTED);
            zkl__ops_each(c, op_suspended, 0);
            zkl__ops_each(c, op_kick, 0);
            return;
        }
    }
    if (c->zk_connected && c->state != ZKL_STATE_CONNECTED) {
        /* a new session: the server made it when it received the connect request, which went
         * out during the call that began at connect_floor (or, not known, after the handle was
         * opened) */
        const clientid_t *id = c->zk->client_id(c->zh);
        c->session_id = id ? id->client_id : 0;
        if (id) memcpy(c->passwd, id->passwd, sizeof c->passwd);
        c->sessions++;
        c->state = ZKL_STATE_CONNECTED;
        c->link_ups_seen = c->link_ups;
        c->suspended_at = 0;
        int64_t floor = c->connect_floor ? c->connect_floor : c->opened_at;
        if (c->answered_at < floor) c->answered_at = floor;
        if (c->issued_at < floor) c->issued_at = floor; /* the handshake was a request too */
        zkl__emit(c, NULL, ZKL_EV_SESSION, ZKL_STATE_CONNECTED);
        zkl__ops_each(c, op_kick, 0);
    } else if (!c->zk_connected && c->state == ZKL_STATE_CONNECTED) {
        suspend(c, now);
    } else if (c->zk_connected && c->state == ZKL_STATE_CONNECTED && now >= silent_deadline(c)) {
        suspend(c, now); /* the link is up, but the server has answered nothing for too long */
        zkl__heartbeat(c);
    }
}

/* Call into the ZooKeeper client (interest or process). The connect request goes out inside one
 * of these calls, when the handle moves into ASSOCIATING (or straight to CONNECTED): the start of
 * that call bounds the new session's birth from below. */
static int zk_call(zkl_client *c, int process, int events, int *fd, int *interest,
                   struct timeval *tv) {
    int64_t t0 = zkl__now(c);
    int s0 = c->zk->state(c->zh), rc;
    zhandle_t *zh = c->zh;
    WITH_CLIENT(c,
                rc = process ? c->zk->process(zh, events) : c->zk->interest(zh, fd, interest, tv));
    if (c->zh == zh) {
        int s1 = c->zk->state(zh);
        int before =
            s0 == ZOO_ASSOCIATING_STATE || s0 == ZOO_CONNECTED_STATE || s0 == ZOO_READONLY_STATE;
        int after =
            s1 == ZOO_ASSOCIATING_STATE || s1 == ZOO_CONNECTED_STATE || s1 == ZOO_READONLY_STATE;
        if (after && !before) c->connect_floor = t0;
    }
    return rc;
}

/* ---------------------------------------------------------------- I/O and time */

/* Ask the ZooKeeper client what it waits for and register that with epoll. While it has no socket
 * it starts a new connection attempt on every call (after a failed round over all hosts it asks,
 * through the timeout, for a pause of 1/60 of the session timeout first): so without a socket only
 * its own deadline may call it again, or reconnects would run at the rate of our calls. */
void zkl__refresh_interest(zkl_client *c) {
    int fd = -1, interest = 0;
    struct timeval tv = {0, 0};
    if (!c->zh) return;
    if (c->zkfd < 0 && c->zk_deadline && zkl__now(c) < c->zk_deadline) return;
    int rc = zk_call(c, 0, 0, &fd, &interest, &tv);
    (void)rc; /* connection errors surface through the session watcher */
    int64_t now = zkl__now(c);
    c->zk_deadline = now + (int64_t)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
    if (fd != c->zkfd && c->zkfd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->zkfd, NULL); /* may already be gone with the socket */
        c->zkfd = -1;
    }
    if (fd >= 0) {
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.events =
            (interest & ZOOKEEPER_READ ? EPOLLIN : 0) | (interest & ZOOKEEPER_WRITE ? EPOLLOUT : 0);
        int zstate = c->zk->state(c->zh);
        /* Nothing changed on an established link: skip the syscall. While connecting, always
         * register: a failed connect closes the socket (dropping its registration) and the next
         * attempt may reopen the same number with the same interest and state. An established
         * link is only reached through a connecting state, which registered afresh. */
        if (fd == c->zkfd && ev.events == c->zkfd_events && zstate == c->zkfd_state &&
            (zstate == ZOO_CONNECTED_STATE || zstate == ZOO_READONLY_STATE))
            return;
        /* after a close and reopen under the same number MOD fails with ENOENT and we ADD */
        if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
            epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev);
        c->zkfd = fd;
        c->zkfd_events = ev.events;
        c->zkfd_state = zstate;
    }
}

static void fire_deadlines(zkl_client *c, int64_t now) {
    zkl_op *op, *next;
    if (!c->next_deadline || now < c->next_deadline) return;
    c->next_deadline = 0;
    for (op = c->ops; op; op = next) {
        next = op->next;
        if (!op->kind->expire || op->phase != P_ACQUIRING || !op->deadline) continue;
        if (op->deadline <= now) {
            op->kind->expire(c, op);
            zkl__op_maybe_free(c, op);
        } else {
            zkl__note_deadline(c, op->deadline);
        }
    }
}

int zkl__client_process(zkl_client *c) {
    return zkl__process(c, 1);
}

#define PROCESS_ROUNDS 64

/* owner = 0 when the keepalive thread drives the client: the result the owner may be reading
 * (last_done) must stay. */
int zkl__process(zkl_client *c, int owner) {
    if (c->closed) return ZKL_ECLOSED;
    size_t before = c->ev_len + c->rd_len;
    if (owner) zkl__release_last_done(c);
    /* Before anything is read: if nothing answered in time (also when nobody drove this client
     * for that long, so nothing went out), the server may have expired the session. Say so
     * before a reply read now could report a stale lock. */
    if (has_session(c) && zkl__now(c) >= lost_deadline(c)) lost_by_timer(c);
    int ready_n = c->ready_n; /* what the wait just before this pass found (-1: nothing known) */
    c->ready_n = -1;
    if (!c->zh && c->reinit_at && zkl__now(c) >= c->reinit_at) open_handle(c);
    zkl__listings_flush(
        c); /* listings asked for since the last call go out before replies are read */
    /* zookeeper_process reads at most one reply per call: keep going while the socket has more,
     * up to a bound so one busy connection cannot starve the caller's loop */
    for (int round = 0; c->zh && round < PROCESS_ROUNDS; round++) {
        /* Only when epoll says the socket has something: the ZooKeeper client allocates its input
         * buffer before it reads, and a read that finds nothing leaves that buffer allocated; a
         * reconnect after a failed send then replaces it without freeing it (libzookeeper_st
         * 3.8, prime_connection). Reading without the check saved no measurable CPU. */
        struct epoll_event ev;
        int n;
        if (round == 0 && ready_n >= 0 && c->ready_fd == c->zkfd && zk_link_up(c)) {
            /* the wait's epoll_wait has just answered for this socket: not asked twice (a send
             * that failed meanwhile took the link down, and then epoll is asked) */
            n = ready_n;
            ev.events = c->ready_events;
        } else if (round > 0 && c->inflight_n == 0) {
            /* every request of ours is answered: a further read could only find a notification
             * or a ping's reply, and the fd stays readable (level-triggered) for the next wait,
             * so the system call that would mostly find nothing is saved */
            break;
        } else {
            n = epoll_wait(c->epfd, &ev, 1, 0);
        }
        int events = n == 1 ? zk_events_of(c, ev.events) : 0;
        if (!events) break;
        int rc = zk_call(c, 1, events, NULL, NULL, NULL);
        (void)rc;
        if (!c->zh || !zk_link_up(c)) break; /* dropped or expired: the session logic below */
        if (c->expired_flag) break;
        zkl__refresh_interest(c); /* the socket may have been replaced, or need write interest */
    }
    handle_session(c);
    zkl__refresh_interest(c); /* may time out the connection and run completions */
    handle_session(c);
    int64_t now = zkl__now(c);
    fire_deadlines(c, now);
    if (has_session(c) && now >= lost_deadline(c))
        lost_by_timer(c); /* the server may have expired the session by now: assume the worst */
    else if (has_session(c) && zk_link_up(c) && now >= heartbeat_due(c))
        zkl__heartbeat(c);
    zkl__listings_flush(c); /* listings asked for by this round's replies and watches */
    zkl__refresh_interest(c);
    return (int)(c->ev_len + c->rd_len - before);
}

/* Runs at the end of every Lua pump and before every wait: nothing to send is the common case,
 * and costs a pointer test (no call into the ZooKeeper client). */
int zkl__client_flush(zkl_client *c) {
    if (c->closed) return ZKL_ECLOSED;
    if (!c->listings || !c->zh) return 0;
    zkl__listings_flush(c);
    zkl__refresh_interest(c); /* a send that could not finish now waits for the socket */
    return 0;
}

int zkl__client_timeout_ms(zkl_client *c) {
    if (c->closed) return -1;
    if (c->ev_len || c->rd_len || (c->listings && c->zh)) return 0;
    int64_t now = zkl__now(c), t = -1;
#define FOLD(x)                                                                                    \
    if (x) t = (t < 0 || (x)-now < t) ? ((x)-now < 0 ? 0 : (x)-now) : t
    FOLD(c->zk_deadline);
    FOLD(c->next_deadline);
    FOLD(c->reinit_at);
    if (has_session(c)) {
        int64_t lost_at = lost_deadline(c);
        FOLD(lost_at);
        if (zk_link_up(c)) {
            int64_t beat_at = heartbeat_due(c);
            FOLD(beat_at);
            if (c->state == ZKL_STATE_CONNECTED) {
                int64_t silent_at = silent_deadline(c);
                FOLD(silent_at);
            }
        }
    }
#undef FOLD
    return t > 0x7fffffff ? 0x7fffffff : (int)t;
}

/* ---------------------------------------------------------------- keepalive */

/* While the owner thread stays out of the library (a blocking script doing something else), this
 * thread drives ZooKeeper so pings go out and the session lives. It only steps in after the owner
 * has been away for KA_IDLE_MS, under the client's mutex; events it produces wait in the queue
 * for the owner, so user code still runs only on the owner's thread. */
#define KA_IDLE_MS 100

static void *keepalive_main(void *arg) {
    zkl_client *c = arg;
    for (;;) {
        int t = KA_IDLE_MS, driving = 0;
        pthread_mutex_lock(&c->mu);
        if (c->ka_stop || c->closed) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        int64_t idle = zkl__now(c) - c->last_owner_ms;
        if (idle >= KA_IDLE_MS) {
            driving = 1;
            zkl__process(c, 0);
            int z = zkl__client_timeout_ms(c);
            if (z >= 0 && z < t) t = z > 0 ? z : 1;
        } else {
            t = (int)(KA_IDLE_MS - idle); /* until the owner has been away long enough */
        }
        pthread_mutex_unlock(&c->mu);
        /* While the owner drives, do not watch the fd: readiness it has not consumed yet would
         * wake this thread again at once, again and again. */
        struct pollfd p = {c->epfd, POLLIN, 0};
        poll(driving ? &p : NULL, driving ? 1 : 0, t);
    }
    return NULL;
}

static void keepalive_stop(zkl_client *c) {
    if (!c->ka) return;
    pthread_mutex_lock(&c->mu);
    c->ka_stop = 1;
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->ka_thread, NULL);
    c->ka = 0;
    pthread_mutex_destroy(&c->mu);
}

/* ---------------------------------------------------------------- lifecycle */

int zkl_client_new(const zkl_config *cfg, zkl_client **out) {
    return zkl__client_new_zk(cfg, &zkl__zk_real, out);
}

int zkl__client_new_zk(const zkl_config *cfg, const zkl_zk *zk, zkl_client **out) {
    const zkl_allocator *a = cfg->alloc ? cfg->alloc : &zkl__default_alloc;
    *out = NULL;
    if (!cfg->hosts || !*cfg->hosts || cfg->session_timeout_ms < 0) return ZKL_EINVAL;
    zkl_client *c = a->realloc(a->ud, NULL, 0, sizeof *c);
    if (!c) return ZKL_ENOMEM;
    memset(c, 0, sizeof *c);
    c->alloc = *a;
    c->zk = zk;
    c->epfd = -1;
    c->zkfd = -1;
    c->ready_n = -1;
    c->state = ZKL_STATE_CONNECTING;
    c->session_timeout_ms = cfg->session_timeout_ms ? cfg->session_timeout_ms : 10000;
    c->log_fn = cfg->log_fn;
    c->log_ud = cfg->log_ud;
    c->log_level = cfg->log_level;
    c->hosts = zkl__strdup(c, cfg->hosts);
    if (cfg->identity) {
        c->identity_len = cfg->identity_len;
        c->identity = zkl__alloc(c, c->identity_len + 1);
        if (c->identity) {
            memcpy(c->identity, cfg->identity, c->identity_len);
            c->identity[c->identity_len] = '\0';
        }
    } else {
        char host[256];
        zkl_host_name(host, sizeof host);
        c->identity = zkl__strdup(c, host);
        c->identity_len = c->identity ? strlen(c->identity) : 0;
    }
    if (!c->hosts || !c->identity || zkl__op_table_init(c) != 0) {
        zkl__client_destroy(c);
        return ZKL_ENOMEM;
    }
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0) {
        zkl__client_destroy(c);
        return ZKL_ESYSTEM;
    }
    c->zk->set_debug_level(cfg->log_level == ZKL_LOG_NONE ? (ZooLogLevel)0
                                                          : zk_level(cfg->log_level));
    if (open_handle(c) != 0) {
        int e = errno;
        zkl__client_destroy(c);
        return e == EINVAL ? ZKL_EINVAL : ZKL_ESYSTEM;
    }
    zkl__refresh_interest(c);
    if (cfg->keepalive) {
        pthread_mutexattr_t attr;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
        int bad = pthread_mutex_init(&c->mu, &attr) != 0;
        pthread_mutexattr_destroy(&attr);
        c->last_owner_ms = zkl__now(c);
        if (bad || pthread_create(&c->ka_thread, NULL, keepalive_main, c) != 0) {
            if (!bad) pthread_mutex_destroy(&c->mu);
            zkl__client_destroy(c);
            return ZKL_ESYSTEM;
        }
        c->ka = 1;
    }
    *out = c;
    return ZKL_OK;
}

/* Read the replies still due before closing. zookeeper_close sends closeSession and then waits
 * for input, but input already due (a reply to an earlier request) ends that wait at once: the
 * socket is closed with unread data, the kernel sends a reset, and the server may drop the
 * closeSession it had not read yet, so the session and its nodes would live on for a session
 * timeout. Bounded by a third of the session timeout, at most 1 s. */
static void drain_replies(zkl_client *c) {
    int limit = c->session_timeout_ms / 3 < 1000 ? c->session_timeout_ms / 3 : 1000;
    int64_t end = zkl__now(c) + limit;
    while (c->zh && zk_link_up(c)) {
        const zkl_op *op = c->ops;
        while (op && op->refs <= 0)
            op = op->next;
        if (!op && !c->inflight_n) return; /* nothing in flight (a heartbeat counts) */
        int64_t left = end - zkl__now(c);
        if (left <= 0) return;
        struct epoll_event ev;
        if (epoll_wait(c->epfd, &ev, 1, (int)left) != 1) return;
        int events = zk_events_of(c, ev.events);
        if (!events) return;
        int rc = zk_call(c, 1, events, NULL, NULL, NULL);
        (void)rc;
        zkl__refresh_interest(c);
    }
}

int zkl__client_close(zkl_client *c) {
    zkl_op *op, *next;
    if (c->closed) return ZKL_OK;
    keepalive_stop(c); /* the caller holds no lock here: see api.c */
    zkl__release_last_done(c);
    for (op = c->ops; op; op = next) {
        next = op->next;
        if (op->kind->close) op->kind->close(c, op); /* its final event, if it owes one */
    }
    c->closed = 1;
    zkl__listings_drop(c);
    drain_replies(c);
    close_handle(c);
    for (op = c->ops; op; op = next) {
        next = op->next;
        zkl__op_maybe_free(c, op);
    }
    c->state = ZKL_STATE_CLOSED;
    zkl__emit(c, NULL, ZKL_EV_SESSION, ZKL_STATE_CLOSED);
    return ZKL_OK;
}

void zkl__client_destroy(zkl_client *c) {
    if (!c) return;
    keepalive_stop(c);
    if (c->zh) zkl__client_close(c);
    c->last_done = NULL;
    zkl__listings_drop(c);
    while (c->ops) {
        zkl_op *op = c->ops;
        op->phase = P_DONE;
        op->refs = 0;
        op->pinned = 0;
        zkl__op_maybe_free(c, op);
    }
    while (c->auths) {
        zkl_auth *a = c->auths;
        c->auths = a->next;
        zkl__strfree(c, a->scheme);
        zkl__free(c, a->cred, a->len + 1);
        zkl__free(c, a, sizeof *a);
    }
    for (int i = 0; i < c->nacls; i++)
        acl_free(c, &c->acls[i]);
    zkl__free(c, c->acls, (size_t)c->nacls * sizeof *c->acls);
    if (c->epfd >= 0) close(c->epfd);
    zkl__free(c, c->buckets, c->nbuckets * sizeof *c->buckets);
    zkl__windex_free(c);
    zkl__ev_free(c);
    zkl__rd_free(c);
    zkl__inflight_free(c);
    zkl__strfree(c, c->hosts);
    zkl__strfree(c, c->parents_dir);
    zkl__free(c, c->identity, c->identity_len + 1);
    zkl_allocator a = c->alloc;
    a.realloc(a.ud, c, sizeof *c, 0);
}

int zkl_client_fd(zkl_client *c) {
    return c->epfd;
}
void zkl__client_stats(const zkl_client *c, zkl_stats *out) {
    *out = c->stats;
}
int zkl__client_state(const zkl_client *c) {
    return c->state;
}
int zkl__client_session_count(const zkl_client *c) {
    return c->sessions;
}

int64_t zkl__client_session(const zkl_client *c, char passwd[16]) {
    if (passwd) memcpy(passwd, c->passwd, 16);
    return c->state == ZKL_STATE_CONNECTED || c->state == ZKL_STATE_SUSPENDED ? c->session_id : 0;
}

int zkl__client_loss_ms(zkl_client *c) {
    if (c->closed || !has_session(c)) return -1;
    int64_t left = lost_deadline(c) - zkl__now(c);
    return left < 0 ? 0 : left > 0x7fffffff ? 0x7fffffff : (int)left;
}

int zkl__client_session_timeout(const zkl_client *c) {
    if (c->zh && c->state == ZKL_STATE_CONNECTED) return c->zk->recv_timeout(c->zh);
    return c->session_timeout_ms;
}

int zkl__client_add_auth(zkl_client *c, const char *scheme, const char *cred, size_t len) {
    if (c->closed) return ZKL_ECLOSED;
    if (!scheme || !*scheme || !cred) return ZKL_EINVAL;
    zkl_auth *a = zkl__alloc(c, sizeof *a);
    if (!a) return ZKL_ENOMEM;
    a->scheme = zkl__strdup(c, scheme);
    a->cred = zkl__alloc(c, len + 1);
    if (!a->scheme || !a->cred) {
        zkl__strfree(c, a->scheme);
        zkl__free(c, a->cred, len + 1);
        zkl__free(c, a, sizeof *a);
        return ZKL_ENOMEM;
    }
    memcpy(a->cred, cred, len);
    a->cred[len] = '\0';
    a->len = len;
    a->next = c->auths;
    c->auths = a;
    int rc = c->zh ? c->zk->add_auth(c->zh, scheme, cred, (int)len, NULL, NULL) : ZOK;
    zkl__refresh_interest(c);
    return rc;
}

/* ---------------------------------------------------------------- ACLs */

struct ACL_vector *zkl__acl(zkl_client *c, int id) {
    return id > 0 && id <= c->nacls ? &c->acls[id - 1] : &ZOO_OPEN_ACL_UNSAFE;
}

static void acl_free(zkl_client *c, struct ACL_vector *v) {
    for (int i = 0; i < v->count; i++) {
        zkl__strfree(c, v->data[i].id.scheme);
        zkl__strfree(c, v->data[i].id.id);
    }
    zkl__free(c, v->data, (size_t)v->count * sizeof *v->data);
}

int zkl__client_acl(zkl_client *c, const zkl_acl_entry *entries, int n) {
    if (n < 1 || n > 64 || !entries) return ZKL_EINVAL;
    for (int i = 0; i < n; i++)
        if (!entries[i].scheme || !*entries[i].scheme || !entries[i].id || entries[i].perms <= 0 ||
            entries[i].perms > ZKL_PERM_ALL)
            return ZKL_EINVAL;
    struct ACL_vector v = {0, zkl__alloc(c, (size_t)n * sizeof(struct ACL))};
    struct ACL_vector *grown = zkl__alloc(c, (size_t)(c->nacls + 1) * sizeof *grown);
    if (!v.data || !grown) {
        zkl__free(c, v.data, (size_t)n * sizeof(struct ACL));
        zkl__free(c, grown, (size_t)(c->nacls + 1) * sizeof *grown);
        return ZKL_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        v.data[i].perms = entries[i].perms;
        v.data[i].id.scheme = zkl__strdup(c, entries[i].scheme);
        v.data[i].id.id = zkl__strdup(c, entries[i].id);
        v.count = i + 1;
        if (!v.data[i].id.scheme || !v.data[i].id.id) {
            acl_free(c, &v);
            zkl__free(c, grown, (size_t)(c->nacls + 1) * sizeof *grown);
            return ZKL_ENOMEM;
        }
    }
    if (c->nacls) memcpy(grown, c->acls, (size_t)c->nacls * sizeof *grown);
    zkl__free(c, c->acls, (size_t)c->nacls * sizeof *c->acls);
    c->acls = grown;
    c->acls[c->nacls++] = v;
    return c->nacls;
}

/* ---------------------------------------------------------------- testing aid */

static void quiet_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)zh, (void)type, (void)path;
    if (state == ZOO_CONNECTED_STATE)
        *(int *)ctx = 1;
    else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
        *(int *)ctx = -1;
}

int zkl_expire_session(const char *hosts, int64_t session_id, const char passwd[16],
                       int timeout_ms) {
    clientid_t id;
    int connected = 0;
    memset(&id, 0, sizeof id);
    id.client_id = session_id;
    memcpy(id.passwd, passwd, 16);
    zhandle_t *zh = zkl__zk_real.init(hosts, quiet_watcher, 10000, &id, &connected, 0, zk_log);
    if (!zh) return ZKL_ESYSTEM;
    int64_t end = zkl__zk_real.now_ms() + timeout_ms;
    while (connected == 0 && zkl__zk_real.now_ms() < end) {
        int fd = -1, interest = 0;
        struct timeval tv;
        zkl__zk_real.interest(zh, &fd, &interest, &tv);
        struct pollfd p = {fd,
                           (short)((interest & ZOOKEEPER_READ ? POLLIN : 0) |
                                   (interest & ZOOKEEPER_WRITE ? POLLOUT : 0)),
                           0};
        int t = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
        if (t > 50 || t < 0) t = 50;
        int ev = 0;
        if (fd >= 0 && poll(&p, 1, t) > 0) {
            if (p.revents & (POLLIN | POLLERR | POLLHUP)) ev |= ZOOKEEPER_READ;
            if (p.revents & (POLLOUT | POLLERR | POLLHUP)) ev |= ZOOKEEPER_WRITE;
        } else if (fd < 0) {
            poll(NULL, 0, t);
        }
        zkl__zk_real.process(zh, ev);
    }
    zkl__zk_real.close(zh); /* closing the borrowed session ends it for its owner too */
    return connected == 1 ? ZKL_OK : connected < 0 ? ZKL_ESESSION : ZKL_ETIMEDOUT;
}
