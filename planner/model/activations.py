"""Activation memory of one decoder layer for one micro-batch, in bytes, on one GPU.

Derivation (Korthikanti et al. 2022, arXiv:2205.05198, section 4.1 and Table 2), generalised to
GQA, gated MLPs, MoE, MLA and context parallelism, with what Megatron-LM's Transformer Engine
layers save (NVIDIA/Megatron-LM d98e8a64, megatron/core/transformer/*; TransformerEngine
transformer_engine/pytorch/module/*). With 16-bit activations, T = s x b tokens, h hidden,
a heads, g query groups of d, F the MLP width, t = tp, per layer the backward pass needs:

    attention  input of the norm (TELayerNormColumnParallelLinear)   2Th    replicated w/o SP
               the norm output, the QKV GEMM's input                 2Th
               Q, K, V (flash attention saves them)                  2T(a + 2g)d       split by t
               softmax 2as^2b + its dropout mask as^2b + dropout output 2as^2b = 5as^2b
                                                              (0 with flash attention) split by t
               attention output (flash saves it; the output projection's input)  2Tad
               dropout mask of the residual add                      Th     replicated w/o SP
    MLP        input of the norm, the norm output (fc1's input)      2Th + 2Th
               fc1 output (2F wide when gated: the SwiGLU kernel's input)  2TF(1 + glu)
               activation output (input of fc2)                      2TF              split by t
               dropout mask                                          Th     replicated w/o SP

For MHA (g = a, ad = h) with F = 4h and no GLU this is Korthikanti's sbh(34 + 5as/h) exactly.
Sequence parallelism splits the replicated part by t too; context parallelism divides s by cp.
Dropout masks are counted even for models trained without dropout: a small over-estimate, on the
safe side.

FP8 (Transformer Engine): a linear layer saves its input cast to 8 bits (the norm output, fc2's
input: 1 byte instead of 2); the attention output stays in 16 bits for flash attention's backward
and the output projection saves an 8-bit copy beside it.

Megatron's selective recompute (TransformerConfig.recompute_modules, transformer_layer.py,
attention.py, multi_latent_attention.py, mlp.py, and the MoE layer and experts modules) drops:
  core_attn     the s^2 terms (nothing else with flash attention: its inputs are kept)
  mlp           a dense MLP whole but its input (checkpointed; MoE layers are not touched)
  moe           a MoE layer whole but its input, the pre-MLP norm output
  shared_experts the shared experts' insides (their input is the router's too)
  moe_act       the experts' activation output (fc2's input; discarded, recomputed from fc1's)
  layernorm     a separate norm's output (MLA's input norm, MoE's pre-MLP norm; the norms
                fused into QKV or fc1 have none to drop)
  mla_up_proj   MLA's up-projections and RoPE: Q, K, V are discarded and rebuilt from the
                latents before the attention backward
  gdn_norm_out  a gated delta net's gated output norm: its output and rstd and out_proj's input
                are discarded and rebuilt from the kernel's output and the gate
                (`planner.model.gdn.norm_out_widths`)
Full recompute keeps only the layer input, 2Th (split by t under SP).

PyTorch's per-op selective checkpointing (recompute policy "per_op", torchtitan's
`selective_ac_option = "op"`) keeps the layer input, the attention kernel's output and log-sum-exp,
and the 1st, 3rd, ... of the block's matmul outputs (its counter starts again at each block's
forward: `planner.model.gemm_shapes.per_op_split`; a Llama layer keeps wq, wv, w1 and w2).

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

from dataclasses import dataclass, field
from typing import Literal

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.inputs.layout import RecomputePolicy
from planner.inputs.plan_sections import DsaKernelBackend
from planner.model import dsa, flops, gdn, gemm_shapes, mixers
from planner.model.scores import score_bytes

BF16 = 2
FP32 = 4
LINEAR_INPUT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16}
"""Bytes per element a linear layer keeps of its input for the weight gradient, by the training's
precision: bf16; FP8 8 bits; NVFP4 4 bits with a 1-byte E4M3 scale per 16 (Transformer Engine
linear.py @d0067d0d keeps only the column-wise copy the wgrad GEMM reads:
`update_usage(rowwise_usage=False, columnwise_usage=True)`)."""
MASK = 1
"""Bytes per element of a dropout's saved mask (torch.bool)."""

