#!/usr/bin/env python3
"""The differential grid as a designed covering array (docs/testing.md, "The designed grid").

Every feasible pair of factor values appears in at least one row, and every feasible triple of the
risky sub-models (SUB_MODELS) too. The rows come from allpairspy (PyPI, pinned in
scripts/setup.sh): the sub-models' triples, completed into whole rows, are its `previously_tested`
rows, so its pairwise pass adds only the pairs those rows miss (mixed strength). Constraints are
filters (`feasible`). The seed shuffles the order of every factor's values and of the triples, so
the array is reproducible and another seed gives another valid array.

  design.py --write FILE     generate and write the array (JSON)
  design.py --check FILE     generate and compare with FILE byte for byte (exit 1 if it differs)
  design.py --focus FACTOR FILE
                             the rows that cover FACTOR against every other factor pairwise and
                             in the triples it is in, with their count and a ctest -R pattern
"""
import argparse
import itertools
import json
import os
import random
import sys
from collections import OrderedDict

import allpairspy

SEED = 20261204

# The factor table. The first value of each factor is its default (what a row uses when the factor
# is not what the row is about). A new capability enters here, as a factor or a value.
FACTORS = OrderedDict([
    ("W", [3, 1, 2, 4, 5, 6, 7, 8]),
    ("mesh", ["flat", "r2", "s2", "rW"]),          # HSDP: R=2 / S=2 / R=W (S=1) replica groups
    ("step_mode", ["replicated", "dedup"]),
    ("optimizer", ["muon", "adamw", "shampoo", "soap"]),
    ("precision", ["fp32", "bf16"]),                # bf16 compute copies of fp32 masters
    ("reduce", ["fp32", "bf16"]),                   # the gradient reduction's wire dtype
    ("placement", ["owner", "reconstruct", "alltoall", "zero1", "ddp"]),
    ("planner", ["balanced", "round_robin", "greedy_bytes", "greedy_cost", "explicit"]),
    ("tail", ["even", "owner"]),
    ("prefetch", ["off", "on"]),
    ("mlp", ["gated", "ungated"]),
    ("tied", ["no", "yes"]),
    ("experts", ["none", "moe", "moe_shared"]),     # moe_shared: block 0 dense, one shared expert
    ("expert_ranges", [0, 1, 2]),
    ("batched_ns", ["off", "on"]),
])

# Triples that must all appear (mixed strength 3 on these factors).
SUB_MODELS = [
    ("W", "precision", "mesh"),
    ("placement", "optimizer", "tail"),
    ("experts", "tied", "precision"),
    ("mesh", "precision", "reduce"),
]


def feasible(row):
    """False when the (possibly partial) row names a combination the runtime does not run."""
    g = row.get
    def has(*names):
        return all(n in row for n in names)
    if has("W", "mesh"):
        W, m = g("W"), g("mesh")
        if m == "r2" and W % 2:
            return False
        if m == "s2" and (W % 2 or W < 4):
            return False
        if m == "rW" and W < 2:
            return False
    if has("mesh", "step_mode") and g("mesh") == "flat" and g("step_mode") != "replicated":
        return False
    if has("precision", "reduce") and g("reduce") == "bf16" and g("precision") != "bf16":
        return False
    if has("placement", "optimizer") and g("placement") in ("reconstruct", "alltoall") and \
            g("optimizer") not in ("muon", "adamw"):
        return False                                # even row shards: elementwise or Muon only
    if has("placement", "mesh") and g("placement") in ("alltoall", "zero1", "ddp") and g("mesh") != "flat":
        return False
    if has("placement", "step_mode") and g("placement") == "reconstruct" and g("step_mode") != "replicated":
        return False                                # dedup steps whole matrices
    if has("placement", "planner") and g("placement") in ("reconstruct", "alltoall", "ddp") and \
            g("planner") != "balanced":
        return False                                # every parameter even: no owners to plan
    if has("placement", "tail") and g("placement") in ("reconstruct", "alltoall", "ddp") and g("tail") != "even":
        return False
    if has("experts", "expert_ranges") and g("experts") == "none" and g("expert_ranges") != 0:
        return False
    if has("experts", "batched_ns") and g("experts") == "none" and g("batched_ns") == "on":
        return False
    if has("optimizer", "batched_ns") and g("batched_ns") == "on" and g("optimizer") != "muon":
        return False
    if has("placement", "batched_ns") and g("batched_ns") == "on" and g("placement") != "owner":
        return False
    return True


