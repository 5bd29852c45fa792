"""What Megatron's per-layer CUDA graphs refuse, which is what planner launches for a job with
`Job.cuda_graphs` (--cuda-graph-impl local, `planner.emit.common.cuda_graph_impl`). Megatron-LM
d98e8a64's TransformerConfig.__post_init__ asserts these for the per-layer implementations
(`local`, `transformer_engine`; its `full_iteration` graphs allow the first two):

- CPU offloading: "CUDA graphs not supported with CPU offloading" (ValueError);
- full recompute: "full recompute is only supported with full iteration CUDA graph";
- selective recompute of core_attn with attention dropout where the attention is graphed (the
  whole layer, `cuda_graph_modules` empty, or `attn` among them): "attention dropout is not
  supported with graphed attention recomputation";
- selective recompute of mlp or moe with hidden dropout where that block is graphed: "hidden
  dropout is not supported with graphed MLP/MoE recomputation".

The search offers no such rung to a graphed job (`planner.search.rungs`) and the launch targets
refuse them (`emit.common.cuda_graph_impl`). `planner check` does not: a plan's `cuda_graphs`
also stands for a command line's --cuda-graph-impl full_iteration, which runs the first two.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job


def rung_conflict(
    job: Job, recompute: str, modules: tuple[str, ...], offload_layers: int
) -> tuple[str, str] | None:
    """(plan field, why) of the first assert above that a layout with this recompute (policy and
    selective modules) and CPU offloading breaks under the job's per-layer CUDA graphs; None
    where it breaks none, or the job runs eagerly or is not Megatron-LM's."""
    if not job.cuda_graphs or job.framework != "megatron":
        return None
    if offload_layers:
        return (
            "parallel.cpu_offloading_num_layers",
            f"Megatron's per-layer CUDA graphs do not run with CPU offloading "
            f"(cpu_offloading_num_layers = {offload_layers}; TransformerConfig raises ValueError)",
        )
    if recompute == "full":
        return (
            "parallel.recompute",
            "Megatron runs full recompute only with full-iteration CUDA graphs, not the "
            "per-layer ones planner launches (TransformerConfig asserts it)",
        )
    if recompute != "selective":
        return None
    whole = not job.cuda_graph_modules
    graphed = set(job.cuda_graph_modules)
    if job.attention_dropout and "core_attn" in modules and (whole or "attn" in graphed):
        return (
            "parallel.recompute_modules",
            "Megatron's CUDA graphs do not recompute a graphed attention with attention dropout "
            "(core_attn; TransformerConfig asserts it): set training.attention_dropout = false "
            "or recompute other modules",
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
    """`rung_conflict` of a layout."""
    return rung_conflict(job, lay.recompute, lay.recompute_modules, lay.cpu_offloading_num_layers)