UNFUSED_NORM_EXTRA = 6
"""Extra bytes per element a plain PyTorch RMSNorm/LayerNorm keeps over a fused kernel, which keeps
its bf16 input (2) and one statistic per token: the unfused one also keeps intermediate tensors
for autograd (a bf16 normalised tensor, 2; with a LLaMA-style fp32 upcast 4-8 more); the bf16
output counts as the next layer's input. Fitted (grid 4-10, picked 6) by benchmarks/fit_memory.py
on the Hagemann et al. rows without the fused kernel."""

MOE_LOAD_IMBALANCE = 1.2
"""Tokens the busiest expert-parallel rank receives, relative to the balanced share, under dropless
routing (Megatron's default, no capacity factor) with an auxiliary balancing loss: a planning
value, used for learned routing by the memory model (`routing_load.memory_load`). The step time
takes the expected busiest rank instead, which depends on the expert-parallel size and the experts
per rank and is this value at DeepSeek-V3's 32 ranks of 8 experts
(`routing_load.learned_routing_load`)."""

SELECTIVE_DEFAULT: frozenset[str] = frozenset({"core_attn"})
"""Megatron's --recompute-modules when none are given (TransformerConfig, TC:1940-1941)."""


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
    linear_bytes: float = BF16
    """`LINEAR_INPUT_BYTES` of the training's precision."""
    seq_per_cp_rank: int = 0
    """s / cp (for the s^2 attention-score term without flash attention)."""
    micro_batch_size: int = 1
    fused_norm: bool = True
    cross_entropy: Literal["fused", "pytorch", "gathered"] = "fused"
    compiled_loss: bool = False  # COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT more per logit
    loss_chunks: int = 1
    """torchtitan's ChunkedLossWrapper chunks (`TorchtitanSection.loss_chunks`; 1 = whole
    logits): `loss_activations.logits_bytes`."""
    attention_dropout: bool = True  # the model has attention dropout (`planner.model.scores`)
    hidden_dropout: bool = True
    """The model has hidden dropout: each residual add's and the embedding's dropout keeps its
    mask (`masks`)."""
    frozen: bool = False
    """The model's weights are frozen (`Job.frozen_model`): no linear layer keeps its input."""
    fused_swiglu: bool = True
    sp_keeps_gathered_input: bool = False
    modules: frozenset[str] = field(default=SELECTIVE_DEFAULT)
    """Megatron's recompute_modules, read when `recompute` is "core_attn" (Megatron selective)."""
    moe_load: float = MOE_LOAD_IMBALANCE
    """Token-expert pairs the busiest rank's experts receive, relative to the even share: what
    the layers keep for the backward."""
    moe_work_load: float | None = None
    """The same for the layer running, where its tensors differ from what it keeps (HybridEP's
    static budget beside Megatron's paged stash, `routing_load.memory_loads`); None = moe_load."""
    cuda_graphs: bool = False
    """The layers run as CUDA graphs: each keeps its graphs' static buffers (`graph_bytes`)."""
    offload: frozenset[str] = frozenset()
    """Fine-grained activation offloading's modules (`planner.model.fine_offload`)."""
    offload_fraction: float = 1.0
    """The share of the layers whose groups go to the host
    (`Layout.activation_offload_fraction`)."""
    dsa_kernels: DsaKernelBackend = "none"
    """DeepSeek sparse attention's kernels as they run (`planner.model.dsa.backend`)."""
    dsa_loss: dsa.LossMode = "off"
    """Its indexer loss (`planner.model.dsa.loss_mode`)."""
    dsa_heads: float = 0.0
    """The query heads its kernel computes a rank, padded (`planner.model.dsa.local_heads`);
    0 = unpadded."""
    seq_length: int = 0
    """The whole sequence: the keys DSA's queries see (context parallelism gathers them); 0 =
    seq_per_cp_rank."""

    @property
    def quantised(self) -> bool:
        """The linear layers keep FP8 / NVFP4 copies of their inputs."""
        return self.linear_bytes < BF16

    def drops(self, module: str) -> bool:
        """Whether Megatron's selective recompute discards `module`'s saved activations."""
        return self.recompute == "core_attn" and module in self.modules


