"""torchtitan 0.3.0's DistMuon through the kit's Recorder (python/tests/torchtitan_verdicts.py):
    torchrun --nproc-per-node 2 torchtitan_loop.py OUT REFERENCE MODE
FSDP2 (fully_shard per block and at the root, Shard(0) storage on a 1-D mesh "dp_shard"), every
matrix under the Owned compute layout (one owner rank steps it whole), torch's AdamW on the rest.
MODE "as_shipped": DistMuon as it is; "cuda_check_patched": its one check that the parameters live on
CUDA replaced by the CPU device. Prints "torchtitan_loop: <MODE>: ran" or "torchtitan_loop: <MODE>:
<ExceptionType>: <message>" on rank 0.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from kit_test_util import say
from kit_loops import train
from mfsdp_kit import Reference

out, refdir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
from torchtitan.distributed.flex_shard import BucketConfig, ComputeLayout, Owned, build_dist_muon  # noqa: E402
from torchtitan.distributed.flex_shard import dist_muon  # noqa: E402

dist.init_process_group("gloo")
rank, W = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
if mode == "cuda_check_patched":
    dist_muon.DistMuon._validate_parameter_storage = lambda self: torch.device("cpu")
ref = Reference.load(refdir)
model = ref.model()
mesh = init_device_mesh("cpu", (W,), mesh_dim_names=("dp_shard",))
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
named = dict(model.named_parameters())
matrices = [n for n in named if n in ref.matrix_names]
try:
    muon = build_dist_muon([{"params": [named[n] for n in matrices], "param_names": matrices}],
                           compute_sharding_by_fqn={n: ComputeLayout(shardings_by_mesh_axis={"dp_shard": Owned()}) for n in matrices},
                           bucket_configs=[BucketConfig(patterns=("*",))], **ref.muon_kwargs())
    adamw = torch.optim.AdamW([p for n, p in named.items() if n not in ref.matrix_names], **ref.adamw_kwargs())
    train(model, ref, rank, out, [muon, adamw], state=False)  # the loop kit_check drives
    result = "ran"
except Exception as e:  # noqa: BLE001  (the finding: what it raises, on every rank alike)
    result = f"{type(e).__name__}: {e}"
if rank == 0:
    say(f"torchtitan_loop: {mode}: {result}")
dist.barrier()
os._exit(0)
