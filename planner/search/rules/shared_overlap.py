"""Megatron-LM's rules on --moe-shared-expert-overlap (`Layout.moe_shared_expert_overlap`),
d98e8a64 megatron/core/transformer/transformer_config.py: with shared experts, the alltoall or
flex dispatcher only (:1820-1826) and no recompute of the shared experts (:1991-1998); never
with --overlap-moe-expert-parallel-comm, shared experts or not (:3039-3041). A model without
shared experts runs the flag as a no-op, as Megatron does."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation

FIELD = "parallel.moe_shared_expert_overlap"


def shared_expert_overlap(job: Job, lay: Layout) -> Violation | None:
    """See the module docstring."""
    if not lay.moe_shared_expert_overlap:
        return None
    why = "moe_shared_expert_overlap = true"
    if lay.ep_comm_overlap:
        return Violation(
            "shared_overlap_ep", FIELD, f"{why} with ep_comm_overlap = true: Megatron asserts "
            "'disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm'",
        )  # fmt: skip
    if not job.arch.moe_shared_expert_intermediate_size:
        return None
    if lay.moe_token_dispatcher_type == "allgather":
        return Violation(
            "shared_overlap_dispatcher", FIELD, f"{why} works only with the alltoall or flex "
            "token dispatcher (got allgather)",
        )  # fmt: skip
    if lay.recompute == "selective" and "shared_experts" in lay.recompute_modules:
        return Violation(
            "shared_overlap_recompute", FIELD, f"{why} with recompute module shared_experts: "
            "Megatron raises 'shared_experts recompute cannot work with "
            "--moe-shared-expert-overlap'",
        )  # fmt: skip
    return None


RULES = (shared_expert_overlap,)
