"""Runs an external implementation of Shampoo and SOAP -- pytorch-optimizer 4.1.0 (PyPI
`pytorch-optimizer`, import `pytorch_optimizer`): its `Shampoo`, `ScalableShampoo` and `SOAP` -- on
the tensors matrix_optim_parity_dump wrote and compares the final parameters and optimizer state
with ours (core/optim/optim.cpp).
Usage: python check_matrix_optim.py DIR   (exit 1 when a claim below fails, 2 on a wrong setup)

Every case is run twice:
  as_shipped  the external optimizer exactly as installed, with the dump's hyperparameters mapped
              onto its arguments;
  aligned     the same, with each difference marked [aligned] below neutralised, and nothing else
              changed: its root function, one spelling of one of its ops, or one of its arguments
              replaced by what we compute.
Each (case, run) has a claim: "bitwise" (parameters and every compared state tensor bit for bit) or
"within T" (T bounds max|p_ours - p_theirs| / max|p_ours - p0|, the error relative to the total
update); the script exits 1 when one fails. The cases' hyperparameters (dump_matrix_optim.cpp) are
chosen so that the two implementations have the same semantics; the differences that remain are
listed here. Line numbers are those of pytorch_optimizer 4.1.0 (site-packages/pytorch_optimizer/).

Shampoo vs pytorch_optimizer.Shampoo (optimizer/shampoo.py, class Shampoo) -- basic Shampoo: no
grafting, no bias correction, running sums (ours: beta2 = 1), roots recomputed every
`preconditioning_compute_steps` steps:
 S1 [avoided] momentum: theirs blends the gradient with the previous *preconditioned* update
    (step(), l.115-116 and l.152); ours preconditions the bias-corrected EMA of raw gradients.
    The cases use momentum = 0 / beta1 = 0, where both precondition the raw gradient.
 S2 [avoided] before the first root computation theirs applies a zero update (inv_pre_cond starts
    at zero, init_group() l.90, and is computed only when step % preconditioning_compute_steps == 0,
    l.142); ours takes grafted/plain steps before start_preconditioning_step and computes the roots
    at its first preconditioned step. The Shampoo cases compute roots at every step from step 1.
 S3 [aligned] epsilon placement: theirs starts the statistics at matrix_eps * I in float32
    (init_group() l.87-88) and accumulates G G^T onto it (l.134); ours accumulates G G^T from zero
    and adds epsilon * I in float64 at root time (matrix_inverse_root). Aligned: matrix_eps = 0, and
    epsilon handed to the root function (S4).
 S4 [aligned] inverse root: theirs compute_power_svd() (optimizer/utils/matrix.py l.268-282):
    float32 SVD, s^(-1/p), (u * s) @ vh in float32; ours matrix_inverse_root(): float64 symmetric
    eigendecomposition of (A + A^T)/2 + eps I, eigenvalues clamped at eps, V diag V^T in float64,
    rounded to float32. Aligned: compute_power_svd replaced by ours, op for op.
 Everything else is theirs and must match bit for bit: decoupled weight decay p *= 1 - lr*wd
 before the update, the addmm_ statistics, L^(-1/4) G R^(-1/4) (l.145-150), p -= lr * update.

Shampoo vs pytorch_optimizer.ScalableShampoo (optimizer/shampoo.py l.159ff, with
optimizer/utils/preconditioner.py, partition.py, graft.py), use_svd=True, shape_interpretation=False,
nesterov=False, decoupled weight decay and learning rate, statistics every step, and
start_preconditioning_step = preconditioning_compute_steps = our start_preconditioning_step =
our precondition_frequency:
 S1 [avoided] as above: theirs keeps momentum of preconditioned (and grafted) updates
    (step() l.366-373). Cases: beta1 = 0.
 S5 [avoided] beta2 must be < 1 there (validate_betas, base/optimizer.py l.675): no running sums.
    The EMA spellings differ: theirs stat.mul_(b2).add_(G G^T, alpha=1-b2) (preconditioner.py
    l.128), or baddbmm_(beta=b2, alpha=1-b2) when all factors have one shape (l.121); ours
    mul_(b2).addmm_(alpha=1-b2). They round alike when 1 - b2 is a power of two (the scaled
    product is then exact): the cases use b2 = 1 - 2^-4. Even then MKL rounds a fused addmm_ and
    mm + add_ differently for 8 x 8 outputs (not for 12 and up): no block side is below 16.
 S11 [aligned] factor statistics when every factor has one shape: theirs one baddbmm_ over the
    stacked unfoldings (preconditioner.py l.113-121; the axis-1 unfolding a contiguous copy of G^T);
    ours, per factor, mul_(b2) and addmm_ on G and its transposed view. MKL's batched kernel rounds
    differently from its GEMM on some CPUs (1 ulp for 32 x 32 on a Xeon with AVX-512 and AMX, none
    on the AVX2 EPYC): aligned, the baddbmm_ runs as our ops (OurFactorStatistics).
 S3 [aligned] as above; and with b2 < 1 theirs lets the initial eps*I decay as b2^t (it is part of
    the EMA, preconditioner.py l.74-76 and l.128), while ours adds the full epsilon at every root.
 S4 [aligned] as above: compute_pre_conditioners() (preconditioner.py l.130-147) calls
    compute_power_svd (batched when all factors have one shape; ours then runs per matrix).
 S6 [aligned] preconditioning spelling: precondition_block() (preconditioner.py l.150-172)
    contracts G's first axis with the left root's first axis (tensordot, l.169), i.e. computes
    ((G^T L)^T) R = L^T G R; ours mm(mm(L, G), R). Equal for an exactly symmetric L, but our
    float64 root rounded to float32 is symmetric only to an ulp. Aligned: precondition_block
    replaced by mm(mm(L, G), R).
 S7 [avoided] start_preconditioning_step < preconditioning_compute_steps: theirs preconditions with
    identity roots (pre_conditioners start as eye, l.77) until the first computation; ours computes
    the roots at the first preconditioned step. Cases: start = frequency.
 S8 [avoided] grafting: theirs offers SGD/AdaGrad/RMSProp/sqrt-n grafting, layer-wise (norms over
    the whole tensor, step() l.340-344, dividing by shampoo_norm + 1e-16), the RMSProp EMA using
    the statistics' beta2 (graft.py l.91-97); ours Adam grafting per block with its own beta2,
    skipping the rescale when the Shampoo norm is 0. Ours with beta1 = 0, no bias correction and
    grafting_beta2 = beta2 is their RMSProp grafting: the graft cases use that on one block (the
    norm ratio is formed in float64 by us, in float32 by them: a quotient of two floats rounded to
    float32 either way, double rounding being innocuous for division), the blocked case none.
 S9 [avoided] shape_interpretation (merge_small_dims, preconditioner.py l.50-52) would merge a
    32 x 32 matrix into one 1024-vector; off (ours never merges).
 S10 [avoided] use_svd=False (their default) computes roots by coupled Schur-Newton iteration
    (matrix.py compute_power_schur_newton), an iterative approximation; use_svd=True is used.
 Same in both: BlockPartitioner (partition.py) cuts each side into block_size pieces, the last one
 shorter, blocks in row-major order, as our max_preconditioner_dim; steps before the start are
 the (grafted) raw gradient; roots at step % frequency == 0; decoupled weight decay.

SOAP vs pytorch_optimizer.SOAP (optimizer/soap.py):
 P1 [avoided at beta1 = 0, else tolerance] first moment: theirs keeps m as the EMA of the *raw*
    gradient (step() l.332, exp_avg.lerp_(grad)) and projects it into the current basis at every
    step (l.337-339); ours (as the SOAP paper's reference code, Vyas et al. 2024) keeps m in the rotated basis (b1 m + (1-b1)
    Q_L^T G Q_R) and carries it into the new basis at each refresh. Mathematically the same (the
    bases are orthogonal); rounding differs. With beta1 = 0 m is the projected gradient in both.
 P2 [aligned] second-moment EMA spelling: theirs exp_avg_sq.lerp_(g'^2, 1 - b2) (l.333) = v +
    (1-b2)(g'^2 - v); ours v.mul_(b2).add_(g'^2, alpha=1-b2). Aligned: that one lerp_ (on
    exp_avg_sq only) is executed as mul_/add_ through a TorchFunctionMode.
 P3 [avoided at lr*wd = 2^-k, else tolerance] weight decay after the update: theirs
    p.mul_(1 - lr*wd) (apply_weight_decay, base/optimizer.py l.207); ours p.add_(p, alpha=-lr*wd).
    Both round the same real number once when lr*wd is a power of two (the beta1 = 0 cases:
    lr = 2^-9, wd = 2^-3).
 P4 [avoided at lr = 2^-k, else tolerance] step size association: theirs lr * (sqrt(bc2) / bc1)
    (l.309-314), ours (lr * sqrt(bc2)) / bc1, in float64: equal when lr is a power of two.
 P5 [none here] eigenvalue estimate for the ordering: theirs sum(Q * (GG Q), dim 0)
    (get_orthogonal_matrix_qr() l.198-199), ours diag(Q^T GG Q) (as the SOAP paper's reference code). Only the
    resulting order is used; it differs only if two estimates are within rounding of each other.
 P6 [none here] argsort: theirs unstable (l.200), ours stable: differ only on exact ties.
 P7 [none here] products: theirs tensordot (project() l.149-153 computes (G^T Q_L)^T Q_R) and GG Q
    before selecting columns (l.198, l.203); ours mm(Q_L^T, G) Q_R and mm(GG, Q[:, order]). MKL
    returns the same bits for these shapes (the bitwise claims check it; it did not for 8 x 16).
 Same in both: the first call builds GG (lerp from zero) and Q (float32 eigh of GG + 1e-30 I,
 columns reversed) without an update; t counts updates; after the GG update, refresh when
 t % frequency == 0: v permuted along each rotated side, one power iteration + QR; a side longer
 than max_precond_dim stays unrotated; step size lr*sqrt(1-b2^t)/(1-b1^t); v + eps in the divisor.

Measured (MKL, AVX-512, one thread; "rel" = max|p_ours - p_theirs| / max|p_ours - p0|), the dump's
cases and, in brackets, the worst over 16 other input seeds (run with an op-for-op Python
transcription of our C++ standing in for the dumper):
  every "aligned" run of shampoo_sum, scalable_*, soap_beta1_0: bitwise (also for all 16 seeds).
  shampoo_sum as_shipped: rel <= 1.9e-4 [3.8e-4]. The roots are taken from step 1, while a factor
    is still singular or nearly so (the 48-side factor of a 16 x 48 gradient has rank 16, 32, 48
    after steps 1-3; kappa(R + eps I) = 1.7e8 at step 3): float32 SVD's eigenvalue error ~u*lmax
    (u = 6e-8) is then comparable to the smallest eigenvalues and to eps. Claim 2e-3.
  scalable_* as_shipped: rel <= 1.6e-6 [3.1e-6]; the first root is at step 4, when the factors are
    well conditioned (kappa <~ 2e2); the error is float32 SVD's ~u*kappa. Claim 5e-5.
  soap_beta1_0 as_shipped (P2 only): rel <= 7.3e-6 [7.8e-6], <= 1 ulp of max|p|. Claim 1e-4.
  soap_default (P1, P3, P4 rounding; P2 aligned or not): rel <= 2.6e-5 [4.0e-5], <= 7 ulp of
    max|p| after 7 updates (each update can flip the parameter's last bit). Claim 2e-4.
"""
import importlib.metadata
import json
import sys

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

