#!/usr/bin/env python3
"""Checks that the Markdown documentation names only paths that exist (test docs.paths_exist).

Usage: check_doc_paths.py [REPO_ROOT]      (default: two folders above this script)
Exit code 0 when every check passes, 1 otherwise; each problem is printed as FILE:LINE: message.
Python 3 standard library only.

The documents: README.md, docs/*.md and every folder's README.md (any depth; build*/, .venv/ and
hidden folders are skipped). The repository's files: `git ls-files --cached --others
--exclude-standard` (tracked files plus new files not yet committed and not ignored), keeping those
that exist on disk; outside a git checkout, a walk of the tree with the same folders skipped.

Check 1, paths. Every inline code span (`...`) outside fenced code blocks, and every relative
Markdown link target [text](target), is a candidate. A code span is a path when it contains "/" or
ends in .cpp, .h, .py, .sh, .md or .json, and then must exist relative to the repository root or
to the document's own folder. Before the test, a span is normalised:
  - a trailing ":LINE" or ":LINE-LINE" and a "#anchor" are dropped;
  - "{a,b}" brace groups are expanded, and each expansion must exist;
  - "[x]" marks an optional part (`tiny_r2s2_<optimizer>[_bf16].json`): both the path with and
    without it must exist; "[...]" is never a glob character class here;
  - "<placeholder>" becomes "*".
A span that contains "*" or "?" after this is a glob: it passes when it matches at least one file
or folder. The exclusions, each for spans that are not repository paths:
  1. a span with a space (after placeholders are replaced) is a command line or prose;
  2. a span beginning with "-" is a flag;
  3. a span with "://" is a URL; a span beginning with "/" or "~" is a path on the machine
     (/usr/include), not in the repository;
  4. a span beginning with "build/", "build-" or ".venv/" names a build output or the virtual
     environment scripts/setup.sh creates: not checked;
  5. a span with a placeholder component, one written in capitals (CKPT/, D/lock, step_N/,
     rank_R.json: a component that is all capitals and digits, or contains a lone capital
     letter between "_", "-" or "." separators), names a file a run writes: not checked;
  6. a span without one of the file extensions above whose first component exists neither at the
     repository root nor in the document's folder is a ratio or an alternative ("fp32/bf16",
     "owner/even"), not a path;
  7. a span wholly in angle brackets (`<ATen/cuda/CUDAContext.h>`) is the include spelling of a
     system or library header;
  8. RUN_OUTPUTS below lists the few names of files and folders that runs write and that are not
     committed (a checkpoint's layout.json, the GPU scripts' output folders); each entry says who
     writes it. Prefer naming such a file by a placeholder path (CKPT/step_N/...) to adding one.
Links: a relative target (not http(s)://, mailto: or "#...") must exist; when it names a .md file
and has a "#anchor", the anchor must be one of that file's headings (GitHub's slugs).

Check 2, folder maps. For every folder with a README.md (other than the root), every repository
file in that folder and its sub-folders (a sub-folder with its own README.md is covered by that one
instead) must be named by the README: its path relative to the folder or its basename appears in
the text as a whole word, or a code span of the README (braces expanded, as a glob relative to the
folder) matches it.

Check 3, the mechanism table. docs/architecture.md must have the heading "## Mechanism → file"
(other documents link to architecture.md#mechanism--file) followed by a table; every row must name,
in a code span, at least one file that exists.
"""

import fnmatch
import glob
import os
import re
import subprocess
import sys

EXTENSIONS = (".cpp", ".h", ".py", ".sh", ".md", ".json")
SKIP_DIRS = {"build", ".venv", ".git", "__pycache__", ".gpu-deps"}
MECHANISM_HEADING = "## Mechanism → file"
RUN_OUTPUTS = {
    "layout.json",    # every checkpoint's CKPT/step_N/layout.json (docs/checkpoints.md)
    "results/gpu/",   # written by scripts/gpu_run.sh on a CUDA machine; none committed yet
    "golden/cuda/",   # likewise
}

