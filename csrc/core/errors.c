/* errors.c - names and messages for zklock's error codes (one X-macro list in zklock.h). */
#include "zklock.h"

const char *zkl_strerror(int err) {
    switch (err) {
#define XX(name, code, msg)                                                                        \
    case code:                                                                                     \
        return msg;
        ZKL_ERRNO_MAP(XX)
#undef XX
    default:
        return "unknown error";
    }
}

const char *zkl_err_name(int err) {
    switch (err) {
#define XX(name, code, msg)                                                                        \
    case code:                                                                                     \
        return #name;
        ZKL_ERRNO_MAP(XX)
#undef XX
    default:
        return "EUNKNOWN";
    }
}

int zkl_outcome_unknown(int err) {
    switch (err) {
#define XX(name)                                                                                   \
    case ZKL_##name:                                                                               \
        return 1;
        ZKL_OUTCOME_UNKNOWN_MAP(XX)
#undef XX
    default:
        return 0;
    }
}