EXTERNAL_PACKAGE, EXTERNAL_VERSION = "pytorch-optimizer", "4.1.0"


def setup_error(message):
    print(f"check_matrix_optim: {message}", file=sys.stderr)
    sys.exit(2)


try:
    have = importlib.metadata.version(EXTERNAL_PACKAGE)
except importlib.metadata.PackageNotFoundError:
    setup_error(f"{EXTERNAL_PACKAGE} is not installed; pip install {EXTERNAL_PACKAGE}=={EXTERNAL_VERSION}")
if have != EXTERNAL_VERSION:
    setup_error(f"needs {EXTERNAL_PACKAGE}=={EXTERNAL_VERSION} (the differences named here are that version's), "
                f"found {have}")

import pytorch_optimizer.optimizer.shampoo as po_shampoo  # noqa: E402
import pytorch_optimizer.optimizer.utils.preconditioner as po_preconditioner  # noqa: E402
from pytorch_optimizer import SOAP, ScalableShampoo, Shampoo  # noqa: E402
from pytorch_optimizer.optimizer.utils.graft import LayerWiseGrafting  # noqa: E402

torch.set_num_threads(1)  # as the dumper: the same BLAS code paths

# (case name, run) -> "bitwise" or the bound on the update-relative parameter error.
CLAIMS = {
    ("shampoo_sum", "aligned"): "bitwise",
    ("shampoo_sum", "as_shipped"): 2e-3,
    ("scalable_graft", "aligned"): "bitwise",
    ("scalable_graft", "as_shipped"): 5e-5,
    ("scalable_blocked", "aligned"): "bitwise",
    ("scalable_blocked", "as_shipped"): 5e-5,
    ("soap_beta1_0", "aligned"): "bitwise",
    ("soap_beta1_0", "as_shipped"): 1e-4,
    ("soap_default", "aligned"): 2e-4,
    ("soap_default", "as_shipped"): 2e-4,
}


