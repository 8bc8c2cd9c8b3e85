#!/usr/bin/env python3
"""The arithmetic fingerprint: a refactor must not move one bit of any training.

What must not happen: a change that only moves code (a file split, a stage boundary, a merged
field) changes what a training computes. Such a change can slip past the bitwise tests, because
those compare the runtime with the oracle, and a move shared by both passes them. This test
compares every listed training with itself before the change instead.

Each training of TRAININGS runs `mfsdp train` (thread ranks) with metrics and, for the placements
that write checkpoints, a checkpoint after its last step. Its fingerprint is:
  - the IEEE-754 bits of every step's mean loss (hex of the double, from the metrics JSON, which
    nlohmann writes with round-trip precision);
  - the SHA-256 of every rank's tensor file (`rank_*.safetensors`) of every checkpoint;
  - the SHA-256 of each checkpoint's `layout.json` after the fields listed in VOLATILE are removed
    (they name this machine or the check's own temporary directory, not the arithmetic). Fields a
    later change legitimately moves are listed in RENAMED_OR_MOVED with the reason; a tensor file
    never is.
A resumed training reads another training's checkpoint (a reshard onto another W), so loading is
covered too.

The bits depend on the CPU kernels (ATen's capability and oneDNN's instruction set: the bf16
matmuls of Newton-Schulz round differently per ISA, as the goldens found), and not on the ISA alone:
on a 2-core AMD EPYC with L2 1 MiB and L3 32 MiB, every training differs from the record another
2-core EPYC of the same ISA key made, from the second step of a W = 3 DDP run at --batch 2 --seq 16
on, also with the binary of 10f4f53 (that machine's caches were not recorded; the cache sizes a
BLAS blocks its products for are the likely difference). So FILE keeps one record per platform,
"<ATen capability>-<oneDNN ISA>-l2_<KiB>-l3_<KiB>" (the per-instance L2 and L3 sizes of cpu0, from
sysfs). Records keyed without the cache sizes (made before they were part of the key) are kept
and compared with nothing. A platform with no record is reported and compared with nothing (not a
failure: a refactor guard needs its own platform's bits, recorded with --write before the
refactor).

  fingerprint.py MFSDP FILE            compare with FILE's record for this platform (exit 1 naming
                                       every difference)
  fingerprint.py MFSDP FILE --write    (re)write this platform's record in FILE from this build
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

# name -> (mfsdp train arguments, resume from this training's last checkpoint or None)
BASE = ["--steps", "3", "--batch", "2", "--seq", "16", "--seed", "7"]
TRAININGS = {
    # every placement, fp32 Muon, W = 3 and 5
    "owner_w3": ("-w 3 --placement owner", None),
    "owner_w5": ("-w 5 --placement owner", None),
    "reconstruct_w3": ("-w 3 --placement reconstruct", None),
    "reconstruct_w5": ("-w 5 --placement reconstruct", None),
    "alltoall_w3": ("-w 3 --placement alltoall", None),
    "alltoall_w5": ("-w 5 --placement alltoall", None),
    "zero1_w3": ("-w 3 --placement zero1", None),
    "zero1_w5": ("-w 5 --placement zero1", None),
    "ddp_w3": ("-w 3 --placement ddp", None),
    "ddp_w5": ("-w 5 --placement ddp", None),
    # the other optimizers, planners and the tail owner
    "owner_soap_w3": ("-w 3 --optimizer soap", None),
    "owner_shampoo_w5": ("-w 5 --optimizer shampoo --tail-policy owner", None),
    "owner_adamw_w5_round_robin": ("-w 5 --optimizer adamw --planner round_robin", None),
    # precision: bf16 compute copies and bf16 reduce over fp32 masters
    "owner_bf16_w3": ("-w 3 --param-dtype bf16 --reduce-dtype bf16", None),
    "owner_bf16_w5": ("-w 5 --param-dtype bf16 --output-dtype bf16", None),
    "reconstruct_bf16_w5": ("-w 5 --placement reconstruct --param-dtype bf16", None),
    "alltoall_bf16_w3": ("-w 3 --placement alltoall --param-dtype bf16 --reduce-dtype bf16", None),
    "zero1_bf16_w5": ("-w 5 --placement zero1 --param-dtype bf16", None),
    "ddp_bf16_w3": ("-w 3 --placement ddp --param-dtype bf16", None),
    # HSDP: both step modes, an awkward mesh of one-rank shard groups, the baselines on a mesh
    "hsdp_replicated_w3_r3": ("-w 3 --replicas 3 --step-mode replicated", None),
    "hsdp_dedup_w5_r5": ("-w 5 --replicas 5 --step-mode dedup", None),
    "hsdp_replicated_w6_r2": ("-w 6 --replicas 2 --step-mode replicated --optimizer soap", None),
    "hsdp_dedup_w6_r3_bf16": ("-w 6 --replicas 3 --step-mode dedup --param-dtype bf16", None),
    "hsdp_reconstruct_w6_r2": ("-w 6 --replicas 2 --placement reconstruct", None),
    # mixture of experts and tied embeddings
    "moe_owner_w3": ("-w 3 --experts 4 --top-k 2", None),
    "moe_owner_w5_shared": ("-w 5 --experts 4 --top-k 2 --shared-experts 1 --first-dense 1", None),
    "moe_alltoall_w5": ("-w 5 --placement alltoall --experts 4 --top-k 2", None),
    "moe_ddp_w3": ("-w 3 --placement ddp --experts 4 --top-k 2", None),
    "tied_owner_w3": ("-w 3 --tie-embeddings", None),
    "tied_owner_w5_bf16": ("-w 5 --tie-embeddings --param-dtype bf16", None),
    "tied_reconstruct_w5": ("-w 5 --placement reconstruct --tie-embeddings", None),
    "tied_zero1_w3": ("-w 3 --placement zero1 --tie-embeddings", None),
    # resume: reshard W 3 -> 5 (owner), W 5 -> 3 (reconstruct), a mesh onto a flat run
    "resume_owner_w3_to_w5": ("-w 5 --steps 5", "owner_w3"),
    "resume_reconstruct_w5_to_w3": ("-w 3 --placement reconstruct --steps 5", "reconstruct_w5"),
    "resume_hsdp_w6_to_owner_w5": ("-w 5 --steps 5 --optimizer soap", "hsdp_replicated_w6_r2"),
    "resume_owner_w3_to_ddp_w5": ("-w 5 --placement ddp --steps 5", "owner_w3"),
}
WRITES_CHECKPOINTS = ("owner", "reconstruct", "alltoall")

# layout.json fields that are not arithmetic: a path of the check's temporary directory or this
# machine. (JSON paths; "*" matches every element of an array.)
VOLATILE = [
    ("layout_crc32",),  # the seal covers the volatile fields too
    ("torch_version",),
]
# layout.json fields a change moved on purpose, with the reason (none yet).
RENAMED_OR_MOVED = []


def placement_of(args):
    words = args.split()
    return words[words.index("--placement") + 1] if "--placement" in words else "owner"


def drop(obj, path):
    if not path:
        return
    head, rest = path[0], path[1:]
    if head == "*" and isinstance(obj, list):
        for item in obj:
            drop(item, rest)
    elif isinstance(obj, dict) and head in obj:
        if rest:
            drop(obj[head], rest)
        else:
            del obj[head]


def scrub_paths(obj, tmp):
    """Replaces the temporary directory's path in every string by <tmp>."""
    if isinstance(obj, dict):
        return {k: scrub_paths(v, tmp) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub_paths(v, tmp) for v in obj]
    if isinstance(obj, str):
        return obj.replace(tmp, "<tmp>")
    return obj


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_one(mfsdp, name, tmp, done):
    args, resume = TRAININGS[name]
    ckpt = os.path.join(tmp, name)
    metrics = os.path.join(tmp, name + ".jsonl")
    words = args.split()
    base = BASE[2:] if "--steps" in words else BASE  # a resumed training sets its total steps
    cmd = [mfsdp, "train", *base, *words, "--metrics", metrics]
    if placement_of(args) in WRITES_CHECKPOINTS:
        cmd += ["--checkpoint-dir", ckpt, "--checkpoint-every", "2"]
    if resume:
        cmd += ["--resume-from", done[resume]]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"fingerprint: {name}: `{' '.join(cmd)}` exited {p.returncode}:\n{p.stdout[-3000:]}")
    losses = []
    with open(metrics) as f:
        for line in f:
            row = json.loads(line)
            if "loss" in row:
                losses.append(struct.pack(">d", float(row["loss"])).hex())
    fp = {"args": args, "resume": resume, "losses": losses, "files": {}}
    if os.path.isdir(ckpt):
        for step in sorted(d for d in os.listdir(ckpt) if d.startswith("step_")):
            sdir = os.path.join(ckpt, step)
            for fname in sorted(os.listdir(sdir)):
                path = os.path.join(sdir, fname)
                if fname.endswith(".safetensors"):
                    fp["files"][f"{step}/{fname}"] = sha256(path)
                elif fname == "layout.json":
                    with open(path) as f:
                        layout = json.load(f)
                    for field in VOLATILE + [p for p, _ in RENAMED_OR_MOVED]:
                        drop(layout, field)
                    layout = scrub_paths(layout, tmp)
                    canon = json.dumps(layout, sort_keys=True, separators=(",", ":")).encode()
                    fp["files"][f"{step}/layout.json (scrubbed)"] = hashlib.sha256(canon).hexdigest()
            done[name] = sdir  # the last step: what a resuming training reads
    return fp


