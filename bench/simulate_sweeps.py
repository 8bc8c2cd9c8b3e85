#!/usr/bin/env python3
"""Scale sweeps of `mfsdp simulate` (docs/simulate.md): owner against each baseline for the 8B, 32B
and 70B presets at W = 8 ... 1024 on the H100 profile, the cluster configuration (fast reduce,
all-gather of even prefixes, fused attention, activation checkpointing, 4096 tokens per rank),
flat and on HSDP meshes whose shard group is one node (S = 8): the owner in both step modes, the
all-to-all and reconstruct baselines in their replicated form at the same meshes.
Writes the JSON of every run and prints the markdown tables docs/simulate.md shows.

  python3 bench/simulate_sweeps.py build/mfsdp results/sim/sweeps.json
"""
import json
import os
import subprocess
import sys
import tempfile

MODELS = ["llama3-8b", "qwen2.5-32b", "llama3-70b"]
WORLD = [8, 64, 256, 1024]
PLACEMENTS = ["owner", "reconstruct", "alltoall", "zero1"]
BASELINES = ["alltoall", "reconstruct"]
HSDP_SHARD = 8  # one node's ranks: the shard group's traffic stays on NVLink
HSDP_WORLD = [64, 256, 1024]
FLAGS = ["--profile", "h100-8x-8ndr", "--fast", "--unshard", "allgather_even", "--fused-attention",
         "--activation-checkpointing"]


def simulate(mfsdp, model, extra):
    cmd = [mfsdp, "simulate", "--model", model, "--json", *FLAGS, *extra]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    for r in res:
        r["model"] = model
    return res


def main():
    mfsdp, out = sys.argv[1], sys.argv[2]
    runs = []
    for model in MODELS:
        flat = [a for w in WORLD for a in ("-w", str(w))] + [a for p in PLACEMENTS for a in ("--placement", p)]
        runs += simulate(mfsdp, model, flat)
        for w in HSDP_WORLD:
            mesh = ["-w", str(w), "--replicas", str(w // HSDP_SHARD)]
            for mode in ["replicated", "dedup"]:
                runs += simulate(mfsdp, model, mesh + ["--placement", "owner", "--step-mode", mode])
            runs += simulate(mfsdp, model, mesh + [a for p in BASELINES for a in ("--placement", p)])
        print(f"simulated {model}", file=sys.stderr)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(out) or ".", delete=False) as f:
        json.dump({"format": "mfsdp-sim-sweep", "flags": FLAGS, "runs": runs}, f, indent=1)
    os.chmod(f.name, 0o644)
    os.replace(f.name, out)

    by = {(r["model"], r["world_size"], r["placement"]): r for r in runs if r.get("replicas", 1) == 1}
    mesh = {(r["model"], r["world_size"], r["placement"], r["step_mode"]): r for r in runs if r.get("replicas", 1) > 1}
    print("| model | W | owner opt ms | reconstruct | alltoall | zero1 | owner step s | owner peak GiB | simulate s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        for w in WORLD:
            o = by[(model, w, "owner")]
            opt = lambda p: by[(model, w, p)]["stages"]["optimizer"]["seconds"] * 1e3
            sim = max(by[(model, w, p)]["simulate_s"] for p in PLACEMENTS)
            print(f"| {model} | {w} | {opt('owner'):.1f} | {opt('reconstruct'):.0f} ({opt('reconstruct') / opt('owner'):.0f}x) "
                  f"| {opt('alltoall'):.1f} ({opt('alltoall') / opt('owner'):.1f}x) | {opt('zero1'):.1f} "
                  f"| {o['step_s']:.2f} | {o['memory']['peak_bytes'] / 2**30:.1f} | {sim:.2f} |")
    print()
    print(f"| model | W | mesh | owner opt ms / step s / peak GiB | HSDP replicated | HSDP dedup |")
    print("|---|---|---|---|---|---|")
    cell = lambda r: (f"{r['stages']['optimizer']['seconds'] * 1e3:.1f} / {r['step_s']:.2f} / "
                      f"{r['memory']['peak_bytes'] / 2**30:.1f}")
    for model in MODELS:
        for w in HSDP_WORLD:
            print(f"| {model} | {w} | {w // HSDP_SHARD} x {HSDP_SHARD} | {cell(by[(model, w, 'owner')])} "
                  f"| {cell(mesh[(model, w, 'owner', 'replicated')])} | {cell(mesh[(model, w, 'owner', 'dedup')])} |")

    # The fair projection: owner against each baseline in the same form (flat, or HSDP replicated
    # at the same mesh; the owner's HSDP cell is its better step mode), whole step as the
    # baseline's over the owner's (above 1: the owner is ahead).
    def hsdp_owner(model, w):
        a, b = mesh[(model, w, "owner", "replicated")], mesh[(model, w, "owner", "dedup")]
        return a if a["step_s"] <= b["step_s"] else b

    def fwd_bwd(r):
        return r["stages"]["forward"]["seconds"] + r["stages"]["backward"]["seconds"]

    print()
    print("| model | W | form | owner step s (fwd+bwd / opt) | alltoall step s (fwd+bwd / opt) | reconstruct step s (fwd+bwd / opt) "
          "| owner vs alltoall | owner vs reconstruct | peak GiB owner / alltoall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        for w in WORLD:
            forms = [("flat", by[(model, w, "owner")], by[(model, w, "alltoall")], by[(model, w, "reconstruct")])]
            if w in HSDP_WORLD:
                o = hsdp_owner(model, w)
                forms.append((f"HSDP {w // HSDP_SHARD} x {HSDP_SHARD} (owner {o['step_mode']})", o,
                              mesh[(model, w, "alltoall", "replicated")], mesh[(model, w, "reconstruct", "replicated")]))
            for form, o, a, c in forms:
                s = lambda r: f"{r['step_s']:.3f} ({fwd_bwd(r):.3f} / {r['stages']['optimizer']['seconds']:.3f})"
                print(f"| {model} | {w} | {form} | {s(o)} | {s(a)} | {s(c)} | {a['step_s'] / o['step_s']:.2f}x "
                      f"| {c['step_s'] / o['step_s']:.2f}x | {o['memory']['peak_bytes'] / 2**30:.1f} / "
                      f"{a['memory']['peak_bytes'] / 2**30:.1f} |")


if __name__ == "__main__":
    main()
