#!/usr/bin/env bash
# bench/tools/cycle_instructions.sh: user-space instructions per uncontended acquire+release,
# counted by valgrind's callgrind, for zklock on Lua 5.4 and LuaJIT and for the raw C client's
# create+delete. Instruction counts do not depend on what else the machine runs, so this is the
# measure to compare two trees with on a busy machine (CPU time is bench/run's, on a quiet one).
#
#   bash bench/tools/cycle_instructions.sh [--by-object] [--hosts LIST]
#
# --hosts picks the host paths the zklock cycle runs on (comma-separated, default "blocking"):
# blocking (the main thread, no adapter), scheduler (a coroutine of client:spawn, client:run),
# cqueues (a cqueues controller with zklock.adapters.cqueues), luv (a libuv loop with
# zklock.adapters.luv); the adapter paths need lua-cqueues / lua-luv for that Lua.
#
# Each contender runs twice, 100 and 600 cycles after 50 warm ones; the difference over 500 is
# the per-cycle count (start-up and connection cancel out). --by-object splits the count by
# shared object (the interpreter, libc, libzookeeper_st, zklock's core). Needs build/ and
# build-jit/ (cmake), valgrind, and a C compiler for the raw driver; starts a throwaway ZooKeeper
# through tests/with_zk.lua unless ZK_HOSTS is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
BY_OBJECT=0 HOSTS=blocking
while [ $# -gt 0 ]; do
  case $1 in
    --by-object) BY_OBJECT=1; shift ;;
    --hosts) HOSTS=$2; shift 2 ;;
    *) echo "usage: $0 [--by-object] [--hosts blocking,scheduler,cqueues,luv]" >&2; exit 2 ;;
  esac
done
export ZKL_CYCLE_ARGS="--hosts $HOSTS $([ $BY_OBJECT = 1 ] && echo --by-object)"
if [ -z "${ZK_HOSTS:-}" ]; then exec lua5.4 tests/with_zk.lua bash "$0" $ZKL_CYCLE_ARGS; fi
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/cycle.lua" <<'EOF'
local build, hosts, n, host = arg[1], arg[2], tonumber(arg[3]), arg[4] or "blocking"
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath
local zklock = require("zklock")
local c = assert(zklock.connect(hosts, { session_timeout = 10 }))
local m = c:mutex(("/bench/cycle-instructions/%d-%d"):format(os.time(), math.random(1e9)))
local function cycles()
  for _ = 1, 50 + n do assert(m:acquire(10)); m:release() end
end
if host == "blocking" then
  cycles()
elseif host == "scheduler" then
  c:spawn(cycles)
  assert(c:run(600))
elseif host == "cqueues" then
  local cqueues = require("cqueues")
  local cq = cqueues.new()
  require("zklock.adapters.cqueues").attach(c, cq)
  cq:wrap(function() cycles(); c:close() end)
  assert(cq:loop())
elseif host == "luv" then
  local uv = require("luv")
  local zluv = require("zklock.adapters.luv")
  zluv.attach(c, uv)
  zluv.spawn(c, function() cycles(); c:close() end)
  uv.run()
end
c:close()
EOF
cc -O2 -o "$tmp/raw_zk" bench/drivers/raw_zk.c -lzookeeper_st

# run NAME N COMMAND...: callgrind output in $tmp/NAME.N
run() {
  local name=$1 n=$2; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$tmp/$name.$n" "$@" >/dev/null 2>"$tmp/$name.$n.err" || {
    echo "$name failed:" >&2; tail -n 20 "$tmp/$name.$n.err" >&2; exit 1; }
}
names=()
for host in ${HOSTS//,/ }; do
  for n in 100 600; do
    run "lua54-$host" "$n" lua5.4 "$tmp/cycle.lua" build "$ZK_HOSTS" "$n" "$host"
    [ -e build-jit/zklock/core.so ] && run "luajit-$host" "$n" luajit "$tmp/cycle.lua" build-jit "$ZK_HOSTS" "$n" "$host"
  done
  names+=("lua54-$host" "luajit-$host")
done
for n in 100 600; do run raw "$n" "$tmp/raw_zk" "$ZK_HOSTS" uncontended "n=$n" warm=50; done
names+=(raw)

python3 - "$tmp" "$BY_OBJECT" "${names[@]}" <<'EOF'
import collections, os, re, subprocess, sys
tmp, by_object, names = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
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
def label_of(name):
    if name == "raw": return "raw C client"
    rt, host = name.split("-", 1)
    return f"zklock, {'Lua 5.4' if rt == 'lua54' else 'LuaJIT'}, {host}"
for name in names:
    label = label_of(name)
    if not os.path.exists(f"{tmp}/{name}.100"): continue
    (t1, o1), (t2, o2) = read(f"{tmp}/{name}.100"), read(f"{tmp}/{name}.600")
    print(f"{label:30s} {(t2 - t1) / 500:9.0f} instructions per acquire+release (create+delete for raw)")
    if by_object:
        for k in sorted(o2, key=lambda k: -(o2[k] - o1.get(k, 0)))[:6]:
            v = (o2[k] - o1.get(k, 0)) / 500
            if v >= 50: print(f"    {k:34s} {v:9.0f}")
EOF