def masks(T: float, h: int, sh: Shard) -> float:
    """One dropout's saved mask over T tokens of width h (`MASK` bytes per element), where the
    model has hidden dropout; none at Megatron's --hidden-dropout 0: its fused bias-dropout-add
    (megatron/core/fusions/fused_bias_dropout.py @d98e8a64, under torch.compile) and the
    embedding's torch.nn.Dropout call torch's dropout, which at p = 0 returns its input (ATen's
    `dropout` in eager mode; `torch._decomp.decompositions.dropout`, `input.clone()`, when
    compiled), so autograd keeps no mask."""
    return MASK * T * h if sh.hidden_dropout else 0.0


def norm_input(T: float, h: int, sh: Shard) -> float:
    """What one norm keeps of its input per micro-batch (before any TP/SP split)."""
    return (BF16 + (0 if sh.fused_norm else UNFUSED_NORM_EXTRA)) * T * h


def split(rep: float, part: float, sh: Shard) -> float:
    """rep is replicated over TP unless SP; part is always divided by tp."""
    return (rep + part) / sh.tp if sh.sequence_parallel else rep + part / sh.tp


def linear_in(nbytes: float, sh: Shard) -> float:
    """A linear layer's saved input: `Shard.linear_bytes` per element (8 bits under FP8, 4.5 under
    NVFP4); none when its weight is frozen, as only
    the weight gradient reads it (Transformer Engine linear.py @d0067d0d: backward_needs_input =
    is_grad_enabled and weight.requires_grad)."""
    if sh.frozen:
        return 0.0
    return nbytes * sh.linear_bytes / BF16


def _attention_out(nbytes: float, sh: Shard, gated: bool = False) -> float:
    """The attention output: flash attention keeps it in 16 bits, the output projection a
    quantised copy under FP8 / NVFP4; without flash only the projection keeps it. With the
    output gate (`ModelArch.attention_output_gate`; Megatron-LM d98e8a64 attention.py
    `_apply_output_gate`, compiled) the gating keeps the output and its gate (a contiguous copy
    of the projection's gate slice), and the projection its own gated input."""
    if gated:
        return 2 * nbytes + linear_in(nbytes, sh)
    if not sh.flash_attention:
        return linear_in(nbytes, sh)
    return nbytes + (linear_in(nbytes, sh) if sh.quantised else 0.0)


def attention_bytes(arch: ModelArch, sh: Shard) -> float:
    """Attention block (incl. its norm and dropout), Korthikanti's 11sbh + 5as^2b generalised."""
    if arch.has_dsa:
        return _dsa_bytes(arch, sh)
    if arch.multi_latent_attention:
        return _mla_bytes(arch, sh)
    T, h = sh.tokens, arch.hidden_size
    a, d, g = arch.num_attention_heads, arch.head_dim, arch.query_groups
    rep = norm_input(T, h, sh) + linear_in(BF16 * T * h, sh) + masks(T, h, sh)
    out = _attention_out(BF16 * T * a * d, sh, arch.attention_output_gate)
    part = BF16 * T * (a + 2 * g) * d + out + scores(arch, sh)
    return split(rep, part, sh) + _gathered_input_extra(T, h, sh)


def _gathered_input_extra(T: int, h: int, sh: Shard) -> float:
    """What a column-parallel linear keeps beyond its SP shard when it saves the all-gathered input
    (`sp_keeps_gathered_input`: PyTorch DTensor SP, Aleph-Alpha's code): (1 - 1/tp) of it."""
    if not (sh.sequence_parallel and sh.sp_keeps_gathered_input):
        return 0.0
    return linear_in(BF16 * T * h, sh) * (1 - 1 / sh.tp)


def _dsa_bytes(arch: ModelArch, sh: Shard) -> float:
    """Multi-latent attention run as DeepSeek sparse attention (`planner.model.dsa`): the block's
    norms and latents as MLA's, q_up's input (kv_up never runs as a layer), the output
    projection's input, and what the absorbed attention and its indexer keep
    (`dsa.block_bytes`)."""
    T, h, a = sh.tokens, arch.hidden_size, arch.num_attention_heads
    assert arch.kv_lora_rank and arch.qk_pos_emb_head_dim and arch.v_head_dim
    r_q = arch.q_lora_rank or 0
    rep = norm_input(T, h, sh) + masks(T, h, sh)
    rep += 0.0 if sh.drops("layernorm") else BF16 * T * h
    rep += BF16 * T * (r_q + arch.kv_lora_rank + arch.qk_pos_emb_head_dim)  # the latents
    if not sh.drops("mla_up_proj"):
        rep += linear_in(BF16 * T * r_q, sh)
    out = split(rep, _attention_out(BF16 * T * a * arch.v_head_dim, sh), sh)
    part, whole = dsa.block_bytes(arch, sh)
    return out + part + whole


