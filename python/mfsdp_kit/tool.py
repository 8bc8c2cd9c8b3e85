"""Finding and running the mfsdp binary (the oracle and `mfsdp conform`)."""
import os
import shutil
import subprocess


class ToolError(RuntimeError):
    """mfsdp could not be found, or refused its input (exit 2): the message is its own."""


def mfsdp_binary(explicit=None):
    """The mfsdp executable: `explicit`, else $MFSDP_BIN, else this checkout's build/mfsdp, else `mfsdp`
    on PATH."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "mfsdp")
    for candidate in (explicit, os.environ.get("MFSDP_BIN"), here, shutil.which("mfsdp")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    raise ToolError("mfsdp not found: build it (bash scripts/setup.sh), or set MFSDP_BIN to its path"
                    + (f" ('{explicit}' is not an executable)" if explicit else ""))


# A launcher's variables (core/dist/launcher.cpp reads them): mfsdp run from inside a torchrun or
# Slurm job would take itself for one of the job's ranks. It runs its own ranks instead.
_LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
               "ROLE_RANK", "TORCHELASTIC_USE_AGENT_STORE", "MFSDP_LAUNCHER", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")


def run_mfsdp(args, mfsdp=None, ok=(0,)):
    """Runs mfsdp with `args` (outside any launcher's job); returns (exit code, stdout + stderr). An
    exit outside `ok` raises ToolError with mfsdp's own message."""
    cmd = [mfsdp_binary(mfsdp)] + [str(a) for a in args]
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_ENV}
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode not in ok:
        lines = [line for line in r.stdout.splitlines() if line.startswith("mfsdp:")] or r.stdout.splitlines()[-5:]
        raise ToolError(f"{' '.join(cmd[1:3])}: exit {r.returncode}: " + "\n".join(lines))
    return r.returncode, r.stdout
