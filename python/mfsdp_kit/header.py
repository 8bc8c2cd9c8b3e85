"""The compared header fields of a dump in mfsdp's vocabulary (harness/trajectory_dump.cpp's
trajectory_header): the model of some Dims, torch.optim.Muon's and AdamW's hyperparameters as mfsdp
records its own, and the mesh."""

MODEL_NAME = "tiny"


def model_json(dims):
    """model_config_json (core/train/trainer.cpp) of mfsdp train's dense model of these dims."""
    return {"name": MODEL_NAME, "vocab": dims.vocab, "hidden": dims.hidden, "intermediate": dims.intermediate,
            "layers": dims.layers, "heads": dims.heads, "kv_heads": dims.heads, "qkv_bias": False, "dtype": "Float"}


def muon_json(group):
    """A torch.optim.Muon param group's hyperparameters, as mfsdp records Muon's."""
    return {"lr": group["lr"], "momentum": group["momentum"], "nesterov": group["nesterov"],
            "ns_coefficients": list(group["ns_coefficients"]), "ns_steps": group["ns_steps"], "eps": group["eps"],
            "weight_decay": group["weight_decay"], "adjust_lr_fn": group["adjust_lr_fn"] or "original"}


def adamw_json(group):
    """A torch.optim.AdamW param group's hyperparameters, as mfsdp records AdamW's."""
    return {"lr": group["lr"], "betas": list(group["betas"]), "eps": group["eps"], "weight_decay": group["weight_decay"]}


def optimizer_json(muon_group, adamw_group):
    """The header's "optimizer" of Muon on the matrices and AdamW on the rest."""
    return {"matrix": "muon", "other": "adamw", "groups": [], "muon": muon_json(muon_group), "adamw": adamw_json(adamw_group)}


def mesh_json(replicas, world_size, step_mode="replicated"):
    """harness/trajectory_dump.cpp's mesh_json: replicas groups of world_size / replicas ranks."""
    if replicas < 1 or world_size % replicas:
        raise ValueError(f"mesh: {replicas} replicas do not divide W = {world_size}")
    return {"replicas": replicas, "shard_group": world_size // replicas, "step_mode": step_mode if replicas > 1 else "replicated"}


FP32 = {"master_dtype": "fp32", "param_dtype": "fp32", "reduce_dtype": "fp32"}
CONSTANT_LR = {"kind": "constant", "warmup_steps": 0}
