# shellcheck shell=bash
# .ci/counts.sh: how .ci/run counts what the test tools print (sourced by .ci/run, and by
# tests/ci_counts.sh, which checks it on samples). The caller keeps the totals PASS, FAIL, SKIP
# and a directory LOG (the closing list of skips is $LOG/skips).
#
# Skips. busted's TAP prints a pending test as "ok N - # SKIP <reason>", and ctest counts a test
# that exits 77 (SKIP_RETURN_CODE) among "tests passed": neither is a pass. Every count below takes
# skips out of "passed", counts them as skipped and prints each one's reason (and the closing
# list repeats them all). A spec skips for a missing dependency only through spec/support/deps.lua
# (reason "missing dependency: ..."), which with CI=true (or CI=1) in the environment raises
# instead, so that test or describe fails: a CI machine has every dependency (.ci/deps.sh), and a
# skip there would hide a whole block of tests behind a green run. Under CI=true this file also
# counts as failed any skip that still says "missing dependency: " (a hand-written pending()), and
# every ctest skip (each one is: no ZK_HOSTS, no compiler or pkg-config).
CI_STRICT=0
case "${CI:-}" in true | 1) CI_STRICT=1 ;; esac
SKIP_RE='^ok [0-9]+( -)? # [Ss][Kk][Ii][Pp]'
tap_skips() { grep -E "$SKIP_RE" "$1" | sed -E "s/$SKIP_RE ?//"; } # file: each skip's reason
# tap_tally FILE: T_OK (ok lines that are not skips), T_NOTOK, T_SKIP of a TAP stream; prints each
# skip and adds it to the closing list; under CI=true a missing-dependency skip moves to T_NOTOK
tap_tally() {
  local all reason tag
  all=$(grep -c '^ok ' "$1" || true)
  T_NOTOK=$(grep -c '^not ok ' "$1" || true)
  T_OK=$((all - $(grep -cE "$SKIP_RE" "$1" || true)))
  T_SKIP=0
  tag=$(basename "$1" .tap)
  while IFS= read -r reason; do
    if [ "$CI_STRICT" -eq 1 ] && [[ $reason == *"missing dependency: "* ]]; then
      T_NOTOK=$((T_NOTOK + 1)); echo "    FAILED (a skip for a missing dependency, CI=true): $reason"
    else
      T_SKIP=$((T_SKIP + 1)); echo "    SKIPPED: $reason"; echo "$tag: $reason" >>"$LOG/skips"
    fi
  done < <(tap_skips "$1")
}
# passed_on_rerun DESC FILE: whether the rerun's TAP (FILE) has the test "ok N DESC" (DESC as in
# the first run's "not ok N DESC" line) as a pass; a skip is not a pass
passed_on_rerun() {
  grep -qxF "ok $1" <(grep -vE "$SKIP_RE" "$2" | sed -E 's/^ok [0-9]+ /ok /')
}
count_tap() { # file: add the passed / failed / skipped tests of a TAP stream
  tap_tally "$1"
  PASS=$((PASS + T_OK)); FAIL=$((FAIL + T_NOTOK)); SKIP=$((SKIP + T_SKIP))
  echo "    $T_OK passed, $T_NOTOK failed, $T_SKIP skipped"
}
count_ctest() { # file: add ctest's totals (its skipped tests as skipped, not passed)
  local line total failed skipped
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n1)
  if [ -z "$line" ]; then FAIL=$((FAIL + 1)); echo "    ctest did not run"; return; fi
  failed=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/')
  total=$(echo "$line" | sed -E 's/.* failed out of ([0-9]+).*/\1/')
  # "The following tests did not run:" lists them as "<tab>  N - name (Skipped)"
  skipped=$(grep -cE '^\s+[0-9]+ - .* \(Skipped\)$' "$1" || true)
  if [ "$CI_STRICT" -eq 1 ] && [ "$skipped" -gt 0 ]; then
    grep -E '^\s+[0-9]+ - .* \(Skipped\)$' "$1" | sed -E 's/^\s+[0-9]+ - /    FAILED (skipped under CI=true: a missing dependency): /'
    failed=$((failed + skipped)); skipped=0
  else
    grep -E '^\s+[0-9]+ - .* \(Skipped\)$' "$1" | sed -E 's/^\s+[0-9]+ - /ctest: /' |
      tee -a "$LOG/skips" | sed 's/^/    SKIPPED: /'
  fi
  PASS=$((PASS + total - failed - skipped)); FAIL=$((FAIL + failed)); SKIP=$((SKIP + skipped))
  echo "    $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
  # a failed test's own output (--output-on-failure prints it after the test's ***Failed line):
  # at most 60 lines, so the cause is in the CI log and not only in a deleted temporary file
  if [ "$failed" -gt 0 ]; then
    awk '/\*\*\*(Failed|Timeout|Exception)/{on=1} /^ *Start +[0-9]+: |tests passed, /{on=0} on' "$1" |
      head -n 60 | sed 's/^/    | /'
  fi
}
# the closing lines: every skip of the run (with its job), then "N passed, N failed, N skipped"
summary() {
  if [ -s "$LOG/skips" ]; then
    echo; echo "skipped ($(wc -l <"$LOG/skips")):"; sed 's/^/  /' "$LOG/skips"
  fi
  echo; echo "$PASS passed, $FAIL failed, $SKIP skipped"
}
