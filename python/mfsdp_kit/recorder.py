"""The recorder: a few lines in a user's own training loop that write the loop's trajectory in the
dump format, for `conform` against a Reference.

    rec = Recorder(model, ref, "cand_dump", optimizers=[muon, adamw])   # every rank; step 0 written
    for step in range(1, ref.steps + 1):
        loss = model(*ref.batch(step, rank)); loss.backward()
        rec.grads()                                                     # before the optimizer step
        muon.step(); adamw.step(); muon.zero_grad(); adamw.zero_grad()
        rec.step(loss)                                                  # after it
    rec.finish()

Every rank calls every method (the gathers are collectives); rank 0 alone writes. It works for a
plain module, DistributedDataParallel, and FSDP2 (fully_shard: DTensor parameters on any mesh,
HSDP's 2-D mesh included): full tensors are gathered with full_tensor(), in the model's parameter
order on every rank. The loss is recorded as the mean of the ranks' losses, summed in double in rank
order (as mfsdp records it). A failure on rank 0 (a directory that is not new, a full disk) is
raised on every rank, naming rank 0.
"""
import torch

from .header import mesh_json, optimizer_json
from .reference import canonical_name
from .trajectory import TrajectoryWriter, check_new_dir


class RecorderError(ValueError):
    """A model, loop or directory the recorder refuses, naming what is wrong (and the rank)."""


def _dist():
    import torch.distributed as dist
    return dist if dist.is_available() and dist.is_initialized() else None


def _full(t):
    """A tensor in full: a DTensor gathered (every rank takes part), else as it is."""
    t = t.detach()
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class TorchGather:
    """How the Recorder reads a parameter's full value, gradient, shape and optimizer state: from the
    torch objects themselves (a DTensor gathered with full_tensor(), every rank taking part). A
    framework that keeps them elsewhere (DeepSpeed's ZeRO partitions: mfsdp_kit.deepspeed_zero)
    passes its own, with the same methods, as Recorder(gather=...)."""

    def shape(self, p):
        return tuple(p.shape)  # a DTensor's shape is the global one

    def param(self, p):
        return _full(p)

    def grad(self, p):
        return None if p.grad is None else _full(p.grad)

    def state(self, p, optimizers):
        """{key: tensor or number} of every optimizer's state of p (the same keys on every rank)."""
        out = {}
        for opt in optimizers:
            st = opt.state.get(p) or {}
            for key in sorted(st):
                v = st[key]
                if torch.is_tensor(v):
                    out[key] = _full(v)
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[key] = v
        return out


def _mesh_of(params, world_size):
    """The header's mesh of a trained model: FSDP2 on a 1-D mesh or DDP / a plain module is one
    replica of W ranks; a 2-D DTensor mesh (HSDP: replicate, shard) is mesh.size(0) replicas."""
    for p in params:
        mesh = getattr(p, "device_mesh", None)
        if mesh is not None and mesh.ndim == 2:
            return mesh_json(mesh.size(0), world_size, "replicated")
        if mesh is not None and mesh.ndim > 2:
            raise RecorderError(f"a {mesh.ndim}-D device mesh: the dump format records replicas x shard group only")
    return mesh_json(1, world_size)


def _recognised_optimizer(optimizers):
    """The header's optimizer section when the optimizers are exactly torch.optim.Muon + AdamW with one
    param group each (their hyperparameters read from param_groups), else None."""
    muon = [o for o in optimizers if type(o) is torch.optim.Muon]
    adamw = [o for o in optimizers if type(o) is torch.optim.AdamW]
    if len(muon) == 1 and len(adamw) == 1 and len(optimizers) == 2 and all(len(o.param_groups) == 1 for o in optimizers):
        return optimizer_json(muon[0].param_groups[0], adamw[0].param_groups[0])
    return None