def shuffled_factors(seed):
    rng = random.Random(seed)
    out = OrderedDict()
    for name, values in FACTORS.items():
        values = list(values)
        default, rest = values[0], values[1:]
        rng.shuffle(rest)
        out[name] = [default] + rest
    return out


def extendable(partial, factors):
    """Whether some whole feasible row holds `partial` (depth-first over the missing factors)."""
    missing = [n for n in factors if n not in partial]
    def search(row, k):
        if not feasible(row):
            return False
        if k == len(missing):
            return True
        return any(search({**row, missing[k]: v}, k + 1) for v in factors[missing[k]])
    return search(dict(partial), 0)


def feasible_tuples(factors, names):
    """The value tuples of `names` that some whole feasible row holds."""
    return [t for t in itertools.product(*(factors[n] for n in names)) if extendable(dict(zip(names, t)), factors)]


def complete(partial, factors, cursor):
    """A whole feasible row extending `partial`: each missing factor takes the next value of its
    round-robin cursor that keeps the row feasible (so the completions spread over the values)."""
    row = dict(partial)
    for name, values in factors.items():
        if name in row:
            continue
        for k in range(len(values)):
            v = values[(cursor[name] + k) % len(values)]
            if feasible({**row, name: v}):
                row[name] = v
                cursor[name] = (cursor[name] + k + 1) % len(values)
                break
        else:
            return None
    return row if feasible(row) else None


def seed_rows(factors, seed):
    """Rows covering every feasible triple of every sub-model: each row takes one uncovered triple
    of each sub-model that agrees with what the row holds so far, then is completed."""
    rng = random.Random(seed + 1)
    todo = []
    for names in SUB_MODELS:
        triples = feasible_tuples(factors, names)
        rng.shuffle(triples)
        todo.append((names, triples))
    cursor = {n: 0 for n in factors}
    rows = []
    while any(t for _, t in todo):
        partial = {}
        for names, triples in todo:
            for i, t in enumerate(triples):
                cand = dict(partial)
                ok = True
                for n, v in zip(names, t):
                    if cand.get(n, v) != v:
                        ok = False
                        break
                    cand[n] = v
                if ok and feasible(cand) and complete(cand, factors, dict(cursor)) is not None:
                    partial = cand
                    del triples[i]
                    break
        row = complete(partial, factors, cursor)
        assert row is not None, partial
        rows.append(row)
        # A triple this row also happens to hold is covered too.
        for names, triples in todo:
            held = tuple(row[n] for n in names)
            if held in triples:
                triples.remove(held)
    return rows


def generate(seed=SEED):
    factors = shuffled_factors(seed)
    names = list(factors)
    seeds = seed_rows(factors, seed)
    prefix_ok = lambda values: feasible(dict(zip(names, values)))
    pairs = allpairspy.AllPairs([factors[n] for n in names], filter_func=prefix_ok,
                                previously_tested=[[r[n] for n in names] for r in seeds])
    all_rows = seeds + [dict(zip(names, list(r))) for r in pairs]
    # allpairspy stops at the first row that adds no new pair, which constraints can cause while
    # pairs remain: run it again over everything so far until it adds nothing, then complete each
    # pair still missing into a row of its own.
    while True:
        more = [dict(zip(names, list(r))) for r in allpairspy.AllPairs(
            [factors[n] for n in names], filter_func=prefix_ok, previously_tested=[[r[n] for n in names] for r in all_rows])]
        if not more:
            break
        all_rows += more
    cursor = {n: 0 for n in factors}
    for a, b in itertools.combinations(names, 2):
        held = {(r[a], r[b]) for r in all_rows}
        for t in feasible_tuples(factors, (a, b)):
            if t not in held:
                row = complete({a: t[0], b: t[1]}, factors, cursor)
                assert row is not None, (a, b, t)
                all_rows.append(row)
                held.add(t)
    for i, r in enumerate(all_rows):
        r["id"] = i
    return factors, all_rows


def coverage(factors, rows, names):
    """(covered, feasible, excluded) tuples of the factors `names`."""
    feas = set(feasible_tuples(factors, names))
    allt = set(itertools.product(*(factors[n] for n in names)))
    held = {tuple(r[n] for n in names) for r in rows}
    return held & feas, feas, allt - feas


