"""Training loops through the kit's Recorder under torchrun, one per --mode, each writing a
candidate dump into WORK (the driver kit_check.py judges them):

  ddp        DistributedDataParallel + torch.optim.Muon / AdamW           -> WORK/ddp
  fsdp2      fully_shard per block and at the root on a 1-D mesh          -> WORK/fsdp2
  hsdp       fully_shard on a 2-D mesh (replicate 2, shard W / 2)          -> WORK/hsdp
  bad        the refusals, each printed as "kit_loops: refused: <case>: <message>": a renamed
             parameter, another shape, a TrajectoryWriter on rank 1, a dump directory that is not
             new (left as it was), a run stopped before finish() (the dump says it is incomplete)
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

from mfsdp_kit import Recorder, RecorderError, Reference, TrajectoryWriter
from mfsdp_kit.trajectory import DumpError
from kit_test_util import say  # a line two ranks cannot glue


def train(model, ref, rank, directory, optimizers, steps=None, finish=True, state=True):
    rec = Recorder(model, ref, directory, optimizers, state=state)
    for step in range(1, (steps or ref.steps) + 1):
        loss = model(*ref.batch(step, rank))
        loss.backward()
        rec.grads()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
        rec.step(loss)
    if finish:
        rec.finish()


def shard(model, mesh):
    from torch.distributed.fsdp import fully_shard
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=("ddp", "fsdp2", "hsdp", "bad"))
    ap.add_argument("--reference", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, W = dist.get_rank(), dist.get_world_size()
    ref = Reference.load(a.reference)
    from torch.distributed.device_mesh import init_device_mesh
    if a.mode == "ddp":
        model = ref.model()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        train(ddp, ref, rank, os.path.join(a.work, "ddp"), ref.torch_optimizers(model))
    elif a.mode == "fsdp2":
        model = shard(ref.model(), init_device_mesh("cpu", (W,)))
        train(model, ref, rank, os.path.join(a.work, "fsdp2"), ref.torch_optimizers(model))
    elif a.mode == "hsdp":
        model = shard(ref.model(), init_device_mesh("cpu", (2, W // 2), mesh_dim_names=("replicate", "shard")))
        train(model, ref, rank, os.path.join(a.work, "hsdp"), ref.torch_optimizers(model))
    else:
        def refused(case, f):
            try:
                f()
            except (RecorderError, DumpError) as e:
                if not str(e).startswith("(rank 0"):
                    say(f"kit_loops: refused: {case}: {e}")
                return
            if rank == 0:
                say(f"kit_loops: NOT refused: {case}")

        def renamed():
            model = ref.model()
            model.layers[0].attn.add_module("query", model.layers[0].attn.q)
            del model.layers[0].attn.q
            Recorder(model, ref, os.path.join(a.work, "renamed"), [])

        def reshaped():
            model = ref.model()
            model.head.weight = torch.nn.Parameter(torch.zeros(ref.dims.vocab + 1, ref.dims.hidden))
            Recorder(model, ref, os.path.join(a.work, "reshaped"), [])

        def rank1_writer():
            if rank == 1:
                TrajectoryWriter(os.path.join(a.work, "rank1"), {})
            else:
                raise DumpError("(rank 0 is not the one under test)")

        def not_new():
            model = ref.model()
            Recorder(model, ref, os.path.join(a.work, "used"), ref.torch_optimizers(model))
        refused("renamed parameter", renamed)
        refused("another shape", reshaped)
        refused("writer on rank 1", rank1_writer) if W > 1 else None
        refused("dump directory not new", not_new)
        model = ref.model()
        train(model, ref, rank, os.path.join(a.work, "interrupted"), ref.torch_optimizers(model), steps=1, finish=False)
    sys.stdout.flush()
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
