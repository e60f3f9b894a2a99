/* l_proc.c - core.proc: the few POSIX calls the zklock command needs and Lua lacks.
 *
 *   proc.keep_fds()                 remember the fds open now (0..1023): the ones a child inherits;
 *                                   every fd opened later (the ZooKeeper socket, the client's own
 *                                   fds, the signal pipe) is closed on exec. Call it first.
 *   proc.signals({ "INT", ... })    -> fd: catch these signals and SIGCHLD; each one delivered
 *                                   writes a record to a non-blocking self-pipe whose read end
 *                                   is returned (poll it next to the client's fd)
 *   proc.read_signals()             -> { { sig = n, name = "INT", user = bool }, ... }: drains the
 *                                   pipe. user: sent by a process with kill() (not by the kernel,
 *                                   e.g. the terminal's ^C, which reached the whole group already)
 *   proc.spawn(argv, env)           -> pid | nil, msg, errno: fork and execvp argv (array of
 *                                   strings) with the environment plus env (name -> value); the
 *                                   child starts with default dispositions and no blocked signals.
 *                                   An exec failure is reported here, not as an exit status.
 *   proc.wait(pid)                  -> nil (still running) | "exited", status | "signaled", sig
 *   proc.kill(pid, sig)             -> true | nil, msg, errno  (sig: number or name "TERM")
 *   proc.signum(name)               -> number | nil;  proc.signame(n) -> "TERM" | nil
 *   proc.restore()                  default dispositions again for the caught signals
 *   proc.tree(argv, env [, tty])    -> keeper pid, command pid, ctl fd, st fd | nil, msg, errno:
 *                                   the command under a keeper (see "the keeper" below), in a
 *                                   process group of its own; tty: a terminal fd whose
 *                                   foreground group the command's group becomes
 *   proc.tree_send(ctl, sig)        signal the command's group; "KILL_TREE": SIGKILL to the
 *                                   whole tree (the keeper exits once nothing of it is left)
 *   proc.tree_status(st)            -> nil | "exited", n | "signaled", n: the command's end
 *   proc.close(fd); proc.subreaper(); proc.foreground_tty() -> 0 | nil; proc.take_tty(fd);
 *   proc.kill_group(pgid, sig); proc.kill_tree([pgid]) -> n; proc.reap() -> n
 *
 * Signal handlers do only write(2) on the pipe (async-signal-safe, errno saved). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "lzklock.h"
#include "proc_tree.h"

extern char **environ;

#define KEEP_MAX 1024
static unsigned char keep[KEEP_MAX / 8];
static int keep_taken;
static int sig_pipe[2] = {-1, -1};
static unsigned char caught[NSIG];

static const struct {
    const char *name;
    int sig;
} SIGS[] = {{"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},
            {"ILL", SIGILL},       {"TRAP", SIGTRAP}, {"ABRT", SIGABRT},
            {"BUS", SIGBUS},       {"FPE", SIGFPE},   {"KILL", SIGKILL},
            {"USR1", SIGUSR1},     {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
            {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},
            {"CHLD", SIGCHLD},     {"CONT", SIGCONT}, {"STOP", SIGSTOP},
            {"TSTP", SIGTSTP},     {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},
            {"URG", SIGURG},       {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},
            {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
            {"SYS", SIGSYS},       {NULL, 0}};

static int signum(const char *name) {
    if (strncmp(name, "SIG", 3) == 0) name += 3;
    for (int i = 0; SIGS[i].name; i++)
        if (strcmp(SIGS[i].name, name) == 0) return SIGS[i].sig;
    return 0;
}

static const char *signame(int sig) {
    for (int i = 0; SIGS[i].name; i++)
        if (SIGS[i].sig == sig) return SIGS[i].name;
    return NULL;
}

static int checksig(lua_State *L, int arg) {
    if (lua_type(L, arg) == LUA_TNUMBER) {
        lua_Integer n = luaL_checkinteger(L, arg);
        luaL_argcheck(L, n > 0 && n < NSIG, arg, "expected a signal number");
        return (int)n;
    }
    int s = signum(luaL_checkstring(L, arg));
    luaL_argcheck(L, s != 0, arg, "expected a signal name such as \"TERM\"");
    return s;
}

static int l_signum(lua_State *L) {
    int s = signum(luaL_checkstring(L, 1));
    if (!s) return 0;
    lua_pushinteger(L, s);
    return 1;
}

static int l_signame(lua_State *L) {
    const char *n = signame((int)luaL_checkinteger(L, 1));
    if (!n) return 0;
    lua_pushstring(L, n);
    return 1;
}

static int l_keep_fds(lua_State *L) {
    memset(keep, 0, sizeof keep);
    for (int fd = 0; fd < KEEP_MAX; fd++)
        if (fcntl(fd, F_GETFD) != -1) keep[fd / 8] |= (unsigned char)(1u << (fd % 8));
    keep_taken = 1;
    lua_pushboolean(L, 1);
    return 1;
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    int saved = errno;
    unsigned char rec[2];
    rec[0] = (unsigned char)sig;
    rec[1] = (unsigned char)(si && (si->si_code == SI_USER || si->si_code == SI_QUEUE));
    if (sig_pipe[1] >= 0) {
        ssize_t w = write(sig_pipe[1], rec, 2);
        (void)w; /* a full pipe loses the record; SIGCHLD is also found by polling wait() */
    }
    errno = saved;
}

