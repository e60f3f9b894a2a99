-- Written by scripts/release.sh from rockspec/zklock.rockspec.in: edit the template, not this.
rockspec_format = "3.0"
package = "zklock"
version = "0.1.0-1"
source = {
  url = "https://zklock.example/releases/zklock-0.1.0.tar.gz",
  dir = "zklock-0.1.0",
}
description = {
  summary = "Distributed locks over ZooKeeper for Lua, wire-compatible with Apache Curator",
  detailed = [[
Fair reentrant mutex (Curator InterProcessMutex) and friends over the ZooKeeper C client.
acquire() suspends the calling coroutine instead of blocking the thread; every acquisition
carries a fencing token; loss of a lock is reported per lock (SUSPENDED / LOST).
Includes zklock.testing (lua/zklock/testing/), the harness its own specs use: throwaway real
ZooKeeper servers and ensembles with kill, pause, restart and session expiry, per-client network
faults through a fault proxy, seeded fault schedules and history checkers, for busted specs of
code that takes these locks (needs java and the zookeeper package at test time only, and python3,
part of Debian's base system, for the fault proxy).
Installs the `zklock` command: run a program under a lock from a shell script or cron (flock-like,
with signal forwarding and a kill on lock loss), list holders and waiters, reap orphaned nodes.
]],
  license = "Apache-2.0",
}
dependencies = {
  "lua >= 5.1",
  "argparse >= 0.7", -- the zklock command's options (Debian: lua-argparse)
}
external_dependencies = {
  ZOOKEEPER = { header = "zookeeper/zookeeper.h", library = "zookeeper_st" },
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    ZKL_TESTS = "OFF",
    ZKL_WERROR = "OFF", -- a newer compiler's new warning must not break an install
    ZKL_INSTALL_C_API = "OFF", -- a rock installs the Lua module only (plain cmake also installs the C API)
    ZKL_EXAMPLES = "OFF",
    ZKL_INSTALL_TESTING = "ON", -- zklock.testing ships in this rock (see README)
    LUA_INCLUDE_DIR = "$(LUA_INCDIR)",
    LUADIR = "$(LUADIR)",
    LIBDIR = "$(LIBDIR)",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
  },
  install = {
    bin = { zklock = "bin/zklock" }, -- luarocks wraps it for the Lua it installs for
  },
}
test_dependencies = { "busted" }
test = { type = "busted" }
