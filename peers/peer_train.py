"""A stock PyTorch peer of `mfsdp train`: the same model, initialisation, data and hyperparameters,
trained the way a PyTorch user would, on W gloo processes launched by torchrun over 127.0.0.1.

Modes (docs/peers.md):
  ddp                DistributedDataParallel + torch.optim.Muon (matrices) and AdamW (the rest), as
                     shipped; gradients averaged by DDP's default hook (each bucket divided by W,
                     then gloo's all-reduce sum), counted by registering that same hook.
  fsdp2              fully_shard per block and at the root (FSDP2 on a CPU DeviceMesh) +
                     torch.optim.Muon / AdamW stepping the DTensor shards: Newton-Schulz on Shard(0)
                     DTensors, DTensor choosing every redistribution.
  fsdp2_reconstruct  FSDP2 + an explicit reconstruct: each matrix's update input gathered with
                     full_tensor(), torch's own Newton-Schulz on every rank, this rank's rows kept
                     (the paper's "reconstruction" baseline as users write it).

The recipe's knobs, each as a stock user writes it with torch 2.11's own API (issue 53; docs/peers.md):
  --grad-accum K     K micro-batches a step (rows m b .. (m + 1) b of the step's K b, as mfsdp), each
                     backward on loss / K; the first K - 1 without gradient sync: DDP's no_sync(),
                     FSDP2's set_requires_gradient_sync(False).
  --max-norm X       torch.nn.utils.clip_grad_norm_(model.parameters(), X) before the step (on FSDP2's
                     DTensor gradients: their partial norms all-reduced).
  --activation-checkpointing
                     each block recomputed in backward: torch.distributed._composable.checkpoint per
                     block (non-reentrant torch.utils.checkpoint; parameter names unchanged), applied
                     before fully_shard as FSDP2 asks.
  --lr-schedule KIND LambdaLR on both optimizers with mfsdp's lambda (mfsdp_kit.schedules), stepped
                     after every optimizer step.

Each rank runs one intra-op thread (as mfsdp's deterministic mode). Per step rank 0 logs (JSON
lines, --metrics): the loss (the mean of the ranks' losses in double, rank order, as mfsdp
records it), forward + backward seconds, optimizer-step seconds, the collectives each phase issued
(CommDebugMode for FSDP2 and DTensor; the DDP hook's count and bytes) and, at the end, every rank's
ru_maxrss. --dump-trajectory writes docs/conformance.md's format for `mfsdp conform`.

Usage: torchrun --nproc-per-node W --master-addr 127.0.0.1 --master-port P peers/peer_train.py --mode MODE ...
"""
import argparse
import contextlib
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

from mfsdp_kit.header import CONSTANT_LR, FP32, mesh_json, model_json, optimizer_json
from mfsdp_kit.model import ADAMW_LR, MUON_LR, Dims, Model, batch, corpus_bytes, init_params, param_specs
from mfsdp_kit.schedules import KINDS, schedule_json, schedule_lambda
from mfsdp_kit.trajectory import TrajectoryWriter, corpus_crc32

MODES = ("ddp", "fsdp2", "fsdp2_reconstruct")


class ReconstructMuon(torch.optim.Muon):
    """torch.optim.Muon's single-tensor step on FSDP2's Shard(0) DTensors, with the Newton-Schulz input
    reconstructed in full on every rank (full_tensor(): one all-gather per matrix) and only this
    rank's rows of the result kept. Momentum, weight decay and the update stay on the local shard."""

    @torch.no_grad()
    def step(self, closure=None):
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        from torch.optim._muon import _adjust_lr, _zeropower_via_newtonschulz
        for group in self.param_groups:
            lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - momentum)
                update = g.lerp(buf, momentum) if group["nesterov"] else buf
                ortho = _zeropower_via_newtonschulz(update.full_tensor(), group["ns_coefficients"], group["ns_steps"],
                                                    group["eps"])
                shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
                mine = ortho.narrow(0, offset[0], shape[0]).contiguous()
                p.mul_(1 - lr * wd)
                p.add_(DTensor.from_local(mine, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                          stride=p.stride()), alpha=-_adjust_lr(lr, group["adjust_lr_fn"], p.shape))


class Collectives:
    """The collectives a region issued: CommDebugMode's counts (FSDP2 and DTensor go through the
    dispatcher's c10d ops), or the DDP hook's buckets."""

    def __init__(self, ddp):
        self.ddp = ddp
        self.hook_calls = self.hook_bytes = 0

    def hook(self, process_group):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def counting(state, bucket):
            self.hook_calls += 1
            self.hook_bytes += bucket.buffer().numel() * bucket.buffer().element_size()
            return default_hooks.allreduce_hook(process_group, bucket)
        return counting

    def region(self):
        if self.ddp:
            return _HookRegion(self)
        from torch.distributed.tensor.debug import CommDebugMode
        return _ModeRegion(CommDebugMode())


