"""Megatron-LM's and Transformer Engine's rules on context parallelism: the sequence's split, the
attention backend, and the exchange (`Layout.cp_comm_type`) each attention can run under.
Sources: Megatron-LM d98e8a64 validate_args and megatron/core/extensions/transformer_engine.py;
TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
(attn_forward_func_with_cp and AttnFuncWithCPAndQKVOA2A.forward, TransformerEngine d0067d0d)."""

from __future__ import annotations

from planner.inputs.layout import CpCommType, Layout
from planner.inputs.plan import Job
from planner.model.cp_time import head_widths
from planner.search.rules.base import Violation
from planner.search.rules.dsa import context_exchange as dsa_exchange

EXCHANGES: tuple[CpCommType, ...] = ("p2p", "a2a", "all_gather")
"""The exchanges in the order the search offers them (`exchange_for`): Megatron's default first."""


def context(job: Job, lay: Layout) -> Violation | None:
    s = job.seq_length
    if lay.cp > 1 and s % (2 * lay.cp):
        return Violation(
            "seq_cp",
            "parallel.cp",
            f"seq_length ({s}) must be a multiple of 2 x context_parallel_size "
            f"(2 x {lay.cp} = {2 * lay.cp})",
        )
    return None


def context_attention(job: Job, lay: Layout) -> Violation | None:
    """Whether an attention backend runs under the layout's context parallelism. Megatron's own
    DotProductAttention asserts "Context parallelism is only supported by
    TEDotProductAttention!", and Transformer Engine disables its unfused backend under CP
    (get_attention_backend): CP runs only on the flash / cuDNN fused attention kernels. fp32
    training (`planner.model.fp32`) has neither: they take bf16 / fp16 only (TransformerEngine
    a0b36d0c attention/dot_product_attention/utils.py `get_attention_backend`, "Filter: Data
    type"), so its unfused attention is the only backend, which has no context-parallel path
    (the same function: "Disabling UnfusedDotProductAttention as it does not support context
    parallelism"); the Megatron-LM line reader
    refuses --context-parallel-size > 1 without --bf16 / --fp16 too
    (`planner.inputs.megatron_training`)."""
    if lay.cp > 1 and job.params_dtype == "fp32":  # FP8 / NVFP4 on fp32 parameters too
        return Violation(
            "cp_fp32",
            "parallel.cp",
            f"context_parallel_size {lay.cp} with fp32 parameters (precision {job.precision}): "
            "Transformer Engine runs fp32 "
            "attention only in its unfused backend (flash and cuDNN attention take bf16 / fp16), "
            "which has no context parallelism; use cp 1",
        )
    if lay.cp > 1 and not job.flash_attention:
        return Violation(
            "cp_attention",
            "parallel.cp",
            f"context_parallel_size {lay.cp} needs flash attention (Transformer Engine's flash "
            "or fused backend); training.flash_attention is false",
        )
    return None


def attention_sinks(job: Job, lay: Layout) -> Violation | None:
    """Whether Transformer Engine has an attention backend for the model's sinks
    (`ModelArch.softmax_type` other than vanilla; get_attention_backend, TransformerEngine
    d0067d0d): FlashAttention runs none (so not `attention_kernel` "flash2"); in FP8 attention
    the unfused backend is off and the fused one needs compute capability 10.0 (Blackwell) and
    cuDNN 9.21; under Megatron's deterministic mode (NVTE_ALLOW_NONDETERMINISTIC_ALGO=0) the fused
    one is off too ("Sink attention ... requires NVTE_ALLOW_NONDETERMINISTIC_ALGO=1"), which leaves
    TE's unfused attention, not what a flash-attention plan times. Megatron's own unfused
    attention (flash_attention false) adds the offset itself. Under context parallelism:
    `context_exchange`."""
    sinks = job.arch.softmax_type
    if sinks == "vanilla" or not job.flash_attention:
        return None
    if job.deterministic and job.framework == "megatron":
        return Violation(
            "sinks_deterministic",
            "training.deterministic",
            f"softmax_type {sinks!r} (attention sinks) with deterministic = true: Transformer "
            "Engine then disables its fused attention for sinks (they need "
            "NVTE_ALLOW_NONDETERMINISTIC_ALGO=1) and FlashAttention runs none, so the layers "
            "fall back to unfused attention; set deterministic = false, or flash_attention = "
            "false to plan the unfused attention",
        )
    if job.attention_kernel == "flash2":
        return Violation(
            "sinks_flash2",
            "training.attention_kernel",
            f"softmax_type {sinks!r} (attention sinks) does not run on FlashAttention: "
            "Transformer Engine takes its fused (cuDNN) attention for them; attention_kernel "
            "'flash2' asks for FlashAttention-2",
        )
    gpu = job.cluster.gpu
    if job.attention_in_fp8 and gpu.vendor == "nvidia" and not gpu.is_blackwell:
        return Violation(
            "sinks_fp8",
            "training.fp8_attention",
            f"softmax_type {sinks!r} (attention sinks) in FP8 attention needs Blackwell: "
            "Transformer Engine's fused FP8 attention runs sinks only on compute capability 10.0 "
            f"and up, and its unfused one no FP8 ({gpu.name} is not Blackwell)",
        )
    return None


