"""Megatron-LM settings a torchtitan plan may not give (`megatron_setting`, a rule of
`planner.search.rules.torchtitan.features`): each is priced by planner as Megatron-LM runs it,
and no torchtitan target can run it, so a plan giving it is refused naming the field (exit 2)
rather than launched as another job than the one it predicts. The Megatron settings the model
already prices as nothing under torchtitan and `planner.inputs.inert` warns about
(`inert.MEGATRON_TRAINING`: tp_userbuffers, moe_router_padding, moe_grouped_tensor, the loss
fusions, ...) are left to that warning."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def megatron_setting(job: Job, lay: Layout) -> Violation | None:
    """The first Megatron-LM setting of a torchtitan plan that torchtitan does not run (its
    field, and what torchtitan runs instead); None for Megatron-LM plans."""
    if job.framework != "torchtitan":
        return None
    settings = (
        (lay.tp_comm_overlap, "parallel.tp_comm_overlap", "use torchtitan.async_tp"),
        (lay.ep_comm_overlap, "parallel.ep_comm_overlap", "no torchtitan setting"),
        (
            lay.moe_shared_expert_overlap,
            "parallel.moe_shared_expert_overlap",
            "no torchtitan setting",
        ),
        (lay.cpu_offloading_num_layers > 0, "parallel.cpu_offloading_num_layers", "none"),
        (
            bool(lay.offload_modules),
            "parallel.offload_modules",
            "its trainer offloads no activations; training.enable_cpu_offload moves FSDP2's "
            "parameters, gradients and optimizer states",
        ),
        (
            lay.defer_embedding_wgrad_compute,
            "parallel.defer_embedding_wgrad_compute",
            "torch's schedules run each weight gradient in its backward",
        ),
        (
            lay.microbatch_group_size_per_vp_stage is not None,
            "parallel.microbatch_group_size_per_vp_stage",
            "torch's schedules fix it",
        ),
        (not lay.overlap_grad_reduce, "parallel.overlap_grad_reduce", "FSDP2 always overlaps"),
        (not lay.overlap_param_gather, "parallel.overlap_param_gather", "FSDP2 prefetches"),
        *(
            (
                getattr(lay, f) is not None,
                f"parallel.{f}",
                "FSDP2 reduces per module, not in buckets",
            )
            for f in ("ddp_bucket_size", "ddp_num_buckets")
        ),
        (job.main_grad_dtype != "fp32", "training.main_grad_dtype", "reduces in float32 only"),
        (
            job.optimizer_state_dtype != "fp32" and job.optimizer != "adam",
            "training.optimizer_state_dtype",
            "bf16 moments are AdamW's only (b5bcd76c optimizer implementation \"fused_opt_states_"
            'bf16", components/optimizer/optimizer.py:109-123)',
        ),
        (job.main_params_dtype != "fp32", "training.main_params_dtype", "fp32 only"),
        (
            job.use_precision_aware_optimizer,
            "training.use_precision_aware_optimizer",
            "Megatron's (Transformer Engine's FusedAdam) only",
        ),
        (
            job.exp_avg_dtype is not None or job.exp_avg_sq_dtype is not None,
            "training.exp_avg_dtype",
            "per-moment dtypes are Megatron's (Transformer Engine's FusedAdam) only",
        ),
        (job.fp8_param_gather, "training.fp8_param_gather", "use torchtitan.float8_all_gather"),
        (
            job.arch.is_moe and lay.moe_token_dispatcher_type == "allgather",
            "parallel.moe_token_dispatcher_type",
            'torchtitan dispatches with all-to-all ("alltoall") or DeepEP ("flex")',
        ),
        (
            job.moe_expert_rank_capacity_factor is not None or job.moe_paged_stash,
            "training.moe_expert_rank_capacity_factor",
            "torchtitan's DeepEP is dropless, with no paged stash",
        ),
        (
            lay.moe_flex_dispatcher_num_sms is not None,
            "parallel.moe_flex_dispatcher_num_sms",
            "DeepEP's default SM count under torchtitan",
        ),
        (
            not job.flash_attention,
            "training.flash_attention",
            "torch's SDPA tries cuDNN, then flash attention, with no setting to unfuse it: "
            "e347b1e5 models/attention.py:168-190, b5bcd76c models common attention.py:382-417",
        ),
        (
            job.gemm_sm_margin > 0,
            "training.gemm_sm_margin",
            "Transformer Engine's NVTE_EXT_MARGIN_SM; torchtitan's GEMMs are torch's",
        ),
        (
            job.log_grad_stats,
            "training.log_grad_stats",
            "--log-num-zeros-in-grad; torchtitan has no such statistic",
        ),
        (
            job.test_mode,
            "training.test_mode",
            "Megatron-LM's --test-mode real-time checks; torchtitan has no test mode: e347b1e5 "
            "job_config.py:243 (Training), b5bcd76c config/configs.py:36 (TrainingConfig)",
        ),
        (
            job.moe_expert_capacity_factor is not None,
            "training.moe_expert_capacity_factor",
            "torchtitan's MoE routes dropless, with no capacity factor: e347b1e5 torchtitan models "
            "moe moe.py:21-41 (MoEArgs), b5bcd76c models common moe.py",
        ),
        (
            job.rl_kv_cache_bytes > 0 or job.rl_inference_parallel is not None,
            "training.rl_kv_cache_gib"
            if job.rl_kv_cache_bytes
            else "training.rl_inference_parallel",
            "Megatron-LM's RL step (train_rl.py); torchtitan's trainer holds no rollout KV cache "
            "or inference engine",
        ),
        (
            job.vision_encoder is not None,
            "training.vision_encoder",
            "Megatron-LM's LLaVA vision transformer (pretrain_vlm.py); planner models no "
            "torchtitan vision encoder",
        ),
        (
            not job.masked_softmax_fusion,
            "training.masked_softmax_fusion",
            "the fused masked softmax of Megatron's local attention; torchtitan's is torch's SDPA",
        ),
        *(
            (
                getattr(lay, f) not in (None, False),
                f"parallel.{f}",
                "Megatron-FSDP's; torchtitan shards with FSDP2, one unit per module",
            )
            for f in ("fsdp_double_buffer", "suggested_communication_unit_size")
        ),
        (
            job.fsdp_grad_comm_dtype is not None,
            "training.fsdp_grad_comm_dtype",
            "Megatron-FSDP's; FSDP2 reduces in its MixedPrecisionPolicy's reduce_dtype",
        ),
        (
            job.cross_entropy == "fused",
            "training.cross_entropy",
            'torchtitan has no fused cross entropy: "pytorch" (loss parallel, vocab-split under '
            'TP) or "gathered" (e347b1e5 disable_loss_parallel)',
        ),
    )
    for broken, field, instead in settings:
        if broken:
            return Violation(
                "tt_megatron_only",
                field,
                f"a Megatron-LM setting torchtitan does not run ({instead})",
            )
    return None
