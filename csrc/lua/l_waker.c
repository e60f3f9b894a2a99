/* l_waker.c - core.waker: turns "this fd is readable" into a byte on a unix stream socket, for
 * event loops that can wait on their own sockets but not on a foreign fd (nginx: the OpenResty
 * adapter's pump, see lua/zklock/adapters/openresty.lua).
 *
 *   core.waker(fd, path) -> waker | nil, msg
 *       binds and listens on the unix socket `path` (which must not exist), then starts a thread
 *       that accepts one connection on it (and removes `path` once accepted) and serves it:
 *         the caller writes "<ms>\n"   wait: watch `fd` for at most ms milliseconds, then
 *         the thread writes 1 byte     "w" fd became readable, "t" the ms passed, "k" kicked;
 *                                      one byte per "<ms>\n", and nothing between waits.
 *       So the caller (nginx's pump, on a cosocket) never hits a read timeout of its own.
 *   waker:kick()   end the current wait now (a no-op between waits: the reader is awake)
 *   waker:close()  stops and joins the thread, closes every fd it owns (also on garbage
 *                  collection); fd itself is the caller's and stays open.
 *
 * The thread shares nothing with its owner but fds set before it starts: kicks go through a pipe
 * and close() closes the pipe's write end, which the thread reads as "stop". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lzklock.h"

#define WAKER_MT "zklock.core.waker"

typedef struct {
    int watch_fd;  /* not ours */
    int listen_fd; /* the thread closes it after accept (or on stop) */
    int ctl[2];    /* owner -> thread: 'k' kick; EOF: stop */
    pthread_t th;
    int running;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
} waker;

static ssize_t write_all1(int fd, char b) {
    ssize_t n;
    do
        n = write(fd, &b, 1);
    while (n < 0 && errno == EINTR);
    return n;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *waker_main(void *arg) {
    waker *w = arg;
    int conn = -1, armed = 0;
    int64_t deadline = 0;
    char line[32];
    size_t used = 0;
    /* wait for the one connection (or stop) */
    for (;;) {
        struct pollfd p[2] = {{w->listen_fd, POLLIN, 0}, {w->ctl[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            goto out;
        }
        if (p[1].revents) {
            char b[16];
            ssize_t n = read(w->ctl[0], b, sizeof b);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) goto out;
        }
        if (p[0].revents) {
            conn = accept(w->listen_fd, NULL, NULL);
            if (conn >= 0) break;
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) goto out;
        }
    }
    unlink(w->path);
    close(w->listen_fd);
    w->listen_fd = -1;
    for (;;) {
        struct pollfd p[3] = {{conn, POLLIN, 0}, {w->ctl[0], POLLIN, 0}, {w->watch_fd, POLLIN, 0}};
        int timeout = -1;
        if (armed) {
            int64_t left = deadline - mono_ms();
            timeout = left <= 0 ? 0 : left > 0x7fffffff ? 0x7fffffff : (int)left;
        }
        int r = poll(p, armed ? 3 : 2, timeout);
        if (r < 0) {
            if (errno == EINTR) continue;
            break;
        }
        char say = 0;
        if (p[1].revents) {
            char b[64];
            ssize_t n = read(w->ctl[0], b, sizeof b);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
            if (n > 0) say = 'k';
        }
        if (p[0].revents) {
            ssize_t n = read(conn, line + used, sizeof line - 1 - used);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break; /* reader gone */
            if (n > 0) {
                used += (size_t)n;
                char *nl = memchr(line, '\n', used);
                if (nl) { /* "<ms>\n": watch the fd for at most ms */
                    *nl = 0;
                    long ms = strtol(line, NULL, 10);
                    size_t rest = used - (size_t)(nl + 1 - line);
                    memmove(line, nl + 1, rest);
                    used = rest;
                    armed = 1;
                    deadline = mono_ms() + (ms < 0 ? 0 : ms);
                    say = 0; /* a kick before this wait is stale: the reader was awake */
                    continue;
                }
                if (used >= sizeof line - 1) break; /* not our protocol */
            }
        }
        if (armed && r > 0 && (p[2].revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL))) say = 'w';
        if (armed && !say && r == 0) say = 't';
        if (armed && say) {
            if (write_all1(conn, say) < 0 && errno != EAGAIN) break;
            armed = 0;
        }
    }
out:
    if (conn >= 0) close(conn);
    return NULL;
}

static waker *check_waker(lua_State *L) {
    return (waker *)luaL_checkudata(L, 1, WAKER_MT);
}

static void waker_stop(waker *w) {
    if (!w->running) return;
    w->running = 0;
    close(w->ctl[1]); /* the thread reads EOF: stop */
    pthread_join(w->th, NULL);
    close(w->ctl[0]);
    if (w->listen_fd >= 0) { /* never connected */
        unlink(w->path);
        close(w->listen_fd);
        w->listen_fd = -1;
    }
}

static int l_waker_new(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    size_t len;
    const char *path = luaL_checklstring(L, 2, &len);
    if (fd < 0) return luaL_argerror(L, 1, "expected an fd >= 0");
    waker *w = (waker *)lua_newuserdata(L, sizeof *w);
    memset(w, 0, sizeof *w);
    w->listen_fd = -1;
    w->ctl[0] = w->ctl[1] = -1;
    luaL_getmetatable(L, WAKER_MT);
    lua_setmetatable(L, -2);
    if (len == 0 || len >= sizeof w->path || memchr(path, 0, len))
        return luaL_argerror(L, 2, "expected a socket path of 1..107 bytes");
    memcpy(w->path, path, len + 1);
    w->watch_fd = (int)fd;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, path, len + 1);
    const char *what = "socket";
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
        what = "bind";
        if (bind(s, (struct sockaddr *)&a, sizeof a) == 0) {
            what = "listen";
            if (listen(s, 1) == 0) {
                what = "pipe";
                if (pipe2(w->ctl, O_CLOEXEC | O_NONBLOCK) == 0) {
                    w->listen_fd = s;
                    what = "pthread_create";
                    if (pthread_create(&w->th, NULL, waker_main, w) == 0) {
                        w->running = 1;
                        return 1;
                    }
                    close(w->ctl[0]);
                    close(w->ctl[1]);
                    w->listen_fd = -1;
                }
            }
            unlink(path);
        }
        int e = errno;
        close(s);
        errno = e;
    }
    int e = errno;
    lua_pushnil(L);
    lua_pushfstring(L, "zklock.core.waker: %s(%s): %s", what, path, strerror(e));
    return 2;
}

static int l_waker_kick(lua_State *L) {
    waker *w = check_waker(L);
    if (w->running) {
        (void)write_all1(w->ctl[1], 'k'); /* non-blocking: a full pipe wakes the thread anyway */
    }
    return 0;
}

static int l_waker_close(lua_State *L) {
    waker_stop(check_waker(L));
    return 0;
}

static const luaL_Reg waker_methods[] = {
    {"kick", l_waker_kick}, {"close", l_waker_close}, {NULL, NULL}};

void zkl_lua_waker_register(lua_State *L) {
    if (luaL_newmetatable(L, WAKER_MT)) {
        lua_newtable(L);
        luaL_setfuncs(L, waker_methods, 0);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_waker_close);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, l_waker_new);
    lua_setfield(L, -2, "waker");
}
