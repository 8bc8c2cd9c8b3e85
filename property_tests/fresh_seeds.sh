#!/usr/bin/env bash
# fresh_seeds.sh BINARY CASES [GTEST_FILTER]: runs a RapidCheck test binary on a seed drawn now
# (label fresh_seeds, outside CI: CI runs every property on its one fixed seed), CASES cases per
# property, and prints the seed first, so that whatever it finds can be replayed exactly.
set -uo pipefail
bin=$1; cases=$2; filter=${3:-*}
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
echo "fresh_seeds: $(basename "$bin") seed $seed, $cases cases per property; replay: RC_PARAMS=\"seed=$seed max_success=$cases\" $bin --gtest_filter='$filter'"
start=$(date +%s)
RC_PARAMS="seed=$seed max_success=$cases" "$bin" --gtest_filter="$filter"
code=$?
echo "fresh_seeds: $(basename "$bin") seed $seed: exit $code after $(( $(date +%s) - start )) s ($([ $code -eq 0 ] && echo 'every case passed' || echo 'FOUND A FAILURE, replay it with the line above'))"
exit $code
