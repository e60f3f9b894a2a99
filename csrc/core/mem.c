/* mem.c - memory of a client: every allocation of the core goes through the allocator the user
 * configured (zkl_config.alloc), with the size it was made with. A leaf: calls no other file. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void *default_realloc(void *ud, void *p, size_t osize, size_t nsize) {
    (void)ud;
    (void)osize;
    if (nsize == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, nsize);
}

const zkl_allocator zkl__default_alloc = {default_realloc, NULL};

void *zkl__alloc(zkl_client *c, size_t n) {
    return c->alloc.realloc(c->alloc.ud, NULL, 0, n);
}

void zkl__free(zkl_client *c, void *p, size_t n) {
    if (p) c->alloc.realloc(c->alloc.ud, p, n, 0);
}

char *zkl__strdup(zkl_client *c, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = zkl__alloc(c, n);
    if (d) memcpy(d, s, n);
    return d;
}

void zkl__strfree(zkl_client *c, char *s) {
    if (s) zkl__free(c, s, strlen(s) + 1);
}
