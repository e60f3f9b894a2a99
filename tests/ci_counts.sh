#!/usr/bin/env bash
# Checks .ci/counts.sh (how .ci/run counts TAP and ctest output) on samples: a skip ("ok N - # SKIP
# reason", busted's pending; ctest's "(Skipped)") counts as skipped, never as passed; its reason is
# printed; with CI=true a skip for a missing dependency (and any ctest skip) counts as failed; a
# test that is skipped on its rerun did not pass there. Run from anywhere: bash tests/ci_counts.sh
# (.ci/run runs it in its lint stage). Exit 0 when every check holds.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
BAD=0

expect() { # what, got, want
  if [ "$2" = "$3" ]; then echo "ok - $1"; else echo "not ok - $1: got '$2', want '$3'"; BAD=$((BAD + 1)); fi
}
# counts CI FUNCTION FILE: run FUNCTION FILE with CI=$CI in a fresh subshell; prints "PASS FAIL SKIP"
# on its last line, the function's own output before it
counts() {
  local ci=$1 fn=$2 file=$3
  ( # shellcheck disable=SC2030
    PASS=0 FAIL=0 SKIP=0 CI=$ci
    . .ci/counts.sh
    "$fn" "$file"
    echo "$PASS $FAIL $SKIP" )
}

# busted's TAP (busted.outputHandlers.TAP): passes, a failure, a describe that errored, a skip for
# a missing dependency (spec/support/deps.lua) in a describe and in a test, and another skip. busted writes a skip as
# "ok N - # SKIP reason"; a test whose name holds "# skip" later on (busted tags start with '#')
# is a pass.
cat >"$LOG/sample.tap" <<'EOF'
ok 1 - mutex acquires
not ok 2 - mutex times out
# spec/10-mutex-basics_spec.lua @ 40
# Failure message: spec/10-mutex-basics_spec.lua:44: Expected objects to be equal.
ok 3 - # SKIP openresty adapter #openresty #lua54 #nosan spec/61-openresty_spec.lua:43: missing dependency: nginx is not installed; install: apt-get install nginx-core
ok 4 - watches fire
ok 5 - # SKIP not yet: waits for the server's answer
not ok 6 - openresty adapter
# spec/61-openresty_spec.lua @ 39
ok 7 - a test whose name says # skip in the middle
ok 8 - # SKIP spec/17-dead-owners_spec.lua:109: missing dependency: Lua module cqueues cannot be loaded; install: apt-get install lua-cqueues
1..8
EOF

out=$(counts "" count_tap "$LOG/sample.tap")
expect "TAP outside CI: 3 passed, 2 failed, 3 skipped" "$(tail -n1 <<<"$out")" "3 2 3"
expect "TAP: each skip's reason is printed" \
  "$(grep -c '^    SKIPPED: ' <<<"$out")" "3"
expect "TAP: the missing dependency's reason is shown whole" \
  "$(grep -cF 'SKIPPED: openresty adapter #openresty #lua54 #nosan spec/61-openresty_spec.lua:43: missing dependency: nginx is not installed; install: apt-get install nginx-core' <<<"$out")" "1"
expect "TAP: the job's line" "$(grep -c '^    3 passed, 2 failed, 3 skipped$' <<<"$out")" "1"

out=$(counts true count_tap "$LOG/sample.tap")
expect "TAP under CI=true: the missing dependency fails, the other skips stay skips" \
  "$(tail -n1 <<<"$out")" "3 4 1"
expect "TAP under CI=true: the failure is said" \
  "$(grep -c '^    FAILED (a skip for a missing dependency, CI=true): .*missing dependency: ' <<<"$out")" "2"

# an all-pass stream is all passed
printf 'ok 1 - a\nok 2 - b\n1..2\n' >"$LOG/pass.tap"
expect "TAP: only passes" "$(counts true count_tap "$LOG/pass.tap" | tail -n1)" "2 0 0"

# the rerun of a failed test: passed there only on an ok line that is not a skip
(
  . .ci/counts.sh
  printf 'ok 1 - mutex times out\n1..1\n' >"$LOG/rerun-pass.tap"
  printf 'ok 1 - # SKIP mutex times out\n1..1\n' >"$LOG/rerun-skip.tap"
  printf 'not ok 1 - mutex times out\n1..1\n' >"$LOG/rerun-fail.tap"
  r=""
  passed_on_rerun "- mutex times out" "$LOG/rerun-pass.tap" && r="${r}pass "
  passed_on_rerun "- mutex times out" "$LOG/rerun-skip.tap" && r="${r}skip "
  passed_on_rerun "- # SKIP mutex times out" "$LOG/rerun-skip.tap" && r="${r}skip-name "
  passed_on_rerun "- mutex times out" "$LOG/rerun-fail.tap" && r="${r}fail "
  echo "$r" >"$LOG/rerun.result"
)
expect "rerun: only a real ok is a pass (not a skip, not a failure)" "$(cat "$LOG/rerun.result")" "pass "

# ctest (3.25): one test skipped with exit 77
cat >"$LOG/ctest.out" <<'EOF'
Test project /work/build
    Start 1: naming
1/3 Test #1: naming ...........................   Passed    0.00 sec
    Start 2: cycles
2/3 Test #2: cycles ...........................***Skipped   0.00 sec
    Start 3: script_mutex
3/3 Test #3: script_mutex .....................   Passed    0.01 sec

100% tests passed, 0 tests failed out of 3

Total Test time (real) =   0.02 sec

The following tests did not run:
	  2 - cycles (Skipped)
EOF
out=$(counts "" count_ctest "$LOG/ctest.out")
expect "ctest outside CI: 2 passed, 0 failed, 1 skipped" "$(tail -n1 <<<"$out")" "2 0 1"
expect "ctest: the skip is printed" "$(grep -c '^    SKIPPED: ctest: cycles (Skipped)$' <<<"$out")" "1"
out=$(counts true count_ctest "$LOG/ctest.out")
expect "ctest under CI=true: the skip fails" "$(tail -n1 <<<"$out")" "2 1 0"

if [ "$BAD" -eq 0 ]; then echo "all checks hold"; else echo "$BAD check(s) failed"; fi
[ "$BAD" -eq 0 ]
