"""What a MoE layer's router graph (`Shard.cuda_graph_modules` moe_router, with moe_preprocess)
holds per micro-batch until its backward graph (`router_graph_bytes`: in the graphs' pool,
`planner.model.graph_pool`), and which of its tensors the eager layer would not keep
(`router_graph_outputs`: in the MoE layer's bytes, `Shard.router_graph_outputs`).

Megatron-LM d98e8a64 with TransformerEngine d0067d0d: a graph's static outputs are held strongly
from its forward capture until its backward graph is captured (graph.py:719-729, weak
references after :880-886), and replayed into the same buffers every micro-batch, so each is a
tensor kept per micro-batch in flight as a saved activation is."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import router_dtype
from planner.model.fp32 import word
from planner.model.graph_capture import MOE_ENTRY
from planner.model.moe_activations import router_bytes, shared_expert_bytes
from planner.model.shard import Shard

INDEX = 8
"""Bytes of one int64 index (torch.topk's indices, DeepEP's top-k indices)."""


def router_graph_bytes(job: Job, layout: Layout, sh: Shard) -> float:
    """What the router graph allocates in the pool and holds per micro-batch: the tensors the
    captured ops save and the graph's outputs (`router_graph_outputs`).

    Saved inside (`_get_submodules_under_cudagraphs`, transformer_layer.py:1254-1260): the
    router's (`router_bytes`); the pre-MLP norm's output, the router's input, unless
    recomputed (`Shard.drops_pre_moe_norm`: discarded at :944-950); Transformer Engine's graphs
    run the shared experts too where not overlapped (moe_layer.py:507-533, :661), and keep what
    they save (`shared_expert_bytes`). Megatron's own graphs (cuda_graph_impl local) hold the
    router's and the norm output; what else their partial graph returns is not modelled."""
    w = word(sh)
    out = router_bytes(job.arch, sh)
    out += 0.0 if sh.drops_pre_moe_norm() else w * sh.tokens / sh.tp * job.arch.hidden_size
    if sh.cuda_graph_impl == "transformer_engine" and _shared_inside(job, layout):
        out += shared_expert_bytes(job.arch, sh)
    return out + sh.router_graph_outputs


def _shared_inside(job: Job, layout: Layout) -> bool:
    """Whether Transformer Engine's router graph runs the shared experts: the model has them and
    they are not overlapped with the dispatch (moe_layer.py:507-533)."""
    return bool(job.arch.moe_shared_expert_intermediate_size) and not (
        layout.moe_shared_expert_overlap
    )


def router_graph_outputs(job: Job, layout: Layout, sh: Shard) -> float:
    """The outputs of Transformer Engine's router graph the eager layer does not keep, per MoE
    layer and micro-batch (0 where no such graph runs: eager, whole layers, the MoE block
    captured whole, Megatron's own graphs).

    Outputs (moe_utils.py:1550-1598, transformer_layer.py:951): the route alone returns the norm
    output (saved by the router anyway), the router's probs (its logits' dtype, moe_utils.py:936,
    :954: T x E) and the routing map (T x E bools), which eager only indexes (its permutation
    saves the sorted indices); with the preprocess, the dispatcher's preprocessed tokens and
    probs and its cudagraph_attrs: allgather the norm output (token_dispatcher.py:271-279), the
    probs and the map (:269); alltoall the permuted tokens and probs (:668-680, k rows a token:
    `Shard.moe_send_load`, `Shard.pad_sent`; `ModelArch.expert_hidden` wide, a latent MoE
    projecting first, moe_layer.py:489-490), which eager frees once the all-to-all has sent them,
    the probs and the map (:476-486, :642-643), and under the shared-expert overlap its gathered
    fc1 input (:498-499, :658, shared_experts.py:246-253: `Shard.shared_gathered`); HybridEP
    the probs and the map over E x tp (:1852, :1086-1096; cast to fp32 only in the eager
    dispatch, :1136-1141); DeepEP (and NCCL EP, taken alike) the top-k probs and int64 indices
    over k x tp (:1844, :1300); and the shared experts' output (the local tokens,
    moe_utils.py:1595-1597), which eager adds to the experts' and frees. The residual is the
    graph's input or its mixer's output, the pre-MLP norm's saved input: kept anyway. Not
    counted: the permutation indices and split sizes, 4 or 8 bytes a routed copy or less,
    beside its hidden-wide row."""
    mods = sh.cuda_graph_modules
    arch = job.arch
    if (
        not sh.cuda_graphs
        or sh.cuda_graph_impl != "transformer_engine"
        or not arch.is_moe
        or not mods & MOE_ENTRY
        or "moe" in mods
    ):
        return 0.0
    assert arch.num_moe_experts is not None
    h, E, k = arch.hidden_size, arch.num_moe_experts, arch.moe_router_topk
    local, w = sh.tokens / sh.tp, word(sh)
    out = w * local * h if _shared_inside(job, layout) else 0.0  # the shared experts' output
    probs = router_dtype.combine_bytes(job)  # the logits' dtype
    dispatcher = layout.moe_token_dispatcher_type
    if "moe_preprocess" not in mods or dispatcher == "allgather":
        return out + local * E * (probs + 1)
    if dispatcher == "alltoall":
        rows = k * local * sh.moe_send_load + sh.pad_sent
        overlap = layout.moe_shared_expert_overlap
        gathered = w * h * sh.tokens if overlap and sh.shared_gathered else 0.0
        routed = rows * (w * arch.expert_hidden + probs)  # latent wide after fc1_latent_proj
        return out + local * E * (probs + 1) + routed + gathered
    if layout.moe_flex_dispatcher_backend == "hybridep":
        return out + local * E * sh.tp * (probs + 1)
    return out + local * k * sh.tp * (probs + INDEX)
