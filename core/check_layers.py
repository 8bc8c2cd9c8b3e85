#!/usr/bin/env python3
"""The include graph of core/ points one way (test `core.layers`, label unit).

What must not happen: a file of core/ reaching up, to the folders built on it (oracle/,
reference/, harness/, sim/, cli/, testing/, ...) or to a layer of core/ above its own, so that a
lower layer can no longer be built, tested or read without the ones above it. It happened once:
the even-matrix step (the interface the baselines implement) took the whole OwnerRuntime, so the
interface the runtime consumes included the runtime.

Rules, over every `#include "..."` of every .h/.cpp under core/ (a folder's tests/ may include any
layer of core/, never above core/):
  1. a core/ file includes only core/ headers (and system/library headers);
  2. core/A includes core/B only when B is A or below A in LAYERS (dist and optim are peers: neither
     includes the other);
  3. inside a folder listed in WITHIN, a file includes only files before it in that folder's list,
     and names no class defined by a file after it (WITHIN_CLASSES).
Prints every violation as `path:line: ...` and exits 1 if there is any.
"""
import os
import re
import sys

# layer -> rank; a file may include its own layer and lower ranks; equal ranks (peers) may not mix.
LAYERS = {"util": 0, "plan": 1, "dist": 2, "optim": 2, "runtime": 3, "io": 4, "train": 5}
# Files of one folder, lowest first (by stem: x.h and x.cpp share a place).
WITHIN = {
    "runtime": ["param_map", "reduction", "unit", "even_matrix_step", "replica_sync", "owner_runtime"],
}
# Classes a later file of WITHIN defines, which earlier files must not name (a forward declaration
# would hide an upward dependency from rule 3).
WITHIN_CLASSES = {"owner_runtime": ["OwnerRuntime"]}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def main(root):
    core = os.path.join(root, "core")
    problems = []
    files = 0
    for dirpath, _, names in os.walk(core):
        for name in sorted(names):
            if not name.endswith((".h", ".cpp")):
                continue
            files += 1
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            parts = rel.split(os.sep)  # core, <layer>, [tests,] file
            layer = parts[1] if len(parts) > 2 else None
            is_test = "tests" in parts[2:-1]
            stem = os.path.splitext(name)[0]
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            for n, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                tparts = target.split("/")
                if tparts[0] != "core":
                    if len(tparts) > 1:  # a project path outside core/ (library headers have no such form here)
                        problems.append(f"{rel}:{n}: includes {target}: core/ includes nothing above core/")
                    continue
                if is_test or layer not in LAYERS or len(tparts) < 3:
                    continue
                tlayer = tparts[1]
                if tlayer not in LAYERS:
                    problems.append(f"{rel}:{n}: includes {target}: core/{tlayer} is not a layer of core/ (LAYERS)")
                    continue
                if tlayer != layer and LAYERS[tlayer] >= LAYERS[layer]:
                    problems.append(f"{rel}:{n}: includes {target}: core/{layer} may include only layers below it "
                                    f"(util <- plan <- dist, optim <- runtime <- io <- train)")
                    continue
                if tlayer == layer and layer in WITHIN and stem in WITHIN[layer]:
                    order = WITHIN[layer]
                    tstem = os.path.splitext(tparts[-1])[0]
                    if tstem in order and order.index(tstem) > order.index(stem):
                        problems.append(f"{rel}:{n}: includes {target}: in core/{layer}, {stem} is below {tstem} "
                                        f"({' <- '.join(order)})")
            if not is_test and layer in WITHIN and stem in WITHIN[layer]:
                order = WITHIN[layer]
                for later in order[order.index(stem) + 1:]:
                    for cls in WITHIN_CLASSES.get(later, []):
                        for n, line in enumerate(lines, 1):
                            code = line.split("//")[0]
                            if re.search(r"\b%s\b" % re.escape(cls), code):
                                problems.append(f"{rel}:{n}: names {cls} (core/{layer}/{later}), which is above {stem}")
    for p in problems:
        print(p)
    if files == 0:
        print(f"layers: no source files under {core}")
        return 1
    if problems:
        print(f"layers: {len(problems)} violation(s) in {files} files")
        return 1
    print(f"layers: {files} files of core/ include only downwards")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
