/* zk_real.c - the seam's real table: libzookeeper_st and the monotonic clock. */
#include <time.h>

#include "zk.h"

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const zkl_zk zkl__zk_real = {
    zookeeper_init2,
    zookeeper_close,
    zookeeper_interest,
    zookeeper_process,
    zoo_state,
    zoo_recv_timeout,
    zoo_client_id,
    zoo_get_context,
    zoo_set_servers_resolution_delay,
    zoo_set_debug_level,
    zoo_add_auth,
    zoo_acreate2,
    zoo_adelete,
    zoo_aexists,
    zoo_aget,
    zoo_awget,
    zoo_aget_children,
    zoo_awget_children,
    zoo_aset,
    zoo_amulti,
    zoo_aremove_all_watches,
    mono_ms,
    zoo_awexists,
    zoo_acreate2_ttl,
    zoo_aremove_watches,
};
