"""Activation memory of one mixture-of-experts layer for one micro-batch, in bytes, on one GPU
(the dense blocks: `planner.model.activations`, whose derivation this extends).

MoE layers (moe/moe_layer.py, router.py, experts.py TEGroupedMLP, token_dispatcher.py; the TE
spec puts a separate norm before the MoE layer), per local token (T/t: MoE with TP needs SP) and
per token-expert pair the GPU's experts receive:

    pre-MLP norm   its input 2h; its output 2h (the router's saved input, and the shared
                   experts' input: an 8-bit copy more under FP8)                per local token
    dropout mask   h                                                            per local token
    router         fp32 logits and scores, 2 x 4E                               per local token
    experts        fc1's input 2h (8 bits under FP8) x etp (expert-TP gathers its ranks'
                   tokens); fc1's output 2F (x 2 gated: the fused SwiGLU's input); the weighted
                   activation 2F, fc2's input (8 bits under FP8); the probability, 4   per pair
    shared experts fc1's output and activation over the TP group's tokens, split by t

Pairs: k x T/t x the routing load (`Shard.moe_load`). The dispatchers' permutations save only
indices (moe_utils.permute / unpermute without probabilities, sort_chunks_by_idxs): no token
tensor is kept for them, but they hold tokens while the layer runs (`dispatch_working_bytes`)."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model.shard import BF16, FP32, Shard, linear_in, masks, norm_input


def pairs(arch: ModelArch, sh: Shard, load: float | None = None) -> float:
    """Token-expert pairs the experts of one GPU receive per micro-batch (before expert-TP
    gathering): k x T/tp x the routing load (`Shard.moe_load`, or `load`)."""
    return arch.moe_router_topk * sh.tokens / sh.tp * (sh.moe_load if load is None else load)


def moe_bytes(arch: ModelArch, sh: Shard) -> float:
    """A mixture-of-experts MLP with its norm: router, experts (reading expert_hidden-wide
    tokens), shared experts; a latent MoE's up-projection keeps its latent input."""
    assert arch.num_moe_experts is not None
    h, E = arch.hidden_size, arch.num_moe_experts
    local = sh.tokens / sh.tp
    out = norm_input(local, h, sh) + masks(local, h, sh)
    if sh.drops("moe"):
        # the checkpointed MoE layer keeps its input, the norm output
        return out + BF16 * local * h
    if not sh.drops("layernorm"):
        out += BF16 * local * h
    out += 2 * FP32 * local * E
    n = pairs(arch, sh)
    glu = 2 if arch.gated_linear_unit else 1
    F = arch.expert_ffn
    out += expert_input_bytes(arch, sh) + n * (BF16 * F * glu + FP32)
    if arch.moe_latent_size:
        out += local * linear_in(BF16 * arch.moe_latent_size, sh)
    if not sh.drops("moe_act"):
        out += n * linear_in(BF16 * F, sh)
    Fs = arch.moe_shared_expert_intermediate_size
    if Fs:
        if sh.quantised and not sh.drops("layernorm"):
            out += local * h * sh.linear_bytes  # the shared experts' quantised input copy
        if not sh.drops("shared_experts"):
            out += local * (BF16 * Fs * glu + linear_in(BF16 * Fs, sh))
    return out


def expert_input_bytes(arch: ModelArch, sh: Shard) -> float:
    """What the routed experts keep of their input per micro-batch: each (token, expert) copy the
    GPU's experts receive (`pairs`, etp x over with expert TP), expert_hidden wide, saved by fc1
    for its weight gradient. The token permutation writes it and the grouped GEMMs read it; no
    elementwise kernel touches it (`planner.model.layer_time` leaves it out of its elementwise
    traffic, priced as the permutation's)."""
    return pairs(arch, sh) * sh.etp * linear_in(BF16 * arch.expert_hidden, sh)


DISPATCH_COPIES = {"alltoall": 2.0, "flex": 2.0, "hybridep": 1.0}
"""Token tensors (expert_hidden wide, per pair) a dispatcher holds while one MoE layer runs,
beyond what the experts keep: alltoall, the permuted local tokens and the all-to-all output before
they are sorted by expert (token_dispatcher.MoEAlltoAllTokenDispatcher: permute, all_to_all,
sort_chunks_by_idxs); DeepEP (flex), the received tokens and their expert-major permutation;
HybridEP, which permutes into its own buffer, the permuted tokens only. The backward holds as many
gradients of the same shapes. allgather is sized by the gathered tokens instead."""


def dispatch_working_bytes(arch: ModelArch, sh: Shard, dispatcher: str, ep: int) -> float:
    """Bytes of tokens in flight in the token dispatcher while one MoE layer's forward or backward
    runs, not kept afterwards: DISPATCH_COPIES token tensors of the pairs; allgather gathers every
    token of the etp x ep group (token_dispatcher.MoEAllGatherTokenDispatcher) before it keeps
    its experts' pairs."""
    h = arch.expert_hidden
    n = pairs(arch, sh, sh.moe_work_load) * sh.etp
    if dispatcher == "allgather":
        return BF16 * h * (sh.tokens / sh.tp * sh.etp * ep + n)
    return BF16 * h * n * DISPATCH_COPIES.get(dispatcher, 2.0)
