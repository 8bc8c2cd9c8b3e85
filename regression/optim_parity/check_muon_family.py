"""Runs pytorch-optimizer 4.1.0's NorMuon and AdaMuon (per-parameter path, foreach=False, one 2-D
parameter in a use_muon group) on the tensors ns_parity_dump wrote and compares the final
parameters and optimizer state with ours (core/optim/muon_family.cpp) bit for bit.
Usage: python check_muon_family.py DIR   (exit 1 on any difference)

Where the semantics are theirs: weight decay first (p *= 1 - wd * lr, skipped at 0), EMA momentum
by lerp (NorMuon: Nesterov by lerp toward the buffer; AdaMuon: none, and no sign()), Newton-Schulz
by zero_power_via_newton_schulz_5 with the named table ('original' is torch's triple, which our
default variant reproduces bit for bit), NorMuon's [rows, 1] second moment after orthogonalisation
with its preserve_norm or match_rms scale, AdaMuon's elementwise bias-corrected second moment on the
bf16 update and its RMS-0.2 scale; get_adjusted_lr. Our AdaMuon keeps v in the parameter's shape
where theirs keeps it flat: compared flat. Expert tensors are not compared: theirs flattens a 3-D
tensor into one [E, out * in] matrix, ours steps each expert as its own matrix (as Dion and the
NorMuon reference code do).
"""
import json
import sys

import numpy as np
import torch
from pytorch_optimizer import AdaMuon, NorMuon

torch.set_num_threads(1)
COEFFS = {"torch": "original", "polar-express-pyopt": "polar_express", "polar-express-safer-pyopt": "polar_express_safer"}
STATE = {"normuon": ["momentum_buffer", "second_momentum_buffer"], "adamuon": ["m", "v"]}

d = sys.argv[1]
cases = json.load(open(f"{d}/muon_family.json"))
bad = 0
for c in cases:
    shape = tuple(c["shape"])
    load = lambda name, s=shape: torch.from_numpy(np.fromfile(f"{d}/family{c['id']}_{name}.bin", dtype=np.float32).reshape(s))
    p = torch.nn.Parameter(load("p0").clone())
    h = dict(c["hyper"])
    group = {"params": [p], "use_muon": True, "ns_steps": 5, "ns_coeffs": COEFFS[c["ns_variant"]], **h}
    if c["optimizer"] == "normuon":
        opt = NorMuon([group], foreach=False)
    else:
        group["betas"] = tuple(group["betas"])
        opt = AdaMuon([group], foreach=False)
    for s in range(c["steps"]):
        p.grad = load(f"g{s}").clone()
        opt.step()
    want = load("final")
    same = torch.equal(p.detach().view(torch.int32), want.view(torch.int32))
    for name in STATE[c["optimizer"]]:
        mine = load(f"state_{name}", tuple(c["state"][name]))
        theirs = opt.state[p][name].reshape(mine.shape)
        same = same and torch.equal(theirs.contiguous().view(torch.int32), mine.view(torch.int32))
    diff = (p.detach() - want).abs().max().item()
    print(f"case {c['id']:2d} {c['name']:40s} {str(shape):9s} {'bitwise equal' if same else 'DIFFERS'} (max |diff| {diff:.3g})")
    bad += not same
print(f"{len(cases) - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
