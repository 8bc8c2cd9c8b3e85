"""Runs pytorch-optimizer 4.1.0's MuonClip.step(attention_max_logits=...) on the tensors
qk_clip_parity_dump wrote and compares the clipped q and k weights (and biases) with ours
(core/train/qk_clip.cpp) bit for bit. Usage: python check_qk_clip.py DIR   (exit 1 on any difference)

MuonClip updates first and clips after. Here lr is 0 and no parameter has a gradient, so the update
leaves every bit and only the clip acts. Each block's q parameters form one group labelled
`query`, its k parameters one labelled `key` (qk_clip_alpha 0.5, so both take the square root).
The weights are in Muon groups and the biases in AdamW groups; MuonClip clips both roles. Its
rule takes one logit per row block: the grouped-query rule is ours, written here again
independently. Each kv group's logit is the largest of its query heads' logits, passed to both
groups. q's rows then fall into kv groups of heads/kv_heads heads each, and k's rows into its
kv heads.
"""
import json
import sys

import numpy as np
import torch
from pytorch_optimizer import MuonClip

torch.set_num_threads(1)
d = sys.argv[1]
cases = json.load(open(f"{d}/qk_clip.json"))
bad = 0
for c in cases:
    i = c["id"]
    s = torch.from_numpy(np.fromfile(f"{d}/qk{i}_s.bin", dtype=np.float32).reshape(c["layers"], c["heads"]))
    params, wants = {}, {}
    for k, p in enumerate(c["params"]):
        load = lambda which: torch.from_numpy(np.fromfile(f"{d}/qk{i}_p{k}_{which}.bin", dtype=np.float32).reshape(p["shape"]))
        params[p["name"]] = torch.nn.Parameter(load("before").clone())
        wants[p["name"]] = load("after")
    groups, logits = [], {}
    for layer in range(c["layers"]):
        pre = f"layers.{layer}.attn."
        name = f"attn{layer}"
        logits[name] = s[layer].view(c["kv_heads"], -1).amax(dim=1)
        for role, which in (("query", "q"), ("key", "k")):
            groups.append({"params": [params[pre + which + ".weight"]], "use_muon": True, "qk_clip": role, "attention_name": name})
            if pre + which + ".bias" in params:
                groups.append({"params": [params[pre + which + ".bias"]], "use_muon": False, "qk_clip": role, "attention_name": name})
    opt = MuonClip(groups, lr=0.0, adamw_lr=0.0, qk_clip_threshold=c["tau"], qk_clip_alpha=0.5, foreach=False)
    opt.step(attention_max_logits=logits)
    same = all(torch.equal(params[n].detach().view(torch.int32), wants[n].view(torch.int32)) for n in params)
    moved = sum(int(not torch.equal(params[n].detach(), torch.from_numpy(
        np.fromfile(f"{d}/qk{i}_p{k}_before.bin", dtype=np.float32).reshape(c["params"][k]["shape"])))) for k, n in enumerate(params))
    print(f"case {i:2d} kv_heads {c['kv_heads']} tau {c['tau']:<4} {len(params)} tensors ({moved} rescaled), "
          f"{c['clipped_heads']} heads clipped: {'bitwise equal' if same else 'DIFFERS'}")
    bad += not same
print(f"{len(cases) - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
