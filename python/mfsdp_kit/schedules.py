"""Learning-rate schedules as mfsdp defines them (docs/schedules.md, core/optim/lr_schedule.cpp):
lambda(t) operation for operation as the C++ evaluates it, for torch's LambdaLR; the `mfsdp train`
flags of a schedule; and the trajectory header's "lr_schedule" entry."""
import math

KINDS = ("constant", "warmup-cosine", "warmup-linear", "wsd")


def schedule_lambda(kind, warmup, stable, decay, min_ratio):
    """lambda(t), t the optimizer steps taken: int arithmetic where it is exact, then true division
    and double arithmetic, in lr_lambda's order."""
    if kind not in KINDS:
        raise ValueError(f"lr schedule: unknown kind {kind!r} (one of {', '.join(KINDS)})")

    def lam(t):
        if t < warmup:
            return (t + 1) / (warmup + 1)
        if kind == "constant":
            return 1.0
        since = t - warmup
        if kind == "wsd":
            if since < stable:
                return 1.0
            since -= stable
        p = min(since, decay) / decay
        if kind == "warmup-cosine":
            return min_ratio + (1 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))
        return min_ratio + (1 - min_ratio) * (1.0 - p)
    return lam


def schedule_flags(schedule):
    """The `mfsdp train` flags of (kind, warm-up, stable, decay, min ratio)."""
    kind, warmup, stable, decay, min_ratio = schedule
    flags = ["--lr-schedule", kind, "--warmup-steps", str(warmup)]
    if kind == "wsd":
        flags += ["--stable-steps", str(stable)]
    if kind != "constant":
        flags += ["--decay-steps", str(decay), "--min-lr-ratio", repr(min_ratio)]
    return flags


def schedule_json(schedule):
    """The trajectory header's "lr_schedule" (lr_schedule_to_json without steps_taken)."""
    kind, warmup, stable, decay, min_ratio = schedule
    j = {"kind": kind, "warmup_steps": warmup}
    if kind == "wsd":
        j["stable_steps"] = stable
    if kind != "constant":
        j["decay_steps"] = decay
        j["min_lr_ratio"] = min_ratio
    return j
