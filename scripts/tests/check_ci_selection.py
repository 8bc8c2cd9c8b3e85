#!/usr/bin/env python3
"""What CI runs is what the documents say it runs (test `ci.selection_is_as_documented`).

ctest adds the labels a discovered test is given and never removes one, so a test first put in
`exhaustive` (outside CI) and later "relabelled" stays outside CI: the 10 HSDP mesh cases that
docs/testing.md keeps in CI were all left out that way. This reads the configured suite
(`ctest -N --show-only=json-v1`) and checks, for the selection scripts/test.sh makes (every test
without the labels exhaustive, fresh_seeds or optional_peers), the counts the documents state:

  - 10 `Meshes/Hsdp.*` cases in CI and 30 in exhaustive;
  - every row of both designed arrays in CI (`Array/GridRow.*`, `Array/RuntimeGridRow.*`), none in
    exhaustive; the runtime grid's whole product only in exhaustive;
  - the shorter kill loop and fuzz run in CI, the longer ones outside;
  - no test of label quick outside CI (quick is a subset of what CI runs);
  - the quick label is docs/testing.md's table "What `quick` holds": each row's count and TIMEOUT,
    every quick test in exactly one row.

usage: check_ci_selection.py BUILD_DIR GRID_ARRAY RUNTIME_ARRAY [TESTING_MD]
"""
import json
import os
import re
import subprocess
import sys

OUTSIDE_CI = {"exhaustive", "fresh_seeds", "optional_peers"}


def quick_table(path):
    """docs/testing.md's rows under "What `quick` holds": (kind, binary or name regex, count, all,
    TIMEOUT). A regex's '|' is written '\\|' there (a table cell)."""
    rows, inside = [], False
    for line in open(path):
        if line.startswith("#"):
            inside = "What `quick` holds" in line
            continue
        m = re.match(r"\| (binary|names) `((?:[^`])+)`[^|]*\| (all )?([0-9]+) \| ([0-9]+) \|$", line.strip()) if inside else None
        if m:
            rows.append((m[1], m[2].replace("\\|", "|"), int(m[4]), bool(m[3]), float(m[5])))
    return rows


def main():
    build, grid_array, runtime_array = sys.argv[1:4]
    testing_md = sys.argv[4] if len(sys.argv) > 4 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "testing.md")
    out = subprocess.run(["ctest", "--test-dir", build, "-N", "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    tests = []
    for t in json.loads(out)["tests"]:
        labels = set()
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                labels = set(p["value"])
        tests.append((t["name"].split("  #")[0], labels))
    in_ci = [n for n, l in tests if not l & OUTSIDE_CI]
    outside = [n for n, l in tests if l & OUTSIDE_CI]
    problems = []

    def expect(what, got, want):
        if got != want:
            problems.append(f"{what}: {got}, expected {want}")

    def count(names, prefix):
        return sum(n.startswith(prefix) for n in names)

    expect("HSDP mesh cases in CI", count(in_ci, "Meshes/Hsdp."), 10)
    expect("HSDP mesh cases in exhaustive", count(outside, "Meshes/Hsdp."), 30)
    grid_rows = len(json.load(open(grid_array))["rows"])
    runtime = json.load(open(runtime_array))
    expect("differential array rows in CI", count(in_ci, "Array/GridRow."), grid_rows)
    expect("differential array rows outside CI", count(outside, "Array/GridRow."), 0)
    expect("runtime array rows in CI", count(in_ci, "Array/RuntimeGridRow."), len(runtime["rows"]))
    expect("runtime array rows outside CI", count(outside, "Array/RuntimeGridRow."), 0)
    product = 1
    for values in runtime["factors"].values():
        product *= len(values)
    expect("runtime product cases in exhaustive", count(outside, "Product/RuntimeGridRow."), product)
    expect("runtime product cases in CI", count(in_ci, "Product/RuntimeGridRow."), 0)
    for name in ("regression.kill_loop_20", "fuzz.checkpoint_readers_asan"):
        expect(f"{name} in CI", name in in_ci, True)
    for name in ("regression.kill_loop_50", "fuzz.checkpoint_readers_asan_40000"):
        expect(f"{name} outside CI", name in outside, True)
    # The quick label against docs/testing.md's table "What `quick` holds": every quick test in
    # exactly one row, each row's count and TIMEOUT (a list passed as gtest_discover_tests(...
    # LABELS "a;quick" TIMEOUT t) kept only its first word and lost the TIMEOUT; properties set
    # before the tests were discovered reached none).
    binary_of, timeout_of = {}, {}
    for t in json.loads(out)["tests"]:
        name = t["name"].split("  #")[0]
        binary_of[name] = os.path.basename(t.get("command", [""])[0])
        timeout_of[name] = next((p["value"] for p in t.get("properties", []) if p["name"] == "TIMEOUT"), None)
    rows = quick_table(testing_md)
    if not rows:
        problems.append(f"{testing_md}: no table under 'What `quick` holds'")
    quick = [n for n, l in tests if "quick" in l]
    claimed = {n: [] for n in quick}
    for kind, key, count, every, timeout in rows:
        if kind == "binary":
            of_binary = [n for n, _ in tests if binary_of[n] == key]
            matched = [n for n in quick if binary_of[n] == key]
            if every and len(matched) != len(of_binary):
                problems.append(f"binary {key}: {len(matched)} of its {len(of_binary)} tests are quick; the docs say all")
        else:
            matched = [n for n in quick if re.search(key, n)]
        expect(f"quick tests of {kind} {key}", len(matched), count)
        for n in matched:
            claimed[n].append(f"{kind} {key}")
            if timeout_of[n] != timeout:
                problems.append(f"{n} ({kind} {key}) has TIMEOUT {timeout_of[n]}, the docs say {timeout}")
    for n, where in claimed.items():
        if len(where) != 1:
            problems.append(f"quick test {n} is in {len(where)} rows of the docs' table ({'; '.join(where) or 'none'})")
    for n, l in tests:
        if "quick" in l and l & OUTSIDE_CI:
            problems.append(f"{n} is labelled quick but is left out of CI ({', '.join(sorted(l))})")
    if problems:
        for p in problems:
            print("ci-selection:", p)
        return 1
    print(f"ci-selection: as documented: {len(in_ci)} tests in CI, {len(outside)} outside "
          f"(10 of 40 HSDP mesh cases, {grid_rows} + {len(runtime['rows'])} array rows, {product} runtime product cases outside)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
