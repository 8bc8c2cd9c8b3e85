"""The reference model, its initialisation and its batch sampler in stock PyTorch, rebuilt from their
C++ definitions (core/train/model.cpp, core/train/data.cpp, core/dist/determinism.cpp), not read from
the C++ side. The one home of what the stock-PyTorch ground truth
(regression/torch_ground_truth/ground_truth.py), the stock peers (peers/) and the conformance kit share.

What is here, op for op as the C++ side computes it:
  - the generators (splitmix64 seeds), init_params (2-D and 3-D tensors N(0, 0.02) drawn in
    spec order from one generator; norms 1) and batch (ByteCorpus::batch);
  - the functional model (functional_loss): RMSNorm normalised in float32, attention with a
    float32 softmax, SwiGLU MLPs or experts, the head and a float32 cross-entropy;
  - Model: the same functions behind torch.nn modules with the C++ parameter names, one module
    per block, so that FSDP2's fully_shard can wrap each block.
The trajectory format is in mfsdp_kit.trajectory.
"""
import json
import math
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

CORPUS = "/usr/share/common-licenses/GPL-3"  # data.h's kDefaultCorpus
RMS_EPS = 1e-6
MUON_LR, ADAMW_LR = 0.02, 3e-3  # training_defaults() (core/plan/optimizer_config.cpp)
ADAMW_WEIGHT_DECAY = 0.01       # torch.optim.AdamW's default, as training_defaults() keeps it
MASK64 = (1 << 64) - 1
EXPERTS, TOP_K = 4, 2  # --experts 4 --top-k 2 (expert width: the dense intermediate)


@dataclass(frozen=True)
class Dims:
    """The model's shape: mfsdp train's --layers, --hidden, --heads, --intermediate (vocabulary 256,
    the byte-level corpus)."""
    vocab: int = 256
    hidden: int = 64
    intermediate: int = 128
    layers: int = 2
    heads: int = 4


TINY = Dims()  # the "tiny" preset (presets.cpp): mfsdp train's defaults


# ---- Generators, initialisation, sampler (from their definitions) ------------------------------

