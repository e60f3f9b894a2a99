/* proc_tree.c - SIGKILL to every descendant of a process, found in /proc (see proc_tree.h).
 *
 * Each signal goes through a pidfd (pidfd_open and pidfd_send_signal, Linux 5.3) opened when the
 * walk finds the process: a pidfd names one process, never its pid's next owner, so a process
 * that ends during the walk is skipped (its pidfd answers ESRCH) and the process that may have
 * taken its pid meanwhile is left alone. Without pidfds (an older kernel: ENOSYS; a seccomp
 * filter that refuses the call: EPERM), or with no fd to spare for one (EMFILE, ENFILE, or
 * fewer than TREE_FD_SPARE left: the walk needs some to read /proc), the signal
 * goes by pid as it did before pidfds: a process remembered by pid that ends and is reaped
 * before its SIGKILL (reaped at once by a parent that ignores SIGCHLD, or by a parent still
 * running when the walk saw the child) frees its pid, and a process that takes that pid within
 * the walk's few milliseconds would be killed in its place.
 *
 * Raw syscalls only (no stdio, no malloc): the keeper (l_proc.c) calls this after a fork from a
 * process with threads. */
#define _GNU_SOURCE
#include "proc_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* glibc has wrappers only from 2.36; the numbers are the same on every Linux architecture */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

int zkl_lua_tree_pidfd = 1;

/* descendants one call remembers (not a bound on the host's processes: see zkl_lua_kill_tree) */
#define TREE_MAX 32768
static pid_t tree_pid[TREE_MAX];
static int tree_fd[TREE_MAX]; /* its pidfd, or -1: signalled by pid */

/* fds the walk keeps free of pidfds: one for /proc, one for a /proc/<pid>/stat, and a margin. A
 * pidfd that would leave fewer is closed and its process signalled by pid: otherwise the pidfds
 * of a tree larger than RLIMIT_NOFILE would take every fd, and the walk, unable to read /proc,
 * would miss the rest of the tree (neither stopped nor killed by this call). */
#define TREE_FD_SPARE 8
static long tree_fd_limit; /* RLIMIT_NOFILE's soft limit at the call's start (0: unknown) */

long zkl_lua_digits_of(const char *p, const char **end) {
    long v = 0;
    const char *q = p;
    while (*q >= '0' && *q <= '9')
        v = v * 10 + (*q++ - '0');
    if (end) *end = q;
    return q == p ? -1 : v;
}

/* the parent pid in /proc/<name>/stat, or -1 */
static pid_t stat_ppid(const char *name) {
    char path[64] = "/proc/";
    size_t n = 6, k = 0;
    while (name[k] && n < sizeof path - 6)
        path[n++] = name[k++];
    memcpy(path + n, "/stat", 6);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[512];
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) return -1;
    buf[r] = 0;
    char *p = NULL; /* after the last ')': the command name may hold any byte */
    for (ssize_t i = 0; i < r; i++)
        if (buf[i] == ')') p = buf + i;
    if (!p || !p[1] || !p[2] || !p[3]) return -1;
    p += 3; /* ") S " */
    while (*p == ' ')
        p++;
    return (pid_t)zkl_lua_digits_of(p, NULL);
}

static int in_tree(pid_t p, int n) {
    for (int i = 0; i < n; i++)
        if (tree_pid[i] == p) return 1;
    return 0;
}

/* sig to the process fd names (fd >= 0) or to pid -> 1 when sent (a zombie counts) */
static int send_sig(int fd, pid_t pid, int sig) {
    if (fd >= 0) return syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) == 0;
    return kill(pid, sig) == 0;
}

/* Is parent pid pp (read from a stat just before) self or a remembered process? A remembered
 * one counts only while its pidfd says it has not been reaped: once it has, its pid may be
 * another process's, whose children are no descendants (a child of the remembered process itself
 * was re-parented when it died, so it shows another parent). */
static int descends(pid_t pp, pid_t self, int n) {
    if (pp <= 0) return 0;
    if (pp == self) return 1;
    for (int i = 0; i < n; i++)
        if (tree_pid[i] == pp) return tree_fd[i] < 0 || send_sig(tree_fd[i], pp, 0);
    return 0;
}

