"""What per-layer CUDA graphs hold in their private memory pool beside the optimizer step's
eager copies (`step_pool_bytes`, `planner.model.memory.stage_memory`).

Megatron's graphs (local and Transformer Engine's) capture into one private mempool (Megatron-LM
d98e8a64 cuda_graphs.py:1929; Transformer Engine d0067d0d graph.py:485, :678), which keeps the
peak of its capture order reserved while the graphs live; PyTorch's caching allocator serves
eager requests from its own pools only, so the optimizer step's fp32 gradient copies
(optimizer.py:1093-1096) cannot reuse it: the step holds the pool's activations beside them.
Whole-layer graphs hold the layers' activations but the eager loss's (the stage then holds
pool + max(loss, copies)); graphs of some modules, those modules' share alone."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import mixers, stage_activations
from planner.model.graph_buffers import pool_holds_working
from planner.model.graph_capture import MOE_ENTRY
from planner.model.moe_activations import moe_bytes, router_bytes
from planner.model.schedule import Chunks
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard


def step_pool_bytes(
    job: Job, layout: Layout, rank: int, chunks: Chunks, acts: float, scale: float
) -> float:
    """Bytes of rank `rank`'s activations `acts` (its loss's scaled by `scale`, as `acts`) the
    graphs' pool keeps reserved at the optimizer step (module docstring); 0 where no graph's
    pool holds a working set (`graph_buffers.pool_holds_working`)."""
    sh = shard(job, layout)
    if not pool_holds_working(sh):
        return 0.0
    pool = acts - _eager_loss(job, layout, rank, chunks) * scale
    return pool * _captured_share(job, sh, chunks)


def _eager_loss(job: Job, layout: Layout, rank: int, chunks: Chunks) -> float:
    """The loss's bytes in rank `rank`'s activations (`stage_activations.Parts.loss`: the
    logits and their gradients, on the last rank), allocated eagerly outside any CUDA graph."""
    sh = shard(job, layout)
    per = per_layer(job.arch, sh)
    return stage_activations.remembered_parts(job, layout, rank, chunks, sh, per, None).loss


def _captured_share(job: Job, sh: Shard, chunks: Chunks) -> float:
    """The share of a rank's stored activations per-layer graphs hold in their pool: 1 for whole
    layers; for graphs of some modules (`Shard.cuda_graph_modules`) what the captured modules
    keep of a layer (`_captured_bytes`) over what the layer keeps (`activations.layer_bytes`),
    summed over the rank's layers of each kind. An approximation: the captured modules' share
    of the layers' kept bytes stands for their share of the micro-batches in flight and of the
    working set on top."""
    if not sh.cuda_graph_modules:
        return 1.0
    arch = job.arch
    counts = arch.kind_counts(chunks)
    kinds = [(k, n) for k, n in zip(arch.kinds, counts, strict=True) if n]
    layers = sum(n * act.layer_bytes(arch, k, sh) for k, n in kinds)
    captured = sum(n * _captured_bytes(arch, k, sh) for k, n in kinds)
    return min(captured / layers, 1.0) if layers else 0.0


def _captured_bytes(arch: ModelArch, kind: LayerKind, sh: Shard) -> float:
    """What the modules Megatron's graphs capture (`Shard.cuda_graph_modules`, d98e8a64
    CudaGraphModule) keep of one layer of `kind` per micro-batch: attn, the attention block or
    a transformer layer's gated delta net in its place; mamba, the Mamba mixer's block; mlp, the
    dense MLP; moe, the MoE block; moe_router and moe_preprocess (one graph: the route and the
    dispatch preprocess, moe_layer.py:444-494), the router's fp32 logits and scores, whose
    permutation indices are small beside them."""
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
        out += router_bytes(arch, sh)
    return out
