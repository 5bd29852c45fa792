"""How a layout splits one layer's activations (`make_shard`: the `planner.model.shard.Shard`
of a job and layout), built; `planner.model.stage_activations.shard` remembers it per job and
layout."""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import dsa, fp32, moe_padding, routing_load
from planner.model.graph_capture import keeps_pre_moe_norm
from planner.model.router_dtype import cast_bytes
from planner.model.router_graph import router_graph_outputs
from planner.model.shard import AttentionFp8, Shard, linear_input_bytes

FUSED_HEAD_DIM_MULTIPLE = 8
"""Transformer Engine runs its fused attention (cuDNN) and FlashAttention only on head dimensions
that are multiples of 8 (TE common/fused_attn/fused_attn.cpp `nvte_get_fused_attn_backend`: "head
dimension ... multiples of 8"; dot_product_attention/utils.py `get_attention_backend` likewise for
flash-attn); any other (LLaVA's test model: 624 / 12 = 52) falls back to its unfused attention,
which stores the s^2 scores, as fp32 training does whatever the head dimension
(`planner.model.fp32`)."""


SHARD_UNREAD = frozenset(
    {
        "pp",
        "dp",
        "vpp",
        "zero_stage",
        "recompute_method",
        "recompute_num_layers",
        "recompute_every",
        "cpu_offloading_num_layers",
        "moe_flex_dispatcher_num_sms",
        "pipeline_layers",
        "pipeline_layout",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "tp_comm_overlap",
        "ep_comm_overlap",
        "overlap_grad_reduce",
        "microbatch_group_size_per_vp_stage",
        "overlap_p2p_comm",
        "overlap_param_gather",
        "ddp_bucket_size",
        "defer_embedding_wgrad_compute",
        "wgrad_deferral_limit",
        "ddp_num_buckets",
        "fsdp_double_buffer",
        "fsdp_max_pool",
        "suggested_communication_unit_size",
        "dp_pools",
        "use_tp_pp_dp_mapping",
        "use_torch_fsdp2",
        "torch_fsdp2_reshard_after_forward",
        "v_stages",
    }
)
"""The layout fields `make_shard` does not read. It reads the degrees tp, cp, ep and etp
(`Layout.expert_tp`), sequence parallelism, the micro-batch size, the recompute policy and
modules, the offloaded modules and fraction, the CP exchange, the shared-expert overlap, the token
dispatcher and its backend: itself, and through `routing_load.memory_loads` (the micro-batch size,
cp, tp, sequence parallelism, ep, etp, the dispatcher and its backend) and
`graph_capture.keeps_pre_moe_norm` (the shared-expert overlap, the dispatcher) and
`router_graph.router_graph_outputs` (those and the backend); `dsa.shard_fields`
reads tp, `router_dtype`, `fp32` and `shard` the job alone. No pipeline, data-parallel, ZeRO,
schedule-overlap, block-recompute or whole-layer offloading field: `stage_activations.shard`
remembers one shard for the layouts that differ only in those (DeepSeek-V3 on 2,048 H800: 662
shards for the 2,214 layouts its search asks; tests/model/test_shard_memo.py builds them afresh)."""


FP8_ATTENTION_KINDS: dict[str, AttentionFp8] = {
    "delayed": "delayed",
    "tensorwise": "current",
    "mxfp8": "mxfp8",
}
"""How each FP8 recipe's fused attention keeps Q, K and V (`Shard.attention_fp8`): Megatron-LM
d98e8a64 hands fp8_dpa to the delayed (TEDelayedScaling, extensions/transformer_engine.py:3350),
tensorwise (Float8CurrentScaling, fp8_utils.py:777-780) and MXFP8 (:785-788) recipes; blockwise
is refused (`precision_checks`). NVFP4 is left at 16 bits: Transformer Engine d0067d0d turns its
fused attention off for an NVFP4 recipe (dot_product_attention/utils.py:721-723) unless
NVTE_DPA_FP8_RECIPE names another."""


