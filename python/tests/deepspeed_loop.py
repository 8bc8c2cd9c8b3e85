"""One DeepSpeed 0.19.8 run of the reference through the kit's Recorder (python/tests/deepspeed_verdicts.py):
    torchrun --nproc-per-node 2 deepspeed_loop.py OUT STAGE REFERENCE MODE
MODE "defaults": DeepSpeed's own Muon tagging (by name: 2-D and not "embed"/"lm_head") and its default
gradient_clipping (1.0); "matched": the reference's matrices tagged, clipping as the header's max_norm.
Prints "deepspeed_loop: muon-tagged NAMES" on rank 0.
"""
import os, sys, json, torch
os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed, torch.distributed as dist
from mfsdp_kit import Recorder, Reference
from mfsdp_kit.deepspeed_zero import ZeroGather
from kit_test_util import say
out, stage, refdir, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]  # mode: defaults | matched
deepspeed.init_distributed("gloo")
rank = dist.get_rank(); torch.set_num_threads(1)
ref = Reference.load(refdir)
model = ref.model()
m, a = ref.optimizer["muon"], ref.optimizer["adamw"]
cfg = {"train_micro_batch_size_per_gpu": ref.header["data"]["batch"], "zero_optimization": {"stage": stage},
       "optimizer": {"type": "Muon", "params": {"muon_lr": m["lr"], "adam_lr": a["lr"], "momentum": m["momentum"],
                     "betas": list(a["betas"]), "eps": a["eps"], "ns_method": "standard"}}}
if stage == 3:  # ZeRO-3 refuses Muon with its default reduce_scatter: "Muon and reduce scatter cannot be used together"
    cfg["zero_optimization"]["reduce_scatter"] = False
if mode != "defaults":
    cfg["gradient_clipping"] = ref.header["max_norm"]
    flags = deepspeed.set_optimizer_flags
    def by_reference(config, model):
        flags(config, model)
        for n, p in model.named_parameters():
            p.use_muon = n in ref.matrix_names
    deepspeed.set_optimizer_flags = by_reference
groups = [{"params": [p for n, p in model.named_parameters() if n in ref.matrix_names], "weight_decay": m["weight_decay"]},
          {"params": [p for n, p in model.named_parameters() if n not in ref.matrix_names], "weight_decay": a["weight_decay"]}]
engine, *_ = deepspeed.initialize(model=model, model_parameters=groups, config=cfg)
with Recorder(engine.module, ref, out, grads=False, state=False, gather=ZeroGather(engine)) as rec:
    for step in range(1, ref.steps + 1):
        loss = engine(*ref.batch(step, rank))
        engine.backward(loss)
        engine.step()
        rec.step(loss)
if rank == 0:
    say("deepspeed_loop: muon-tagged " + ",".join(n for n, p in engine.module.named_parameters() if p.use_muon))
dist.barrier()  # the ranks leave together
