#include "harness.h"
static void placeholder(void) { CHECK(1); }
H_DEFINE_GROUP(g_alloc, {"placeholder", placeholder});
