/* path.c - validation of lock paths, with messages that say what was expected. */
#include <string.h>

#include "zklock.h"

#define ZKL_MAX_PATH 1024 /* leaves room for "/_c_<uuid>-__READ__<seq>" and nested recipe dirs */

const char *zkl_path_error(const char *path, size_t len) {
    size_t i, start;
    if (path == NULL || len == 0) return "must not be empty";
    if (path[0] != '/') return "must start with '/'";
    if (len == 1) return "must not be the root '/'";
    if (len > ZKL_MAX_PATH) return "is too long (at most 1024 bytes)";
    if (memchr(path, '\0', len) != NULL) return "must not contain a NUL byte";
    if (path[len - 1] == '/') return "must not end with '/'";
    for (i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)path[i];
        if (ch < 0x20 || ch == 0x7f) return "must not contain control characters";
    }
    for (start = 1; start <= len; start = i + 1) {
        for (i = start; i < len && path[i] != '/'; i++) {
        }
        size_t n = i - start;
        if (n == 0) return "must not contain an empty component ('//')";
        if ((n == 1 && path[start] == '.') ||
            (n == 2 && path[start] == '.' && path[start + 1] == '.'))
            return "must not contain '.' or '..' components";
    }
    if (len >= 10 && strncmp(path, "/zookeeper", 10) == 0 && (len == 10 || path[10] == '/'))
        return "must not be under /zookeeper (reserved by the server)";
    return NULL;
}
