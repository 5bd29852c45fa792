"""Activation memory of one mixture-of-experts layer for one micro-batch, in bytes, on one GPU
(the dense blocks: `planner.model.activations`, whose derivation this extends).

MoE layers (moe/moe_layer.py, router.py, experts.py TEGroupedMLP, token_dispatcher.py; the TE
spec puts a separate norm before the MoE layer), per local token (T/t: MoE with TP needs SP) and
per token-expert pair the GPU's experts receive:

    pre-MLP norm   its input 2h; its output 2h (the router's saved input, and the shared
                   experts' input: an 8-bit copy more under delayed-scaling FP8;
                   `shared_input_bytes`)                                         per local token
    dropout mask   h                                                            per local token
    router         fp32 logits and scores, 2 x 4E                               per local token
    experts        fc1's input 2h (8 bits under FP8) x etp (expert-TP gathers its ranks'
                   tokens); fc1's output 2F (x 2 gated: the fused SwiGLU's input); the weighted
                   activation 2F, fc2's input (8 bits under FP8); the probability, 4; a
                   clamped GLU's copies (`clamp_widths`)                          per pair
    shared experts fc1's output and activation over the TP group's tokens, split by t; under
                   the shared-expert overlap fc1's gathered input, 2h per token of the group

Pairs: k x T/t x the routing load (`Shard.moe_load`). The dispatchers' permutations save only
indices (moe_utils.permute / unpermute without probabilities, sort_chunks_by_idxs): no token
tensor is kept for them, but they hold tokens while the layer runs (`dispatch_working_bytes`).
In fp32 training every 16-bit value above is 4 bytes (`planner.model.fp32.word`); the router's
fp32 tensors and the probabilities stay 4."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model.fp32 import norm_in, widen, word
from planner.model.shard import BF16, FP32, Shard, linear_in, masks


def pairs(arch: ModelArch, sh: Shard, load: float | None = None) -> float:
    """Token-expert pairs the experts of one GPU receive per micro-batch (before expert-TP
    gathering): k x T/tp x the routing load (`Shard.moe_load`, or `load`), and the padding rows
    Megatron aligns each expert's segment with (`Shard.pad_pairs`, `planner.model.moe_padding`:
    real rows through fc1, the activation and fc2)."""
    load = sh.moe_load if load is None else load
    return arch.moe_router_topk * sh.tokens / sh.tp * load + sh.pad_pairs


def router_bytes(arch: ModelArch, sh: Shard) -> float:
    """What an MoE layer's router keeps per micro-batch: its fp32 logits and scores
    (`router_tokens` x E each) and the dtype copies of `router_copy_bytes`."""
    assert arch.num_moe_experts is not None
    return 2 * FP32 * router_tokens(sh) * arch.num_moe_experts + router_copy_bytes(arch, sh)


def moe_bytes(arch: ModelArch, sh: Shard) -> float:
    """A mixture-of-experts MLP with its norm: router, experts (reading expert_hidden-wide
    tokens), shared experts; a latent MoE's up-projection keeps its latent input."""
    h = arch.hidden_size
    local = sh.tokens / sh.tp
    w = word(sh)  # 2 bytes (4 in fp32 training) a value the router's fp32 tensors aside
    out = norm_in(local, h, sh) + masks(local, h, sh)
    if sh.drops("moe"):
        # the checkpointed MoE layer keeps its input, the norm output
        return out + w * local * h
    if not sh.drops_pre_moe_norm():  # (kept under TE's router graph: `Shard.keeps_pre_moe_norm`)
        out += w * local * h
    out += router_bytes(arch, sh)
    n = pairs(arch, sh)
    glu = 2 if arch.gated_linear_unit else 1
    F = arch.expert_ffn
    out += expert_input_bytes(arch, sh) + n * (w * F * glu + FP32)
    if arch.moe_apply_probs_on_input and sh.weighted_experts:
        # Megatron-LM d98e8a64 experts.py:918-926: permuted_probs * permuted_local_hidden_states
        # saves the dispatched tokens for the probabilities' gradient, beside fc1's input
        out += pairs(arch, sh) * sh.etp * w * arch.expert_hidden
    if not sh.drops("moe_act"):  # (the checkpointed activation keeps none of them)
        out += n * w * F * (_unfused_widths(arch, sh) + clamp_widths(arch, sh))
    if arch.moe_latent_size:
        out += local * linear_in(BF16 * arch.moe_latent_size, sh)
    if not sh.drops("moe_act"):
        out += n * linear_in(BF16 * F, sh)
    return out + shared_expert_bytes(arch, sh) + combine_bytes(arch, sh)


