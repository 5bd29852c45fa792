"""What Megatron-LM's per-layer CUDA graphs capture of a job's layers (`captured`), and what
capturing the MoE router costs the memory (`keeps_pre_moe_norm`); TransformerConfig and
TransformerLayer at d98e8a64. `planner.search.rules.graphs` asserts against the regions,
`planner.model.host` times them."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job

MOE_ENTRY = frozenset({"moe_router", "moe_preprocess"})


def captured(job: Job) -> frozenset[str]:
    """The regions Megatron captures (`Job.cuda_graph_modules`; empty: the whole layer, or the
    whole step under full_iteration): the local implementation (None's, which `planner launch`
    writes, too) captures moe_router and moe_preprocess together where either is named
    (transformer_config.py:2805-2815 d98e8a64, "local impl doesn't currently distinguish")."""
    mods = frozenset(job.cuda_graph_modules)
    local = job.cuda_graph_impl in (None, "local") and job.framework == "megatron"
    return mods | MOE_ENTRY if local and mods & MOE_ENTRY else mods


def keeps_pre_moe_norm(job: Job, lay: Layout) -> bool:
    """Whether a MoE layer keeps its pre-MLP norm's output though selective recompute names
    layernorm: TransformerLayer turns that norm's recompute off where Transformer Engine's graphs
    capture the router (moe_router), unless they capture the preprocess (moe_preprocess) too
    with the alltoall dispatcher or a latent MoE, and always under the shared-expert overlap
    (transformer_layer.py:481-527 d98e8a64: else the norm output is one of the graph's outputs,
    a static buffer that cannot be released). The local implementation recomputes it."""
    if not job.cuda_graphs or job.framework != "megatron" or not job.arch.is_moe:
        return False
    mods = captured(job)
    if job.cuda_graph_impl != "transformer_engine" or "moe_router" not in mods:
        return False
    if job.arch.moe_shared_expert_intermediate_size and lay.moe_shared_expert_overlap:
        return True
    alltoall = lay.moe_token_dispatcher_type == "alltoall" or bool(job.arch.moe_latent_size)
    return not ("moe_preprocess" in mods and alltoall)
