/* l_scripted.h - included by the Lua binding (csrc/lua/lzklock.h) when it is compiled for the
 * scripted test module zklock.scripted (l_scripted.c): another client metatable, clients on the
 * fake ZooKeeper, a wait that never sleeps. */
#ifndef L_SCRIPTED_H
#define L_SCRIPTED_H

#include <lua.h>

#include "zklock.h"

#define ZKL_CLIENT_MT "zklock.scripted.client"
#define ZKL_LUA_CLIENT_NEW(cfg, out) zkl_scripted_client_new((cfg), (out))
#define ZKL_LUA_CLIENT_WAIT(L, c, ms) zkl_scripted_wait((L), (c), (ms))

int zkl_scripted_client_new(const zkl_config *cfg, zkl_client **out);
int zkl_scripted_wait(lua_State *L, zkl_client *c, int ms);

#endif
