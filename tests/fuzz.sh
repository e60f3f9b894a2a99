#!/usr/bin/env bash
# tests/fuzz.sh SECONDS - build the libFuzzer target fuzz_naming (clang, ASan+UBSan) in build-fuzz/
# and run it for SECONDS seconds over a copy of tests/corpus/naming/ (the committed seeds are
# never modified). Exit status non-zero if the build fails or the fuzzer finds a crash, a leak or
# a broken invariant; the input that did it is kept as build-fuzz/crash-* (or leak-*, timeout-*).
# Reproduce one with: build-fuzz/fuzz_naming build-fuzz/crash-<sha1>
set -euo pipefail
secs=${1:?usage: tests/fuzz.sh SECONDS}
case $secs in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CC=clang cmake -S "$root" -B "$build" -DZKL_FUZZ=ON -DZKL_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; exit 1; }
cmake --build "$build" --target fuzz_naming -j 2 >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
cp -R "$root/tests/corpus/naming" "$work/corpus"

# -timeout: one input taking longer than 10 s is a bug (names are pure string functions)
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  "$build/fuzz_naming" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=1024 \
  -print_final_stats=1 -artifact_prefix="$build/" "$work/corpus"
