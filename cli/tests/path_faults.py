#!/usr/bin/env python3
"""The path rule's fault suite (docs/files.md): generated cases, each checked against a tree hash.

path_faults.py MFSDP SOURCE_DIR [--only FAMILY]

One sandbox holds a trained checkpoint directory, a corpus, a dashboard input, a profile and an
assignment. From them the generators make:
  alias     every output flag (export --out, train --metrics, dashboard -o, calibrate --out,
            conform --json) aimed at every file the command reads and every file of a checkpoint
            directory, spelled plainly, with ./, through .., absolutely, through a symbolic link to
            the file, through a symbolic link to a directory above it, and as a new file inside a
            checkpoint directory;
  fifo      every file a command reads replaced by a FIFO (checkpoint inspect, export, resume,
            --data, --profile, --assign, --model, dashboard, --tolerance);
  layout    a sealed checkpoint downgraded to format 1 (its seal removed, then edited), a `latest`
            without its CRC, and resealed layouts with a garbage placement, a negative vocab or a
            step unlike its directory;
  symlink   a checkpoint's step directories, `latest` and `lock` replaced by symbolic links to
            another run's files, under resume with --checkpoint-every 1 and --overwrite-checkpoints;
  json      a 100000-deep value in every JSON a command reads;
  flags     integers with leading zeros (decimal) and other bases (refused); empty paths (refused).
Each case must end within its timeout, with the expected exit code and message, without a crash
(no signal, no backtrace), and with nothing in the sandbox changed but the files the case was
asked to write (hash of every path's type, bytes and link target, before and after). Positive
controls (outputs outside every input and checkpoint) must succeed, so a suite that refuses
everything fails too.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zlib

MFSDP, SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
ONLY = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
failures, passed = [], 0


def tree_hash(root):
    """Every path under root: its type and bytes, or its link target (links never followed)."""
    h = hashlib.sha256()
    for d, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            st = os.lstat(p)
            h.update(os.path.relpath(p, root).encode() + b"\0")
            if os.path.islink(p):
                h.update(b"L" + os.readlink(p).encode())
            elif os.path.isdir(p):
                h.update(b"D")
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(b"F" + hashlib.sha256(f.read()).digest())
            else:
                h.update(b"S%o" % st.st_mode)
    return h.hexdigest()


def run(args, cwd, timeout=60):
    try:
        p = subprocess.run([MFSDP] + args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return None, "TIMED OUT after %d s (a hang)" % timeout


def case(family, name, args, cwd, root, expect_code, expect_text, allowed=(), timeout=60):
    """Runs one case; `allowed`: paths (relative to root) the case may create or change."""
    global passed
    if ONLY and family != ONLY:
        return
    before = tree_hash(root)
    code, out = run(args, cwd, timeout)
    for a in allowed:
        p = os.path.join(root, a)
        if os.path.lexists(p):
            os.remove(p)
    after = tree_hash(root)
    problems = []
    if code is None:
        problems.append(out)
    elif code < 0 or code >= 128:
        problems.append("killed by a signal or crashed (exit %d)" % code)
    elif expect_code == "fail" and code == 0:
        problems.append("exit 0, expected a refusal")
    elif expect_code != "fail" and code != expect_code:
        problems.append("exit %d, expected %s" % (code, expect_code))
    if code is not None and expect_text and not any(t in out for t in expect_text):
        problems.append("output names none of %s" % (expect_text,))
    if "Exception raised from" in out or "frame #" in out:
        problems.append("a libtorch backtrace reached the user")
    if before != after:
        problems.append("the sandbox changed (something it was not asked to write was written or removed)")
    label = "%s/%s" % (family, name)
    if problems:
        failures.append(label)
        print("FAIL %s: %s\n  $ mfsdp %s\n  %s" % (label, "; ".join(problems), " ".join(args),
                                                   out.strip().replace("\n", "\n  ")[-1500:]))
    else:
        passed += 1
        print("ok   %s" % label)


def must(args, cwd):
    code, out = run(args, cwd, 300)
    if code != 0:
        sys.exit("path_faults: setting up failed: mfsdp %s\n%s" % (" ".join(args), out))


def files_under(root, top):
    out = []
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


REFUSED = ["refusing to write", "is a symbolic link", "inside checkpoint directory", "this command's input"]


def main():
    box = tempfile.mkdtemp(prefix="mfsdp_paths_")
    try:
        S = os.path.join(box, "s")  # the sandbox every case runs in (and whose tree is hashed)
        os.makedirs(S)
        must(["train", "-w", "2", "--steps", "2", "--checkpoint-dir", "ck", "--checkpoint-every", "1"], S)
        must(["train", "-w", "1", "--steps", "1", "--dump-trajectory", "dumpA"], S)
        must(["train", "-w", "1", "--steps", "1", "--dump-trajectory", "dumpB"], S)
        with open(os.path.join(S, "corpus.txt"), "w") as f:
            f.write("the quick brown fox jumps over the lazy dog. " * 40)
        shutil.copy(os.path.join(SOURCE, "results/cpu/bench_step.json"), os.path.join(S, "result.json"))
        shutil.copy(os.path.join(SOURCE, "sim/profiles/cpu-local.json"), os.path.join(S, "profile.json"))
        with open(os.path.join(S, "tolerance.json"), "w") as f:
            json.dump({"entries": [{"name": "all", "reason": "test", "what": "all", "tensors": ".*", "max_ulp": 0}]}, f)
        os.makedirs(os.path.join(S, "out"))
        os.symlink("ck", os.path.join(S, "cklink"))  # a directory link into the checkpoint
        step = sorted(d for d in os.listdir(os.path.join(S, "ck")) if d.startswith("step_"))[-1]

        # ---- alias: outputs aimed at inputs and at checkpoint files, under every spelling.
        commands = {
            "export": (lambda o: ["export", "ck", "--out", o], files_under(S, "ck")),
            "metrics": (lambda o: ["train", "-w", "1", "--steps", "1", "--data", "corpus.txt", "--metrics", o],
                        ["corpus.txt"] + files_under(S, "ck")),
            "dashboard": (lambda o: ["dashboard", "result.json", "-o", o], ["result.json"] + files_under(S, "ck")),
            "calibrate": (lambda o: ["calibrate", "--out", o], ["ck/latest", "ck/lock"]),
            "conform": (lambda o: ["conform", "dumpA", "dumpB", "--json", o], ["dumpA/trajectory.json"] + files_under(S, "ck")),
        }
        for cmd, (make, targets) in commands.items():
            for t in targets:
                d, base = os.path.split(t)
                spellings = {"plain": t, "dot": "./" + t, "dotdot": os.path.join(d, "..", os.path.basename(d), base) if d else "./" + base,
                             "absolute": os.path.join(S, t)}
                if t.startswith("ck/"):
                    spellings["dirlink"] = "cklink/" + t[3:]
                link = "out/link_" + t.replace("/", "_")
                if not os.path.lexists(os.path.join(S, link)):
                    os.symlink(os.path.join(S, t), os.path.join(S, link))
                spellings["filelink"] = link
                # Every spelling for the command's own inputs and one checkpoint file of each kind;
                # the plain spelling for the rest (the spellings resolve alike).
                kind_seen = t.startswith("ck/") and any(
                    u != t and u.startswith("ck/") and os.path.basename(u) == base and targets.index(u) < targets.index(t)
                    for u in targets)
                for how, o in spellings.items():
                    if kind_seen and how != "plain":
                        continue
                    expect = REFUSED if cmd != "conform" else REFUSED + ["inside the dump", "refus"]
                    # An output refused up front is a mistake of the command line: exit 2 in
                    # every command (it was 1 from export, dashboard and calibrate).
                    case("alias", "%s/%s/%s" % (cmd, how, t), make(o), S, S, 2, expect)
            for new in ["ck/new.out", "ck/%s/new.out" % step, "cklink/new.out"]:
                case("alias", "%s/new-inside/%s" % (cmd, new), make(new), S, S, 2, REFUSED)
        # conform --json aimed at its own tolerance file: refused before comparing (it printed the
        # verdict, then failed to write, exit 1).
        if not ONLY or ONLY == "alias":
            with open(os.path.join(S, "out", "tol_ok.json"), "w") as f:
                json.dump({"entries": [{"name": "all", "reason": "test", "max_ulp": 0}]}, f)
        case("alias", "conform/onto-its-tolerance", ["conform", "dumpA", "dumpB", "--tolerance", "out/tol_ok.json", "--json",
                                                     "out/tol_ok.json"], S, S, 2, ["it is this command's input"])
        # Positive controls: the same commands writing a new file outside everything succeed.
        for cmd in ["export", "metrics", "dashboard", "conform"]:
            case("alias", "%s/control" % cmd, commands[cmd][0]("out/new.%s" % cmd), S, S, 0,
                 [], allowed=["out/new.%s" % cmd])

        # ---- fifo: every file a command reads replaced by a FIFO, in a copy of the sandbox.
        def with_fifo(name, rel, args, expect=("not a regular file",)):
            F = os.path.join(box, "fifo")
            shutil.rmtree(F, ignore_errors=True)
            shutil.copytree(S, F, symlinks=True)
            os.remove(os.path.join(F, rel))
            os.mkfifo(os.path.join(F, rel))
            case("fifo", name, args, F, F, "fail", list(expect), allowed=["out/x"], timeout=30)

        ck_files = ["ck/latest", "ck/%s/layout.json" % step] + [f for f in files_under(S, "ck/" + step) if f.endswith(".safetensors")]
        for f in ck_files:
            with_fifo("inspect/" + f, f, ["checkpoint", "inspect", "ck"])
            with_fifo("export/" + f, f, ["export", "ck", "--out", "out/x"])
            with_fifo("resume/" + f, f, ["train", "-w", "2", "--steps", "3", "--resume-from", "ck"])
        with_fifo("data", "corpus.txt", ["train", "--steps", "1", "--data", "corpus.txt"])
        with_fifo("profile", "profile.json", ["simulate", "--model", "tiny", "-w", "2", "--profile", "profile.json"])
        with_fifo("assign", "profile.json", ["plan", "--model", "tiny", "-w", "2", "--planner", "explicit", "--assign", "profile.json"])
        with_fifo("model", "profile.json", ["plan", "--model", "profile.json", "-w", "2"])
        with_fifo("dashboard", "result.json", ["dashboard", "result.json", "-o", "out/x"])
        with_fifo("tolerance", "tolerance.json", ["conform", "dumpA", "dumpB", "--tolerance", "tolerance.json"])
        with_fifo("trajectory", "dumpA/trajectory.json", ["conform", "dumpA", "dumpB"])

        # ---- symlink: a checkpoint whose entries are links to another run's files.
        victim = os.path.join(box, "victim")
        shutil.copytree(os.path.join(S, "ck"), victim)
        steps = sorted(d for d in os.listdir(os.path.join(S, "ck")) if d.startswith("step_"))
        for mode, extra in [("resume", ["--resume-from", "v/" + steps[0], "--checkpoint-every", "1"]),
                            ("overwrite", ["--overwrite-checkpoints", "--checkpoint-every", "1"])]:
            for linked in steps[1:] + ["latest", "lock"]:
                V = os.path.join(box, "v_root")
                shutil.rmtree(V, ignore_errors=True)
                shutil.copytree(os.path.join(S, "ck"), os.path.join(V, "v"))
                target = os.path.join(V, "v", linked)
                shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
                os.symlink(os.path.join(victim, linked), target)
                before = tree_hash(victim)
                if ONLY and ONLY != "symlink":
                    continue
                code, out = run(["train", "-w", "2", "--steps", "3", "--checkpoint-dir", "v"] + extra, V, 120)
                label = "symlink/%s/%s" % (mode, linked)
                problems = []
                if tree_hash(victim) != before:
                    problems.append("files outside the checkpoint directory changed")
                if code is None or code < 0 or code >= 128:
                    problems.append("hang or crash (%s)" % code)
                if linked == "latest" and code != 0 and mode == "resume":
                    pass  # refusing a linked `latest` is as good as replacing the link
                if problems:
                    failures.append(label)
                    print("FAIL %s: %s\n  %s" % (label, "; ".join(problems), out.strip()[-800:]))
                else:
                    global passed
                    passed += 1
                    print("ok   %s (exit %s)" % (label, code))

        # ---- json: a 100000-deep value in every JSON a command reads.
        deep = "[" * 100000 + "]" * 100000
        J = os.path.join(box, "json")

        def with_deep(name, rel, args, text, expect=("nested deeper than 64",)):
            shutil.rmtree(J, ignore_errors=True)
            shutil.copytree(S, J, symlinks=True)
            with open(os.path.join(J, rel), "w") as f:
                f.write(text)
            case("json", name, args, J, J, "fail", list(expect), allowed=["out/x"])

        with_deep("model", "profile.json", ["plan", "--model", "profile.json", "-w", "2"], '{"shape": %s}' % deep)
        with_deep("assign", "profile.json", ["plan", "--model", "tiny", "-w", "2", "--planner", "explicit", "--assign", "profile.json"],
                  '{"a": %s}' % deep)
        with_deep("profile", "profile.json", ["simulate", "--model", "tiny", "-w", "2", "--profile", "profile.json"], '{"a": %s}' % deep)
        with_deep("dashboard", "result.json", ["dashboard", "result.json", "-o", "out/x"], '{"format": %s}' % deep)
        with_deep("tolerance", "tolerance.json", ["conform", "dumpA", "dumpB", "--tolerance", "tolerance.json"], '{"entries": %s}' % deep)
        with_deep("trajectory", "dumpA/trajectory.json", ["conform", "dumpA", "dumpB"], '{"header": %s}' % deep)
        with_deep("layout", "ck/%s/layout.json" % step, ["checkpoint", "inspect", "ck/" + step], '{"model": %s}' % deep)

        # ---- layout: downgrades and values outside their domains, resealed so only the rule stops them.
        def reseal(text):
            key = '"layout_crc32": "'
            at = text.index(key) + len(key)
            zeroed = text[:at] + "00000000" + text[at + 8:]
            return text[:at] + "%08x" % (zlib.crc32(zeroed.encode()) & 0xFFFFFFFF) + text[at + 8:]

        L = os.path.join(box, "layout")

        def with_layout(name, edit, expect, latest_edit=None, args=None):
            shutil.rmtree(L, ignore_errors=True)
            shutil.copytree(S, L, symlinks=True)
            lp = os.path.join(L, "ck", step, "layout.json")
            with open(lp) as f:
                text = f.read()
            with open(lp, "w") as f:
                f.write(edit(text))
            if latest_edit:
                with open(os.path.join(L, "ck", "latest")) as f:
                    lt = f.read()
                with open(os.path.join(L, "ck", "latest"), "w") as f:
                    f.write(latest_edit(lt))
            for cmd in args or (["checkpoint", "inspect", "ck/" + step], ["export", "ck/" + step, "--out", "out/x"]):
                case("layout", name + "/" + cmd[0], cmd, L, L, "fail", expect, allowed=["out/x"])

        def unseal(text):  # format 1, seal removed, then a rank file's CRC edited
            j = json.loads(text)
            j["format_version"] = 1
            del j["layout_crc32"]
            j["manifest"][0]["crc32"] = (j["manifest"][0]["crc32"] + 1) % (1 << 32)
            return json.dumps(j, indent=1) + "\n"

        def resealed(field, value):
            def edit(text):
                j = json.loads(text)
                cur = j
                for k in field[:-1]:
                    cur = cur[k]
                cur[field[-1]] = value
                return reseal(json.dumps(j, indent=1) + "\n")
            return edit

        with_layout("format1-unsealed", unseal, ["downgraded", "carries a layout CRC", "is sealed"])
        with_layout("format1-unsealed-latest-too", unseal, ["downgraded", "is sealed", "format 3 and later", "format 4 and later"],
                    latest_edit=lambda t: t.split("\n")[0] + "\n")
        with_layout("latest-without-crc", lambda t: t, ["must carry 'layout_crc32'"], latest_edit=lambda t: t.split("\n")[0] + "\n",
                    args=[["checkpoint", "inspect", "ck"], ["export", "ck", "--out", "out/x"]])
        with_layout("placement-garbage", resealed(["placement"], "garbage"), ["not a placement that writes checkpoints"])
        with_layout("vocab-negative", resealed(["model", "vocab"], -3), ["vocab", "not a positive integer"])
        with_layout("step-unlike-directory", resealed(["step"], 7), ["says step 7 but its directory is"])
        with_layout("shard-group-unlike-plan", resealed(["mesh", "shard_group"], 3), ["shard_group", "differs from the plan's world size"])
        # A re-sealed schedule record outside its rules: refused by every reader (inspect accepted
        # it, and training stopped with a libtorch backtrace naming a command-line flag).
        for name, record, expect in [
                ("kind-unknown", {"kind": "bogus", "warmup_steps": 0, "steps_taken": 1}, ["lr_schedule", "bogus"]),
                ("decay-zero", {"kind": "warmup-cosine", "warmup_steps": 0, "decay_steps": 0, "min_lr_ratio": 0.0, "steps_taken": 1},
                 ["lr_schedule", "decay_steps must be at least 1"]),
                ("ratio-two", {"kind": "warmup-cosine", "warmup_steps": 0, "decay_steps": 2, "min_lr_ratio": 2.0, "steps_taken": 1},
                 ["lr_schedule", "min_lr_ratio must be a number in [0, 1]"]),
                ("taken-negative", {"kind": "constant", "warmup_steps": 0, "steps_taken": -1}, ["lr_schedule", "steps_taken -1"])]:
            with_layout("lr-schedule-" + name, resealed(["lr_schedule"], record), expect)

        # ---- flags: integers are decimal, paths are never empty.
        for flags, same_as in [(["-w", "010"], ["-w", "10"]), (["-w", "+4"], ["-w", "4"])]:
            a = run(["plan", "--model", "tiny"] + flags, S)
            b = run(["plan", "--model", "tiny"] + same_as, S)
            untimed = lambda text: re.sub(r"planned in [0-9.]+ s", "planned in - s", text)  # the one line that varies
            case("flags", "decimal/" + "".join(flags), ["plan", "--model", "tiny"] + flags, S, S, 0,
                 [b[1].splitlines()[0]] if b[0] == 0 and untimed(a[1]) == untimed(b[1]) else ["(differs from %s)" % same_as])
        for value in ["0x10", "0b1", "0o7"]:
            case("flags", "base/" + value, ["train", "--steps", value], S, S, 2, ["must be a decimal integer, got " + value])
        # Unsigned options too (--seed is a uint64): 0x10 refused, 010 is ten (its first loss is
        # seed 10's, not seed 8's).
        case("flags", "base/--seed 0x10", ["train", "--seed", "0x10", "--steps", "1"], S, S, 2, ["must be a decimal integer, got 0x10"])
        if not ONLY or ONLY == "flags":
            loss = lambda seed: re.findall(r"loss ([0-9.]+)", run(["train", "-w", "1", "--steps", "1", "--seed", seed], S)[1])[:1]
            ten, octal, eight = loss("10"), loss("010"), loss("8")
            case("flags", "decimal/--seed 010", ["train", "-w", "1", "--steps", "1", "--seed", "010"], S, S, 0,
                 ["loss " + ten[0]] if ten and octal == ten and ten != eight else ["(seed 010 trains as seed %s)" % ("8" if octal == eight else "?")])
        for cmd in [["train", "--resume-from"], ["train", "--data"], ["train", "--metrics"], ["train", "--checkpoint-dir"],
                    ["export", "ck", "--out"], ["dashboard", "result.json", "-o"], ["plan", "-w", "2", "--model"],
                    ["simulate", "--model", "tiny", "-w", "2", "--profile"], ["checkpoint", "inspect"]]:
            case("flags", "empty/" + "_".join(cmd), cmd + [""], S, S, 2, ["empty value"])
    finally:
        shutil.rmtree(box, ignore_errors=True)
    print("path_faults: %d passed, %d failed%s" % (passed, len(failures), "" if not failures else ": " + ", ".join(failures)))
    return 1 if failures or passed == 0 else 0


sys.exit(main())
