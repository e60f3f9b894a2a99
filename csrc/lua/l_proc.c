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
 *
 * Signal handlers do only write(2) on the pipe (async-signal-safe, errno saved). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lzklock.h"

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

static int l_spawn(lua_State *L) {
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
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_argerror(L, 1, "expected an array of strings");
        argv[i] = lua_tostring(L, -1);
        lua_rawseti(L, anchor, i + 1);
    }
    argv[argc] = NULL;
    int nadd = 0;
    if (lua_istable(L, 2)) {
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                return luaL_argerror(L, 2, "expected a table of string names to string values");
            const char *k = lua_tostring(L, -2);
            if (!*k || strchr(k, '='))
                return luaL_argerror(L, 2, "environment names must be non-empty, without '='");
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
                                      {NULL, NULL}};

void zkl_lua_proc_register(lua_State *L) {
    lua_newtable(L);
    luaL_setfuncs(L, proc_funcs, 0);
    lua_setfield(L, -2, "proc");
}
