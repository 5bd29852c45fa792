"""Parameter counts of a ModelArch, counted the way Megatron-LM builds the model.

Pure functions of a `ModelArch`; nothing here knows about parallelism. The memory model shards these
counts; the FLOP model and `params_total` / `params_active` reports use them whole.

Notation (Megatron names, as in `megatron/training/theoretical_memory_usage.py`): h hidden_size,
a num_attention_heads, n_q num_query_groups, d_h kv_channels, Q = a*d_h, F ffn_hidden_size, F_e
moe_ffn_hidden_size, F_s moe_shared_expert_intermediate_size, E num_moe_experts, k moe_router_topk,
V vocab_size (unpadded: counts describe the model, padding is a memory detail), P max position
embeddings, nw = 1 weight per channel for RMSNorm and 2 (weight + bias) for LayerNorm.

Attention, MHA / GQA (one layer):
    linear_qkv   h -> Q + 2*n_q*d_h      weights h*(Q + 2*n_q*d_h), bias Q + 2*n_q*d_h
    linear_proj  Q -> h                  weights Q*h,               bias h
    q/k norm     over d_h (qk_layernorm) 2 * nw * d_h
    sinks        a (softmax_type "learnable": DotProductAttention's `softmax_offset`, one
                 learned logit per head, Megatron-Core d98e8a64 dot_product_attention.py)
  The QKV bias is present with add_bias_linear or add_qkv_bias (Qwen2); the output bias only with
  add_bias_linear. With n_q = a and no biases this is Megatron's `2*h*Q*(1 + n_q/a)`.

Attention, MLA (DeepSeek-V2/V3; r_q q_lora_rank, r_kv kv_lora_rank, d_qk qk_head_dim, d_r
qk_pos_emb_head_dim, d_v v_head_dim):
    q            with q-LoRA: h*r_q + r_q*a*(d_qk + d_r) (+ nw*r_q for q_layernorm)
                 without:     h*a*(d_qk + d_r)
    kv           h*(r_kv + d_r) + r_kv*a*(d_qk + d_v) (+ nw*r_kv for kv_layernorm)
    linear_proj  a*d_v*h (+ h bias with add_bias_linear)
  Megatron builds the four latent projections with bias=False and the two latent norms only with
  --qk-layernorm; with RMSNorm and both norms this is ecosystem.md 1.4's
  `r_q*(h + a*(d_qk+d_r) + 1) + r_kv*(h + a*(d_qk+d_v) + 1) + h*d_r + a*d_v*h`.

MLP with width W (dense: W = F; one routed expert: W = F_e; the shared experts: W = F_s):
    linear_fc1   h -> W, or h -> 2W when gated (SwiGLU/GeGLU)   bias W or 2W
    linear_fc2   W -> h                                         bias h
  so 2*h*W*γ weights with γ = 3/2 gated, 1 otherwise (gated: 3*h*W), plus W + h biases (2W + h
  gated) with add_bias_linear.

Latent MoE (--moe-latent-size L; Megatron-Core d98e8a64 moe_layer.py `fc1_latent_proj` h -> L and
`fc2_latent_proj` L -> h, TE linears with parallel_mode "duplicated", experts.py building each
routed expert at input width L): the routed experts are the MLP above with L in place of h, and
the layer adds the two projections, 2*h*L weights (+ L + h biases with add_bias_linear), whole on
every TP rank. The shared experts and the router stay at h.

Router: h*E (no bias; DeepSeek's expert-bias buffer of E per layer is not a trained parameter).
Per-layer norms: input_layernorm + pre_mlp_layernorm = 2*nw*h. Final norm: nw*h.
Embedding: V*h, plus P*h for learned absolute positions. Output layer: V*h when untied, else 0.

A decoder layer is the blocks of its kind (`planner.inputs.hybrid.LayerKind`), each with its norm
(nw*h): a transformer layer is dense (attention + dense MLP) or MoE (attention + router + shared
experts + E routed experts), following moe_layer_freq; a hybrid stack's layers are one block each
(M a Mamba-2 mixer, `planner.model.mamba`; * attention; - a dense MLP; E the MoE block; G a gated
delta net, `planner.model.gdn`), following hybrid_layer_pattern; a transformer's linear-attention
layers (linear_attention_freq) have a gated delta net in place of the attention. `layer_params`
splits a layer into (non-expert, routed-expert) because the two shard differently (TP/PP vs
EP/expert-TP); `replicated_params` is the part of the non-expert one that TP does not split (the
norms, MLA's down-projections and latent norms, the router, a latent MoE's projections).

MTP (Megatron `multi_token_prediction.py`, DeepSeek-V3): each MTP layer has enorm and hnorm
(nw*h each), eh_proj (2h -> h, no bias), one transformer layer of the last decoder layer's type
(a hybrid stack: the layers of the pattern's MTP part), and a final norm (nw*h); it shares the
embedding and output layer with the main model; with mtp_use_repeated_layer one set of weights
serves every depth (Megatron's MultiTokenPredictionBlock). DeepSeek
reports 671B for the main model and 14B for the MTP module (the 14B includes the shared embedding
and head), so `params_total` leaves MTP out and `mtp_params` counts only what MTP adds.

Checks (tests/test_params.py): for GPT (LayerNorm, biases, 4h gelu MLP, learned positions, tied
embeddings) one layer is 12h^2 + 13h, so the total is SC21 eq.(2)
`12*l*h^2*(1 + 13/(12h) + (V+s)/(12*l*h))` plus the final LayerNorm's 2h.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TypeVar

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.model import dsa, mixers
from planner.model.job_memo import ModelMemo

_T = TypeVar("_T")


def _per_model(f: Callable[[ModelArch], _T]) -> Callable[[ModelArch], _T]:
    """`f` remembered per model by identity (`ModelMemo`): `functools.cache` hashed the whole
    pydantic model on every call (DeepSeek-V3's search: 7,600 of them, each hashing every
    field); equal models computed apart get equal values."""
    memo: ModelMemo[None, _T] = ModelMemo(64)

    @wraps(f)
    def remembered(arch: ModelArch) -> _T:
        return memo.get(arch, None, lambda: f(arch))

    return remembered


def _norm_width(arch: ModelArch) -> int:
    """Parameters per normalized channel: weight (RMSNorm) or weight + bias (LayerNorm)."""
    return 2 if arch.normalization == "LayerNorm" else 1


def _mlp_params(arch: ModelArch, width: int, hidden: int | None = None) -> int:
    """One MLP of width `width` (per GLU branch) reading and writing `hidden` (default
    hidden_size): fc1 (2x wide when gated) + fc2, with biases."""
    h = hidden or arch.hidden_size
    fc1_out = 2 * width if arch.gated_linear_unit else width
    weights = h * fc1_out + width * h
    biases = fc1_out + h if arch.add_bias_linear else 0
    return weights + biases


def _mla_attention_params(arch: ModelArch) -> int:
    h, a, nw = arch.hidden_size, arch.num_attention_heads, _norm_width(arch)
    # The model validator guarantees these are set when multi_latent_attention is on.
    assert arch.kv_lora_rank and arch.qk_head_dim and arch.qk_pos_emb_head_dim and arch.v_head_dim
    r_kv, d_qk, d_r, d_v = (
        arch.kv_lora_rank,
        arch.qk_head_dim,
        arch.qk_pos_emb_head_dim,
        arch.v_head_dim,
    )
    latent_norm = arch.qk_layernorm
    if arch.q_lora_rank:
        r_q = arch.q_lora_rank
        q = h * r_q + r_q * a * (d_qk + d_r) + (nw * r_q if latent_norm else 0)
    else:
        q = h * a * (d_qk + d_r)
    kv = h * (r_kv + d_r) + r_kv * a * (d_qk + d_v) + (nw * r_kv if latent_norm else 0)
    out = a * d_v * h + (h if arch.add_bias_linear else 0)
    return q + kv + out + sink_params(arch) + dsa.indexer_params(arch)


def attention_params(arch: ModelArch) -> int:
    """One layer's attention: QKV (or the MLA projections), output projection, biases, norms."""
    if arch.multi_latent_attention:
        return _mla_attention_params(arch)
    h, d_h = arch.hidden_size, arch.head_dim
    q_out = arch.num_attention_heads * d_h
    gate = q_out if arch.attention_output_gate else 0  # the output gate's rows of linear_qkv
    qkv_out = q_out + gate + 2 * arch.query_groups * d_h
    qkv = h * qkv_out + (qkv_out if arch.add_bias_linear or arch.add_qkv_bias else 0)
    out = q_out * h + (h if arch.add_bias_linear else 0)
    qk_norm = 2 * _norm_width(arch) * d_h if arch.qk_layernorm else 0
    return qkv + out + qk_norm + sink_params(arch)