def shared_expert_bytes(arch: ModelArch, sh: Shard) -> float:
    """What the shared experts keep per micro-batch beyond the norm output the router keeps
    (`shared_input_bytes`, fc1's output and activation; none where selective recompute
    checkpoints them, whose checkpoint keeps that norm output only); 0 without shared experts."""
    Fs = arch.moe_shared_expert_intermediate_size
    if not Fs or sh.drops("shared_experts"):
        return 0.0
    local, w = sh.tokens / sh.tp, word(sh)
    glu = 2 if arch.gated_linear_unit else 1
    out = shared_input_bytes(arch, sh) + local * (w * Fs * glu + linear_in(BF16 * Fs, sh))
    if glu == 2 and not sh.fused_swiglu:  # silu's output, as a dense MLP's (`mlp_bytes`)
        out += w * local * Fs
    return out


def router_tokens(sh: Shard) -> float:
    """Tokens one GPU's router scores per micro-batch: its 1/tp share, or every token of the TP
    group where the gate's input is replicated (`Shard.router_tokens_whole`)."""
    return sh.tokens if sh.router_tokens_whole else sh.tokens / sh.tp


def router_copy_bytes(arch: ModelArch, sh: Shard) -> float:
    """The fp32 copies torchtitan b5bcd76c's router gate keeps for its backward: since ab5ed59f
    ("Execute moe.gate in float32") TokenChoiceTopKRouter.forward runs the gate under
    torch.autocast(dtype=torch.float32) (models/common/moe.py:290-292), whose cast of the
    linear's bf16 operands (FSDP2's bf16 parameters and activations) is recorded by autograd,
    and the matmul saves the cast copies: the gate's input, 4h bytes per router token (for the
    weight's gradient), and the gate weight, 4 E h bytes a layer (for the input's gradient).
    e347b1e5 runs the gate in bf16 and casts only its logits (models/moe/moe.py:312-318), whose
    `.to` saves nothing; a plan does not say which version runs it: counted, the larger. None in
    fp32 training (the cast returns the tensor itself, already saved) or outside torchtitan; per
    token the router scores (`router_tokens`: with EP off under TP b5bcd76c's gate reads the
    replicated tokens, moe_sharding.py:89-125). A compiled block's partitioner may keep the
    bf16 input and cast it again instead; not decidable from the source, so the larger."""
    if not sh.torchtitan or word(sh) >= FP32:
        return 0.0
    assert arch.num_moe_experts is not None
    h = arch.hidden_size
    return FP32 * h * (router_tokens(sh) + arch.num_moe_experts)


def combine_bytes(arch: ModelArch, sh: Shard) -> float:
    """The fp32 (T, k, h) copy torchtitan's MoE keeps for the scores' gradient
    (`Shard.weighted_experts` false), on either side of the experts (MoEArgs.score_before_experts).
    After them (False: Qwen3, DeepSeek-V3, gpt-oss), e347b1e5 models/moe/moe.py:541-549 runs
    torch.bmm(top_scores (T, 1, k) fp32, routed_output_unsorted.float() (T, k, h)), and bmm's
    derivative for its first input reads the second (derivatives.yaml `bmm`), so the fp32 routed
    outputs are saved; b5bcd76c's token_dispatcher.py:158-161 multiplies the fp32 copy by the
    scores likewise. Before them (True, MoEArgs' default: Llama 4, moe.py:31), moe.py:517-521
    multiplies routed_input.to(torch.float32) (T x k rows, h) by the sorted scores, and the
    multiplication keeps that fp32 copy for the scores' gradient: the same 4 T k h bytes. In fp32
    training `.float()` returns the buffer itself, saved all the same. T: the tokens of
    the MoE block's input, replicated over TP (llama4/infra/parallelize.py:521-526 e347b1e5,
    desired_input_layouts Replicate; the buffer is bs x slen x k rows, the rank's own tokens
    after the combine all-to-all). Megatron's experts weight inside the activation: none."""
    if sh.weighted_experts:
        return 0.0
    return FP32 * sh.tokens * arch.moe_router_topk * arch.hidden_size


