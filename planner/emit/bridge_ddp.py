"""The `ddp` and `comm_overlap` tables of a Megatron-Bridge override (`planner.emit.bridge`):
Megatron-Core's DistributedDataParallelConfig and Bridge's CommOverlapConfig (training/
comm_overlap.py at NVIDIA-NeMo/Megatron-Bridge 067f987d), whose `setup` writes its gradient-reduce
and parameter-gather overlap and its bucket size over DDP's with the distributed optimizer.

The buckets are written always (`bucket_size`): the plan's, or where it sets none the size
Megatron-LM gives them, max(40M, 1M x dp x cp) parameters (training.py
resolve_ddp_bucket_size, 2a75ac12; planner.model.dp_buckets.bucket_params, which the plan's step
was timed with). Bridge's own would otherwise apply: 128 MiB wherever dp > 1 with the
distributed optimizer (comm_overlap.py:577 `_get_optimizer_overlap_cfgs`), or without it
Megatron-Core DDP's max(40M, 1M x dp) over dp alone (distributed_data_parallel.py:68-69), or a
recipe's count of buckets (perf_recipes/nemotronh/common.py:146 num_buckets 48, which DDP's
config refuses beside a size, distributed_data_parallel_config.py:275-276).
"""

from __future__ import annotations

from typing import Any

from planner.emit.common import optimizer_instances
from planner.inputs.errors import InputError
from planner.inputs.layout import FSDP_STRATEGY, Layout
from planner.inputs.plan import Plan
from planner.model.dp_buckets import default_bucket


def bucket_size(plan: Plan) -> int | None:
    """Parameters per DDP bucket as the plan was timed: its ddp_bucket_size, else Megatron-LM's
    default bucket over its dp x cp ranks (`dp_buckets.default_bucket`); None where the plan counts
    buckets (ddp_num_buckets)."""
    lay = plan.require_layout()
    if lay.ddp_num_buckets:
        return None
    if lay.ddp_bucket_size is not None:
        return lay.ddp_bucket_size
    return default_bucket(lay.dense_dp)


def _buckets(plan: Plan) -> dict[str, Any]:
    """DDP's bucket size and count: the plan's one, the other cleared (a recipe's
    num_buckets beside the size, or its size beside the plan's count, DDP's config refuses)."""
    lay = plan.require_layout()
    if lay.ddp_num_buckets:
        return {"num_buckets": lay.ddp_num_buckets, "bucket_size": None}
    return {"bucket_size": bucket_size(plan), "num_buckets": None}


def _instances(plan: Plan) -> dict[str, Any]:
    """DistributedDataParallelConfig.num_distributed_optimizer_instances and the outer sharding
    (its defaults 1 and "no_shard" written too)."""
    n = optimizer_instances(plan)
    optim = n > 1 and plan.job.outer_dp_sharding_strategy == "optim"
    return {
        "num_distributed_optimizer_instances": n,
        "outer_dp_sharding_strategy": "optim" if optim else "no_shard",
    }


def _fsdp_buffers(lay: Layout) -> dict[str, Any]:
    """Megatron-FSDP's buffer settings (`Layout.fsdp_double_buffer` and `Layout.fsdp_max_pool`,
    written either way: a recipe's max pool cleared, recipes/qwen_vl/h100/qwen35_vl.py:1256-1257
    sets both; and `Layout.suggested_communication_unit_size` where set); never the manual
    registration, which needs the NCCL user buffers the plan has none of."""
    table: dict[str, Any] = {
        "fsdp_double_buffer": lay.fsdp_double_buffer,
        "megatron_fsdp_max_pool_double_buffer": lay.fsdp_max_pool,
        "fsdp_manual_registration": False,
    }
    if lay.suggested_communication_unit_size is not None:
        table["suggested_communication_unit_size"] = lay.suggested_communication_unit_size
    return table


