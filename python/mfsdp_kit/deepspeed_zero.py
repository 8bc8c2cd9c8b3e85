"""The Recorder inside a DeepSpeed engine: ZeRO stages 1 and 2 keep the full parameters on every
rank but the gradients and optimizer state in flat partitions; stage 3 partitions the parameters
too (each rank's `p` is empty, its shape in `p.ds_shape`). ZeroGather reads them through DeepSpeed's
own accessors (deepspeed.utils.safe_get_full_*), every rank taking part.

    engine, *_ = deepspeed.initialize(model=ref.model(), config=...)
    with Recorder(engine.module, ref, out_dir, grads=False, state=False, gather=ZeroGather(engine)) as rec:
        ...

Two things it cannot read, refused naming the parameter rather than recorded wrong:
- the gradient of a Muon parameter: ZeRO applies Newton-Schulz while it reduces the gradients, so
  what deepspeed.utils.safe_get_full_grad returns after backward is the orthogonalised update;
- the Muon momentum: ZeRO 1/2 keep it in a flat buffer of their own beside the partition
  (optimizer.state[flat]["momentum_buffer"]), not in the state the accessors map.
"""
from .recorder import RecorderError, TorchGather


class ZeroGather(TorchGather):
    """Full values of a DeepSpeed engine's parameters (see the module's docstring)."""

    def __init__(self, engine):
        self.stage = engine.zero_optimization_stage()
        self.optimizer = engine.optimizer

    def shape(self, p):
        return tuple(getattr(p, "ds_shape", p.shape))

    def param(self, p):
        if self.stage < 3:
            return p.detach()  # the full fp32 parameter on every rank, updated after each step
        from deepspeed.utils import safe_get_full_fp32_param
        return safe_get_full_fp32_param(p)

    def grad(self, p):
        if self.stage > 0 and getattr(p, "use_muon", False):
            raise RecorderError("a Muon parameter under ZeRO: DeepSpeed applies Newton-Schulz while it reduces the "
                                "gradients, so after backward it holds the update, not the gradient (pass grads=False)")
        if self.stage == 0:
            return super().grad(p)
        from deepspeed.utils import safe_get_full_grad
        return safe_get_full_grad(p)

    def state(self, p, optimizers):
        if self.stage == 0:
            return super().state(p, [self.optimizer])
        if getattr(p, "use_muon", False):
            raise RecorderError("a Muon parameter under ZeRO: its momentum is in a flat buffer DeepSpeed's accessors do "
                                "not map (pass state=False)")
        from deepspeed.utils import safe_get_full_optimizer_state
        out = {}
        for key in ("exp_avg", "exp_avg_sq"):
            v = safe_get_full_optimizer_state(p, key)
            if v is not None:
                out[key] = v
        return out
