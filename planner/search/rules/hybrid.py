"""Megatron-LM's rules on a hybrid Mamba stack's layout: what the Mamba-2 mixer asserts of its
heads and groups under tensor and context parallelism, that only Megatron runs such stacks, and
that its merged forward-backward schedule (the EP overlap) is GPTModel's alone.

Sources: Megatron-LM d98e8a64 megatron/core/ssm/mamba_mixer.py (`MambaMixer.__init__`: heads and
groups divisible by tp, heads by groups; under FP8 the in_proj output width a multiple of 16) and
megatron/core/ssm/mamba_context_parallel.py (`MambaContextParallel.__init__`: each CP rank gets
whole heads, and the groups per TP rank divide cp or are divided by it)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation, megatron_only


def mamba(job: Job, lay: Layout) -> Violation | None:
    arch = job.arch
    if not arch.is_hybrid or "M" not in (arch.hybrid_layer_pattern or ""):
        return None
    heads, groups, tp, cp = arch.mamba_heads, arch.mamba_num_groups, lay.tp, lay.cp
    if heads % tp or groups % tp:
        return Violation(
            "mamba_tp",
            "parallel.tp",
            f"the Mamba heads ({heads}) and mamba_num_groups ({groups}) must be multiples of "
            f"tensor_model_parallel_size ({tp})",
        )
    local_groups = groups // tp
    if cp > 1 and ((heads // tp) % cp or (cp % local_groups and local_groups % cp)):
        return Violation(
            "mamba_cp",
            "parallel.cp",
            f"context_parallel_size ({cp}) must divide the Mamba heads per TP rank "
            f"({heads // tp}) and divide or be divided by the groups per TP rank ({local_groups})",
        )
    width = 2 * arch.mamba_inner + 2 * groups * arch.mamba_state_dim + heads
    if job.precision == "fp8" and width % 16:
        return Violation(
            "mamba_fp8",
            "training.precision",
            f"FP8 needs the Mamba in_proj width (2 d_inner + 2 groups x state + heads = {width}) "
            "to be a multiple of 16",
        )
    return None


def framework(job: Job, lay: Layout) -> Violation | None:
    what = "a hybrid Mamba stack (model.hybrid_layer_pattern)"
    return megatron_only(job, job.arch.is_hybrid, "hybrid_framework", what)


def expert_overlap(job: Job, lay: Layout) -> Violation | None:
    if job.arch.is_hybrid and lay.ep_comm_overlap:
        return Violation(
            "hybrid_ep_overlap",
            "parallel.ep_comm_overlap",
            "--overlap-moe-expert-parallel-comm runs the model's build_schedule_plan "
            "(pipeline_parallel/combined_1f1b.py), which GPTModel has and HybridModel has not",
        )
    return None


RULES = (mamba, framework, expert_overlap)

STRUCTURAL_RULES = (mamba, framework)
"""The rules that read the degrees alone."""
