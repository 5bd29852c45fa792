"""What Megatron's CUDA graphs refuse (`Job.cuda_graphs`, with `Job.cuda_graph_impl`: None is
what `planner launch` writes, per-layer graphs, `planner.emit.common.cuda_graph_impl`).
Megatron-LM d98e8a64's TransformerConfig.__post_init__ asserts, for the per-layer
implementations (local, transformer_engine), the first two and the last two; for every
implementation the two of dropout (a full-iteration graph captures the recompute too):

- CPU offloading: "CUDA graphs not supported with CPU offloading" (ValueError);
- full recompute: "full recompute is only supported with full iteration CUDA graph";
- selective recompute of core_attn with attention dropout where the attention is graphed (the
  whole layer, `cuda_graph_modules` empty, the whole iteration, or `attn` among them):
  "attention dropout is not supported with graphed attention recomputation";
- selective recompute of mlp or moe with hidden dropout where that block is graphed: "hidden
  dropout is not supported with graphed MLP/MoE recomputation";
- selective recompute of moe where Transformer Engine's graphs capture moe_router: "moe
  recompute is not supported with moe_router CUDA graph" (transformer_config.py:2862-2869);
- (`preprocess_conflict`, per-layer graphs) moe_preprocess captured (the local implementation
  captures it with moe_router) with the alltoall dispatcher and an unpadded capacity factor
  (transformer_config.py:2838-2852).

The regions a job captures are asserted against its model too (`module_conflict`, a rule of the
job alone). `rule` is the rule `planner check` applies; the search offers no such rung to a
graphed job (`planner.search.rungs`) and the launch targets refuse them
(`emit.common.cuda_graph_impl`).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.graph_capture import captured
from planner.search.rules.base import Violation


def rung_conflict(
    job: Job, recompute: str, modules: tuple[str, ...], offload_layers: int
) -> tuple[str, str] | None:
    """(plan field, why) of the first assert above that a layout with this recompute (policy and
    selective modules) and CPU offloading breaks under the job's CUDA graphs (their
    implementation: `Job.cuda_graph_impl`); None where it breaks none, or the job runs eagerly
    or is not Megatron-LM's."""
    if not job.cuda_graphs or job.framework != "megatron":
        return None
    per_layer = job.cuda_graph_impl != "full_iteration"
    if offload_layers and per_layer:
        return (
            "parallel.cpu_offloading_num_layers",
            f"Megatron's per-layer CUDA graphs do not run with CPU offloading "
            f"(cpu_offloading_num_layers = {offload_layers}; TransformerConfig raises ValueError; "
            'training.cuda_graph_impl = "full_iteration" runs it)',
        )
    if recompute == "full" and per_layer:
        return (
            "parallel.recompute",
            "Megatron runs full recompute only with full-iteration CUDA graphs, not per-layer "
            'ones (TransformerConfig asserts it; training.cuda_graph_impl = "full_iteration" '
            "runs it)",
        )
    if recompute != "selective":
        return None
    whole = not job.cuda_graph_modules  # the whole layer (or iteration)
    graphed = set(job.cuda_graph_modules)
    if job.attention_dropout and "core_attn" in modules and (whole or "attn" in graphed):
        return (
            "parallel.recompute_modules",
            "Megatron's CUDA graphs do not recompute a graphed attention with attention dropout "
            "(core_attn; TransformerConfig asserts it): set training.attention_dropout = false "
            "or recompute other modules",
        )
    if job.cuda_graph_impl == "transformer_engine" and "moe" in modules and "moe_router" in graphed:
        return (  # transformer_config.py:2862-2869
            "parallel.recompute_modules",
            "Megatron does not recompute the moe block while Transformer Engine's CUDA graphs "
            "capture its router (moe_router; TransformerConfig asserts it): recompute other "
            "modules or capture other regions",
        )
    blocks = [b for b in ("mlp", "moe") if b in modules and (whole or b in graphed)]
    if job.hidden_dropout and blocks:
        return (
            "parallel.recompute_modules",
            f"Megatron's CUDA graphs do not recompute a graphed {blocks[0]} block with hidden "
            "dropout (TransformerConfig asserts it): set training.hidden_dropout = false or "
            "recompute other modules",
        )
    return None


def conflict(job: Job, lay: Layout) -> tuple[str, str] | None:
    """`rung_conflict` of a layout, then `preprocess_conflict`."""
    found = rung_conflict(job, lay.recompute, lay.recompute_modules, lay.cpu_offloading_num_layers)
    return found or preprocess_conflict(job, lay)


def preprocess_conflict(job: Job, lay: Layout) -> tuple[str, str] | None:
    """(plan field, why) where the MoE preprocess is captured (`graph_capture.captured`) with
    the alltoall dispatcher and a capacity factor without padding to it: "moe_preprocess cuda
    graph is not supported when there are DtoH copies and synchronizations in the preprocess step"
    (transformer_config.py:2838-2852 d98e8a64, per-layer graphs)."""
    if (
        not job.cuda_graphs
        or job.framework != "megatron"
        or job.cuda_graph_impl == "full_iteration"
    ):
        return None
    padded = job.moe_expert_capacity_factor is None or job.moe_pad_expert_input_to_capacity
    if (
        padded
        or lay.moe_token_dispatcher_type != "alltoall"
        or "moe_preprocess" not in captured(job)
    ):
        return None
    return (
        "parallel.moe_token_dispatcher_type",
        "Megatron does not capture the MoE preprocess (moe_preprocess, which the local "
        "implementation captures with moe_router) under the alltoall dispatcher with a capacity "
        "factor but no padding to it (its DtoH copies; TransformerConfig asserts it): capture "
        "other regions, pad to capacity or use another dispatcher",
    )


def module_conflict(job: Job) -> tuple[str, str] | None:
    """(plan field, why) where the captured regions (`Job.cuda_graph_modules`) are ones
    TransformerConfig d98e8a64 asserts against for the model, whatever the layout: moe with
    moe_router; moe or moe_router without experts, mlp where every layer is MoE; the whole MoE
    block (moe) of a dropless one (it needs a capacity factor with padding to it)."""
    mods = set(job.cuda_graph_modules)
    if not job.cuda_graphs or not mods or job.framework != "megatron":
        return None
    field = "training.cuda_graph_modules"
    arch = job.arch
    if {"moe", "moe_router"} <= mods:
        return field, "moe and moe_router cannot both be captured (TransformerConfig asserts it)"
    if not arch.is_moe and mods & {"moe", "moe_router"}:
        return field, "moe and moe_router regions need a model with experts"
    if arch.is_moe and arch.num_moe_layers == arch.num_layers and "mlp" in mods:
        return field, "the mlp region is a dense layer's, and every layer of the model is MoE"
    dropless = job.moe_expert_capacity_factor is None or not job.moe_pad_expert_input_to_capacity
    if "moe" in mods and dropless:
        return field, (
            "the moe region (the whole MoE block) is captured only with drop-and-pad routing "
            "(training.moe_expert_capacity_factor with moe_pad_expert_input_to_capacity)"
        )
    return None


def modules_rule(job: Job, lay: Layout) -> Violation | None:
    """`module_conflict` as a rule of the job alone (`planner suggest` refuses such a job)."""
    found = module_conflict(job)
    return None if found is None else Violation("cuda_graph_modules", *found)


def rule(job: Job, lay: Layout) -> Violation | None:
    """`conflict` as the rule `planner check` applies (Megatron asserts each at start-up)."""
    found = conflict(job, lay)
    if found is None:
        return None
    field, why = found
    return Violation("cuda_graphs", field, f"with training.cuda_graphs = true, {why}")
