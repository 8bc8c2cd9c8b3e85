"""Pins every Newton-Schulz variant (core/plan/ns_variant.cpp) to its source, and compares the
variants that have a counterpart to call with it bit for bit.
Usage: python check_ns.py DIR   (DIR written by ns_parity_dump; exit 1 when a check fails)

1. Tables. Each variant's coefficients, compared as doubles (==) with its source: pytorch-optimizer
   4.1.0's NS_COEFFICIENTS and Muon defaults and torch.optim.Muon's defaults read here, at test
   time; the others from the excerpts in ns_sources/ (each names its URL and commit), with the
   source's own rule applied where it derives its table (a safety factor divided out, a list
   repeated). A single changed coefficient, on either side, fails.
2. Indexing. The coefficients each step count 1..12 uses: the source's rule (repeat the last entry,
   or cycle); a table shorter than the run is taken from the front (optax #1613 sliced it from the
   wrong end); a variant with a fixed table runs every entry once, in order.
3. Outputs. orthogonalize() of each dumped input against torch.optim.Muon's
   _zeropower_via_newtonschulz (the torch variant, 2-D) and pytorch-optimizer's
   zero_power_via_newton_schulz_5 / zero_power_via_gram_newton_schulz and heavyball 3.2.1's
   zeropower_via_newtonschulz5 (its stochastic bf16 rounding replaced by rounding to nearest, the
   one difference mfsdp's `heavyball` variant declares) called one matrix (or one stack) at a
   time, bit for bit. It also reports, without failing, whether pytorch-optimizer's
   transpose-by-copy gives torch's transpose-by-view result (the GEMM path) on this machine.
"""
import inspect
import json
import os
import re
import sys

import numpy as np
import torch
from torch.optim._muon import _zeropower_via_newtonschulz
from pytorch_optimizer.optimizer.muon.muon import Muon as PyoptMuon
from pytorch_optimizer.optimizer.utils import matrix as pyopt
import heavyball.utils as heavyball_utils

torch.set_num_threads(1)
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ns_sources")
TRIPLE = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
TUPLE = re.compile(r"[(\[]\s*(" + TRIPLE + r")\s*,\s*(" + TRIPLE + r")\s*,\s*(" + TRIPLE + r")\s*[)\]]")


def excerpt(name):
    """The sections ([name] ... ) of an excerpt file, comments dropped."""
    sections, current = {}, None
    for line in open(os.path.join(HERE, name)):
        if line.startswith("#"):
            continue
        m = re.match(r"^\[(\w+)\]\s*$", line)
        if m:
            current = m.group(1)
            sections[current] = ""
        elif current:
            sections[current] += line
    return sections


def tuples(text):
    return [tuple(float(x) for x in m) for m in TUPLE.findall(text)]


def repeated(text):
    """[(a, b, c)] * n + [(d, e, f)] * m, as the list it evaluates to."""
    out = []
    for body, n in re.findall(r"\[\(([^()]*)\)\]\s*\*\s*(\d+)", text):
        out += [tuple(float(x) for x in body.split(","))] * int(n)
    return out


def safety_divided(raw, factor, last_too):
    """(a / f, b / f**3, c / f**5), evaluated as the sources' Python does."""
    scaled = [(a / factor, b / factor**3, c / factor**5) for (a, b, c) in raw]
    return scaled if last_too else scaled[:-1] + [raw[-1]]


def front_then_last(table, steps):
    return [table[min(i, len(table) - 1)] for i in range(steps)]


def cycled(table, steps):
    return [table[i % len(table)] for i in range(steps)]


