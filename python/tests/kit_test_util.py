"""What the kit's test drivers share: torchrun on 127.0.0.1 at a free port, and lines written whole.

Under torchrun every rank writes to the same pipe. Where PYTHONUNBUFFERED is set (it is on this machine) print()
writes its text and its newline in two calls, so two ranks' lines can glue into one
("...replaced)kit_loops: refused: ..."): a driver that reads lines by their start then misses one.
say() writes the line and its newline in one call, which a pipe keeps whole (under PIPE_BUF bytes).
"""
import os
import socket
import subprocess
import sys


def say(line):
    sys.stdout.flush()  # what print() buffered goes first
    os.write(1, (line + "\n").encode())


def free_port():
    """A port free on 127.0.0.1 now (another process may take it before torchrun binds it: torchrun()
    retries that case)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(world_size, script, args, env=None, timeout=600, attempts=3):
    """script on world_size ranks over gloo on loopback; returns (exit code, output with stderr)."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", **(env or {}))
    for attempt in range(attempts):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world_size), "--master-addr",
               "127.0.0.1", "--master-port", str(free_port()), script] + [str(a) for a in args]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=timeout)
        if r.returncode == 0 or "address already in use" not in r.stdout.lower() or attempt == attempts - 1:
            return r.returncode, r.stdout
    raise AssertionError("unreachable")


class Checks:
    """A driver's checks, each printed as "<prefix>: <name>: ok" or ": FAIL (detail)"; finish() prints
    "<prefix>: N passed, M failed" (what the ctest's PASS_REGULAR_EXPRESSION reads) and exits."""

    def __init__(self, prefix, detail_chars=600):
        self.prefix, self.detail_chars, self.results = prefix, detail_chars, []

    def __call__(self, name, ok, detail=""):
        self.results.append(bool(ok))
        detail = f" ({detail[-self.detail_chars:]})" if detail else ""
        say(f"{self.prefix}: {name}: {'ok' if ok else 'FAIL'}{detail}")

    def finish(self):
        passed = sum(self.results)
        say(f"{self.prefix}: {passed} passed, {len(self.results) - passed} failed")
        sys.exit(0 if all(self.results) else 1)


def require(prefix, package, version, extra):
    """Exits naming the optional set-up unless `package` is installed at `version`."""
    import importlib.metadata as md
    try:
        found = md.version(package)
    except md.PackageNotFoundError:
        found = None
    if found != version:
        say(f"{prefix}: {package} {version} is not installed ({found}); run MFSDP_EXTRAS={extra} bash scripts/setup.sh")
        sys.exit(1)