def _mla_bytes(arch: ModelArch, sh: Shard) -> float:
    """Multi-latent attention (DeepSeek-V2/V3), Megatron's MLASelfAttention with TE: a separate
    input norm whose output both down-projections save (one 16-bit tensor, or an 8-bit copy each
    under FP8: 2Th either way; none with the layernorm module); the q and kv latents (2 r_q and
    2 (r_kv + rope dim), not TP-split) and their fused norms' outputs; the query and key
    (a (qk + rope) each) and value (a v) that flash attention keeps (none with mla_up_proj: they
    are rebuilt from the latents); the attention output."""
    T, h, a = sh.tokens, arch.hidden_size, arch.num_attention_heads
    assert arch.kv_lora_rank and arch.qk_head_dim and arch.qk_pos_emb_head_dim and arch.v_head_dim
    r_kv, dqk, drope, dv = (
        arch.kv_lora_rank,
        arch.qk_head_dim,
        arch.qk_pos_emb_head_dim,
        arch.v_head_dim,
    )
    r_q = arch.q_lora_rank or 0
    norm_out = 0.0 if sh.drops("layernorm") else BF16 * T * h
    rep = norm_input(T, h, sh) + norm_out + masks(T, h, sh)
    rep += BF16 * T * (r_q + r_kv + drope)  # the latents
    if not sh.drops("mla_up_proj"):
        rep += linear_in(BF16 * T * (r_q + r_kv), sh)  # their norms' outputs, the up-projections'
    part = _attention_out(BF16 * T * a * dv, sh) + scores(arch, sh)
    if not sh.drops("mla_up_proj"):
        part += BF16 * T * a * (2 * (dqk + drope) + dv)
    return split(rep, part, sh)


def scores(arch: ModelArch, sh: Shard) -> float:
    """The s^2 scores of attention without a fused kernel (`planner.model.scores`: TE's fused or
    torch softmax, and the dropout's where the model has it), dropped by the core_attn module; 0
    with flash attention."""
    if sh.flash_attention or sh.drops("core_attn"):
        return 0.0
    s = sh.seq_per_cp_rank
    return score_bytes(arch.num_attention_heads, s, sh.micro_batch_size, sh.attention_dropout)


def mlp_bytes(arch: ModelArch, ffn: int, sh: Shard) -> float:
    """A dense MLP of width ffn with its norm and dropout: Korthikanti's 19sbh + 4sbh/2. With the
    mlp module recomputed, its input (the residual stream) and the dropout mask."""
    T, h = sh.tokens, arch.hidden_size
    if sh.drops("mlp"):
        return split(norm_input(T, h, sh) + masks(T, h, sh), 0.0, sh)
    glu = 2 if arch.gated_linear_unit else 1
    rep = norm_input(T, h, sh) + linear_in(BF16 * T * h, sh) + masks(T, h, sh)
    part = BF16 * T * ffn * glu + linear_in(BF16 * T * ffn, sh)
    if glu == 2 and not sh.fused_swiglu:
        part += BF16 * T * ffn  # silu(x), saved by the multiplication with the gate
    return split(rep, part, sh) + _gathered_input_extra(T, h, sh)


def linear_mixer_bytes(arch: ModelArch, sh: Shard, linear: mixers.LinearMixer) -> float:
    """A linear-time mixer's block (a hybrid stack's M or G layer, a transformer layer's gated
    delta net): the norm fused into in_proj (its input, and its output that in_proj keeps), what
    the mixer's training path keeps (`saved_widths`: the Mamba-2 mixer's zxBCdt, the scan's
    output, the gated norm's input and rstd, out_proj's input; the gated delta net's,
    `planner.model.gdn`) and the dropout mask."""
    T, h = sh.tokens, arch.hidden_size
    rep = norm_input(T, h, sh) + linear_in(BF16 * T * h, sh) + masks(T, h, sh)
    width, out_in = linear.saved_widths(arch)
    if linear is gdn and sh.drops("gdn_norm_out"):
        dropped, out_in = gdn.norm_out_widths(arch), 0.0
        width -= dropped
    part = T * (width - out_in) + linear_in(T * out_in, sh)
    return split(rep, part, sh) + _gathered_input_extra(T, h, sh)


