"""The flex dispatcher's own settings: its SM count (`Layout.moe_flex_dispatcher_num_sms`), at
most the GPU's and, under DeepEP, even (its Buffer.set_num_sms asserts it); and Megatron-LM's
rules on HybridEP's per-rank token budget (`Job.moe_expert_rank_capacity_factor`,
--moe-expert-rank-capacity-factor) and the paged stash (`Job.moe_paged_stash`,
--moe-paged-stash), d98e8a64 megatron/core/transformer/transformer_config.py `__post_init__`: the
budget needs the flex dispatcher's HybridEP (or NCCL-EP, which planner does not model) backend;
the stash needs the budget, and neither CPU offloading nor fine-grained offloading of the
expert modules it covers (expert_fc1, moe_act, fused_group_mlp)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import sm_count
from planner.search.rules.base import Violation

STASHED_MODULES = frozenset({"expert_fc1", "moe_act", "fused_group_mlp"})
"""Fine-grained offloading's modules whose activations the paged stash holds instead."""


def dispatcher_sms(job: Job, lay: Layout) -> Violation | None:
    """See the module docstring (read with the flex dispatcher only, as Megatron does)."""
    sms = lay.moe_flex_dispatcher_num_sms
    if not job.arch.is_moe or lay.moe_token_dispatcher_type != "flex" or sms is None:
        return None
    total = sm_count.gpu_sms(job.cluster)
    if sms > total:
        return Violation(
            "dispatcher_sms", "parallel.moe_flex_dispatcher_num_sms",
            f"{sms} SMs for the flex dispatcher, but {job.cluster.gpu.name} has {total}",
        )  # fmt: skip
    if lay.moe_flex_dispatcher_backend == "deepep" and sms % 2:
        return Violation(
            "dispatcher_sms", "parallel.moe_flex_dispatcher_num_sms",
            f"DeepEP runs its kernels on pairs of SMs: an even count (got {sms}; its "
            "Buffer.set_num_sms asserts it)",
        )  # fmt: skip
    return None


def rank_budget(job: Job, lay: Layout) -> Violation | None:
    """See the module docstring."""
    c = job.moe_expert_rank_capacity_factor
    if c is not None and job.arch.is_moe and lay.moe_flex_dispatcher_backend != "hybridep":
        return Violation(
            "rank_budget", "training.moe_expert_rank_capacity_factor",
            f"moe_expert_rank_capacity_factor ({c:g}) needs moe_flex_dispatcher_backend = "
            f'"hybridep" (got "{lay.moe_flex_dispatcher_backend}"; Megatron also takes its '
            "ncclep backend, which planner does not model)",
        )  # fmt: skip
    grouped = job.moe_fused_grouped_mlp or job.moe_grouped_tensor
    if c is not None and job.arch.is_moe and not grouped:
        return Violation(  # Megatron-Core's TransformerConfig raises (d98e8a64, ~line 1876)
            "rank_budget", "training.moe_expert_rank_capacity_factor",
            f"moe_expert_rank_capacity_factor ({c:g}) on HybridEP needs the experts as Transformer "
            "Engine's fused grouped MLP (training.moe_fused_grouped_mlp, Megatron "
            "--use-transformer-engine-op-fuser) or their grouped tensor "
            "(training.moe_grouped_tensor, --moe-use-grouped-tensor)",
        )  # fmt: skip
    if not job.moe_paged_stash:
        return None
    field = "training.moe_paged_stash"
    if c is None:
        return Violation(
            "paged_stash", field, "moe_paged_stash needs moe_expert_rank_capacity_factor "
            "(Megatron: 'there is no need to use paged stashing without it')",
        )  # fmt: skip
    if lay.cpu_offloading_num_layers:
        return Violation(
            "paged_stash", field, "moe_paged_stash cannot be enabled with CPU offloading "
            f"(cpu_offloading_num_layers = {lay.cpu_offloading_num_layers})",
        )  # fmt: skip
    both = sorted(STASHED_MODULES & set(lay.offload_modules))
    if both:
        return Violation(
            "paged_stash", field, "with moe_paged_stash, offload_modules must not include "
            f"{', '.join(both)} (the stash holds those activations)",
        )  # fmt: skip
    if job.moe_paged_stash_buffer_size_factor == 0:
        return Violation(
            "paged_stash", "training.moe_paged_stash_buffer_size_factor",
            "a paged stash of no pages (moe_paged_stash_buffer_size_factor = 0): every step "
            "would overflow it",
        )  # fmt: skip
    return None


RULES = (dispatcher_sms, rank_budget)