def sink_params(arch: ModelArch) -> int:
    """One layer's learned softmax offsets (attention sinks): a per head with softmax_type
    "learnable", none otherwise (off-by-one's offset is a constant 0, not a parameter)."""
    return arch.num_attention_heads if arch.softmax_type == "learnable" else 0


def dense_mlp_params(arch: ModelArch) -> int:
    """One dense MLP of width ffn_hidden_size (gated: 3*h*F weights), with biases."""
    return _mlp_params(arch, arch.ffn_hidden_size)


def expert_params(arch: ModelArch) -> int:
    """ONE routed expert's MLP (width moe_ffn_hidden_size, at the latent width for a latent MoE);
    0 for a dense model."""
    return _mlp_params(arch, arch.expert_ffn, arch.expert_hidden) if arch.is_moe else 0


def latent_projection_params(arch: ModelArch) -> int:
    """A latent MoE layer's down- and up-projections (h -> L, L -> h); 0 without one."""
    latent = arch.moe_latent_size
    if not latent:
        return 0
    h = arch.hidden_size
    return 2 * h * latent + (latent + h if arch.add_bias_linear else 0)


def shared_expert_params(arch: ModelArch) -> int:
    """All shared experts of one MoE layer (one MLP of the total shared width); 0 if none."""
    if not arch.is_moe or arch.moe_shared_expert_intermediate_size is None:
        return 0
    return _mlp_params(arch, arch.moe_shared_expert_intermediate_size)


