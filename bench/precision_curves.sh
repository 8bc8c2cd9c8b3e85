#!/usr/bin/env bash
# precision_curves.sh MFSDP [STEPS] [OUT.json]: loss curves of the fp32 and the bf16 policy (bf16
# compute copies of fp32 masters, fp32 reduction) on the default corpus, W = 2, Muon, the same seed
# and batches, and how closely bf16 tracks fp32: per window of 25 steps, the mean loss of each
# and their relative difference. Exits 1 when a window differs by more than the bound (2%,
# docs/precision.md says why).
set -euo pipefail
mfsdp=$1; steps=${2:-300}; out=${3:-}
work=$(mktemp -d /tmp/mfsdp_curves_XXXXXX); trap 'rm -rf "$work"' EXIT
for d in fp32 bf16; do
  "$mfsdp" train -w 2 --steps "$steps" --param-dtype "$d" --metrics "$work/$d.jsonl" >"$work/$d.out" 2>&1 ||
    { cat "$work/$d.out"; exit 1; }
done
python3 - "$work/fp32.jsonl" "$work/bf16.jsonl" "$steps" "$out" <<'PY'
import json, sys
def losses(p):
    return [j["loss"] for j in map(json.loads, open(p)) if "step" in j]
fp32, bf16, steps, out = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
bound, window = 0.02, 25
rows, worst = [], 0.0
for s in range(0, steps, window):
    a, b = fp32[s:s + window], bf16[s:s + window]
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    rel = abs(mb - ma) / ma
    worst = max(worst, rel)
    rows.append({"steps": [s + 1, s + len(a)], "fp32_mean_loss": ma, "bf16_mean_loss": mb, "relative_diff": rel})
    print(f"steps {s + 1:4d}-{s + len(a):4d}  fp32 {ma:.4f}  bf16 {mb:.4f}  relative diff {rel:.2e}")
per_step = max(abs(x - y) / x for x, y in zip(fp32, bf16))
print(f"largest window difference {worst:.2e} (bound {bound}); largest single-step difference {per_step:.2e}; "
      f"final loss fp32 {fp32[-1]:.4f}, bf16 {bf16[-1]:.4f}")
if out:
    json.dump({"what": "loss curves, fp32 vs bf16 compute over fp32 masters, mfsdp train -w 2 (Muon), default corpus",
               "steps": steps, "window": window, "bound": bound, "windows": rows, "fp32_loss": fp32, "bf16_loss": bf16,
               "largest_window_relative_diff": worst, "largest_step_relative_diff": per_step}, open(out, "w"), indent=1)
sys.exit(0 if worst <= bound else 1)
PY
echo "precision_curves: bf16 tracks fp32 within the bound"
