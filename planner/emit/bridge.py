"""A Megatron-Bridge recipe override (YAML) for a Megatron-LM plan: the ConfigContainer fields the
plan decides, to merge over a pre-training recipe (a recipe script's `--config-file`, OmegaConf
merged; or as Hydra overrides `section.field=value` on scripts/performance/run_script.py, one per
line in the file's header).

Field names: Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge 067f987d) src/megatron/bridge/training/
config.py ConfigContainer, whose `model` is a GPTModelProvider (models/gpt_provider.py) over
Megatron-Core's TransformerConfig / ModelParallelConfig, `train` / `ddp` / `optimizer` /
`scheduler` its TrainingConfig, DistributedDataParallelConfig, OptimizerConfig, SchedulerConfig
(and Megatron-LM 2a75ac12's, the commit Bridge pins), `comm_overlap` training/comm_overlap.py
CommOverlapConfig, `mixed_precision` a preset name registered in training/mixed_precision.py.
tests/data/megatron_bridge_config_schema.json holds those fields (derived from the files) and the
emitted YAML is checked against it.

The split: Megatron's even split as virtual_pipeline_model_parallel_size; any other
(pipeline_layers, a layout, the embedding or loss counted as a layer) as
pipeline_model_parallel_layout, the stages spelled out (`bridge_split`). ZeRO: 0 DDP, 1 the
distributed optimizer, 2 / 3 Megatron-FSDP (use_megatron_fsdp, data_parallel_sharding_strategy),
with the plan's DDP buckets (`bridge_ddp`). The environment the plan needs goes into
ConfigContainer.env_vars, as a table and as `++env_vars.NAME=value` Hydra lines
(`bridge_notes.environment`).

A field a recipe sets that the plan decides is written even where the plan's value is Megatron's
default (the plan was timed with it), or the recipe's own would stay: tests/emit/
test_emit_bridge_resets.py names a recipe that sets each (Megatron-Bridge 067f987d).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from planner.emit import bridge_ddp, bridge_model, bridge_notes, bridge_precision, bridge_split
from planner.emit.bridge_notes import COMM_OVERLAP, attention_backend
from planner.emit.common import SCHEDULE, comment_block, cuda_graph_impl, inflight_offloads
from planner.emit.k8s import yaml_str
from planner.emit.megatron import activation_switch
from planner.emit.megatron_model import refuse_alibi, refuse_local_attention
from planner.emit.prediction import HEADROOM, header, predict
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.model.moe_padding import router_padding_runs

GRACE_BLACKWELL = ("gb200", "gb300")
"""Catalog-name prefixes of the parts Megatron-Bridge refuses DeepEP on: its
ConfigContainer.validate calls validate_flex_dispatcher_backend (config.py and
flex_dispatcher_backend.py, 067f987d), which raises unless the GPU is Ampere or Hopper (major 8,
9) or is named "NVIDIA B200" / "NVIDIA B300"; GB200 and GB300 report major 10 under their own
names. HybridEP it allows on every major 8, 9 and 10 part."""


MIN_OFFLOADED_TENSOR_SIZE = 1024 * 1024
"""TransformerConfig's default min_offloaded_tensor_size (transformer_config.py, 2a75ac12)."""


DEPRECATED_GRAPHS = {"enable_cuda_graph": False, "external_cuda_graph": False}
"""TransformerConfig's deprecated graph switches (GPTModelProvider's, both False by default at
Megatron-LM 2a75ac12 transformer_config.py:1013 and :1035), written off over a recipe's: Bridge
067f987d perf_recipes/qwen/gb200/qwen3_moe.py:823 sets external_cuda_graph True, which
Megatron-Core refuses beside a cuda_graph_impl other than "none" and beside "none" (an eager
plan) turns into Transformer Engine graphs the plan was not timed with
(transformer_config.py:2457-2473). The plan names its graphs by cuda_graph_impl alone."""


