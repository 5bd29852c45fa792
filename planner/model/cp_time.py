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


def recomputed_passes(n_fwd: int, modules: tuple[str, ...]) -> int:
    """Forward passes of the attention's exchange per micro-batch: a recomputed core attention
    (Megatron-LM d98e8a64 attention.py:392-395, :1555-1556, the selective default) checkpoints
    Transformer Engine's DotProductAttention, exchange included, so its backward runs the
    exchange's forward again, as full recompute (n_fwd 2) does."""
    return 2 if "core_attn" in modules else n_fwd


def exchange_bytes(arch: ModelArch, lay: Layout, t: float) -> float:
    """Bytes the exchange holds beyond the saved activations while one attention block runs, on
    a rank of t local tokens: the larger of its forward's and its backward's (Transformer Engine
    d0067d0d context_parallel.py; K, V, Q, O the rank's key, value, query and output bytes, KV
    = K + V, the block's output itself counted with the saved activations):

    - p2p, forward on the last rank (every step full size under load balancing): the own K/V
      copied into the first ring buffer and every received one, kept in a list until the
      return (:1686-1707), and every step's partial output until the correction loop (:1672,
      :1979-2026): cp (KV + O). Backward: two (2, KV) send/receive buffers and the q-sized dq
      buffer (:2396-2401), plus one step's kernel gradients dq_, dk_, dv_ (:2498-2628):
      5 KV + 2 Q.
    - all_gather, forward: the gathered K and V while each is index-selected into a new copy
      (:3215-3230): cp (KV + max(K, V)); later the output, its accumulator and two half-size
      step outputs (:3249-3263): cp KV + 2 O beyond the output. Backward: the full-length
      zeroed dK and dV (:3768-3777) under the re-gathered K and V and their index-selected
      copy (:3788-3808), and dq (:3763-3767): cp (2 KV + max(K, V)) + Q.
    - a2a: the all-to-alls' receive buffers, a second copy of the rank's Q, K and V.

    DeepSeek sparse attention gathers its latent and indexer keys (`planner.model.dsa`): cp
    shares of them. torchtitan's (PyTorch's all-gathered CP): `planner.model.titan_cp`."""
    tp, cp = lay.tp, lay.cp
    if lay.cp_comm_type == "a2a":
        return a2a_bytes(arch, t, tp)[0]
    kv = kv_bytes(arch, t, tp)
    if arch.has_dsa:
        return cp * kv
    qk, v = head_widths(arch)
    heads = t * arch.num_attention_heads / tp * BF16
    q, o = heads * qk, heads * v
    if lay.cp_comm_type == "all_gather":
        widest = kv * max(qk, v) / (qk + v)  # the larger of K and V
        fwd = cp * kv + max(cp * widest, 2 * o)
        return max(fwd, cp * (2 * kv + widest) + q)
    return max(cp * (kv + o), 5 * kv + 2 * q)


def context_parallel_ring(
    cluster: ClusterSpec,
    tp: int,
    cp: int,
    kv_bytes: float,
    attn_fwd: float,
    attn_bwd: float,
    n_fwd: int,
) -> tuple[float, float]:
    """(exposed, hidden) seconds per layer and micro-batch of ring attention (Megatron's p2p
    context parallelism, Transformer Engine d0067d0d context_parallel.py), each hop hidden only
    under the one step's partial attention it runs beside (a 1/cp share of the load-balanced
    kernel). Forward: hop i+1 is sent at step i and waited for at step i+1 (:1697-1716): cp-1
    hops of K/V, each exposed by what it takes beyond attn_fwd / cp. Backward (:2459-2495,
    waited in the same step, :2717-2720): step 0 sends K/V, steps 1..cp-2 K/V with the dK/dV
    gathered so far (one message of twice the bytes), step cp-1 dK/dV, each against
    attn_bwd / cp. n_fwd: forward passes (2 when the attention is recomputed)."""
    hop_link = comms.p2p_link(cluster, tp, cp)
    hop, pair = comms.p2p(kv_bytes, hop_link), comms.p2p(2 * kv_bytes, hop_link)
    step_f, step_b = attn_fwd / cp, attn_bwd / cp
    fwd_exposed = (cp - 1) * max(hop - step_f, 0.0)
    bwd_exposed = 2 * max(hop - step_b, 0.0) + (cp - 2) * max(pair - step_b, 0.0)
    exposed = n_fwd * fwd_exposed + bwd_exposed
    total = n_fwd * (cp - 1) * hop + 2 * hop + (cp - 2) * pair
    return exposed, total - exposed