# ---- what we compute, for the [aligned] items ------------------------------------------------

def our_inverse_root(a, root, epsilon):
    """matrix_inverse_root (core/optim/optim.cpp), op for op; batched over leading dims."""
    if a.dim() > 2:
        return torch.stack([our_inverse_root(x, root, epsilon) for x in a])
    a64 = a.to(torch.float64)
    a64 = (a64 + a64.t()) * 0.5
    a64 = a64 + torch.eye(a.size(0), dtype=torch.float64) * epsilon
    values, vectors = torch.linalg.eigh(a64)
    scale = values.clamp_min(epsilon).pow(-1.0 / root)
    return torch.mm(vectors * scale.unsqueeze(0), vectors.t()).to(a.dtype)


def our_precondition_block(partitioned_grad, should_preconditioned_dims, pre_conditioners_for_grad):
    """S6: L G R as we spell it (2-D blocks, both sides preconditioned)."""
    assert partitioned_grad.dim() == 2 and list(should_preconditioned_dims) == [True, True]
    return torch.mm(torch.mm(pre_conditioners_for_grad[0], partitioned_grad), pre_conditioners_for_grad[1])


class OurSecondMomentEma(TorchFunctionMode):
    """P2: SOAP's exp_avg_sq.lerp_(x, w) executed as exp_avg_sq.mul_(1 - w).add_(x, alpha=w)."""

    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.lerp_ and any(args[0] is s.get("exp_avg_sq") for s in self.opt.state.values()):
            end = args[1]
            weight = args[2] if len(args) > 2 else kwargs["weight"]
            return args[0].mul_(1.0 - weight).add_(end, alpha=weight)
        return func(*args, **kwargs)