problems = []


def problem(path, line, message):
    problems.append(f"{path}:{line}: {message}")


def skipped_dir(name):
    return name in SKIP_DIRS or name.startswith("build-") or name.startswith(".")


def repo_files(root):
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True, text=True).stdout
        files = [f for f in out.splitlines() if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not skipped_dir(d)]
            for f in filenames:
                files.append(os.path.relpath(os.path.join(dirpath, f), root))
    files = [f.replace(os.sep, "/") for f in files]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))


def documents(root, files):
    docs = {"README.md"} | {f for f in files if re.fullmatch(r"docs/[^/]+\.md", f)}
    docs |= {f for f in files if f.endswith("/README.md")
             and not any(skipped_dir(part) for part in f.split("/")[:-1])}
    return sorted(d for d in docs if os.path.isfile(os.path.join(root, d)))


def expand_braces(s):
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(s[:m.start()] + alt + s[m.end():]))
    return out


def expand_optional(s):
    m = re.search(r"\[([^\[\]]*)\]", s)
    if not m:
        return [s]
    return expand_optional(s[:m.start()] + m.group(1) + s[m.end():]) + \
        expand_optional(s[:m.start()] + s[m.end():])


def is_glob(s):
    return "*" in s or "?" in s


def exists(path, bases):
    """path exists (or, as a glob, matches something) relative to one of bases."""
    for base in bases:
        full = os.path.normpath(os.path.join(base, path))
        if is_glob(path):
            if glob.glob(full, recursive=True):
                return True
        elif os.path.exists(full):
            return True
    return False


PLACEHOLDER_COMPONENT = re.compile(r"^[A-Z][A-Z0-9_]*$|(^|[_.-])[A-Z]($|[_.-])")


