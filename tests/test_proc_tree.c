/* test_proc_tree.c - zkl_lua_kill_tree (csrc/lua/proc_tree.c) when a pid passes to another process
 * during the walk.
 *
 * In a pid namespace of its own (with a user namespace when not root) the test is pid 1 and
 * can choose the next pid (/proc/sys/kernel/ns_last_pid), so the race is made certain: the walk
 * sees child A and stops it; then (the between seam) A is killed and reaped, and child B is
 * forked with A's pid, as an unrelated process could be. The kill that follows must spare B:
 * with pidfds it does (A's pidfd names A, which is gone); the same run with signals by pid (the
 * fallback, forced) kills B, which shows the case is real and the check can fail. The same for
 * a remembered parent whose pid passes to another process between two passes of the walk: that
 * process's child must not be taken for a descendant (see reused_parent_harmed). Also: a tree of
 * three generations is killed whole, and a remembered child that ends is not counted, and a tree
 * larger than RLIMIT_NOFILE is killed whole by one call.
 * Exit 0: passed; 1: failed; 77: skipped (no namespaces here), or no pidfds here (an old kernel,
 * valgrind) and only the fallback checked, which --no-pidfd-ok (the valgrind run) makes a pass. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_tree.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static pid_t spawn_idle(void) {
    pid_t p = fork();
    if (p == 0) {
        for (int i = 0; i < 600; i++) /* bounded: 60 s at most should the test die */
            usleep(100 * 1000);
        _exit(0);
    }
    return p;
}

/* the next fork in this pid namespace gets pid */
static int next_pid_is(pid_t pid) {
    int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char b[32];
    int n = snprintf(b, sizeof b, "%d", (int)pid - 1);
    int ok = write(fd, b, (size_t)n) == n;
    close(fd);
    return ok ? 0 : -1;
}

/* 1 when child pid ends (and is reaped) within 2 s: a SIGKILL sent takes effect well within
 * that, also on a busy machine; one never sent lets the child run on */
static int ends_soon(pid_t pid) {
    for (int i = 0; i < 200; i++) {
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD)) return 1;
        usleep(10 * 1000);
    }
    return 0;
}

static void reap_all(void) {
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {
    }
}

struct swap {
    pid_t a, b;
    int reused;
};

/* the seam: the walk has stopped A; A ends, is reaped, and B takes its pid */
static void swap_pid(void *ud, int pass) {
    struct swap *s = ud;
    if (pass != 0) return;
    kill(s->a, SIGKILL);
    waitpid(s->a, NULL, 0);
    if (next_pid_is(s->a) != 0) return;
    s->b = spawn_idle();
    s->reused = s->b == s->a;
}

/* -> 1 when B (A's pid, forked after the walk) was killed */
static int reused_pid_killed(int *count) {
    struct swap s = {spawn_idle(), -1, 0};
    *count = zkl_lua_kill_tree_between(getpid(), 0, swap_pid, &s);
    CHECK(s.reused, "the next pid could not be set to %d (got %d)", (int)s.a, (int)s.b);
    int killed = s.b > 0 && ends_soon(s.b);
    if (s.b > 0) kill(s.b, SIGKILL);
    reap_all();
    return killed;
}

/* the state letter in /proc/<pid>/stat ('S', 'T', 'Z', ...), or 0 when there is no such process */
static char proc_state(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) return 0;
    buf[r] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

/* The second case: a remembered parent's pid reused. S (a child of pid 1) calls kill_tree;
 * its first pass remembers S's child A. Then (the seam, after pass 1) A ends and is reaped, pid 1
 * forks B with A's pid, and B forks C: C's parent pid is A's, but C descends from pid 1, not
 * from S. The next pass must not take C for A's child. */
struct parent_swap {
    pid_t a, c;
    int ask, told; /* S -> pid 1: A's pid; B -> S: C's pid */
};

static void swap_parent(void *ud, int pass) {
    struct parent_swap *s = ud;
    if (pass != 1) return;
    kill(s->a, SIGKILL);
    waitpid(s->a, NULL, 0);
    if (write(s->ask, &s->a, sizeof s->a) != sizeof s->a) return;
    if (read(s->told, &s->c, sizeof s->c) != sizeof s->c) s->c = -1;
}

