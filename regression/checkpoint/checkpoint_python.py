"""Python reads what mfsdp writes: the exported model and a per-rank file of a checkpoint.

checkpoint_python.py CHECKPOINT_DIR EXPORTED.safetensors
Checks with the safetensors library and torch, independently of the C++ reader: every file's size
and CRC-32 (zlib) against layout.json's manifest; every parameter slice in every rank file equals
the same rows of the exported parameter; the exported names and shapes are the plan's.
"""
import json
import sys
import zlib

import torch
from safetensors import safe_open
from safetensors.torch import load_file

ckpt, exported = sys.argv[1], sys.argv[2]
latest = open(f"{ckpt}/latest").read().strip()
step_dir = f"{ckpt}/{latest}"
layout = json.load(open(f"{step_dir}/layout.json"))
assert layout["format"] == "mfsdp-checkpoint" and layout["format_version"] == 1, layout["format"]

for m in layout["manifest"]:
    data = open(f"{step_dir}/{m['file']}", "rb").read()
    assert len(data) == m["bytes"], (m["file"], len(data), m["bytes"])
    assert zlib.crc32(data) == m["crc32"], m["file"]
    cb = m["chunk_bytes"]
    assert [zlib.crc32(data[i:i + cb]) for i in range(0, len(data), cb)] == m["chunk_crc32"], m["file"]

model = load_file(exported)
shapes = {s["name"]: s["shape"] for s in layout["plan"]["shards"]}
assert set(model) == set(shapes), set(model) ^ set(shapes)
for name, t in model.items():
    assert list(t.shape) == shapes[name], (name, t.shape, shapes[name])

compared = 0
for rank in layout["ranks"]:
    with safe_open(f"{step_dir}/{rank['file']}", framework="pt") as f:
        for rec in rank["tensors"]:
            t = f.get_tensor(rec["tensor"])
            if rec["state"]:
                continue
            want = model[rec["param"]][rec["row_begin"]:rec["row_begin"] + rec["rows"]]
            assert torch.equal(t, want), rec["tensor"]
            compared += 1
        states = [r for r in rank["tensors"] if r["state"]]
        assert all(f.get_tensor(r["tensor"]).numel() > 0 for r in states)
print(f"python: {len(model)} exported parameters; {compared} parameter slices in {len(layout['ranks'])} rank files "
      f"equal the exported rows; every file's CRC-32 matches the manifest")