static int l_signals(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)lua_rawlen(L, 1);
    int sigs[NSIG];
    int k = 0;
    for (int i = 1; i <= n && k < NSIG - 1; i++) {
        lua_rawgeti(L, 1, i);
        int s = checksig(L, lua_gettop(L));
        luaL_argcheck(L, s != SIGKILL && s != SIGSTOP, 1, "SIGKILL and SIGSTOP cannot be caught");
        sigs[k++] = s;
        lua_pop(L, 1);
    }
    sigs[k++] = SIGCHLD;
    if (sig_pipe[0] < 0) {
        if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
            int e = errno;
            lua_pushnil(L);
            lua_pushfstring(L, "ESYSTEM: pipe: %s", strerror(e));
            lua_pushinteger(L, e);
            return 3;
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < k; i++) {
        if (sigaction(sigs[i], &sa, NULL) == 0) caught[sigs[i]] = 1;
    }
    lua_pushinteger(L, sig_pipe[0]);
    return 1;
}

static int l_restore(lua_State *L) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int s = 1; s < NSIG; s++) {
        if (caught[s]) {
            sigaction(s, &sa, NULL);
            caught[s] = 0;
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int l_read_signals(lua_State *L) {
    lua_newtable(L);
    if (sig_pipe[0] < 0) return 1;
    unsigned char buf[256];
    int n = 0;
    for (;;) {
        ssize_t r = read(sig_pipe[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i + 1 < r; i += 2) {
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, buf[i]);
            lua_setfield(L, -2, "sig");
            const char *name = signame(buf[i]);
            lua_pushstring(L, name ? name : "?");
            lua_setfield(L, -2, "name");
            lua_pushboolean(L, buf[i + 1]);
            lua_setfield(L, -2, "user");
            lua_rawseti(L, -2, ++n);
        }
    }
    return 1;
}

/* Mark every fd that was not open at keep_fds() close-on-exec. */
static void cloexec_new_fds(void) {
    if (!keep_taken) return;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd < 3 || fd == dfd) continue;
        if (fd < KEEP_MAX && (keep[fd / 8] & (1u << (fd % 8)))) continue;
        int fl = fcntl((int)fd, F_GETFD);
        if (fl != -1 && !(fl & FD_CLOEXEC)) fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC);
    }
    closedir(d);
}

static int sys_fail(lua_State *L, const char *what, int e) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", what, strerror(e));
    lua_pushinteger(L, e);
    return 3;
}

