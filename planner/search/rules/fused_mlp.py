"""Megatron-LM's rules on the experts' fused grouped MLP (`training.moe_fused_grouped_mlp`, Megatron
--use-transformer-engine-op-fuser) against the layout, d98e8a64: the experts build it only
without expert tensor parallelism and without the expert_fc1 / moe_act activation offloading
(megatron.core.transformer.moe.experts `_is_fused_impl_supported`, asserted when the op fuser
is on); offloading the fused_group_mlp module needs it (TransformerConfig: "fused_group_mlp
requires use_transformer_engine_op_fuser")."""

from __future__ import annotations

from planner.inputs.layout import Layout, OffloadModule
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def fused_grouped_mlp(job: Job, lay: Layout) -> Violation | None:
    """See the module docstring."""
    # (a dense model: `features.fine_offloading` refuses the expert module itself, and the
    # switch is read as off there, `plan.build_job`)
    if (
        "fused_group_mlp" in lay.offload_modules
        and job.arch.is_moe
        and not job.moe_fused_grouped_mlp
    ):
        return Violation(
            "fused_mlp_offload", "parallel.offload_modules", "offload module fused_group_mlp "
            "needs training.moe_fused_grouped_mlp = true (Megatron's "
            "--use-transformer-engine-op-fuser)",
        )  # fmt: skip
    if not job.moe_fused_grouped_mlp:
        return None
    split = [m for m in ("expert_fc1", "moe_act") if m in lay.offload_modules]
    if split:
        return Violation(
            "fused_mlp_offload", "parallel.offload_modules", f"offload module {split[0]} offloads "
            "part of the experts' MLP, which the fused grouped MLP (training."
            "moe_fused_grouped_mlp) keeps whole; offload fused_group_mlp instead",
        )  # fmt: skip
    return None


def fused_mlp_etp(job: Job, lay: Layout) -> Violation | None:
    """The fused grouped MLP without expert tensor parallelism (module docstring): on the
    degrees alone, so the search applies it to whole structures (`STRUCTURAL_RULES`)."""
    if job.moe_fused_grouped_mlp and lay.expert_tp > 1:
        return Violation(
            "fused_mlp_etp", "parallel.etp", f"the fused grouped MLP (training."
            f"moe_fused_grouped_mlp) runs without expert tensor parallelism; got "
            f"expert_tensor_parallel_size {lay.expert_tp}",
        )  # fmt: skip
    return None


def fused_offload(job: Job, modules: tuple[OffloadModule, ...]) -> tuple[OffloadModule, ...]:
    """`modules` as the experts' fused grouped MLP allows them (`fused_grouped_mlp`): expert_fc1
    and moe_act as the one group it offloads whole, fused_group_mlp (what Megatron-Bridge's
    Nemotron 3 Ultra recipes offload); `modules` themselves without it."""
    kept = tuple(m for m in modules if m not in ("expert_fc1", "moe_act"))
    if not job.moe_fused_grouped_mlp or len(kept) == len(modules):
        return modules
    return (*kept, "fused_group_mlp")


RULES = (fused_mlp_etp, fused_grouped_mlp)
