"""Context parallelism's traffic around one attention block per micro-batch, by the exchange the
layout names (`Layout.cp_comm_type`, Megatron --cp-comm-type, which Transformer Engine runs;
TransformerEngine d0067d0d context_parallel.py):

- p2p (`context_parallel_ring`): a ring passing the K/V chunks, each hop under the partial
  attention it feeds.
- a2a (AttnFuncWithCPAndQKVOA2A, DeepSpeed Ulysses): all-to-alls turn the rank's sequence shard
  of Q, K and V (all its heads) into the whole sequence of a 1/cp share of the heads before the
  attention, and its output back after it; the backward does the same to the output gradient and
  back to the Q, K and V gradients. Four all-to-alls each way, none overlapped.
- all_gather (AttnFuncWithCPAndKVAllGather, Llama 3's, arXiv:2407.21783 sec. 3.3.2): K and V
  are all-gathered before the attention, again in the backward (only the rank's own shard is
  saved), and their gradients reduce-scattered after it; the docstring calls the all-gather
  exposed, and nothing else overlaps either.

The attention kernel does the same work under each (local queries over the causal keys, or the
whole sequence over 1/cp of the heads), so only the traffic differs.
"""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.model import comms, dsa, gemm_shapes
from planner.model.shard import BF16


def head_widths(arch: ModelArch) -> tuple[int, int]:
    """(query and key, value) widths of one attention head: multi-latent attention's
    qk_head_dim + qk_pos_emb_head_dim and v_head_dim (Megatron-Core d98e8a64
    multi_latent_attention.py:165-169, 214-215: the core attention's k_channels and v_channels;
    the value is padded to the key's width only for packed THD sequences, :85-99), else
    head_dim both."""
    if arch.multi_latent_attention and arch.qk_head_dim and arch.v_head_dim:
        return arch.qk_head_dim + (arch.qk_pos_emb_head_dim or 0), arch.v_head_dim
    return arch.head_dim, arch.head_dim


def kv_bytes(arch: ModelArch, t: float, tp: int) -> float:
    """The rank's K and V for its t tokens, bf16, each its head's width (`head_widths`; MLA's
    one K and V per attention head); DeepSeek sparse attention's one latent key (r_kv + d_r wide:
    its value is part of it) and its indexer's key (d_i), whole on every TP rank
    (`planner.model.dsa`: all_gather is its only exchange)."""
    if arch.has_dsa:
        q_w, _ = dsa.widths(arch)
        return t * (q_w + dsa.indexer_dims(arch)[1]) * BF16
    qk, v = head_widths(arch)
    if arch.multi_latent_attention:
        return t * arch.num_attention_heads / tp * (qk + v) * BF16
    return t * gemm_shapes.kv_heads(arch, tp) * (qk + v) * BF16


def a2a_bytes(arch: ModelArch, t: float, tp: int) -> tuple[float, float]:
    """(Q, K and V; the output) bytes one rank holds for its t tokens, bf16, each its head's
    width: what its forward all-to-alls send (and the backward's, for the gradients of the same
    shapes)."""
    qk, v = head_widths(arch)
    heads = t * arch.num_attention_heads / tp * BF16
    return heads * qk + kv_bytes(arch, t, tp), heads * v


def context_parallel(
    cluster: ClusterSpec,
    lay: Layout,
    arch: ModelArch,
    t: float,
    attention: tuple[float, float],
    n_fwd: int,
) -> tuple[float, float]:
    """(exposed, hidden) seconds per micro-batch of one attention block's context-parallel traffic
    on a rank of t local tokens (module docstring); `attention` the block's attention kernel
    (forward, backward) seconds, under which only the ring hides; n_fwd forward passes (2 with
    full recompute)."""
    tp, cp = lay.tp, lay.cp
    if cp <= 1:
        return 0.0, 0.0
    if lay.cp_comm_type == "p2p":
        attn_fwd, attn_bwd = attention
        return context_parallel_ring(
            cluster, tp, cp, kv_bytes(arch, t, tp), attn_fwd, attn_bwd, n_fwd
        )
    grp = comms.place(cluster, tp, cp)
    if lay.cp_comm_type == "a2a":
        qkv, o = a2a_bytes(arch, t, tp)
        one_way = comms.all_to_all(qkv, grp) + comms.all_to_all(o, grp)
        return (n_fwd + 1) * one_way, 0.0
    # all_gather: K and V gathered in every forward pass and the backward, their gradients
    # reduce-scattered (S: the gathered array, cp ranks' shares)
    whole = cp * kv_bytes(arch, t, tp)
    gather = comms.all_gather(whole, grp)
    return (n_fwd + 1) * gather + comms.reduce_scatter(whole, grp), 0.0


def exchange_bytes(arch: ModelArch, lay: Layout, t: float) -> float:
    """Bytes the exchange holds beyond the saved activations while one attention block runs, on
    a rank of t local tokens: the ring's K/V chunk in flight from the neighbour, double-buffered
    (p2p); the all-to-alls' receive buffers, a second copy of the rank's Q, K and V (a2a); the
    gathered K and V, cp shares (all_gather)."""
    if lay.cp_comm_type == "a2a":
        return a2a_bytes(arch, t, lay.tp)[0]
    if lay.cp_comm_type == "all_gather":
        return lay.cp * kv_bytes(arch, t, lay.tp)
    return 2 * kv_bytes(arch, t, lay.tp)


def context_parallel_ring(
    cluster: ClusterSpec,
    tp: int,
    cp: int,
    kv_bytes: float,
    attn_fwd: float,
    attn_bwd: float,
    n_fwd: int,
) -> tuple[float, float]:
    """(exposed, hidden) seconds per layer and micro-batch of ring attention: the K/V chunk
    passes cp-1 hops per forward, K/V and their gradients per backward, each pass overlapped
    with the attention kernel it feeds (Megatron's p2p context parallelism)."""
    hop = comms.p2p(kv_bytes, comms.p2p_link(cluster, tp, cp))
    fwd, bwd = (cp - 1) * hop, 2 * (cp - 1) * hop
    exposed = n_fwd * max(fwd - attn_fwd, 0.0) + max(bwd - attn_bwd, 0.0)
    return exposed, n_fwd * fwd + bwd - exposed