def sources():
    """variant -> (coefficients, sequence rule, where from)."""
    eo = excerpt("emerging_optimizers.txt")
    paper = excerpt("polar_express_paper.txt")
    dao = excerpt("gram_newton_schulz.txt")
    dao_factor = float(re.search(r"safety_factor\s*=\s*(" + TRIPLE + ")", dao["safety_factor"]).group(1))
    torch_default = tuple(inspect.signature(torch.optim.Muon.__init__).parameters["ns_coefficients"].default)
    pyopt_rule = lambda t, s: [pyopt.get_newton_schulz_weights(t)[min(i, len(t) - 1)] for i in range(s)]
    heavyball_ns = inspect.getsource(heavyball_utils.zeropower_via_newtonschulz5.__wrapped__)
    return {
        "heavyball": (tuples(heavyball_ns), None, "heavyball.utils.zeropower_via_newtonschulz5 (its source, read here)"),
        "torch": ([], lambda t, s: [torch_default] * s, "torch.optim.Muon default ns_coefficients"),
        "simple-eo": (tuples(eo["simple"]), cycled, "ns_sources/emerging_optimizers.txt [simple]"),
        "cubic5-eo": (tuples(eo["cubic5"]), None, "ns_sources/emerging_optimizers.txt [cubic5]"),
        "polar-express-5": (tuples(excerpt("modded_nanogpt.txt")["polar_express_coeffs"]), None,
                            "ns_sources/modded_nanogpt.txt"),
        "polar-express-paper": (safety_divided(tuples(paper["coeffs_list"]), 1.01, last_too=False), front_then_last,
                                "ns_sources/polar_express_paper.txt with the /1.01 rule"),
        "polar-express-pyopt": ([tuple(t) for t in pyopt.NS_COEFFICIENTS["polar_express"]], pyopt_rule,
                                "pytorch_optimizer NS_COEFFICIENTS['polar_express']"),
        "polar-express-safer-pyopt": ([tuple(t) for t in pyopt.NS_COEFFICIENTS["polar_express_safer"]], pyopt_rule,
                                      "pytorch_optimizer NS_COEFFICIENTS['polar_express_safer']"),
        "polar-express-eo": (tuples(eo["polar_express"]), front_then_last, "ns_sources/emerging_optimizers.txt [polar_express]"),
        "aol": (tuples(excerpt("flash_newton_schulz.txt")["ns_consts"]), None, "ns_sources/flash_newton_schulz.txt"),
        "deepseek-v4": (repeated(eo["deepseekv4"]), None, "ns_sources/emerging_optimizers.txt [deepseekv4]"),
        "gram-pyopt": ([tuple(t) for t in pyopt.get_newton_schulz_weights(
            inspect.signature(PyoptMuon.__init__).parameters["ns_coeffs"].default)], pyopt_rule,
            "pytorch_optimizer Muon default ns_coeffs"),
        "gram-dao": (safety_divided(tuples(dao["_unmodified_polar_express_coefficients"]), dao_factor, last_too=True), None,
                     "ns_sources/gram_newton_schulz.txt with its /1.05 rule"),
    }


def check_tables(d, fail):
    ours = {v["name"]: v for v in json.load(open(os.path.join(d, "ns_tables.json")))}
    theirs = sources()
    if set(ours) != set(theirs):
        fail(f"variants {sorted(set(ours) ^ set(theirs))} are on one side only (ns_variant.cpp vs check_ns.py)")
    muon_sig = inspect.signature(torch.optim.Muon.__init__).parameters
    for name, (table, rule, where) in theirs.items():
        if name not in ours:
            continue
        v = ours[name]
        mine = [tuple(t) for t in v["table"]]
        if not table and name != "torch":
            fail(f"{name}: no coefficients parsed from {where}")
        if mine != table:
            for i, (a, b) in enumerate(zip(mine, table)):
                if a != b:
                    fail(f"{name}: entry {i} is {a!r}, {where} has {b!r}")
            if len(mine) != len(table):
                fail(f"{name}: {len(mine)} entries, {where} has {len(table)}")
        seqs = {int(k): [tuple(t) for t in s] for k, s in v["sequences"].items()}
        if v["fixed_steps"]:
            # A fixed table: every entry once, in order, and nothing else is run.
            want = table if table else None
            if len(table) != v["fixed_steps"] or seqs[v["fixed_steps"]] != want:
                fail(f"{name}: pins {v['fixed_steps']} steps, but its source runs the {len(table)} entries once each")
        else:
            for steps, seq in seqs.items():
                want = [tuple(t) for t in rule(table, steps)]
                if seq != want:
                    i = next(k for k in range(steps) if seq[k] != want[k])
                    fail(f"{name}: run for {steps} steps, step {i} uses {seq[i]}, the source's rule gives {want[i]}")
                    break
            # optax #1613: a run shorter than the table takes its front.
            for steps in range(1, len(table)):
                if seqs[steps] != table[:steps] and v["indexing"] == "repeat_last":
                    fail(f"{name}: {steps} steps do not take the table's first {steps} entries (optax #1613)")
                    break
    t = ours["torch"]
    if t["steps_run"] != muon_sig["ns_steps"].default or t["eps"] != muon_sig["eps"].default:
        fail(f"torch: {t['steps_run']} steps, eps {t['eps']}; torch.optim.Muon's defaults are "
             f"{muon_sig['ns_steps'].default}, {muon_sig['eps'].default}")
    pm = inspect.signature(PyoptMuon.__init__).parameters
    if pm["ns_reset_steps"].default != (2,):
        fail(f"gram-pyopt: pytorch_optimizer Muon's ns_reset_steps default is {pm['ns_reset_steps'].default}, ours (2,)")
    print(f"tables: {len(theirs)} variants pinned to their sources, sequences for 1..12 steps checked")


