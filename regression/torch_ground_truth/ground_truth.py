"""Stock PyTorch as external ground truth for `mfsdp train`.

The tiny model, its initialisation and its batch sampler are rebuilt here in PyTorch from their
definitions (core/train/model.cpp, core/train/data.cpp, core/dist/determinism.cpp), not read from
the C++ side; then the model is trained with torch.optim.Muon (hidden matrices) and
torch.optim.AdamW (embedding, norms, head) over W gloo processes whose gradients are averaged in
rank order (summed 0..W-1 in float32, divided once, as docs/architecture.md's determinism
contract says). Required bit for bit, at W = 1, 2 and 3:
  - the initial parameters and every rank's batch of every step (against torch_ground_truth_dump,
    which calls the same TransformerModel::init and ByteCorpus::batch that train_loop calls);
  - every step's loss (mean over ranks, in double, as `mfsdp train --metrics` records it);
  - the final parameters (`mfsdp export` of the last checkpoint);
  - the final optimizer state: Muon's momentum_buffer, AdamW's exp_avg, exp_avg_sq and step,
    assembled from the checkpoint's rank files.

The same again under the bf16 policy (`mfsdp train --param-dtype bf16`, FSDP2's
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)): fp32 masters, bf16 leaf copies for
forward and backward, RMSNorm's normalisation, the softmax and the loss in fp32 (docs/precision.md),
bf16 gradients cast to fp32 and averaged in rank order, torch.optim stepping the fp32 masters.

The same again with tied embeddings (`mfsdp train --tie-embeddings`, fp32 at W = 2 and 3, bf16
at W = 2): the head reuses embed.weight, whose .grad autograd sums over both uses before the
rank-order mean; every loss, the 20 final parameters and the 26 state tensors bit for bit.

The same again with gradient accumulation (`mfsdp train --grad-accum 4 --batch 1`, fp32 at W = 3
per micro-batch and at W = 2 deferred, bf16 at W = 3 deferred): each micro-batch's loss its own
token mean, the micro-batches' gradients added in the order of the mode (per micro-batch: each
micro-batch's rank-order sum, added over micro-batches; deferred: each rank's micro-batches added
in float32, then the rank-order sum), divided once by W K (docs/accumulation.md).

The same again with global gradient-norm clipping (`mfsdp train --max-norm X`, fp32 at W = 3 at
0.3, with 4 per-micro-batch micro-batches at W = 2 at 0.5, bf16 with 2 deferred micro-batches at
W = 3 at 0.3, and experts at W = 3 at 0.5): torch.nn.utils.get_total_norm of the mean gradients in
the model's parameter order, then clip_grads_with_norm_; every step's norm before clipping bit for
bit besides losses, parameters and state. 0.3 is not a power of two, so torch's spelling of the
coefficient, (total + 1e-6).reciprocal() * max_norm, and a true division round differently there
(at 0.5 they agree): the fp32 run at 0.3 fails with the division planted.

The same again under learning-rate schedules (`mfsdp train --lr-schedule warmup-cosine
--warmup-steps 1 --decay-steps 2 --min-lr-ratio 0.1` at W = 3, wsd at W = 2): torch's LambdaLR over
torch.optim.Muon and AdamW with the closed-form lambda of docs/schedules.md written here in Python;
every step's lambda (`--metrics` lr_factor), losses, parameters and state bit for bit. And every
schedule of torch_ground_truth_dump's table over 300 steps: the learning rates LambdaLR gives equal
those mfsdp steps with, bit for bit; torch's recursive LinearLR / CosineAnnealingLR (in a
SequentialLR after the warm-up) are only measured against them, within SCHEDULE_RECURSIVE_ULP.

The same again under QK-clip (`--qk-clip-tau 0.1`: fp32 at W = 3, bf16 at W = 2, and fp32 at W = 3
with 2 per-micro-batch micro-batches, whose statistic is the largest logit over both; a statistic
reset before each micro-batch fails that run's logits, losses, parameters and state).

The same again with activation checkpointing (`mfsdp train --activation-checkpointing`, fp32 at W = 3
and bf16 at W = 2): mfsdp recomputes each block in backward and PyTorch stores its activations;
losses, parameters and state bit for bit (recompute changes no value).

The same again with a mixture of experts (`mfsdp train --experts 4 --top-k 2`, fp32 at W = 3,
bf16 at W = 2): every block's MLP a float32 router softmax, a stable top-2, tokens dispatched by a
stable sort and gathers, and 3-D expert tensors [4, out, in]; torch.optim.Muon steps each expert's
[out, in] slice as its own matrix (it refuses 3-D tensors), AdamW the router. mfsdp cuts each
expert tensor into ranges on different ranks; losses, parameters and state bit for bit.

Then, measured and bounded, not bitwise:
  - an idiomatic torch.nn version of the model (nn.Embedding, nn.RMSNorm, nn.Linear,
    F.scaled_dot_product_attention with is_causal) on the C++ initial and final weights: loss and
    gradients within IDIOMATIC_LOSS_RTOL / IDIOMATIC_GRAD_RTOL (why those values: see below);
  - stock DistributedDataParallel at W = 3 (it scales each gradient by 1/W and sums with gloo's
    ring): how far its averaged gradients and its trajectory are from the rank-order mean. This is
    a report; it is expected to differ in the last bits.

All PyTorch trainings run in one pool of max-W gloo processes, started once (importing torch costs
each process seconds); a W-rank training runs on ranks 0..W-1 over its own dist.new_group.

Usage: ground_truth.py --mfsdp BUILD/mfsdp --dump BUILD/.../torch_ground_truth_dump --work DIR
Exit code 1 on any bitwise difference or a bound exceeded; prints "N passed, M failed".
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from mfsdp_kit.schedules import schedule_flags, schedule_lambda  # one home for lambda (docs/schedules.md)
from safetensors import safe_open
from safetensors.torch import load_file

# The model, its init, its sampler and its functional forward: the kit's, which the stock peers share.
from mfsdp_kit.model import (ADAMW_LR, EXPERTS, MUON_LR, RMS_EPS, TINY, TOP_K, batch, corpus_bytes, functional_loss,
                             init_params, param_specs)

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS = TINY.vocab, TINY.hidden, TINY.intermediate, TINY.layers, TINY.heads
SEED, BATCH, SEQ = 0, 4, 32      # mfsdp train's defaults
STEPS = 4
# torch's recursive schedulers (LinearLR, CosineAnnealingLR: each lr from the previous one) against
# the closed form: the last bits drift with the steps. Bound on the largest difference, in units in
# the last place of the closed form's lr, over the dump's 300-step table (measured: see docs/schedules.md).
SCHEDULE_RECURSIVE_ULP = 64

# The idiomatic model's bounds. Every op of both models is float32 and computes the same function;
# they may differ only in how two ops accumulate: nn.RMSNorm (F.rms_norm's kernel instead of the
# spelled-out mean/rsqrt) and scaled_dot_product_attention's CPU kernel (a blocked online softmax,
# summing in another order than matmul -> softmax -> matmul). Such a reordering moves a
# sum of at most S = 32 terms by a few float32 ulps (2^-24 ~ 6e-8 relative each); the gradients
# pass through the attention backward of 2 blocks, so a few times that: measured 4.9e-7 (initial
# weights) and 4.7e-7 (trained weights) relative to each tensor's largest element, and an
# identical loss. The bounds leave a factor of 10 over the measurement and stay far below what a
# wrong op produces (eps 1e-5 instead of 1e-6 in one RMSNorm moves the loss by 1.4e-4 relative;
# a missing 1/sqrt(d) or a wrong mask by more than 1e-2).
IDIOMATIC_LOSS_RTOL = 1e-6
IDIOMATIC_GRAD_RTOL = 5e-6


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(4))

    def forward(self, h):
        B, S, _ = h.shape
        split = lambda t: t.view(B, S, HEADS, HIDDEN // HEADS).transpose(1, 2)
        a = F.scaled_dot_product_attention(split(self.q(h)), split(self.k(h)), split(self.v(h)), is_causal=True)
        return self.o(a.transpose(1, 2).reshape(B, S, HIDDEN))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, h):
        return self.down(F.silu(self.gate(h)) * self.up(h))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.attn = nn.RMSNorm(HIDDEN, eps=RMS_EPS), Attention()
        self.mlp_norm, self.mlp = nn.RMSNorm(HIDDEN, eps=RMS_EPS), Mlp()

    def forward(self, x):
        y = x + self.attn(self.attn_norm(x))
        return y + self.mlp(self.mlp_norm(y))


class Tiny(nn.Module):
    """The same parameters under the same names as the C++ model (its state_dict loads an export)."""

    def __init__(self, functional=False, tied=False):
        super().__init__()
        self.functional = functional  # forward through functional_loss (exact) or the modules
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(HIDDEN, eps=RMS_EPS)
        self.head = None if tied else nn.Linear(HIDDEN, VOCAB, bias=False)  # tied: functional only

    def forward(self, tokens, targets):
        if self.functional:
            return functional_loss(dict(self.named_parameters()), tokens, targets)
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return F.cross_entropy(self.head(self.norm(x)).reshape(-1, VOCAB), targets.reshape(-1))


# ---- Training over gloo processes -----------------------------------------------------------

def make_optimizers(params, tied=False, moe=False):
    """Muon for the matrices, AdamW for the rest. An expert tensor's slices p.data[e] (2-D views of
    its storage) go to Muon one by one; `slices` maps each to (name, e) for its .grad and state."""
    specs = param_specs(tied, moe)
    matrices, slices = [], {}
    for n, shape, m in specs:
        if not m:
            continue
        if len(shape) == 2:
            matrices.append(params[n])
            continue
        for e in range(shape[0]):
            view = params[n].data[e]
            slices[id(view)] = (n, e, view)
            matrices.append(view)
    muon = torch.optim.Muon(matrices, lr=MUON_LR)
    adamw = torch.optim.AdamW([params[n] for n, _, m in specs if not m], lr=ADAMW_LR, foreach=False)
    return muon, adamw, slices


def lambda_lr_sequence(base, lam, steps, make=None):
    """The lr a torch optimizer steps with at t = 0 .. steps - 1 under LambdaLR(lam), or the
    scheduler `make(optimizer)` builds."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    sched = make(opt) if make else torch.optim.lr_scheduler.LambdaLR(opt, lam)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def ulps(a, b):
    return abs(a - b) / math.ulp(b) if b != 0 else (0 if a == 0 else float("inf"))


