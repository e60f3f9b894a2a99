/* fuzz_naming.c - libFuzzer target for the pure znode-name functions (csrc/core/naming.c).
 *
 * Input: a child list, one name per line, as getChildren would return it. A line starting with
 * '*' marks the caller's own node (the '*' is dropped); without one, own is picked from a hash of
 * the input (sometimes a name that is not in the list). Control bytes 0x10..0x1d expand to the
 * tokens that matter (lock-, __READ__, a Curator prefix, a wrapped sequence...), so one mutation
 * can insert a whole token. Every input is run under the mutex, read, write and latch rules and a
 * value that is not a recipe.
 *
 * Invariants (abort on violation):
 *   - sort_key agrees with a reference model written from the peers' rules (Curator: the text after
 *     the last token; Kazoo: <token><seq> at the end), and is a suffix of the name;
 *   - the sort is a permutation, ordered by (key, name), and independent of the input order;
 *   - the pick: own is the first equal name; the node to watch comes earlier and is a contender
 *     (mutex/write: the immediate predecessor, any child counting as Curator counts it; read: the
 *     first earlier writer); holds iff there is nothing to watch; wrapped iff a key up to own is
 *     a negative sequence;
 *   - parse(build(x)): a name built from a protected prefix and a %010d sequence gives back the
 *     sequence as its key, its prefix, its writer flag and its wrap flag;
 *   - protected_prefix never writes past `size` and returns -1 exactly when it does not fit.
 *
 * Build: cmake -DZKL_FUZZ=ON with CC=clang (tests/fuzz.sh does it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naming.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_naming: invariant broken at line %d: ", __LINE__);                   \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

static const char *const tokens[] = {
    "lock-",      "__READ__",    "__WRIT__",
    "__lock__",   "__rlock__",   "_c_0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0-",
    "0000000001", "-2147483648", "-000000001",
    "2147483647", "lease-",      "5f0c2a9e8b7d4c3a9e1f6b2d7c8a9e0f",
    "_c_",        "-lock-",
};
#define NTOKENS ((int)(sizeof tokens / sizeof tokens[0]))
#define MAXTOKEN 40
#define TOKEN_BYTE 0x10 /* control bytes never seen in text, so UTF-8 names pass through */

/* ---------------------------------------------------------------- small PRNG from the input */

/* hot helpers of the harness itself: no coverage feedback needed from them */
#if defined(__clang__) && __clang_major__ >= 13
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define NO_COVERAGE
#endif

static uint64_t rng;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---------------------------------------------------------------- reference model */

