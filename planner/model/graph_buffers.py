"""The static buffers CUDA graphs of decoder layers keep beyond the layers' eager activations
(`planner.model.activations`): per layer and micro-batch in flight (`graph_bytes`, in each
layer's bytes) and, under Transformer Engine's graphs, once per rank (`graph_shared_bytes`,
beside the stored activations: `stage_activations.peak_bytes`). What the graphs capture:
`planner.model.graph_capture`."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model.fp32 import word
from planner.model.shard import Shard

GRAPH_STATIC_TENSORS = 2
"""Layer-input-sized bf16 buffers a layer graphed by Megatron-Core's own implementation
(cuda_graph_impl "local") keeps per micro-batch in flight beyond its eager activations
(Megatron-LM d98e8a64 megatron/core/transformer/cuda_graphs.py): the backward graph's static
gradient input and output of each graph runner (`create_bwd_graph`, :1477-1633), the forward
graph's input and output aliasing the saved activations (a runner's output buffer is the next
one's input). An upper bound: the runners' buffers live in the shared mempool and become weak
references after capture (:1630-1633), which later captures may reuse."""

TE_GRAPH_OUTPUT_COPIES = 1
"""Layer-input-sized bf16 buffers a layer captured whole by Transformer Engine's graphs
(cuda_graph_impl "transformer_engine", TransformerEngine d0067d0d transformer_engine/pytorch
graph.py) keeps per micro-batch in flight beyond its eager activations: its graph's static
output, held strongly from the forward capture until its backward graph's (:729, :880-886),
beside the next layer's static input, a separate buffer Megatron allocates per layer (Megatron-LM
d98e8a64 transformer/module.py:266-271) into which the graphed forward copies it (graph.py
:1045-1050); eager, the one tensor is both. A graph of part of a layer returns what its layer
saves anyway or its input (transformer_layer.py:942-952, the residual): none."""

TE_GRAPH_SHARED_TENSORS = 3
"""Layer-input-sized bf16 buffers Transformer Engine's graphs keep once per rank, whatever the
layers and micro-batches captured: Megatron-LM d98e8a64 passes _reuse_graph_input_output_buffers
for TE >= 2.7 (transformer/cuda_graphs.py:2683-2686; Megatron-LM pins TE by git revision,
Megatron-Bridge 067f987d 2.18.0 in uv.lock), so the static gradient outputs are one set per
output signature shared by every graph (graph.py:803-818 at d0067d0d; a whole layer's: its hidden
states, 1) and each backward graph's static gradient inputs become weak references once the next
graph of its chunk is captured (:893-906), so the running graph's and the one before it are held
(2). Graphs of the MoE router hand back the residual and the pre-MLP norm's output too
(transformer_layer.py:942-952): one layer input more, not counted."""


def _graph_input(arch: ModelArch, sh: Shard) -> float:
    """One graph buffer of a layer's input size: [s, b, h] bf16, split by tp under SP."""
    nbytes = word(sh) * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def graph_bytes(arch: ModelArch, sh: Shard) -> float:
    """CUDA graphs' static buffers of one layer per micro-batch: GRAPH_STATIC_TENSORS layer
    inputs under Megatron-Core's own graphs (cuda_graph_impl "local" or unset, what Megatron-LM
    targets launch), TE_GRAPH_OUTPUT_COPIES under Transformer Engine's where they capture the
    whole layer (their shared buffers: `graph_shared_bytes`); 0 when the layers run eagerly, and
    under a full-iteration graph, whose wrapper keeps static copies of the data loader's batches
    only (FullCudaGraphWrapper's StaticBufferLoader, full_cuda_graph.py:97-135 d98e8a64): no
    per-layer graph runner, so no static gradient buffers."""
    if not sh.cuda_graphs or sh.cuda_graph_impl == "full_iteration":
        return 0.0
    if sh.cuda_graph_impl == "transformer_engine":
        return TE_GRAPH_OUTPUT_COPIES * _graph_input(arch, sh) if _whole_layer(sh) else 0.0
    return GRAPH_STATIC_TENSORS * _graph_input(arch, sh)


def _whole_layer(sh: Shard) -> bool:
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