def router_params(arch: ModelArch) -> int:
    """The router's h x E gate of one MoE layer; 0 for a dense model."""
    return arch.hidden_size * arch.num_moe_experts if arch.num_moe_experts else 0


def layer_norm_params(arch: ModelArch) -> int:
    """The two per-layer norms (before attention, before the MLP)."""
    return 2 * _norm_width(arch) * arch.hidden_size


def kind_params(arch: ModelArch, kind: bool | LayerKind) -> tuple[int, int]:
    """(non-expert, routed-expert) parameters of one layer of a kind (or a transformer layer's
    MoE flag): its mixer, its channel block, and one norm per block."""
    kind = layer_kind(kind)
    non_expert = kind.blocks * _norm_width(arch) * arch.hidden_size
    if kind.mixer == "attention":
        non_expert += attention_params(arch)
    elif (linear := mixers.of(kind)) is not None:
        non_expert += linear.mixer_params(arch)
    if kind.ffn == "dense":
        non_expert += dense_mlp_params(arch)
    if not kind.moe:
        return non_expert, 0
    non_expert += router_params(arch) + shared_expert_params(arch) + latent_projection_params(arch)
    return non_expert, (arch.num_moe_experts or 0) * expert_params(arch)


def replicated_params(arch: ModelArch, kind: bool | LayerKind) -> int:
    """The part of a layer's non-expert parameters (`kind_params`) that every TP rank holds whole,
    as Megatron-Core builds it (d98e8a64): the block norms, the q / k norms and MLA's latent
    norms, MLA's down-projections (TELinear with parallel_mode "duplicated",
    multi_latent_attention.py), the router's weight (TopKRouter, unsplit) and a latent MoE's
    projections (duplicated). The rest is split over TP; a mixer's inner norms are split with its
    channels or are a few dozen weights."""
    kind = layer_kind(kind)
    h, nw = arch.hidden_size, _norm_width(arch)
    n = kind.blocks * nw * h
    if kind.mixer == "attention" and arch.multi_latent_attention:
        assert arch.kv_lora_rank is not None and arch.qk_pos_emb_head_dim is not None
        r_q, r_kv = arch.q_lora_rank or 0, arch.kv_lora_rank
        n += h * r_q + h * (r_kv + arch.qk_pos_emb_head_dim)
        n += nw * (r_q + r_kv) if arch.qk_layernorm else 0
        n += dsa.indexer_params(arch)  # DSA's indexer, duplicated
    elif kind.mixer == "attention" and arch.qk_layernorm:
        n += 2 * nw * arch.head_dim
    if kind.moe:
        n += router_params(arch) + latent_projection_params(arch)
    return n


def layer_params(arch: ModelArch, i: int) -> tuple[int, int]:
    """(non-expert, routed-expert) parameters of decoder layer i (0-based)."""
    if not 0 <= i < arch.num_layers:
        raise IndexError(f"layer index ({i}) must be in [0, num_layers ({arch.num_layers}))")
    return kind_params(arch, arch.layer_kinds[i])


