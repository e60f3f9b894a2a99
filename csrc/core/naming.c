/* naming.c - Curator-compatible znode naming and ordering (see docs/wire-format notes in
 * docs/design.md). Everything here is a pure function of its arguments, except zkl_uuid (random
 * bytes from getrandom) and zkl_host_name (gethostname), the public name sources, which touch no
 * client either. A leaf: calls no other file. */
#define _GNU_SOURCE
#include "naming.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define TOKEN_MUTEX "lock-"
#define TOKEN_READ "__READ__"
#define TOKEN_WRITE "__WRIT__"
#define TOKEN_LATCH "latch-"
#define KAZOO_WRITE "__lock__"
#define KAZOO_READ "__rlock__"

const char *zkl__recipe_token(zkl_recipe r) {
    switch (r) {
    case ZKL_READ:
        return TOKEN_READ;
    case ZKL_WRITE:
        return TOKEN_WRITE;
    case ZKL_LATCH:
        return TOKEN_LATCH;
    default:
        return TOKEN_MUTEX;
    }
}

int zkl__protected_prefix(char *buf, size_t size, const unsigned char rnd[16], zkl_recipe r) {
    return zkl__protected_prefix_named(buf, size, rnd, zkl__recipe_token(r));
}

int zkl__protected_prefix_named(char *buf, size_t size, const unsigned char rnd[16],
                                const char *token) {
    static const char hex[] = "0123456789abcdef";
    char head[40]; /* "_c_" + 32 hex digits + 4 dashes + "-" (formatted by hand: snprintf's
                    * %02x was a thirtieth of an uncontended cycle's instructions) */
    if (!buf || !rnd || !token) return -1;
    char *p = head;
    *p++ = '_', *p++ = 'c', *p++ = '_';
    for (int i = 0; i < 16; i++) {
        unsigned char b = rnd[i];
        if (i == 6) b = (unsigned char)((b & 0x0f) | 0x40); /* version 4 */
        if (i == 8) b = (unsigned char)((b & 0x3f) | 0x80); /* IETF variant */
        if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
        *p++ = hex[b >> 4];
        *p++ = hex[b & 15];
    }
    *p = '-';
    size_t tlen = strlen(token), n = sizeof head + tlen;
    if (size == 0) return -1;
    /* as snprintf: what fits of it, always terminated; -1 when it did not all fit */
    size_t h = size - 1 < sizeof head ? size - 1 : sizeof head;
    memcpy(buf, head, h);
    size_t t = size - 1 - h < tlen ? size - 1 - h : tlen;
    memcpy(buf + h, token, t);
    buf[h + t] = '\0';
    return n < size ? (int)n : -1;
}

/* Last occurrence of needle in s, or NULL. */
static const char *last_of(const char *s, const char *needle) {
    const char *last = NULL, *p = s;
    while ((p = strstr(p, needle)) != NULL) {
        last = p;
        p += 1;
    }
    return last;
}

/* Curator's standardFixForSorting: the text after the last `token`, else the whole name. */
static const char *after_last(const char *name, const char *token) {
    const char *p = last_of(name, token);
    return p ? p + strlen(token) : name;
}

/* 1 if s is exactly what ZooKeeper's "%010d" makes of a sequence counter: 10 digits, or once the
 * counter has wrapped negative, "-" and 9 or 10 digits (the sign counts in the width: -1 is
 * "-000000001", -2147483648 is "-2147483648"). */
static int is_seq(const char *s) {
    size_t digits;
    if (*s == '-') {
        digits = strspn(s + 1, "0123456789");
        return (digits == 9 || digits == 10) && s[1 + digits] == '\0';
    }
    digits = strspn(s, "0123456789");
    return digits == 10 && s[digits] == '\0';
}

/* Kazoo names end in <token><seq> (Kazoo's own pattern is -?\d{10}; the 9-digit negatives are
 * accepted too so that every wrapped sequence still sorts by its sequence). */
static const char *kazoo_seq(const char *name, const char *token) {
    const char *p = last_of(name, token);
    if (!p) return NULL;
    const char *s = p + strlen(token);
    return is_seq(s) ? s : NULL;
}

/* Anything that is not a read-write side or a latch is ordered as the mutex, as
 * zkl__recipe_token() names it. */
static zkl_recipe recipe_of(zkl_recipe r) {
    return r == ZKL_READ || r == ZKL_WRITE || r == ZKL_LATCH ? r : ZKL_MUTEX;
}