def theirs_for(variant, g, steps):
    if variant == "torch":
        if g.ndim == 2:
            return _zeropower_via_newtonschulz(g, (3.4445, -4.7750, 2.0315), steps, 1e-7)
        return pyopt.zero_power_via_newton_schulz_5(g, num_steps=steps, weights="original")  # torch's Muon is 2-D only
    if variant == "polar-express-pyopt":
        return pyopt.zero_power_via_newton_schulz_5(g, num_steps=steps, weights="polar_express")
    if variant == "polar-express-safer-pyopt":
        return pyopt.zero_power_via_newton_schulz_5(g, num_steps=steps, weights="polar_express_safer")
    if variant == "gram-pyopt":
        return pyopt.zero_power_via_gram_newton_schulz(g, num_steps=steps, weights="original")
    if variant == "heavyball":
        rounding = heavyball_utils.stochastic_round_
        heavyball_utils.stochastic_round_ = lambda ref, source=None: (ref if source is None else source).to(torch.bfloat16)
        try:
            return heavyball_utils.zeropower_via_newtonschulz5.__wrapped__(g, steps)
        finally:
            heavyball_utils.stochastic_round_ = rounding
    raise KeyError(variant)


def check_outputs(d, fail):
    cases = json.load(open(os.path.join(d, "ns_manifest.json")))
    equal = 0
    copy_vs_view = [0, 0]
    for c in cases:
        shape = tuple(c["shape"])
        load = lambda what: torch.from_numpy(np.fromfile(f"{d}/ns{c['id']}_{what}.bin", dtype=np.float32).reshape(shape))
        g, ours = load("in"), load("out")
        theirs = theirs_for(c["variant"], g.clone(), c["steps"]).float()
        same = torch.equal(ours.view(torch.int32), theirs.contiguous().view(torch.int32))
        if same:
            equal += 1
        else:
            diff = (ours - theirs).abs().max().item()
            fail(f"ns{c['id']} {c['variant']} {c['steps']} steps {shape}: differs (max |diff| {diff:.3g})")
        if c["variant"] == "torch" and g.ndim == 2:
            byc = pyopt.zero_power_via_newton_schulz_5(g.clone(), num_steps=c["steps"], weights="original").float()
            copy_vs_view[0] += torch.equal(byc.contiguous().view(torch.int32), theirs.contiguous().view(torch.int32))
            copy_vs_view[1] += 1
    print(f"outputs: {equal} of {len(cases)} bitwise equal to torch / pytorch-optimizer / heavyball")
    print(f"finding: pytorch-optimizer's transpose-by-copy equals torch's transpose-by-view bit for bit in "
          f"{copy_vs_view[0]} of {copy_vs_view[1]} 2-D cases on this machine")


def main():
    d = sys.argv[1]
    failures = []
    fail = lambda msg: (failures.append(msg), print("FAIL " + msg))
    check_tables(d, fail)
    check_outputs(d, fail)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


main()