/* A pidfd for the process the walk saw as pid, a descendant of self (<name> in /proc) ->
 * fd >= 0; -1: signal it by pid (no pidfds, no fd left); -2: skip it (gone, or its pid has
 * passed to a process that is no descendant) */
static int pidfd_for(pid_t pid, const char *name, pid_t self, int n) {
    if (!zkl_lua_tree_pidfd) return -1;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) {
        if (errno == ESRCH) return -2;
        if (errno == ENOSYS || errno == EPERM) zkl_lua_tree_pidfd = 0;
        return -1;
    }
    if (tree_fd_limit > 0 && fd >= tree_fd_limit - TREE_FD_SPARE) {
        close(fd);
        return -1;
    }
    /* the process may have ended between the read of its stat and the open, and its pid passed
     * to another: keep the pidfd only if the process it names descends from self. (Should it end
     * after the open, its pidfd answers ESRCH, whoever then reads as <name>.) */
    if (!descends(stat_ppid(name), self, n)) {
        close(fd);
        return -2;
    }
    return fd;
}

/* Each pass over /proc stops (SIGSTOP) and remembers the processes whose parent is self or one
 * remembered already; passes repeat until one finds nothing new (a child listed before its
 * parent is found a pass later); then every remembered process gets SIGKILL. Stopping first
 * keeps the tree's shape while it is walked: a parent killed during the walk would re-parent its
 * children away (to init, when self is no subreaper) before the walk reached them, and a stopped
 * process cannot fork. Only descendants are remembered, so no number of other processes on the
 * host can hide one. Should more than TREE_MAX descendants be found, those beyond are killed at
 * once without being remembered: their children are re-parented to self (a subreaper) once they
 * die, and the caller's next call finds them. */
int zkl_lua_kill_tree_between(pid_t self, pid_t pgid, void (*between)(void *, int), void *ud) {
    int killed = 0, n = 0;
    unsigned long long rl[2]; /* the kernel's struct rlimit64: soft, hard */
    tree_fd_limit = 0;
    if (syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, rl) == 0 && rl[0] < 0x7fffffffULL)
        tree_fd_limit = (long)rl[0];
    if (pgid > 0 && kill(-pgid, SIGKILL) == 0) killed++;
    char buf[8192];
    for (int grew = 1, pass = 1; grew;) {
        grew = 0;
        int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) break;
        for (;;) {
            long r = syscall(SYS_getdents64, dfd, buf, sizeof buf);
            if (r <= 0) break;
            for (long off = 0; off < r;) {
                struct zkl_lua_dirent64 *d = (struct zkl_lua_dirent64 *)(buf + off);
                off += d->d_reclen;
                const char *end;
                long pid = zkl_lua_digits_of(d->d_name, &end);
                if (pid <= 0 || *end || pid == self || in_tree((pid_t)pid, n)) continue;
                if (!descends(stat_ppid(d->d_name), self, n)) continue;
                int fd = pidfd_for((pid_t)pid, d->d_name, self, n);
                if (fd == -2) continue;
                if (n < TREE_MAX) {
                    send_sig(fd, (pid_t)pid, SIGSTOP);
                    tree_pid[n] = (pid_t)pid;
                    tree_fd[n++] = fd;
                    grew = 1;
                } else {
                    killed += send_sig(fd, (pid_t)pid, SIGKILL);
                    if (fd >= 0) close(fd);
                }
            }
        }
        close(dfd);
        if (between) between(ud, pass++);
    }
    if (between) between(ud, 0);
    for (int i = 0; i < n; i++) {
        killed += send_sig(tree_fd[i], tree_pid[i], SIGKILL);
        if (tree_fd[i] >= 0) close(tree_fd[i]);
    }
    return killed;
}

int zkl_lua_kill_tree(pid_t self, pid_t pgid) {
    return zkl_lua_kill_tree_between(self, pgid, NULL, NULL);
}
