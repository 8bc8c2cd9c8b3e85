"""The conformance kit end to end (docs/conformance.md), on this machine's CPU ranks over gloo:
  1. the newcomer's example, docs/examples/check_fsdp2_muon.py, is the docs' first code block
     verbatim and runs under torchrun at W = 2, printing a verdict;
  2. the Recorder under DDP (bitwise the oracle at W = 2, state included), FSDP2 on a 1-D mesh
     (comparable: its header and mesh agree) and HSDP on a 2 x 2 mesh (comparable with the oracle
     run with --replicas 2; refused against the flat oracle, naming the mesh);
  3. bad input refused with a clear message and nothing overwritten;
  4. one-step replay of torch.optim.Muon + AdamW on FSDP2's Shard(0) DTensors at W = 2 and 4: the
     stock optimizer within the noise, each planted slip caught at its first possible step.
Prints "kit_check: N passed, 0 failed".

Usage: python kit_check.py --mfsdp BUILD/mfsdp --work DIR [--quick]
"""
import argparse
import os
import re
import subprocess
import sys

from kit_test_util import torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
EXAMPLE = os.path.join(REPO, "docs", "examples", "check_fsdp2_muon.py")
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"kit_check: {name}: {'ok' if ok else 'FAIL'}{(' (' + detail + ')') if detail else ''}", flush=True)


