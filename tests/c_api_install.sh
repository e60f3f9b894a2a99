#!/usr/bin/env bash
# tests/c_api_install.sh BUILD_DIR SOURCE_DIR VERSION [CFLAGS]: the C API as a user gets it.
# Installs BUILD_DIR into a temporary prefix, checks the installed zklock.pc, compiles
# examples/c/lock_demo.c against the installed header and library through pkg-config (the shared
# library, and the static one when `pkg-config --static` is asked for), and runs both builds
# against the ZooKeeper at ZK_HOSTS, checking what they print. CFLAGS (e.g. the sanitizer flags
# of an ASan build) go to both compilations. Registered with CTest as c_api_install; exits 77
# (skipped) without ZK_HOSTS, a C compiler or pkg-config. Run alone with a throwaway server:
#   lua5.4 tests/with_zk.lua bash tests/c_api_install.sh build . 0.1.0
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR VERSION [CFLAGS]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
version=$3
read -r -a cflags <<<"${4:-}"
CC=${CC:-cc}

if [ -z "${ZK_HOSTS:-}" ]; then echo "ZK_HOSTS is not set: skipped"; exit 77; fi
for tool in "$CC" pkg-config cmake; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool not found: skipped"; exit 77; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAILED: $*" >&2; exit 1; }

# 1. install, as a user would (the whole project: the Lua module comes along)
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install"; }
pc=$(find "$prefix" -name zklock.pc)
[ -n "$pc" ] || fail "no zklock.pc installed under $prefix"
[ -f "$prefix/include/zklock.h" ] || fail "no include/zklock.h installed"
echo "installed: $(cd "$prefix" && find . -path ./share -prune -o -type f -print -o -type l -print | sort | tr '\n' ' ')"

# 2. pkg-config sees the installed copy, with the installed prefix in it
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH # only this one: no other zklock.pc may answer
pkg-config --exists zklock || fail "pkg-config does not find zklock"
[ "$(pkg-config --modversion zklock)" = "$version" ] ||
  fail "zklock.pc says version $(pkg-config --modversion zklock), the header $version"
libdir=$(pkg-config --variable=libdir zklock)
[ "$(pkg-config --variable=prefix zklock)" = "$prefix" ] ||
  fail "zklock.pc names prefix $(pkg-config --variable=prefix zklock), installed to $prefix"
[ -f "$libdir/libzklock.a" ] || fail "no libzklock.a in $libdir"
# (outputs are captured before grep -q reads them: with pipefail, grep -q leaving early can kill
# the writer with SIGPIPE and fail the pipeline although the line was there)
static_libs=$(pkg-config --static --libs zklock)
grep -q -- '-lzookeeper_st' <<<"$static_libs" || fail "zklock.pc does not name zookeeper_st"
echo "pkg-config: $(pkg-config --cflags --libs zklock) | static: $(pkg-config --static --libs zklock)"

run_demo() { # name binary [env...]: run against ZK_HOSTS and check its output
  local name=$1 bin=$2; shift 2
  local out=$tmp/$name.out path=/zklock-ctest/c-api-$$-$name
  local rc=0
  env "$@" "$bin" "$ZK_HOSTS" "$path" >"$out" 2>&1 || rc=$?
  sed "s/^/    $name: /" "$out"
  [ $rc -eq 0 ] || fail "$name exited with $rc"
  grep -Eq "^acquired $path token [1-9][0-9]* node $path/_c_[0-9a-f-]{36}-lock-[0-9]{10}$" "$out" ||
    fail "$name printed no fencing token"
  grep -qx "try-once while held: ETIMEDOUT" "$out" || fail "$name: the try-once acquisition did not time out"
  grep -qx "released $path" "$out" || fail "$name did not release"
  grep -qx "closed" "$out" || fail "$name did not report the close"
}

# 3. the shared library: exactly the documented command line
if [ -e "$libdir/libzklock.so" ]; then
  # shellcheck disable=SC2046
  "$CC" -Wall -Wextra -Werror "${cflags[@]}" "$src/examples/c/lock_demo.c" \
    $(pkg-config --cflags --libs zklock) -o "$tmp/lock_demo_shared" || fail "compiling against libzklock.so"
  # a prefix outside the loader's path needs LD_LIBRARY_PATH (or an rpath), as for any library
  deps=$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/lock_demo_shared")
  grep -q "libzklock\.so.* => $libdir/" <<<"$deps" ||
    fail "lock_demo_shared does not load $libdir/libzklock.so: $deps"
  run_demo shared "$tmp/lock_demo_shared" LD_LIBRARY_PATH="$libdir"
else
  echo "no libzklock.so (ZKL_SHARED=OFF): static link only"
fi

# 4. the static library: pkg-config --static, with libzklock itself taken from the archive
libs=$(pkg-config --static --libs zklock)
libs=${libs/-lzklock/-Wl,-Bstatic -lzklock -Wl,-Bdynamic}
# shellcheck disable=SC2046,SC2086
"$CC" -Wall -Wextra -Werror "${cflags[@]}" "$src/examples/c/lock_demo.c" \
  $(pkg-config --cflags zklock) $libs -o "$tmp/lock_demo_static" || fail "compiling against libzklock.a"
deps=$(ldd "$tmp/lock_demo_static")
if grep -q libzklock <<<"$deps"; then fail "lock_demo_static still loads libzklock.so: $deps"; fi
run_demo static "$tmp/lock_demo_static"

echo "ok: installed C API compiles and runs through pkg-config (version $version)"
