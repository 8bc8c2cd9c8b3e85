#!/usr/bin/env python3
"""The differential and runtime grids as designed covering arrays (docs/testing.md, "The designed
grid").

Each grid is a table (TABLES): its factors, its constraints and its risky sub-models. Every feasible pair of factor values appears in at least one row, and every feasible triple of the
risky sub-models too. The rows come from allpairspy (PyPI, pinned in
scripts/setup.sh): the sub-models' triples, completed into whole rows, are its `previously_tested`
rows, so its pairwise pass adds only the pairs those rows miss (mixed strength). Constraints are
filters (`feasible`). The seed shuffles the order of every factor's values and of the triples, so
the array is reproducible and another seed gives another valid array.

  design.py [--table T] --write FILE     generate and write the array (JSON)
  design.py [--table T] --check FILE     generate and compare with FILE byte for byte (exit 1 if it
                                         differs)
  design.py [--table T] --focus FACTOR FILE
                                         the rows that cover FACTOR against every other factor
                                         pairwise and in the triples it is in, with their count and
                                         a ctest -R pattern
  T: differential (default; regression/grid/array.json, regression/test_grid.cpp) or runtime
  (regression/grid/runtime_array.json, core/runtime/tests/test_runtime.cpp).
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

# The differential grid's factor table. The first value of each factor is its default (what a row uses when the factor
# is not what the row is about). A new capability enters here, as a factor or a value.
FACTORS_DIFFERENTIAL = OrderedDict([
    # The three largest factors first: allpairspy then needs 171 rows (185 with W first, the variant
    # second and the optimizer in its old place; 201 with the variant last).
    ("ns_variant", ["torch", "simple-eo", "cubic5-eo", "polar-express-5", "polar-express-paper",  # Muon's Newton-
                    "polar-express-pyopt", "polar-express-safer-pyopt", "polar-express-eo", "aol",  # Schulz
                    "deepseek-v4", "gram-pyopt", "gram-dao", "heavyball"]),
    ("W", [3, 1, 2, 4, 5, 6, 7, 8]),
    ("optimizer", ["muon", "adamw", "shampoo", "soap", "normuon", "adamuon"]),
    ("mesh", ["flat", "r2", "s2", "rW"]),          # HSDP: R=2 / S=2 / R=W (S=1) replica groups
    ("step_mode", ["replicated", "dedup"]),
    ("precision", ["fp32", "bf16"]),                # bf16 compute copies of fp32 masters
    ("reduce", ["fp32", "bf16"]),                   # the gradient reduction's wire dtype
    ("placement", ["owner", "reconstruct", "alltoall", "zero1", "ddp"]),
    ("planner", ["balanced", "round_robin", "greedy_bytes", "greedy_cost", "explicit"]),
    ("tail", ["even", "owner"]),
    ("prefetch", ["off", "on"]),
    ("comm_groups", ["unit", "model"]),            # model: the whole model's unshard and reduction one group each
    ("mlp", ["gated", "ungated"]),
    ("tied", ["no", "yes"]),
    ("experts", ["none", "moe", "moe_shared"]),     # moe_shared: block 0 dense, one shared expert
    ("expert_ranges", [0, 1, 2]),
    ("batched_ns", ["off", "on"]),
    ("grad_accum", [1, 2, 3]),                      # micro-batches per step (docs/accumulation.md)
    ("grad_reduce", ["per_microbatch", "deferred"]),  # the order micro-batches' gradients are added in
    ("clip", ["off", "on"]),                        # global gradient-norm clipping (max norm 0.5)
    ("recompute", ["off", "on"]),                   # activation checkpointing per block (docs/recompute.md)
    ("schedule", ["constant", "warmup_cosine", "wsd"]),  # learning-rate schedule (docs/schedules.md)
    ("resume", ["no", "mid"]),                      # checkpointed after the middle step and resumed
    ("qk_clip", ["off", "on"]),                     # QK-clip after every update (tau 0.05; docs/qk_clip.md)
    ("kv_heads", [4, 2, 1]),                        # grouped-query attention: key/value heads of the 4
])

MUON_FAMILY = ("muon", "normuon", "adamuon")       # the optimizers that orthogonalise with Newton-Schulz

# Triples that must all appear (mixed strength 3 on these factors).
SUB_MODELS_DIFFERENTIAL = [
    ("W", "precision", "mesh"),
    ("placement", "optimizer", "tail"),
    ("experts", "tied", "precision"),
    ("mesh", "precision", "reduce"),
    ("grad_accum", "grad_reduce", "W"),
    ("clip", "mesh", "tail"),                       # the norm's owners: replicas, tail owners, even shards
    ("clip", "placement", "experts"),               # gathered split parameters: even baselines, expert ranges
    ("recompute", "placement", "precision"),        # the revived buffer under every layout and dtype
    ("schedule", "resume", "W"),                    # the schedule's t and decay across a checkpoint
    ("ns_variant", "optimizer", "precision"),       # every Newton-Schulz variant under each dtype
    ("qk_clip", "planner", "mesh"),                 # q and k rescaled on their owners, in every replica
]


def feasible_differential(row):
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
    if has("optimizer", "ns_variant") and g("ns_variant") != "torch" and g("optimizer") not in MUON_FAMILY:
        return False                                # a Newton-Schulz variant is the Muon family's
    if has("grad_accum", "grad_reduce") and g("grad_accum") == 1 and g("grad_reduce") != "per_microbatch":
        return False                                # one micro-batch: the two orders are one
    if has("placement", "recompute") and g("placement") in ("zero1", "ddp") and g("recompute") == "on":
        return False                                # the replicas never recompute
    if has("placement", "resume") and g("placement") in ("zero1", "ddp") and g("resume") == "mid":
        return False                                # checkpoints are the owner runtime's
    if has("optimizer", "qk_clip") and g("qk_clip") == "on" and g("optimizer") not in MUON_FAMILY:
        return False                                # QK-clip's rule is the Muon family's
    if has("placement", "comm_groups") and g("placement") in ("zero1", "ddp") and g("comm_groups") != "unit":
        return False                                # the replicas have no units to group
    if has("prefetch", "comm_groups") and g("prefetch") == "on" and g("comm_groups") != "unit":
        return False                                # one group a direction: nothing to overlap
    if has("recompute", "comm_groups") and g("recompute") == "on" and g("comm_groups") != "unit":
        return False                                # nothing resharded, so no revived buffer
    return True


# The runtime grid (core/runtime/tests/test_runtime.cpp: one owner-shaped forward and backward of
# the tiny model, checking unshard, pinned views, owners' gradients, prefetch, step traffic and
# memory): its layouts are W x planner x tail over a plain, tied or MoE model, in fp32 or bf16.
FACTORS_RUNTIME = OrderedDict([
    ("W", [3, 1, 2, 4, 5]),
    ("planner", ["balanced", "round_robin"]),
    ("tail", ["even", "owner"]),
    ("precision", ["fp32", "bf16"]),               # bf16 compute copies of fp32 masters
    ("model", ["plain", "tied", "moe"]),           # tied embeddings; 5 experts, top 2, in ranges
])

SUB_MODELS_RUNTIME = [
    ("W", "planner", "tail"),                      # every ownership layout of the plain model
    ("W", "model", "precision"),                   # every model and dtype at every W
]


def feasible_runtime(row):
    """Every combination runs (the exhaustive label runs their whole product)."""
    return True


class Table:
    def __init__(self, name, factors, sub_models, feasible, generated_by, test_pattern):
        self.name, self.factors, self.sub_models, self.feasible = name, factors, sub_models, feasible
        self.generated_by, self.test_pattern = generated_by, test_pattern


TABLES = OrderedDict([
    ("differential", Table("differential", FACTORS_DIFFERENTIAL, SUB_MODELS_DIFFERENTIAL, feasible_differential,
                           "regression/grid/design.py", "Array/GridRow\\.BitMatchesTheOracle/row{id}_")),
    ("runtime", Table("runtime", FACTORS_RUNTIME, SUB_MODELS_RUNTIME, feasible_runtime,
                      "regression/grid/design.py --table runtime",
                      "Array/RuntimeGridRow\\.LifecycleGradientsCommunicationAndMemory/row{id}_")),
])


def shuffled_factors(t, seed):
    rng = random.Random(seed)
    out = OrderedDict()
    for name, values in t.factors.items():
        values = list(values)
        default, rest = values[0], values[1:]
        rng.shuffle(rest)
        out[name] = [default] + rest
    return out


def extendable(t, partial, factors):
    """Whether some whole feasible row holds `partial` (depth-first over the missing factors)."""
    missing = [n for n in factors if n not in partial]
    def search(row, k):
        if not t.feasible(row):
            return False
        if k == len(missing):
            return True
        return any(search({**row, missing[k]: v}, k + 1) for v in factors[missing[k]])
    return search(dict(partial), 0)


def feasible_tuples(t, factors, names):
    """The value tuples of `names` that some whole feasible row holds."""
    return [v for v in itertools.product(*(factors[n] for n in names)) if extendable(t, dict(zip(names, v)), factors)]


def complete(t, partial, factors, cursor):
    """A whole feasible row extending `partial`: each missing factor takes the next value of its
    round-robin cursor that keeps the row feasible (so the completions spread over the values)."""
    row = dict(partial)
    for name, values in factors.items():
        if name in row:
            continue
        for k in range(len(values)):
            v = values[(cursor[name] + k) % len(values)]
            if t.feasible({**row, name: v}):
                row[name] = v
                cursor[name] = (cursor[name] + k + 1) % len(values)
                break
        else:
            return None
    return row if t.feasible(row) else None


def seed_rows(t, factors, seed):
    """Rows covering every feasible triple of every sub-model: each row takes one uncovered triple
    of each sub-model that agrees with what the row holds so far, then is completed."""
    rng = random.Random(seed + 1)
    todo = []
    for names in t.sub_models:
        triples = feasible_tuples(t, factors, names)
        rng.shuffle(triples)
        todo.append((names, triples))
    cursor = {n: 0 for n in factors}
    rows = []
    while any(t for _, t in todo):
        partial = {}
        for names, triples in todo:
            for i, tr in enumerate(triples):
                cand = dict(partial)
                ok = True
                for n, v in zip(names, tr):
                    if cand.get(n, v) != v:
                        ok = False
                        break
                    cand[n] = v
                if ok and t.feasible(cand) and complete(t, cand, factors, dict(cursor)) is not None:
                    partial = cand
                    del triples[i]
                    break
        row = complete(t, partial, factors, cursor)
        assert row is not None, partial
        rows.append(row)
        # A triple this row also happens to hold is covered too.
        for names, triples in todo:
            held = tuple(row[n] for n in names)
            if held in triples:
                triples.remove(held)
    return rows


def generate(t, seed=SEED):
    factors = shuffled_factors(t, seed)
    names = list(factors)
    seeds = seed_rows(t, factors, seed)
    prefix_ok = lambda values: t.feasible(dict(zip(names, values)))
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
        for v in feasible_tuples(t, factors, (a, b)):
            if v not in held:
                row = complete(t, {a: v[0], b: v[1]}, factors, cursor)
                assert row is not None, (a, b, v)
                all_rows.append(row)
                held.add(v)
    for i, r in enumerate(all_rows):
        r["id"] = i
    return factors, all_rows


def coverage(t, factors, rows, names):
    """(covered, feasible, excluded) tuples of the factors `names`."""
    feas = set(feasible_tuples(t, factors, names))
    allt = set(itertools.product(*(factors[n] for n in names)))
    held = {tuple(r[n] for n in names) for r in rows}
    return held & feas, feas, allt - feas


def document(t, seed=SEED):
    factors, rows = generate(t, seed)
    names = list(factors)
    pair_missing, excluded = [], []
    n_pairs = 0
    for a, b in itertools.combinations(names, 2):
        cov, feas, exc = coverage(t, factors, rows, (a, b))
        n_pairs += len(feas)
        pair_missing += [f"{a}={x} {b}={y}" for x, y in sorted(feas - cov, key=str)]
        excluded += [f"{a}={x} {b}={y}" for x, y in sorted(exc, key=str)]
    triple_missing, n_triples = [], 0
    for sm in t.sub_models:
        cov, feas, _ = coverage(t, factors, rows, sm)
        n_triples += len(feas)
        triple_missing += [" ".join(f"{n}={v}" for n, v in zip(sm, tr)) for tr in sorted(feas - cov, key=str)]
    assert not pair_missing, pair_missing
    assert not triple_missing, triple_missing
    assert all(t.feasible(r) for r in rows)
    doc = OrderedDict([
        ("generated_by", t.generated_by + " with allpairspy " + allpairspy.__version__),
        ("seed", seed),
        ("factors", t.factors),
        ("sub_models", [list(s) for s in t.sub_models]),
        ("feasible_pairs", n_pairs),
        ("feasible_sub_model_triples", n_triples),
        ("excluded_pairs", excluded),
        ("rows", [OrderedDict([("id", r["id"])] + [(n, r[n]) for n in names]) for r in rows]),
    ])
    return doc


def dumps(doc):
    return json.dumps(doc, indent=1) + "\n"


def focus(t, doc, factor):
    """Rows that together hold every feasible pair of `factor` with each other factor and every
    feasible triple of the sub-models it is in (greedy, in row order)."""
    factors = OrderedDict((k, v) for k, v in doc["factors"].items())
    rows = doc["rows"]
    wanted = set()
    for other in factors:
        if other != factor:
            for v in feasible_tuples(t, factors, (factor, other)):
                wanted.add(((factor, other), v))
    for sm in doc["sub_models"]:
        if factor in sm:
            for v in feasible_tuples(t, factors, tuple(sm)):
                wanted.add((tuple(sm), v))
    chosen = []
    while wanted:
        best = max(rows, key=lambda r: sum(tuple(r[n] for n in k) == v for k, v in wanted))
        got = {(k, v) for k, v in wanted if tuple(best[n] for n in k) == v}
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
    ap.add_argument("--table", choices=list(TABLES), default="differential")
    a = ap.parse_args()
    t = TABLES[a.table]
    if a.focus:
        factor, path = a.focus
        doc = json.load(open(path))
        # The array names its table by its factors (so --table is not needed with --focus).
        t = next((x for x in TABLES.values() if json.loads(json.dumps(x.factors)) == doc.get("factors")), None)
        if t is None:
            sys.exit(f"design: {path} is not an array of any table here ({', '.join(TABLES)}): its factors differ")
        if factor not in doc["factors"]:
            sys.exit(f"design: unknown factor '{factor}' (factors: {', '.join(doc['factors'])})")
        ids = focus(t, doc, factor)
        print(f"design: factor {factor}: {len(ids)} of {len(doc['rows'])} rows cover it pairwise with every other "
              f"factor and in its sub-model triples")
        print("design: ctest --test-dir build -R '" + "|".join(t.test_pattern.format(id=i) for i in ids) + "'")
        return 0
    doc = document(t, a.seed)
    text = dumps(doc)
    summary = (f"design: table {t.name}, seed {doc['seed']}, {len(doc['rows'])} rows cover {doc['feasible_pairs']} feasible pairs and "
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
            print(f"design: {a.check} differs from what design.py generates (table {t.name}, seed {doc['seed']}); "
                  f"regenerate with: design.py --table {t.name} --write {a.check}")
            return 1
        print(summary + "; the committed array is what design.py generates")
        return 0
    print(summary)
    for p in doc["excluded_pairs"]:
        print("  excluded:", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