class _HookRegion:
    def __init__(self, owner):
        self.owner, self.counts = owner, {}

    def __enter__(self):
        self.calls, self.bytes = self.owner.hook_calls, self.owner.hook_bytes
        return self

    def __exit__(self, *exc):
        calls = self.owner.hook_calls - self.calls
        self.counts = {"allreduce (DDP hook)": calls, "bytes": self.owner.hook_bytes - self.bytes} if calls else {}


class _ModeRegion:
    def __init__(self, mode):
        self.mode, self.counts = mode, {}

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        self.counts = {str(k).split(".")[-1]: v for k, v in self.mode.get_comm_counts().items() if v}


def full(t):
    """A parameter or gradient in full on every rank (a DTensor's full_tensor(): a gather)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def mean_over_ranks(value, world_size):
    """rank_agreement.cpp's mean_over_ranks: all-gathered in double, summed in rank order, / W."""
    local = torch.tensor([value], dtype=torch.float64)
    gathered = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local)
    mean = 0.0
    for g in gathered:
        mean += g.item()
    return mean / world_size


def max_over_ranks(values, world_size):
    """The largest over ranks of each value (the slowest rank's time): what a step waits for."""
    local = torch.tensor(values, dtype=torch.float64)
    gathered = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local)
    return torch.stack(gathered).max(0).values.tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches a step, each of --batch sequences")
    ap.add_argument("--max-norm", type=float, default=0.0, help="clip_grad_norm_ at this norm (0: no clipping)")
    ap.add_argument("--activation-checkpointing", action="store_true", help="recompute each block in backward")
    ap.add_argument("--lr-schedule", choices=KINDS, default="constant")
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--stable-steps", type=int, default=0)
    ap.add_argument("--decay-steps", type=int, help="default: the steps after warm-up and stable ones (as mfsdp)")
    ap.add_argument("--min-lr-ratio", type=float, default=0.0)
    ap.add_argument("--dump-trajectory", help="write docs/conformance.md's trajectory format into this new directory")
    ap.add_argument("--dump-grads", action="store_true", help="with --dump-trajectory: every step's gradients too")
    ap.add_argument("--metrics", help="JSON lines from rank 0: one per step, then a summary")
    ap.add_argument("--plant", choices=("none", "wrong-momentum"), default="none",
                    help="a planted bug for the check that conform catches a wrong peer: Muon's momentum 0.9 while "
                         "the header records 0.95")
    a = ap.parse_args()
    if a.grad_accum < 1 or a.max_norm < 0:
        ap.error(f"--grad-accum {a.grad_accum} must be >= 1 and --max-norm {a.max_norm} >= 0")
    decay = a.decay_steps if a.decay_steps is not None else max(1, a.steps - a.warmup_steps - a.stable_steps)
    schedule = (a.lr_schedule, a.warmup_steps, a.stable_steps, decay, a.min_lr_ratio)

    torch.set_num_threads(1)  # as mfsdp's deterministic mode: one intra-op thread per rank
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    dist.init_process_group("gloo")
    rank, W = dist.get_rank(), dist.get_world_size()
    dims = Dims(hidden=a.hidden, intermediate=a.intermediate, layers=a.layers, heads=a.heads)
    data = corpus_bytes()
    model = Model(dims)
    model.load_state_dict(init_params(a.seed, dims=dims))
    matrices = {n for n, _, m in param_specs(dims=dims) if m}
    collectives = Collectives(ddp=a.mode == "ddp")
    if a.activation_checkpointing:
        from torch.distributed._composable import checkpoint
        for block in model.layers:
            checkpoint(block)
    if a.mode == "ddp":
        pg = dist.group.WORLD
        trained = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
        trained.register_comm_hook(None, collectives.hook(pg))
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (W,))
        for block in model.layers:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        trained = model
    named = dict(model.named_parameters())
    muon_type = ReconstructMuon if a.mode == "fsdp2_reconstruct" else torch.optim.Muon
    muon = muon_type([p for n, p in named.items() if n in matrices], lr=MUON_LR)
    adamw = torch.optim.AdamW([p for n, p in named.items() if n not in matrices], lr=ADAMW_LR, foreach=False)
    schedulers = []
    if a.lr_schedule != "constant" or a.warmup_steps:
        lam = schedule_lambda(*schedule)
        schedulers = [torch.optim.lr_scheduler.LambdaLR(muon, lam), torch.optim.lr_scheduler.LambdaLR(adamw, lam)]

    dump = None
    if a.dump_trajectory and rank == 0:
        header = {"producer": f"peers/peer_train.py --mode {a.mode} (torch {torch.__version__})",
                  "model": model_json(dims),
                  # the base rates (LambdaLR has already set lr to base x lambda(0))
                  "optimizer": optimizer_json(*[dict(o.param_groups[0], lr=o.param_groups[0].get("initial_lr", o.param_groups[0]["lr"]))
                                                for o in (muon, adamw)]),
                  "world_size": W, "mesh": mesh_json(1, W), "precision": FP32,
                  "seed": a.seed,
                  "data": {"batch": a.batch, "seq": a.seq, "grad_accum": a.grad_accum, "corpus_bytes": len(data),
                           "corpus_crc32": corpus_crc32(data)},
                  "max_norm": a.max_norm, "lr_schedule": schedule_json(schedule) if schedulers else CONSTANT_LR}
        dump = TrajectoryWriter(a.dump_trajectory, header)
    if a.plant == "wrong-momentum":
        muon.param_groups[0]["momentum"] = 0.9  # the header above says 0.95

    def state_in_full(grads=False):
        out = {}
        for n, p in named.items():  # every rank takes part in the gathers
            t = full(p.grad if grads else p.detach())
            out[n] = t.detach().clone()
        return out

    if a.dump_trajectory:
        params = state_in_full()
        if dump:
            dump.add(0, params)
    metrics = open(a.metrics + f".tmp.{os.getpid()}", "w") if a.metrics and rank == 0 else None
    for step in range(a.steps):
        K, b = a.grad_accum, a.batch
        all_tokens, all_targets = batch(data, a.seed, step, rank, K * b, a.seq)
        t0 = time.perf_counter()
        micro_losses, grad_norm, fb_counts, clip_counts = [], None, {}, {}
        for m in range(K):  # a CommDebugMode region each: one does not survive a second forward
            last = m == K - 1
            if a.mode == "ddp":
                sync = contextlib.nullcontext() if last else trained.no_sync()
            else:
                model.set_requires_gradient_sync(last)
                sync = contextlib.nullcontext()
            with collectives.region() as fb, sync:
                loss = trained(all_tokens[m * b:(m + 1) * b], all_targets[m * b:(m + 1) * b])
                (loss / K if K > 1 else loss).backward()
            for k, v in fb.counts.items():
                fb_counts[k] = fb_counts.get(k, 0) + v
            micro_losses.append(float(loss.item()))
        if a.max_norm > 0:
            with collectives.region() as clip:
                grad_norm = float(full(torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)).item())
            clip_counts = clip.counts
        local_loss = micro_losses[0]
        for x in micro_losses[1:]:  # the micro-batches' mean in double, in order (as mfsdp)
            local_loss += x
        if K > 1:
            local_loss /= K
        t1 = time.perf_counter()
        grads = state_in_full(grads=True) if a.dump_trajectory and a.dump_grads else None
        t2 = time.perf_counter()
        with collectives.region() as opt:
            muon.step()
            adamw.step()
        t3 = time.perf_counter()
        for s in schedulers:
            s.step()
        muon.zero_grad(set_to_none=True)
        adamw.zero_grad(set_to_none=True)
        mean = mean_over_ranks(local_loss, W)
        slowest = max_over_ranks([t1 - t0, t3 - t2], W)
        if a.dump_trajectory:
            params = state_in_full()
            if dump:
                dump.add(step + 1, params, loss=mean, grad_norm=grad_norm, grads=grads)
        if metrics:
            metrics.write(json.dumps({"step": step + 1, "loss": mean, "forward_backward_s": t1 - t0, "optimizer_s": t3 - t2,
                                      "max_forward_backward_s": slowest[0], "max_optimizer_s": slowest[1],
                                      "collectives": {"forward_backward": fb_counts, "optimizer_step": opt.counts,
                                                      **({"clip": clip_counts} if a.max_norm > 0 else {})}}) + "\n")
    maxrss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    all_rss = [torch.empty_like(maxrss) for _ in range(W)]
    dist.all_gather(all_rss, maxrss)
    if dump:
        dump.finish()
    if metrics:
        metrics.write(json.dumps({"summary": True, "mode": a.mode, "world_size": W, "ru_maxrss_kib": [int(x.item()) for x in all_rss],
                                  "torch": torch.__version__, "intra_op_threads": torch.get_num_threads()}) + "\n")
        metrics.close()
        os.replace(metrics.name, a.metrics)
    # Every rank is done with every collective; leave without tearing gloo down: its teardown races
    # its own threads now and then ("terminate called without an active exception", SIGABRT, seen
    # at W = 3 and 4 here), which would fail a run whose results are complete.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
