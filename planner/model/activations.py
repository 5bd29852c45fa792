"""Activation memory of one decoder layer for one micro-batch, in bytes, on one GPU.

Derivation (Korthikanti et al. 2022, arXiv:2205.05198, section 4.1 and Table 2), generalised to
GQA, gated MLPs, MoE, MLA and context parallelism. With 16-bit activations, s tokens, b sequences,
h hidden, a heads, t = tp, per layer the backward pass needs:

    attention  input of QKV (the LayerNorm output)          2sbh         replicated without SP
               Q, K, V                                        2sb(a + 2g)d  split by t
               softmax 2as^2b + its dropout mask as^2b + dropout output 2as^2b = 5as^2b
                                                              (0 with flash attention) split by t
               input of the output projection                 2sb(ad)      split by t
               attention dropout mask                         sbh          replicated without SP
    MLP        input of fc1                                   2sbh         replicated without SP
               fc1 output (2F wide when gated)                2sbF(1+glu)  split by t
               activation output (input of fc2)               2sbF         split by t
               dropout mask                                   sbh          replicated without SP
    2 norms    their inputs                                   4sbh         replicated without SP

For MHA (g = a, ad = h) with F = 4h and no GLU this is Korthikanti's sbh(34 + 5as/h) exactly:
replicated 10sbh, split 24sbh/t. Sequence parallelism splits the replicated part by t too.
Selective recompute drops the 5as^2b term (already 0 with flash attention); full recompute keeps
only the layer input, 2sbh (split by t under SP). Context parallelism divides s by cp.

PyTorch's per-op selective checkpointing (recompute policy "per_op", torchtitan's
`selective_ac_option = "op"`: torch.utils.checkpoint with a policy that saves the outputs of the
attention kernel and of every other matmul, and recomputes everything else) keeps the layer input,
the attention kernel's output and log-sum-exp, and on average half of the layer's matmul outputs
(the counter alternates across layers, so two consecutive layers save all of them once).
Dropout masks are counted even for models trained without dropout: a small over-estimate, on the
safe side. FP8 (Transformer Engine) saves the inputs of the linear layers in 8 bits: those terms
are halved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.inputs.arch import ModelArch
from planner.inputs.layout import RecomputePolicy
from planner.model import flops

BF16 = 2
FP32 = 4
MASK = 1

UNFUSED_NORM_EXTRA = 6
"""Extra bytes per element a plain PyTorch RMSNorm/LayerNorm keeps over a fused kernel, which keeps
its bf16 input (2) and one statistic per token: the unfused one also keeps intermediate tensors
for autograd (a bf16 normalised tensor, 2; with a LLaMA-style fp32 upcast 4-8 more); the bf16
output counts as the next layer's input. Fitted (grid 4-10, picked 6) by benchmarks/fit_memory.py
on the Hagemann et al. rows without the fused kernel."""

GATHERED_LOSS_BYTES_PER_LOGIT = 24
"""Bytes per logit when the cross entropy runs on logits gathered over TP (no vocab-parallel
loss), at the peak of its backward pass: the gathered bf16 logits (2), their fp32 upcast (4), the
saved fp32 log-softmax (4), its fp32 gradient (4), the bf16 gradient (2), and the temporaries of
an unfused softmax. Fitted (range 16-32) by benchmarks/fit_memory.py on the Hagemann et al.
layouts, whose training code computes the loss this way (`cross_entropy = "gathered"`)."""

PYTORCH_LOSS_BYTES_PER_LOGIT = 12
"""Bytes per logit at the backward peak of torch's cross_entropy on the fp32 upcast of a rank's
logits (`cross_entropy = "pytorch"`: torchtitan, and its loss_parallel under TP), by hand from
autograd: forward keeps only the log-softmax output (4; the upcast input is freed, and the bf16
logits are freed before backward); backward adds the nll gradient (4) and the log-softmax input
gradient (4) before the first is released. Megatron's fused vocab-parallel kernel keeps 2 + 4."""

GATHERED_HELD_BYTES_PER_LOGIT = 4
"""Bytes per logit still alive on the last stage after the gathered loss's backward: the current
and the previous micro-batch's bf16 logits, both referenced by the pipeline's two output buffers
(Aleph-Alpha/scaling PipelineScheduleTrain.required_buffer_count = 2 on the last stage; its
PIPELINE_STAGE_OUTPUT is never taken there)."""

MOE_LOAD_IMBALANCE = 1.2
"""Tokens the busiest expert-parallel rank receives, relative to the balanced share, under dropless
routing (Megatron's default, no capacity factor) with an auxiliary balancing loss: a planning
value, used by both the memory and the step-time model."""