def onednn_isa():
    """oneDNN's instruction set on this CPU, as regression/test_golden.cpp's onednn_isa() names it."""
    order = ["sse41", "avx", "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16",
             "avx512_core_fp16", "avx512_core_amx"]
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    isa = "sse41"
    if "avx" in flags: isa = "avx"
    if "avx2" in flags: isa = "avx2"
    if "avx_vnni" in flags: isa = "avx2_vnni"
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags: isa = "avx512_core"
    if isa == "avx512_core" and "avx512_vnni" in flags: isa = "avx512_core_vnni"
    if isa == "avx512_core_vnni" and "avx512_bf16" in flags: isa = "avx512_core_bf16"
    if isa == "avx512_core_bf16" and "avx512_fp16" in flags: isa = "avx512_core_fp16"
    if isa.startswith("avx512_core_") and {"amx_bf16", "amx_tile"} <= flags: isa = "avx512_core_amx"
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").lower()
    if cap in order and order.index(cap) < order.index(isa):
        isa = cap
    return isa


def cache_kib(level):
    """cpu0's data or unified cache of this level in KiB, from sysfs; 0 when it does not say."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(f"{base}/{index}/level") as f:
                lv = int(f.read())
            with open(f"{base}/{index}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{index}/size") as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if lv != level or kind == "Instruction":
            continue
        unit = {"K": 1, "M": 1024, "G": 1024 * 1024}.get(size[-1:].upper(), None)
        return int(size[:-1]) * unit if unit else int(size) // 1024
    return 0


def platform(mfsdp):
    env = json.loads(subprocess.run([mfsdp, "env", "--json"], check=True, capture_output=True, text=True).stdout)
    return f"{env['cpu_capability'].lower()}-{onednn_isa()}-l2_{cache_kib(2)}-l3_{cache_kib(3)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mfsdp")
    ap.add_argument("file")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--only", nargs="*", help="these trainings (and what they resume from)")
    a = ap.parse_args()
    names = list(TRAININGS)
    if a.only:
        need = set(a.only) | {TRAININGS[n][1] for n in a.only if TRAININGS[n][1]}
        names = [n for n in names if n in need]
    here = platform(a.mfsdp)
    doc = {}
    if os.path.exists(a.file):
        with open(a.file) as f:
            doc = json.load(f)
    records = doc.get("platforms", {})
    if not a.write and here not in records:
        print(f"fingerprint: no record for this platform ({here}; recorded: {', '.join(sorted(records)) or 'none'}): "
              f"nothing compared; before a refactor, record it with: {sys.argv[0]} {a.mfsdp} {a.file} --write")
        return 0
    got, done = {}, {}
    with tempfile.TemporaryDirectory(prefix="mfsdp-fingerprint-") as tmp:
        for name in names:
            got[name] = run_one(a.mfsdp, name, tmp, done)
            print(f"fingerprint: {name}: {len(got[name]['losses'])} losses, {len(got[name]['files'])} files", flush=True)
    if a.write:
        records[here] = {"trainings": got}
        doc = {"what": "bits of every loss and SHA-256 of every checkpoint file of the listed trainings, per platform "
                       "(<ATen capability>-<oneDNN ISA>-l2_<KiB>-l3_<KiB>; records keyed without the cache sizes predate "
                       "them in the key and are compared with nothing)",
               "regenerate": "python3 regression/arithmetic/fingerprint.py build/mfsdp "
                             "regression/arithmetic/fingerprint.json --write",
               "base_args": " ".join(BASE), "platforms": dict(sorted(records.items()))}
        with open(a.file + ".tmp", "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
        os.replace(a.file + ".tmp", a.file)
        print(f"fingerprint: wrote {len(got)} trainings to {a.file} for platform {here}")
        return 0
    want = records[here]["trainings"]
    bad = []
    for name in names:
        w, g = want.get(name), got[name]
        if w is None:
            bad.append(f"{name}: not in {a.file} (a new training: regenerate with --write)")
            continue
        if w["args"] != g["args"] or w["resume"] != g["resume"]:
            bad.append(f"{name}: its arguments changed ({w['args']!r} -> {g['args']!r}): regenerate on purpose")
        for i, (lw, lg) in enumerate(zip(w["losses"], g["losses"])):
            if lw != lg:
                bad.append(f"{name}: step {i + 1} loss {struct.unpack('>d', bytes.fromhex(lw))[0]!r} -> "
                           f"{struct.unpack('>d', bytes.fromhex(lg))[0]!r}")
        if len(w["losses"]) != len(g["losses"]):
            bad.append(f"{name}: {len(w['losses'])} losses -> {len(g['losses'])}")
        for fname in sorted(set(w["files"]) | set(g["files"])):
            if w["files"].get(fname) != g["files"].get(fname):
                bad.append(f"{name}: {fname}: {w['files'].get(fname, 'absent')} -> {g['files'].get(fname, 'absent')}")
    for line in bad:
        print("fingerprint: DIFFERS:", line)
    if bad:
        print(f"fingerprint: {len(bad)} difference(s) in {len(names)} trainings")
        return 1
    print(f"fingerprint: platform {here}: all {len(names)} trainings bit-identical "
          f"({sum(len(got[n]['losses']) for n in names)} losses, {sum(len(got[n]['files']) for n in names)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