def check_schedules(tally, path):
    """Each schedule of the dump's table: LambdaLR bitwise; torch's recursive built-ins measured."""
    import warnings
    table = json.load(open(path))
    worst = (0.0, "")
    for s in table:
        kind, warmup = s["kind"], s["warmup_steps"]
        stable, decay, min_ratio = s.get("stable_steps", 0), s.get("decay_steps", 1), s.get("min_lr_ratio", 0.0)
        base = float.fromhex(s["base_lr"])
        mine = [float.fromhex(x) for x in s["lrs"]]
        theirs = lambda_lr_sequence(base, schedule_lambda(kind, warmup, stable, decay, min_ratio), len(mine))
        bad = [t for t in range(len(mine)) if mine[t].hex() != theirs[t].hex()]
        name = f"{kind} (warm-up {warmup}, stable {stable}, decay {decay}, min ratio {min_ratio:g}) at lr {base:g}"
        tally.check(not bad, f"LambdaLR: {name}, {len(mine)} steps",
                    "every lr bitwise equal" if not bad else f"first difference at t = {bad[0]}: "
                    f"{mine[bad[0]].hex()} vs {theirs[bad[0]].hex()}")
        if kind not in ("warmup-cosine", "warmup-linear") or warmup == 1:
            continue
        # The recursive built-ins: LinearLR for the warm-up, then CosineAnnealingLR or LinearLR over
        # the decay, compared up to the decay's end (CosineAnnealingLR rises again after T_max).
        def make(opt):
            if kind == "warmup-cosine":
                after = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=decay, eta_min=min_ratio * base)
            else:
                after = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=min_ratio, total_iters=decay)
            if warmup == 0:
                return after
            ramp = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / (warmup + 1), end_factor=warmup / (warmup + 1),
                                                     total_iters=warmup - 1)
            return torch.optim.lr_scheduler.SequentialLR(opt, [ramp, after], milestones=[warmup])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SequentialLR's deprecation notes
            n = min(warmup + decay + 1, len(mine))
            recursive = lambda_lr_sequence(base, None, n, make)
        far = max((ulps(recursive[t], mine[t]), t) for t in range(n))
        if far[0] > worst[0]:
            worst = (far[0], f"{name} at t = {far[1]}")
    tally.check(worst[0] <= SCHEDULE_RECURSIVE_ULP,
                "torch's recursive LinearLR / CosineAnnealingLR (SequentialLR after the warm-up) vs the closed form",
                f"largest difference {worst[0]:.0f} ULP ({worst[1] or 'none'}; bound {SCHEDULE_RECURSIVE_ULP})")


