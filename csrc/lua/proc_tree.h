/* proc_tree.h - killing a process's descendants (l_proc.c's keeper and proc.kill_tree), apart
 * from the Lua binding so that tests/test_proc_tree.c can drive it without Lua. Linux only;
 * async-signal-safe (raw syscalls, no stdio, no malloc): the keeper calls it after a fork from
 * a process with threads. */
#ifndef ZKL_PROC_TREE_H
#define ZKL_PROC_TREE_H

#include <sys/types.h>

/* a directory entry as getdents64 returns it */
struct zkl_lua_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* the decimal number p starts with (end: where it stops), or -1 when p starts with no digit */
long zkl_lua_digits_of(const char *p, const char **end);

/* SIGKILL to the group pgid (0: none) and to every process descended from self -> how many
 * were signalled (zombies too). See proc_tree.c. */
int zkl_lua_kill_tree(pid_t self, pid_t pgid);

/* Test seams (tests/test_proc_tree.c). zkl_lua_kill_tree_between: zkl_lua_kill_tree, calling
 * between(ud, pass) after each pass over /proc (pass 1, 2, ...) and between(ud, 0) once the walk
 * has stopped and remembered the tree, before any SIGKILL.
 * zkl_lua_tree_pidfd: 1 (the start) while pidfds are used; 0 sends every signal by pid, as
 * where the kernel has none (set by pidfd_open's first ENOSYS or EPERM; a test sets it to see
 * the difference). */
int zkl_lua_kill_tree_between(pid_t self, pid_t pgid, void (*between)(void *, int), void *ud);
extern int zkl_lua_tree_pidfd;

#endif
