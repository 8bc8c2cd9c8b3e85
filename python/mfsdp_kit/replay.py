"""One-step replay (teacher forcing) of any torch optimizer against the reference: for each step k,
the candidate's optimizer is given the reference's parameters after step k - 1, its step-k
gradients and its state after step k - 1, takes one step, and its parameters are written as a replay
dump; `mfsdp conform --replay` then judges each tensor's update against the noise floor of the
reference optimizer re-run on inputs perturbed in their last bit (harness/replay.h).

    report = replay(ref, lambda named: [torch.optim.Muon(...), torch.optim.AdamW(...)], "replay_dir")
    print(report.text)    # per step: bitwise / within the noise / systematic, naming the tensors

make_optimizers(named) gets {name: parameter} in the model's order (plain tensors, or what
`place(name, tensor)` made of them: DTensors for a sharded optimizer, every rank calling replay)
and returns the optimizer objects stepping them. With state=True their state after each step is
dumped too and compared where the reference keeps the same entry (a wrong momentum shows in the
momentum buffer at step 1, before Newton–Schulz can hide it). `state_names` maps the candidate's state keys to
the reference's ({"momentum": "momentum_buffer"}); state a candidate keys otherwise starts empty.
A step counter an optimizer keeps per param group (an int group["step"], as pytorch-optimizer's)
or per parameter as a Python number (state["step"], as DeepSpeed's inline AdamW) is set to the
k - 1 steps taken before step k.
"""
import json
import math
import os
import tempfile
import time

import torch

from .recorder import _dist, _full
from .tool import run_mfsdp
from .trajectory import DumpError, TrajectoryWriter, check_new_dir, split_state


class ReplayReport(dict):
    """mfsdp conform --replay's JSON report with its text beside it."""

    @property
    def verdict(self):
        return self["verdict"]  # "within_noise" or "systematic"

    @property
    def text(self):
        return self["_text"]

    def systematic(self, step=None):
        """The tensors judged systematic (at `step`, or anywhere)."""
        return [t for t in self["tensors"] if t["verdict"] == "systematic" and (step is None or t["step"] == step)]