/* argv (stack 1) and env additions (stack 2) as C arrays, in memory the Lua stack anchors (left
 * on the stack); built before fork, so the child allocates nothing. */
static void build_exec(lua_State *L, const char ***argvp, const char ***envpp) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int argc = (int)lua_rawlen(L, 1);
    luaL_argcheck(L, argc > 0, 1,
                  "expected a non-empty array of strings (the command and its arguments)");
    if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
    /* everything the child needs, built before fork in memory the GC owns */
    const char **argv = lua_newuserdatauv(L, (size_t)(argc + 1) * sizeof *argv, 0);
    int argv_idx = lua_gettop(L);
    lua_newtable(L); /* anchors the strings */
    int anchor = lua_gettop(L);
    for (int i = 0; i < argc; i++) {
        lua_rawgeti(L, 1, i + 1);
        if (lua_type(L, -1) != LUA_TSTRING) luaL_argerror(L, 1, "expected an array of strings");
        argv[i] = lua_tostring(L, -1);
        lua_rawseti(L, anchor, i + 1);
    }
    argv[argc] = NULL;
    int nadd = 0;
    if (lua_istable(L, 2)) {
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                luaL_argerror(L, 2, "expected a table of string names to string values");
            const char *k = lua_tostring(L, -2);
            if (!*k || strchr(k, '='))
                luaL_argerror(L, 2, "environment names must be non-empty, without '='");
            lua_pushfstring(L, "%s=%s", k, lua_tostring(L, -1));
            lua_rawseti(L, anchor, argc + (++nadd));
            lua_pop(L, 1);
        }
    }
    int nenv = 0;
    while (environ && environ[nenv])
        nenv++;
    const char **envp = lua_newuserdatauv(L, (size_t)(nenv + nadd + 1) * sizeof *envp, 0);
    int m = 0;
    for (int i = 0; i < nenv; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t klen = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        int replaced = 0;
        for (int j = 1; j <= nadd && !replaced; j++) {
            lua_rawgeti(L, anchor, argc + j);
            const char *kv = lua_tostring(L, -1);
            if (strncmp(kv, environ[i], klen) == 0 && kv[klen] == '=') replaced = 1;
            lua_pop(L, 1);
        }
        if (!replaced) envp[m++] = environ[i];
    }
    for (int j = 1; j <= nadd; j++) {
        lua_rawgeti(L, anchor, argc + j);
        envp[m++] = lua_tostring(L, -1); /* anchored in the table */
        lua_pop(L, 1);
    }
    envp[m] = NULL;
    (void)argv_idx;
    *argvp = argv;
    *envpp = envp;
}

