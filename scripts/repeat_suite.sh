#!/usr/bin/env bash
# repeat_suite.sh [RUNS] [LOAD] [CTEST ARGS...]: runs the suite RUNS times (default 5) under
# `ctest -j2` with LOAD busy-looping background processes (default 2) competing for the cores, and
# reports every test that failed in any run, with the run's log. A gate that fails at random is
# ignored; this is how flakes are hunted (e.g. `scripts/repeat_suite.sh 10 2 -L quick`: the quick label
# holds the group-formation stress test; `scripts/repeat_suite.sh 2 2`: the CI suite twice).
# Exits 1 if any run failed. Logs: build/repeat_suite/run_N.log.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-5}; load=${2:-2}; shift $(( $# >= 2 ? 2 : $# ))
build=${MFSDP_BUILD_DIR:-$repo/build}
out=$build/repeat_suite; mkdir -p "$out"
# As scripts/test.sh: with no label or name selection, the labels kept outside CI are left out.
source "$repo/scripts/ci_labels.sh" "$@"
pids=()
for _ in $(seq 1 "$load"); do ( while :; do :; done ) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
failed_runs=0
for r in $(seq 1 "$runs"); do
  start=$(date +%s)
  ctest --test-dir "$build" -j2 --timeout 600 --output-on-failure "${ci_exclude[@]}" "$@" >"$out/run_$r.log" 2>&1
  code=$?
  summary=$(grep -E "tests passed|tests failed" "$out/run_$r.log" | tail -1)
  echo "repeat_suite: run $r/$runs (load $load): exit $code in $(( $(date +%s) - start )) s: $summary"
  if [ $code -ne 0 ]; then
    failed_runs=$((failed_runs + 1))
    grep -E "^\s+[0-9]+ - " "$out/run_$r.log" | sed 's/^/    failed: /'
  fi
done
echo "repeat_suite: $((runs - failed_runs)) passed, $failed_runs failed"
[ $failed_runs -eq 0 ]