def shared_input_bytes(arch: ModelArch, sh: Shard) -> float:
    """What the shared experts' fc1 keeps of its input beyond the norm output the layer already
    holds: the TP group's gathered tokens under the shared-expert overlap
    (`Shard.shared_gathered`: bf16, or the quantised copy); else the quantised copy of the local
    tokens, where fc1 makes one (`Shard.shared_keeps_original`) and the norm output is kept."""
    h, local = arch.hidden_size, sh.tokens / sh.tp
    if sh.frozen:
        return 0.0
    if sh.shared_gathered:
        return (
            word(sh) * h * sh.tokens
            if sh.shared_keeps_original
            else linear_in(BF16 * h * sh.tokens, sh)
        )
    if sh.quantised and not sh.shared_keeps_original and not sh.drops_pre_moe_norm():
        return local * h * sh.linear_bytes
    return 0.0


def expert_input_bytes(arch: ModelArch, sh: Shard) -> float:
    """What the routed experts keep of their input per micro-batch: each (token, expert) copy the
    GPU's experts receive (`pairs`, etp x over with expert TP), expert_hidden wide, saved by fc1
    for its weight gradient. The token permutation writes it and the grouped GEMMs read it; no
    elementwise kernel touches it (`planner.model.layer_time` leaves it out of its elementwise
    traffic, priced as the permutation's)."""
    return pairs(arch, sh) * sh.etp * fc1_input_bytes(arch, sh)


def fc1_input_bytes(arch: ModelArch, sh: Shard) -> float:
    """Bytes of one routed pair's fc1 input as fc1 saves it: its quantised copy, or the bf16
    original where `Shard.fc1_keeps_original`."""
    width = BF16 * arch.expert_hidden
    return widen(width, sh) if sh.fc1_keeps_original else linear_in(width, sh)


def _unfused_widths(arch: ModelArch, sh: Shard) -> int:
    """Expert-FFN-wide tensors per pair the routed experts' activation saves beyond the fused
    kernel's (TEGroupedMLP `bias_act_func`, experts.py d98e8a64): without --bias-swiglu-fusion a
    gated unit runs silu(x_glu) * (x_linear + glu_linear_offset), whose multiplication saves
    silu's output and the offset sum, and the product times the probabilities saves the product:
    3; an ungated one (unless squared ReLU's fused kernel runs: --use-fused-weighted-squared-relu,
    off by default, `Job.fused_swiglu` for it) saves the activation's output for the
    probabilities: 1. Experts that weight the tokens
    outside the activation (torchtitan's, `Shard.weighted_experts` false): silu's output, which
    the gate's multiplication saves, where the activation is not fused (as a dense MLP's)."""
    if not sh.weighted_experts:
        return 0 if sh.fused_swiglu or not arch.gated_linear_unit else 1
    if sh.fused_swiglu:  # the fused weighted SwiGLU / squared ReLU kernels
        return 0
    return 3 if arch.gated_linear_unit else 1


def clamp_widths(arch: ModelArch, sh: Shard) -> int:
    """Expert-FFN-wide tensors per pair the clamped GLU (`ModelArch.activation_func_clamp_value`,
    gpt-oss) keeps beyond `_unfused_widths`, where the activation is not recomputed (moe_act:
    the checkpoint keeps only fc1's output). Megatron-LM d98e8a64: quick-GEGLU's fused kernel
    (the only one a nonzero glu_linear_offset may take, transformer_config.py:2440) clamps
    outside its autograd Function (fused_bias_geglu.py:424-432: chunk, two clamps, cat); each
    clamp saves its input (derivatives.yaml `clamp`), a view of fc1's output (counted), and the
    Function saves the clamped cat (:327): 2 more; the fused SwiGLU clamps inside its Function
    (WeightedSwiGLUFunction, fused_bias_swiglu.py:275): none; the unfused GLU
    (experts.py:998-1010) keeps the clamped gate half for the activation: 1. torchtitan's
    gpt-oss experts (e347b1e5 models/gpt_oss/model/moe.py:86-93; b5bcd76c moe.py:67-74
    addcmul), eager, keep the clamped gate, sigmoid's output, the gate product and the linear
    half plus 1 (or clamped): 4, of which `_unfused_widths` counts 1; compiled
    (`Shard.fused_swiglu`) the elementwise chain is recomputed from fc1's output, as the fused
    SwiGLU's: none."""
    if arch.activation_func_clamp_value is None or not arch.gated_linear_unit:
        return 0
    if sh.drops("moe_act"):
        return 0
    if not sh.weighted_experts:
        return 0 if sh.fused_swiglu else 3
    if sh.te_grouped_mlp:  # TE's fused op clamps inside (`Shard.te_grouped_mlp`)
        return 0
    if not sh.fused_swiglu:
        return 1
    return 2 if arch.activation == "quick_geglu" else 0