def flash2_head_dims(job: Job, lay: Layout) -> Violation | None:
    """Whether FlashAttention-2 (`attention_kernel` "flash2") runs the model's attention: it
    needs the query / key and value heads equally wide, which multi-latent attention's are not
    (`cp_time.head_widths`: qk_head_dim + qk_pos_emb_head_dim against v_head_dim; Megatron-LM
    d98e8a64 multi_latent_attention.py:214-215 passes them as the core attention's k_channels
    and v_channels, padding the value only for packed THD input, :85-99, which planner does not
    plan). Megatron-LM on NVIDIA: Transformer Engine's get_attention_backend ("Filter: Head
    dimension", TransformerEngine 002a3e57 dot_product_attention/utils.py) disables FA2 for
    unequal head dims ("Disabling FlashAttention 2 as it does not support MLA"), and the
    `--attention-backend flash --flash-attention-version 2` the plan launches with
    (emit/megatron.py) turns the fused and unfused backends off (language_module.py:133-136,
    NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=0) and the other FlashAttention generations too
    (:154-159, NVTE_FLASH_ATTN_V3/V4=0): DotProductAttention raises "No dot product attention
    backend is available". (A Transformer Engine that reads NVTE_FLASH_ATTN alone, as
    002a3e57's get_attention_backend does, runs FlashAttention-3 instead where it is installed
    on Hopper: not the kernel the plan times either.) torchtitan: PyTorch SDPA's flash backend
    refuses unequal head dims too (pytorch 001f694a
    aten/src/ATen/native/transformers/cuda/sdp_utils.cpp `check_head_dim_size_flash`), so SDPA
    runs another backend than the one the plan times.
    DeepSeek sparse attention runs its own core attention, not Transformer Engine's
    (experimental_attention_variant_module_specs.py:104-108): no rule there."""
    if job.attention_kernel != "flash2" or not job.flash_attention or job.arch.has_dsa:
        return None
    if job.framework == "megatron" and job.cluster.gpu.vendor != "nvidia":
        return None  # (the megatron-args target pins no backend off NVIDIA: emit/megatron.py)
    qk, v = head_widths(job.arch)
    if qk == v:
        return None
    arch = job.arch
    dims = (
        f"query/key head dim {qk} = qk_head_dim {arch.qk_head_dim} + qk_pos_emb_head_dim "
        f"{arch.qk_pos_emb_head_dim}, value head dim {v}"
    )
    if job.framework == "torchtitan":
        why = (
            "PyTorch SDPA's flash backend needs them equal (sdp_utils.cpp "
            "check_head_dim_size_flash, pytorch 001f694a), so SDPA runs another kernel than "
            "the FlashAttention-2 this plan times"
        )
    else:
        why = (
            "Transformer Engine disables FlashAttention-2 for unequal head dims "
            "(get_attention_backend, TransformerEngine 002a3e57 dot_product_attention/utils.py: "
            '"Disabling FlashAttention 2 as it does not support MLA"), and --attention-backend '
            "flash --flash-attention-version 2 turns every other backend off (Megatron-LM "
            "d98e8a64 language_module.py:133-136, 154-159), so DotProductAttention raises "
            '"No dot product attention backend is available" (or, under a Transformer Engine '
            "that ignores NVTE_FLASH_ATTN_V3, runs FlashAttention-3 where installed: not the "
            "kernel this plan times)"
        )
    fix = " (on a Megatron-LM command line: --attention-backend auto or fused)"
    return Violation(
        "mla_flash2",
        "training.attention_kernel",
        f"attention_kernel 'flash2' with multi-latent attention ({dims}): {why}; set "
        'attention_kernel = "fused"' + (fix if job.framework == "megatron" else ""),
    )


