"""Runs the real torch.optim.Muon / torch.optim.AdamW (single-tensor path), with the
hyperparameters of each case (defaults and non-defaults), on the tensors optim_parity_dump wrote and compares the final parameters and optimizer state with the C++
ones bit for bit.
Usage: python check_optim.py DIR   (exit 1 on any difference)"""
import json
import sys

import numpy as np
import torch

d = sys.argv[1]
cases = json.load(open(f"{d}/manifest.json"))
bad = 0
for c in cases:
    shape = tuple(c["shape"])
    load = lambda name: torch.from_numpy(np.fromfile(f"{d}/case{c['id']}_{name}.bin", dtype=np.float32).reshape(shape))
    p = torch.nn.Parameter(load("p0").clone())
    h = c["hyper"]
    if c["optimizer"] == "adamw":
        opt = torch.optim.AdamW([p], lr=h["lr"], betas=tuple(h["betas"]), eps=h["eps"], weight_decay=h["weight_decay"],
                                foreach=False)
    else:
        fn = None if h["adjust_lr_fn"] == "original" else h["adjust_lr_fn"]
        opt = torch.optim.Muon([p], lr=h["lr"], weight_decay=h["weight_decay"], momentum=h["momentum"],
                               nesterov=h["nesterov"], ns_coefficients=tuple(h["ns_coefficients"]), eps=h["eps"],
                               ns_steps=h["ns_steps"], adjust_lr_fn=fn)
    for s in range(c["steps"]):
        p.grad = load(f"g{s}").clone()
        opt.step()
    want = load("final")
    same = torch.equal(p.detach().view(torch.int32), want.view(torch.int32))
    # The optimizer state too (fp32, where spelling differences show before bf16 rounding hides them).
    names = ["exp_avg", "exp_avg_sq"] if c["optimizer"] == "adamw" else ["momentum_buffer"]
    for name in names:
        mine = load(f"state_{name}")
        theirs = opt.state[p][name]
        same = same and torch.equal(theirs.view(torch.int32), mine.view(torch.int32))
    diff = (p.detach() - want).abs().max().item()
    print(f"case {c['id']:2d} {c['name']:22s} {str(shape):10s} {'bitwise equal' if same else 'DIFFERS'} (max |diff| {diff:.3g})")
    bad += not same
print(f"{len(cases) - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