@_per_model
def kind_table(arch: ModelArch) -> tuple[tuple[int, int], ...]:
    """`kind_params` of each of `arch.kinds`, in order (cached: the memory model asks per
    layout)."""
    return tuple(kind_params(arch, k) for k in arch.kinds)


@_per_model
def replicated_table(arch: ModelArch) -> tuple[int, ...]:
    """`replicated_params` of each of `arch.kinds`, in order (cached, as `kind_table`)."""
    return tuple(replicated_params(arch, k) for k in arch.kinds)


@_per_model
def layer_kinds(arch: ModelArch) -> tuple[tuple[int, int], tuple[int, int]]:
    """((non-expert, routed-expert) parameters of a dense layer, the same of an MoE layer); (0, 0)
    for a kind the model does not have. Cached: the memory model and the search ask per layout."""
    moe = arch.moe_layers
    dense_i = moe.index(False) if False in moe else None
    moe_i = moe.index(True) if True in moe else None
    dense = layer_params(arch, dense_i) if dense_i is not None else (0, 0)
    sparse = layer_params(arch, moe_i) if moe_i is not None else (0, 0)
    return dense, sparse


def embedding_params(arch: ModelArch, vocab: int | None = None) -> int:
    """Word embedding (vocab defaults to the unpadded vocab_size), plus learned positions."""
    v = arch.vocab_size if vocab is None else vocab
    params = v * arch.hidden_size
    if arch.position_embedding_type == "learned_absolute":
        # ModelArch guarantees one of the two for learned positions
        params += (arch.max_position_embeddings or arch.seq_length or 0) * arch.hidden_size
    return params


def output_params(arch: ModelArch, vocab: int | None = None) -> int:
    """The output layer (h x V) when untied from the embedding; 0 when tied."""
    if not arch.untie_embeddings_and_output_weights:
        return 0
    v = arch.vocab_size if vocab is None else vocab
    return v * arch.hidden_size


def final_norm_params(arch: ModelArch) -> int:
    """The norm after the last decoder layer."""
    return _norm_width(arch) * arch.hidden_size


def mtp_layer_params(arch: ModelArch) -> tuple[int, int]:
    """(non-expert, routed-expert) parameters of all MTP layers together; (0, 0) without MTP.

    Each layer: enorm + hnorm + final norm (3 norms of width h), eh_proj (2h x h, no bias) and one
    decoder layer of the last decoder layer's type. Embedding and output layer are shared.
    """
    if arch.mtp_num_layers == 0:
        return 0, 0
    h = arch.hidden_size
    inner = [kind_params(arch, k) for k in arch.mtp_kinds]
    non_expert = sum(ne for ne, _ in inner) + 3 * _norm_width(arch) * h + 2 * h * h
    experts = sum(e for _, e in inner)
    copies = 1 if arch.mtp_use_repeated_layer else arch.mtp_num_layers
    return copies * non_expert, copies * experts


def mtp_replicated_params(arch: ModelArch) -> int:
    """The part of `mtp_layer_params`' non-expert parameters that TP does not split: each
    layer's inner decoder layer's `replicated_params` and its three norms (eh_proj is
    column-parallel)."""
    if arch.mtp_num_layers == 0:
        return 0
    one = sum(replicated_params(arch, k) for k in arch.mtp_kinds)
    one += 3 * _norm_width(arch) * arch.hidden_size
    return (1 if arch.mtp_use_repeated_layer else arch.mtp_num_layers) * one


def mtp_params(arch: ModelArch) -> int:
    """What the MTP layers add (their embedding and output layer are the main model's)."""
    return sum(mtp_layer_params(arch))


def _outside_layers(arch: ModelArch) -> int:
    return embedding_params(arch) + output_params(arch) + final_norm_params(arch)


def params_total(arch: ModelArch) -> int:
    """Every parameter of the main model (MTP layers excluded, as DeepSeek reports 671B)."""
    layers = sum(sum(kind_params(arch, k)) for k in arch.layer_kinds)
    return _outside_layers(arch) + layers


def params_active(arch: ModelArch) -> int:
    """Parameters one token uses: everything dense, shared experts, and top-k routed experts;
    the input embedding table counted whole, as Mixtral's and Qwen3's published active counts do
    (OpenAI's gpt-oss counts and DeepSeek-V2-Lite's 2.4B leave it out)."""
    total = _outside_layers(arch)
    for kind in arch.layer_kinds:
        non_expert, _ = kind_params(arch, kind)
        total += non_expert
        if kind.moe:
            total += arch.moe_router_topk * expert_params(arch)
    return total