def _bridge_flex(plan: Plan) -> None:
    """Refuse the flex dispatcher's DeepEP backend where Megatron-Bridge does (GRACE_BLACKWELL)."""
    lay, gpu = plan.require_layout(), plan.job.cluster.gpu.name
    if lay.moe_flex_dispatcher_backend == "deepep" and gpu.startswith(GRACE_BLACKWELL):
        raise InputError(
            f"{plan.path}: parallel.moe_flex_dispatcher_backend: Megatron-Bridge runs DeepEP on "
            f"Ampere, Hopper, B200 and B300 only (got {gpu}; its config validation raises): set "
            '"hybridep", or launch with --target megatron-args'
        )


def _recompute(plan: Plan) -> dict[str, Any]:
    lay = plan.require_layout()
    # the recipe's method and layer count cleared where the plan has none (TransformerConfig
    # refuses them beside selective recompute, and the EP overlap beside any method)
    if lay.recompute == "none":
        return {
            "recompute_granularity": None,
            "recompute_method": None,
            "recompute_num_layers": None,
        }
    if lay.recompute == "selective":
        return {
            "recompute_granularity": "selective",
            "recompute_modules": list(lay.recompute_modules),
            "recompute_method": None,
            "recompute_num_layers": None,
        }
    return {
        "recompute_granularity": "full",
        "recompute_method": lay.recompute_method,
        "recompute_num_layers": lay.recompute_num_layers,
    }


def _offloading(plan: Plan) -> dict[str, Any]:
    """Layer-wise CPU offloading and fine-grained activation offloading (TransformerConfig's): the
    plan's, a recipe's own switched off where the plan has none."""
    lay = plan.require_layout()
    out: dict[str, Any] = {
        "cpu_offloading": lay.cpu_offloading_num_layers > 0,
        "cpu_offloading_num_layers": lay.cpu_offloading_num_layers,
        "fine_grained_activation_offloading": bool(lay.offload_modules),
        "offload_modules": list(lay.offload_modules),
    }
    if lay.offload_modules:
        out["activation_offload_fraction"] = lay.activation_offload_fraction
        out["min_offloaded_tensor_size"] = MIN_OFFLOADED_TENSOR_SIZE
        out["delay_offload_until_cuda_graph"] = False
        if (inflight := inflight_offloads(plan)) is not None:
            out["fine_grained_offloading_max_inflight_offloads"] = inflight
    return out


def _moe(plan: Plan) -> dict[str, Any]:
    """The MoE layer's settings the plan decides (TransformerConfig's): Megatron's grouped GEMM,
    as the megatron-args target runs it (GPTModelProvider's default is off); the flex
    dispatcher's SMs with the deprecated per-backend counts cleared, which Megatron-Core routes
    into moe_flex_dispatcher_num_sms when that is unset (transformer_config.py, 2a75ac12)."""
    job, lay = plan.job, plan.require_layout()
    out: dict[str, Any] = {
        "moe_grouped_gemm": True,
        "moe_token_dispatcher_type": lay.moe_token_dispatcher_type,
    }
    if lay.moe_token_dispatcher_type == "flex":
        _bridge_flex(plan)
        out["moe_flex_dispatcher_backend"] = lay.moe_flex_dispatcher_backend
        out["moe_flex_dispatcher_num_sms"] = lay.moe_flex_dispatcher_num_sms
        out["moe_deepep_num_sms"] = out["moe_hybridep_num_sms"] = None
    out |= {
        "moe_shared_expert_overlap": lay.moe_shared_expert_overlap,
        "moe_router_num_groups": job.moe_router_num_groups,
        "moe_router_group_topk": job.moe_router_group_topk,
        "moe_expert_capacity_factor": job.moe_expert_capacity_factor,
        "moe_pad_expert_input_to_capacity": job.moe_pad_expert_input_to_capacity,
        "moe_expert_rank_capacity_factor": job.moe_expert_rank_capacity_factor,
        "moe_paged_stash": job.moe_paged_stash,
    }
    if job.moe_paged_stash:
        out["moe_paged_stash_buffer_size_factor_cuda"] = job.moe_paged_stash_buffer_size_factor
    out["moe_router_force_load_balancing"] = job.moe_router_force_load_balancing
    # the plan's router padding; a recipe's own cleared where the plan has none
    out["moe_router_padding_for_quantization"] = router_padding_runs(job, lay)
    if job.moe_router_dtype is not None:  # (left out: the model provider's own)
        out["moe_router_dtype"] = job.moe_router_dtype
    return out


