#!/usr/bin/env bash
# Every Newton-Schulz variant against the DDP oracle with `mfsdp verify`: at W = 3 and 5, under bf16
# compute copies, on an HSDP mesh in dedup step mode (W = 6 = 2 replicas x 3) and with experts (4
# experts top 2, per expert at W = 3 and batched chains at W = 5); and NorMuon and AdaMuon, with torch's
# variant, the 5-step Polar Express and pytorch-optimizer's Gram, in the same modes (per expert only),
# each expected to print BITWISE EQUAL (docs/optimizers.md).
# Usage: scripts/ns_variants_verify.sh [BUILD_DIR]   (exit 1 if any run is not bitwise equal)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mfsdp="${1:-$repo/build}/mfsdp"
variants=$("$mfsdp" verify --help | sed -n 's/.*Newton-Schulz variant, each pinned to its source ([^)]*): \(.*\) (default torch).*/\1/p' | tr -d ',')
[ -n "$variants" ] || { echo "could not read the variants from mfsdp verify --help" >&2; exit 2; }
modes=("-w 3" "-w 5" "-w 5 --param-dtype bf16" "-w 6 --replicas 2 --step-mode dedup" "-w 3 --experts 4 --top-k 2"
       "-w 5 --experts 4 --top-k 2 --batched-ns")
bad=0 runs=0
check() {  # OPTIMIZER VARIANT MODE
  runs=$((runs + 1))
  # shellcheck disable=SC2086
  out=$("$mfsdp" verify --optimizer "$1" --ns-variant "$2" --steps 6 $3 2>&1)
  if grep -q "^BITWISE EQUAL" <<<"$out"; then
    printf '%-8s %-28s %-45s BITWISE EQUAL\n' "$1" "$2" "$3"
  else
    printf '%-8s %-28s %-45s NOT EQUAL\n%s\n' "$1" "$2" "$3" "$(tail -3 <<<"$out")"
    bad=$((bad + 1))
  fi
}
for v in $variants; do
  for m in "${modes[@]}"; do check muon "$v" "$m"; done
done
for o in normuon adamuon; do
  for v in torch polar-express-5 gram-pyopt; do
    for m in "${modes[@]:0:5}"; do check "$o" "$v" "$m"; done
  done
done
echo "$((runs - bad)) of $runs runs bitwise equal to the oracle"
[ "$bad" -eq 0 ]