class Recorder:
    """Records a training loop's trajectory into the new directory `directory` (see the module's
    docstring).

    model:      the trained module (plain, DDP, FSDP2); its parameter names and global shapes must
                be the reference's (wrapper prefixes such as DDP's module. are ignored).
    ref:        the Reference the run reproduces.
    optimizers: the optimizer objects; their state is recorded after every step (state=True) under
                the parameter's name and the state key (state_names renames keys, e.g.
                {"momentum": "momentum_buffer"}). torch.optim.Muon + AdamW have their hyperparameters
                read into the header; for any other optimizer pass `optimizer_header` (mfsdp's
                vocabulary, see docs/conformance.md) or the reference's section is declared.
    world_size: only without torch.distributed: the W a single process stands for (its loss then
                is the list of the W ranks' losses).
    gather:     where full values, gradients and state are read (TorchGather by default; DeepSpeed's
                ZeRO: mfsdp_kit.deepspeed_zero.ZeroGather(engine)).
    """

    def __init__(self, model, ref, directory, optimizers=(), grads=True, state=True, producer=None,
                 optimizer_header=None, state_names=None, world_size=None, check_init=True, gather=None):
        self.gather = gather or TorchGather()
        self.dist = _dist()
        self.rank = self.dist.get_rank() if self.dist else 0
        self.world_size = self.dist.get_world_size() if self.dist else (world_size or 1)
        if self.dist and world_size is not None and world_size != self.world_size:
            raise RecorderError(f"rank {self.rank}: world_size={world_size} given, but torch.distributed runs "
                                f"{self.world_size} ranks (world_size is for a single process only)")
        self.ref, self.optimizers = ref, list(optimizers)
        self.record_grads, self.record_state = grads, state
        self.state_names = dict(state_names or {})
        self.named = self._check_names(model)
        self.by_id = {id(p): n for n, p in self.named}
        self.step_count, self._grads, self.finished = 0, None, False
        self.writer = None
        producer = producer or f"mfsdp_kit.Recorder (torch {torch.__version__})"
        section = optimizer_header or _recognised_optimizer(self.optimizers)
        if section is None:
            section = ref.optimizer
            producer += "; optimizer hyperparameters declared equal to the reference's"
        header = ref.candidate_header(producer, optimizer=section, mesh=_mesh_of([p for _, p in self.named], self.world_size),
                                      world_size=self.world_size)
        initial = self._params()
        error = ""
        if self.rank == 0:
            try:
                if check_init and ref.dump.first_step == 0:
                    self._check_init(initial)
                check_new_dir(directory, "Recorder")
                self.writer = TrajectoryWriter(directory, header)
                self.writer.add(0, initial)
            except (OSError, ValueError) as e:
                error = str(e)
        self._agree(error)

    # ---- The loop's calls ---------------------------------------------------------------------

    def grads(self):
        """Gathers this step's gradients (call after backward, before the optimizer step)."""
        if not self.record_grads:
            return
        out = {}
        for n, p in self.named:
            g = self.gather.grad(p)
            if g is None:
                raise RecorderError(f"rank {self.rank}: parameter '{n}' has no gradient (call grads() after backward "
                                    "and before zero_grad)")
            out[n] = g.detach().clone()
        self._grads = out

    def step(self, loss, grad_norm=None):
        """Records the step just taken: this rank's loss (a tensor or float), the parameters and state
        after the optimizer step, the gradients grads() gathered."""
        if self.finished:
            raise RecorderError(f"rank {self.rank}: step() after finish()")
        if self.record_grads and self._grads is None:
            raise RecorderError(f"rank {self.rank}: step {self.step_count + 1}: grads() was not called before the "
                                "optimizer step (or pass grads=False)")
        mean = self._mean_loss(loss)
        params = self._params()
        state = self._state() if self.record_state else None
        self.step_count += 1
        error = ""
        if self.writer:
            try:
                self.writer.add(self.step_count, params, loss=mean, grad_norm=grad_norm, grads=self._grads, state=state)
            except (OSError, ValueError) as e:
                error = str(e)
        self._grads = None
        self._agree(error)

    def finish(self):
        """Marks the dump complete (a dump whose run stopped before is read as incomplete)."""
        error = ""
        if self.writer and not self.finished:
            try:
                self.writer.finish()
            except OSError as e:
                error = str(e)
        self.finished = True
        self._agree(error)
        return self.writer.dir if self.writer else None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.finish()  # an exception leaves the dump incomplete, as an interrupted run
        return False

    # ---- Helpers ---------------------------------------------------------------------------

    def _check_names(self, model):
        named = [(canonical_name(n), p) for n, p in model.named_parameters()]
        names = [n for n, _ in named]
        ref = self.ref
        for n, p in named:
            if n not in ref.shapes:
                raise RecorderError(f"rank {self.rank}: the model's parameter '{n}' is not the reference's (its names: "
                                    f"{', '.join(ref.param_names[:3])}, ...; wrappers' prefixes are ignored)")
            if self.gather.shape(p) != ref.shapes[n]:
                raise RecorderError(f"rank {self.rank}: parameter '{n}' has shape {list(self.gather.shape(p))}, the "
                                    f"reference's is {list(ref.shapes[n])}")
        for n in ref.param_names:
            if n not in names:
                raise RecorderError(f"rank {self.rank}: the reference's parameter '{n}' is not in the model")
        return named

    def _check_init(self, initial):
        first = self.ref.params(0)
        for n in self.ref.param_names:
            if not torch.equal(initial[n].cpu(), first[n]):
                raise RecorderError(f"rank 0: the model's initial '{n}' is not the reference's step 0 (start from "
                                    "ref.model(), or pass check_init=False to record a run from another start)")

    def _params(self):
        return {n: self.gather.param(p).detach().clone() for n, p in self.named}

    def _state(self):
        out = {}
        for n, p in self.named:  # model order on every rank: the gathers pair up
            for key, v in self.gather.state(p, self.optimizers).items():
                name = f"{n}.{self.state_names.get(key, key)}"
                out[name] = v.detach().clone() if torch.is_tensor(v) else torch.tensor(float(v), dtype=torch.float32)
        return out

    def _mean_loss(self, loss):
        if self.dist:
            local = torch.tensor([float(loss.detach() if torch.is_tensor(loss) else loss)], dtype=torch.float64)
            gathered = [torch.empty_like(local) for _ in range(self.world_size)]
            self.dist.all_gather(gathered, local)
            values = [g.item() for g in gathered]
        else:
            values = [float(torch.as_tensor(v).detach()) for v in (loss if isinstance(loss, (list, tuple)) else [loss])]
            if len(values) != self.world_size:
                raise RecorderError(f"step {self.step_count + 1}: {len(values)} loss(es) for a single process standing for "
                                    f"W = {self.world_size} ranks (pass one per rank)")
        mean = 0.0
        for v in values:  # rank order, in double
            mean += v
        return mean / self.world_size

    def _agree(self, error):
        """Every rank learns whether rank 0 failed, and raises its message."""
        if self.dist:
            box = [error]
            self.dist.broadcast_object_list(box, src=0)
            error = box[0]
        if error:
            raise RecorderError(f"rank 0 failed: {error}" if self.dist else error)