def mix(x):
    """splitmix64, as determinism.cpp's mix()."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def shared_generator(seed):
    g = torch.Generator()
    g.manual_seed(mix(seed))
    return g


def rank_generator(seed, rank):
    g = torch.Generator()
    g.manual_seed(mix((mix(seed) + rank + 1) & MASK64))
    return g


def param_specs(tied=False, moe=False, dims=TINY):
    """(name, shape, is_matrix) in transformer_spec's order: the order init draws in. Tied
    (--tie-embeddings): no head.weight; the head reuses embed.weight. MoE: each block's MLP is a
    router (AdamW) and three 3-D expert tensors (a matrix optimizer per slice)."""
    V, H, I = dims.vocab, dims.hidden, dims.intermediate
    out = [("embed.weight", (V, H), False)]
    for i in range(dims.layers):
        p = f"layers.{i}."
        out += [(p + "attn_norm.weight", (H,), False),
                (p + "attn.q.weight", (H, H), True),
                (p + "attn.k.weight", (H, H), True),
                (p + "attn.v.weight", (H, H), True),
                (p + "attn.o.weight", (H, H), True),
                (p + "mlp_norm.weight", (H,), False)]
        if moe:
            out += [(p + "moe.router.weight", (EXPERTS, H), False),
                    (p + "moe.experts.gate", (EXPERTS, I, H), True),
                    (p + "moe.experts.up", (EXPERTS, I, H), True),
                    (p + "moe.experts.down", (EXPERTS, H, I), True)]
        else:
            out += [(p + "mlp.gate.weight", (I, H), True),
                    (p + "mlp.up.weight", (I, H), True),
                    (p + "mlp.down.weight", (H, I), True)]
    out += [("norm.weight", (H,), False)] + ([] if tied else [("head.weight", (V, H), False)])
    return out


def init_params(seed, tied=False, moe=False, dims=TINY):
    """TransformerModel::init: 2-D and 3-D tensors N(0, 0.02) drawn in spec order from one generator; norms 1."""
    g = shared_generator(seed)
    params = {}
    for name, shape, _ in param_specs(tied, moe, dims):
        if len(shape) == 1:
            params[name] = torch.ones(shape) if "norm" in name else torch.zeros(shape)
        else:
            params[name] = torch.empty(shape, dtype=torch.float32).normal_(0.0, 0.02, generator=g)
    return params


def corpus_bytes(path=CORPUS):
    return open(path, "rb").read()


def batch(data, seed, step, rank, B, S):
    """ByteCorpus::batch: B windows of S + 1 bytes at offsets drawn per (seed, step, rank)."""
    g = rank_generator((seed * 1000003 + step) & MASK64, rank)
    starts = torch.randint(len(data) - S, (B,), generator=g, dtype=torch.long).tolist()
    tokens = torch.tensor([[data[s + i] for i in range(S)] for s in starts], dtype=torch.long)
    targets = torch.tensor([[data[s + i + 1] for i in range(S)] for s in starts], dtype=torch.long)
    return tokens, targets


# ---- The model: model.cpp's ops, in its order -----------------------------------------------------

def rms_norm(x, w):
    # Normalised in float32, cast back, then times the weight (a no-op cast in float32).
    xf = x.float()
    return (xf * (xf.pow(2).mean(-1, keepdim=True) + RMS_EPS).rsqrt()).to(x.dtype) * w


def attention_residual(x, attn_norm, q_w, k_w, v_w, o_w, heads, record=None):
    """x + attention(rms_norm(x)): causal, scaled by 1/sqrt(d) after the product, float32 softmax.
    `record`, when given, receives each head's largest logit over the unmasked pairs (float32 [heads]),
    QK-clip's statistic (docs/qk_clip.md)."""
    B, S, H = x.shape
    hd = H // heads
    h = rms_norm(x, attn_norm)
    q = F.linear(h, q_w).view(B, S, heads, hd).transpose(1, 2)
    k = F.linear(h, k_w).view(B, S, heads, hd).transpose(1, 2)
    v = F.linear(h, v_w).view(B, S, heads, hd).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    future = torch.triu(torch.ones(S, S, dtype=torch.bool, device=x.device), 1)
    scores = scores.masked_fill(future, -math.inf)
    if record is not None:
        record(scores.detach().amax(dim=(0, 2, 3)).float())
    attn = torch.matmul(torch.softmax(scores.float(), -1).to(v.dtype), v).transpose(1, 2).reshape(B, S, H)
    return x + F.linear(attn, o_w)


def swiglu(h, gate, up, down):
    return F.linear(F.silu(F.linear(h, gate)) * F.linear(h, up), down)


def head_loss(x, norm, head, targets):
    logits = F.linear(rms_norm(x, norm), head)
    return F.cross_entropy(logits.reshape(-1, head.shape[0]).to(torch.float32), targets.reshape(-1))


def experts(p, pre, h):
    """model.cpp's TransformerModel::experts, op for op: float32 router softmax; the top-k of a stable
    descending sort (ties to the lower expert), renormalised; the (token, slot) pairs stably sorted by
    expert, each expert's SwiGLU on its contiguous block; gathered back by the inverse permutation,
    weighted and summed over the slots."""
    B, S, H = h.shape
    T = B * S
    x = h.reshape(T, H)
    probs = torch.softmax(F.linear(x, p[pre + "moe.router.weight"]).float(), -1)
    ranked, by_score = torch.sort(probs, dim=-1, descending=True, stable=True)
    weights = ranked[:, :TOP_K]
    weights = (weights / weights.sum(-1, keepdim=True)).to(h.dtype)
    chosen = by_score[:, :TOP_K].reshape(-1)
    order = torch.sort(chosen, dim=0, descending=False, stable=True).indices
    counts = torch.bincount(chosen, minlength=EXPERTS).tolist()
    tokens = x.unsqueeze(1).expand(T, TOP_K, H).reshape(T * TOP_K, H).index_select(0, order)
    gate, up, down = (p[pre + "moe.experts." + n] for n in ("gate", "up", "down"))
    outputs, begin = [], 0
    for e in range(EXPERTS):
        if counts[e] == 0:
            continue
        t = tokens.narrow(0, begin, counts[e])
        outputs.append(swiglu(t, gate.select(0, e), up.select(0, e), down.select(0, e)))
        begin += counts[e]
    inverse = torch.argsort(order, stable=True)
    out = (torch.cat(outputs).index_select(0, inverse).view(T, TOP_K, H) * weights.unsqueeze(-1)).sum(1)
    return out.view(B, S, H)


