"""The pipeline split of a Megatron-Bridge override (`planner.emit.bridge`): Megatron's even split
as virtual_pipeline_model_parallel_size; any other (pipeline_layers, a layout, the embedding or
loss counted as a layer) as pipeline_model_parallel_layout, the stages spelled out, with its vpp;
a hybrid Mamba stack's as Bridge's HybridModelProvider runs it. Every split also clears the
recipe's own (`STAGE_FIELDS`)."""

from __future__ import annotations

from typing import Any

from planner.emit.megatron_model import stage_ranges
from planner.inputs import pipeline_layout
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan

STAGE_FIELDS: dict[str, Any] = {
    "num_layers_in_first_pipeline_stage": None,
    "num_layers_in_last_pipeline_stage": None,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
}
"""TransformerConfig's other ways to split the stages, at their defaults: a recipe's own (Bridge
067f987d perf_recipes/glm_moe_dsa/gb200/glm5.py 14 layers first, perf_recipes/qwen_vl/*/
qwen3_vl.py 10) would otherwise move layers off the plan's even split, and Megatron-Core's
transformer_config.py (2a75ac12) raises beside a pipeline_model_parallel_layout with any set."""


def split(plan: Plan) -> dict[str, Any]:
    """The plan's split, and `STAGE_FIELDS`."""
    return {**_split(plan), **STAGE_FIELDS}


def _split(plan: Plan) -> dict[str, Any]:
    lay = plan.require_layout()
    if plan.job.arch.is_hybrid and lay.pp > 1:
        return _hybrid_split(plan)
    plain = not (
        lay.pipeline_layers
        or lay.pipeline_layout
        or lay.account_for_embedding_in_pipeline_split
        or lay.account_for_loss_in_pipeline_split
    )
    if lay.pp == 1 or plain:
        return {
            "virtual_pipeline_model_parallel_size": lay.vpp if lay.vpp > 1 else None,
            "pipeline_model_parallel_layout": None,
        }
    stages = lay.stages(plan.job.arch.num_layers, plan.job.arch.mtp_num_layers)
    return {  # vpp beside the layout, as Megatron-Core accepts it (transformer_config.py
        # checks it against the layout): Bridge's EP-overlap setup asserts vpp set before
        # Megatron-Core derives it from the layout (comm_overlap.py), and null would clear a
        # recipe's own
        "virtual_pipeline_model_parallel_size": lay.vpp if lay.vpp > 1 else None,
        "pipeline_model_parallel_layout": pipeline_layout.compact(stages),
    }


def _hybrid_split(plan: Plan) -> dict[str, Any]:
    """A hybrid Mamba stack's pipeline split: Megatron-Bridge's HybridModelProvider refuses
    virtual pipeline stages (hybrid_provider.py `provide` asserts it at 067f987d), and without
    '|' in its pattern Megatron-Core splits the layers evenly over the pipeline ranks
    (hybrid_layer_allocation.py `select_pipeline_segment`); a pattern with '|' is a
    HybridModelProvider field outside the GPTModelProvider schema this writer keeps to. So an
    even split without virtual stages is written as pp alone, and any other is refused."""
    lay = plan.require_layout()
    counts = {len(layers) for layers in stage_ranges(plan)}
    if lay.vpp > 1 or len(counts) > 1:
        got = _split_words(lay.pp, lay.vpp, counts)
        raise InputError(
            f"{plan.path}: parallel: Megatron-Bridge runs a hybrid Mamba stack on an even "
            f"pipeline split without virtual stages only (got {got}); launch it with --target "
            "megatron-args, whose --hybrid-layer-pattern carries any split as '|' segments, or "
            "search a layout Megatron-Bridge runs with `planner suggest --vpp 1 --no-uneven`"
        )
    return {"virtual_pipeline_model_parallel_size": None, "pipeline_model_parallel_layout": None}


def _split_words(pp: int, vpp: int, counts: set[int]) -> str:
    """A refused hybrid split in words: "4 ranks x 11 virtual stages of 2 layers", "2 ranks of
    24 and 28 layers"."""
    sizes = [str(n) for n in sorted(counts)]
    if vpp > 1:
        return f"{pp} ranks x {vpp} virtual stages of {' or '.join(sizes)} layers"
    return f"{pp} ranks of {' and '.join(sizes)} layers"
