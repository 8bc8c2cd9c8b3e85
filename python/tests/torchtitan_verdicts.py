"""torchtitan 0.3.0's DistMuon through the kit (docs/conformance.md, "Public implementations"), each
finding asserted as found. Needs the optional set-up: MFSDP_EXTRAS=torchtitan bash scripts/setup.sh.
On a machine without CUDA (this one) DistMuon does not run: the findings are the two ways it stops.
On a CUDA machine the check fails, saying so: a verdict there is the row's next step.

Usage: python torchtitan_verdicts.py --work DIR   (prints "torchtitan_verdicts: N passed, 0 failed")
"""
import argparse
import os
import sys

import torch

from kit_test_util import Checks, require, torchrun
from mfsdp_kit import Reference

HERE = os.path.dirname(os.path.abspath(__file__))
check = Checks("torchtitan_verdicts", 600)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    require("torchtitan_verdicts", "torchtitan", "0.3.0", "torchtitan")
    if torch.cuda.is_available():
        print("torchtitan_verdicts: CUDA is available here: these are the CPU findings; run DistMuon on the GPU for its verdict")
        sys.exit(1)
    torch.set_num_threads(1)
    ref = Reference.train(f"{a.work}/oracle", world_size=2, steps=3)
    found = {}
    for mode in ("as_shipped", "cuda_check_patched"):
        code, out = torchrun(2, os.path.join(HERE, "torchtitan_loop.py"), [f"{a.work}/{mode}", ref.dump.dir, mode])
        lines = [line for line in out.splitlines() if line.startswith(f"torchtitan_loop: {mode}: ")]
        found[mode] = (code, lines[0].split(": ", 2)[2] if lines else out[-600:])
    code, said = found["as_shipped"]
    check("as shipped: DistMuon refuses CPU parameters, naming CUDA",
          code == 0 and said == "ValueError: DistMuon requires one CUDA device per process", said)
    code, said = found["cuda_check_patched"]
    check("its CUDA check patched out: the constructor builds a CUDA-style stream (torch.cpu.Stream takes no device)",
          code == 0 and said.startswith("TypeError: ") and "unexpected keyword argument 'device'" in said, said)
    check.finish()


if __name__ == "__main__":
    main()