def ddp_table(plan: Plan) -> dict[str, Any]:
    """The `ddp` table (Megatron-Core's DistributedDataParallelConfig). ZeRO: 0 DDP, 1 the
    distributed optimizer, 2 / 3 Megatron-FSDP (use_megatron_fsdp,
    data_parallel_sharding_strategy)."""
    job, lay = plan.job, plan.require_layout()
    fsdp = lay.zero_stage >= 2 and not lay.use_torch_fsdp2  # Megatron-FSDP's (torch's: `dist`)
    return {
        "use_distributed_optimizer": distributed_optimizer(plan),
        "overlap_grad_reduce": lay.overlap_grad_reduce,
        "overlap_param_gather": lay.gathers_overlapped,
        **_buckets(plan),
        "grad_reduce_in_fp32": job.main_grad_dtype == "fp32",
        # NCCL user buffers, which the plan has none of (Megatron-FSDP's double buffer they need
        # is the plan's own); Bridge's validation asserts manual registration without them
        "nccl_ub": False,
        **(_fsdp_buffers(lay) if fsdp else {}),
        # a recipe's own gradient communication dtype cleared where the plan has none (set, it
        # goes in the recipe: `bridge_notes`; Bridge's override turns a string into a torch
        # dtype only over a field holding one, omegaconf_utils.py:498-505 at 067f987d)
        **(
            {"megatron_fsdp_grad_comm_dtype": None} if fsdp and not job.fsdp_grad_comm_dtype else {}
        ),
        "use_megatron_fsdp": fsdp,
        "data_parallel_sharding_strategy": FSDP_STRATEGY[lay.zero_stage] if fsdp else "no_shard",
        **_instances(plan),
    }


def distributed_optimizer(plan: Plan) -> bool:
    """Whether Megatron's distributed optimizer runs: from ZeRO 1, but for Muon (its own) and
    torch FSDP2 (whose sharded parameters Float16Optimizer updates; Megatron-LM refuses the
    distributed optimizer there, arguments.py:1038-1039)."""
    lay = plan.require_layout()
    return lay.zero_stage >= 1 and plan.job.optimizer != "muon" and not lay.use_torch_fsdp2


def _deferral(lay: Layout) -> dict[str, Any]:
    """CommOverlapConfig's deferral of the output layer's weight gradients, written either way:
    recipes defer (Bridge's GPT-3 175B H100 recipe, gpt3_175b.py:115-119;
    perf_recipes/llama/h100/llama3.py:312 and :368, perf_recipes/llama/gb200/llama3.py:514),
    and Bridge's setup keeps a user value over its own False (comm_overlap.py:436 and
    `_override_user_cfgs`), so a plan that does not defer writes False. With it, the limit
    always, since Bridge leaves it at -1 unless given (comm_overlap.py:437), which Megatron's
    ModelParallelConfig refuses with the deferral on."""
    if not lay.defer_embedding_wgrad_compute:
        return {"defer_embedding_wgrad_compute": False}
    return {
        "defer_embedding_wgrad_compute": True,
        "wgrad_deferral_limit": lay.wgrad_deferral_limit,
    }


def comm_overlap_table(plan: Plan) -> dict[str, Any]:
    """CommOverlapConfig's fields the plan decides. Bridge's setup (comm_overlap.py `setup`)
    writes this table's TP, deferral and EP-overlap settings over the model's (off unless given
    here: the model's own `overlap_moe_expert_parallel_comm` was dropped), and, with the
    distributed optimizer, its gradient-reduce and parameter-gather overlap and bucket size over
    DDP's (128 MiB buckets wherever dp > 1 unless given here: `bucket_size`)."""
    lay = plan.require_layout()
    out: dict[str, Any] = {"tp_comm_overlap": lay.tp_comm_overlap, **_deferral(lay)}
    if lay.vpp > 1 and not lay.overlap_p2p_comm:
        # Bridge turns the overlap on and batching off at vpp > 1 unless given (comm_overlap.py
        # :453-460, `_override_user_cfgs`); off, Megatron-LM batches (argument_utils.py:307)
        out["overlap_p2p_comm"] = False
        out["batch_p2p_comm"] = True
    if plan.job.arch.is_moe:
        out["overlap_moe_expert_parallel_comm"] = lay.ep_comm_overlap
        out["delay_wgrad_compute"] = lay.ep_comm_overlap
    out["overlap_grad_reduce"] = lay.overlap_grad_reduce
    out["overlap_param_gather"] = lay.gathers_overlapped
    # Megatron's: the first bucket's gather after the optimizer step, not overlapped with it;
    # the chunks' gathers aligned where Bridge's setup derives it (unset: dp, pp, vpp > 1)
    out["overlap_param_gather_with_optimizer_step"] = False
    out["align_param_gather"] = None
    # the plan's size (null beside its count: a recipe's own size cleared)
    out["bucket_size"] = bucket_size(plan)
    if lay.ddp_num_buckets and lay.zero_stage >= 1 and lay.dp > 1:
        raise InputError(
            f"{plan.path}: parallel.ddp_num_buckets: Megatron-Bridge's comm-overlap setup gives "
            "DDP a 128 MB bucket size wherever dp > 1 with the distributed optimizer "
            "(comm_overlap.py), which Megatron-Core refuses beside num_buckets; give "
            "ddp_bucket_size, or launch with --target megatron-args"
        )
    return out