const char *zkl__sort_key(const char *name, zkl_recipe r) {
    const char *k;
    if (!name) return NULL;
    if (recipe_of(r) == ZKL_LATCH) return after_last(name, TOKEN_LATCH); /* Curator's sorter */
    if (recipe_of(r) == ZKL_MUTEX) {
        if (last_of(name, TOKEN_MUTEX)) return after_last(name, TOKEN_MUTEX);
        if ((k = kazoo_seq(name, KAZOO_WRITE)) != NULL) return k;
        return name;
    }
    if (strstr(name, TOKEN_READ) || strstr(name, TOKEN_WRITE)) {
        k = after_last(name, TOKEN_READ);
        return after_last(k, TOKEN_WRITE);
    }
    if ((k = kazoo_seq(name, KAZOO_WRITE)) != NULL) return k;
    if ((k = kazoo_seq(name, KAZOO_READ)) != NULL) return k;
    return name;
}

int zkl__is_writer(const char *name) {
    if (!name) return 0;
    return strstr(name, TOKEN_WRITE) != NULL || kazoo_seq(name, KAZOO_WRITE) != NULL;
}

int zkl__key_wrapped(const char *key) {
    return key != NULL && key[0] == '-' && is_seq(key);
}

static int cmp_items(const void *a, const void *b) {
    const zkl__sort_item *x = a, *y = b;
    if (!x->name || !y->name) return (x->name == NULL) - (y->name == NULL); /* NULLs last */
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->name, y->name);
}

void zkl__sort_children(const char **names, int n, zkl_recipe r, zkl__sort_item *scratch) {
    /* Keys are compared as byte strings: for ASCII names this is Java's String.compareTo, which
     * Curator uses. Ties (a downgraded read node shares its writer's key) break on the whole name.
     */
    int i;
    if (n < 2 || !names || !scratch) return;
    for (i = 0; i < n; i++) {
        scratch[i].name = names[i];
        scratch[i].key = zkl__sort_key(names[i], r);
    }
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_items);
    for (i = 0; i < n; i++)
        names[i] = scratch[i].name;
}

int zkl__has_prefix(const char *name, const char *prefix) {
    /* an empty prefix would match every child: recovery must never adopt a stranger's node */
    if (!name || !prefix || !*prefix) return 0;
    return strncmp(name, prefix, strlen(prefix)) == 0;
}

void zkl__pick_predecessor(const char *const *sorted, int n, const char *own, zkl_recipe r,
                           zkl__pick *out) {
    int i, first = -1, prev = -1, first_writer = -1;
    if (!out) return;
    out->own = -1;
    out->holds = 0;
    out->watch = -1;
    out->watch_is_head = 0;
    out->wrapped = 0;
    if (!sorted || !own) return;
    r = recipe_of(r);
    for (i = 0; i < n; i++) {
        if (!sorted[i]) continue; /* NULL entries are not children */
        if (strcmp(sorted[i], own) == 0) {
            out->own = i;
            break;
        }
        if (zkl__key_wrapped(zkl__sort_key(sorted[i], r))) out->wrapped = 1;
        if (r == ZKL_READ && first_writer < 0 && zkl__is_writer(sorted[i])) first_writer = i;
        if (first < 0) first = i;
        prev = i;
    }
    if (out->own < 0) return;
    if (zkl__key_wrapped(zkl__sort_key(own, r))) out->wrapped = 1;
    if (r == ZKL_READ) {
        out->holds = first_writer < 0;
        out->watch = first_writer;
        return;
    }
    out->holds = prev < 0;
    if (!out->holds) {
        out->watch = prev; /* the immediate predecessor */
        out->watch_is_head = (r == ZKL_MUTEX || r == ZKL_LATCH) && prev == first;
    }
}

int zkl_uuid(char out[37]) {
    unsigned char rnd[16];
    char buf[48];
    if (!out) return ZKL_EINVAL;
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return ZKL_ESYSTEM;
    /* "_c_<uuid>-" with an empty token: the uuid is the 36 characters after "_c_" */
    if (zkl__protected_prefix_named(buf, sizeof buf, rnd, "") != 40) return ZKL_ESYSTEM;
    memcpy(out, buf + 3, 36);
    out[36] = '\0';
    return ZKL_OK;
}

void zkl_host_name(char *buf, size_t size) {
    if (!buf || size == 0) return;
    if (gethostname(buf, size - 1) != 0) buf[0] = '\0';
    buf[size - 1] = '\0';
    if (buf[0] == '\0') snprintf(buf, size, "%s", "localhost");
}