static int l_spawn(lua_State *L) {
    const char **argv, **envp;
    build_exec(L, &argv, &envp);
    cloexec_new_fds();
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) != 0) return sys_fail(L, "ESYSTEM: pipe", errno);
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old); /* no handler runs in the child between fork and exec */
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigemptyset(&sa.sa_mask);
        for (int s = 1; s < NSIG; s++)
            if (caught[s] || s == SIGPIPE) sigaction(s, &sa, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(errp[0]);
        execvpe(argv[0], (char *const *)argv, (char *const *)envp);
        int e = errno;
        ssize_t w = write(errp[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(errp[1]);
    if (pid < 0) {
        close(errp[0]);
        return sys_fail(L, "ESYSTEM: fork", fork_errno);
    }
    int child_errno = 0;
    ssize_t r;
    do {
        r = read(errp[0], &child_errno, sizeof child_errno);
    } while (r < 0 && errno == EINTR);
    close(errp[0]);
    if (r == (ssize_t)sizeof child_errno) {
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", argv[0], strerror(child_errno));
        lua_pushinteger(L, child_errno);
        return 3;
    }
    lua_pushinteger(L, pid);
    return 1;
}

static int l_wait(lua_State *L) {
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    int st;
    pid_t r;
    do {
        r = waitpid(pid, &st, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return 0;
    if (r < 0) return sys_fail(L, "ESYSTEM: waitpid", errno);
    if (WIFEXITED(st)) {
        lua_pushliteral(L, "exited");
        lua_pushinteger(L, WEXITSTATUS(st));
    } else if (WIFSIGNALED(st)) {
        lua_pushliteral(L, "signaled");
        lua_pushinteger(L, WTERMSIG(st));
    } else {
        return 0; /* stopped or continued: still there */
    }
    return 2;
}

static int l_kill(lua_State *L) {
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    luaL_argcheck(L, pid > 0, 1, "expected a process id > 0");
    int sig = checksig(L, 2);
    if (kill(pid, sig) != 0) return sys_fail(L, "ESYSTEM: kill", errno);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---------------------------------------------------------------- the keeper
 *
 * proc.tree(argv, env, tty) forks a keeper, which forks the command in a process group of its own
 * (the terminal's foreground group when tty is a terminal fd) and stays its parent:
 *
 *   zklock --ctl socket--> keeper (child subreaper) --> command (pgid = its pid) --> ...
 *          <--st pipe-----
 *
 * The keeper is a child subreaper, so every descendant that leaves the command (a daemon, a
 * double fork, a new session) is re-parented to it, never to init: "the command's tree" is the
 * keeper's descendants. zklock writes one byte per request on ctl: a signal number (sent to the
 * command's process group) or TREE_KILL (SIGKILL to the group and to every descendant, repeated
 * until none is left). End of file on ctl (zklock exited, or was killed with kill -9) is a
 * TREE_KILL (the ctl end is a socket so that a request after the keeper is gone is an EPIPE,
 * not a SIGPIPE). When the command exits the keeper writes its wait status on st, kills what it
 * left behind (nothing may run on after the lock is given back), and exits once it has no child
 * left: zklock learns that the whole tree is dead when the keeper exits.
 *
 * The keeper is forked from a process with threads (the ZooKeeper client's): it calls only
 * async-signal-safe functions (raw syscalls, no stdio, no malloc) and never returns to Lua. */
#define TREE_KILL 0xFF

static void keeper_close_fds(int k1, int k2, int k3) {
    int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    char buf[4096];
    int fds[1024], n = 0;
    for (;;) {
        long r = syscall(SYS_getdents64, dfd, buf, sizeof buf);
        if (r <= 0) break;
        for (long off = 0; off < r;) {
            struct zkl_lua_dirent64 *d = (struct zkl_lua_dirent64 *)(buf + off);
            off += d->d_reclen;
            long fd = zkl_lua_digits_of(d->d_name, NULL);
            if (fd > 2 && fd != dfd && fd != k1 && fd != k2 && fd != k3 && n < 1024)
                fds[n++] = (int)fd;
        }
    }
    close(dfd);
    /* what zklock opened after keep_fds (the ZooKeeper socket, epoll, the signal pipe) is
     * close-on-exec: the keeper has no use for it; the fds the command inherits stay */
    for (int i = 0; i < n; i++) {
        int fl = fcntl(fds[i], F_GETFD);
        if (fl != -1 && (fl & FD_CLOEXEC)) close(fds[i]);
    }
}

static void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        c += w;
        n -= (size_t)w;
    }
}

static void keeper_main(int ctl, int st, int errw, const char **argv, const char **envp, int tty) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (caught[s]) sigaction(s, &sa, NULL);
    /* only zklock (the ctl pipe) and SIGKILL end the keeper: not the terminal's signals to
     * zklock's group, not a write to a closed pipe, not a background tcsetpgrp */
    sa.sa_handler = SIG_IGN;
    static const int ignored[] = {SIGINT,  SIGQUIT, SIGHUP,  SIGTERM, SIGUSR1,
                                  SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU};
    enum { NIGN = sizeof ignored / sizeof *ignored };
    struct sigaction orig[NIGN]; /* what the command gets back (nohup's ignored HUP stays) */
    for (size_t i = 0; i < NIGN; i++)
        sigaction(ignored[i], &sa, &orig[i]);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    keeper_close_fds(ctl, st, errw);
    sigset_t chld, none;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &chld, NULL); /* SIGCHLD through the signalfd only */
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    pid_t c = fork();
    if (c == 0) {
        setpgid(0, 0);
        if (tty >= 0) tcsetpgrp(tty, getpid()); /* SIGTTOU is ignored here still */
        for (size_t i = 0; i < NIGN; i++)
            sigaction(ignored[i], &orig[i], NULL); /* default after caught[] above */
        sa.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &sa, NULL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvpe(argv[0], (char *const *)argv, (char *const *)envp);
        int e = errno;
        write_all(errw, &e, sizeof e);
        _exit(127);
    }
    if (c < 0) {
        int e = errno;
        write_all(errw, &e, sizeof e);
        _exit(127);
    }
    setpgid(c, c); /* both sides: whichever runs first, the group exists before it is used */
    if (tty >= 0) tcsetpgrp(tty, c);
    close(errw);
    unsigned char rec[1 + sizeof(int)];
    int v = (int)c;
    rec[0] = 'P';
    memcpy(rec + 1, &v, sizeof v);
    write_all(st, rec, sizeof rec);
    int child_done = 0, dying = 0;
    for (;;) {
        for (;;) {
            int status;
            pid_t w = waitpid(-1, &status, WNOHANG);
            if (w > 0) {
                if (w == c && !child_done) {
                    child_done = 1;
                    dying = 1; /* what the command left behind goes with it */
                    if (tty >= 0) tcsetpgrp(tty, getpgrp());
                    rec[0] = 'X';
                    memcpy(rec + 1, &status, sizeof status);
                    write_all(st, rec, sizeof rec);
                }
                continue;
            }
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && errno == ECHILD && (child_done || dying)) _exit(0);
            break;
        }
        /* the group only while the command is unreaped: once it is, its pid (and group id) may
         * be reused, and every member left of its group is a descendant, found by the walk */
        if (dying) zkl_lua_kill_tree(getpid(), child_done ? 0 : c);
        struct pollfd p[2] = {{ctl, POLLIN, 0}, {sfd, POLLIN, 0}};
        /* while killing: look again soon (a process forked just before the kill is
         * re-parented here once its parent is gone) */
        int pr = poll(p, 2, dying ? 10 : -1);
        if (pr < 0) continue;
        if (p[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) > 0) {
            }
        }
        if (ctl >= 0 && p[0].revents) {
            unsigned char b[64];
            ssize_t r = read(ctl, b, sizeof b);
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                close(ctl); /* zklock is gone: nothing of the command may outlive it */
                ctl = -1;
                dying = 1;
            }
            for (ssize_t i = 0; i < r; i++) {
                if (b[i] == TREE_KILL)
                    dying = 1;
                else if (!dying)
                    kill(-c, b[i]);
            }
        }
    }
}

