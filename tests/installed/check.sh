#!/usr/bin/env bash
# tests/installed/check.sh STEP DIR: zklock as a user gets it, one step at a time (.ci/run,
# stage "release"; each step needs the ones before it, all in the scratch directory DIR).
#   pack DIR     scripts/release.sh --head --out DIR/dist: the tarball, the rockspec, the .src.rock
#   install DIR  luarocks install DIR/dist/zklock-X.Y.Z-1.src.rock into a fresh tree DIR/tree
#   smoke DIR    tests/installed/smoke_spec.lua against DIR/tree only, from outside the source
#                tree (a real ZooKeeper from the installed zklock.testing)
#   recipe DIR   docs/testing.md, "Testing your own code with busted": the block after the marker line
#                "<!-- ci: tests/installed/check.sh recipe -->", verbatim, with TREE=DIR/tree, in a
#                copy of examples/busted-user; busted must pass and have run tests
set -euo pipefail
STEP=${1:?usage: check.sh pack|install|smoke|recipe DIR}
DIR=${2:?usage: check.sh pack|install|smoke|recipe DIR}
cd "$(dirname "$0")/../.."
SRC=$(pwd)
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
VERSION=$(sed -n 's/^#define ZKL_VERSION "\([^"]*\)".*/\1/p' csrc/include/zklock.h)
ROCK="$DIR/dist/zklock-$VERSION-1.src.rock"
TREE="$DIR/tree"
LUAROCKS=(luarocks --lua-version=5.4)

case "$STEP" in
  pack)
    rm -rf "$DIR/dist"
    bash scripts/release.sh --head --out "$DIR/dist"
    unzip -l "$ROCK"
    # the .src.rock holds the release rockspec and the tarball, and nothing else
    [ "$(unzip -Z1 "$ROCK" | sort | tr '\n' ' ')" = "zklock-$VERSION-1.rockspec zklock-$VERSION.tar.gz " ]
    ;;
  install)
    rm -rf "$TREE"
    # from a directory of its own: luarocks must build from the rock alone
    mkdir -p "$DIR/empty"
    # --deps-mode=none: the one dependency, argparse (the zklock command), is Debian's lua-argparse
    # (.ci/deps.sh); luarocks would otherwise fetch it from the network
    lua5.4 -e 'require("argparse")'
    (cd "$DIR/empty" && "${LUAROCKS[@]}" --tree "$TREE" install --deps-mode=none "$ROCK")
    # captured first: grep -q leaving early could kill luarocks with SIGPIPE under pipefail
    listed=$("${LUAROCKS[@]}" --tree "$TREE" list --porcelain)
    grep -q "^zklock	$VERSION-1	installed	" <<<"$listed"
    test -f "$TREE/lib/lua/5.4/zklock/core.so"
    test -f "$TREE/share/lua/5.4/zklock/testing/init.lua"
    test -x "$TREE/bin/zklock"
    # the command finds the tree it was installed into with no Lua path variables set
    env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 -u LUA_INIT -u LUA_INIT_5_4 \
      "$TREE/bin/zklock" --help | grep -q "^Usage: zklock"
    test -f "$TREE/share/lua/5.4/zklock/testing/proxy.py"   # the fault proxy of testing.proxy
    ;;
  smoke)
    mkdir -p "$DIR/smoke" # no .busted here: only the tree's paths and the system's
    cd "$DIR/smoke"
    ZKL_TREE=$TREE ZKL_EXPECT_VERSION=$VERSION \
      LUA_PATH_5_4="$("${LUAROCKS[@]}" --tree "$TREE" path --lr-path);;" \
      LUA_CPATH_5_4="$("${LUAROCKS[@]}" --tree "$TREE" path --lr-cpath);;" \
      busted --lua=lua5.4 -o TAP "$SRC/tests/installed/smoke_spec.lua" | tee out.tap
    # four tests, none failed and none skipped (a skip is "ok N - # SKIP ...": not a pass)
    grep -q '^1\.\.4$' out.tap && ! grep -q '^not ok' out.tap && ! grep -qiE '^ok [0-9]+( -)? # skip' out.tap
    ;;
  recipe)
    block=$(awk '/^<!-- ci: tests\/installed\/check.sh recipe -->$/ { m = 1; next }
      m == 1 && /^```sh$/ { m = 2; next }
      m == 2 && /^```$/ { exit }
      m == 2 { print }' docs/testing.md)
    [ -n "$block" ] || { echo "docs/testing.md has no recipe block after the marker" >&2; exit 1; }
    printf 'the recipe (docs/testing.md):\n%s\n\n' "$block"
    rm -rf "$DIR/user"
    cp -r examples/busted-user "$DIR/user"
    cd "$DIR/user"
    # a clean environment as a user would have it: no Lua path variables of ours
    env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 -u LUA_INIT -u LUA_INIT_5_4 \
      TREE="$TREE" bash -euo pipefail -c "$block" 2>&1 | tee out.txt
    grep -Eq '^[1-9][0-9]* successes? / 0 failures / 0 errors / 0 pending' out.txt
    ;;
  *) echo "unknown step $STEP" >&2; exit 2 ;;
esac