def prose_lines(text):
    """(line number, line) for every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def code_spans(text):
    """(line number, span) for every inline code span outside fenced blocks."""
    return [(number, m.group(2).strip()) for number, line in prose_lines(text) for m in re.finditer(r"(`+)(.+?)\1", line)]


def links(text):
    out = []
    for number, line in prose_lines(text):
        line = re.sub(r"(`+).+?\1", "", line)  # a link inside a code span is not a link
        for m in re.finditer(r"\]\(([^()\s]+)\)", line):
            out.append((number, m.group(1)))
    return out


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    found, counts, fenced = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            m = re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m and not fenced:
                base = slug(m.group(2))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
    return found


def check_span(root, doc, number, span):
    if re.fullmatch(r"<[^<>\s]+>", span):
        return  # rule 7: a library header's include spelling
    if span in RUN_OUTPUTS:
        return  # rule 8
    token = re.sub(r"#.*$", "", span)
    token = re.sub(r":\d+(-\d+)?$", "", token)
    token = re.sub(r"<[^<>]*>", "*", token)
    if not token or " " in token or "\t" in token:
        return  # rule 1: a command line or prose
    if token.startswith("-"):
        return  # rule 2: a flag
    if "://" in token or token.startswith("/") or token.startswith("~"):
        return  # rule 3: a URL or a path outside the repository
    if not ("/" in token or token.endswith(EXTENSIONS)):
        return  # not a path at all (a name, a dotted identifier)
    if token.startswith(("build/", "build-", ".venv/")) or token in ("build", ".venv"):
        return  # rule 4: build outputs
    components = [c for c in token.split("/") if c]
    if any(PLACEHOLDER_COMPONENT.search(c) for c in components):
        return  # rule 5: a file a run writes, written with a placeholder
    doc_dir = os.path.dirname(os.path.join(root, doc))
    bases = [root, doc_dir]
    if not token.endswith(EXTENSIONS) and components and components[0] not in (".", ".."):
        first = components[0]
        if not any(exists(first, [b]) or (is_glob(first) and exists(first, [b])) for b in bases):
            return  # rule 6: a ratio or an alternative, not a path
    missing = [p for alt in expand_braces(token) for p in expand_optional(alt)
               if not exists(p, bases)]
    for p in missing:
        what = "matches no file" if is_glob(p) else "does not exist"
        shown = f"`{span}`" if p == span else f"`{span}` ({p})"
        problem(doc, number, f"path {shown} {what} (relative to the repository root or to {os.path.dirname(doc) or '.'}/)")


def check_link(root, doc, number, target):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        if target.startswith("#"):
            if target[1:] not in anchors(os.path.join(root, doc)):
                problem(doc, number, f"link target {target} is no heading of this document")
        return
    path, _, anchor = target.partition("#")
    full = os.path.normpath(os.path.join(os.path.dirname(os.path.join(root, doc)), path))
    if not os.path.exists(full):
        problem(doc, number, f"link target {target} does not exist")
        return
    if anchor and full.endswith(".md") and anchor not in anchors(full):
        problem(doc, number, f"link target {target}: no heading of {os.path.relpath(full, root)} has the anchor #{anchor}")


def check_paths(root, docs):
    for doc in docs:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = f.read()
        for number, span in code_spans(text):
            check_span(root, doc, number, span)
        for number, target in links(text):
            check_link(root, doc, number, target)


def check_folder_maps(root, files):
    readme_dirs = sorted({os.path.dirname(f) for f in files
                          if f.endswith("/README.md")
                          and not any(skipped_dir(p) for p in f.split("/")[:-1])})
    for folder in readme_dirs:
        readme = f"{folder}/README.md"
        with open(os.path.join(root, readme), encoding="utf-8") as f:
            text = f.read()
        globs = []
        for _, span in code_spans(text):
            for alt in expand_braces(span):
                for p in expand_optional(re.sub(r"<[^<>]*>", "*", alt)):
                    globs.append(p)
        for path in files:
            if not path.startswith(folder + "/") or path == readme:
                continue
            # The nearest README covers a file.
            owner = os.path.dirname(path)
            while owner != folder and not os.path.isfile(os.path.join(root, owner, "README.md")):
                owner = os.path.dirname(owner)
            if owner != folder:
                continue
            rel = path[len(folder) + 1:]
            base = os.path.basename(path)
            named = any(re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])", text)
                        for name in (rel, base))
            if not named:
                named = any(p and (fnmatch.fnmatchcase(rel, p) or p == rel) for p in globs)
            if not named:
                problem(readme, 1, f"does not name {rel} ({path}), a file of {folder}/")


def check_mechanism_table(root):
    doc = "docs/architecture.md"
    full = os.path.join(root, doc)
    if not os.path.isfile(full):
        problem(doc, 1, "missing")
        return
    with open(full, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        start = lines.index(MECHANISM_HEADING)
    except ValueError:
        problem(doc, 1, f"no heading '{MECHANISM_HEADING}'")
        return
    table = []  # (line number, line) of the first table after the heading
    for number in range(start + 2, len(lines) + 1):
        line = lines[number - 1]
        if line.startswith("|"):
            table.append((number, line))
        elif table or line.startswith("#"):
            break
    rows = 0
    for number, line in table[2:]:  # after the header and the separator
        rows += 1
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        existing = [alt for span in re.findall(r"`([^`]+)`", line)
                    for alt in expand_braces(span)
                    if os.path.isfile(os.path.join(root, re.sub(r":\d+$", "", alt)))]
        if not cells[0]:
            problem(doc, number, "a mechanism-table row without a mechanism")
        if not existing:
            problem(doc, number, f"mechanism-table row '{cells[0]}' names no existing file")
    if rows == 0:
        problem(doc, start + 1, "the mechanism table has no rows")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    files = repo_files(root)
    docs = documents(root, files)
    check_paths(root, docs)
    check_folder_maps(root, files)
    check_mechanism_table(root)
    for p in problems:
        print(p)
    if problems:
        print(f"doc-paths: {len(problems)} problem(s) in {len(docs)} documents")
        return 1
    print(f"doc-paths: {len(docs)} documents, every path exists, every folder README names its files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