def replay(ref, make_optimizers, directory=None, steps=None, place=None, state_names=None, producer=None, mfsdp=None,
           factor=None, state=True):
    """Replays steps 1..steps (default: all of the reference's) and returns the ReplayReport (on every
    rank; rank 0 writes `directory`, a new directory, or a temporary one that is removed)."""
    dist = _dist()
    rank = dist.get_rank() if dist else 0
    steps = steps or ref.steps
    if not 1 <= steps <= ref.steps:
        raise ValueError(f"replay: steps={steps}; the reference has steps 1..{ref.steps}")
    tmp = None
    if directory is None and rank == 0:
        tmp = tempfile.TemporaryDirectory(prefix="mfsdp_kit_replay_")
        directory = os.path.join(tmp.name, "replay")
    writer, error = None, ""
    header = ref.candidate_header(producer or f"mfsdp_kit.replay (torch {torch.__version__})")
    header["replay"] = {"reference": os.path.abspath(ref.dump.dir), "steps": steps}
    if rank == 0:
        try:
            check_new_dir(directory, "replay")
            writer = TrajectoryWriter(directory, header)
            writer.add(0, ref.params(0))
        except (OSError, ValueError) as e:
            error = str(e)
    _agree(dist, error)
    seconds = []
    names = dict(state_names or {})  # the candidate's state keys -> the reference's
    group_counters, param_counters = [], {}
    layout = {}  # the candidate's own state: {param: {key: shape}}, from its first step
    last = ref.state(ref.steps) if ref.dump.has(ref.steps, "state") else {}
    shapes = {key: tuple(t.shape) for key, t in last.items()}
    for k in range(1, steps + 1):
        t0 = time.perf_counter()
        before, grads = ref.params(k - 1), ref.grads(k)
        ref_state = split_state(ref.state(k - 1), ref.param_names)
        named = {}
        for n in ref.param_names:
            t = before[n].clone()
            p = torch.nn.Parameter(place(n, t) if place else t)
            g = grads[n].clone()
            p.grad = place(n, g) if place else g
            named[n] = p
        optimizers = list(make_optimizers(named))
        by_param = {id(p): n for n, p in named.items()}
        # The reference's state after step k - 1, in the candidate's own layout (its keys and shapes,
        # learnt from its first step): an entry the reference does not keep, or keeps in another size,
        # is left to the candidate's own initialisation.
        for i, opt in enumerate(optimizers):
            for group in opt.param_groups:
                for p in group["params"]:
                    n = by_param.get(id(p))
                    loaded = False
                    for theirs, shape in layout.get(n, {}).items():
                        t = ref_state.get(n, {}).get(names.get(theirs, theirs))
                        if t is None or t.numel() != math.prod(shape):
                            continue
                        t = t.reshape(shape).clone()
                        opt.state[p][theirs] = t if t.dim() == 0 or not place else place(f"{n}.{theirs}", t)
                        loaded = True
                    if loaded:  # a counter beside loaded state: k - 1 steps taken (an empty state starts afresh)
                        for key, kind in param_counters.get((i, n), {}).items():
                            opt.state[p][key] = kind(k - 1)
        for i, j in group_counters:  # a counter kept per param group: k - 1 steps taken before step k
            optimizers[i].param_groups[j]["step"] = k - 1
        for opt in optimizers:
            opt.step()
        if k == 1:  # pytorch-optimizer counts steps in group["step"] (0 before, 1 after the first)
            group_counters = [(i, j) for i, opt in enumerate(optimizers) for j, g in enumerate(opt.param_groups)
                              if type(g.get("step")) is int and g["step"] == 1]
            # ... and DeepSpeed's inline AdamW in a Python int state["step"] per parameter
            param_counters = {}
            for i, opt in enumerate(optimizers):
                for p, st in opt.state.items():
                    for key, v in st.items():
                        if type(v) in (int, float) and v == 1 and id(p) in by_param:
                            param_counters.setdefault((i, by_param[id(p)]), {})[key] = type(v)
        after = {n: _full(p).clone() for n, p in named.items()}
        kept = {}
        for n, p in named.items():
            for opt in optimizers:
                for key in sorted(opt.state.get(p, {})):
                    v = opt.state[p][key]
                    if not torch.is_tensor(v):
                        continue
                    if k == 1:
                        layout.setdefault(n, {})[key] = tuple(v.shape)  # a DTensor's shape is the global one
                    if not state:
                        continue  # no gather (a collective for a DTensor) for state nobody compares
                    full = _full(v).detach().float().clone()
                    ref_shape = shapes.get(f"{n}.{names.get(key, key)}")
                    if ref_shape is not None and full.numel() == math.prod(ref_shape):
                        full = full.reshape(ref_shape)  # a flattened layout compares in the reference's
                    kept[f"{n}.{names.get(key, key)}"] = full
        seconds.append(time.perf_counter() - t0)
        if writer:
            try:
                writer.add(k, after, state=kept or None)
            except (OSError, ValueError) as e:
                error = str(e)
        _agree(dist, error)
    report = None
    if rank == 0:
        try:
            writer.finish()
            with tempfile.TemporaryDirectory(prefix="mfsdp_kit_replay_report_") as rd:
                out = os.path.join(rd, "report.json")
                args = ["conform", "--replay", ref.dump.dir, directory, "--json", out]
                if factor is not None:
                    args += ["--factor", factor]
                code, text = run_mfsdp(args, mfsdp, ok=(0, 1))
                report = ReplayReport(json.load(open(out)))
            report["_text"] = text
            report["candidate_seconds"] = seconds
        except Exception as e:  # noqa: BLE001 - raised on every rank below
            error = str(e)
        finally:
            if tmp:
                tmp.cleanup()
    _agree(dist, error)
    if dist:
        box = [report]
        dist.broadcast_object_list(box, src=0)
        report = box[0]
    return report


def _agree(dist, error):
    if dist:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error:
        raise DumpError(f"replay: rank 0 failed: {error}" if dist else f"replay: {error}")
