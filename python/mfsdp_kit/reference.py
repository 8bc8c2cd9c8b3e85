"""The reference run a candidate is checked against: an oracle dump (mfsdp train --placement ddp
--dump-trajectory, with --dump-grads and --dump-state for one-step replay), read back as what a
candidate's training needs: the model and its initialisation, the data each rank trains on, the
hyperparameters, W and the mesh."""
import os

import torch

from .header import model_json
from .model import Dims, Model, batch, corpus_bytes, init_params, param_specs
from .tool import run_mfsdp
from .trajectory import Dump, DumpError, corpus_crc32


class ReferenceError(ValueError):
    """A reference the kit cannot reproduce in stock PyTorch, naming the header field."""


def _require(ok, path, what):
    if not ok:
        raise ReferenceError(f"{path}: {what}")


class Reference:
    """An oracle dump, ready for a candidate's loop. Build one with Reference.load(dump) or
    Reference.train(directory, world_size=..., steps=..., flags=[...])."""

    def __init__(self, dump):
        self.dump = dump
        h = self.header = dump.header
        where = os.path.join(dump.dir, "trajectory.json")
        m = h["model"]
        dims = Dims(vocab=m.get("vocab"), hidden=m.get("hidden"), intermediate=m.get("intermediate"),
                    layers=m.get("layers"), heads=m.get("heads"))
        # The stock-PyTorch model is the dense, untied, float32 one (mfsdp_kit.model.Model).
        _require(model_json(dims) == m, where, f"model {m} is not the kit's dense untied float32 model "
                 f"({model_json(dims)}): train the reference without --experts, --tie-embeddings, --kv-heads")
        _require(h["precision"].get("param_dtype") == "fp32" and h["precision"].get("reduce_dtype") == "fp32", where,
                 f"precision {h['precision']}: the kit's model trains in float32 (no --param-dtype / --reduce-dtype bf16)")
        d = h["data"]
        _require(d.get("grad_accum", 1) == 1, where, f"data.grad_accum {d.get('grad_accum')}: the kit feeds one batch a step")
        self.dims, self.world_size, self.seed = dims, h["world_size"], h["seed"]
        self.mesh = h.get("mesh", {"replicas": 1, "shard_group": self.world_size, "step_mode": "replicated"})
        self.batch_size, self.seq, self.max_norm = d["batch"], d["seq"], h["max_norm"]
        self.optimizer = h["optimizer"]
        self.lr_schedule = h["lr_schedule"]
        self.steps = dump.last_step
        self.specs = param_specs(dims=dims)
        self.param_names = [n for n, _, _ in self.specs]
        self.shapes = {n: tuple(s) for n, s, _ in self.specs}
        self.matrix_names = {n for n, _, matrix in self.specs if matrix}
        self._data = None

    @classmethod
    def load(cls, directory):
        """The oracle dump in `directory` (format 1 or 2, complete)."""
        return cls(Dump(directory))

    @classmethod
    def train(cls, directory, world_size=2, steps=3, flags=(), state=True, mfsdp=None):
        """Runs the oracle (mfsdp train --placement ddp, its ranks as threads) with mfsdp train's own
        `flags` into the new directory `directory`, with gradients and (for replay) optimizer state, and
        loads it. Under torch.distributed every rank calls it: rank 0 runs the oracle, every rank
        loads it (a failure is raised on every rank)."""
        import torch.distributed as dist
        distributed = dist.is_available() and dist.is_initialized()
        error = ""
        if not distributed or dist.get_rank() == 0:
            args = ["train", "--placement", "ddp", "-w", world_size, "--steps", steps, "--dump-trajectory", directory,
                    "--dump-grads"] + (["--dump-state"] if state else []) + list(flags)
            try:
                run_mfsdp(args, mfsdp)
            except Exception as e:  # noqa: BLE001 - every rank raises it below
                error = str(e)
        if distributed:
            box = [error]
            dist.broadcast_object_list(box, src=0)
            error = box[0]
        if error:
            raise ReferenceError(f"Reference.train: {error}")
        return cls.load(directory)

    # ---- What a candidate's loop needs -------------------------------------------------------------

    def data(self):
        if self._data is None:
            data = corpus_bytes()
            want = (self.header["data"].get("corpus_bytes"), self.header["data"].get("corpus_crc32"))
            if want != (len(data), corpus_crc32(data)):
                raise ReferenceError(f"{self.dump.dir}: the corpus here ({len(data)} bytes, crc32 {corpus_crc32(data)}) is "
                                     f"not the reference's ({want[0]} bytes, crc32 {want[1]})")
            self._data = data
        return self._data

    def batch(self, step, rank):
        """(tokens, targets) rank `rank` trains on at step `step` (1, 2, ...)."""
        if not 1 <= step or not 0 <= rank < self.world_size:
            raise ValueError(f"batch(step={step}, rank={rank}): steps count from 1, ranks from 0 to {self.world_size - 1}")
        return batch(self.data(), self.seed, step - 1, rank, self.batch_size, self.seq)

    def model(self):
        """A fresh Model with the reference's initial parameters (checked bit for bit against the dump's
        step 0)."""
        model = Model(self.dims)
        init = init_params(self.seed, dims=self.dims)
        first = self.params(self.dump.first_step) if self.dump.first_step == 0 else None
        if first is not None:
            for n in self.param_names:
                if not torch.equal(first[n], init[n]):
                    raise ReferenceError(f"{self.dump.dir}: its step-0 '{n}' is not the kit's initialisation of seed "
                                         f"{self.seed}; the dump is not an mfsdp run of this model")
        model.load_state_dict(init)
        return model

    def muon_kwargs(self):
        """torch.optim.Muon's keyword arguments for the reference's Muon."""
        o = self.optimizer
        if o.get("matrix") != "muon" or "ns_variant" in o.get("muon", {}):
            raise ReferenceError(f"{self.dump.dir}: the reference's matrix optimizer is {o.get('matrix')}"
                                 f"{' with Newton-Schulz ' + o['muon']['ns_variant'] if 'ns_variant' in o.get('muon', {}) else ''}"
                                 ", not torch.optim.Muon's")
        m = o["muon"]
        return {"lr": m["lr"], "weight_decay": m["weight_decay"], "momentum": m["momentum"], "nesterov": m["nesterov"],
                "ns_coefficients": tuple(m["ns_coefficients"]), "eps": m["eps"], "ns_steps": m["ns_steps"],
                "adjust_lr_fn": None if m["adjust_lr_fn"] == "original" else m["adjust_lr_fn"]}

    def adamw_kwargs(self):
        """torch.optim.AdamW's keyword arguments for the reference's AdamW (single-tensor, as mfsdp)."""
        a = self.optimizer["adamw"]
        return {"lr": a["lr"], "betas": tuple(a["betas"]), "eps": a["eps"], "weight_decay": a["weight_decay"], "foreach": False}

    def split(self, model):
        """(matrices, others): the model's parameters the matrix optimizer steps, and the rest."""
        named = {canonical_name(n): p for n, p in model.named_parameters()}
        return ([p for n, p in named.items() if n in self.matrix_names],
                [p for n, p in named.items() if n not in self.matrix_names])

    def torch_optimizers(self, model):
        """[torch.optim.Muon over the matrices, torch.optim.AdamW over the rest], as the reference."""
        if self.lr_schedule.get("kind") != "constant" or self.optimizer.get("groups"):
            raise ReferenceError(f"{self.dump.dir}: lr_schedule {self.lr_schedule} / groups {self.optimizer.get('groups')}: "
                                 "torch_optimizers builds a constant learning rate and no groups")
        matrices, others = self.split(model)
        return [torch.optim.Muon(matrices, **self.muon_kwargs()), torch.optim.AdamW(others, **self.adamw_kwargs())]

    def torch_optimizers_of(self, named):
        """torch_optimizers over {name: parameter} (what replay's make_optimizers receives)."""
        return [torch.optim.Muon([p for n, p in named.items() if n in self.matrix_names], **self.muon_kwargs()),
                torch.optim.AdamW([p for n, p in named.items() if n not in self.matrix_names], **self.adamw_kwargs())]

    # ---- The reference's own trajectory -----------------------------------------------------------

    def params(self, step):
        return self.dump.tensors(step, "params")

    def grads(self, step):
        return self.dump.tensors(step, "grads")

    def state(self, step):
        """The optimizer state after step `step` ({} before step 1), flat: {param.entry: tensor}."""
        if step == 0:
            return {}
        if not self.dump.has(step, "state"):
            raise DumpError(f"{self.dump.dir}: step {step} has no optimizer state (train the reference with --dump-state)")
        return self.dump.tensors(step, "state")

    def loss(self, step):
        return self.dump.loss(step)

    def candidate_header(self, producer, optimizer=None, mesh=None, world_size=None):
        """The compared header of a candidate's dump: the reference's, with the candidate's own optimizer
        section, mesh and W where given."""
        h = {k: self.header[k] for k in ("model", "optimizer", "world_size", "precision", "seed", "data", "max_norm",
                                         "lr_schedule")}
        h["producer"] = producer
        h["mesh"] = mesh if mesh is not None else self.mesh
        if optimizer is not None:
            h["optimizer"] = optimizer
        if world_size is not None:
            h["world_size"] = world_size
        return h


_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def canonical_name(name):
    """A parameter name without the wrappers' prefixes (DDP's module., torch.compile's _orig_mod.,
    activation checkpointing's _checkpoint_wrapped_module., FSDP1's _fsdp_wrapped_module.)."""
    for p in _WRAPPER_PREFIXES:
        name = name.replace(p, "")
    return name
