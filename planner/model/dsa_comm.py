"""The lightning indexer's own tensor-parallel traffic (DeepSeek sparse attention,
`planner.model.dsa`): under sequence parallelism it all-gathers its two inputs over the TP group
itself, beside the gathers of MLA's latents (`layer_tp`, `gemm_shapes.mla_gathered_width`).

Megatron-LM d98e8a64 megatron/core/transformer/experimental_attention_variant/dsa.py:1273-1275
(`DSAIndexer.forward_before_topk`): with --sequence-parallel and TP > 1,
`gather_from_sequence_parallel_region` of x (the attention's h-wide input, `hidden_states`,
absorbed_mla.py:864, :775) and of qr (the normed q latent, q_lora_rank wide, or without one the
input again: absorbed_mla.py:481). Both are the activations themselves, not a quantised copy (the
indexer's wq_b, wk and weights_proj are "duplicated" linears, dsa.py:1159-1203, whose TE
quantisation, under FP8, happens after the gather), so they move the activations' dtype
(`fp32.value_bytes`). Both are detached before the indexer (dsa.py:1887-1888), so no gradient
flows back through them: forward only. A checkpointed core attention (the DSAttention,
absorbed_mla.py:847-852, its inputs include x and qr) runs them again in its backward, as full
recompute does. Top-k sharing across layers is not modelled (`planner.inputs.megatron_dsa`): every
DSA layer runs its own indexer.
"""

from __future__ import annotations

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, gemm_shapes
from planner.model.fp32 import value_bytes


def indexer_gathers(
    job: Job, lay: Layout, kind: LayerKind, t: float, n_fwd: int, modules: tuple[str, ...]
) -> float:
    """Seconds of the indexer's TP all-gathers of one layer per micro-batch of t tokens (always
    exposed: they block its forward); 0 without DSA, sequence parallelism or TP."""
    arch = job.arch
    if not arch.has_dsa or kind.mixer != "attention" or job.framework != "megatron":
        return 0.0
    if not lay.sequence_parallel or lay.tp <= 1:
        return 0.0
    passes = 2 if "core_attn" in modules else n_fwd
    size = t * gemm_shapes.dsa_indexer_gathered_width(arch) * value_bytes(job)
    return passes * comms.all_gather(size, comms.place(job.cluster, 1, lay.tp))
