"""How many parameter tensors a pipeline rank holds: what Megatron-LM's per-tensor loops over the
parameters visit each step (`planner.model.cost.step_overhead_s`: --log-num-zeros-in-grad counts
each gradient's zeros tensor by tensor, megatron/core/optimizer/clip_grads.py `count_zeros_fp32`,
d98e8a64).

Per decoder layer, as Megatron-Core builds it with Transformer Engine (the norms fused into the
first linear of each block keep their own weight tensors): an attention block has its QKV and
output-projection weights (each with a bias under --add-bias-linear) and its input norm (weight, and
bias for LayerNorm), MLA its five projections and two latent norms in place of QKV, QK layernorm two
norms more, learned attention sinks one (`softmax_offset`); a dense MLP its fc1 and fc2 (with
biases) and its norm; a mixture of experts its norm, the router's weight, and each local expert's
fc1 and fc2 (TEGroupedMLP keeps one weight per expert, with biases), shared experts two more; a
Mamba mixer its in_proj, conv1d weight and bias, dt bias, A_log, D, its inner norm and out_proj, and
its input norm; a gated delta net its in_proj, conv1d weight, dt bias, A_log, out_norm and out_proj,
and its input norm. The first rank holds the word embedding (and learned position embeddings), the
last the final norm and the output layer (a tied model's copy with pp > 1)."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout

MAMBA_TENSORS = 8
"""A Mamba-2 mixer's own tensors (mamba_mixer.py: in_proj, conv1d weight and bias, dt_bias,
A_log, D, the gated norm, out_proj)."""
GDN_TENSORS = 5
"""A gated delta net's own tensors beyond its norms (gated_delta_net/common.py: in_proj, conv1d
weight, dt_bias, A_log, out_proj; no biases, no conv bias)."""
MLA_TENSORS = 7
"""Multi-latent attention's (q down, q up, kv down, kv up, output projections; q and kv norms)."""


def norm_tensors(arch: ModelArch) -> int:
    """A norm's tensors: LayerNorm's weight and bias, RMSNorm's weight."""
    return 2 if arch.normalization == "LayerNorm" else 1


def layer_tensors(arch: ModelArch, kind: LayerKind, ep: int) -> int:
    """Parameter tensors of one decoder layer of `kind` on one GPU of an ep-way expert-parallel
    group (the module docstring)."""
    linear = 2 if arch.add_bias_linear else 1
    norm = norm_tensors(arch)
    n = 0
    if kind.mixer == "attention":
        if arch.multi_latent_attention:  # its latent norms are its QK layernorm
            n += norm + MLA_TENSORS
        else:
            n += norm + 2 * linear + (2 * norm if arch.qk_layernorm else 0)
        n += 1 if arch.softmax_type == "learnable" else 0  # the sinks' `softmax_offset`
    elif kind.mixer == "mamba":
        n += norm + MAMBA_TENSORS
    elif kind.mixer == "gdn":  # its input norm and out_norm
        n += 2 * norm + GDN_TENSORS
    if kind.ffn == "dense":
        n += norm + 2 * linear
    elif kind.ffn == "moe":
        local = max((arch.num_moe_experts or 1) // max(ep, 1), 1)
        shared = 2 * linear if arch.moe_shared_expert_intermediate_size else 0
        n += norm + 1 + 2 * linear * local + shared
    return n


def rank_tensors(arch: ModelArch, lay: Layout, rank: int, chunks: tuple[range, ...]) -> int:
    """Parameter tensors pipeline rank `rank` holds: its decoder layers' and the embedding or
    output layer where they sit (MTP layers left out)."""
    counts = arch.kind_counts(chunks)
    n = sum(c * layer_tensors(arch, k, lay.ep) for k, c in zip(arch.kinds, counts, strict=True))
    if rank == 0:
        n += 1 + (1 if arch.position_embedding_type == "learned_absolute" else 0)
    if rank == lay.output_rank:  # the last stage's (rank 0 in torchtitan's V)
        untied = arch.untie_embeddings_and_output_weights
        n += norm_tensors(arch) + (1 if lay.pp > 1 or untied else 0)
    return n


def max_rank_tensors(arch: ModelArch, lay: Layout) -> int:
    """The most parameter tensors any pipeline rank holds."""
    chunks = lay.chunk_layers(arch.num_layers)
    return max(rank_tensors(arch, lay, r, c) for r, c in enumerate(chunks))