def functional_loss(p, tokens, targets, heads=TINY.heads, logit_max=None):
    """The whole model on a dict of parameters by name (any dtype; the loss in float32). `logit_max`, a
    dict, is raised per block index to each head's largest attention logit (torch.maximum with what
    is there: over micro-batches)."""
    x = F.embedding(tokens, p["embed.weight"])
    layers = 1 + max(int(n.split(".")[1]) for n in p if n.startswith("layers."))
    for i in range(layers):
        pre = f"layers.{i}."
        record = None
        if logit_max is not None:
            record = lambda s, i=i: logit_max.__setitem__(i, torch.maximum(logit_max[i], s) if i in logit_max else s)
        y = attention_residual(x, p[pre + "attn_norm.weight"], p[pre + "attn.q.weight"], p[pre + "attn.k.weight"],
                               p[pre + "attn.v.weight"], p[pre + "attn.o.weight"], heads, record)
        h = rms_norm(y, p[pre + "mlp_norm.weight"])
        if pre + "moe.router.weight" in p:
            x = y + experts(p, pre, h)
            continue
        x = y + swiglu(h, p[pre + "mlp.gate.weight"], p[pre + "mlp.up.weight"], p[pre + "mlp.down.weight"])
    # Tied: the one embed.weight again (autograd sums both uses' gradients into its .grad).
    return head_loss(x, p["norm.weight"], p["head.weight"] if "head.weight" in p else p["embed.weight"], targets)


class Weight(nn.Module):
    """One parameter, named `weight` (so a module path reads as the C++ parameter name)."""

    def __init__(self, *shape):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(shape))


class _Attention(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.q, self.k, self.v, self.o = (Weight(H, H) for _ in range(4))


class _Mlp(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate, self.up, self.down = Weight(I, H), Weight(I, H), Weight(H, I)


class Block(nn.Module):
    """One transformer block (dense SwiGLU): what FSDP2 wraps with fully_shard, one per block."""

    def __init__(self, dims):
        super().__init__()
        self.heads = dims.heads
        self.attn_norm, self.attn = Weight(dims.hidden), _Attention(dims.hidden)
        self.mlp_norm, self.mlp = Weight(dims.hidden), _Mlp(dims.hidden, dims.intermediate)

    def forward(self, x):
        a = self.attn
        y = attention_residual(x, self.attn_norm.weight, a.q.weight, a.k.weight, a.v.weight, a.o.weight, self.heads)
        m = self.mlp
        return y + swiglu(rms_norm(y, self.mlp_norm.weight), m.gate.weight, m.up.weight, m.down.weight)


class Model(nn.Module):
    """The dense untied model behind modules, with the C++ parameter names (embed.weight,
    layers.i.attn.q.weight, ..., head.weight); forward returns the loss, op for op as
    functional_loss computes it."""

    def __init__(self, dims=TINY):
        super().__init__()
        self.embed = Weight(dims.vocab, dims.hidden)
        self.layers = nn.ModuleList(Block(dims) for _ in range(dims.layers))
        self.norm = Weight(dims.hidden)
        self.head = Weight(dims.vocab, dims.hidden)

    def forward(self, tokens, targets):
        x = F.embedding(tokens, self.embed.weight)
        for block in self.layers:
            x = block(x)
        return head_loss(x, self.norm.weight, self.head.weight, targets)
