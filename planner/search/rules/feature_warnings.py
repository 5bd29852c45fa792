"""What Megatron-LM only warns about in a layout it accepts (or its own tests never run), from
the same sources as `planner.search.rules.features`: a warning rule returns a `Violation` where
Megatron logs, and the plan stays valid (`planner check` and `explain` report them)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import placement
from planner.search.rules.base import Violation


def overlap_connections(job: Job, lay: Layout) -> Violation | None:
    """validate_args: TP or CP with the EP overlap or an FSDP before Blackwell would want
    CUDA_DEVICE_MAX_CONNECTIONS=1 and the overlap wants more; it warns and runs (planner launches
    it with 32). The FSDP named as Megatron-LM names it (Megatron-LM d98e8a64
    arguments.py:1456-1457: Torch-FSDP2 under --use-torch-fsdp2, else Megatron-FSDP)."""
    if not (lay.tp > 1 or lay.cp > 1) or not job.cluster.gpu.needs_one_device_connection:
        return None
    if not (lay.ep_comm_overlap or lay.zero_stage >= 2):
        return None
    field, what = "parallel.zero_stage", "Megatron-FSDP (zero_stage >= 2)"
    if lay.use_torch_fsdp2:
        field, what = "parallel.use_torch_fsdp2", "Torch-FSDP2 (use_torch_fsdp2)"
    if lay.ep_comm_overlap:
        field, what = "parallel.ep_comm_overlap", "ep_comm_overlap"
    return Violation(
        "connections",
        field,
        f"Megatron warns: {what} with tp ({lay.tp}) or cp ({lay.cp}) > 1 on "
        f"{job.cluster.gpu.name}: TP/CP prefer CUDA_DEVICE_MAX_CONNECTIONS=1, the overlap more "
        "(launched with 32)",
    )


def core_attention(job: Job, lay: Layout) -> Violation | None:
    """Megatron warns that fused attention does not need core_attn recompute (it keeps no s x s
    scores): it still re-runs the attention forward, for no memory."""
    if (
        lay.recompute == "selective"
        and "core_attn" in lay.recompute_modules
        and (job.flash_attention)
    ):
        return Violation(
            "core_attn",
            "parallel.recompute_modules",
            "Megatron warns: recompute module core_attn with fused attention costs an attention "
            "forward and saves no memory",
        )
    return None


def fsdp_untested(job: Job, lay: Layout) -> Violation | None:
    """Megatron-FSDP (v1) has no assert against pipeline or context parallelism, but none of
    Megatron-LM's functional tests runs it with them: said, not refused (the search does not
    propose it). Not under torch FSDP2 (`use_torch_fsdp2`, pp 1 by its own rule), which this
    claim is not about."""
    if lay.zero_stage >= 2 and (lay.pp > 1 or lay.cp > 1) and not lay.use_torch_fsdp2:
        return Violation(
            "fsdp_untested",
            "parallel.zero_stage",
            f"Megatron-FSDP (zero_stage {lay.zero_stage}) with pp ({lay.pp}) or cp ({lay.cp}) "
            "> 1 is not run by Megatron-LM's own tests",
        )
    return None


def node_limited_routing(job: Job, lay: Layout) -> Violation | None:
    """Node-limited routing with more groups per token than the nodes expert parallelism spans
    limits nothing (Megatron does not check it)."""
    topk = job.moe_router_group_topk
    if topk is None or lay.ep == 1:
        return None
    c = job.cluster
    # every EP group's domain count (groups that straddle domains unevenly touch different
    # counts); the fewest of those over several nodes is where topk limits nothing first
    counts = placement.domain_counts(c.placement_spans, lay.expert_tp, lay.ep, c.num_gpus)
    spans = [k for k in counts if k > 1]
    if spans and topk > min(spans):
        return Violation(
            "routing",
            "training.moe_router_group_topk",
            f"moe_router_group_topk ({topk}) exceeds the {min(spans)} nodes expert "
            "parallelism spans: a token cannot reach more",
        )
    return None


WARNINGS = (
    overlap_connections,
    core_attention,
    fsdp_untested,
    node_limited_routing,
)
"""What Megatron warns about (or its own tests never run): reported, not refused."""