def attention_fp8(job: Job, layout: Layout) -> AttentionFp8:
    """`Shard.attention_fp8` of a job: its recipe's (`FP8_ATTENTION_KINDS`) where the fused
    attention runs in FP8, without context parallelism or with its all-to-all exchange
    (AttnFuncWithCPAndQKVOA2A saves what FusedAttnFunc does, context_parallel.py:4540-4553;
    the other exchanges keep other mixes, left at 16 bits), not DeepSeek sparse attention's."""
    cp_like_none = layout.cp == 1 or layout.cp_comm_type == "a2a"
    if not (job.attention_in_fp8 and cp_like_none) or job.arch.has_dsa or job.precision != "fp8":
        return ""
    return FP8_ATTENTION_KINDS.get(job.fp8_recipe, "")


def make_shard(job: Job, layout: Layout) -> Shard:
    """How a layout splits one layer's activations (`planner.model.shard.Shard`), built
    (`stage_activations.shard` remembers it)."""
    s = job.seq_length // layout.cp
    policy = job.recompute_policy(layout.recompute)
    kept, working = routing_load.memory_loads(job, layout)
    pad = moe_padding.padding(job, layout)
    in_fp32, quantised = job.params_dtype == "fp32", job.quantised  # (`planner.model.fp32`)
    flash = job.flash_attention and job.arch.head_dim % FUSED_HEAD_DIM_MULTIPLE == 0
    out = Shard(
        tokens=s * layout.micro_batch_size,
        tp=layout.tp,
        sequence_parallel=layout.sequence_parallel,
        etp=layout.expert_tp,
        recompute=policy,
        linear_bytes=fp32.LINEAR_INPUT_BYTES
        if job.precision == "fp32"
        else linear_input_bytes(job),
        value_bytes=fp32.value_bytes(job),
        seq_per_cp_rank=s,
        seq_length=job.seq_length,
        micro_batch_size=layout.micro_batch_size,
        fused_norm=job.fused_norm,
        cross_entropy=job.cross_entropy,
        compiled_loss=job.titan.compile_loss
        if job.framework == "torchtitan"
        else job.compiled_loss_fusion and job.framework == "megatron",
        loss_chunks=job.titan.loss_chunks if job.framework == "torchtitan" else 1,
        attention_dropout=job.attention_dropout,
        unfused_attention=job.unfused_attention,
        masked_softmax_fusion=job.masked_softmax_fusion,
        hidden_dropout=job.hidden_dropout,
        frozen=job.frozen_model,
        fused_swiglu=job.fused_swiglu,
        torchtitan=job.framework == "torchtitan",
        router_tokens_whole=job.framework == "torchtitan" and layout.ep == 1 and layout.tp > 1,
        weighted_experts=job.framework == "megatron",
        te_grouped_mlp=job.moe_fused_grouped_mlp and job.framework == "megatron",
        shared_keeps_original=job.framework == "megatron"
        and quantised
        and job.quant_recipe != "delayed",
        proj_keeps_original=job.framework == "megatron"
        and quantised
        and job.quant_recipe != "delayed",
        attention_fp8=attention_fp8(job, layout),
        cp_out_part=layout.cp > 1
        and layout.cp_comm_type == "a2a"
        and job.framework == "megatron"
        and not job.arch.has_dsa,
        shared_gathered=layout.moe_shared_expert_overlap and layout.tp > 1,
        fc1_keeps_original="expert_fc1" in layout.offload_modules
        and quantised
        and not job.block_scaled,
        expert_padding=pad.experts_pad,
        pad_pairs=pad.pairs,
        pad_sent=pad.sent,
        combine_cast_bytes=cast_bytes(job),
        moe_send_load=job.moe_expert_capacity_factor or 1.0
        if job.moe_pad_expert_input_to_capacity
        else 1.0,
        sp_keeps_gathered_input=job.sp_keeps_gathered_input,
        flash_attention=flash and not in_fp32,
        modules=frozenset(layout.recompute_modules) if policy == "core_attn" else frozenset(),
        moe_load=kept,
        moe_work_load=working if working != kept else None,
        cuda_graphs=job.cuda_graphs,
        cuda_graph_impl=job.cuda_graph_impl,
        cuda_graph_modules=frozenset(job.cuda_graph_modules),
        keeps_pre_moe_norm=keeps_pre_moe_norm(job, layout),
        offload=frozenset(layout.offload_modules),
        offload_fraction=layout.activation_offload_fraction,
    )
    if outputs := router_graph_outputs(job, layout, out):
        out = replace(out, router_graph_outputs=outputs)
    return replace(out, **dsa.shard_fields(job, layout.tp)) if job.arch.has_dsa else out