def context_exchange(job: Job, lay: Layout) -> Violation | None:
    """Whether Transformer Engine runs the layout's context-parallel exchange: attention sinks
    (`ModelArch.softmax_type`) run only under a2a (get_attention_backend disables the fused
    attention for other exchanges, and no other backend runs them with CP); the p2p ring does
    not run sliding-window attention (attn_forward_func_with_cp asserts "Context parallelism does
    not support sliding window attention with cp_comm_type='p2p'"); a2a splits every rank's Q, K
    and V heads over the cp ranks ("cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q,
    K, V": the heads of a TP rank, K/V heads replicated to one where tp exceeds the query
    groups). torchtitan's context parallelism is PyTorch's, which all-gathers K/V
    (`planner.model.titan_cp`) and takes no exchange setting from a plan: its layouts keep
    cp_comm_type at the default, p2p, read as that exchange; it runs its sliding windows in
    FlexAttention, not in Transformer Engine (no window rule there)."""
    if lay.cp <= 1:
        return None
    kind = lay.cp_comm_type
    if job.framework == "torchtitan":
        if kind == "p2p":
            return None
        return Violation(
            "cp_comm_titan",
            "parallel.cp_comm_type",
            "torchtitan's context parallelism is PyTorch's (context_parallel), which "
            "all-gathers K/V whatever a plan says; it takes cp_comm_type at its default, "
            f"'p2p' (cp_comm_type {kind!r} is Megatron-LM's)",
        )
    sinks = job.arch.softmax_type
    if sinks != "vanilla" and kind != "a2a":
        return Violation(
            "cp_comm_sinks",
            "parallel.cp_comm_type",
            f"context_parallel_size {lay.cp} with softmax_type {sinks!r} (attention sinks) needs "
            f"cp_comm_type a2a: Transformer Engine runs sinks under context parallelism only in "
            f"its fused attention with a2a (not {kind!r})",
        )
    if kind == "p2p" and job.arch.window_size is None:
        return None
    if kind == "p2p":
        return Violation(
            "cp_comm_window",
            "parallel.cp_comm_type",
            f"context_parallel_size {lay.cp} with sliding-window attention (window_size "
            f"{job.arch.window_size}) needs cp_comm_type a2a or all_gather: Transformer Engine's "
            "p2p ring does not support sliding window attention",
        )
    if kind == "a2a":
        q = job.arch.num_attention_heads // lay.tp
        kv = max(job.arch.query_groups // lay.tp, 1)
        if q % lay.cp or kv % lay.cp:
            return Violation(
                "cp_comm_a2a_heads",
                "parallel.cp_comm_type",
                f"cp_comm_type a2a splits each tensor-parallel rank's heads over the "
                f"context_parallel_size ({lay.cp}): query heads {q} and K/V heads {kv} per rank "
                "must both be multiples of it",
            )
    return None


def exchange_for(job: Job, tp: int, cp: int) -> CpCommType:
    """The first of EXCHANGES that `context_exchange` (and DeepSeek sparse attention's
    `dsa.context_exchange`: all_gather only) accepts for these degrees (p2p where no rule refuses
    it; p2p again where none is accepted, for the rule to name)."""
    base = Layout(tp=tp, cp=cp)
    for kind in EXCHANGES:
        lay = base.with_(cp_comm_type=kind)
        if context_exchange(job, lay) is None and dsa_exchange(job, lay) is None:
            return kind
    return "p2p"
