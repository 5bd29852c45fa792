"""Megatron-LM's rules on DeepSeek sparse attention (`ModelArch.has_dsa`, `planner.model.dsa`):
what the absorbed MLA it runs on asserts of tensor parallelism and of its recompute, what the
transformer config asserts of context parallelism and of RoPE fusion, the kernels it runs under
the unfused attention backend, and that only Megatron runs it.

Sources: Megatron-LM d98e8a64 megatron/core/transformer/experimental_attention_variant/
absorbed_mla.py (`AbsorbedMLASelfAttention.__init__`: "AbsorbedMLA requires sequence_parallel when
tensor_model_parallel_size > 1"; the mla_up_proj recompute: "FP8/FP4 is not supported for
AbsorbedMLA"), megatron/core/transformer/transformer_config.py (`__post_init__`, experimental
attention variant "dsa": "RoPE fusion is not supported for DSAttention", "DSAttention context
parallelism currently supports cp_comm_type=allgather only"), experimental_attention_variant/
dsa_kernels.py (`use_fused_dsa_kernels`: none under attention_backend unfused)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation, megatron_only


def sequence_parallel(job: Job, lay: Layout) -> Violation | None:
    if job.arch.has_dsa and lay.tp > 1 and not lay.sequence_parallel:
        return Violation(
            "dsa_sp",
            "parallel.sequence_parallel",
            f"DeepSeek sparse attention with tensor_model_parallel_size {lay.tp} needs "
            "sequence_parallel = true (Megatron's absorbed MLA asserts it)",
        )
    return None


def context_exchange(job: Job, lay: Layout) -> Violation | None:
    if job.arch.has_dsa and lay.cp > 1 and lay.cp_comm_type != "all_gather":
        return Violation(
            "dsa_cp_comm",
            "parallel.cp_comm_type",
            f"DeepSeek sparse attention with context_parallel_size {lay.cp} needs cp_comm_type "
            f"all_gather (Megatron's DSAttention supports no other; got {lay.cp_comm_type!r})",
        )
    return None


def rope_fusion(job: Job, lay: Layout) -> Violation | None:
    arch = job.arch
    if arch.has_dsa and job.fused_rope and arch.position_embedding_type == "rope":
        return Violation(
            "dsa_rope_fusion",
            "training.fused_rope",
            "DeepSeek sparse attention needs fused_rope = false (Megatron asserts RoPE fusion is "
            "not supported for DSAttention; --no-rope-fusion)",
        )
    return None


def kernel_backend(job: Job, lay: Layout) -> Violation | None:
    backend = job.dsa_kernel_backend
    if job.arch.has_dsa and backend != "none" and not job.flash_attention:
        return Violation(
            "dsa_unfused_backend",
            "training.dsa_kernel_backend",
            f"dsa_kernel_backend {backend!r} does not run with flash_attention = false: Megatron "
            "runs no fused DSA kernel under --attention-backend unfused (set dsa_kernel_backend "
            '= "none", or flash_attention = true)',
        )
    return None


def up_proj_recompute_barred(job: Job) -> bool:
    """Whether the job's absorbed MLA refuses the mla_up_proj recompute (DeepSeek sparse
    attention in FP8 or FP4); the search's recompute rungs leave it out there too."""
    return job.arch.has_dsa and job.precision in ("fp8", "fp4")


def up_proj_recompute(job: Job, lay: Layout) -> Violation | None:
    if not up_proj_recompute_barred(job):
        return None
    if lay.recompute == "selective" and "mla_up_proj" in lay.recompute_modules:
        return Violation(
            "dsa_up_proj_recompute",
            "parallel.recompute_modules",
            f"recompute module mla_up_proj with DeepSeek sparse attention does not run in "
            f"{job.precision} (Megatron's absorbed MLA asserts FP8/FP4 is not supported there)",
        )
    return None


def framework(job: Job, lay: Layout) -> Violation | None:
    what = "DeepSeek sparse attention (model.dsa_indexer_*)"
    return megatron_only(job, job.arch.has_dsa, "dsa_framework", what)


RULES = (
    sequence_parallel,
    context_exchange,
    rope_fusion,
    kernel_backend,
    up_proj_recompute,
    framework,
)

STRUCTURAL_RULES = (sequence_parallel, context_exchange, framework)
"""The rules that read the degrees alone (with the structure's sequence parallelism and
context-parallel exchange)."""

JOB_RULES = (rope_fusion, kernel_backend)
"""The rules that read the job alone."""