/* SIGKILL every descendant of this process and reap them, until none is left or 5 s passed */
static int kill_orphans(void) {
    for (int i = 0; i < 500; i++) {
        int st;
        pid_t w;
        do {
            errno = 0;
            w = waitpid(-1, &st, WNOHANG);
        } while (w > 0 || (w < 0 && errno == EINTR));
        if (zkl_lua_kill_tree(getpid(), 0) == 0) return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* proc.tree(argv, env, tty) -> keeper pid, command pid, ctl fd, st fd | nil, msg, errno */
static int l_tree(lua_State *L) {
    const char **argv, **envp;
    int tty = (int)luaL_optinteger(L, 3, -1);
    build_exec(L, &argv, &envp);
    cloexec_new_fds();
    int errp[2], ctl[2], st[2];
    if (pipe2(errp, O_CLOEXEC) != 0) return sys_fail(L, "ESYSTEM: pipe", errno);
    /* a socket, not a pipe: a request sent after the keeper is gone fails with EPIPE
     * (MSG_NOSIGNAL) instead of killing zklock with SIGPIPE */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0) {
        int e = errno;
        close(errp[0]), close(errp[1]);
        return sys_fail(L, "ESYSTEM: socketpair", e);
    }
    if (pipe2(st, O_CLOEXEC) != 0) {
        int e = errno;
        close(errp[0]), close(errp[1]), close(ctl[0]), close(ctl[1]);
        return sys_fail(L, "ESYSTEM: pipe", e);
    }
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old); /* no Lua handler runs in the keeper */
    pid_t k = fork();
    if (k == 0) {
        close(errp[0]), close(ctl[1]), close(st[0]);
        keeper_main(ctl[0], st[1], errp[1], argv, envp, tty);
        _exit(70);
    }
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(errp[1]), close(ctl[0]), close(st[1]);
    if (k < 0) {
        close(errp[0]), close(ctl[1]), close(st[0]);
        return sys_fail(L, "ESYSTEM: fork", fork_errno);
    }
    unsigned char rec[1 + sizeof(int)];
    size_t got = 0;
    while (got < sizeof rec) {
        ssize_t r = read(st[0], rec + got, sizeof rec - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    int child_errno = 0;
    ssize_t r;
    do {
        r = read(errp[0], &child_errno, sizeof child_errno);
    } while (r < 0 && errno == EINTR);
    close(errp[0]);
    if (r == (ssize_t)sizeof child_errno || got < sizeof rec) {
        int stt;
        close(ctl[1]);
        close(st[0]);
        while (waitpid(k, &stt, 0) < 0 && errno == EINTR) {
        }
        if (r != (ssize_t)sizeof child_errno) {
            /* the keeper died before it told the command's pid: the command may run already,
             * re-parented here (proc.subreaper): kill and reap every descendant, bounded */
            child_errno = ECHILD;
            kill_orphans();
        }
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", argv[0], strerror(child_errno));
        lua_pushinteger(L, child_errno);
        return 3;
    }
    int cpid;
    memcpy(&cpid, rec + 1, sizeof cpid);
    fcntl(st[0], F_SETFL, fcntl(st[0], F_GETFL) | O_NONBLOCK);
    lua_pushinteger(L, k);
    lua_pushinteger(L, cpid);
    lua_pushinteger(L, ctl[1]);
    lua_pushinteger(L, st[0]);
    return 4;
}

/* proc.tree_send(ctl, sig | "KILL_TREE") -> true | nil, msg, errno */
static int l_tree_send(lua_State *L) {
    int fd = (int)luaL_checkinteger(L, 1);
    unsigned char b;
    if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "KILL_TREE") == 0)
        b = TREE_KILL;
    else
        b = (unsigned char)checksig(L, 2);
    ssize_t w;
    do {
        w = send(fd, &b, 1, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w != 1) return sys_fail(L, "ESYSTEM: send", errno); /* EPIPE: the keeper is gone */
    lua_pushboolean(L, 1);
    return 1;
}

/* proc.tree_status(st) -> nil (still running) | "exited", n | "signaled", n */
static int l_tree_status(lua_State *L) {
    int fd = (int)luaL_checkinteger(L, 1);
    unsigned char rec[1 + sizeof(int)];
    ssize_t r;
    do {
        r = read(fd, rec, sizeof rec);
    } while (r < 0 && errno == EINTR);
    if (r != (ssize_t)sizeof rec || rec[0] != 'X') return 0;
    int status;
    memcpy(&status, rec + 1, sizeof status);
    if (WIFEXITED(status)) {
        lua_pushliteral(L, "exited");
        lua_pushinteger(L, WEXITSTATUS(status));
    } else {
        lua_pushliteral(L, "signaled");
        lua_pushinteger(L, WTERMSIG(status));
    }
    return 2;
}

static int l_close(lua_State *L) {
    close((int)luaL_checkinteger(L, 1));
    return 0;
}

/* proc.subreaper() -> true | nil, msg: orphaned descendants are re-parented to this process */
static int l_subreaper(lua_State *L) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) return sys_fail(L, "ESYSTEM: prctl", errno);
    lua_pushboolean(L, 1);
    return 1;
}