@dataclass(frozen=True)
class Shard:
    """How one layer's activations are split on one GPU."""

    tokens: int
    """Tokens per micro-batch on this context-parallel rank: seq_length / cp x micro_batch_size."""
    tp: int = 1
    sequence_parallel: bool = False
    etp: int = 1
    recompute: RecomputePolicy = "none"
    flash_attention: bool = True
    fp8: bool = False
    seq_per_cp_rank: int = 0
    """s / cp (for the s^2 attention-score term without flash attention)."""
    micro_batch_size: int = 1
    fused_norm: bool = True
    cross_entropy: Literal["fused", "pytorch", "gathered"] = "fused"
    fused_swiglu: bool = True
    sp_keeps_gathered_input: bool = False


def _norm_input(T: int, h: int, sh: Shard) -> float:
    """What one norm keeps per micro-batch (before any TP/SP split)."""
    return (BF16 + (0 if sh.fused_norm else UNFUSED_NORM_EXTRA)) * T * h


def _split(rep: float, split: float, sh: Shard) -> float:
    """rep is replicated over TP unless SP; split is always divided by tp."""
    return (rep + split) / sh.tp if sh.sequence_parallel else rep + split / sh.tp


def _linear_in(nbytes: float, sh: Shard) -> float:
    return nbytes / 2 if sh.fp8 else nbytes


def attention_bytes(arch: ModelArch, sh: Shard) -> float:
    """Attention block (incl. its norm and dropout), Korthikanti's 11sbh + 5as^2b generalised."""
    T, h = sh.tokens, arch.hidden_size
    a = arch.num_attention_heads
    if arch.multi_latent_attention:
        return _mla_bytes(arch, sh)
    d, g = arch.head_dim, arch.query_groups
    rep = _linear_in(BF16 * T * h, sh) + MASK * T * h + _norm_input(T, h, sh)  # QKV in, mask, norm
    split: float = BF16 * T * (a + 2 * g) * d + _linear_in(BF16 * T * a * d, sh)
    if not sh.flash_attention and sh.recompute == "none":
        s = sh.seq_per_cp_rank
        split += 5 * a * s * s * sh.micro_batch_size
    return _split(rep, split, sh) + _gathered_input_extra(T, h, sh)


def _gathered_input_extra(T: int, h: int, sh: Shard) -> float:
    """What a column-parallel linear keeps beyond its SP shard when it saves the all-gathered input
    (`sp_keeps_gathered_input`: PyTorch DTensor SP, Aleph-Alpha's code): (1 - 1/tp) of it."""
    if not (sh.sequence_parallel and sh.sp_keeps_gathered_input):
        return 0.0
    return _linear_in(BF16 * T * h, sh) * (1 - 1 / sh.tp)


def _mla_bytes(arch: ModelArch, sh: Shard) -> float:
    """Multi-latent attention (DeepSeek-V2/V3): the latents, their norms, then full Q, K, V."""
    T, h, a = sh.tokens, arch.hidden_size, arch.num_attention_heads
    assert arch.kv_lora_rank and arch.qk_head_dim and arch.qk_pos_emb_head_dim and arch.v_head_dim
    r_kv, dqk, drope, dv = (
        arch.kv_lora_rank,
        arch.qk_head_dim,
        arch.qk_pos_emb_head_dim,
        arch.v_head_dim,
    )
    r_q = arch.q_lora_rank or 0
    # replicated: the block input (down projections' input), its norm input, the dropout mask,
    # the compressed q and kv latents with their norms (they are not TP-split in Megatron)
    rep = _linear_in(BF16 * T * h, sh) + _norm_input(T, h, sh) + MASK * T * h
    rep += BF16 * T * (2 * r_q + 2 * r_kv + drope)
    split = BF16 * T * a * (2 * (dqk + drope) + dv) + _linear_in(BF16 * T * a * dv, sh)
    return _split(rep, split, sh)


def mlp_bytes(arch: ModelArch, ffn: int, sh: Shard) -> float:
    """A dense MLP of width ffn with its norm and dropout: Korthikanti's 19sbh + 4sbh/2."""
    T, h = sh.tokens, arch.hidden_size
    glu = 2 if arch.gated_linear_unit else 1
    rep = _linear_in(BF16 * T * h, sh) + MASK * T * h + _norm_input(T, h, sh)  # fc1 in, mask, norm
    split = BF16 * T * ffn * glu + _linear_in(BF16 * T * ffn, sh)
    if glu == 2 and not sh.fused_swiglu:
        split += BF16 * T * ffn  # silu(x), saved by the multiplication with the gate
    return _split(rep, split, sh) + _gathered_input_extra(T, h, sh)