DISPATCH_TOKENS = {"alltoall": 3.0, "flex": 3.0, "hybridep": 1.0}
"""Token tensors of the pairs (expert_hidden wide) a dispatcher holds at the peak of one MoE
layer's forward, beyond what the experts keep (moe_layer.py `custom_forward` and
`routed_experts_compute`, token_dispatcher.py, d98e8a64). alltoall: the all-to-all's output
(`dispatched_input`, a local of custom_forward), the experts' output and its sort back by source
rank (combine_preprocess), besides the permuted local tokens (k per local token, `forward_bytes`);
DeepEP (flex): the received tokens, their expert-major permutation and the experts' output, at
most 3 (2 x the distinct token-rank pairs + 1 below it); HybridEP, which permutes into its own
buffer: its permuted tokens, and the combine's output (one per local token). The backward holds
two gradients of the pairs' shape (`backward_bytes`). allgather is sized by the gathered tokens
instead."""


def forward_bytes(arch: ModelArch, sh: Shard, dispatcher: str, ep: int) -> float:
    """Bytes of tokens in flight while one MoE layer's forward runs, not kept afterwards
    (`DISPATCH_TOKENS`), with the shared experts' output (hidden wide per local token) held
    until the combine adds it. allgather gathers every token of the etp x ep group
    (MoEAllGatherTokenDispatcher) into its global buffer and unpermutes into a second one before
    it keeps its experts' pairs. alltoall's permuted local tokens: k per local token, x the
    capacity factor where it pads to capacity (`Shard.moe_send_load`), and router padding's rows
    (`Shard.pad_sent`). FP8 / FP4 experts, allgather's too: `_quantised_tokens`. Under
    --moe-router-dtype (`Shard.combine_cast_bytes`) the combine's reduce-scatter reads a copy
    of the expert output in the router's dtype, made beside it
    (token_dispatcher.py d98e8a64 :365-367 allgather, over the gathered tokens; :829-833
    alltoall, over the n pairs, with expert TP only)."""
    h = arch.expert_hidden
    n = pairs(arch, sh, sh.moe_work_load) * sh.etp
    local = sh.tokens / sh.tp
    w = word(sh)
    shared = w * arch.hidden_size * local if arch.moe_shared_expert_intermediate_size else 0.0
    cast = sh.combine_cast_bytes / w  # the copy, in the hidden states' values
    if dispatcher == "allgather":
        gathered = local * sh.etp * ep
        if sh.quantised:
            return w * h * _quantised_tokens(arch, sh, n, cast * gathered, gathered) + shared
        return w * h * ((2 + cast) * gathered + n) + shared
    cast = cast * n if dispatcher == "alltoall" and sh.etp > 1 else 0.0
    tokens = DISPATCH_TOKENS.get(dispatcher, 3.0) * n + cast
    if sh.quantised and dispatcher in ("alltoall", "flex"):
        tokens = _quantised_tokens(arch, sh, n, cast)
    if dispatcher == "alltoall":
        # the permuted local tokens (custom_forward's), with router padding's rows
        tokens += arch.moe_router_topk * local * sh.moe_send_load + sh.pad_sent
    elif dispatcher == "hybridep":
        tokens += local  # the combine's output
    return w * h * tokens + shared