/* in S -> 1 when C was stopped or killed, 0 when it ran on; 2 when the case was not made */
static int kill_from_s(int ask, int told) {
    struct parent_swap s = {spawn_idle(), -1, ask, told};
    zkl_lua_kill_tree_between(getpid(), 0, swap_parent, &s);
    if (s.c <= 0) return 2;
    for (int i = 0; i < 200; i++) { /* 2 s for a SIGKILL sent to take effect */
        char st = proc_state(s.c);
        if (st == 0 || st == 'Z' || st == 'T' || st == 't') return 1;
        usleep(10 * 1000);
    }
    return 0;
}

/* -> 1 when C was harmed */
static int reused_parent_harmed(void) {
    int ask[2], told[2];
    if (pipe(ask) != 0 || pipe(told) != 0) {
        CHECK(0, "pipe: %s", strerror(errno));
        return 0;
    }
    pid_t s = fork();
    if (s == 0) {
        close(ask[0]), close(told[1]);
        _exit(kill_from_s(ask[1], told[0]));
    }
    close(ask[1]), close(told[0]);
    pid_t a = -1, b = -1;
    if (s > 0 && read(ask[0], &a, sizeof a) == sizeof a && next_pid_is(a) == 0) {
        b = fork();
        if (b == 0) {
            pid_t c = spawn_idle();
            if (write(told[1], &c, sizeof c) != sizeof c) _exit(1);
            for (int i = 0; i < 600; i++)
                usleep(100 * 1000);
            _exit(0);
        }
    }
    close(told[1]);
    CHECK(b > 0 && b == a, "B did not get A's pid %d (got %d)", (int)a, (int)b);
    int st = 0;
    if (s > 0) waitpid(s, &st, 0);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 3;
    CHECK(rc < 2, "the case was not made (S: %d)", rc);
    if (b > 0) kill(b, SIGKILL); /* C, re-parented here, goes next */
    for (int i = 0; i < 100 && waitpid(-1, NULL, WNOHANG) >= 0; i++) {
        zkl_lua_kill_tree(getpid(), 0);
        usleep(10 * 1000);
    }
    reap_all();
    close(ask[0]);
    return rc == 1;
}

static void test_tree(void) {
    /* child -> grandchild -> great-grandchild, then kill_tree until nothing is left */
    pid_t c = fork();
    if (c == 0) {
        if (fork() == 0) {
            spawn_idle();
            for (int i = 0; i < 600; i++)
                usleep(100 * 1000);
            _exit(0);
        }
        for (int i = 0; i < 600; i++)
            usleep(100 * 1000);
        _exit(0);
    }
    int seen = 0;
    for (int i = 0; i < 200 && seen < 3; i++) { /* wait (bounded) for the three to exist */
        seen = 0;
        for (pid_t p = c; p < c + 10; p++)
            if (kill(p, 0) == 0) seen++;
        usleep(10 * 1000);
    }
    CHECK(seen == 3, "three generations expected, %d found", seen);
    int first = zkl_lua_kill_tree(getpid(), 0);
    CHECK(first == 3, "kill_tree signalled %d, 3 expected", first);
    int rounds = 0;
    for (; rounds < 500; rounds++) { /* as the keeper does: reap, call again until 0 */
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        if (zkl_lua_kill_tree(getpid(), 0) == 0) break;
        usleep(10 * 1000);
    }
    CHECK(rounds < 500, "the tree was not gone after 500 rounds");
    for (pid_t p = c; p < c + 10; p++)
        CHECK(kill(p, 0) != 0, "pid %d outlived kill_tree", (int)p);
    reap_all();
}

/* A tree larger than RLIMIT_NOFILE: one call must still stop and kill all of it. The pidfds the
 * walk holds must not take the fds it needs to read /proc (it would then miss the rest). */
