# Checks FSDP2 + torch.optim.Muon against the oracle at W = 2. Run with
#   torchrun --nproc-per-node 2 --master-addr 127.0.0.1 docs/examples/check_fsdp2_muon.py WORKDIR
import sys

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from mfsdp_kit import Recorder, Reference, conform

work = sys.argv[1]  # a new directory for the dumps
dist.init_process_group("gloo")
rank = dist.get_rank()
ref = Reference.train(f"{work}/oracle", world_size=2, steps=3)  # the oracle: mfsdp train --placement ddp
model = ref.model()                                              # the reference's model and initialisation
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizers = ref.torch_optimizers(model)                         # Muon on the matrices, AdamW on the rest
with Recorder(model, ref, f"{work}/fsdp2", optimizers) as rec:
    for step in range(1, ref.steps + 1):
        loss = model(*ref.batch(step, rank))
        loss.backward()
        rec.grads()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
        rec.step(loss)
if rank == 0:
    print(conform(ref, f"{work}/fsdp2").text)
dist.barrier()  # the ranks leave together: one leaving while rank 0 still runs conform can abort
dist.destroy_process_group()
