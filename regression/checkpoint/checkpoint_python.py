"""Python reads what mfsdp writes: the exported model and a per-rank file of a checkpoint.

checkpoint_python.py CHECKPOINT_DIR EXPORTED.safetensors
Checks with the safetensors library and torch, independently of the C++ reader: layout.json's seal
and the CRC-32 `latest` records of it; every file's size and CRC-32 (zlib) against layout.json's manifest; every parameter slice in every rank file equals
the same rows of the exported parameter; the exported names and shapes are the plan's.
"""
import json
import sys
import zlib

import torch
from safetensors import safe_open
from safetensors.torch import load_file

ckpt, exported = sys.argv[1], sys.argv[2]
latest_lines = open(f"{ckpt}/latest").read().splitlines()  # the step name, then "layout_crc32 <hex>"
step_dir = f"{ckpt}/{latest_lines[0]}"
raw = open(f"{step_dir}/layout.json", "rb").read()
layout = json.loads(raw)
# The seal: CRC-32 of layout.json with the 8 digits of its layout_crc32 written as zeros; `latest`
# records the CRC-32 of the whole file.
key = b'"layout_crc32": "'
at = raw.index(key) + len(key)
assert zlib.crc32(raw[:at] + b"00000000" + raw[at + 8:]) == int(layout["layout_crc32"], 16), "layout.json seal"
assert latest_lines[1] == f"layout_crc32 {zlib.crc32(raw):08x}", latest_lines
assert layout["format"] == "mfsdp-checkpoint" and layout["format_version"] in (3, 4), layout["format"]

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
