#!/usr/bin/env python3
"""Which change to an AdamW step explains a grid failure's signature (docs/testing.md, "The stop-44
red light").

Trains the failing row's first step with the oracle (`mfsdp train --placement ddp`, its trajectory
dumped with gradients), checks that torch's single-tensor AdamW op for op reproduces every
parameter bit for bit, then perturbs one thing at a time and prints, for embed.weight, how many
elements move and by how much: the gradient scaled (clipping skipped or applied twice, x2, x0.5),
eps, and the step size. Stop 44's failure read "927 of 8192 elements differ, max |a-b| 8.3e-7".

  .venv/bin/python scripts/step_signature.py [build/mfsdp]
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

# The row: W = 6 replicas of one rank (rW replicated), AdamW at the tests' rate 3e-3, K = 3
# micro-batches of one sequence of 8, clipping at 0.5, the tiny model narrowed to 32/64, seed 11.
ROW = ["-w", "6", "--placement", "ddp", "--replicas", "6", "--optimizer", "adamw", "--hidden", "32",
       "--intermediate", "64", "--batch", "1", "--seq", "8", "--grad-accum", "3", "--max-norm", "0.5",
       "--steps", "1", "--seed", "11"]


def adamw_step1(p, g, lr=3e-3, wd=0.01, b1=0.9, b2=0.999, eps=1e-8):
    """torch.optim.AdamW's single-tensor path at step 1 (core/optim/adamw.cpp spells the same ops)."""
    p = p.clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    p.mul_(1 - lr * wd)
    m.lerp_(g, 1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    denom = (v.sqrt() / ((1 - b2) ** 0.5)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - b1))
    return p


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/mfsdp"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "traj"
        subprocess.run([binary, "train", *ROW, "--dump-trajectory", str(out), "--dump-grads"], check=True,
                       stdout=subprocess.DEVNULL)
        p0 = load_file(out / "params_00000000.safetensors")
        p1 = load_file(out / "params_00000001.safetensors")
        g = load_file(out / "grads_00000001.safetensors")
        norm = json.loads((out / "trajectory.json").read_text())["steps"][1]["grad_norm"]
    for name in p0:
        assert torch.equal(adamw_step1(p0[name], g[name]), p1[name]), f"{name}: the AdamW spelling is not the run's"
    coef = float(torch.clamp((torch.tensor(norm, dtype=torch.float32) + 1e-6).reciprocal() * 0.5, max=1.0))
    e0, eg, e1 = p0["embed.weight"], g["embed.weight"], p1["embed.weight"]
    print(f"every parameter reproduced bit for bit; embed.weight has {int((eg != 0).sum())} of {eg.numel()} "
          f"gradient elements non-zero; clip coefficient {coef:.7g}")
    cases = [("gradient unclipped", dict(g=eg / coef)), ("gradient clipped twice", dict(g=eg * coef)),
             ("gradient 1 ULP larger", dict(g=torch.nextafter(eg, eg * 2))), ("gradient x2", dict(g=eg * 2)), ("gradient x0.5", dict(g=eg * 0.5)),
             ("eps 2e-8", dict(eps=2e-8)), ("eps 1e-7", dict(eps=1e-7))]
    cases += [(f"step size x(1{rel:+.2e})", dict(lr=3e-3 * (1 + rel))) for rel in (2.76e-4, -2.76e-4, 1e-4, 1e-5)]
    for label, kw in cases:
        d = (adamw_step1(e0, kw.pop("g", eg), **kw) - e1).abs()
        print(f"  {label:28s} {int((d > 0).sum()):5d} of {d.numel()} differ, max |a-b| {float(d.max()):.3g}")


if __name__ == "__main__":
    main()