def sections(plan: Plan) -> dict[str, dict[str, Any]]:
    """The override's sections (ConfigContainer attribute -> fields)."""
    job, lay = plan.job, plan.require_layout()
    fsdp2 = lay.use_torch_fsdp2
    refuse_alibi(job.arch, f"{plan.path}: model", "Megatron-Bridge")
    refuse_local_attention(plan, "Megatron-Bridge")
    model: dict[str, Any] = {
        "tensor_model_parallel_size": lay.tp,
        "pipeline_model_parallel_size": lay.pp,
        "context_parallel_size": lay.cp,
        "expert_model_parallel_size": lay.ep,
        "expert_tensor_parallel_size": lay.expert_tp if job.arch.is_moe else None,
        "sequence_parallel": lay.sequence_parallel,
        "seq_length": job.seq_length,
        **bridge_split.split(plan),
        **_recompute(plan),
        **_offloading(plan),
        "microbatch_group_size_per_vp_stage": lay.microbatch_group_size_per_vp_stage,
        # TransformerConfig's (its default None, the ring, where cp is 1)
        "cp_comm_type": lay.cp_comm_type if lay.cp > 1 else None,
        "attention_backend": (attn := attention_backend(job)),
        "flash_attention_version": 2 if attn == "flash" else None,
        "fp8_output_proj": job.fp8_output_proj,  # (Bridge's DeepSeek recipes set it)
        # as Bridge's perf overrides set them (cutedsl_fused_grouped_mlp)
        "use_transformer_engine_op_fuser": job.moe_fused_grouped_mlp,
        "moe_mlp_glu_interleave_size": 32
        if job.moe_fused_grouped_mlp and job.arch.gated_linear_unit
        else None,  # (the interleave Transformer Engine's fused GLU kernel requires)
    }
    whole_step = False
    if job.cuda_graphs:  # per-layer graphs: Bridge captures them with Transformer Engine's
        whole_step = cuda_graph_impl(plan) == "full_iteration"  # (its refusals), not
        # Megatron-LM's "local", which utils/cuda_graph.py:146-154 refuses outside full
        # iteration (the launched plan is priced so: `launch_pricing.bridge_graphs`);
        # the whole step as Bridge's own set_full_iteration_cuda_graph writes it (regions
        # empty). TransformerConfig.cuda_graph_modules ("full", its default: whole layers);
        # the recipe's deprecated cuda_graph_scope cleared, which Megatron-Core refuses beside
        # modules (and its "full_iteration" beside transformer_engine graphs)
        model["cuda_graph_impl"] = "full_iteration" if whole_step else "transformer_engine"
        model["cuda_graph_scope"] = None
        model["cuda_graph_modules"] = [] if whole_step else list(job.cuda_graph_modules) or "full"
        # GPTModelProvider.provide asserts Transformer Engine's RNG tracker under graphs
        model["use_te_rng_tracker"] = True
    else:  # eager, as timed: a recipe's own graphs (most Blackwell ones capture) switched off
        model["cuda_graph_impl"] = "none"
    model |= DEPRECATED_GRAPHS
    for name in ("attention_dropout", "hidden_dropout"):
        if not getattr(job, name):  # no masks in the plan's memory: TransformerConfig's 0.0
            model[name] = 0.0
    # the recipe's (some turn it off) made the plan's: GPTModelProvider's default is on where
    # the fused kernel is available (gpt_provider.py:206)
    # torch FSDP2 needs it off (Megatron-LM asserts it, arguments.py:1040-1041)
    model["gradient_accumulation_fusion"] = job.gradient_accumulation_fusion and not fsdp2
    if job.arch.position_embedding_type == "rope":  # TransformerConfig's default is False
        model["apply_rope_fusion"] = job.fused_rope  # (Megatron-LM's flag defaults to True)
    if (switch := activation_switch(job)) is not None:  # the activation as timed, fused or not
        model[switch[0]] = switch[1]  # (Bridge's Nemotron recipes fuse squared ReLU)
    model |= bridge_model.shape_fields(job.arch)  # the recipe's model made the plan's
    if job.test_mode:  # TransformerConfig.test_mode (2a75ac12 transformer_config.py:274): the
        model["test_mode"] = True  # real-time attention checks the plan's step time counts
    if job.arch.has_dsa:  # TransformerConfig's DSA fields the plan decides (its shape: a note)
        model["dsa_kernel_backend"] = job.dsa_kernel_backend
        model["dsa_indexer_loss_coeff"] = job.dsa_indexer_loss_coeff
        model["dsa_indexer_use_sparse_loss"] = job.dsa_indexer_use_sparse_loss
    if job.deterministic:  # recipes/utils/determinism_utils.py apply_determinism_overrides:
        model["deterministic_mode"] = True  # (its env_vars: `DETERMINISM_ENV`; the rules hold
        model["cross_entropy_loss_fusion"] = False  # tp_comm_overlap off, as it sets it)
    elif job.megatron_loss is not None:  # the loss the plan was timed with (TransformerConfig's)
        model["cross_entropy_loss_fusion"] = job.megatron_loss != "unfused"
        if job.megatron_loss != "unfused":
            model["cross_entropy_fusion_impl"] = job.megatron_loss
    if job.moe_grouped_tensor:
        raise InputError(
            f"{plan.path}: training.moe_grouped_tensor: the Megatron-Core Megatron-Bridge pins "
            "(2a75ac12) has no moe_use_grouped_tensor (it takes a HybridEP rank capacity factor "
            "with the fused grouped MLP only); set moe_fused_grouped_mlp instead, or launch with "
            "--target megatron-args"
        )
    if job.arch.is_moe:
        model |= _moe(plan)
    fsdp = lay.zero_stage >= 2 and not fsdp2  # Megatron-FSDP's
    if fsdp:  # as the megatron-args target: no full-size model built before it is sharded
        model["init_model_with_meta_device"] = True
    if fsdp and lay.use_tp_pp_dp_mapping:  # 067f987d training/config.py:1124 asserts it off
        raise InputError(
            f"{plan.path}: parallel.use_tp_pp_dp_mapping: Megatron-Bridge refuses it with "
            "Megatron-FSDP (zero_stage >= 2); launch with --target megatron-args, or unset it"
        )
    schedule = {flag: value for flag, _, value in SCHEDULE}
    return {
        "model": model,
        "train": {
            "micro_batch_size": lay.micro_batch_size,
            "global_batch_size": job.global_batch_size,
            "train_iters": int(schedule["--train-iters"]),
            "empty_unused_memory_level": 0,  # Megatron's: no emptying of the cache per step
            # the check the plan's step time counts (planner.model.weight_hash)
            **(
                {"check_weight_hash_across_dp_replicas_interval": job.weight_hash_interval}
                if job.weight_hash_interval
                else {}
            ),
        },
        "ddp": bridge_ddp.ddp_table(plan),
        "optimizer": bridge_precision.optimizer_table(plan),
        "comm_overlap": bridge_ddp.comm_overlap_table(plan),
        # DistributedInitConfig's rank order (067f987d training/initialize.py:817), torch FSDP2
        **({"dist": dist} if (dist := _dist(plan)) else {}),
        # GPTDatasetConfig's, which ConfigContainer.validate asserts equal to the model's
        "dataset": {"seq_length": job.seq_length},
        **_checkpoint(fsdp, job.async_save),
        # config.py asserts the loss's NaN check off under a full-iteration graph
        **({"rerun_state_machine": {"check_for_nan_in_loss": False}} if whole_step else {}),
    }


