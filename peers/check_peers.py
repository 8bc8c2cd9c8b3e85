"""The stock PyTorch peers' short trajectories judged by `mfsdp conform` against the oracle's
(test regression.stock_peers_conform, label regression; docs/peers.md).

Each peer (peer_train.py: DDP, FSDP2 + torch.optim.Muon, FSDP2 + reconstruct) trains 4 steps of
the tiny model at W = 2 and 4 and dumps its trajectory with gradients; `mfsdp train --placement
ddp` (the oracle) dumps the same run. Required:
  - bitwise (exact, exit 0) where the arithmetic coincides: DDP and FSDP2 + reconstruct at W = 2;
  - within peers/stock_tolerance.json (exit 0) everywhere else, every verdict printed;
  - a wrong peer is caught: Muon's momentum 0.9 under a header that says 0.95 fails the exact
    check at W = 2 (step 1, a matrix) and the tolerance at W = 4 (FSDP2; the loss, step 3 or 4).
Usage: check_peers.py --mfsdp BUILD/mfsdp --work DIR
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import HERE, torchrun  # noqa: E402

STEPS = 4
TOLERANCE = os.path.join(HERE, "stock_tolerance.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mfsdp", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
        passed, failed = passed + ok, failed + (not ok)

    def conform(ref, cand, tolerance="exact"):
        report = os.path.join(a.work, f"report_{os.path.basename(cand)}_{'exact' if tolerance == 'exact' else 'tol'}.json")
        r = subprocess.run([a.mfsdp, "conform", ref, cand, "--tolerance", tolerance, "--json", report],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        verdict = [line for line in r.stdout.splitlines() if line.startswith(("conform:", "first", "mfsdp:"))]
        print("      " + "\n      ".join(verdict[1:] or verdict))
        return r.returncode, (json.load(open(report)) if os.path.exists(report) else {})

    def peer(mode, W, plant="none"):
        d = os.path.join(a.work, f"{mode}_w{W}" + ("" if plant == "none" else "_" + plant))
        code, out, _ = torchrun(W, ["--mode", mode, "--steps", str(STEPS), "--dump-trajectory", d, "--dump-grads",
                                    "--plant", plant])
        if code != 0:
            print(out[-3000:])
        check(code == 0, f"peer {mode} W={W}{'' if plant == 'none' else ' (planted ' + plant + ')'} ran")
        return d

    oracle = {}
    for W in (2, 4):
        oracle[W] = os.path.join(a.work, f"oracle_w{W}")
        r = subprocess.run([a.mfsdp, "train", "-w", str(W), "--steps", str(STEPS), "--placement", "ddp", "--dump-trajectory",
                            oracle[W], "--dump-grads"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 0, f"the oracle's trajectory at W={W}")
        if r.returncode != 0:
            print(r.stdout[-3000:])
            sys.exit(1)

    for W in (2, 4):
        for mode in ("ddp", "fsdp2_reconstruct", "fsdp2"):
            d = peer(mode, W)
            bitwise = W == 2 and mode != "fsdp2"
            print(f"    {mode} W={W} against the oracle, exact:")
            code, _ = conform(oracle[W], d)
            if bitwise:
                check(code == 0, f"{mode} W={W}: bitwise equal to the oracle (every loss, parameter and gradient)")
                continue
            check(code == 1, f"{mode} W={W}: not bitwise (expected: {'DTensor Newton-Schulz' if mode == 'fsdp2' else 'gloo ring order'})")
            print(f"    {mode} W={W} against the oracle, within {os.path.basename(TOLERANCE)}:")
            code, report = conform(oracle[W], d, TOLERANCE)
            check(code == 0, f"{mode} W={W}: within the tolerance model ({report.get('entry_uses')})")

    # A wrong peer: Muon's momentum 0.9 while its header says 0.95.
    d = peer("ddp", 2, "wrong-momentum")
    code, report = conform(oracle[2], d)
    first = report.get("first_difference", {})
    check(code == 1 and first.get("step") == 1 and first.get("kind") == "params",
          f"wrong momentum, DDP W=2: caught by the exact check at step 1 ({first.get('name')})")
    d = peer("fsdp2", 4, "wrong-momentum")
    code, report = conform(oracle[4], d, TOLERANCE)
    outside = report.get("first_outside", {})
    check(code == 1 and outside.get("kind") == "loss" and outside.get("step") in (3, 4),
          f"wrong momentum, FSDP2 W=4: caught by the tolerance model ({outside.get('kind')} at step {outside.get('step')})")
    print(f"check_peers: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
