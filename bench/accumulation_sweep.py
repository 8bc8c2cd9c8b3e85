#!/usr/bin/env python3
"""Gradient accumulation and clipping, measured (docs/accumulation.md, docs/results.md).

At a fixed number of sequences per rank and step (--tokens-per-step sequences, the micro-batch
size b = that / K), the owner placement's step time and peak memory per rank for K = 1, 2, 4, 8 in
both reduction orders, each without and with clipping (--max-norm 1.0); and the clipping norm's
traffic (phase grad_norm) against the gradient reduction's (phase grad_reduce). One bench_step run
per setting (its --rounds rounds in turn, medians over all their steps); every case is also checked
bit for bit against the DDP oracle by bench_step itself.

  bench/accumulation_sweep.py BUILD/bench/bench_step --json results/cpu/accumulation.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run_case(bench, model, W, b, K, mode, clip, rounds, steps):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [bench, "--models", model, "--world-sizes", str(W), f"--benchmark_filter=W:{W}/placement:owner/",
               "--steps", str(steps), "--rounds", str(rounds), "--batch", str(b), "--grad-accum", str(K),
               "--grad-reduce", mode, "--json", out]
        if clip:
            cmd += ["--max-norm", "1.0"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.exit(f"accumulation_sweep: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
        doc = json.load(open(out))
    (case,) = doc["cases"]
    return doc["environment"], case


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_step")
    ap.add_argument("--model", default="small")
    ap.add_argument("-w", "--world-size", type=int, default=4)
    ap.add_argument("--sequences", type=int, default=8, help="sequences per rank and step (K x b)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows, env = [], None
    for K in (1, 2, 4, 8):
        if a.sequences % K:
            continue
        for mode in (["per-microbatch"] if K == 1 else ["per-microbatch", "deferred"]):
            for clip in (False, True):
                env, c = run_case(a.bench_step, a.model, a.world_size, a.sequences // K, K, mode, clip, a.rounds, a.steps)
                ph = c["phases"]
                rows.append({"K": K, "batch": a.sequences // K, "grad_reduce": mode, "clip": clip,
                             "step_ms": c["step_ms"], "fwd_bwd_ms": c["forward_ms"] + c["backward_ms"],
                             "optimizer_ms": c["optimizer_step_ms"], "peak_bytes_max": c["peak_bytes_max"],
                             "resident_bytes_max": c["resident_bytes_max"],
                             "grad_reduce_calls": ph["grad_reduce"]["calls"], "grad_reduce_sent": ph["grad_reduce"]["bytes_sent"],
                             "grad_norm_calls": ph["grad_norm"]["calls"], "grad_norm_sent": ph["grad_norm"]["bytes_sent"],
                             "optimizer_step_calls": ph["optimizer_step"]["calls"], "oracle_bitwise": c["oracle_bitwise"]})
                r = rows[-1]
                print(f"K={K} b={r['batch']} {mode:15s} clip={'on ' if clip else 'off'} step {r['step_ms']:8.1f} ms "
                      f"(fwd+bwd {r['fwd_bwd_ms']:7.1f}, opt {r['optimizer_ms']:6.1f})  peak {r['peak_bytes_max'] / 2**20:7.2f} MiB  "
                      f"reduce {r['grad_reduce_calls']:4d} calls {r['grad_reduce_sent'] / 2**20:6.2f} MiB  "
                      f"norm {r['grad_norm_calls']} calls {r['grad_norm_sent'] / 2**10:7.1f} KiB  "
                      f"step calls {r['optimizer_step_calls']}  bitwise {r['oracle_bitwise']}", flush=True)
    if a.json:
        doc = {"what": "owner placement, gradient accumulation and clipping at a fixed number of sequences per rank and step",
               "model": a.model, "world_size": a.world_size, "sequences_per_step": a.sequences, "rounds": a.rounds,
               "steps": a.steps, "environment": env, "rows": rows}
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, a.json)
        print(f"results: {a.json}")
    sys.exit(0 if all(r["oracle_bitwise"] for r in rows) else 1)


if __name__ == "__main__":
    main()
