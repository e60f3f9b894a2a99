/* raw_zk.c - the "raw ceiling" contender: what the server itself does for the requests a lock
 * cycle needs at the very least, one create (EPHEMERAL_SEQUENTIAL) and one delete, with nothing
 * on top. ZooKeeper C client, single-threaded flavour (libzookeeper_st): zookeeper_interest +
 * poll + zookeeper_process, exactly the I/O loop zklock's core runs on.
 *
 *   raw_zk HOSTS uncontended n=2000 warm=200     one cycle at a time: create, then delete
 *   raw_zk HOSTS pipelined depth=K n=N warm=200  K cycles in flight (a cycle's delete is sent when
 *                                                its create is answered, a new cycle when a delete
 * is)
 *   list=1 (either workload): a lock's three requests, still with no lock logic: each cycle slot
 *   has a parent node of its own, and a cycle sends its create and a getChildren of that parent
 *   back to back (as zklock pipelines them) and the delete when the listing is answered. The
 *   listing is a read between the writes of one session: what it costs the server's batching.
 *
 * Prints one line "RESULT key=value ..." (see bench/README.md). Requests are counted at the
 * server: delta of mntr zk_packets_received over the measured part, less mntr's own share.
 * Build: cc -O2 -o raw_zk raw_zk.c -lzookeeper_st */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

static zhandle_t *zh;
static int connected;
static int port;
static char data[256];
static int data_len;
static char prefix[512];
static char dir[128];
static int with_list;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* User + system CPU of this process so far (getrusage RUSAGE_SELF), seconds. */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what, int rc) {
    fprintf(stderr, "raw_zk: %s: %s (%d)\n", what, rc ? zerror(rc) : strerror(errno), rc);
    exit(1);
}

/* ------------------------------------------------------------ four-letter words */

/* Value of `key` in the server's mntr output (-1 if unavailable). */
static long long mntr_value(const char *text, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '\t') return atoll(p + kl + 1);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return -1;
}

static char *four(const char *cmd) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0)
        die("four-letter word connect", 0);
    if (write(s, cmd, 4) != 4) die("four-letter word write", 0);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t n = read(s, buf + len, cap - len - 1);
        if (n <= 0) break;
        len += (size_t)n;
    }
    buf[len] = 0;
    close(s);
    return buf;
}

typedef struct {
    long long recv, sent, watch, fsync;
} counters;

static counters snap(void) {
    char *t = four("mntr");
    counters c;
    c.recv = mntr_value(t, "zk_packets_received");
    c.sent = mntr_value(t, "zk_packets_sent");
    c.watch = mntr_value(t, "zk_sum_node_deleted_watch_count") +
              mntr_value(t, "zk_sum_node_children_watch_count") +
              mntr_value(t, "zk_sum_node_changed_watch_count") +
              mntr_value(t, "zk_sum_node_created_watch_count");
    c.fsync = mntr_value(t, "zk_cnt_fsynctime"); /* transaction log fsyncs (-1: not reported) */
    free(t);
    return c;
}

/* ------------------------------------------------------------ event loop */

static void watcher(zhandle_t *h, int type, int state, const char *path, void *ctx) {
    (void)h, (void)path, (void)ctx;
    if (type == ZOO_SESSION_EVENT) connected = state == ZOO_CONNECTED_STATE;
}

/* One round of the single-threaded client: poll its fd as it asks, then let it process. */
static void pump(int max_ms) {
    int fd = -1, interest = 0;
    struct timeval tv;
    int rc = zookeeper_interest(zh, &fd, &interest, &tv);
    if (rc != ZOK && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT)
        die("zookeeper_interest", rc);
    int t = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
    if (max_ms >= 0 && t > max_ms) t = max_ms;
    struct pollfd p = {fd, 0, 0};
    if (interest & ZOOKEEPER_READ) p.events |= POLLIN;
    if (interest & ZOOKEEPER_WRITE) p.events |= POLLOUT;
    int n = poll(&p, fd >= 0 ? 1 : 0, t);
    int ev = 0;
    if (n > 0) {
        if (p.revents & (POLLIN | POLLERR | POLLHUP)) ev |= ZOOKEEPER_READ;
        if (p.revents & (POLLOUT | POLLERR | POLLHUP)) ev |= ZOOKEEPER_WRITE;
    }
    rc = zookeeper_process(zh, ev);
    if (rc != ZOK && rc != ZNOTHING && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT)
        die("zookeeper_process", rc);
}

