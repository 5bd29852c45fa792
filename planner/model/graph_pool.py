"""What per-layer CUDA graphs hold in their private memory pool beside the optimizer step's
eager copies (`step_pool_bytes`, `planner.model.memory.stage_memory`).

Megatron's graphs (local and Transformer Engine's) capture into one private mempool (Megatron-LM
d98e8a64 cuda_graphs.py:1929; Transformer Engine d0067d0d graph.py:485, :678), which keeps the
peak of its capture order reserved while the graphs live; PyTorch's caching allocator serves
eager requests from its own pools only, so the optimizer step's fp32 gradient copies
(optimizer.py:1093-1096) cannot reuse it: the step holds the pool beside them.

Whole-layer graphs hold the layers' activations but the eager loss's (the stage then holds
pool + max(loss, copies)). Graphs of some modules (`Shard.cuda_graph_modules`) hold what the
captured modules allocate, counted directly: the captures run in the schedule's order
(Transformer Engine's make_graphed_callables walks `_order`, graph.py:588-606, :741-746; the
local graphs the first step's order, cuda_graphs.py:664-682), each forward graph's static
outputs and saved tensors held until its backward graph is captured (graph.py:719-729,
:880-886; cuda_graphs.py:1632-1635), so the pool's peak is the captured bytes of one
micro-batch (`_captured_bytes`, summed over each model chunk's layers) times the micro-batches
in flight at the schedule's peak (`stage_activations.held_peak`, as for the activations), plus the
largest working set one captured region allocates while it runs (`_captured_working`), once."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import dsa, mixers, stage_activations
from planner.model.graph_buffers import whole_layer
from planner.model.graph_capture import MOE_ENTRY
from planner.model.moe_activations import moe_bytes
from planner.model.moe_working import moe_working
from planner.model.router_graph import router_graph_bytes
from planner.model.schedule import Chunks
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard


def step_pool_bytes(
    job: Job, layout: Layout, rank: int, chunks: Chunks, acts: float, scale: float
) -> float:
    """Bytes the graphs' pool keeps reserved at rank `rank`'s optimizer step (module docstring):
    under whole-layer graphs its activations `acts` less its loss's (scaled by `scale`, as
    `acts`); under graphs of some modules what they capture, counted and scaled; 0 without
    per-layer graphs (eager layers, a full-iteration graph)."""
    sh = shard(job, layout)
    if not sh.cuda_graphs or sh.cuda_graph_impl == "full_iteration":
        return 0.0
    if whole_layer(sh):
        return acts - _eager_loss(job, layout, rank, chunks) * scale
    return (
        _captured_peak(job, layout, rank, chunks, sh) + _captured_working(job, layout, sh, chunks)
    ) * scale


def _eager_loss(job: Job, layout: Layout, rank: int, chunks: Chunks) -> float:
    """The loss's bytes in rank `rank`'s activations (`stage_activations.Parts.loss`: the
    logits and their gradients, on the last rank), allocated eagerly outside any CUDA graph."""
    sh = shard(job, layout)
    per = per_layer(job.arch, sh)
    return stage_activations.remembered_parts(job, layout, rank, chunks, sh, per, None).loss


def _captured_peak(job: Job, layout: Layout, rank: int, chunks: Chunks, sh: Shard) -> float:
    """The captured bytes rank `rank` holds at its schedule's peak: each model chunk's layers'
    `_captured_bytes` per micro-batch, through the micro-batches in flight
    (`stage_activations.held_peak`: the schedule and micro-batch group the activations read)."""
    arch = job.arch
    router = router_graph_bytes(job, layout, sh) if arch.is_moe else 0.0
    kept = tuple(
        sum(
            n * _captured_bytes(arch, k, sh, router)
            for k, n in zip(arch.kinds, arch.kind_counts((c,)), strict=True)
            if n
        )
        for c in chunks
    )
    return stage_activations.held_peak(job, layout, rank, kept)


def _captured_bytes(arch: ModelArch, kind: LayerKind, sh: Shard, router: float) -> float:
    """What the modules Megatron's graphs capture (`Shard.cuda_graph_modules`, d98e8a64
    CudaGraphModule) keep of one layer of `kind` per micro-batch: attn, the attention block or
    a transformer layer's gated delta net in its place; mamba, the Mamba mixer's block; mlp, the
    dense MLP; moe, the MoE block; moe_router and moe_preprocess, what the router's graph holds
    (`router`: `router_graph.router_graph_bytes`). A layer's input is its graph's static input,
    allocated outside the pool, and the output of a captured mixer (the pre-MLP norm's input,
    returned as the residual, transformer_layer.py:951) is in it: the same size, so the mixer's
    norm input stands for it and the MoE block's is not counted again."""
    mods = sh.cuda_graph_modules
    out = 0.0
    linear = mixers.of(kind)
    if kind.mixer == "attention" and "attn" in mods:
        out += act.attention_bytes(arch, sh)
    elif linear is not None and ("mamba" if kind.mixer == "mamba" else "attn") in mods:
        out += act.linear_mixer_bytes(arch, sh, linear)
    if kind.ffn == "dense" and "mlp" in mods:
        out += act.mlp_bytes(arch, arch.ffn_hidden_size, sh)
    elif kind.moe and "moe" in mods:
        out += moe_bytes(arch, sh)
    elif kind.moe and mods & MOE_ENTRY:
        out += router
    return out


def _captured_working(job: Job, layout: Layout, sh: Shard, chunks: Chunks) -> float:
    """The largest working set one captured region allocates in the pool while it runs, over
    the kinds on the rank: a captured linear-time mixer's backward
    (`LinearMixer.backward_working`, as `mixer_working` counts it eager), a captured DSA
    attention's (`dsa.working_bytes`), a MoE block captured whole (`moe_working`). Flash
    attention's and the router's backward allocate the gradients of what they keep, which
    `stage_activations` counts no working set for either (the router's, T x E fp32)."""
    arch, mods = job.arch, sh.cuda_graph_modules
    out = 0.0
    for kind, n in zip(arch.kinds, arch.kind_counts(chunks), strict=True):
        if not n:
            continue
        linear = mixers.of(kind)
        if linear is not None and ("mamba" if kind.mixer == "mamba" else "attn") in mods:
            work = linear.backward_working(arch, sh.tokens, sh.tp, layout.cp, sh.value_bytes)
            out = max(out, work)
        if kind.mixer == "attention" and "attn" in mods and arch.has_dsa:
            out = max(out, dsa.working_bytes(arch, sh))
        if kind.moe and "moe" in mods:
            out = max(out, moe_working(arch, sh, layout, per_layer(arch, sh).full))
    return out
