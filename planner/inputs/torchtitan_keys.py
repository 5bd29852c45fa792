"""The torchtitan TOML key behind each plan field a torchtitan TOML is read into
(`planner.inputs.torchtitan_config`), so that an error about that plan names the key the user
wrote (`keys_named`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.inputs.errors import InputError, named
from planner.inputs.files import parse_toml, read_file

KEY_OF_FIELD = {
    "training.seq_length": "training.seq_len",
    "training.fp8_recipe": "quantize.linear.float8.recipe_name",
    "training.precision": "model.converters",
    "training.cross_entropy": "parallelism.disable_loss_parallel",
    "training.deterministic": "debug.deterministic",
    "training.moe_router_force_load_balancing": "debug.moe_force_load_balance",
    "training.optimizer_state_dtype": "optimizer.state_dtype",
    "parallel.tp": "parallelism.tensor_parallel_degree",
    "parallel.pp": "parallelism.pipeline_parallel_degree",
    "parallel.cp": "parallelism.context_parallel_degree",
    "parallel.ep": "parallelism.expert_parallel_degree",
    "parallel.etp": "parallelism.expert_tensor_parallel_degree",
    "parallel.recompute": "activation_checkpoint.mode",
    "parallel.moe_token_dispatcher_type": "parallelism.expert_parallel_comm_backend",
    "parallel.pipeline_model_parallel_layout": "parallelism.module_fqns_per_model_part",
    "torchtitan.pipeline_schedule": "parallelism.pipeline_parallel_schedule",
    "torchtitan.dp_replicate": "parallelism.data_parallel_replicate_degree",
    "torchtitan.reshard_after_forward": "parallelism.fsdp_reshard_after_forward",
    "torchtitan.async_tp": "parallelism.enable_async_tensor_parallel",
    "torchtitan.compile": "compile.enable",
    "torchtitan.compile_loss": "compile.components",
    "torchtitan.selective_layer_every": "activation_checkpoint.selective_ac_option",
    "torchtitan.float8_all_gather": "quantize.linear.float8.enable_fsdp_float8_all_gather",
    "torchtitan.float8_experts": "quantize.grouped_mm.float8.fqns",
    "torchtitan.cp_load_balance": "parallelism.context_parallel_load_balancer",
}
"""The TOML key behind each plan field a torchtitan TOML is read into (`torchtitan_config`),
for errors about that plan (`keys_named`). Fields the TOML sets from several keys (the
micro-batch: local_batch_size, or pipeline_parallel_microbatch_size with pipelining; the
gradient-accumulation steps) are left as planner names them; vpp is `keys_named`'s."""


def keys_named(message: str, path: Path | str, doc: dict[str, Any] | None = None) -> str:
    """An error about the plan read from a torchtitan TOML (`doc` its tables, else read from
    `path`), naming the TOML's key beside the plan field: `FILE:
    parallelism.expert_parallel_degree (parallel.ep): ...`. vpp is the stages of
    module_fqns_per_model_part where given, else the schedule's. A Python configuration's
    (FILE.py[:FUNCTION]) message is returned as it is."""
    where = str(path)
    if Path(where).name.partition(":")[0].endswith(".py"):
        return message
    if doc is None:
        try:
            doc = parse_toml(read_file(Path(where)), where)
        except (InputError, OSError):
            doc = {}
    par = doc.get("parallelism")
    parts = par.get("module_fqns_per_model_part") if isinstance(par, dict) else None
    vpp = "module_fqns_per_model_part" if parts is not None else "pipeline_parallel_schedule"
    return named(message, where, {**KEY_OF_FIELD, "parallel.vpp": f"parallelism.{vpp}"})
