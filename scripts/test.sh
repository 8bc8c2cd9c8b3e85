#!/usr/bin/env bash
# The whole test suite: set up (idempotent), build, and run every test through ctest, then the 15
# slowest tests. Extra arguments go to ctest, e.g. `scripts/test.sh -L quick` for one label or
# `-R Gloo` for a name pattern. Without a label or name selection, the labels kept outside CI are
# left out: `exhaustive` (the hand-multiplied grids the designed array covers) and `fresh_seeds`
# (property hunts on new seeds) and `optional_peers` (verdicts needing an optional set-up, e.g.
# MFSDP_EXTRAS=deepspeed); ask for them with `-L exhaustive`, `-L fresh_seeds` or `-L optional_peers`.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MFSDP_BUILD_DIR:-$repo/build}
t0=$(date +%s)
bash "$repo/scripts/setup.sh"
t1=$(date +%s)
source "$repo/scripts/ci_labels.sh" "$@"  # ci_exclude: the labels kept outside CI, unless chosen
log=$(mktemp /tmp/mfsdp_ctest_XXXXXX.log)
trap 'rm -f "$log"' EXIT
set +e
ctest --test-dir "$build" -j "${MFSDP_JOBS:-$(nproc)}" --output-on-failure --timeout 600 "${ci_exclude[@]}" "$@" | tee "$log"
code=${PIPESTATUS[0]}
set -e
t2=$(date +%s)
echo "test.sh: the 15 slowest tests:"
# (head closes the pipe early: without pipefail for this listing, that is not a failure)
(set +o pipefail
 grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$log" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+).* ([0-9.]+) sec$/\2 \1/' |
   grep -E '^[0-9.]+ ' | sort -rn | head -15 | awk '{printf "  %8.1f s  %s\n", $1, $2}') || true
# What each failed test said, in a few lines, next to the totals (a CI summary shows the log's tail):
# its lines that name a failure, from the output ctest --output-on-failure printed after its result.
awk '/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /{name=""; n=0; if ($0 ~ /\*\*\*|Failed|Not Run/) {name=$4}; next}
     /^ +Start +[0-9]+: /{name=""; next}
     name != "" && n < 8 && /FAIL|[Ff]ail|[Ee]rror|[Aa]bort|terminate|[Tt]imeout|Exception|not found/ {
       print "test.sh: " name ": " substr($0, 1, 300); n++}' "$log"
echo "test.sh: set-up and build $((t1 - t0)) s, suite $((t2 - t1)) s, total $((t2 - t0)) s; ctest exit $code"
exit "$code"
