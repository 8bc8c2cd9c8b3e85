#!/usr/bin/env python3
"""Every JSON output users and scripts read, checked against its committed schema (docs/schemas/,
JSON Schema 2020-12; docs/files.md lists the outputs and the renamed keys).

output_schemas.py MFSDP BENCH_STEP SOURCE_DIR

Real outputs of this build, made here in a scratch directory: `plan --json` (flat, HSDP, experts,
--recommend), `env --json`, `simulate --json` (every placement, flat and HSDP), `verify --json`,
`train --metrics` (every line: steps and the summary), `conform --json` (equal, and a dump with one
flipped bit judged exact and under a tolerance file), and `bench_step --json` (one small case). The
committed results the dashboard reads (results/cpu/bench_step.json, results/cpu/peers.json and
results/cpu/peers_comm_groups.json) are
checked too: peers.json is written only by peers/side_by_side.py, which checks it against the same
schema before writing.

Every object in a schema lists its keys (required unless marked optional) and refuses others, so a
renamed or added key fails here until its schema changes in the same commit.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import jsonschema

MFSDP, BENCH_STEP, SOURCE = (os.path.abspath(p) for p in sys.argv[1:4])
SCHEMAS = os.path.join(SOURCE, "docs", "schemas")
failures, passed = [], 0


def schema(name):
    with open(os.path.join(SCHEMAS, name + ".schema.json")) as f:
        s = json.load(f)
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def check(name, what, document):
    """Validates one document; every error is reported with its path."""
    global passed
    errors = sorted(schema(name).iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        for e in errors[:10]:
            failures.append(f"{what}: {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}")
    else:
        passed += 1
        print(f"  ok   {what} ({name}.schema.json)")


def run(*args, expect=0):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if r.returncode != expect:
        failures.append(f"{' '.join(args[1:4])}...: exit {r.returncode}, expected {expect}:\n{r.stdout[-2000:]}")
        return None
    return r.stdout


def json_of(what, text):
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        failures.append(f"{what}: not one JSON document ({e})")
        return None


def flip_a_bit(dump, step):
    """Flips the lowest bit of the last element of a dump's parameters at `step` (safetensors:
    8-byte header length, the header, then the data; the last 4 bytes are an fp32 element)."""
    path = os.path.join(dump, f"params_{step:08d}.safetensors")
    with open(path, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        b = f.read(1)
        f.seek(-4, os.SEEK_END)
        f.write(bytes([b[0] ^ 1]))


def main():
    work = tempfile.mkdtemp(prefix="mfsdp_schemas_")
    try:
        for what, args in [("plan, flat", ["--model", "tiny", "-w", "4"]),
                           ("plan, HSDP dedup", ["--model", "tiny", "-w", "4", "--replicas", "2", "--step-mode", "dedup"]),
                           ("plan, experts", ["--model", "tiny", "-w", "3", "--experts", "4", "--moe-intermediate", "32",
                                              "--expert-ranges", "2"]),
                           ("plan --recommend", ["--model", "llama3-8b", "-w", "64", "--recommend"])]:
            doc = json_of(what, run(MFSDP, "plan", "--json", *args))
            if doc is not None:
                check("plan", what, doc)
        doc = json_of("env", run(MFSDP, "env", "--json"))
        if doc is not None:
            check("env", "env", doc)
        for what, args in [("simulate, flat", ["-w", "2", "-w", "4"]),
                           ("simulate, HSDP", ["-w", "4", "--replicas", "2", "--placement", "owner"])]:
            doc = json_of(what, run(MFSDP, "simulate", "--model", "tiny", "--profile", "a100-8x-4hdr", "--json", *args))
            if doc is not None:
                for i, one in enumerate(doc if isinstance(doc, list) else [doc]):
                    check("simulate", f"{what} [{i}]", one)
        doc = json_of("verify", run(MFSDP, "verify", "-w", "2", "--steps", "2", "--json"))
        if doc is not None:
            check("verify", "verify", doc)

        metrics = os.path.join(work, "m.jsonl")
        ref, cand = os.path.join(work, "ref"), os.path.join(work, "cand")
        for d, extra in [(ref, ["--placement", "ddp"]), (cand, ["--metrics", metrics])]:
            run(MFSDP, "train", "-w", "2", "--steps", "2", "--dump-trajectory", d, "--dump-grads", *extra)
        if os.path.exists(metrics):
            with open(metrics) as f:
                lines = [json_of(f"--metrics line {i + 1}", line) for i, line in enumerate(f)]
            for i, line in enumerate(lines):
                if line is not None:
                    check("metrics", f"--metrics line {i + 1} of {len(lines)}", line)
        else:
            failures.append("train --metrics wrote no file")
        flipped = os.path.join(work, "flipped")
        shutil.copytree(cand, flipped)
        flip_a_bit(flipped, 2)
        tolerance = os.path.join(work, "tol.json")
        with open(tolerance, "w") as f:
            json.dump({"entries": [{"name": "one-bit", "reason": "the planted bit", "what": ["params"], "max_ulp": 1}]}, f)
        for what, b, tol, code in [("conform, equal", cand, "exact", 0), ("conform, one bit, exact", flipped, "exact", 1),
                                   ("conform, one bit, tolerance", flipped, tolerance, 0)]:
            report = os.path.join(work, "report.json")
            if run(MFSDP, "conform", ref, b, "--tolerance", tol, "--json", report, expect=code) is not None:
                with open(report) as f:
                    check("conform", what, json.load(f))
                os.remove(report)

        bench = os.path.join(work, "bench.json")
        if run(BENCH_STEP, "--models", "tiny", "--world-sizes", "2", "--steps", "1",
               "--benchmark_filter=placement:(owner|reconstruct)/", "--json", bench) is not None:
            with open(bench) as f:
                check("bench_step", "bench_step --json (tiny, W = 2, owner and reconstruct)", json.load(f))
        for name, path in [("bench_step", "results/cpu/bench_step.json"), ("peers", "results/cpu/peers.json"),
                           ("peers", "results/cpu/peers_comm_groups.json")]:
            with open(os.path.join(SOURCE, path)) as f:
                check(name, f"committed {path}", json.load(f))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f"  FAIL {f}")
    print(f"output_schemas: {passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