def layer_input_bytes(arch: ModelArch, sh: Shard) -> float:
    """What full recompute keeps of a layer: its input, 2sbh (split by tp under SP)."""
    nbytes = BF16 * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def per_op_bytes(arch: ModelArch, is_moe: bool | LayerKind, sh: Shard) -> float:
    """What per-op selective checkpointing keeps of a layer: its input, the attention kernel's
    output (bf16) and log-sum-exp (fp32 per head and token), and the matmul outputs its policy
    saves (`planner.model.gemm_shapes.per_op_split`: every other one; MoE experts at the busiest
    rank's load)."""
    t, a = sh.tokens, arch.num_attention_heads
    _, v_width = flops.attention_core_width(arch)
    attention_out = 0.0
    if layer_kind(is_moe).mixer == "attention":
        attention_out = (BF16 * t * v_width + FP32 * t * a) / sh.tp
    # ep = 1 puts every expert on this rank with all k x t routed tokens: the same token-expert
    # pairs an expert-parallel rank receives, so the same bytes
    gemms = gemm_shapes.linear_gemms(arch, t, sh.tp, 1, sh.etp, is_moe, sh.moe_load)
    saved, _, _ = gemm_shapes.per_op_split(arch, gemms, sh.tp, is_moe)
    return layer_input_bytes(arch, sh) + attention_out + BF16 * saved


GRAPH_STATIC_TENSORS = 2
"""Layer-input-sized bf16 buffers a graphed layer keeps per micro-batch in flight beyond its
eager activations (Megatron-LM d98e8a64 megatron/core/transformer/cuda_graphs.py): the backward
graph's static gradient input and output (`static_grad_outputs`, `static_grad_inputs`, one set per
graph runner, i.e. per layer and, with pipelining, per micro-batch in flight); the forward graph's
static input and output alias the saved activations (Transformer Engine's weak references let a
graph's output buffer be the next layer's input). An upper bound: buffers the shared mempool frees
between graphs are counted too."""


def graph_bytes(arch: ModelArch, sh: Shard) -> float:
    """CUDA graphs' static buffers of one layer per micro-batch (GRAPH_STATIC_TENSORS layer
    inputs, split by tp under sequence parallelism); 0 when the layers run eagerly."""
    if not sh.cuda_graphs:
        return 0.0
    nbytes = GRAPH_STATIC_TENSORS * BF16 * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def layer_bytes(
    arch: ModelArch, is_moe: bool | LayerKind, sh: Shard, recompute: bool = True
) -> float:
    """Bytes one decoder layer of a kind (or a transformer layer's MoE flag) keeps for one
    micro-batch: its blocks' (with CUDA graphs, their static buffers, `graph_bytes`).
    recompute=False ignores full and per-op recompute (the working set of the one layer being
    recomputed)."""
    if recompute and sh.recompute == "full":
        return layer_input_bytes(arch, sh) + graph_bytes(arch, sh)
    if recompute and sh.recompute == "per_op":
        return per_op_bytes(arch, is_moe, sh) + graph_bytes(arch, sh)
    kind = layer_kind(is_moe)
    out = graph_bytes(arch, sh)
    if kind.mixer == "attention":
        out += attention_bytes(arch, sh)
    elif (linear := mixers.of(kind)) is not None:
        out += linear_mixer_bytes(arch, sh, linear)
    if kind.ffn == "dense":
        out += mlp_bytes(arch, arch.ffn_hidden_size, sh)
    elif kind.moe:
        out += moe_bytes(arch, sh)
    return out


def embedding_bytes(arch: ModelArch, sh: Shard) -> float:
    """First stage, per micro-batch: the token ids (int64) the embedding's backward needs and the
    dropout mask after it (Megatron's 8sbp + sbhp term). The embedding output itself is the first
    layer's input, counted there."""
    T, h = sh.tokens, arch.hidden_size
    mask = masks(T, h, sh)
    return 8 * T + (mask / sh.tp if sh.sequence_parallel else mask)


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