class OurFactorStatistics(TorchFunctionMode):
    """S11: ScalableShampoo's one baddbmm_ over the stacked factors (all of one shape) executed as
    ours: per block, L.mul_(b2).addmm_(G, G^T, alpha=w2) and R.mul_(b2).addmm_(G^T, G, alpha=w2)
    with G contiguous and G^T its transposed view, in that order (the stack alternates each block's
    axis-0 and axis-1 unfoldings)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.baddbmm_:
            stats, left, right = args[0], args[1], args[2]
            beta, alpha = kwargs.get("beta", 1.0), kwargs.get("alpha", 1.0)
            assert stats.shape[0] % 2 == 0, "S11: expected an axis-0 and an axis-1 unfolding per block"
            for i in range(stats.shape[0]):
                g = left[i].contiguous() if i % 2 == 0 else right[i].contiguous()  # the block G itself
                a, b = (g, g.mT) if i % 2 == 0 else (g.mT, g)
                stats[i].mul_(beta).addmm_(a, b, beta=1.0, alpha=alpha)
            return stats
        return func(*args, **kwargs)


class Patched:
    """Sets module attributes for the duration of a run."""

    def __init__(self, patches):
        self.patches = patches

    def __enter__(self):
        self.saved = [(obj, name, vars(obj)[name]) for obj, name, _ in self.patches]  # raw: keeps staticmethod
        for obj, name, value in self.patches:
            setattr(obj, name, value)

    def __exit__(self, *exc):
        for obj, name, value in self.saved:
            setattr(obj, name, value)


# ---- the external runs ---------------------------------------------------------------------------

def run_external(c, load, run):
    o = c["options"]
    aligned = run == "aligned"
    p = torch.nn.Parameter(load("p0").clone())
    patches, mode = [], None
    if c["external"] in ("Shampoo", "ScalableShampoo"):
        assert o["beta1"] == 0, "S1: the external Shampoo's momentum differs; cases use beta1 = 0"
        matrix_eps = 0.0 if aligned else o["epsilon"]  # S3
        if aligned:
            root = lambda matrix, power: our_inverse_root(matrix, power, o["epsilon"])  # S4
            patches += [(po_shampoo, "compute_power_svd", root), (po_preconditioner, "compute_power_svd", root)]
    if c["external"] == "Shampoo":
        assert o["beta2"] == 1 and o["precondition_frequency"] == 1 and o["start_preconditioning_step"] == 1
        assert not o["adam_grafting"]
        opt = Shampoo([p], lr=o["lr"], momentum=0.0, weight_decay=o["weight_decay"], weight_decouple=True,
                      preconditioning_compute_steps=1, matrix_eps=matrix_eps)
    elif c["external"] == "ScalableShampoo":
        assert o["start_preconditioning_step"] == o["precondition_frequency"]  # S7
        graft = LayerWiseGrafting.NONE
        if o["adam_grafting"]:  # S8: Adam grafting with beta1 = 0, no bias correction = RMSProp grafting
            assert not o["use_bias_correction"] and o["grafting_beta2"] == o["beta2"]
            assert all(d <= o["max_preconditioner_dim"] for d in c["shape"]), "S8: grafting per block vs layer-wise"
            graft = LayerWiseGrafting.RMSPROP
        opt = ScalableShampoo([p], lr=o["lr"], betas=(0.0, o["beta2"]), moving_average_for_momentum=False,
                              weight_decay=o["weight_decay"], decoupled_weight_decay=True,
                              decoupled_learning_rate=True, start_preconditioning_step=o["start_preconditioning_step"],
                              preconditioning_compute_steps=o["precondition_frequency"], statistics_compute_steps=1,
                              block_size=o["max_preconditioner_dim"], shape_interpretation=False, graft_type=graft,
                              nesterov=False, diagonal_eps=o["grafting_epsilon"], matrix_eps=matrix_eps, use_svd=True)
        if aligned:
            patches.append((po_preconditioner.PreConditioner, "precondition_block", staticmethod(our_precondition_block)))
            mode = OurFactorStatistics()
    else:
        shampoo_beta = None if o["shampoo_beta"] < 0 else o["shampoo_beta"]
        opt = SOAP([p], lr=o["lr"], betas=(o["beta1"], o["beta2"]), shampoo_beta=shampoo_beta,
                   weight_decay=o["weight_decay"], precondition_frequency=o["precondition_frequency"],
                   max_precondition_dim=o["max_precond_dim"], correct_bias=o["correct_bias"], eps=o["eps"])
        if aligned:
            mode = OurSecondMomentEma(opt)
    with Patched(patches):
        for s in range(c["steps"]):
            p.grad = load(f"g{s}").clone()
            if mode is None:
                opt.step()
            else:
                with mode:
                    opt.step()
    return p.detach(), external_state(c, opt, opt.state[p])


def external_state(c, opt, st):
    """Their state under our names (only what has a counterpart)."""
    out = {}
    if c["external"] == "Shampoo":
        for i, side in enumerate(("left", "right")):
            out[f"block_0.factor_{side}"] = st[f"pre_cond_{i}"]
            out[f"block_0.inv_root_{side}"] = st[f"inv_pre_cond_{i}"]
    elif c["external"] == "ScalableShampoo":
        pc = st["pre_conditioner"]
        for k in range(len(pc.statistics) // 2):
            for i, side in enumerate(("left", "right")):
                out[f"block_{k}.factor_{side}"] = pc.statistics[2 * k + i]
                out[f"block_{k}.inv_root_{side}"] = pc.pre_conditioners[2 * k + i]
        if c["options"]["adam_grafting"]:
            out["block_0.grafting_exp_avg_sq"] = st["graft"].statistics
    else:
        out["exp_avg_sq"] = st["exp_avg_sq"]
        for i, side in enumerate(("left", "right")):
            if len(st["GG"][i]) > 0:
                out[f"GG_{side}"] = st["GG"][i]
                out[f"Q_{side}"] = st["Q"][i]
        # P1: theirs holds m in the original basis; ours in the current eigenbasis.
        out["exp_avg"] = opt.project(st["exp_avg"], st, max_precondition_dim=c["options"]["max_precond_dim"])
    return out


def bits_equal(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def main():
    d = sys.argv[1]
    cases = json.load(open(f"{d}/manifest.json"))
    failed = 0
    for c in cases:
        def load(name, shape=tuple(c["shape"])):
            return torch.from_numpy(np.fromfile(f"{d}/case{c['id']}_{name}.bin", dtype=np.float32).reshape(shape))

        p0, mine = load("p0"), load("final")
        update = (mine - p0).abs().max().item()
        for run in ("aligned", "as_shipped"):
            claim = CLAIMS[(c["name"], run)]
            theirs, their_state = run_external(c, load, run)
            same = bits_equal(theirs, mine)
            worst_state, state_same = ("", 0.0), True
            for name, t in their_state.items():
                ours = load(f"state_{name}", tuple(c["state"][name]))
                eq = bits_equal(t, ours)
                state_same = state_same and eq
                if not eq:
                    rel = (t - ours).abs().max().item() / max(ours.abs().max().item(), 1e-30)
                    if rel >= worst_state[1]:
                        worst_state = (name, rel)
            abs_diff = (theirs - mine).abs().max().item()
            rel = abs_diff / update
            ulps = abs_diff / np.spacing(np.float32(mine.abs().max().item()))  # in ulps of the largest parameter
            if claim == "bitwise":
                ok = same and state_same
                claim_text = "claim bitwise"
            else:
                ok = rel <= claim
                claim_text = f"claim rel <= {claim:g}"
            if same and state_same:
                verdict = "bitwise equal"
            else:
                verdict = f"max|dp| {abs_diff:.2e} ({ulps:.3g} ulp of max|p|), rel {rel:.2e}" + (
                    f"; {worst_state[0]} rel {worst_state[1]:.1e}" if not state_same else "; state bitwise")
            print(f"case {c['id']:2d} {c['name']:16s} {str(tuple(c['shape'])):9s} {run:10s} {verdict:72s} "
                  f"{claim_text}: {'ok' if ok else 'FAILED'}")
            failed += not ok
    print(f"{2 * len(cases) - failed} claims held, {failed} failed ({EXTERNAL_PACKAGE} {EXTERNAL_VERSION})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
