"""The owner runtime against the stock PyTorch peers, side by side on this machine (docs/peers.md).

For each world size and model size, in interleaved rounds (every runner once per round, the order
rotated each round), runs:
  owner              mfsdp train --placement owner --launcher processes (C++, gloo)
  owner_model        the same with --comm-groups model (the whole model's unshard one group, its
                     reduction another: two collectives a step; docs/architecture.md)
  ddp                peers/peer_train.py --mode ddp (DDP + torch.optim.Muon / AdamW)
  fsdp2              peers/peer_train.py --mode fsdp2 (FSDP2 + torch.optim.Muon on DTensors)
  fsdp2_reconstruct  peers/peer_train.py --mode fsdp2_reconstruct (FSDP2 + full_tensor() + NS)
on the same model, initialisation, data, hyperparameters and tokens per step, every rank with one
intra-op thread. Per step it takes the slowest rank's optimizer step and forward + backward (what a
step waits for); after the warm-up steps, the medians over every step of every round with the
25th and 75th percentiles. Peak memory: ru_maxrss of the largest process of each run's tree (a
rank; os.wait4), minus the same of an empty process of its runtime (Python: torch imported; C++:
`mfsdp env`, libtorch loaded): the largest over the rounds, each round's kept beside it.

Usage: side_by_side.py --mfsdp BUILD/mfsdp --out results/cpu/peers.json [--rounds 3] [--steps 10]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import HERE, run_tree, torchrun  # noqa: E402

SIZES = {
    "tiny": {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128},
    "h512": {"layers": 2, "hidden": 512, "heads": 8, "intermediate": 1024},
}
RUNNERS = ("owner", "owner_model", "ddp", "fsdp2", "fsdp2_reconstruct")
OWNER_FLAGS = {"owner": [], "owner_model": ["--comm-groups", "model"]}


def size_flags(size):
    return [x for k, v in SIZES[size].items() for x in (f"--{k}", str(v))]


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(xs):
    return {"median": percentile(xs, 0.5), "p25": percentile(xs, 0.25), "p75": percentile(xs, 0.75), "n": len(xs)}


def run_owner(mfsdp, runner, W, size, steps, work):
    metrics = os.path.join(work, f"{runner}_w{W}_{size}.jsonl")
    cmd = [mfsdp, "train", "-w", str(W), "--launcher", "processes", "--placement", "owner", "--steps", str(steps),
           "--metrics", metrics] + OWNER_FLAGS[runner] + size_flags(size)
    code, out, rss = run_tree(cmd)
    if code != 0:
        sys.exit(f"side_by_side: {' '.join(cmd)} failed ({code}):\n{out[-3000:]}")
    rows = [json.loads(line) for line in open(metrics) if '"step"' in line]
    per_step = [{"opt": r["max_optimizer_ms"], "fb": r["max_forward_ms"] + r["max_backward_ms"],
                 "collectives": {p: c["calls"] for p, c in r["phases"].items() if c["calls"]}} for r in rows]
    return per_step, rss


def run_peer(mode, W, size, steps, work):
    metrics = os.path.join(work, f"{mode}_w{W}_{size}.jsonl")
    code, out, rss = torchrun(W, ["--mode", mode, "--steps", str(steps), "--metrics", metrics] + size_flags(size))
    if code != 0:
        sys.exit(f"side_by_side: peer {mode} W={W} {size} failed ({code}):\n{out[-3000:]}")
    rows = [json.loads(line) for line in open(metrics) if '"step"' in line]
    per_step = [{"opt": 1e3 * r["max_optimizer_s"], "fb": 1e3 * r["max_forward_backward_s"],
                 "collectives": r["collectives"]} for r in rows]
    return per_step, rss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mfsdp", required=True)
    ap.add_argument("--out", required=True, help="the results JSON")
    ap.add_argument("--work", default="/tmp/mfsdp_side_by_side")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2, help="steps of each run left out of the statistics")
    ap.add_argument("--world-sizes", default="2,4")
    ap.add_argument("--sizes", default="tiny,h512")
    ap.add_argument("--runners", default=",".join(RUNNERS), help="a subset, owner first (the ratios' base)")
    a = ap.parse_args()
    runners = tuple(a.runners.split(","))
    if runners[0] != "owner" or not set(runners) <= set(RUNNERS):
        sys.exit(f"side_by_side: --runners must start with owner and name only {', '.join(RUNNERS)}")
    os.makedirs(a.work, exist_ok=True)
    started = time.time()
    world_sizes = [int(w) for w in a.world_sizes.split(",")]
    sizes = a.sizes.split(",")

    # Empty processes of each runtime: what every run's peak includes before any model exists.
    _, _, py_base = run_tree([sys.executable, "-c", "import torch, torch.distributed"])
    _, _, cpp_base = run_tree([a.mfsdp, "env"])
    samples = {}  # (W, size, runner) -> {"opt": [...], "fb": [...], "step": [...], "rss": [...], "collectives": ...}
    for r in range(a.rounds):
        for W in world_sizes:
            for size in sizes:
                order = runners[r % len(runners):] + runners[:r % len(runners)]
                for runner in order:
                    t0 = time.time()
                    if runner in OWNER_FLAGS:
                        per_step, rss = run_owner(a.mfsdp, runner, W, size, a.steps, a.work)
                    else:
                        per_step, rss = run_peer(runner, W, size, a.steps, a.work)
                    s = samples.setdefault((W, size, runner), {"opt": [], "fb": [], "step": [], "rss": []})
                    for row in per_step[a.warmup:]:
                        s["opt"].append(row["opt"])
                        s["fb"].append(row["fb"])
                        s["step"].append(row["opt"] + row["fb"])
                    s["rss"].append(rss)
                    s["collectives"] = per_step[-1]["collectives"]
                    print(f"round {r + 1}/{a.rounds}  W={W} {size:5s} {runner:18s} {time.time() - t0:6.1f} s", flush=True)

    results = []
    for (W, size, runner), s in sorted(samples.items(), key=lambda kv: (kv[0][0], kv[0][1], RUNNERS.index(kv[0][2]))):
        base = cpp_base if runner in OWNER_FLAGS else py_base
        peak = max(s["rss"])
        results.append({"world_size": W, "size": size, "model": SIZES[size], "runner": runner,
                        "optimizer_ms": summary(s["opt"]), "forward_backward_ms": summary(s["fb"]), "step_ms": summary(s["step"]),
                        "peak_rss_mib": peak / 1024, "empty_process_rss_mib": base / 1024,
                        "peak_rss_above_empty_rounds_mib": [(x - base) / 1024 for x in s["rss"]],
                        "peak_rss_above_empty_mib": (peak - base) / 1024, "collectives_per_step": s["collectives"]})
    by = {(x["world_size"], x["size"], x["runner"]): x for x in results}
    ratios = []
    for W in world_sizes:
        for size in sizes:
            owner = by[(W, size, "owner")]
            for peer in runners[1:]:
                p = by[(W, size, peer)]
                ratios.append({"world_size": W, "size": size, "peer": peer,
                               "optimizer_speedup": p["optimizer_ms"]["median"] / owner["optimizer_ms"]["median"],
                               "step_speedup": p["step_ms"]["median"] / owner["step_ms"]["median"],
                               "peak_memory_ratio": p["peak_rss_above_empty_mib"] / owner["peak_rss_above_empty_mib"]})
    out = {"format": "mfsdp-peers", "what": "owner runtime (mfsdp train, C++) against stock PyTorch peers on this machine (docs/peers.md)",
           "command": "scripts/peers.sh", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(), "python": platform.python_version()},
           "torch": __import__("torch").__version__, "rounds": a.rounds, "steps": a.steps, "warmup_steps": a.warmup,
           "intra_op_threads_per_rank": 1, "tokens_per_rank_per_step": 4 * 32,
           "oversubscribed": [W for W in world_sizes if W > (os.cpu_count() or 1)],
           "wall_s": time.time() - started, "results": results, "ratios": ratios}
    # The dashboard and the README read this file: it must match its schema (docs/schemas/,
    # cli.output_schemas checks the committed copy), or nothing is written.
    import jsonschema  # noqa: E402 (pinned by scripts/setup.sh; needed only here)
    with open(os.path.join(os.path.dirname(HERE), "docs", "schemas", "peers.schema.json")) as f:
        jsonschema.validate(out, json.load(f), cls=jsonschema.Draft202012Validator)
    tmp = a.out + f".tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(tmp, a.out)

    print(f"\n{'W':>2} {'size':5} {'runner':18} {'optimizer ms':>20} {'fwd+bwd ms':>20} {'step ms':>20} {'peak MiB':>9}")
    for x in results:
        cell = lambda m: f"{m['median']:8.2f} [{m['p25']:.2f}-{m['p75']:.2f}]"  # noqa: E731
        print(f"{x['world_size']:>2} {x['size']:5} {x['runner']:18} {cell(x['optimizer_ms']):>20} "
              f"{cell(x['forward_backward_ms']):>20} {cell(x['step_ms']):>20} {x['peak_rss_above_empty_mib']:9.1f}")
    print("\nowner vs each peer (peer median / owner median; memory: peer / owner above the empty process)")
    for q in ratios:
        print(f"  W={q['world_size']} {q['size']:5} vs {q['peer']:18} optimizer {q['optimizer_speedup']:6.2f}x  "
              f"step {q['step_speedup']:6.2f}x  peak memory {q['peak_memory_ratio']:5.2f}x")
    print(f"\nside_by_side: {out['wall_s']:.0f} s; results in {a.out}")


if __name__ == "__main__":
    main()