NO_COVERAGE static int ref_is_seq(const char *s,
                                  size_t len) { /* %010d of an int32: 10 digits, or '-' + 9/10 */
    size_t i, from = 0;
    if (len > 0 && s[0] == '-') {
        from = 1;
        if (len != 10 && len != 11) return 0;
    } else if (len != 10) {
        return 0;
    }
    for (i = from; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* byte comparison by hand: the reference stays independent of the library's string functions
 * (and clear of the sanitizers' slow interceptors, which libFuzzer hooks) */
NO_COVERAGE static int same(const char *a, const char *b, size_t n) {
    while (n--)
        if (*a++ != *b++) return 0;
    return 1;
}

/* the text after the last `tok` (scanning backwards), or NULL */
static const char *ref_after_last(const char *s, const char *tok) {
    size_t n = strlen(s), t = strlen(tok), p;
    if (n < t) return NULL;
    for (p = n - t + 1; p-- > 0;)
        if (same(s + p, tok, t)) return s + p + t;
    return NULL;
}

static int ref_contains(const char *s, const char *tok) {
    size_t n = strlen(s), t = strlen(tok), p;
    for (p = 0; p + t <= n; p++)
        if (same(s + p, tok, t)) return 1;
    return 0;
}

/* Kazoo: the name ends in tok + seq; returns the seq, or NULL */
static const char *ref_kazoo(const char *s, const char *tok) {
    size_t n = strlen(s), t = strlen(tok), l;
    for (l = 10; l <= 11; l++) {
        if (n < t + l) continue;
        if (same(s + n - l - t, tok, t) && ref_is_seq(s + n - l, l)) return s + n - l;
    }
    return NULL;
}

static const char *ref_key(const char *s, zkl_recipe r) {
    const char *k;
    if (r == ZKL_LATCH) { /* Curator's LeaderLatch sorter: the text after the last "latch-" */
        k = ref_after_last(s, "latch-");
        return k ? k : s;
    }
    if (r != ZKL_READ && r != ZKL_WRITE) {
        if ((k = ref_after_last(s, "lock-")) != NULL) return k;
        if ((k = ref_kazoo(s, "__lock__")) != NULL) return k;
        return s;
    }
    if (ref_contains(s, "__READ__") || ref_contains(s, "__WRIT__")) {
        k = ref_after_last(s, "__READ__");
        if (!k) k = s;
        const char *k2 = ref_after_last(k, "__WRIT__");
        return k2 ? k2 : k;
    }
    if ((k = ref_kazoo(s, "__lock__")) != NULL) return k;
    if ((k = ref_kazoo(s, "__rlock__")) != NULL) return k;
    return s;
}

static int ref_writer(const char *s) {
    return ref_contains(s, "__WRIT__") || ref_kazoo(s, "__lock__") != NULL;
}

static int ref_wrapped(const char *k) {
    return k[0] == '-' && ref_is_seq(k, strlen(k));
}

static int ref_cmp(const char *a, const char *b, zkl_recipe r) {
    int c = strcmp(ref_key(a, r), ref_key(b, r));
    return c ? c : strcmp(a, b);
}

NO_COVERAGE static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (const char *const *)a, y = (uintptr_t) * (const char *const *)b;
    return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------- checks */

static void check_keys(const char **names, int n, zkl_recipe r) {
    for (int i = 0; i < n; i++) {
        const char *s = names[i], *k = zkl__sort_key(s, r), *want = ref_key(s, r);
        if (k != want)
            FAIL("sort_key(\"%s\", %d) = \"%s\", reference \"%s\"", s, (int)r, k ? k : "(null)",
                 want);
        if (zkl__is_writer(s) != ref_writer(s)) FAIL("is_writer(\"%s\")", s);
        if (zkl__key_wrapped(k) != ref_wrapped(k)) FAIL("key_wrapped(\"%s\")", k);
    }
}

static void check_sort(const char **names, int n, zkl_recipe r, const char **sorted) {
    const char **a = malloc((size_t)(n ? n : 1) * sizeof *a);
    const char **b = malloc((size_t)(n ? n : 1) * sizeof *b);
    zkl__sort_item *scratch = malloc((size_t)(n ? n : 1) * sizeof *scratch);
    int i;
    if (!a || !b || !scratch) abort();
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    zkl__sort_children(sorted, n, r, scratch);
    /* a permutation: the same pointers */
    memcpy(a, names, (size_t)n * sizeof *a);
    memcpy(b, sorted, (size_t)n * sizeof *b);
    qsort(a, (size_t)n, sizeof *a, cmp_ptr);
    qsort(b, (size_t)n, sizeof *b, cmp_ptr);
    if (n && memcmp(a, b, (size_t)n * sizeof *a) != 0) FAIL("sort is not a permutation");
    /* ordered */
    for (i = 0; i + 1 < n; i++)
        if (ref_cmp(sorted[i], sorted[i + 1], r) > 0)
            FAIL("out of order at %d: \"%s\" > \"%s\" (recipe %d)", i, sorted[i], sorted[i + 1],
                 (int)r);
    /* the input order does not matter: sort the reversed list */
    for (i = 0; i < n; i++)
        a[i] = names[n - 1 - i];
    zkl__sort_children(a, n, r, scratch);
    for (i = 0; i < n; i++)
        if (strcmp(a[i], sorted[i]) != 0) FAIL("order depends on the input order at %d", i);
    free(a);
    free(b);
    free(scratch);
}

static void check_pick(const char **sorted, int n, const char *own, zkl_recipe r) {
    zkl__pick p;
    zkl_recipe rr = (r == ZKL_READ || r == ZKL_WRITE || r == ZKL_LATCH) ? r : ZKL_MUTEX;
    int i, want_own = -1, first_writer = -1, wrapped = 0;
    memset(&p, 0xa5, sizeof p);
    zkl__pick_predecessor(sorted, n, own, r, &p);
    for (i = 0; i < n; i++) {
        if (strcmp(sorted[i], own) == 0) {
            want_own = i;
            break;
        }
        if (first_writer < 0 && zkl__is_writer(sorted[i])) first_writer = i;
        if (zkl__key_wrapped(zkl__sort_key(sorted[i], r))) wrapped = 1;
    }
    if (p.own != want_own) FAIL("own = %d, want %d", p.own, want_own);
    if (want_own < 0) {
        if (p.holds || p.watch != -1 || p.watch_is_head) FAIL("a pick without own node");
        return;
    }
    if (zkl__key_wrapped(zkl__sort_key(own, r))) wrapped = 1;
    if (p.wrapped != wrapped) FAIL("wrapped = %d, want %d", p.wrapped, wrapped);
    if (p.holds != (p.watch < 0)) FAIL("holds = %d but watch = %d", p.holds, p.watch);
    if (p.watch >= p.own) FAIL("watch %d is not before own %d", p.watch, p.own);
    if (rr == ZKL_READ) {
        if (p.watch != first_writer) FAIL("read: watch %d, first writer %d", p.watch, first_writer);
        if (p.watch >= 0 && !zkl__is_writer(sorted[p.watch])) FAIL("read: watches a reader");
        if (p.watch_is_head) FAIL("read: watch_is_head");
    } else {
        if (p.watch != p.own - 1) FAIL("watch %d is not the predecessor of %d", p.watch, p.own);
        if (p.watch_is_head != ((rr == ZKL_MUTEX || rr == ZKL_LATCH) && p.watch == 0))
            FAIL("watch_is_head");
    }
}

/* parse(build(x)) for one recipe or the lease token */
static void check_round_trip(const unsigned char rnd[16], int32_t seq, zkl_recipe r,
                             const char *token) {
    char prefix[64], name[96], want[16];
    size_t tl = strlen(token);
    int n = token == zkl__recipe_token(r)
                ? zkl__protected_prefix(prefix, sizeof prefix, rnd, r)
                : zkl__protected_prefix_named(prefix, sizeof prefix, rnd, token);
    if (n != (int)(40 + tl)) FAIL("protected_prefix length %d", n);
    if (memcmp(prefix, "_c_", 3) != 0 || prefix[39] != '-' || prefix[17] != '4' ||
        !strchr("89ab", prefix[22]) || strcmp(prefix + 40, token) != 0)
        FAIL("not a protected prefix: %s", prefix);
    for (int i = 3; i < 39; i++) {
        int dash = i == 11 || i == 16 || i == 21 || i == 26;
        char c = prefix[i];
        if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            FAIL("uuid %s", prefix);
    }
    snprintf(want, sizeof want, "%010ld", (long)seq);
    snprintf(name, sizeof name, "%s%s", prefix, want);
    if (!zkl__has_prefix(name, prefix)) FAIL("has_prefix(build)");
    if (strcmp(token, "lease-") == 0) {
        if (zkl__is_writer(name)) FAIL("lease is a writer");
        return;
    }
    const char *k = zkl__sort_key(name, r);
    if (k != name + n || strcmp(k, want) != 0) FAIL("sort_key(%s) = %s", name, k);
    if (strtol(k, NULL, 10) != (long)seq) FAIL("sequence %s", k);
    if (zkl__key_wrapped(k) != (seq < 0)) FAIL("key_wrapped(%s)", k);
    if (zkl__is_writer(name) != (r == ZKL_WRITE)) FAIL("is_writer(%s)", name);
}

/* protected_prefix with a random buffer size and an arbitrary token: never past `size` */
static void check_prefix_size(const unsigned char rnd[16], const char *token, size_t size) {
    size_t need = 40 + strlen(token) + 1;
    char *buf = malloc(size ? size : 1); /* exact size: ASan reports any write past it */
    if (!buf) abort();
    int n = zkl__protected_prefix_named(size ? buf : NULL, size, rnd, token);
    if (size >= need) {
        if (n != (int)(need - 1) || strlen(buf) != need - 1 || strcmp(buf + 40, token) != 0)
            FAIL("protected_prefix_named fits but returned %d", n);
    } else if (n != -1) {
        FAIL("protected_prefix_named(size %zu, need %zu) returned %d", size, need, n);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = 1469598103934665603ULL;
    size_t i, o = 0;
    for (i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ULL;
    rng = h | 1;

    /* expand tokens, split lines */
    char *text = malloc(size * MAXTOKEN + 1);
    if (!text) abort();
    for (i = 0; i < size; i++) {
        unsigned char c = data[i];
        if (c >= TOKEN_BYTE && c < TOKEN_BYTE + NTOKENS) {
            size_t l = strlen(tokens[c - TOKEN_BYTE]);
            memcpy(text + o, tokens[c - TOKEN_BYTE], l);
            o += l;
        } else {
            text[o++] = c == '\0' ? '\n' : (char)c;
        }
    }
    text[o] = '\0';
    int cap = 1;
    for (i = 0; i < o; i++)
        cap += text[i] == '\n';
    const char **names = malloc((size_t)cap * sizeof *names);
    const char **sorted = malloc((size_t)(cap + 1) * sizeof *sorted);
    if (!names || !sorted) abort();
    int n = 0;
    const char *own = NULL;
    char *line = text;
    for (;;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (nl || *line) { /* a last line without '\n' counts unless empty */
            if (line[0] == '*' && !own) {
                own = line + 1;
                names[n++] = line + 1;
            } else {
                names[n++] = line;
            }
        }
        if (!nl) break;
        line = nl + 1;
    }
    if (!own) {
        uint64_t pickn = next_rand() % (uint64_t)(n + 1);
        own = (int)pickn < n ? names[pickn]
                             : "_c_00000000-0000-4000-8000-000000000000-lock-0000000000";
    }

    const zkl_recipe recipes[5] = {ZKL_MUTEX, ZKL_READ, ZKL_WRITE, ZKL_LATCH,
                                   (zkl_recipe)((int)(next_rand() % 9) - 2)};
    for (int ri = 0; ri < 5; ri++) {
        zkl_recipe r = recipes[ri];
        check_keys(names, n, r);
        check_sort(names, n, r, sorted);
        check_pick(sorted, n, own, r);
    }

    /* round trips, and the built name placed into the list */
    unsigned char rnd[16];
    for (i = 0; i < 16; i++)
        rnd[i] = (unsigned char)next_rand();
    int32_t seq = (int32_t)(uint32_t)next_rand();
    if (n > 0 && next_rand() % 2) { /* or a sequence read from one of the names */
        const char *k = zkl__sort_key(names[next_rand() % (uint64_t)n], ZKL_MUTEX);
        seq = (int32_t)strtol(k, NULL, 10);
    }
    for (int r = ZKL_MUTEX; r <= ZKL_LATCH; r++) {
        check_round_trip(rnd, seq, (zkl_recipe)r, zkl__recipe_token((zkl_recipe)r));
        char prefix[64], built[96];
        zkl__protected_prefix(prefix, sizeof prefix, rnd, (zkl_recipe)r);
        snprintf(built, sizeof built, "%s%010ld", prefix, (long)seq);
        const char **with = malloc((size_t)(n + 1) * sizeof *with);
        if (!with) abort();
        memcpy(with, names, (size_t)n * sizeof *with);
        with[n] = built;
        check_sort(with, n + 1, (zkl_recipe)r, sorted);
        check_pick(sorted, n + 1, built, (zkl_recipe)r);
        /* protected-mode recovery: a prefix scan over the list finds it, and only true matches */
        size_t pl = strlen(prefix);
        for (int j = 0; j <= n; j++) {
            int want = strncmp(sorted[j], prefix, pl) == 0;
            if (zkl__has_prefix(sorted[j], prefix) != want)
                FAIL("prefix scan at \"%s\"", sorted[j]);
            if (sorted[j] == built && !want) FAIL("own node not recovered");
        }
        free(with);
    }
    check_round_trip(rnd, seq, ZKL_MUTEX, "lease-");

    /* has_prefix against a reference, prefixes cut from the names */
    for (int j = 0; j < n && j < 64; j++) {
        const char *a = names[j], *b = names[next_rand() % (uint64_t)n];
        size_t bl = strlen(b), cut = bl ? next_rand() % (bl + 1) : 0;
        char *pre = malloc(cut + 1);
        if (!pre) abort();
        memcpy(pre, b, cut);
        pre[cut] = '\0';
        int want = cut > 0 && strlen(a) >= cut && memcmp(a, pre, cut) == 0;
        if (zkl__has_prefix(a, pre) != want) FAIL("has_prefix(\"%s\", \"%s\")", a, pre);
        free(pre);
    }

    /* protected_prefix_named with a name as token and a random buffer size */
    if (n > 0) {
        const char *token = names[next_rand() % (uint64_t)n];
        size_t need = 40 + strlen(token) + 1;
        check_prefix_size(rnd, token, (size_t)(next_rand() % (need + 2)));
        check_prefix_size(rnd, token, need - 1);
        check_prefix_size(rnd, token, need);
    }

    free(names);
    free(sorted);
    free(text);
    return 0;
}