/* proc.foreground_tty() -> 0 when stdin is a terminal whose foreground group is ours, else nil.
 * Then SIGTTOU is ignored here until proc.restore(): with the command's group in the foreground
 * a warning zklock writes to the terminal must not stop zklock (`stty tostop`), nor may taking
 * the terminal back. */
static int l_foreground_tty(lua_State *L) {
    if (!isatty(0) || tcgetpgrp(0) != getpgrp()) return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTTOU, &sa, NULL) == 0) caught[SIGTTOU] = 1; /* restore(): default again */
    lua_pushinteger(L, 0);
    return 1;
}

/* proc.kill_tree([pgid]) -> n: SIGKILL to the group (pgid nil or 0: no group) and to every
 * descendant of this process (a subreaper's orphans included); n signalled, zombies too (reap
 * them, then call again until 0). A group whose leader was reaped may be another's by now: pass
 * none then (its members are descendants anyway).
 * proc.reap() -> n: the children that had ended, reaped. */
static int l_kill_tree(lua_State *L) {
    pid_t pgid = (pid_t)luaL_optinteger(L, 1, 0);
    luaL_argcheck(L, pgid == 0 || pgid > 1, 1,
                  "expected a process group id > 1, or 0/nil for none");
    lua_pushinteger(L, zkl_lua_kill_tree(getpid(), pgid));
    return 1;
}