class Job:
    """One PyTorch training: its world size, how gradients are averaged (mode "rank_order":
    all-gathered and summed in rank order; "ddp": stock DDP), and the model's options."""

    def __init__(self, world_size, mode="rank_order", precision="fp32", tied=False, moe=False, accum=None, clip=None,
                 schedule=None, qk=None):
        self.world_size, self.mode, self.precision, self.tied, self.moe = world_size, mode, precision, tied, moe
        self.qk = qk  # None, or QK-clip's tau: after each update q and k rows scaled as MuonClip's rule
        self.accum = accum  # None, or (K, "per-microbatch" | "deferred"): K micro-batches of BATCH / K
        self.clip = clip    # None, or the max norm of torch.nn.utils' clipping
        self.schedule = schedule  # None, or (kind, warm-up, stable, decay, min ratio): LambdaLR

    def tag(self):
        return run_tag(self.precision, self.tied, self.moe, self.accum, self.clip, self.world_size, self.mode, self.schedule,
                       self.qk)


def run_tag(precision, tied, moe, accum, clip, world_size, mode=None, schedule=None, qk=None):
    acc = f"_k{accum[0]}_{accum[1]}" if accum else ""
    acc += f"_qk{qk:g}" if qk else ""
    acc += f"_clip{clip:g}" if clip else ""
    acc += "_" + "_".join(map(str, schedule)) if schedule else ""
    return (f"{mode + '_' if mode else ''}{precision}{'_tied' if tied else ''}{'_moe' if moe else ''}{acc}"
            f"_w{world_size}")