def mfsdp(*args):
    r = subprocess.run([MFSDP] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def oracle(work, name, world_size, *flags):
    d = os.path.join(work, name)
    code, out = mfsdp("train", "--placement", "ddp", "-w", world_size, "--steps", 2, "--dump-trajectory", d, "--dump-grads",
                      "--dump-state", *flags)
    assert code == 0, out
    return d


def main():
    global MFSDP
    ap = argparse.ArgumentParser()
    ap.add_argument("--mfsdp", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    MFSDP = os.environ["MFSDP_BIN"] = os.path.realpath(a.mfsdp)
    work = a.work

    # 1. The example: the docs' first code block is the file, and it runs.
    docs = open(os.path.join(REPO, "docs", "conformance.md")).read()
    block = re.search(r"```python\n(.*?)```", docs, re.S)
    source = open(EXAMPLE).read()
    check("the docs' first code block is docs/examples/check_fsdp2_muon.py", bool(block) and block.group(1) == source)
    body = [line for line in source.splitlines() if line.strip() and not line.startswith(("import ", "from ", "#"))]
    check("the example has at most 25 lines besides imports and comments", len(body) <= 25, f"{len(body)} lines")
    ex = os.path.join(work, "example")
    os.makedirs(ex)
    code, out = torchrun(2, EXAMPLE, [ex])
    verdict = re.search(r"^conform: (BITWISE EQUAL|NOT EQUAL|WITHIN TOLERANCE).*$", out, re.M)
    check("the example runs under torchrun at W = 2 and prints a verdict", code == 0 and bool(verdict),
          verdict.group(0) if verdict else out[-2000:])

    # 2. The recorder under DDP, FSDP2 and HSDP.
    ref2 = os.path.join(ex, "oracle")
    code, out = torchrun(2, os.path.join(HERE, "kit_loops.py"), ["--mode", "ddp", "--reference", ref2, "--work", work])
    c, rep = mfsdp("conform", ref2, os.path.join(work, "ddp"))
    check("DDP at W = 2 through the Recorder is bitwise the oracle: 255 values (21 params x 4, 3 losses, 21 grads and 35 state tensors x 3)",
          code == 0 and c == 0 and "BITWISE EQUAL: 255 values" in rep, rep[-600:] if c or code else "")
    code, out = torchrun(2, os.path.join(HERE, "kit_loops.py"), ["--mode", "fsdp2", "--reference", ref2, "--work", work])
    c, rep = mfsdp("conform", ref2, os.path.join(work, "fsdp2"))
    check("FSDP2 at W = 2 through the Recorder is comparable (exit 0 or 1, not 2)", code == 0 and c in (0, 1), rep[-400:])
    # The JSON report read by its documented keys, through the kit (verdict, first_difference, notes).
    from mfsdp_kit import conform
    r = conform(ref2, os.path.join(work, "fsdp2"))
    check("the kit's conform reads the JSON report's verdict and first difference by name",
          r.verdict == "differs" and r.first_divergence.startswith("step 1 params ") and r["notes"] == [],
          f"{r.verdict}: {r.first_divergence}")
    ref4r = oracle(work, "oracle_w4_r2", 4, "--replicas", 2)
    ref4 = oracle(work, "oracle_w4", 4)
    code, out = torchrun(4, os.path.join(HERE, "kit_loops.py"), ["--mode", "hsdp", "--reference", ref4r, "--work", work])
    c, rep = mfsdp("conform", ref4r, os.path.join(work, "hsdp"))
    check("HSDP 2 x 2 through the Recorder is comparable with the oracle's --replicas 2 run", code == 0 and c in (0, 1),
          (rep if c not in (0, 1) else "") + (out[-1500:] if code else ""))
    c, rep = mfsdp("conform", ref4, os.path.join(work, "hsdp"))
    check("HSDP against the flat oracle is refused naming the mesh", c == 2 and "mesh.replicas: reference 1, candidate 2" in rep,
          rep[-300:])

    # 3. Bad input.
    used = os.path.join(work, "used")
    os.makedirs(used)
    open(os.path.join(used, "keep.txt"), "w").write("mine\n")
    code, out = torchrun(2, os.path.join(HERE, "kit_loops.py"), ["--mode", "bad", "--reference", ref2, "--work", work])
    for case, needle in [("renamed parameter", "the model's parameter 'layers.0.attn.query.weight' is not the reference's"),
                         ("another shape", "parameter 'head.weight' has shape [257, 64], the reference's is [256, 64]"),
                         ("writer on rank 1", "this is rank 1; only rank 0 writes a dump"),
                         ("dump directory not new", "is not a new or empty directory (nothing in it is replaced)")]:
        m = re.search(rf"^kit_loops: refused: {re.escape(case)}: .*$", out, re.M)
        check(f"refused: {case}", code == 0 and bool(m) and needle in m.group(0), m.group(0) if m else out[-1500:])
    check("the used directory is left as it was", os.listdir(used) == ["keep.txt"] and open(os.path.join(used, "keep.txt")).read() == "mine\n")
    c, rep = mfsdp("conform", ref2, os.path.join(work, "interrupted"))
    check("a run stopped before finish() leaves a dump that says it is incomplete", c == 2 and "the dump is incomplete" in rep,
          rep[-300:])

    # Replay's own refusals: a dump that is not a replay, and a reference whose header does not
    # describe the optimizer that produced it (its Muon lr edited): no noise floor can be measured.
    c, rep = mfsdp("conform", "--replay", ref2, os.path.join(work, "ddp"))
    check("conform --replay of a dump that is not a replay is refused", c == 2 and "is not a replay dump" in rep, rep[-300:])
    import json
    import shutil
    import torch
    from mfsdp_kit import Reference, ToolError, replay
    lied = os.path.join(work, "lied")
    shutil.copytree(ref2, lied)
    h = json.load(open(os.path.join(lied, "trajectory.json")))
    h["optimizer"]["muon"]["lr"] = 0.01
    json.dump(h, open(os.path.join(lied, "trajectory.json"), "w"))
    ref = Reference.load(lied)
    try:
        replay(ref, ref.torch_optimizers_of, steps=1)
        refusal = ""
    except Exception as e:  # noqa: BLE001
        refusal = str(e)
    check("replay against a reference its own header does not reproduce is refused, naming the tensor",
          "does not reproduce the reference's own step of 'layers.0.attn.q.weight' bit for bit" in refusal, refusal[-300:])

    # 4. One-step replay on DTensors at W = 2 and 4.
    for W, ref in ((2, ref2), (4, ref4)):
        code, out = torchrun(W, os.path.join(HERE, "replay_slips.py"), [ref, "--fsdp2", "--steps", 2])
        for line in re.findall(r"^replay_slips: [a-z0-9_.]+: .*$", out, re.M):
            check(f"W = {W}: {line[len('replay_slips: '):-len(': ok')] if line.endswith(': ok') else line}", line.endswith(": ok"))
        check(f"W = {W}: replay ran every plant", code == 0 and "replay_slips: 6 passed, 0 failed" in out, out[-1500:] if code else "")
    print(f"kit_check: {sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
