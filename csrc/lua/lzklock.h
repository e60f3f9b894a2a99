/* lzklock.h - shared declarations of the zklock.core Lua binding. */
#ifndef LZKLOCK_H
#define LZKLOCK_H

#include <stdio.h>

#include <lauxlib.h>
#include <lua.h>

#include "compat.h"
#include "zklock.h"

#define ZKL_CLIENT_MT "zklock.client"

/* Push nil, "<NAME>: <message>[: <context>]", "<NAME>" and return 3. */
int zkl_lua_fail(lua_State *L, int code, const char *context);

void zkl_lua_client_register(lua_State *L);

/* core.proc: process control for the zklock command (l_proc.c) */
void zkl_lua_proc_register(lua_State *L);

#endif
