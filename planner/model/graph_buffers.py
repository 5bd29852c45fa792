"""The static buffers CUDA graphs of decoder layers keep beyond the layers' eager activations
(`planner.model.activations`): per layer and micro-batch in flight (`graph_bytes`, in each
layer's bytes) and, under Transformer Engine's graphs, once per rank (`graph_shared_bytes`,
beside the stored activations: `stage_activations.peak_bytes`); under Megatron-Core's own graphs
per model chunk (`chunk_copies`); and whether the graphs' memory pool keeps a layer's working set
apart from the loss's (`pool_holds_working`). What the graphs capture:
`planner.model.graph_capture`."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model.fp32 import word
from planner.model.shard import Shard

LOCAL_GRAPH_LAYER_TENSORS = 0
"""Layer-input-sized buffers a layer graphed by Megatron-Core's own implementation (cuda_graph_impl
"local") keeps per micro-batch in flight beyond its eager activations (Megatron-LM d98e8a64
megatron/core/transformer/cuda_graphs.py): none. Every runner captures into the one
CudaGraphManager.global_mempool (:1929, :1995, :2015; torch.cuda.graph with it, :1380, :1519),
in the order the first step ran them (_CudagraphGlobalRecord, :599, :664-682), and a graph's
output is the next one's input buffer (fwd_cudagraph_buffer, :1250-1276, :1439), its input
gradient the previous one's output gradient (bwd_cudagraph_buffer, :1493-1507, :1617-1621).
After the backward capture the static gradients and the forward buffers are weak references
(:1632-1635, make_weakref :453-485), whose memory the pool hands to the next capture: the pool
holds what the eager layers would hold at their peak, no more (what the pool changes:
`pool_holds_working`)."""

LOCAL_GRAPH_CHUNK_COPIES = 2
"""Layer-input-sized buffers Megatron-Core's own graphs keep per model chunk and micro-batch in
flight under pipeline parallelism, beyond the eager activations: the received input, which the
schedule keeps for its backward (pipeline_parallel/schedules.py:2366, :2427), is copied into the
first graph's own input buffer (_CudagraphReplayNode.forward, :837-849), which that layer saves
(kept: :1139-1149, :1168-1172), where eager the one tensor is both; and the chunk's last output,
which eager deallocate_pipeline_outputs frees once sent (training/argument_utils.py:305), stays
in the pool up to its backward (an output no graph reads: :1151-1166, :1174-1180). Neither on the
first chunk of the first rank (no received input) nor on the loss's chunk, whose final norm saves
the output anyway."""

TE_GRAPH_OUTPUT_COPIES = 1
"""Layer-input-sized bf16 buffers a layer captured whole by Transformer Engine's graphs
(cuda_graph_impl "transformer_engine", TransformerEngine d0067d0d transformer_engine/pytorch
graph.py) keeps per micro-batch in flight beyond its eager activations: its graph's static
output, held strongly from the forward capture until its backward graph's (:729, :880-886),
beside the next layer's static input, a separate buffer Megatron allocates per layer (Megatron-LM
d98e8a64 transformer/module.py:266-271) into which the graphed forward copies it (graph.py
:1045-1050); eager, the one tensor is both. A graph of a layer's mixer returns the residual
(transformer_layer.py:942-952), which the pre-MLP norm saves anyway: none. A graph of the MoE
router returns tensors the eager layer frees (its probs and routing map, the shared experts'
output, the alltoall dispatcher's permuted tokens): `router_graph.router_graph_outputs`, in the
MoE layer's bytes (`Shard.router_graph_outputs`), not here."""

TE_GRAPH_SHARED_TENSORS = 3
"""Layer-input-sized bf16 buffers Transformer Engine's graphs keep once per rank, whatever the
layers and micro-batches captured: Megatron-LM d98e8a64 passes _reuse_graph_input_output_buffers
for TE >= 2.7 (transformer/cuda_graphs.py:2683-2686; Megatron-LM pins TE by git revision,
Megatron-Bridge 067f987d 2.18.0 in uv.lock), so the static gradient outputs are one set per
output signature shared by every graph (graph.py:803-818 at d0067d0d; a whole layer's: its hidden
states, 1) and each backward graph's static gradient inputs become weak references once the next
graph of its chunk is captured (:893-906), so the running graph's and the one before it are held
(2). Graphs of the MoE router hand back more outputs (the residual, the pre-MLP norm's output,
the probs, the routing map, the shared experts' output and the permuted tokens:
`router_graph.router_graph_outputs`), whose static gradients are held so too: not counted."""


def _graph_input(arch: ModelArch, sh: Shard) -> float:
    """One graph buffer of a layer's input size: [s, b, h] bf16, split by tp under SP."""
    nbytes = word(sh) * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def graph_bytes(arch: ModelArch, sh: Shard) -> float:
    """CUDA graphs' static buffers of one layer per micro-batch: LOCAL_GRAPH_LAYER_TENSORS layer
    inputs under Megatron-Core's own graphs (cuda_graph_impl "local" or unset, what Megatron-LM
    targets launch; per chunk: `chunk_copies`), TE_GRAPH_OUTPUT_COPIES under Transformer
    Engine's where they capture the whole layer (their shared buffers: `graph_shared_bytes`); 0
    when the layers run eagerly, and under a full-iteration graph, whose wrapper keeps static
    copies of the data loader's batches only (FullCudaGraphWrapper's StaticBufferLoader,
    full_cuda_graph.py:97-135 d98e8a64): no per-layer graph runner, so no static gradient
    buffers."""
    if not sh.cuda_graphs or sh.cuda_graph_impl == "full_iteration":
        return 0.0
    if sh.cuda_graph_impl == "transformer_engine":
        return TE_GRAPH_OUTPUT_COPIES * _graph_input(arch, sh) if whole_layer(sh) else 0.0
    return LOCAL_GRAPH_LAYER_TENSORS * _graph_input(arch, sh)


def whole_layer(sh: Shard) -> bool:
    """Whether one graph runs a layer from its input to its output (Megatron's
    _te_cuda_graph_capture, transformer_layer.py:1263-1318: no modules named, or attention with
    the MLP or MoE block)."""
    mods = sh.cuda_graph_modules
    return not mods or ("attn" in mods and bool(mods & {"mlp", "moe"}))


def graph_shared_bytes(arch: ModelArch, sh: Shard) -> float:
    """What Transformer Engine's per-layer graphs keep once per rank
    (TE_GRAPH_SHARED_TENSORS layer inputs); 0 for other graphs and eager layers."""
    if not sh.cuda_graphs or sh.cuda_graph_impl != "transformer_engine":
        return 0.0
    return TE_GRAPH_SHARED_TENSORS * _graph_input(arch, sh)


def _local(sh: Shard) -> bool:
    """Whether Megatron-Core's own per-layer graphs run the layers."""
    return sh.cuda_graphs and sh.cuda_graph_impl in (None, "local")


def chunk_copies(
    arch: ModelArch, sh: Shard, kept: list[float], first: bool, last: bool
) -> list[float]:
    """What each model chunk of a rank keeps per micro-batch (`kept`), with the
    LOCAL_GRAPH_CHUNK_COPIES of Megatron-Core's own graphs: but the received input's on the first
    rank's (`first`) first chunk, and the output's on the loss rank's (`last`) last chunk, so
    none without pipeline parallelism, where the one chunk is both."""
    if not _local(sh):
        return kept
    v = len(kept)
    return [
        k
        + (LOCAL_GRAPH_CHUNK_COPIES - (first and c == 0) - (last and c == v - 1))
        * _graph_input(arch, sh)
        for c, k in enumerate(kept)
    ]


def pool_holds_working(sh: Shard) -> bool:
    """Whether a graphed layer's working set sits apart from the eager loss's: per-layer graphs'
    activations and working sets live in the graphs' private mempool (Megatron-LM d98e8a64
    cuda_graphs.py:1929, one for every runner; TransformerEngine d0067d0d
    transformer_engine/pytorch/graph.py:485, :678, one for every callable), which keeps the peak
    of its capture order reserved while the graphs live, and the eager loss allocates outside
    it: the logits cannot reuse a graphed layer's backward working set as they do eager
    (`stage_activations.peak_bytes` adds the two). Where the graphs capture the whole layer or
    its mixer (an upper bound for the mixer alone: the eager MoE dispatcher's tokens could share
    the loss's memory); not under a full-iteration graph, which captures the loss too."""
    if not sh.cuda_graphs or sh.cuda_graph_impl == "full_iteration":
        return False
    mods = sh.cuda_graph_modules
    return not mods or bool(mods & {"attn", "mamba", "mlp", "moe"})
