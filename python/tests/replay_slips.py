"""One-step replay of torch.optim.Muon + AdamW against the oracle, stock and with each planted slip,
asserting each verdict (docs/conformance.md, "One-step replay"). Run alone (one process: plain
tensors) or under torchrun (FSDP2's Shard(0) DTensors on a 1-D mesh of W ranks):

    python replay_slips.py REFERENCE_DUMP [--plants ...] [--no-state]
    torchrun --nproc-per-node W --master-addr 127.0.0.1 replay_slips.py REFERENCE_DUMP --fsdp2 --plants none

Prints "replay_slips: N passed, 0 failed" on rank 0.
"""
import argparse
import os
import sys

import torch

from mfsdp_kit import Reference, replay
from kit_test_util import say  # a line another rank cannot glue to

# Each planted slip: torch.optim.Muon keyword arguments, and the first step where it can show.
# From a zero state a wrong momentum or Nesterov off only rescales the first update, which
# Newton-Schulz normalises away: step 2, unless the momentum buffer itself is compared (step 1).
PLANTS = {
    "none": ({}, None),
    "wd0": ({"weight_decay": 0.0}, 1),
    "moonlight": ({"adjust_lr_fn": "match_rms_adamw"}, 1),
    "ns4": ({"ns_steps": 4}, 1),
    "momentum0.9": ({"momentum": 0.9}, 2),
    "nesterov_off": ({"nesterov": False}, 2),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("--plants", nargs="+", default=list(PLANTS), choices=list(PLANTS))
    ap.add_argument("--fsdp2", action="store_true", help="under torchrun: the optimizers step Shard(0) DTensors")
    ap.add_argument("--no-state", action="store_true", help="dump no candidate state: the update alone is judged")
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    place, rank = None, 0
    if a.fsdp2:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))

        def place(name, t):
            return distribute_tensor(t, mesh, [Shard(0)])
    ref = Reference.load(a.reference)
    passed = failed = 0
    for plant in a.plants:
        kwargs, first = PLANTS[plant]
        if first == 2 and not a.no_state and plant == "momentum0.9":
            first = 1  # the momentum buffer after step 1 already differs

        def make(named):
            muon = dict(ref.muon_kwargs(), **kwargs)
            matrices = [p for n, p in named.items() if n in ref.matrix_names]
            others = [p for n, p in named.items() if n not in ref.matrix_names]
            return [torch.optim.Muon(matrices, **muon), torch.optim.AdamW(others, **ref.adamw_kwargs())]
        r = replay(ref, make, steps=a.steps, place=place, state=not a.no_state)
        got = r.get("first_systematic_step")
        ok = got == first
        names = [t["name"] for t in r.systematic(got)] if got else []
        if rank == 0:
            secs = ", ".join(f"{s['seconds']:.2f}" for s in r["steps"])
            say(f"replay_slips: {plant}: first systematic step {got} (expected {first}); {len(names)} tensor(s) "
                  f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}; seconds per step {secs}: "
                  f"{'ok' if ok else 'FAIL'}")
            if not ok:
                print(r.text)
        passed, failed = passed + ok, failed + (not ok)
    if rank == 0:
        say(f"replay_slips: {passed} passed, {failed} failed")
    sys.stdout.flush()
    if a.fsdp2:
        import torch.distributed as dist
        dist.barrier()
        os._exit(0)


if __name__ == "__main__":
    main()
