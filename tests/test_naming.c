/* test_naming.c - unit tests for the pure znode-name functions (csrc/core/naming.c): Curator's
 * protected names, sort keys, ordering of recorded child lists, predecessor choice, protected-mode
 * prefix recovery, and bad inputs. Plain C99, no framework, no server. Exit status 1 on any
 * failure; the last line is "N checks, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naming.h"

static int checks, failures;

static void fail_head(const char *file, int line, const char *what) {
    failures++;
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) fail_head(__FILE__, __LINE__, #cond);                                         \
    } while (0)

/* integers: both values are printed on failure */
#define CHECK_INT(got, want)                                                                       \
    do {                                                                                           \
        long long g_ = (long long)(got), w_ = (long long)(want);                                   \
        checks++;                                                                                  \
        if (g_ != w_) {                                                                            \
            fail_head(__FILE__, __LINE__, #got " == " #want);                                      \
            fprintf(stderr, "    got %lld, want %lld\n", g_, w_);                                  \
        }                                                                                          \
    } while (0)

/* strings, NULL-safe: NULL only equals NULL */
#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        checks++;                                                                                  \
        if ((g_ == NULL) != (w_ == NULL) || (g_ && strcmp(g_, w_) != 0)) {                         \
            fail_head(__FILE__, __LINE__, #got " == " #want);                                      \
            fprintf(stderr, "    got %s%s%s, want %s%s%s\n", g_ ? "\"" : "", g_ ? g_ : "NULL",     \
                    g_ ? "\"" : "", w_ ? "\"" : "", w_ ? w_ : "NULL", w_ ? "\"" : "");             \
        }                                                                                          \
    } while (0)

/* pointers (sort keys point into the name they came from) */
#define CHECK_PTR(got, want)                                                                       \
    do {                                                                                           \
        const void *g_ = (got), *w_ = (want);                                                      \
        checks++;                                                                                  \
        if (g_ != w_) {                                                                            \
            fail_head(__FILE__, __LINE__, #got " == " #want);                                      \
            fprintf(stderr, "    got %p, want %p\n", g_, w_);                                      \
        }                                                                                          \
    } while (0)

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Realistic children. Curator: "_c_" + lowercase UUIDv4 + "-" + token + seq10.
 * Kazoo: uuid4().hex + "__lock__"/"__rlock__" + seq10. */
#define U1 "_c_0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0-"
#define U2 "_c_1a2b3c4d-5e6f-4a0b-9c1d-2e3f4a5b6c7d-"
#define U3 "_c_7d6c5b4a-3f2e-4d1c-b0a9-f8e7d6c5b4a3-"
#define U4 "_c_c0ffee00-1234-4567-89ab-cdef01234567-"
#define U5 "_c_ffffffff-ffff-4fff-bfff-ffffffffffff-"
#define K1 "5f0c2a9e8b7d4c3a9e1f6b2d7c8a9e0f"
#define K2 "0a1b2c3d4e5f40718293a4b5c6d7e8f9"

/* ---------------------------------------------------------------- helpers */

/* Sort a copy of `in` and compare it with `want` (both of length n); returns 1 if equal. */
static int sorted_equals(const char *const *in, int n, zkl_recipe r, const char *const *want,
                         int line) {
    const char *names[32];
    zkl__sort_item scratch[32];
    int i, ok = 1;
    if (n > 32) return 0;
    for (i = 0; i < n; i++)
        names[i] = in[i];
    zkl__sort_children(names, n, r, scratch);
    for (i = 0; i < n; i++) {
        if (names[i] != want[i] &&
            (names[i] == NULL || want[i] == NULL || strcmp(names[i], want[i]) != 0)) {
            if (ok) fprintf(stderr, "%s:%d: sort order differs:\n", __FILE__, line);
            fprintf(stderr, "    [%d] got %s, want %s\n", i, names[i] ? names[i] : "NULL",
                    want[i] ? want[i] : "NULL");
            ok = 0;
        }
    }
    return ok;
}
#define CHECK_SORTED(in, r, want)                                                                  \
    do {                                                                                           \
        checks++;                                                                                  \
        if (N_OF(in) != N_OF(want) || !sorted_equals(in, N_OF(in), r, want, __LINE__)) {           \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: check failed: sort(" #in ") == " #want "\n", __FILE__,         \
                    __LINE__);                                                                     \
        }                                                                                          \
    } while (0)

/* Expected pick in one line */
#define CHECK_PICK(p, own_, holds_, watch_, head_, wrapped_)                                       \
    do {                                                                                           \
        CHECK_INT((p).own, own_);                                                                  \
        CHECK_INT((p).holds, holds_);                                                              \
        CHECK_INT((p).watch, watch_);                                                              \
        CHECK_INT((p).watch_is_head, head_);                                                       \
        CHECK_INT((p).wrapped, wrapped_);                                                          \
    } while (0)

static zkl__pick pick(const char *const *sorted, int n, const char *own, zkl_recipe r) {
    zkl__pick p;
    memset(&p, 0x55, sizeof p); /* garbage in: every field must be written */
    zkl__pick_predecessor(sorted, n, own, r, &p);
    return p;
}

/* ---------------------------------------------------------------- tokens and building */

static void test_tokens(void) {
    CHECK_STR(zkl__recipe_token(ZKL_MUTEX), "lock-");
    CHECK_STR(zkl__recipe_token(ZKL_READ), "__READ__");
    CHECK_STR(zkl__recipe_token(ZKL_WRITE), "__WRIT__");
    /* not a recipe: the mutex token, never NULL */
    CHECK_STR(zkl__recipe_token((zkl_recipe)0), "lock-");
    CHECK_STR(zkl__recipe_token((zkl_recipe)99), "lock-");
    CHECK_STR(zkl__recipe_token((zkl_recipe)-1), "lock-");
}

static void test_protected_prefix(void) {
    unsigned char seq16[16], ones[16], zeros[16], hi[16], keep[16];
    char buf[128];
    int i;
    for (i = 0; i < 16; i++) {
        seq16[i] = (unsigned char)i;
        ones[i] = 0xff;
        zeros[i] = 0;
        hi[i] = (unsigned char)(0xa0 + i);
    }
    memcpy(keep, seq16, 16);

    /* every byte lands in its place; version nibble 4, variant bits 10 */
    CHECK_INT(zkl__protected_prefix(buf, sizeof buf, seq16, ZKL_MUTEX), 45);
    CHECK_STR(buf, "_c_00010203-0405-4607-8809-0a0b0c0d0e0f-lock-");
    CHECK(memcmp(seq16, keep, 16) == 0); /* the random bytes are not modified */
    CHECK_INT(zkl__protected_prefix(buf, sizeof buf, ones, ZKL_READ), 48);
    CHECK_STR(buf, "_c_ffffffff-ffff-4fff-bfff-ffffffffffff-__READ__");
    CHECK_INT(zkl__protected_prefix(buf, sizeof buf, zeros, ZKL_WRITE), 48);
    CHECK_STR(buf, "_c_00000000-0000-4000-8000-000000000000-__WRIT__");
    CHECK_INT(zkl__protected_prefix(buf, sizeof buf, hi, ZKL_MUTEX), 45);
    CHECK_STR(buf, "_c_a0a1a2a3-a4a5-46a7-a8a9-aaabacadaeaf-lock-"); /* lowercase hex */
    CHECK_INT(zkl__protected_prefix_named(buf, sizeof buf, seq16, "lease-"), 46);
    CHECK_STR(buf, "_c_00010203-0405-4607-8809-0a0b0c0d0e0f-lease-");
    CHECK_INT(zkl__protected_prefix_named(buf, sizeof buf, ones, "latch-"), 46);
    CHECK_STR(buf, "_c_ffffffff-ffff-4fff-bfff-ffffffffffff-latch-");
    /* the empty token: just the protected part, "-" at index 39 as Curator's isProtectedZNode wants
     */
    CHECK_INT(zkl__protected_prefix_named(buf, sizeof buf, seq16, ""), 40);
    CHECK_STR(buf, "_c_00010203-0405-4607-8809-0a0b0c0d0e0f-");
    CHECK_INT(buf[39], '-');

    /* buffer size: 40 + strlen(token) + 1 is enough, one less is not; nothing past `size` is
     * written */
    memset(buf, '#', sizeof buf);
    CHECK_INT(zkl__protected_prefix(buf, 46, seq16, ZKL_MUTEX), 45);
    CHECK_STR(buf, "_c_00010203-0405-4607-8809-0a0b0c0d0e0f-lock-");
    CHECK_INT(buf[46], '#');
    memset(buf, '#', sizeof buf);
    CHECK_INT(zkl__protected_prefix(buf, 45, seq16, ZKL_MUTEX), -1);
    CHECK_INT(buf[45], '#');
    CHECK_INT(buf[44], '\0'); /* truncated output is still terminated */
    memset(buf, '#', sizeof buf);
    CHECK_INT(zkl__protected_prefix(buf, 48, seq16, ZKL_READ), -1);
    CHECK_INT(buf[48], '#');
    CHECK_INT(zkl__protected_prefix(buf, 49, seq16, ZKL_READ), 48);
    memset(buf, '#', sizeof buf);
    CHECK_INT(zkl__protected_prefix(buf, 1, seq16, ZKL_MUTEX), -1);
    CHECK_INT(buf[0], '\0');
    CHECK_INT(buf[1], '#');
    memset(buf, '#', sizeof buf);
    CHECK_INT(zkl__protected_prefix(buf, 0, seq16, ZKL_MUTEX), -1);
    CHECK_INT(buf[0], '#');

    /* a token too long for the buffer; then big enough */
    {
        char token[201], big[300];
        memset(token, 'x', 200);
        token[200] = '\0';
        memset(buf, '#', sizeof buf);
        CHECK_INT(zkl__protected_prefix_named(buf, sizeof buf, seq16, token), -1);
        CHECK_INT(buf[sizeof buf - 1], '\0');
        CHECK_INT(zkl__protected_prefix_named(big, sizeof big, seq16, token), 240);
        CHECK_INT(strlen(big), 240);
        CHECK(strncmp(big, "_c_00010203-0405-4607-8809-0a0b0c0d0e0f-xxx", 43) == 0);
    }

    /* NULL arguments are errors, not crashes */
    CHECK_INT(zkl__protected_prefix(NULL, 80, seq16, ZKL_MUTEX), -1);
    CHECK_INT(zkl__protected_prefix(NULL, 0, seq16, ZKL_MUTEX), -1);
    CHECK_INT(zkl__protected_prefix(buf, sizeof buf, NULL, ZKL_MUTEX), -1);
    CHECK_INT(zkl__protected_prefix_named(buf, sizeof buf, seq16, NULL), -1);
    CHECK_INT(zkl__protected_prefix_named(NULL, 0, NULL, NULL), -1);
}

/* Build "<prefix><seq as %010d>" like ZooKeeper and parse it back with every reader function. */
static void round_trip(zkl_recipe r, const unsigned char rnd[16], long seq) {
    char prefix[64], name[96], want[16];
    int n = zkl__protected_prefix(prefix, sizeof prefix, rnd, r);
    CHECK_INT(n, 40 + (long long)strlen(zkl__recipe_token(r)));
    if (n < 0) return;
    snprintf(want, sizeof want, "%010ld", seq);
    snprintf(name, sizeof name, "%s%s", prefix, want);
    const char *key = zkl__sort_key(name, r);
    CHECK_STR(key, want);
    CHECK_PTR(key, name + n); /* a pointer into the name, right after the token */
    CHECK_INT(strtol(key, NULL, 10), seq);
    CHECK_INT(zkl__key_wrapped(key), seq < 0);
    CHECK_INT(zkl__is_writer(name), r == ZKL_WRITE);
    CHECK_INT(zkl__has_prefix(name, prefix), 1);
    /* the name is Curator-protected: "_c_", 36-char UUID, "-" at 39 */
    CHECK(strncmp(name, "_c_", 3) == 0);
    CHECK_INT(name[39], '-');
    CHECK_INT(name[3 + 14], '4');
    CHECK(strchr("89ab", name[3 + 19]) != NULL);
}

static void test_round_trip(void) {
    static const long seqs[] = {0,           1,          42,           999999999,
                                1000000000,  2147483647, -2147483648L, -2147483647,
                                -1000000000, -999999999, -1,           -42};
    unsigned char rnd[16];
    int i, s, r;
    for (i = 0; i < 16; i++)
        rnd[i] = (unsigned char)(i * 37 + 11);
    for (r = ZKL_MUTEX; r <= ZKL_WRITE; r++)
        for (s = 0; s < N_OF(seqs); s++)
            round_trip((zkl_recipe)r, rnd, seqs[s]);
    /* sequence formats */
    {
        char b[16];
        snprintf(b, sizeof b, "%010ld", -1L);
        CHECK_STR(b, "-000000001"); /* ZooKeeper's %010d: the sign counts in the width */
        snprintf(b, sizeof b, "%010ld", -2147483648L);
        CHECK_STR(b, "-2147483648");
    }
    /* semaphore lease: built with the lease token, found again by prefix, never a writer */
    {
        char prefix[64], name[96], other[64];
        CHECK_INT(zkl__protected_prefix_named(prefix, sizeof prefix, rnd, "lease-"), 46);
        snprintf(name, sizeof name, "%s%010d", prefix, 17);
        CHECK_INT(zkl__has_prefix(name, prefix), 1);
        CHECK_INT(zkl__is_writer(name), 0);
        CHECK_STR(zkl__sort_key(name, ZKL_MUTEX), name); /* no lock token: the whole name */
        rnd[15] ^= 1;
        CHECK_INT(zkl__protected_prefix_named(other, sizeof other, rnd, "lease-"), 46);
        CHECK_INT(zkl__has_prefix(name, other), 0);
    }
}

/* ---------------------------------------------------------------- sort keys */

static void test_sort_key(void) {
    static const struct {
        const char *name;
        zkl_recipe r;
        const char *key; /* NULL: the whole name */
    } cases[] = {
        /* Curator mutex */
        {U1 "lock-0000000007", ZKL_MUTEX, "0000000007"},
        {"lock-0000000001", ZKL_MUTEX, "0000000001"},
        {"x-lock-lock-0000000003", ZKL_MUTEX, "0000000003"}, /* after the LAST token */
        {"lock-lock-", ZKL_MUTEX, ""},
        {U1 "lock-", ZKL_MUTEX, ""}, /* token at the end: empty key */
        {U1 "lock--2147483648", ZKL_MUTEX, "-2147483648"},
        {U1 "lock--000000001", ZKL_MUTEX, "-000000001"},
        {"zz-lock-123", ZKL_MUTEX, "123"}, /* any text after the token, as Curator */
        {"leader", ZKL_MUTEX, NULL},
        {"", ZKL_MUTEX, NULL},
        {"lock_0000000001", ZKL_MUTEX, NULL},
        {"LOCK-0000000001", ZKL_MUTEX, NULL}, /* case-sensitive */
        {U1 "__READ__0000000004", ZKL_MUTEX, NULL},
        /* Kazoo, and Kazoo with extra_lock_patterns=["-lock-"] */
        {K1 "__lock__0000000009", ZKL_MUTEX, "0000000009"},
        {K1 "-lock-0000000009", ZKL_MUTEX, "0000000009"},
        {K1 "__lock__-2147483648", ZKL_MUTEX, "-2147483648"},
        {K1 "__lock__-000000001", ZKL_MUTEX, "-000000001"}, /* %010d of -1 */
        {K1 "__lock__000000009", ZKL_MUTEX, NULL},          /* 9 digits: not Kazoo's */
        {K1 "__lock__00000000090", ZKL_MUTEX, NULL},        /* 11 digits */
        {K1 "__lock__0000000009x", ZKL_MUTEX, NULL},
        {K1 "__lock__--000000009", ZKL_MUTEX, NULL},
        {K1 "__lock__", ZKL_MUTEX, NULL},
        {"__lock__0000000002", ZKL_MUTEX, "0000000002"},
        {K1 "__rlock__0000000009", ZKL_MUTEX, NULL}, /* a Kazoo reader is not a mutex contender */
        {K1 "__lock__0000000001__lock__0000000002", ZKL_MUTEX, "0000000002"},
        /* read-write */
        {U2 "__READ__0000000004", ZKL_READ, "0000000004"},
        {U2 "__READ__0000000004", ZKL_WRITE, "0000000004"},
        {U2 "__WRIT__0000000005", ZKL_READ, "0000000005"},
        {U2 "__WRIT__0000000005", ZKL_WRITE, "0000000005"},
        {U2 "__WRIT__-2147483648", ZKL_WRITE, "-2147483648"},
        {U2 "__READ__", ZKL_READ, ""},
        {"a__WRIT__b__READ__c", ZKL_READ, "c"},
        {"a__READ__b__WRIT__c", ZKL_READ, "c"}, /* READ stripped first, then WRIT */
        {"a__READ__b__READ__c__WRIT__d", ZKL_WRITE, "d"},
        {"__WRIT____READ__0000000001", ZKL_WRITE, "0000000001"},
        {U1 "lock-0000000004", ZKL_READ, NULL}, /* the mutex token means nothing here */
        {K2 "__rlock__0000000002", ZKL_READ, "0000000002"},
        {K2 "__lock__0000000003", ZKL_WRITE, "0000000003"},
        {K2 "__rlock__-2147483648", ZKL_READ, "-2147483648"},
        {K2 "__rlock__00000000002", ZKL_READ, NULL},
        {"config", ZKL_WRITE, NULL},
        {"", ZKL_READ, NULL},
        /* Curator LeaderLatch: the text after the last "latch-", else the whole name; no
         * Kazoo forms and no mutex token */
        {U1 "latch-0000000007", ZKL_LATCH, "0000000007"},
        {"latch-0000000001", ZKL_LATCH, "0000000001"},
        {"x-latch-latch-0000000003", ZKL_LATCH, "0000000003"},
        {U1 "latch-", ZKL_LATCH, ""},
        {U1 "latch--2147483648", ZKL_LATCH, "-2147483648"},
        {U1 "lock-0000000004", ZKL_LATCH, NULL},
        {K1 "__lock__0000000009", ZKL_LATCH, NULL},
        {"LATCH-0000000001", ZKL_LATCH, NULL},
        {"leader", ZKL_LATCH, NULL},
        {"", ZKL_LATCH, NULL},
        {U1 "latch-0000000001", ZKL_MUTEX, NULL}, /* the latch token means nothing to a mutex */
        /* not a recipe: the mutex rules, consistent with zkl__recipe_token() */
        {U1 "lock-0000000001", (zkl_recipe)0, "0000000001"},
        {U1 "lock-0000000001", (zkl_recipe)42, "0000000001"},
    };
    int i;
    for (i = 0; i < N_OF(cases); i++) {
        const char *k = zkl__sort_key(cases[i].name, cases[i].r);
        const char *want = cases[i].key ? cases[i].key : cases[i].name;
        size_t ln = strlen(cases[i].name), lk = strlen(want);
        CHECK_STR(k, want);
        if (!k) continue;
        /* always a suffix of the name itself, never a copy */
        CHECK_PTR(k, cases[i].name + ln - lk);
        if (strcmp(k, want) != 0) fprintf(stderr, "    case %d: %s\n", i, cases[i].name);
    }
    /* a long name: the key is still found at the end */
    {
        static char big[100001];
        memset(big, 'l', 100000);
        memcpy(big + 100000 - 15, "lock-0000000042", 15);
        big[100000] = '\0';
        CHECK_PTR(zkl__sort_key(big, ZKL_MUTEX), big + 100000 - 10);
        CHECK_PTR(zkl__sort_key(big, ZKL_READ), big);
    }
    /* NULL */
    CHECK_PTR(zkl__sort_key(NULL, ZKL_MUTEX), NULL);
    CHECK_PTR(zkl__sort_key(NULL, ZKL_READ), NULL);
}

static void test_is_writer(void) {
    CHECK_INT(zkl__is_writer(U1 "__WRIT__0000000001"), 1);
    CHECK_INT(zkl__is_writer(U1 "__WRIT__-2147483648"), 1);
    CHECK_INT(zkl__is_writer(U1 "__WRIT__"), 1); /* Curator: contains(__WRIT__) */
    CHECK_INT(zkl__is_writer("x__WRIT__y__READ__0000000001"), 1);
    CHECK_INT(zkl__is_writer(U1 "__READ__0000000001"), 0);
    CHECK_INT(zkl__is_writer(K1 "__lock__0000000001"), 1); /* Kazoo WriteLock */
    CHECK_INT(zkl__is_writer(K1 "__lock__-2147483648"), 1);
    CHECK_INT(zkl__is_writer(K1 "__rlock__0000000001"), 0);
    CHECK_INT(zkl__is_writer(K1 "__lock__000000001"), 0); /* not a Kazoo sequence */
    CHECK_INT(zkl__is_writer(K1 "__lock__"), 0);
    CHECK_INT(zkl__is_writer(U1 "lock-0000000001"), 0);
    CHECK_INT(zkl__is_writer("__writ__0000000001"), 0);
    CHECK_INT(zkl__is_writer("config"), 0);
    CHECK_INT(zkl__is_writer(""), 0);
    CHECK_INT(zkl__is_writer(NULL), 0);
}

static void test_key_wrapped(void) {
    CHECK_INT(zkl__key_wrapped("-2147483648"), 1); /* the first value after 2^31 creates */
    CHECK_INT(zkl__key_wrapped("-2147483647"), 1);
    CHECK_INT(zkl__key_wrapped("-1000000000"), 1);
    CHECK_INT(zkl__key_wrapped("-999999999"), 1); /* %010d: 9 digits after the sign */
    CHECK_INT(zkl__key_wrapped("-000000001"), 1);
    CHECK_INT(zkl__key_wrapped("0000000000"), 0);
    CHECK_INT(zkl__key_wrapped("0000000001"), 0);
    CHECK_INT(zkl__key_wrapped("2147483647"), 0);
    CHECK_INT(zkl__key_wrapped("-"), 0);
    CHECK_INT(zkl__key_wrapped(""), 0);
    CHECK_INT(zkl__key_wrapped("-12345678"), 0);    /* too short */
    CHECK_INT(zkl__key_wrapped("-21474836480"), 0); /* too long */
    CHECK_INT(zkl__key_wrapped("-214748364x"), 0);
    CHECK_INT(zkl__key_wrapped("-2147483648 "), 0);
    CHECK_INT(zkl__key_wrapped("--000000001"), 0);
    CHECK_INT(zkl__key_wrapped("+2147483648"), 0);
    CHECK_INT(zkl__key_wrapped("config"), 0);
    CHECK_INT(zkl__key_wrapped(NULL), 0);
}

/* ---------------------------------------------------------------- ordering of child lists */

static void test_sort_children(void) {
    /* Curator mutex children as getChildren returns them (hash order): sorted by sequence, not uuid
     */
    {
        const char *in[] = {U5 "lock-0000000003", U1 "lock-0000000010", U4 "lock-0000000001",
                            U2 "lock-0000000002", U3 "lock-0000000000"};
        const char *want[] = {U3 "lock-0000000000", U4 "lock-0000000001", U2 "lock-0000000002",
                              U5 "lock-0000000003", U1 "lock-0000000010"};
        CHECK_SORTED(in, ZKL_MUTEX, want);
    }
    /* mixed: Curator, Kazoo (__lock__ and -lock- pattern), a Kazoo reader and foreign children.
     * Contenders interleave by sequence; names without a key sort by the whole name, after digits.
     */
    {
        const char *in[] = {"config",
                            K1 "__lock__0000000004",
                            U1 "lock-0000000005",
                            K2 "__rlock__0000000001",
                            U2 "lock-0000000002",
                            K2 "-lock-0000000003",
                            "leader",
                            "0000000009"};
        const char *want[] = {U2 "lock-0000000002",
                              K2 "-lock-0000000003",
                              K1 "__lock__0000000004",
                              U1 "lock-0000000005",
                              "0000000009",
                              K2 "__rlock__0000000001", /* whole name "0a1b..." */
                              "config",
                              "leader"};
        CHECK_SORTED(in, ZKL_MUTEX, want);
    }
    /* wrapped sequences sort as strings, as Curator and Kazoo do: before every positive one, and
     * in reverse order of value among themselves */
    {
        const char *in[] = {U1 "lock-0000000000",  U2 "lock--2147483648", U3 "lock-2147483647",
                            U4 "lock--2147483647", U5 "lock--000000001",  K1 "__lock__-2147483646"};
        const char *want[] = {U5 "lock--000000001",  K1 "__lock__-2147483646",
                              U4 "lock--2147483647", U2 "lock--2147483648",
                              U1 "lock-0000000000",  U3 "lock-2147483647"};
        CHECK_SORTED(in, ZKL_MUTEX, want);
    }
    /* sequences of different digit counts (foreign writers): plain string order */
    {
        const char *in[] = {"a-lock-99", "b-lock-123", U1 "lock-0000000124", "c-lock-",
                            "d-lock-1230"};
        const char *want[] = {"c-lock-", U1 "lock-0000000124", "b-lock-123", "d-lock-1230",
                              "a-lock-99"};
        CHECK_SORTED(in, ZKL_MUTEX, want);
    }
    /* read-write: readers and writers share one queue */
    {
        const char *in[] = {U1 "__WRIT__0000000006", U2 "__READ__0000000002",
                            U3 "__READ__0000000007", U4 "__WRIT__0000000003",
                            U5 "__READ__0000000001"};
        const char *want[] = {U5 "__READ__0000000001", U2 "__READ__0000000002",
                              U4 "__WRIT__0000000003", U1 "__WRIT__0000000006",
                              U3 "__READ__0000000007"};
        CHECK_SORTED(in, ZKL_READ, want);
        CHECK_SORTED(in, ZKL_WRITE, want);
    }
    /* equal keys: the downgrade read node (Curator 5.5) carries its writer's sequence; ties break
     * on the whole name, so the order does not depend on the order getChildren returned */
    {
        const char *in[] = {U4 "__WRIT__0000000006", U3 "__WRIT__0000000005",
                            U1 "__READ__0000000005", U2 "__READ__0000000004"};
        const char *want[] = {U2 "__READ__0000000004", U1 "__READ__0000000005",
                              U3 "__WRIT__0000000005", U4 "__WRIT__0000000006"};
        CHECK_SORTED(in, ZKL_READ, want);
        const char *in2[] = {U5 "__READ__0000000005", U4 "__WRIT__0000000006",
                             U2 "__WRIT__0000000005"};
        const char *want2[] = {U2 "__WRIT__0000000005", U5 "__READ__0000000005",
                               U4 "__WRIT__0000000006"};
        CHECK_SORTED(in2, ZKL_WRITE, want2);
    }
    /* Curator and Kazoo read-write vocabularies together */
    {
        const char *in[] = {K1 "__rlock__0000000004",
                            U1 "__WRIT__0000000003",
                            K2 "__lock__0000000001",
                            U2 "__READ__0000000002",
                            "lock",
                            U3 "lock-0000000000"};
        const char *want[] = {K2 "__lock__0000000001", U2 "__READ__0000000002",
                              U1 "__WRIT__0000000003", K1 "__rlock__0000000004",
                              U3 "lock-0000000000",    "lock"};
        CHECK_SORTED(in, ZKL_READ, want);
    }
    /* the same list under the mutex rules: the rw names have no key of their own */
    {
        const char *in[] = {U2 "__READ__0000000002", U3 "lock-0000000007", K2 "__lock__0000000001"};
        const char *want[] = {K2 "__lock__0000000001", U3 "lock-0000000007",
                              U2 "__READ__0000000002"};
        CHECK_SORTED(in, ZKL_MUTEX, want);
    }
    /* every input order gives the same result (4! permutations, including a key tie) */
    {
        const char *base[] = {U3 "__READ__0000000005", U1 "__WRIT__0000000005",
                              U2 "__READ__0000000001", U4 "__WRIT__-2147483648"};
        const char *want[] = {U4 "__WRIT__-2147483648", U2 "__READ__0000000001",
                              U1 "__WRIT__0000000005", U3 "__READ__0000000005"};
        int a, b, c, d, bad = 0;
        for (a = 0; a < 4; a++)
            for (b = 0; b < 4; b++)
                for (c = 0; c < 4; c++)
                    for (d = 0; d < 4; d++) {
                        if (a == b || a == c || a == d || b == c || b == d || c == d) continue;
                        const char *in[] = {base[a], base[b], base[c], base[d]};
                        if (!sorted_equals(in, 4, ZKL_WRITE, want, __LINE__)) bad++;
                    }
        CHECK_INT(bad, 0);
    }
    /* small and degenerate lists */
    {
        zkl__sort_item scratch[2];
        const char *one[] = {"zz"};
        const char *two[] = {U1 "lock-0000000002", U1 "lock-0000000002"}; /* duplicates */
        zkl__sort_children(one, 1, ZKL_MUTEX, scratch);
        CHECK_STR(one[0], "zz");
        zkl__sort_children(two, 2, ZKL_MUTEX, scratch);
        CHECK_STR(two[0], U1 "lock-0000000002");
        CHECK_STR(two[1], U1 "lock-0000000002");
        zkl__sort_children(one, 0, ZKL_MUTEX, scratch);
        zkl__sort_children(one, -3, ZKL_MUTEX, scratch);
        CHECK_STR(one[0], "zz");
        zkl__sort_children(NULL, 5, ZKL_MUTEX, scratch); /* no crash */
        zkl__sort_children(two, 2, ZKL_MUTEX, NULL);     /* no scratch: left alone */
        CHECK_STR(two[0], U1 "lock-0000000002");
        const char *empty[] = {"", "", U1 "lock-"};
        const char *want_e[] = {"", "", U1 "lock-"};
        CHECK_SORTED(empty, ZKL_MUTEX, want_e);
    }
    /* NULL entries are kept and go last */
    {
        const char *in[] = {NULL, U2 "lock-0000000002", NULL, U1 "lock-0000000001"};
        const char *want[] = {U1 "lock-0000000001", U2 "lock-0000000002", NULL, NULL};
        CHECK_SORTED(in, ZKL_MUTEX, want);
    }
}

/* ---------------------------------------------------------------- predecessor choice */

static void test_pick_mutex(void) {
    /* a sorted mutex queue with a Kazoo contender (-lock- pattern) and a foreign child at the end
     */
    const char *q[] = {U3 "lock-0000000001", K1 "-lock-0000000002", U1 "lock-0000000003",
                       U2 "lock-0000000004", "config"};
    zkl__pick p;
    p = pick(q, 5, U3 "lock-0000000001", ZKL_MUTEX);
    CHECK_PICK(p, 0, 1, -1, 0, 0);
    p = pick(q, 5, K1 "-lock-0000000002", ZKL_MUTEX);
    CHECK_PICK(p, 1, 0, 0, 1, 0); /* watches the head: its deletion hands over */
    p = pick(q, 5, U1 "lock-0000000003", ZKL_MUTEX);
    CHECK_PICK(p, 2, 0, 1, 0, 0); /* the immediate predecessor, even a Kazoo node */
    p = pick(q, 5, U2 "lock-0000000004", ZKL_MUTEX);
    CHECK_PICK(p, 3, 0, 2, 0, 0);
    p = pick(q, 5, U4 "lock-0000000005", ZKL_MUTEX); /* own node gone (session expired) */
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    p = pick(q, 5, U2 "lock-000000000", ZKL_MUTEX); /* a prefix of a child is not the child */
    CHECK_INT(p.own, -1);
    p = pick(q, 3, U2 "lock-0000000004", ZKL_MUTEX); /* beyond n is not looked at */
    CHECK_INT(p.own, -1);
    /* duplicates: the first one counts */
    {
        const char *d[] = {U1 "lock-0000000001", U1 "lock-0000000001"};
        p = pick(d, 2, U1 "lock-0000000001", ZKL_MUTEX);
        CHECK_PICK(p, 0, 1, -1, 0, 0);
    }
    /* a single child: it holds */
    p = pick(q, 1, U3 "lock-0000000001", ZKL_MUTEX);
    CHECK_PICK(p, 0, 1, -1, 0, 0);
}

/* The latch: sorted by the text after "latch-" whatever the uuid; immediate predecessor; the
 * head's deletion hands over; a foreign child ("config") sorts by its whole name (after digits). */
static void test_pick_latch(void) {
    const char *in[] = {U5 "latch-0000000003", "config", U1 "latch-0000000010",
                        U2 "latch-0000000001", U3 "latch-0000000002"};
    const char *want[] = {U2 "latch-0000000001", U3 "latch-0000000002", U5 "latch-0000000003",
                          U1 "latch-0000000010", "config"};
    CHECK_SORTED(in, ZKL_LATCH, want);
    zkl__pick p;
    p = pick(want, 5, U2 "latch-0000000001", ZKL_LATCH);
    CHECK_PICK(p, 0, 1, -1, 0, 0);
    p = pick(want, 5, U3 "latch-0000000002", ZKL_LATCH);
    CHECK_PICK(p, 1, 0, 0, 1, 0);
    p = pick(want, 5, U1 "latch-0000000010", ZKL_LATCH);
    CHECK_PICK(p, 3, 0, 2, 0, 0);
    p = pick(want, 5, U4 "latch-0000000011", ZKL_LATCH);
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    /* a wrapped sequence before ours is reported */
    const char *w[] = {U1 "latch--000000001", U2 "latch-0000000005"};
    p = pick(w, 2, U2 "latch-0000000005", ZKL_LATCH);
    CHECK_PICK(p, 1, 0, 0, 1, 1);
    CHECK_STR(zkl__recipe_token(ZKL_LATCH), "latch-");
}

static void test_pick_wrapped(void) {
    /* sorted as strings: the wrapped nodes come first */
    const char *q[] = {U1 "lock--000000001", U2 "lock--2147483648", U3 "lock-0000000005",
                       U4 "lock-0000000006"};
    zkl__pick p;
    p = pick(q, 4, U1 "lock--000000001", ZKL_MUTEX); /* own key wrapped */
    CHECK_PICK(p, 0, 1, -1, 0, 1);
    p = pick(q, 4, U2 "lock--2147483648", ZKL_MUTEX);
    CHECK_PICK(p, 1, 0, 0, 1, 1);
    p = pick(q, 4, U4 "lock-0000000006", ZKL_MUTEX); /* an earlier key wrapped */
    CHECK_PICK(p, 3, 0, 2, 0, 1);
    p = pick(q + 2, 2, U3 "lock-0000000005", ZKL_MUTEX); /* nothing wrapped */
    CHECK_PICK(p, 0, 1, -1, 0, 0);
    {
        /* only keys up to own count (a list that is not sorted, to show it) */
        const char *r[] = {U3 "__WRIT__0000000005", U4 "__READ__0000000006",
                           "zz__WRIT__-2147483648"};
        p = pick(r, 3, U4 "__READ__0000000006", ZKL_READ);
        CHECK_PICK(p, 1, 0, 0, 0, 0);
        const char *w[] = {K1 "__lock__-2147483648", U3 "__WRIT__0000000005"};
        p = pick(w, 2, U3 "__WRIT__0000000005", ZKL_WRITE);
        CHECK_PICK(p, 1, 0, 0, 0, 1);
        p = pick(w, 2, U3 "__WRIT__0000000005", ZKL_READ);
        CHECK_PICK(p, 1, 0, 0, 0, 1);
    }
}

static void test_pick_rw(void) {
    /* R1 W2 R3 W4 R5 (sorted) */
    const char *q[] = {U1 "__READ__0000000001", U2 "__WRIT__0000000002", U3 "__READ__0000000003",
                       U4 "__WRIT__0000000004", U5 "__READ__0000000005"};
    zkl__pick p;
    p = pick(q, 5, U1 "__READ__0000000001", ZKL_READ);
    CHECK_PICK(p, 0, 1, -1, 0, 0);
    p = pick(q, 5, U3 "__READ__0000000003", ZKL_READ);
    CHECK_PICK(p, 2, 0, 1, 0, 0);
    p = pick(q, 5, U5 "__READ__0000000005", ZKL_READ); /* the FIRST earlier writer, not W4 */
    CHECK_PICK(p, 4, 0, 1, 0, 0);
    p = pick(q, 5, U2 "__WRIT__0000000002", ZKL_WRITE); /* immediate predecessor, a reader */
    CHECK_PICK(p, 1, 0, 0, 0, 0);
    p = pick(q, 5, U4 "__WRIT__0000000004", ZKL_WRITE);
    CHECK_PICK(p, 3, 0, 2, 0, 0);
    p = pick(q, 5, U3 "__WRIT__0000000003", ZKL_WRITE);
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    {
        /* readers only: everyone holds at once */
        const char *r[] = {U1 "__READ__0000000001", U2 "__READ__0000000002",
                           U3 "__READ__0000000003"};
        p = pick(r, 3, U3 "__READ__0000000003", ZKL_READ);
        CHECK_PICK(p, 2, 1, -1, 0, 0);
        /* the write side waits even behind readers */
        const char *w[] = {U1 "__READ__0000000001", U2 "__READ__0000000002",
                           U3 "__WRIT__0000000003"};
        p = pick(w, 3, U3 "__WRIT__0000000003", ZKL_WRITE);
        CHECK_PICK(p, 2, 0, 1, 0, 0);
        p = pick(w, 3, U3 "__WRIT__0000000003", ZKL_MUTEX); /* the mutex rule marks the head */
        CHECK_PICK(p, 2, 0, 1, 0, 0);
        p = pick(w, 2, U2 "__READ__0000000002", ZKL_MUTEX);
        CHECK_PICK(p, 1, 0, 0, 1, 0);
    }
    {
        /* Kazoo in the queue: a Kazoo writer (__lock__) blocks readers, a Kazoo reader does not */
        const char *k[] = {K1 "__rlock__0000000001", K2 "__lock__0000000002",
                           U1 "__READ__0000000003"};
        p = pick(k, 3, U1 "__READ__0000000003", ZKL_READ);
        CHECK_PICK(p, 2, 0, 1, 0, 0);
        p = pick(k, 3, K2 "__lock__0000000002", ZKL_WRITE);
        CHECK_PICK(p, 1, 0, 0, 0, 0);
        const char *k2[] = {K1 "__rlock__0000000001", U1 "__READ__0000000003",
                            K2 "__lock__0000000004"};
        p = pick(k2, 3, U1 "__READ__0000000003", ZKL_READ);
        CHECK_PICK(p, 1, 1, -1, 0, 0);
        /* foreign children before own: no writer, nothing to wait for */
        const char *f[] = {"0000000000", U1 "__READ__0000000003", "config"};
        p = pick(f, 3, U1 "__READ__0000000003", ZKL_READ);
        CHECK_PICK(p, 1, 1, -1, 0, 0);
    }
    {
        /* the downgrade: W5 holds, its read node R5 has the same key; tie order by name */
        const char *a[] = {U1 "__READ__0000000005", U3 "__WRIT__0000000005",
                           U4 "__WRIT__0000000006", U5 "__READ__0000000007"};
        p = pick(a, 4, U1 "__READ__0000000005", ZKL_READ); /* R5 sorts first: holds */
        CHECK_PICK(p, 0, 1, -1, 0, 0);
        p = pick(a, 4, U4 "__WRIT__0000000006", ZKL_WRITE);
        CHECK_PICK(p, 2, 0, 1, 0, 0);
        p = pick(a, 4, U5 "__READ__0000000007", ZKL_READ); /* waits on the first writer, W5 */
        CHECK_PICK(p, 3, 0, 1, 0, 0);
        const char *b[] = {U2 "__WRIT__0000000005", U5 "__READ__0000000005",
                           U4 "__WRIT__0000000006"};
        p = pick(b, 3, U5 "__READ__0000000005", ZKL_READ); /* W5 first: only lock.c grants it */
        CHECK_PICK(p, 1, 0, 0, 0, 0);
        p = pick(b, 3, U4 "__WRIT__0000000006", ZKL_WRITE);
        CHECK_PICK(p, 2, 0, 1, 0, 0);
    }
}

static void test_pick_bad(void) {
    const char *q[] = {U1 "lock-0000000001", U2 "lock-0000000002"};
    zkl__pick p;
    p = pick(q, 2, NULL, ZKL_MUTEX);
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    p = pick(NULL, 2, U1 "lock-0000000001", ZKL_MUTEX);
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    p = pick(q, 0, U1 "lock-0000000001", ZKL_MUTEX);
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    p = pick(q, -1, U1 "lock-0000000001", ZKL_READ);
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    p = pick(q, 2, "", ZKL_WRITE);
    CHECK_PICK(p, -1, 0, -1, 0, 0);
    zkl__pick_predecessor(q, 2, U1 "lock-0000000001", ZKL_MUTEX, NULL); /* no crash */
    {
        /* NULL entries are ignored: never chosen, never in the way */
        const char *n[] = {NULL, U1 "__WRIT__0000000001", NULL, U2 "__READ__0000000002"};
        p = pick(n, 4, U2 "__READ__0000000002", ZKL_READ);
        CHECK_PICK(p, 3, 0, 1, 0, 0);
        p = pick(n, 4, U2 "__READ__0000000002", ZKL_WRITE);
        CHECK_PICK(p, 3, 0, 1, 0, 0);
        const char *m[] = {NULL, U1 "lock-0000000001", NULL, U2 "lock-0000000002"};
        p = pick(m, 4, U1 "lock-0000000001", ZKL_MUTEX);
        CHECK_PICK(p, 1, 1, -1, 0, 0);
        p = pick(m, 4, U2 "lock-0000000002", ZKL_MUTEX);
        CHECK_PICK(p, 3, 0, 1, 1, 0);
    }
    /* recipes that are not one: the mutex rules throughout, as zkl__recipe_token() */
    p = pick(q, 2, U2 "lock-0000000002", (zkl_recipe)0);
    CHECK_PICK(p, 1, 0, 0, 1, 0);
    {
        const char *w[] = {U1 "__WRIT__0000000001", U2 "lock-0000000002"};
        p = pick(w, 2, U2 "lock-0000000002", (zkl_recipe)7);
        CHECK_PICK(p, 1, 0, 0, 1, 0);
    }
}

/* ---------------------------------------------------------------- protected-mode recovery */

static int find_prefix(const char *const *children, int n, const char *prefix) {
    int i, found = -1, count = 0;
    for (i = 0; i < n; i++)
        if (zkl__has_prefix(children[i], prefix)) {
            if (found < 0) found = i;
            count++;
        }
    return count > 1 ? -2 : found;
}

static void test_has_prefix(void) {
    const char *children[] = {U1 "lock-0000000001",
                              U2 "lock-0000000002",
                              U4 "lock-0000000007",
                              "_c_c0ffee00-1234-4567-89ab-cdef01234568-lock-0000000003",
                              U4 "__READ__0000000004",
                              K1 "__lock__0000000005",
                              "config"};
    const int n = N_OF(children);
    /* own uuid found among others, exactly once: U4 differs from index 3 in the last uuid digit */
    CHECK_INT(find_prefix(children, n, U4 "lock-"), 2);
    CHECK_INT(find_prefix(children, n, U4 "__READ__"), 4);
    CHECK_INT(find_prefix(children, n, U2 "lock-"), 1);
    CHECK_INT(find_prefix(children, n, K1 "__lock__"), 5);
    /* not found: the create never happened, or the node was already deleted */
    CHECK_INT(find_prefix(children, n, U3 "lock-"), -1);
    CHECK_INT(find_prefix(children, n, U4 "__WRIT__"), -1);
    CHECK_INT(find_prefix(children, n, U4 "lease-"), -1);
    CHECK_INT(find_prefix(children, 0, U4 "lock-"), -1);
    /* a prefix that is a prefix of another: without the token it matches more than one */
    CHECK_INT(find_prefix(children, n, "_c_c0ffee00-1234-4567-89ab-cdef0123456"), -2);
    CHECK_INT(find_prefix(children, n, U4), -2); /* "...-lock-" and "...-__READ__" */
    /* direct cases */
    CHECK_INT(zkl__has_prefix(U1 "lock-0000000001", U1 "lock-"), 1);
    CHECK_INT(zkl__has_prefix(U1 "lock-", U1 "lock-"), 1); /* equal */
    CHECK_INT(zkl__has_prefix(U1 "lock", U1 "lock-"), 0);  /* shorter name */
    CHECK_INT(zkl__has_prefix(U1 "lock-0000000001", U2 "lock-"), 0);
    CHECK_INT(zkl__has_prefix("_C_0F1E2D3C", "_c_0f1e2d3c"), 0); /* case-sensitive */
    CHECK_INT(zkl__has_prefix("", U1), 0);
    /* bad prefixes never match: an empty prefix must not adopt a stranger's node */
    CHECK_INT(zkl__has_prefix(U1 "lock-0000000001", ""), 0);
    CHECK_INT(zkl__has_prefix("", ""), 0);
    CHECK_INT(zkl__has_prefix(U1 "lock-0000000001", NULL), 0);
    CHECK_INT(zkl__has_prefix(NULL, U1), 0);
    CHECK_INT(zkl__has_prefix(NULL, NULL), 0);
    /* recovery of a freshly built node among realistic siblings */
    {
        unsigned char rnd[16];
        char prefix[64], own[80], near[80];
        int i;
        for (i = 0; i < 16; i++)
            rnd[i] = (unsigned char)(0x10 * i + 3);
        CHECK_INT(zkl__protected_prefix(prefix, sizeof prefix, rnd, ZKL_WRITE), 48);
        snprintf(own, sizeof own, "%s%010d", prefix, 123);
        snprintf(near, sizeof near, "%s", own);
        near[38] = near[38] == '0' ? '1' : '0'; /* the same uuid but its last digit */
        const char *list[] = {U1 "__READ__0000000120", near, own, U2 "__WRIT__0000000124"};
        CHECK_INT(find_prefix(list, 4, prefix), 2);
    }
}

int main(void) {
    test_tokens();
    test_protected_prefix();
    test_round_trip();
    test_sort_key();
    test_is_writer();
    test_key_wrapped();
    test_sort_children();
    test_pick_mutex();
    test_pick_wrapped();
    test_pick_latch();
    test_pick_rw();
    test_pick_bad();
    test_has_prefix();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
