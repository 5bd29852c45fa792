"""Write a plan file (DESIGN.md section 2) that `check`, `explain` and `launch` read back unchanged.

The `[model]` table is written the way the job named it (a zoo name, an HF config path made
relative to the new plan file, or the inline Megatron fields); the cluster overrides only where they
differ from the catalog; `[parallel]` in full, dp included.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from planner.inputs import catalog, pipeline_layout
from planner.inputs.hardware import LinkTier
from planner.inputs.layout import Layout
from planner.inputs.plan import TRAINING_AS_IS, Job
from planner.inputs.torchtitan import training_defaults

_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def toml_value(v: Any) -> str:
    """A TOML value: booleans, numbers, inline arrays, and anything else as a basic string
    (backslash, quote and control characters escaped, as TOML v1.0.0 "String" requires; other
    characters as they are, the file being UTF-8). Every file planner writes in TOML uses it:
    plans, the torchtitan job config, calibration profiles."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    out = []
    for ch in str(v):
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _table(name: str, items: dict[str, Any]) -> list[str]:
    lines = [f"[{name}]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in items.items() if v is not None]
    return lines


def model_table(job: Job, ref: dict[str, Any] | None, plan_path: Path) -> dict[str, Any]:
    """The [model] table for a plan written at plan_path."""
    if ref and "hf_config" in ref:
        src = Path(ref["hf_config"]).resolve()
        return {"hf_config": os.path.relpath(src, plan_path.resolve().parent)}
    if ref and set(ref) == {"name"} and ref["name"] in catalog.models():
        return {"name": ref["name"]}
    if job.arch.name in catalog.models() and catalog.models()[job.arch.name] == job.arch:
        return {"name": job.arch.name}
    fields = job.arch.model_dump(exclude_defaults=True)
    if job.arch.name in catalog.models():  # a zoo model's name on other fields (a model file's):
        fields["name"] = f"{job.arch.name}+modified"  # refused beside them (plan_resolve)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


def spelled(job: Job, layout: Layout) -> Layout:
    """The layout as a plan spells it so that reading the plan back gives the split it was
    scored at: a torchtitan layout with pipelines on Megatron's even split names each rank's
    layers, because a torchtitan plan that gives no split reads as torchtitan's own
    (`plan_layout`: the embedding and the output counted as layers), not the even one."""
    if job.framework == "torchtitan" and layout.pp > 1 and layout.even_split:
        return layout.with_(pipeline_layers=(job.arch.num_layers // layout.pp,) * layout.pp)
    return layout


def render(job: Job, layout: Layout, model: dict[str, Any], header: list[str]) -> str:
    layout = spelled(job, layout)
    gpu = job.cluster.gpu
    cluster: dict[str, Any] = {"gpu": gpu.name, "num_gpus": job.cluster.num_gpus}
    if job.cluster.gpus_per_node != gpu.gpus_per_node:
        cluster["gpus_per_node"] = job.cluster.gpus_per_node
    if job.cluster.memory_gib != gpu.memory_gib:
        cluster["memory_gib"] = job.cluster.memory_gib
    if job.cluster.power_limit_w is not None:
        cluster["power_limit_w"] = job.cluster.power_limit_w
    if job.cluster.hbm_bandwidth_tb_per_s is not None:
        cluster["hbm_bandwidth_tb_per_s"] = job.cluster.hbm_bandwidth_tb_per_s
    if job.cluster.host_memory_gib_per_node is not None:
        cluster["host_memory_gib_per_node"] = job.cluster.host_memory_gib_per_node
    if job.cluster.gpus_per_domain_used is not None:
        cluster["gpus_per_domain_used"] = job.cluster.gpus_per_domain_used
    training: dict[str, Any] = {
        "seq_length": job.seq_length,
        "global_batch_size": job.global_batch_size,
        "precision": job.precision,
        "main_grad_dtype": job.main_grad_dtype,
    }
    if job.params_dtype != "bf16" and job.quantised:
        training["params_dtype"] = job.params_dtype
    if job.optimizer_state_dtype != "fp32":
        training["optimizer_state_dtype"] = job.optimizer_state_dtype
    if job.framework != "megatron":
        training["framework"] = job.framework
    titan = job.torchtitan
    defaults = training_defaults(job.framework, titan.compile if titan else False)
    if titan is not None and titan.async_tp:
        defaults["tp_backward_overlap"] = True
    for name, default in defaults.items():
        value = getattr(job, name)
        if name == "fp8_recipe":
            if job.precision == "fp8":
                training[name] = value
        elif name == "fp4_param_gather":
            if job.precision == "fp4" and value != default:
                training[name] = value
        elif value != default:
            training[name] = value
    if not job.flash_attention:
        training["flash_attention"] = False
    # the model's own routing groups need no line; a plan's override does
    for name in ("moe_router_num_groups", "moe_router_group_topk"):
        if getattr(job, name) != getattr(job.arch, name):
            training[name] = getattr(job, name)
    training.update(_as_is(job))
    parallel = parallel_table(job, layout)
    lines = [f"# {h}" for h in header]
    lines += [*_table("model", model), ""]
    if job.pools:  # heterogeneous pools, in pipeline order
        lines += _pools_lines(job)
    else:
        lines += _table("cluster", cluster)
    if job.cluster.tiers != gpu.tiers and not job.pools:
        for tier in job.cluster.tiers:
            lines += ["", "[[cluster.tiers]]", *_tier_lines(tier)]
    lines += ["", *_table("training", training), "", *_table("parallel", parallel)]
    if titan is not None:
        fields = titan.model_dump(exclude_defaults=True)
        lines += ["", *_table("torchtitan", fields)]
    return "\n".join(lines) + "\n"


def parallel_table(job: Job, layout: Layout) -> dict[str, Any]:
    """The `[parallel]` table a plan of this layout holds (None: a line not written); the layout
    as `spelled`."""
    layout = spelled(job, layout)
    parallel: dict[str, Any] = {
        "tp": layout.tp,
        "pp": layout.pp,
        "dp": layout.dp,
        "cp": layout.cp,
        "ep": layout.ep,
        # torchtitan reads a missing etp as 1 where EP is on (`plan_layout._expert_tp`): one
        # that follows tp is written out
        "etp": layout.expert_tp if job.framework == "torchtitan" and layout.ep > 1 else layout.etp,
        "vpp": layout.vpp,
        "sequence_parallel": layout.sequence_parallel,
        "tp_comm_overlap": layout.tp_comm_overlap,
        "ep_comm_overlap": layout.ep_comm_overlap,
        "overlap_grad_reduce": layout.overlap_grad_reduce,
        "overlap_param_gather": layout.overlap_param_gather,
        "ddp_bucket_size": layout.ddp_bucket_size,
        "ddp_num_buckets": layout.ddp_num_buckets,
        "micro_batch_size": layout.micro_batch_size,
        "zero_stage": layout.zero_stage,
        "recompute": layout.recompute,
        "pipeline_layers": list(layout.pipeline_layers) if layout.pipeline_layers else None,
        "pipeline_model_parallel_layout": (
            pipeline_layout.compact(layout.pipeline_layout) if layout.pipeline_layout else None
        ),
    }
    if layout.zero_stage == 0 and layout.overlap_param_gather:
        del parallel["overlap_param_gather"]  # the default, which ZeRO 0 has nothing to gather for
    for part in ("embedding", "loss"):
        name = f"account_for_{part}_in_pipeline_split"
        if getattr(layout, name):
            parallel[name] = True
    parallel.update(_feature_fields(job, layout))
    return parallel


def _tier_lines(tier: LinkTier) -> list[str]:
    """A `[[cluster.tiers]]` entry's fields: those set (an outermost tier has no span), `mesh`
    only where the tier is one."""
    fields = tier.model_dump()
    if not tier.mesh:
        del fields["mesh"]
    return [f"{k} = {toml_value(v)}" for k, v in fields.items() if v is not None]


def _feature_fields(job: Job, layout: Layout) -> dict[str, Any]:
    """The `[parallel]` settings beyond the degrees, where they differ from their defaults."""
    out: dict[str, Any] = {}
    if layout.recompute == "selective" and job.framework != "torchtitan":
        out["recompute_modules"] = list(layout.recompute_modules)
    if layout.recompute == "full" and job.framework == "torchtitan":
        pass  # every N-th layer is torchtitan.selective_layer_every, written with [torchtitan]
    elif layout.recompute == "full":
        out["recompute_method"] = layout.recompute_method
        out["recompute_num_layers"] = layout.recompute_num_layers
    if layout.cpu_offloading_num_layers:
        out["cpu_offloading_num_layers"] = layout.cpu_offloading_num_layers
    if layout.offload_modules:
        out["offload_modules"] = list(layout.offload_modules)
        if layout.activation_offload_fraction != 1.0:
            out["activation_offload_fraction"] = layout.activation_offload_fraction
    if job.arch.is_moe:
        out["moe_token_dispatcher_type"] = layout.moe_token_dispatcher_type
        if layout.moe_token_dispatcher_type == "flex":
            out["moe_flex_dispatcher_backend"] = layout.moe_flex_dispatcher_backend
            if layout.moe_flex_dispatcher_num_sms is not None:
                out["moe_flex_dispatcher_num_sms"] = layout.moe_flex_dispatcher_num_sms
    if layout.cp_exchange:
        out["cp_comm_type"] = layout.cp_exchange
    if layout.microbatch_group_size_per_vp_stage is not None:
        out["microbatch_group_size_per_vp_stage"] = layout.microbatch_group_size_per_vp_stage
    if layout.vpp > 1 and not layout.overlap_p2p_comm:  # read with interleaving alone
        out["overlap_p2p_comm"] = False
    if layout.dp_pools > 1:
        out["dp_pools"] = layout.dp_pools
    if layout.moe_shared_expert_overlap:
        out["moe_shared_expert_overlap"] = True
    if layout.use_tp_pp_dp_mapping:
        out["use_tp_pp_dp_mapping"] = True
    if layout.use_torch_fsdp2:
        out["use_torch_fsdp2"] = True
    if not layout.torch_fsdp2_reshard_after_forward:
        out["torch_fsdp2_reshard_after_forward"] = False
    if layout.fsdp_double_buffer:
        out["fsdp_double_buffer"] = True
    if layout.fsdp_max_pool:
        out["fsdp_max_pool"] = True
    if layout.suggested_communication_unit_size is not None:
        out["suggested_communication_unit_size"] = layout.suggested_communication_unit_size
    if layout.defer_embedding_wgrad_compute:
        out["defer_embedding_wgrad_compute"] = True
        if layout.wgrad_deferral_limit:
            out["wgrad_deferral_limit"] = layout.wgrad_deferral_limit
    return out


def _pools_lines(job: Job) -> list[str]:
    """`[cluster]` as `[[cluster.pools]]` (the overrides each pool was given) and
    `[cluster.between_pools]`."""
    lines = ["[cluster]"]
    for p in job.pools:
        c, gpu = p.cluster, p.cluster.gpu
        pool: dict[str, Any] = {"name": p.name, "gpu": gpu.name, "num_gpus": c.num_gpus}
        if c.gpus_per_node != gpu.gpus_per_node:
            pool["gpus_per_node"] = c.gpus_per_node
        if c.memory_gib != gpu.memory_gib:
            pool["memory_gib"] = c.memory_gib
        kept = ("power_limit_w", "hbm_bandwidth_tb_per_s", "host_memory_gib_per_node")
        for name in (*kept, "gpus_per_domain_used"):
            if getattr(c, name) is not None:
                pool[name] = getattr(c, name)
        if p.price_usd_per_gpu_hour is not None:
            pool["price_usd_per_gpu_hour"] = p.price_usd_per_gpu_hour
        lines += ["", "[[cluster.pools]]", *[f"{k} = {toml_value(v)}" for k, v in pool.items()]]
        if c.tiers != gpu.tiers:
            for tier in c.tiers:
                lines += ["", "[[cluster.pools.tiers]]", *_tier_lines(tier)]
    if job.between_pools is not None:
        b = job.between_pools
        lines += ["", "[cluster.between_pools]"]
        lines += [f"bandwidth_gb_per_s_per_gpu = {toml_value(b.bandwidth_gb_per_s_per_gpu)}"]
        lines += [f"latency_us = {toml_value(b.latency_us)}"]
        if job.pools_data_parallel:
            lines += ["allow_data_parallel = true"]
    return lines


_DEFAULTS = {f.name: f.default for f in fields(Job)}


def _as_is(job: Job) -> dict[str, Any]:
    """The `TRAINING_AS_IS` fields where the job's differ from the Job's defaults, the CUDA-graph
    regions, and the RL rollout engine's KV cache (held in bytes), so that a plan written from a
    job (suggest --write-plan on a job file) reads back the same job."""
    out: dict[str, Any] = {}
    for name in TRAINING_AS_IS:
        value = getattr(job, name)
        if value != _DEFAULTS[name]:
            out[name] = list(value) if isinstance(value, tuple) else value
    if job.cuda_graph_modules:
        out["cuda_graph_modules"] = list(job.cuda_graph_modules)
    if job.cuda_graph_impl is not None:
        out["cuda_graph_impl"] = job.cuda_graph_impl
    if job.rl_kv_cache_bytes:
        out["rl_kv_cache_gib"] = job.rl_kv_cache_bytes / 2**30
    return out