/* ------------------------------------------------------------ cycles */

typedef struct {
    char node[512];
    char parent[160], pfx[512]; /* list=1: the slot's own parent and node prefix */
    double t0;
    int busy;
} slot;

static long started, finished, target;
static int pending_sync;
static double *lat;
static int record_lat;

static void start_cycle(slot *s);

static void delete_done(int rc, const void *ctx) {
    slot *s = (slot *)ctx;
    if (rc != ZOK) die("delete", rc);
    if (record_lat && finished < target) lat[finished] = now_s() - s->t0;
    finished++;
    s->busy = 0;
    if (started < target) start_cycle(s);
}

static void create_done(int rc, const char *name, const void *ctx) {
    slot *s = (slot *)ctx;
    if (rc != ZOK) die("create", rc);
    snprintf(s->node, sizeof s->node, "%s", name);
    if (with_list) return; /* the delete goes when the listing, sent right after, is answered */
    rc = zoo_adelete(zh, s->node, -1, delete_done, s);
    if (rc != ZOK) die("zoo_adelete", rc);
}

/* list=1: replies come in request order, so the create's (and its name) came first */
static void list_done(int rc, const struct String_vector *names, const void *ctx) {
    slot *s = (slot *)ctx;
    (void)names;
    if (rc != ZOK) die("getChildren", rc);
    rc = zoo_adelete(zh, s->node, -1, delete_done, s);
    if (rc != ZOK) die("zoo_adelete", rc);
}

static void start_cycle(slot *s) {
    started++;
    s->busy = 1;
    s->t0 = now_s();
    int rc = zoo_acreate(zh, with_list ? s->pfx : prefix, data, data_len, &ZOO_OPEN_ACL_UNSAFE,
                         ZOO_EPHEMERAL_SEQUENTIAL, create_done, s);
    if (rc != ZOK) die("zoo_acreate", rc);
    if (with_list) {
        rc = zoo_aget_children(zh, s->parent, 0, list_done, s);
        if (rc != ZOK) die("zoo_aget_children", rc);
    }
}

/* list=1: the parents of `depth` slots (slot i's is DIR/l<i>) */
static void slot_names(slot *s, int i) {
    snprintf(s->parent, sizeof s->parent, "%s/l%d", dir, i);
    snprintf(s->pfx, sizeof s->pfx, "%s/_c_00000000-0000-4000-8000-000000000000-lock-", s->parent);
}

/* Run n cycles with `depth` in flight; returns elapsed seconds. */
static double run_cycles(long n, int depth, double limit_s) {
    slot *slots = calloc((size_t)depth, sizeof *slots);
    started = finished = 0;
    target = n;
    double t0 = now_s();
    for (int i = 0; i < depth; i++)
        slot_names(&slots[i], i);
    for (int i = 0; i < depth && started < target; i++)
        start_cycle(&slots[i]);
    while (finished < target) {
        pump(100);
        if (now_s() - t0 > limit_s) {
            fprintf(stderr, "raw_zk: gave up after %.0f s (%ld of %ld cycles)\n", limit_s, finished,
                    target);
            exit(1);
        }
    }
    double el = now_s() - t0;
    free(slots);
    return el;
}