def moe_bytes(arch: ModelArch, sh: Shard) -> float:
    """A mixture-of-experts MLP: router, permuted tokens, the experts' MLPs, shared experts.

    Tokens are split by tp (MoE with TP requires SP). Each token goes to k experts, so a rank
    processes about k x tokens / tp token-expert pairs (times MOE_LOAD_IMBALANCE); expert-TP
    gathers them over etp ranks and splits the expert width by etp, which leaves the per-GPU
    F-sized activations unchanged and multiplies the h-sized ones by etp.
    """
    assert arch.num_moe_experts is not None
    T, h, E, k = sh.tokens, arch.hidden_size, arch.num_moe_experts, arch.moe_router_topk
    t = sh.tp
    local = T / t
    norm_and_router = _norm_input(1, h, sh) * local + MASK * local * h + 2 * FP32 * local * E
    pairs = k * local * MOE_LOAD_IMBALANCE
    glu = 2 if arch.gated_linear_unit else 1
    F = arch.expert_ffn
    # permuted input (kept for fc1's weight gradient) and the unpermute input, both h wide
    expert = pairs * sh.etp * (_linear_in(BF16 * h, sh) + BF16 * h)
    expert += pairs * (BF16 * F * glu + _linear_in(BF16 * F, sh))
    shared = 0.0
    if arch.moe_shared_expert_intermediate_size:
        Fs = arch.moe_shared_expert_intermediate_size
        shared = local * (_linear_in(BF16 * h, sh) + BF16 * Fs * glu + _linear_in(BF16 * Fs, sh))
    return norm_and_router + expert + shared


def layer_input_bytes(arch: ModelArch, sh: Shard) -> float:
    """What full recompute keeps of a layer: its input, 2sbh (split by tp under SP)."""
    nbytes = BF16 * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def per_op_bytes(arch: ModelArch, is_moe: bool, sh: Shard) -> float:
    """What per-op selective checkpointing keeps of a layer: its input, the attention kernel's
    output (bf16) and log-sum-exp (fp32 per head and token), half of its matmul outputs (M x N of
    each GEMM, `planner.model.flops.linear_gemms`; MoE experts at the busiest rank's load)."""
    t, a = sh.tokens, arch.num_attention_heads
    _, v_width = flops.attention_core_width(arch)
    attention_out = (BF16 * t * v_width + FP32 * t * a) / sh.tp
    # ep = 1 puts every expert on this rank with all k x t routed tokens: the same token-expert
    # pairs an expert-parallel rank receives, so the same bytes
    gemms = flops.linear_gemms(arch, t, sh.tp, 1, sh.etp, is_moe, MOE_LOAD_IMBALANCE)
    matmul_out = sum(BF16 * m * n * c for m, _, n, c in gemms)
    return layer_input_bytes(arch, sh) + attention_out + matmul_out / 2


def layer_bytes(arch: ModelArch, is_moe: bool, sh: Shard, recompute: bool = True) -> float:
    """Bytes one decoder layer keeps for one micro-batch. recompute=False ignores full and per-op
    recompute (the working set of the one layer being recomputed)."""
    if recompute and sh.recompute == "full":
        return layer_input_bytes(arch, sh)
    if recompute and sh.recompute == "per_op":
        return per_op_bytes(arch, is_moe, sh)
    mlp = moe_bytes(arch, sh) if is_moe else mlp_bytes(arch, arch.ffn_hidden_size, sh)
    return attention_bytes(arch, sh) + mlp


def embedding_bytes(arch: ModelArch, sh: Shard) -> float:
    """First stage, per micro-batch: token ids (int64) and the embedding output with its dropout
    mask (Megatron's 8sbp + sbhp term, and the output itself)."""
    T, h = sh.tokens, arch.hidden_size
    out = (BF16 + MASK) * T * h
    return 8 * T + (out / sh.tp if sh.sequence_parallel else out)


def logits_bytes(arch: ModelArch, padded_vocab: int, sh: Shard) -> float:
    """Last stage, for the micro-batch at the loss: final norm input, the bf16 logits and the fp32
    copy the vocab-parallel cross entropy keeps (Korthikanti's 4sbv/t term, plus the bf16 one).
    PyTorch's cross entropy on each rank's logits keeps PYTORCH_LOSS_BYTES_PER_LOGIT instead; with
    the logits gathered over TP every rank also holds the gathered logits' working set."""
    T, h = sh.tokens, arch.hidden_size
    norm = _norm_input(T, h, sh)
    norm = norm / sh.tp if sh.sequence_parallel else norm
    local = T * padded_vocab / sh.tp
    if sh.cross_entropy == "gathered":
        return norm + BF16 * local + GATHERED_LOSS_BYTES_PER_LOGIT * T * padded_vocab
    if sh.cross_entropy == "pytorch":
        return norm + PYTORCH_LOSS_BYTES_PER_LOGIT * local
    return norm + (BF16 + FP32) * local