def _dist(plan: Plan) -> dict[str, Any]:
    """DistributedInitConfig's overrides: the rank order, and torch FSDP2 (dist.use_torch_fsdp2,
    067f987d training/config.py:1481-1482, handed to Megatron-Core's model wrapping, setup.py
    :595-603). Bridge gives TorchFullyShardedDataParallel its ddp table, a
    DistributedDataParallelConfig with no reshard_after_forward, so FSDP2 reshards after every
    forward (torch_fully_sharded_data_parallel.py:84 `getattr(..., True)`): a plan that keeps the
    parameters gathered is refused."""
    lay = plan.require_layout()
    if lay.use_torch_fsdp2 and not lay.torch_fsdp2_reshard_after_forward:
        raise InputError(
            f"{plan.path}: parallel.torch_fsdp2_reshard_after_forward: false, but Megatron-Bridge "
            "hands FSDP2 its ddp config, which has no reshard_after_forward (FSDP2 then "
            "reshards: torch_fully_sharded_data_parallel.py:84); launch with --target "
            "megatron-args, or set it true"
        )
    out: dict[str, Any] = {"use_tp_pp_dp_mapping": True} if lay.use_tp_pp_dp_mapping else {}
    return out | ({"use_torch_fsdp2": True} if lay.use_torch_fsdp2 else {})