static void sync_done(int rc, const char *name, const void *ctx) {
    (void)name, (void)ctx;
    if (rc != ZOK && rc != ZNODEEXISTS) die("create parent", rc);
    pending_sync--;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long argl(int argc, char **argv, const char *key, long dflt) {
    size_t kl = strlen(key);
    for (int i = 3; i < argc; i++)
        if (strncmp(argv[i], key, kl) == 0 && argv[i][kl] == '=') return atol(argv[i] + kl + 1);
    return dflt;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr,
                "usage: raw_zk HOSTS uncontended|pipelined [n=N] [depth=K] [warm=W] [list=1]\n");
        return 2;
    }
    const char *hosts = argv[1], *mode = argv[2];
    const char *colon = strrchr(hosts, ':');
    port = colon ? atoi(colon + 1) : 2181;
    long n = argl(argc, argv, "n", 2000), warm = argl(argc, argv, "warm", 200);
    int depth = (int)argl(argc, argv, "depth", 1);
    int uncontended = strcmp(mode, "uncontended") == 0;
    with_list = argl(argc, argv, "list", 0) != 0;
    if (!uncontended && strcmp(mode, "pipelined") != 0) {
        fprintf(stderr, "raw_zk: unknown workload %s\n", mode);
        return 2;
    }
    if (gethostname(data, sizeof data) != 0) strcpy(data, "localhost");
    data_len = (int)strlen(data); /* the same node data zklock writes by default: the host name */

    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zh = zookeeper_init(hosts, watcher, 10000, NULL, NULL, 0);
    if (!zh) die("zookeeper_init", 0);
    /* By default (0) the client resolves the host list again inside every zookeeper_interest()
     * call: a getaddrinfo (netlink socket, /etc files) per loop turn, twice per cycle. zklock's
     * core turns that off the same way; a ceiling must not pay for it either. */
    zoo_set_servers_resolution_delay(zh, 60 * 1000);
    double deadline = now_s() + 10;
    while (!connected) {
        pump(100);
        if (now_s() > deadline) die("connect timed out", 0);
    }
    /* Node names as long as Curator's protected names (_c_<uuid>-lock-<seq10>), so request and
     * reply sizes match the lock recipes'. */
    snprintf(dir, sizeof dir, "/bench/raw-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "%s/_c_00000000-0000-4000-8000-000000000000-lock-", dir);
    pending_sync = 2;
    zoo_acreate(zh, "/bench", "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, sync_done, NULL);
    zoo_acreate(zh, dir, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, sync_done, NULL);
    while (pending_sync > 0)
        pump(100);
    if (with_list) { /* every slot's parent */
        int slots = uncontended ? 1 : depth;
        for (int i = 0; i < slots; i++) {
            char parent[160];
            snprintf(parent, sizeof parent, "%s/l%d", dir, i);
            pending_sync++;
            int rc = zoo_acreate(zh, parent, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, sync_done, NULL);
            if (rc != ZOK) die("zoo_acreate (parent)", rc);
        }
        while (pending_sync > 0)
            pump(100);
    }

    run_cycles(warm, uncontended ? 1 : depth, 60);
    lat = calloc((size_t)n, sizeof *lat);
    record_lat = uncontended;
    counters c0 = snap(), c1 = snap(); /* c1 - c0: what one mntr itself adds */
    double cpu0 = cpu_s();
    double el = run_cycles(n, uncontended ? 1 : depth, 300);
    double cpu_per = (cpu_s() - cpu0) / (double)n * 1e6;
    counters c2 = snap();
    double req = (double)((c2.recv - c1.recv) - (c1.recv - c0.recv)) / (double)n;
    double notif = (double)(c2.watch - c1.watch) / (double)n;
    /* log fsyncs per cycle: how well the server batched the writes (one fsync per batch) */
    double fsync = c2.fsync < 0 ? -1 : (double)(c2.fsync - c1.fsync) / (double)n;
    if (uncontended) {
        qsort(lat, (size_t)n, sizeof *lat, cmp_d);
        printf("RESULT ops=%ld secs=%.4f rate=%.1f p50_us=%.1f p99_us=%.1f req_per=%.3f "
               "notif_per=%.3f cpu_us_per=%.3f fsync_per=%.4f list=%d\n",
               n, el, (double)n / el, lat[n / 2] * 1e6, lat[(long)(n * 0.99)] * 1e6, req, notif,
               cpu_per, fsync, with_list);
    } else {
        printf("RESULT ops=%ld secs=%.4f rate=%.1f depth=%d req_per=%.3f notif_per=%.3f "
               "cpu_us_per=%.3f fsync_per=%.4f list=%d\n",
               n, el, (double)n / el, depth, req, notif, cpu_per, fsync, with_list);
    }
    fflush(stdout);
    zookeeper_close(zh);
    return 0;
}
