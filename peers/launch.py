"""Launching the stock peers: torchrun over 127.0.0.1 on a free port, and the peak resident set of the
whole process tree (os.wait4's ru_maxrss: the largest of the launcher and every rank it waited for)."""
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "peer_train.py")


def free_port():
    """A port free on 127.0.0.1 now (another process may take it before torchrun binds it: run()
    retries that case)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_tree(cmd, env=None):
    """Runs cmd; returns (exit code, output, peak RSS in KiB of the largest process of its tree)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return p.returncode, out.read(), usage.ru_maxrss


def torchrun(world_size, args, attempts=3):
    """peer_train.py on world_size ranks; returns (exit code, output, peak RSS KiB)."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    for attempt in range(attempts):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world_size), "--master-addr",
               "127.0.0.1", "--master-port", str(free_port()), PEER] + list(args)
        code, output, rss = run_tree(cmd, env)
        if code == 0 or "address already in use" not in output.lower() or attempt == attempts - 1:
            return code, output, rss
    raise AssertionError("unreachable")