static void test_fd_limit(void) {
    enum { KIDS = 64, LIMIT = 32 };
    struct rlimit old, low;
    if (getrlimit(RLIMIT_NOFILE, &old) != 0) return;
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++)
        kids[i] = spawn_idle();
    low = old;
    low.rlim_cur = LIMIT;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit: %s", strerror(errno));
    int n = zkl_lua_kill_tree(getpid(), 0);
    setrlimit(RLIMIT_NOFILE, &old);
    CHECK(n == KIDS, "fd limit %d: one call signalled %d of %d", LIMIT, n, KIDS);
    int left = 0;
    for (int i = 0; i < KIDS; i++)
        if (!ends_soon(kids[i])) left++;
    CHECK(left == 0, "fd limit %d: %d of %d children outlived one kill_tree", LIMIT, left, KIDS);
    while (zkl_lua_kill_tree(getpid(), 0) > 0) /* what is left (a failure), gone before the rest */
        reap_all();
    reap_all();
}

static int no_pidfd_ok; /* --no-pidfd-ok: without pidfds, check the fallback and pass */

static int in_namespace(void) {
    /* /proc of this pid namespace, on a private mount */
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
        fprintf(stderr, "SKIP: cannot mount /proc in a new namespace: %s\n", strerror(errno));
        return 77;
    }
    long fd = syscall(SYS_pidfd_open, getpid(), 0);
    int pidfds = fd >= 0, why = errno;
    if (pidfds)
        close((int)fd);
    else
        zkl_lua_tree_pidfd = 0;

    test_tree();
    test_fd_limit();

    int count, killed;
    if (pidfds) {
        killed = reused_pid_killed(&count);
        CHECK(!killed, "pidfds: the process that took a remembered pid was killed");
        CHECK(count == 0, "pidfds: %d signalled, 0 expected (the remembered one had ended)", count);
        CHECK(zkl_lua_tree_pidfd == 1, "pidfds were given up");
        CHECK(!reused_parent_harmed(),
              "pidfds: the child of a remembered parent's pid's new owner was "
              "taken for a descendant");
    }
    zkl_lua_tree_pidfd = 0; /* the fallback, by pid: the same case kills the wrong process */
    killed = reused_pid_killed(&count);
    CHECK(killed, "by pid: the process that took the pid survived; the case was not made");
    CHECK(count == 1, "by pid: %d signalled, 1 expected", count);
    CHECK(reused_parent_harmed(), "by pid: the child of the reused parent pid was spared; the "
                                  "case was not made");
    zkl_lua_tree_pidfd = 1;

    if (!pidfds && !failures) {
        printf("no pidfd_open here (%s): the fallback by pid checked\n", strerror(why));
        fflush(stdout);
        return no_pidfd_ok ? 0 : 77;
    }
    printf("%s\n", failures ? "FAILED" : "ok");
    fflush(stdout);
    return failures ? 1 : 0;
}

static void write_file(const char *path, const char *s) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (write(fd, s, strlen(s)) < 0) {
    }
    close(fd);
}

/* fork, run f in the child, wait -> its exit status (1 when it died of a signal) */
static int in_child(int (*f)(void)) {
    pid_t p = fork();
    if (p < 0) {
        perror("fork");
        return 1;
    }
    if (p == 0) _exit(f());
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "FAIL: the test died of signal %d\n", WTERMSIG(st));
        return 1;
    }
    return WEXITSTATUS(st);
}

/* in a child (the process that unshares a pid namespace cannot fork again once the
 * namespace's pid 1 has ended; main must stay able to, for LeakSanitizer at exit) */
static int unshared(void) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    int flags = CLONE_NEWPID | CLONE_NEWNS;
    if (unshare(flags) != 0) {
        if (unshare(flags | CLONE_NEWUSER) != 0) {
            fprintf(stderr, "SKIP: no pid namespace for this user: %s\n", strerror(errno));
            return 77;
        }
        char map[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
        write_file("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
        write_file("/proc/self/gid_map", map);
    }
    return in_child(in_namespace); /* pid 1 of the new namespace */
}

int main(int argc, char **argv) {
    no_pidfd_ok = argc > 1 && strcmp(argv[1], "--no-pidfd-ok") == 0;
    return in_child(unshared);
}