def _quantised_tokens(
    arch: ModelArch, sh: Shard, n: float, cast: float = 0.0, gathered: float | None = None
) -> float:
    """`DISPATCH_TOKENS` of alltoall / DeepEP (n pairs, expert_hidden-wide rows) where fc1 and
    fc2 keep quantised copies of their inputs (Megatron-LM d98e8a64), or the allgather
    dispatcher's rows (`gathered`: the etp x ep group's tokens it gathers, token_dispatcher.py
    :281-303, held as routed_experts_compute's argument while the experts run, and the G rows
    combine_preprocess unpermutes into, :337-353, in place of alltoall's received rows and
    their sort back; its bf16 permuted input, dispatched_input, stays referenced as well,
    moe_layer.py:547-569; `cast` then over the G rows): the bf16 expert input
    stays referenced while the experts run (routed_experts_compute's dispatched_input,
    moe_layer.py:547-569) though fc1 keeps only its 8-bit copy, unless fc1 keeps the original
    (`Shard.fc1_keeps_original`: then it is kept, not in flight); the bf16 activation output
    (F wide per pair before the expert-TP gather) stays a local of TEGroupedMLP.forward
    (experts.py:1026-1047) beside fc2's output, unless moe_act recompute discards it after fc2
    (:1029-1030); with `Shard.expert_padding`, the padded input copy (:896-903) and, at the
    unpadding (:1042-1044), the padded fc2 output beside the unpadded one. The moments, in rows:
    fc2's end: received + input + padded + fc2 output + activation; the unpadding: those and
    the unpadded output (the activation unless discarded); combine_preprocess: received +
    input + output + its sort back (DeepEP's restore), and the router-dtype copy (`cast` rows,
    `forward_bytes`)."""
    inp = 0.0 if sh.fc1_keeps_original else 1.0
    pad = 1.0 if sh.expert_padding else 0.0
    act = n / sh.etp * arch.expert_ffn / arch.expert_hidden  # F-wide rows in h-wide units
    kept_act = 0.0 if sh.drops("moe_act") else act
    received = n if gathered is None else gathered  # (the a2a output, or the gathered tokens)
    sort_back = n if gathered is None else gathered
    fc2_end = received + n * (1 + inp + pad) + act
    unpad = received + n * (1 + inp + 2 * pad) + kept_act if pad else 0.0
    combine = received + n * (1 + inp) + sort_back + cast
    return max(fc2_end, unpad, combine)


def backward_bytes(arch: ModelArch, sh: Shard, dispatcher: str = "alltoall") -> float:
    """Bytes one MoE layer's backward holds beyond what its forward kept: two gradients of the
    pairs' tokens (expert_hidden wide) through the dispatcher, or the experts' own while their
    activation and fc1 run backward (WeightedSwiGLUFunction.backward, fused_bias_swiglu.py
    d98e8a64 :279-286 with weighted_swiglu_back :115-122: fc2's input gradient, F wide per pair,
    beside the activation's input gradient, g x F wide, g = 2 gated, else 1; then fc1's
    backward: its input gradient beside that one): per pair the largest of 2h, h + F,
    F + gF and h + gF, with the recomputed activation (moe_act) one F more. Under
    --moe-router-dtype with expert TP (alltoall), the output gradient's all-gather comes in the
    router's dtype and is cast back beside it (`Shard.combine_cast_bytes`): h + that copy, if
    more than 2h (the allgather dispatcher's forward, over every gathered token, is larger)."""
    h = arch.expert_hidden
    p = pairs(arch, sh, sh.moe_work_load)
    n = p * sh.etp
    F = arch.expert_ffn  # per pair before the expert-TP gather: p x F = n x F / etp
    gF = (2 if arch.gated_linear_unit else 1) * F * p
    cast = sh.combine_cast_bytes if dispatcher == "alltoall" and sh.etp > 1 else 0.0
    grads = max(2.0, 1.0 + cast / word(sh))
    tokens = max(grads * h * n, h * n + F * p, F * p + gF, h * n + gF)
    return word(sh) * (tokens + (F * p if sh.drops("moe_act") else 0.0))


def dispatch_working_bytes(arch: ModelArch, sh: Shard, dispatcher: str, ep: int) -> float:
    """Bytes one MoE layer holds while it runs, not kept afterwards: the larger of its forward's
    tokens in flight (`forward_bytes`) and its backward's (`backward_bytes`)."""
    return max(forward_bytes(arch, sh, dispatcher, ep), backward_bytes(arch, sh, dispatcher))
