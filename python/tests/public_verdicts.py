"""Verdicts for public Muon implementations through the kit's one-step replay (docs/conformance.md,
"Public implementations"), each asserted as found. The verdicts are findings, not targets: one that
changes is a change in the package or in the kit, to be looked at, never a bound to widen.

Usage: python public_verdicts.py --work DIR   (prints "public_verdicts: N passed, 0 failed")
"""
import argparse
import sys

import torch

from mfsdp_kit import Reference, replay

results = []


def check(name, ok, detail=""):
    results.append(ok)
    detail = detail if not ok else detail[:200]
    print(f"public_verdicts: {name}: {'ok' if ok else 'FAIL'}{(' (' + detail + ')') if detail else ''}", flush=True)


def summary(r):
    first = r.get("first_systematic_step")
    names = sorted({t["name"] for t in r.systematic(first)}) if first else []
    return first, names


# ---- pytorch-optimizer 4.1.0: its Muon family keeps the AdamW part in the same object (use_muon groups)

def pyopt_groups(ref, named, **muon):
    a = ref.optimizer["adamw"]
    return [dict(params=[p for n, p in named.items() if n in ref.matrix_names], use_muon=True, **muon),
            dict(params=[p for n, p in named.items() if n not in ref.matrix_names], use_muon=False, lr=a["lr"],
                 betas=tuple(a["betas"]), eps=a["eps"], weight_decay=a["weight_decay"])]


def pyopt_muon(ref, named):
    import pytorch_optimizer as po
    m = ref.optimizer["muon"]
    return [po.Muon(pyopt_groups(ref, named, lr=m["lr"], weight_decay=m["weight_decay"]), momentum=m["momentum"],
                    nesterov=m["nesterov"], ns_steps=m["ns_steps"], foreach=False)]


def pyopt_normuon(ref, named):
    import pytorch_optimizer as po
    m = ref.optimizer["normuon"]
    return [po.NorMuon(pyopt_groups(ref, named, lr=m["lr"], weight_decay=m["weight_decay"]), momentum=m["momentum"],
                       beta2=m["beta2"], nesterov=m["nesterov"], eps=m["eps"], foreach=False)]


def pyopt_adamuon(ref, named):
    import pytorch_optimizer as po
    m = ref.optimizer["adamuon"]
    return [po.AdaMuon(pyopt_groups(ref, named, lr=m["lr"], weight_decay=m["weight_decay"]), betas=tuple(m["betas"]),
                       eps=m["eps"], foreach=False)]


def pyopt_muonclip(ref, named):
    import pytorch_optimizer as po
    m = ref.optimizer["muon"]
    return [po.MuonClip(pyopt_groups(ref, named, lr=m["lr"], weight_decay=m["weight_decay"]), momentum=m["momentum"],
                        ns_steps=m["ns_steps"], use_adjusted_lr=False, foreach=False)]


# ---- heavyball 3.2.1: its Muon on the matrices (betas[0] the momentum), torch's AdamW on the rest

def heavyball_muon(ref, named):
    import heavyball
    m = ref.optimizer["muon"]
    return [heavyball.Muon([p for n, p in named.items() if n in ref.matrix_names], lr=m["lr"], betas=(m["momentum"], 0.99),
                           weight_decay=m["weight_decay"], nesterov=m["nesterov"], compile_step=False, multi_tensor=False),
            torch.optim.AdamW([p for n, p in named.items() if n not in ref.matrix_names], **ref.adamw_kwargs())]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    refs = {}

    def ref_of(flags):
        key = " ".join(flags) or "muon"
        if key not in refs:
            refs[key] = Reference.train(f"{a.work}/oracle_{len(refs)}", world_size=2, steps=3, flags=flags)
        return refs[key]
    for name, flags, make in (("pytorch-optimizer 4.1.0 Muon", [], pyopt_muon),
                              ("pytorch-optimizer 4.1.0 NorMuon", ["--optimizer", "normuon"], pyopt_normuon),
                              ("pytorch-optimizer 4.1.0 AdaMuon", ["--optimizer", "adamuon"], pyopt_adamuon)):
        ref = ref_of(flags)
        r = replay(ref, lambda named: make(ref, named))
        check(f"{name}: within the noise at every step (W = 2, 3 steps)", r.verdict == "within_noise", r.text[-1500:] if r.verdict != "within_noise" else "")
    # MuonClip: classical momentum (buf = mu buf + g, 1 / (1 - mu) = 20 times the EMA form) and no
    # Nesterov (hard-coded nesterov=False): the momentum buffer differs at step 1, the update at step 2.
    ref = ref_of([])
    r = replay(ref, lambda named: pyopt_muonclip(ref, named))
    first, names = summary(r)
    buffers = [n for n in names if n.endswith(".momentum_buffer")]
    check("pytorch-optimizer 4.1.0 MuonClip: systematic from step 1, in the 14 momentum buffers only",
          first == 1 and len(buffers) == 14 and len(names) == 14, f"step {first}: {names[:3]}")
    r = replay(ref, lambda named: pyopt_muonclip(ref, named), state=False)
    first, names = summary(r)
    check("pytorch-optimizer 4.1.0 MuonClip, updates alone: systematic from step 2 in the matrices",
          first == 2 and names and all(n in ref.matrix_names for n in names), f"step {first}: {len(names)} tensors")
    # heavyball against the plain oracle: the first update of every matrix is off in scale
    # (norm_ratio beyond the floor at step 1, 6-10 %): its Newton-Schulz is its own five-step table
    # (4.0848, -6.8946, 2.9270; ...). Its state is nested (state[p][0]["nesterov_ema_momentum_2"]),
    # which replay does not load, so from step 2 its steps start from a zero momentum.
    r = replay(ref, lambda named: heavyball_muon(ref, named))
    first, names = summary(r)
    scale = [t for t in r.systematic(1) if "norm_ratio" in t["reason"]]
    check("heavyball 3.2.1 Muon: systematic from step 1, the update's scale (norm_ratio) in matrices",
          first == 1 and len(scale) >= 7 and all(n in ref.matrix_names for n in names), f"step {first}: {len(scale)} by norm_ratio")
    # The header mapping: a reference run with its table (--ns-variant heavyball, rounding to nearest
    # where heavyball rounds stochastically). Step 1 only (its state is not loaded). As shipped,
    # heavyball torch.compiles its inner functions (heavyball.utils.compile_mode, even with
    # compile_step=False), and a few matrices stay systematic by norm_ratio (about 1 %); run eagerly
    # (compile_mode None) it is within the noise, stochastic rounding and all.
    import heavyball.utils as heavyball_utils
    ref_hb = ref_of(["--ns-variant", "heavyball"])
    r = replay(ref_hb, lambda named: heavyball_muon(ref_hb, named), steps=1)
    first, names = summary(r)
    check("heavyball 3.2.1 Muon (compiled, as shipped) against --ns-variant heavyball: systematic at step 1 in fewer than 7 matrices",
          first == 1 and 0 < len(names) < 7 and all(n in ref_hb.matrix_names for n in names), f"step {first}: {names}")
    compile_mode, heavyball_utils.compile_mode = heavyball_utils.compile_mode, None
    try:
        r = replay(ref_hb, lambda named: heavyball_muon(ref_hb, named), steps=1)
    finally:
        heavyball_utils.compile_mode = compile_mode
    check("heavyball 3.2.1 Muon (eager) against --ns-variant heavyball: within the noise at step 1",
          r.verdict == "within_noise", r.text[-1500:] if r.verdict != "within_noise" else "")
    print(f"public_verdicts: {sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
