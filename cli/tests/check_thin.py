#!/usr/bin/env python3
"""The CLI stays thin: no file in cli/ (its sources and headers, not tests/) over 250 lines.

Every command parses flags and calls a library function that has its own tests; logic that grows
a command past the limit belongs in that library.

  check_thin.py ROOT       checks ROOT/cli; exit 1 naming each file over the limit
  check_thin.py --planted  checks a scratch tree holding a 251-line command (it must be refused)
"""
import pathlib
import sys
import tempfile

LIMIT = 250


def problems(root: pathlib.Path) -> list[str]:
    out = []
    for f in sorted((root / "cli").iterdir()):
        if f.suffix not in (".cpp", ".h") or not f.is_file():
            continue
        n = len(f.read_text(encoding="utf-8").splitlines())
        if n > LIMIT:
            out.append(f"cli/{f.name}: {n} lines (the limit is {LIMIT}: move the logic into a library with its own tests)")
    return out


def main() -> int:
    if sys.argv[1:] == ["--planted"]:
        with tempfile.TemporaryDirectory() as d:
            root = pathlib.Path(d)
            (root / "cli").mkdir()
            (root / "cli" / "cmd_short.cpp").write_text("int x;\n" * LIMIT)
            (root / "cli" / "cmd_long.cpp").write_text("int y;\n" * (LIMIT + 1))
            found = problems(root)
            if len(found) == 1 and found[0].startswith("cli/cmd_long.cpp: 251 lines"):
                print("thin-cli: the planted 251-line command was refused, the 250-line one accepted")
                return 0
            print("thin-cli: the check missed the planted file or refused the one at the limit:", found)
            return 1
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    found = problems(root)
    for p in found:
        print(p)
    if found:
        return 1
    files = [f for f in (root / "cli").iterdir() if f.suffix in (".cpp", ".h")]
    print(f"thin-cli: {len(files)} files of cli/, none over {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
