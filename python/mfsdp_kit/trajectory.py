"""The trajectory format of docs/conformance.md (harness/trajectory_dump.h is the C++ side): a
directory holding trajectory.json (the header and the step list) and one safetensors file per step
of full parameters, optionally of gradients and of optimizer state.

Format 2 (written here) adds to format 1:
  - "mesh": {"replicas": R, "shard_group": S, "step_mode": "replicated" | "dedup"}, a compared field
    (a flat run is replicas 1, shard_group W);
  - per step an optional "state" file: each optimizer state tensor under its parameter's name and a
    suffix (layers.0.attn.q.weight.momentum_buffer, embed.weight.exp_avg, embed.weight.step as a
    0-d float32 tensor), the state after that step;
  - an optional "replay" object: the dump is a one-step replay (mfsdp_kit.replay), step k holding
    the candidate's parameters after one step from the reference's step k - 1.
Readers take format 1 and 2.
"""
import json
import math
import os
import tempfile
import zlib

FORMAT = "mfsdp-trajectory"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
HEADER_FILE = "trajectory.json"
# The header fields two dumps must agree on (harness/trajectory_dump.h's kComparedFields); "mesh"
# only where both dumps are format 2.
COMPARED_FIELDS = ("model", "optimizer", "world_size", "precision", "seed", "data", "max_norm", "lr_schedule")


class DumpError(ValueError):
    """A dump that cannot be written or read, with the directory and what is wrong."""


def number(v):
    """A float as the format stores it: a number, or "nan" / "inf" / "-inf"."""
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def number_of(v):
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v]
    return float(v)


def corpus_crc32(data):
    return zlib.crc32(data) & 0xFFFFFFFF


def check_new_dir(directory, what="the dump"):
    """A dump goes into a new or empty directory, never a link: nothing is ever replaced."""
    if os.path.islink(directory):
        raise DumpError(f"{what}: '{directory}' is a symbolic link; give a new or empty directory")
    if os.path.lexists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise DumpError(f"{what}: '{directory}' is not a new or empty directory (nothing in it is replaced)")


def _atomic_write(path, write):
    """Writes through a unique temporary in the same directory, then renames it over `path`."""
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp.", dir=os.path.dirname(path) or ".")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _rank():
    try:
        import torch.distributed as dist
    except ImportError:
        return 0
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _cpu(tensors):
    return {n: t.detach().cpu().contiguous() for n, t in tensors.items()}


class TrajectoryWriter:
    """Writes a dump as a run goes (on one process: rank 0). The header is rewritten atomically after
    every step with "complete": false, and finish() marks it complete: an interrupted run leaves a
    readable dump that says it is incomplete."""

    def __init__(self, directory, header):
        rank = _rank()
        if rank:
            raise DumpError(f"TrajectoryWriter: this is rank {rank}; only rank 0 writes a dump (two writers would race on "
                            "one directory): construct it on rank 0, or use Recorder, which gathers for rank 0")
        check_new_dir(directory)
        os.makedirs(directory, exist_ok=True)
        self.dir, self.header, self.steps = directory, dict(header), []
        self.header.setdefault("format", FORMAT)
        self.header.setdefault("format_version", FORMAT_VERSION)
        self._write_header(False)

    def _write_header(self, complete):
        h = dict(self.header, complete=complete, steps=self.steps)
        text = json.dumps(h, indent=1, allow_nan=False) + "\n"
        _atomic_write(os.path.join(self.dir, HEADER_FILE), lambda p: open(p, "w").write(text))

    def _tensors(self, kind, step, tensors):
        from safetensors.torch import save_file
        name = f"{kind}_{step:08d}.safetensors"
        t = _cpu(tensors)
        _atomic_write(os.path.join(self.dir, name), lambda p: save_file(t, p, metadata={"step": str(step), "kind": kind}))
        return name

    def add(self, step, params, loss=None, grad_norm=None, grads=None, state=None):
        """Step `step`'s full parameters (after it; step 0: before step 1), its loss (the rank-order
        mean), clipping norm, gradients (as the update used them) and optimizer state (after it)."""
        if self.steps and step != self.steps[-1]["step"] + 1:
            raise DumpError(f"{self.dir}: step {step} added after step {self.steps[-1]['step']} (steps are consecutive)")
        entry = {"step": step, "params": self._tensors("params", step, params)}
        if grads is not None:
            entry["grads"] = self._tensors("grads", step, grads)
        if state:
            entry["state"] = self._tensors("state", step, state)
        if loss is not None:
            entry["loss"] = number(loss)
        if grad_norm is not None:
            entry["grad_norm"] = number(grad_norm)
        self.steps.append(entry)
        self._write_header(False)

    def finish(self):
        self._write_header(True)


class Dump:
    """A dump read back: its header, its step list and its tensors (format 1 or 2)."""

    def __init__(self, directory):
        self.dir = directory
        path = os.path.join(directory, HEADER_FILE)
        if not os.path.isdir(directory):
            raise DumpError(f"'{directory}' is not a directory (a trajectory dump is a directory holding {HEADER_FILE})")
        if not os.path.isfile(path):
            raise DumpError(f"'{directory}' holds no {HEADER_FILE}: not a trajectory dump")
        try:
            h = json.load(open(path))
        except ValueError as e:
            raise DumpError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(h, dict) or h.get("format") != FORMAT:
            raise DumpError(f"{path}: not an {FORMAT} header")
        if h.get("format_version") not in READ_VERSIONS:
            raise DumpError(f"{path}: format_version {h.get('format_version')!r} is not one of {READ_VERSIONS}")
        for f in COMPARED_FIELDS + ("steps", "complete"):
            if f not in h:
                raise DumpError(f"{path}: the header has no field '{f}'")
        if h["complete"] is not True:
            last = h["steps"][-1]["step"] if h["steps"] else None
            raise DumpError(f"{path}: the dump is incomplete (its run stopped after step {last} without finishing)")
        self.header, self.steps = h, {s["step"]: s for s in h["steps"]}
        for s in h["steps"]:
            for kind in ("params", "grads", "state"):
                if kind in s and not os.path.isfile(os.path.join(directory, s[kind])):
                    raise DumpError(f"{path}: step {s['step']}: its file '{s[kind]}' is missing from the dump")

    @property
    def version(self):
        return self.header["format_version"]

    @property
    def first_step(self):
        return min(self.steps)

    @property
    def last_step(self):
        return max(self.steps)

    def has(self, step, kind):
        return step in self.steps and kind in self.steps[step]

    def tensors(self, step, kind):
        """{name: tensor} of step `step`'s params, grads or state ({} when the step has none)."""
        from safetensors.torch import load_file
        if not self.has(step, kind):
            if kind == "state":
                return {}
            raise DumpError(f"{self.dir}: step {step} has no {kind}")
        return load_file(os.path.join(self.dir, self.steps[step][kind]))

    def loss(self, step):
        s = self.steps[step]
        return number_of(s["loss"]) if "loss" in s else None


def split_state(flat, names):
    """{param: {entry: tensor}} from a state file's {param.entry: tensor}, for the parameter names
    `names` (the longest name that prefixes a key wins)."""
    out = {}
    ordered = sorted(names, key=len, reverse=True)
    for key, t in flat.items():
        for n in ordered:
            if key.startswith(n + "."):
                out.setdefault(n, {})[key[len(n) + 1:]] = t
                break
        else:
            raise DumpError(f"state tensor '{key}' names no parameter of the model")
    return out


def flat_state(per_param):
    """The inverse of split_state."""
    return {f"{n}.{entry}": t for n, entries in per_param.items() for entry, t in entries.items()}
