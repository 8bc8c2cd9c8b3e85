#!/usr/bin/env bash
# precision_bytes.sh MFSDP: `mfsdp train --param-dtype bf16` moves half the unshard bytes of the
# fp32 run for the same plan, on every rank, and `mfsdp plan` with the same policy flags predicts
# what train measures: per rank, unshard bytes (train counts the forward's unshard and backward's
# revive: twice the plan's one pass), resident bytes and peak gathered bytes.
set -euo pipefail
mfsdp=$1
work=$(mktemp -d /tmp/mfsdp_precision_XXXXXX); trap 'rm -rf "$work"' EXIT
for d in fp32 bf16; do
  "$mfsdp" train -w 3 --steps 2 --param-dtype "$d" --metrics "$work/train_$d.jsonl" >"$work/train_$d.out" 2>&1 ||
    { cat "$work/train_$d.out"; exit 1; }
  grep -q "precision param $d, reduce fp32 over fp32 masters" "$work/train_$d.out" || { cat "$work/train_$d.out"; exit 1; }
  "$mfsdp" plan --model tiny -w 3 --param-dtype "$d" --json >"$work/plan_$d.json"
done
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def summary(d):
    return [j for j in map(json.loads, open(f"{w}/train_{d}.jsonl")) if j.get("summary")][0]
bad = []
train = {d: summary(d)["ranks"] for d in ("fp32", "bf16")}
plan = {d: json.load(open(f"{w}/plan_{d}.json"))["usage"]["ranks"] for d in ("fp32", "bf16")}
for r in range(3):
    f, b = train["fp32"][r]["unshard_recv_bytes"], train["bf16"][r]["unshard_recv_bytes"]
    if f != 2 * b: bad.append(f"rank {r}: bf16 unshard {b} bytes is not half of fp32's {f}")
    for d in ("fp32", "bf16"):
        t, p = train[d][r], plan[d][r]
        for got, want, what in ((t["unshard_recv_bytes"], 2 * p["unshard_recv_bytes"], "unshard"),
                                (t["resident_bytes"], p["resident_bytes"], "resident"),
                                (t["peak_gathered_bytes"], p["transient_bytes"], "peak gathered")):
            if got != want: bad.append(f"rank {r} {d}: train {what} {got} bytes, plan says {want}")
    print(f"rank {r}: unshard fp32 {f} bytes, bf16 {b} bytes; resident and peak as planned")
for m in bad: print("precision_bytes: FAIL:", m)
sys.exit(1 if bad else 0)
PY
echo "precision_bytes: all passed"