static int l_reap(lua_State *L) {
    int n = 0, st;
    pid_t w;
    while ((w = waitpid(-1, &st, WNOHANG)) > 0 || (w < 0 && errno == EINTR))
        if (w > 0) n++;
    lua_pushinteger(L, n);
    return 1;
}

/* proc.take_tty(fd): make this process's group the terminal's foreground group again */
static int l_take_tty(lua_State *L) {
    int fd = (int)luaL_checkinteger(L, 1);
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    sigprocmask(SIG_BLOCK, &ttou, &old); /* a background group may do this with SIGTTOU blocked */
    int rc = tcsetpgrp(fd, getpgrp());
    sigprocmask(SIG_SETMASK, &old, NULL);
    lua_pushboolean(L, rc == 0);
    return 1;
}

/* proc.kill_group(pgid, sig) -> true | nil, msg, errno */
static int l_kill_group(lua_State *L) {
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    luaL_argcheck(L, pid > 1, 1, "expected a process group id > 1");
    int sig = checksig(L, 2);
    if (kill(-pid, sig) != 0) return sys_fail(L, "ESYSTEM: kill", errno);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_getpid(lua_State *L) {
    lua_pushinteger(L, getpid());
    return 1;
}

static const luaL_Reg proc_funcs[] = {{"keep_fds", l_keep_fds},
                                      {"signals", l_signals},
                                      {"read_signals", l_read_signals},
                                      {"restore", l_restore},
                                      {"spawn", l_spawn},
                                      {"wait", l_wait},
                                      {"kill", l_kill},
                                      {"signum", l_signum},
                                      {"signame", l_signame},
                                      {"getpid", l_getpid},
                                      {"tree", l_tree},
                                      {"tree_send", l_tree_send},
                                      {"tree_status", l_tree_status},
                                      {"close", l_close},
                                      {"kill_group", l_kill_group},
                                      {"kill_tree", l_kill_tree},
                                      {"reap", l_reap},
                                      {"subreaper", l_subreaper},
                                      {"foreground_tty", l_foreground_tty},
                                      {"take_tty", l_take_tty},
                                      {NULL, NULL}};

void zkl_lua_proc_register(lua_State *L) {
    lua_newtable(L);
    luaL_setfuncs(L, proc_funcs, 0);
    lua_setfield(L, -2, "proc");
}
