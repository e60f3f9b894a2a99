/* lzklock.h - shared declarations of the zklock.core Lua binding. */
#ifndef LZKLOCK_H
#define LZKLOCK_H

#include <stdio.h>

/* The scripted test module (CMake target zklock_scripted) compiles this binding again with
 * -DZKL_LUA_HOOKS="l_scripted.h" (tests/script/), which renames the client metatable and plugs
 * the fake ZooKeeper into core.new and c:wait (see ZKL_LUA_CLIENT_NEW in l_client.c). */
#ifdef ZKL_LUA_HOOKS
#include ZKL_LUA_HOOKS
#endif

#include <lauxlib.h>
#include <lua.h>

#include "compat.h"
#include "zklock.h"

/* the client userdata's metatable (the scripted module's has another name, so that both modules
 * can live in one Lua state) */
#ifndef ZKL_CLIENT_MT
#define ZKL_CLIENT_MT "zklock.client"
#endif

/* Push nil, "<NAME>: <message>[: <context>]", "<NAME>" and return 3. */
int zkl_lua_fail(lua_State *L, int code, const char *context);

void zkl_lua_client_register(lua_State *L);

/* core.proc: process control for the zklock command (l_proc.c) */
void zkl_lua_proc_register(lua_State *L);

/* core.waker: an fd's readiness as a byte on a unix socket (l_waker.c) */
void zkl_lua_waker_register(lua_State *L);

#endif