def _checkpoint(fsdp: bool, async_save: bool) -> dict[str, Any]:
    """CheckpointConfig's overrides: Megatron-FSDP saves and loads only in its own format
    (ConfigContainer.validate); async_save's persistent worker (use_persistent_ckpt_worker,
    True by default, 067f987d training/config.py:516, asserted at :603; started at setup,
    state.py:410-432, where checkpoint.save is set) is a process with a CUDA context of its own
    on each GPU (`planner.model.buffers.async_save_worker_bytes`)."""
    table: dict[str, Any] = {"ckpt_format": "fsdp_dtensor"} if fsdp else {}
    if async_save:
        table["async_save"] = True
    return {"checkpoint": table} if table else {}


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        # YAML 1.1 (pyyaml, OmegaConf) reads 3e-05 as a string: give the mantissa a dot
        text = json.dumps(v)
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return yaml_str(str(v))


def _hydra_dict(fields: dict[str, Any]) -> str:
    """A table as one Hydra dict value, `{_target_:a.B,key:value}`: for a recipe that leaves the
    table unset (`COMM_OVERLAP`)."""
    return "{" + ",".join(f"{k}:{_scalar(v)}" for k, v in fields.items()) + "}"


def render(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The YAML override, headed by the prediction and the same settings as Hydra overrides."""
    tables = sections(plan)
    preset = bridge_precision.preset(plan)
    unset = _hydra_dict({"_target_": COMM_OVERLAP, **tables["comm_overlap"]})
    notes = bridge_notes.notes(plan, "comm_overlap=" + unset) + list(plan.launch_notes)
    hydra: list[str] = []  # shell-quoted, to paste as they are (a list's spaces split words)
    for name, fields in tables.items():
        hydra += [shlex.quote(f"{name}.{k}={_scalar(v)}") for k, v in fields.items()]
    env = bridge_notes.environment(plan)  # ++: added or overridden
    hydra += [shlex.quote(f"++env_vars.{k}={v}") for k, v in env.items()]
    text = comment_block(
        [
            *header(plan, "megatron-bridge", job_name, predict(plan, headroom_pct)),
            "Megatron-Bridge ConfigContainer override: merge over a pre-training recipe "
            "(--config-file), or pass these Hydra overrides to scripts/performance/run_script.py:",
            *hydra,
            f"mixed_precision={preset}",
            *(f"note: {n}" for n in notes),
        ]
    )
    for name, fields in tables.items():
        text += f"{name}:\n"
        text += "".join(f"  {k}: {_scalar(v)}\n" for k, v in fields.items())
    if env:  # ConfigContainer.env_vars (config.py:965), merged key by key over the recipe's
        text += "env_vars:\n" + "".join(f"  {k}: {yaml_str(v)}\n" for k, v in env.items())
    text += f"mixed_precision: {yaml_str(preset)}\n"
    return text
