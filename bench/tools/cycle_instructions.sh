#!/usr/bin/env bash
# bench/tools/cycle_instructions.sh: user-space instructions per uncontended acquire+release,
# counted by valgrind's callgrind, for zklock on Lua 5.4 and LuaJIT and for the raw C client's
# create+delete. Instruction counts do not depend on what else the machine runs, so this is the
# measure to compare two trees with on a busy machine (CPU time is bench/run's, on a quiet one).
#
#   bash bench/tools/cycle_instructions.sh [--by-object]
#
# Each contender runs twice, 100 and 600 cycles after 50 warm ones; the difference over 500 is
# the per-cycle count (start-up and connection cancel out). --by-object splits the count by
# shared object (the interpreter, libc, libzookeeper_st, zklock's core). Needs build/ and
# build-jit/ (cmake), valgrind, and a C compiler for the raw driver; starts a throwaway ZooKeeper
# through tests/with_zk.lua unless ZK_HOSTS is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
BY_OBJECT=0
[ "${1:-}" = "--by-object" ] && BY_OBJECT=1
if [ -z "${ZK_HOSTS:-}" ]; then exec lua5.4 tests/with_zk.lua bash "$0" "$@"; fi
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/cycle.lua" <<'EOF'
local build, hosts, n = arg[1], arg[2], tonumber(arg[3])
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath
local zklock = require("zklock")
local c = assert(zklock.connect(hosts, { session_timeout = 10 }))
local m = c:mutex(("/bench/cycle-instructions/%d-%d"):format(os.time(), math.random(1e9)))
for _ = 1, 50 + n do assert(m:acquire(10)); m:release() end
c:close()
EOF
cc -O2 -o "$tmp/raw_zk" bench/drivers/raw_zk.c -lzookeeper_st

# run NAME N COMMAND...: callgrind output in $tmp/NAME.N
run() {
  local name=$1 n=$2; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$tmp/$name.$n" "$@" >/dev/null 2>"$tmp/$name.$n.err" || {
    echo "$name failed:" >&2; tail -n 20 "$tmp/$name.$n.err" >&2; exit 1; }
}
for n in 100 600; do
  run lua54 "$n" lua5.4 "$tmp/cycle.lua" build "$ZK_HOSTS" "$n"
  [ -e build-jit/zklock/core.so ] && run luajit "$n" luajit "$tmp/cycle.lua" build-jit "$ZK_HOSTS" "$n"
  run raw "$n" "$tmp/raw_zk" "$ZK_HOSTS" uncontended "n=$n" warm=50
done

python3 - "$tmp" "$BY_OBJECT" <<'EOF'
import collections, os, re, subprocess, sys
tmp, by_object = sys.argv[1], sys.argv[2] == "1"
def read(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    total, objs = 0, collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", line)
        if m: total = int(m.group(1).replace(",", ""))
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S+ \[(\S+)\]$", line)
        if m: objs[os.path.basename(m.group(2))] += int(m.group(1).replace(",", ""))
    return total, objs
for name, label in (("lua54", "zklock, Lua 5.4"), ("luajit", "zklock, LuaJIT"), ("raw", "raw C client")):
    if not os.path.exists(f"{tmp}/{name}.100"): continue
    (t1, o1), (t2, o2) = read(f"{tmp}/{name}.100"), read(f"{tmp}/{name}.600")
    print(f"{label:18s} {(t2 - t1) / 500:9.0f} instructions per acquire+release (create+delete for raw)")
    if by_object:
        for k in sorted(o2, key=lambda k: -(o2[k] - o1.get(k, 0)))[:6]:
            v = (o2[k] - o1.get(k, 0)) / 500
            if v >= 50: print(f"    {k:34s} {v:9.0f}")
EOF