def pool_main(rank, world_size, store_path, out_dir, jobs):
    """One gloo process of a pool that runs every job in turn: a job at W ranks runs on ranks
    0..W-1 over a group of its own (dist.new_group, which every process enters), the others wait.
    Importing torch is most of a small training's time here, so the processes start once."""
    torch.set_num_threads(1)  # as the deterministic mode's one intra-op thread per rank
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    # A file store: no TCP port to pick (a port found free can be taken before the store binds it).
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size)
    for job in jobs:
        group = dist.new_group(ranks=list(range(job.world_size)))
        if rank < job.world_size:
            train_rank(rank, group, job, os.path.join(out_dir, f"torch_{job.tag()}.pt"))
    dist.destroy_process_group()


def train_rank(rank, group, job, out_path):
    """One rank of one job. precision "bf16": forward/backward on bf16 copies of the fp32 masters
    (rank_order only)."""
    world_size, mode, precision, tied, moe = job.world_size, job.mode, job.precision, job.tied, job.moe
    data = corpus_bytes()
    init = init_params(SEED, tied, moe)
    logit_max = {} if job.qk else None  # QK-clip: each block's per-head largest logit of this rank's step
    if moe:  # the functional model on plain leaves (Tiny's modules have no experts)
        params = {n: t.clone().requires_grad_(True) for n, t in init.items()}
        model = lambda tokens, targets: functional_loss(params, tokens, targets, logit_max=logit_max)
    else:
        model = Tiny(functional=True, tied=tied)
        model.load_state_dict(init)
        params = dict(model.named_parameters())
        if job.qk:  # the same functional forward, recording the logits
            model = lambda tokens, targets: functional_loss(params, tokens, targets, logit_max=logit_max)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group) if mode == "ddp" else None
    muon, adamw, slices = make_optimizers(params, tied, moe)
    schedulers = []
    if job.schedule:  # one LambdaLR per optimizer, the same λ (every group's lr = its base × λ)
        lam = schedule_lambda(*job.schedule)
        schedulers = [torch.optim.lr_scheduler.LambdaLR(muon, lam), torch.optim.lr_scheduler.LambdaLR(adamw, lam)]
    losses, grads_per_step, grad_norms, qk_max = [], [], [], []
    K, accum_mode = job.accum or (1, "per-microbatch")
    b = BATCH // K

    def rank_order_sum(g):  # all-gathered, summed in rank order in float32
        parts = [torch.empty_like(g) for _ in range(world_size)]
        dist.all_gather(parts, g.contiguous(), group=group)
        acc = parts[0].clone()
        for r in range(1, world_size):
            acc.add_(parts[r])
        return acc

    for step in range(STEPS):
        # Micro-batch m is rows m b .. (m + 1) b of the step's batch of K b (docs/accumulation.md).
        all_tokens, all_targets = batch(data, SEED, step, rank, K * b, SEQ)
        sums = {}  # per micro-batch: the reduced sums added up; deferred: this rank's gradients added up
        micro_losses = []
        if logit_max is not None:
            logit_max.clear()
        for m in range(K):
            tokens, targets = all_tokens[m * b:(m + 1) * b], all_targets[m * b:(m + 1) * b]
            for p in params.values():
                p.grad = None
            if precision == "bf16":
                copies = {n: p.detach().to(torch.bfloat16).requires_grad_(True) for n, p in params.items()}
                loss = functional_loss(copies, tokens, targets, logit_max=logit_max)
                loss.backward()
                for n, p in params.items():
                    p.grad = copies[n].grad.float()  # the reduce dtype: fp32
            else:
                loss = (ddp or model)(tokens, targets)
                loss.backward()
            micro_losses.append(float(loss.item()))
            if mode != "rank_order":
                continue
            for n, p in params.items():
                add = rank_order_sum(p.grad) if accum_mode == "per-microbatch" else p.grad.float()
                sums[n] = add.clone() if m == 0 else sums[n].add_(add)
        if mode == "rank_order":
            for n, p in params.items():
                total = sums[n] if accum_mode == "per-microbatch" else rank_order_sum(sums[n])
                p.grad = total.div_(world_size * K)
        if job.clip:  # torch.nn.utils.clip_grad_norm_'s two halves, on every rank's identical mean gradients
            plist = list(params.values())
            norm = torch.nn.utils.get_total_norm([p.grad for p in plist], 2.0)
            torch.nn.utils.clip_grads_with_norm_(plist, job.clip, norm)
            grad_norms.append(float(norm.item()))
        loss_value = micro_losses[0]
        for x in micro_losses[1:]:  # the micro-batches' mean, in double, in order
            loss_value += x
        if K > 1:
            loss_value /= K
        grads_per_step.append({n: p.grad.clone() for n, p in params.items()})
        for name, e, view in slices.values():
            view.grad = params[name].grad[e].contiguous()
        if job.qk:  # the statistic: every rank's maxima, non-finite ones made +inf, and a -1 flag, MAX-reduced
            S = torch.stack([logit_max[i] for i in range(len(logit_max))])
            buf = torch.cat([torch.where(torch.isfinite(S), S, math.inf).reshape(-1), torch.tensor([-1.0])])
            dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=group)
            S = buf[:-1].view(S.shape)
            qk_max.append(float(S.max().item()))
        muon.step()
        adamw.step()
        if job.qk:  # MuonClip's rule (pytorch-optimizer 4.1.0 MuonClip.step, alpha 0.5), on q and k of every block
            with torch.no_grad():
                for i in range(S.shape[0]):
                    scales = (job.qk / S[i].clamp_min(job.qk)).pow_(0.5)
                    for which in ("q", "k"):
                        p = params[f"layers.{i}.attn.{which}.weight"]
                        p.mul_(scales.to(p.dtype).repeat_interleave(p.size(0) // scales.numel()).view(-1, 1))
        for s in schedulers:
            s.step()
        local = torch.tensor([loss_value], dtype=torch.float64)
        gathered = [torch.empty_like(local) for _ in range(world_size)]
        dist.all_gather(gathered, local, group=group)
        mean = 0.0
        for g in gathered:  # rank_agreement.cpp's mean_over_ranks: rank order, then / W
            mean += g.item()
        losses.append(mean / world_size)
    # Every rank must end with the same parameters (replicas).
    flat = torch.cat([p.detach().reshape(-1) for p in params.values()])
    copies = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(copies, flat, group=group)
    replicas_equal = all(torch.equal(c.view(torch.int32), flat.view(torch.int32)) for c in copies)
    if rank == 0:
        state = {}
        for opt in (muon, adamw):
            for p, s in opt.state.items():
                if id(p) in slices:  # an expert's slice: stacked below, as mfsdp keeps it
                    name, e, _ = slices[id(p)]
                    for k, v in s.items():
                        state.setdefault(f"{name}|{k}", {})[e] = v.clone()
                    continue
                name = next(n for n, q in params.items() if q is p)
                for k, v in s.items():
                    state[f"{name}|{k}"] = v.clone()
        for k in [k for k, v in state.items() if isinstance(v, dict)]:
            state[k] = torch.stack([state[k][e] for e in sorted(state[k])])
        torch.save({"losses": losses, "params": {n: p.detach().clone() for n, p in params.items()}, "state": state,
                    "grads": grads_per_step, "replicas_equal": replicas_equal, "grad_norms": grad_norms,
                    "qk_max": qk_max}, out_path)


def train_torch(jobs, work, attempts=3):
    """The PyTorch side: every job over one pool of gloo processes, as many as the largest job's
    W. A process that dies (a crash of the gloo processes themselves, seen once in a loaded CI run
    as `terminate called without an active exception`) is retried, said, up to `attempts` times:
    the comparison itself is never retried, and a deterministic failure fails every attempt.
    Returns each job's results by its tag."""
    world_size = max(job.world_size for job in jobs)
    for attempt in range(1, attempts + 1):
        store = os.path.join(work, f"store_pool_{attempt}")
        try:
            mp.spawn(pool_main, args=(world_size, store, work, jobs), nprocs=world_size, join=True)
            return {job.tag(): torch.load(os.path.join(work, f"torch_{job.tag()}.pt")) for job in jobs}
        except mp.ProcessExitedException as e:
            if attempt == attempts:
                raise
            print(f"  note: the PyTorch processes failed ({e}); attempt {attempt + 1} of {attempts}")


# ---- What mfsdp wrote ---------------------------------------------------------------------------

def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"ground_truth: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
    return r.stdout


def train_mfsdp(mfsdp, world_size, work, precision="fp32", tied=False, moe=False, accum=None, clip=None, schedule=None,
                recompute=False, qk=None):
    d = os.path.join(work, "mfsdp_" + run_tag(precision, tied, moe, accum, clip, world_size, None, schedule, qk) +
                     ("_recompute" if recompute else ""))
    os.makedirs(d, exist_ok=True)
    metrics, ck, model = f"{d}/metrics.jsonl", f"{d}/ck", f"{d}/final.safetensors"
    K = accum[0] if accum else 1
    run([mfsdp, "train", "-w", str(world_size), "--launcher", "processes", "--steps", str(STEPS), "--seed", str(SEED),
         "--batch", str(BATCH // K), "--seq", str(SEQ), "--metrics", metrics, "--checkpoint-dir", ck,
         "--checkpoint-every", str(STEPS), "--param-dtype", precision] + (["--tie-embeddings"] if tied else []) +
        (["--experts", str(EXPERTS), "--top-k", str(TOP_K)] if moe else []) +
        (["--grad-accum", str(K), "--grad-reduce", accum[1]] if accum else []) +
        (["--max-norm", repr(clip)] if clip else []) + (schedule_flags(schedule) if schedule else []) +
        (["--activation-checkpointing"] if recompute else []) + (["--qk-clip-tau", repr(qk)] if qk else []))
    run([mfsdp, "export", ck, "--out", model])
    rows = [json.loads(line) for line in open(metrics) if '"step"' in line]
    losses = [r["loss"] for r in rows]
    grad_norms = [r["grad_norm"] for r in rows if "grad_norm" in r]
    lr_factors = [r["lr_factor"] for r in rows if "lr_factor" in r]
    qk_max = [(r["qk_max_logit"], r["qk_clipped_heads"]) for r in rows if "qk_max_logit" in r]
    step_dir = f"{ck}/{open(f'{ck}/latest').read().splitlines()[0]}"
    layout = json.load(open(f"{step_dir}/layout.json"))
    pieces = {}  # (param, state) -> [(row_begin, tensor)]
    for rank in layout["ranks"]:
        with safe_open(f"{step_dir}/{rank['file']}", framework="pt") as f:
            for rec in rank["tensors"]:
                if rec["state"]:
                    t = f.get_tensor(rec["tensor"])[: rec["rows"]]
                    pieces.setdefault((rec["param"], rec["state"]), []).append((rec["row_begin"], t))
    state = {}
    for (param, name), parts in pieces.items():
        parts.sort(key=lambda x: x[0])
        state[f"{param}|{name}"] = torch.cat([t for _, t in parts]) if parts[0][1].dim() > 0 else parts[0][1]
    steps = {}  # AdamW's step counter, recorded per optimizer
    for rank in layout["ranks"]:
        for o in rank.get("optimizers", []):
            if "step" in o.get("scalars", {}):
                steps[o["param"]] = o["scalars"]["step"]
    return {"losses": losses, "params": load_file(model), "state": state, "steps": steps, "grad_norms": grad_norms,
            "lr_factors": lr_factors, "qk_max": qk_max}


# ---- Comparison ---------------------------------------------------------------------------------

class Tally:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what, detail=""):
        print(f"  {'ok  ' if ok else 'FAIL'} {what}{(': ' + detail) if detail else ''}")
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def bits_equal(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    view = {torch.float32: torch.int32, torch.float64: torch.int64}.get(a.dtype)
    return torch.equal(a.view(view), b.view(view)) if view else torch.equal(a, b)


def max_diff(a, b):
    return (a.double() - b.double()).abs().max().item() if a.shape == b.shape else float("inf")


def compare_dicts(tally, what, mine, theirs):
    names = sorted(set(mine) | set(theirs))
    missing = [n for n in names if n not in mine or n not in theirs]
    bad = [n for n in names if n in mine and n in theirs and not bits_equal(mine[n], theirs[n])]
    detail = f"{len(names) - len(missing) - len(bad)} of {len(names)} bitwise equal"
    if missing:
        detail += f"; missing on one side: {missing[:4]}"
    if bad:
        detail += f"; first difference in {bad[0]} (max |diff| {max_diff(mine[bad[0]], theirs[bad[0]]):.3g})"
    tally.check(not missing and not bad, what, detail)


def relative_error(a, b):
    return (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)


def check_idiomatic(tally, params, label, data):
    tokens, targets = batch(data, SEED, 0, 0, BATCH, SEQ)
    functional, idiomatic = Tiny(functional=True), Tiny()
    functional.load_state_dict(params)
    idiomatic.load_state_dict(params)
    lf, li = functional(tokens, targets), idiomatic(tokens, targets)
    lf.backward()
    li.backward()
    loss_err = abs(li.item() - lf.item()) / abs(lf.item())
    gf, gi = dict(functional.named_parameters()), dict(idiomatic.named_parameters())
    worst = max(((relative_error(gi[n].grad, gf[n].grad), n) for n in gf), key=lambda x: x[0])
    tally.check(loss_err <= IDIOMATIC_LOSS_RTOL, f"idiomatic torch.nn model on the {label} weights: loss",
                f"relative difference {loss_err:.3g} (bound {IDIOMATIC_LOSS_RTOL:g})")
    tally.check(worst[0] <= IDIOMATIC_GRAD_RTOL, f"idiomatic torch.nn model on the {label} weights: gradients",
                f"largest max|diff|/max|grad| {worst[0]:.3g} in {worst[1]} (bound {IDIOMATIC_GRAD_RTOL:g})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mfsdp", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--world-sizes", default="1,2,3")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--tied", default="fp32:2,fp32:3,bf16:2",
                    help="tied-embedding runs as precision:W (the head reuses embed.weight)")
    ap.add_argument("--moe", default="fp32:3,bf16:2",
                    help=f"mixture-of-experts runs as precision:W (--experts {EXPERTS} --top-k {TOP_K})")
    ap.add_argument("--accum", default="fp32:3:4:per-microbatch,fp32:2:4:deferred,bf16:3:4:deferred",
                    help=f"gradient-accumulation runs as precision:W:K:order (K micro-batches of {BATCH} / K sequences: "
                         "the tokens of the plain runs)")
    ap.add_argument("--clip", default="fp32:3:0.3,fp32:2:0.5:4:per-microbatch,bf16:3:0.3:2:deferred,fp32:3:0.5:moe",
                    help="clipping runs as precision:W:MAX_NORM[:K:order | :moe] (torch.nn.utils.get_total_norm and "
                         "clip_grads_with_norm_ on the mean gradients, after accumulation)")
    ap.add_argument("--recompute", default="fp32:3,bf16:2",
                    help="activation-checkpointing runs as precision:W (mfsdp recomputes, PyTorch stores: the same values)")
    ap.add_argument("--qk", default="fp32:3:0.1,bf16:2:0.1,fp32:3:0.1:2:per-microbatch",
                    help="QK-clip runs as precision:W:TAU[:K:order] (each head's largest logit over the step's micro-batches, "
                         "MAX-reduced over the gloo group, then MuonClip's rule on q and k after the update)")
    ap.add_argument("--schedule", default="fp32:3:warmup-cosine:1:0:2:0.1,fp32:2:wsd:1:1:1:0.1",
                    help="learning-rate schedule runs as precision:W:KIND:WARMUP:STABLE:DECAY:MIN_RATIO (LambdaLR)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tally = Tally()
    data = corpus_bytes()
    world_sizes = [int(w) for w in args.world_sizes.split(",")]

    print("initial parameters and batches, rebuilt in PyTorch vs the C++ init and sampler:")
    run([args.dump, args.work, str(SEED), str(STEPS), str(max(world_sizes)), str(BATCH), str(SEQ)])
    init = init_params(SEED)
    compare_dicts(tally, "initial parameters (TransformerModel::init)", init, load_file(f"{args.work}/init.safetensors"))
    dumped = load_file(f"{args.work}/batches.safetensors")
    mine = {}
    for s in range(STEPS):
        for r in range(max(world_sizes)):
            mine[f"tokens.s{s}.r{r}"], mine[f"targets.s{s}.r{r}"] = batch(data, SEED, s, r, BATCH, SEQ)
    compare_dicts(tally, "every rank's batch of every step (ByteCorpus::batch)", mine, dumped)
    print("learning-rate schedules, torch.optim.lr_scheduler vs the lrs mfsdp's optimizers step with:")
    check_schedules(tally, f"{args.work}/lr_schedules.json")

    runs = [(p, w, False, False, None, None, None, None) for p in args.precisions.split(",") for w in world_sizes]
    runs += [(t.split(":")[0], int(t.split(":")[1]), True, False, None, None, None, None) for t in args.tied.split(",") if t]
    runs += [(t.split(":")[0], int(t.split(":")[1]), False, True, None, None, None, None) for t in args.moe.split(",") if t]
    for t in filter(None, args.accum.split(",")):
        precision, W, K, order = t.split(":")
        runs.append((precision, int(W), False, False, (int(K), order), None, None, None))
    for t in filter(None, args.clip.split(",")):
        f = t.split(":")
        moe = f[3:] == ["moe"]
        runs.append((f[0], int(f[1]), False, moe, (int(f[3]), f[4]) if len(f) == 5 else None, float(f[2]), None, None))
    for t in filter(None, args.schedule.split(",")):
        f = t.split(":")
        runs.append((f[0], int(f[1]), False, False, None, None, (f[2], int(f[3]), int(f[4]), int(f[5]), float(f[6])), None))
    for t in filter(None, args.qk.split(",")):
        f = t.split(":")
        runs.append((f[0], int(f[1]), False, False, (int(f[3]), f[4]) if len(f) == 5 else None, None, None, float(f[2])))
    jobs = [Job(W, "rank_order", precision, tied, moe, accum, clip, schedule, qk)
            for precision, W, tied, moe, accum, clip, schedule, qk in runs]
    if 3 in world_sizes and "fp32" in args.precisions.split(","):
        jobs.append(Job(3, "ddp"))
    print(f"PyTorch: {len(jobs)} trainings over one pool of {max(j.world_size for j in jobs)} gloo processes")
    trained = train_torch(jobs, args.work)
    for precision, W, tied, moe, accum, clip, schedule, qk in runs:
        flags = (" --tie-embeddings" if tied else "") + (f" --experts {EXPERTS} --top-k {TOP_K}" if moe else "")
        flags += f" --grad-accum {accum[0]} --grad-reduce {accum[1]}" if accum else ""
        flags += f" --max-norm {clip:g}" if clip else ""
        flags += " " + " ".join(schedule_flags(schedule)) if schedule else ""
        flags += f" --qk-clip-tau {qk:g}" if qk else ""
        print(f"W = {W}, {precision}{', tied embeddings' if tied else ''}{', experts' if moe else ''}"
              f"{f', {accum[0]} micro-batches ({accum[1]})' if accum else ''}"
              f"{f', clipped at {clip:g} (get_total_norm, clip_grads_with_norm_)' if clip else ''}"
              f"{f', {schedule[0]} schedule (LambdaLR)' if schedule else ''}"
              f"{f', QK-clip at {qk:g} (MuonClip rule, MAX all-reduce)' if qk else ''}: torch.optim.Muon/AdamW "
              f"over {W} gloo process(es), rank-order mean, vs mfsdp train --param-dtype {precision}{flags}:")
        theirs = trained[Job(W, "rank_order", precision, tied, moe, accum, clip, schedule, qk).tag()]
        got = train_mfsdp(args.mfsdp, W, args.work, precision, tied, moe, accum, clip, schedule, qk=qk)
        tally.check(theirs["replicas_equal"], "the PyTorch replicas agree with each other")
        same_losses = len(got["losses"]) == STEPS and all(
            a.hex() == b.hex() for a, b in zip(map(float, got["losses"]), theirs["losses"]))
        tally.check(same_losses, f"losses of {STEPS} steps",
                    " ".join(float(x).hex() for x in got["losses"]) if same_losses else
                    f"mfsdp {got['losses']} vs torch {theirs['losses']}")
        if clip:
            same_norms = len(got["grad_norms"]) == STEPS and all(
                float(a).hex() == b.hex() for a, b in zip(got["grad_norms"], theirs["grad_norms"]))
            binds = sum(n > clip for n in theirs["grad_norms"])
            tally.check(same_norms and binds > 0, f"gradient norms before clipping of {STEPS} steps ({binds} above {clip:g})",
                        "" if same_norms else f"mfsdp {got['grad_norms']} vs torch {theirs['grad_norms']}")
        if schedule:
            lam = schedule_lambda(*schedule)
            want = [lam(t) for t in range(STEPS)]
            same = len(got["lr_factors"]) == STEPS and all(float(a).hex() == b.hex() for a, b in zip(got["lr_factors"], want))
            tally.check(same and len(set(want)) > 2, f"each step's lambda (--metrics lr_factor), {STEPS} steps",
                        " ".join(f"{x:.4g}" for x in want) if same else f"mfsdp {got['lr_factors']} vs {want}")
        if qk:
            same = len(got["qk_max"]) == STEPS and all(float(a).hex() == b.hex() for (a, _), b in zip(got["qk_max"], theirs["qk_max"]))
            clipped = sum(c for _, c in got["qk_max"])
            tally.check(same and clipped > 0, f"each step's largest attention logit, {STEPS} steps ({clipped} heads clipped)",
                        "" if same else f"mfsdp {got['qk_max']} vs torch {theirs['qk_max']}")
        compare_dicts(tally, "final parameters (mfsdp export)", got["params"], theirs["params"])
        tensors = {k: v for k, v in theirs["state"].items() if not k.endswith("|step")}
        compare_dicts(tally, "final optimizer state (momentum_buffer, exp_avg, exp_avg_sq)", got["state"], tensors)
        torch_steps = {k.split("|")[0]: v.item() for k, v in theirs["state"].items() if k.endswith("|step")}
        tally.check(torch_steps == {k: float(v) for k, v in got["steps"].items()} and len(torch_steps) > 0,
                    "AdamW step counters", f"{len(torch_steps)} tensors at step {STEPS}")
        if precision != "fp32" or tied or moe or accum or clip or schedule or qk:
            continue
        if W == 1:
            check_idiomatic(tally, init, "initial", data)
            check_idiomatic(tally, got["params"], "final", data)
        if W == 3:
            ddp = trained[Job(3, "ddp").tag()]
            exact = theirs["grads"]
            rows = []
            for s in range(STEPS):
                same = sum(bits_equal(ddp["grads"][s][n], exact[s][n]) for n in exact[s])
                worst = max(relative_error(ddp["grads"][s][n], exact[s][n]) for n in exact[s])
                rows.append(f"step {s + 1}: {same}/{len(exact[s])} gradients bitwise equal, largest relative "
                            f"difference {worst:.3g}")
            pdiff = max(max_diff(ddp["params"][n], theirs["params"][n]) for n in theirs["params"])
            print("  report: stock DistributedDataParallel at W = 3 (grad / W, then gloo's ring sum) vs the rank-order "
                  "mean:\n    " + "\n    ".join(rows) +
                  f"\n    after {STEPS} steps: parameters max |diff| {pdiff:.3g}; losses " +
                  " ".join(f"{a - b:+.3g}" for a, b in zip(ddp["losses"], theirs["losses"])))
    for t in filter(None, args.recompute.split(",")):
        precision, W = t.split(":")[0], int(t.split(":")[1])
        theirs = trained.get(Job(W, "rank_order", precision).tag())
        if theirs is None:
            sys.exit(f"ground_truth: --recompute {t} needs the plain {precision} run at W = {W}")
        print(f"W = {W}, {precision}: the same PyTorch training vs mfsdp train --param-dtype {precision} "
              "--activation-checkpointing (each block recomputed in backward):")
        got = train_mfsdp(args.mfsdp, W, args.work, precision, recompute=True)
        same_losses = len(got["losses"]) == STEPS and all(
            a.hex() == b.hex() for a, b in zip(map(float, got["losses"]), theirs["losses"]))
        tally.check(same_losses, f"losses of {STEPS} steps")
        compare_dicts(tally, "final parameters (mfsdp export)", got["params"], theirs["params"])
        tensors = {k: v for k, v in theirs["state"].items() if not k.endswith("|step")}
        compare_dicts(tally, "final optimizer state (momentum_buffer, exp_avg, exp_avg_sq)", got["state"], tensors)
    print(f"{tally.passed} passed, {tally.failed} failed")
    sys.exit(1 if tally.failed else 0)


if __name__ == "__main__":
    main()