def document(seed=SEED):
    factors, rows = generate(seed)
    names = list(factors)
    pair_missing, excluded = [], []
    n_pairs = 0
    for a, b in itertools.combinations(names, 2):
        cov, feas, exc = coverage(factors, rows, (a, b))
        n_pairs += len(feas)
        pair_missing += [f"{a}={x} {b}={y}" for x, y in sorted(feas - cov, key=str)]
        excluded += [f"{a}={x} {b}={y}" for x, y in sorted(exc, key=str)]
    triple_missing, n_triples = [], 0
    for sm in SUB_MODELS:
        cov, feas, _ = coverage(factors, rows, sm)
        n_triples += len(feas)
        triple_missing += [" ".join(f"{n}={v}" for n, v in zip(sm, t)) for t in sorted(feas - cov, key=str)]
    assert not pair_missing, pair_missing
    assert not triple_missing, triple_missing
    assert all(feasible(r) for r in rows)
    doc = OrderedDict([
        ("generated_by", "regression/grid/design.py with allpairspy " + allpairspy.__version__),
        ("seed", seed),
        ("factors", FACTORS),
        ("sub_models", [list(s) for s in SUB_MODELS]),
        ("feasible_pairs", n_pairs),
        ("feasible_sub_model_triples", n_triples),
        ("excluded_pairs", excluded),
        ("rows", [OrderedDict([("id", r["id"])] + [(n, r[n]) for n in names]) for r in rows]),
    ])
    return doc


def dumps(doc):
    return json.dumps(doc, indent=1) + "\n"


def focus(doc, factor):
    """Rows that together hold every feasible pair of `factor` with each other factor and every
    feasible triple of the sub-models it is in (greedy, in row order)."""
    factors = OrderedDict((k, v) for k, v in doc["factors"].items())
    rows = doc["rows"]
    wanted = set()
    for other in factors:
        if other != factor:
            for t in feasible_tuples(factors, (factor, other)):
                wanted.add(((factor, other), t))
    for sm in doc["sub_models"]:
        if factor in sm:
            for t in feasible_tuples(factors, tuple(sm)):
                wanted.add((tuple(sm), t))
    chosen = []
    while wanted:
        best = max(rows, key=lambda r: sum(tuple(r[n] for n in k) == t for k, t in wanted))
        got = {(k, t) for k, t in wanted if tuple(best[n] for n in k) == t}
        if not got:
            break
        chosen.append(best["id"])
        wanted -= got
    return sorted(chosen)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", metavar="FILE")
    ap.add_argument("--check", metavar="FILE")
    ap.add_argument("--focus", nargs=2, metavar=("FACTOR", "FILE"))
    ap.add_argument("--seed", type=int, default=SEED)
    a = ap.parse_args()
    if a.focus:
        factor, path = a.focus
        doc = json.load(open(path))
        if factor not in doc["factors"]:
            sys.exit(f"design: unknown factor '{factor}' (factors: {', '.join(doc['factors'])})")
        ids = focus(doc, factor)
        print(f"design: factor {factor}: {len(ids)} of {len(doc['rows'])} rows cover it pairwise with every other "
              f"factor and in its sub-model triples")
        print("design: ctest --test-dir build -R '" + "|".join(f"Array/GridRow\\.BitMatchesTheOracle/row{i}_" for i in ids) + "'")
        return 0
    doc = document(a.seed)
    text = dumps(doc)
    summary = (f"design: seed {doc['seed']}, {len(doc['rows'])} rows cover {doc['feasible_pairs']} feasible pairs and "
               f"{doc['feasible_sub_model_triples']} sub-model triples ({len(doc['excluded_pairs'])} pairs excluded as infeasible)")
    if a.write:
        # A fresh temporary file (never one that exists, a link included), renamed over FILE whole.
        tmp = a.write + ".tmp"
        with open(tmp, "x") as f:
            f.write(text)
        os.replace(tmp, a.write)
        print(summary)
        return 0
    if a.check:
        committed = open(a.check).read()
        if committed != text:
            print(f"design: {a.check} differs from what design.py generates (seed {doc['seed']}); "
                  f"regenerate with: design.py --write {a.check}")
            return 1
        print(summary + "; the committed array is what design.py generates")
        return 0
    print(summary)
    for p in doc["excluded_pairs"]:
        print("  excluded:", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
