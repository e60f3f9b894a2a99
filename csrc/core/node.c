/* node.c - what every kind that creates nodes needs: paths, fresh protected prefixes, and the
 * container parents of a node (made in one place for the queue, the semaphore's leases and
 * plain creates with ZKL_CREATE_PARENTS). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"

char *zkl__join_path(zkl_client *c, const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = zkl__alloc(c, a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* A fresh "_c_<uuid4>-<token>" (Curator's protected-mode name), or NULL. The UUID's 16 bytes
 * come from a per-client pool that one getrandom() call refills for 256 names: one system
 * call per name was a tenth of an uncontended cycle's. Each byte is used once, so names stay as
 * unique as the kernel's randomness makes them. */
char *zkl__new_prefix(zkl_client *c, const char *token) {
    unsigned char rnd[16];
    char buf[80];
    if (c->rnd_left < sizeof rnd) {
        /* above 256 bytes a signal may cut a read short: keep reading */
        size_t got = 0;
        while (got < sizeof c->rnd_pool) {
            ssize_t n = getrandom(c->rnd_pool + got, sizeof c->rnd_pool - got, 0);
            if (n <= 0) {
                if (n < 0 && errno == EINTR) continue;
                return NULL;
            }
            got += (size_t)n;
        }
        c->rnd_left = sizeof c->rnd_pool;
    }
    c->rnd_left -= (unsigned)sizeof rnd;
    memcpy(rnd, c->rnd_pool + c->rnd_left, sizeof rnd);
    memset(c->rnd_pool + c->rnd_left, 0, sizeof rnd);
    if (zkl__protected_prefix_named(buf, sizeof buf, rnd, token) < 0) return NULL;
    return zkl__strdup(c, buf);
}

void zkl__set_str(zkl_client *c, char **slot, char *value) {
    zkl__strfree(c, *slot);
    *slot = value;
}

/* Create the container parents of path (which: ZKL_PARENTS_ANCESTORS, ZKL_PARENTS_SELF or both),
 * outermost first, pipelined ahead of the create that needs them, as Curator does. Each reply
 * goes to zkl__parents_reply with op's token (a reference each). Returns ZOK, or the first code
 * a create was refused with at once; out of memory nothing is sent (the create that needs them
 * then meets ZNONODE). */
int zkl__make_parents(zkl_client *c, zkl_op *op, const char *path, int which, int acl) {
    size_t len = strlen(path), i;
    int first = ZOK;
    if (which == ZKL_PARENTS_SELF) { /* the node alone: no copy to cut */
        c->stats.creates++;
        first = zkl__acreate2(c, path, "", 0, zkl__acl(c, acl), ZOO_CONTAINER, zkl__parents_reply,
                              ZKL_TOKEN(op));
        if (first == ZOK) op->refs++;
        return first;
    }
    char *buf = zkl__alloc(c, len + 1);
    if (!buf) return ZOK;
    memcpy(buf, path, len + 1);
    for (i = 1; i <= len; i++) {
        int here = i == len ? (which & ZKL_PARENTS_SELF)
                            : buf[i] == '/' && (which & ZKL_PARENTS_ANCESTORS);
        if (!here) continue;
        char save = buf[i];
        buf[i] = '\0';
        c->stats.creates++;
        int rc = zkl__acreate2(c, buf, "", 0, zkl__acl(c, acl), ZOO_CONTAINER, zkl__parents_reply,
                               ZKL_TOKEN(op));
        if (rc == ZOK)
            op->refs++;
        else if (first == ZOK)
            first = rc;
        buf[i] = save;
    }
    zkl__free(c, buf, len + 1);
    return first;
}

/* A parent's create answered. ZNONODE: an ancestor of this parent was reaped between their
 * creates; the node's create then meets ZNONODE too and makes the parents again. Anything else
 * (ZNOAUTH, ...) is a refusal: the first one is the cause (op->parent_rc), later ones follow. */
void zkl__parents_reply(int rc, const char *name, const struct Stat *st, const void *token) {
    zkl_client *c;
    (void)name, (void)st;
    zkl_op *op = zkl__reply_op(token, &c);
    if (!op) return;
    if (op->parents_batch && op->parents_batch == c->parents_batch && c->parents_pending > 0)
        c->parents_pending--;
    if (rc != ZOK && rc != ZNODEEXISTS && rc != ZNONODE && !zkl__conn_lost(rc) &&
        !zkl__handle_gone(rc) && !op->parent_rc)
        op->parent_rc = rc;
    zkl__op_maybe_free(c, op);
}
