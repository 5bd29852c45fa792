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
and the output projection saves an 8-bit copy beside it under delayed scaling, the 16-bit output
itself under the other recipes and NVFP4 (`Shard.proj_keeps_original`). FP8 attention keeps Q,
K, V in 8 bits (`qkv_bytes`), and its output too under delayed scaling (`_attention_out`).

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

fp32 training (`planner.model.fp32`): every 2 above is 4, the linear layers' inputs too, and the
attention is unfused, its softmax output kept in fp32 (4 per score; with dropout 1 + 4 more);
the masks stay 1 byte and what bf16 keeps in fp32 stays 4.

PyTorch's per-op selective checkpointing (recompute policy "per_op", torchtitan's
`selective_ac_option = "op"`) keeps the layer input, the attention kernel's output and log-sum-exp,
and the 1st, 3rd, ... of the block's matmul outputs (its counter starts again at each block's
forward: `planner.model.gemm_shapes.per_op_split`; a Llama layer keeps wq, wv, w1 and w2).

MoE layers: `planner.model.moe_activations`. The split of a layer over a GPU (`Shard`) and the
byte rules every block shares (masks, norm inputs, quantised linear inputs):
`planner.model.shard`."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.model import dsa, flops, fp32, gdn, gemm_shapes, mixers, per_op_saved
from planner.model.fp32 import norm_in, widen, word
from planner.model.graph_buffers import graph_bytes
from planner.model.moe_activations import moe_bytes
from planner.model.scores import score_bytes
from planner.model.shard import (
    BF16,
    FP32,
    Shard,
    linear_in,
    masks,
    norm_input,
    split,
)

MXFP8_ATTENTION_QKV_BYTES = 2 * (1.0 + 1.0 / 32)
"""Bytes per element the fused MXFP8 attention keeps of Q, K and V: both copies, row-wise and
column-wise (Transformer Engine d0067d0d dot_product_attention/utils.py:2720-2721 asks its QKV
quantiser for both; `combine_and_quantize` trims them only for a forward-only or a
backward-only use, :3059-3072, and FusedAttnFunc asks for both, backends.py:1478-1484), each
with one E8M0 scale per 32 values (tensor/mxfp8_tensor.py `get_scale_shape`): 2 + 2/32, more than
bf16's 2. Delayed and current scaling keep one 8-bit copy with a per-tensor scale: 1."""


def qkv_bytes(sh: Shard) -> float:
    """Bytes per element the attention keeps of Q, K and V: the fused FP8 attention's
    (`Shard.attention_fp8`, `MXFP8_ATTENTION_QKV_BYTES`), but with the core_attn module
    recomputed, whose checkpoint keeps its 16-bit inputs (`word`)."""
    if not sh.attention_fp8 or sh.drops("core_attn"):
        return word(sh)
    return MXFP8_ATTENTION_QKV_BYTES if sh.attention_fp8 == "mxfp8" else 1.0


def _proj_input(nbytes: float, sh: Shard) -> float:
    """What the output projection keeps of its input, nbytes in 16 bits: a quantised copy
    (`linear_in`), or the 16-bit input itself under `Shard.proj_keeps_original`; none when its
    weight is frozen (Transformer Engine saves the input only when backward_needs_input,
    d0067d0d linear.py:619-621)."""
    if sh.proj_keeps_original and not sh.frozen:
        return nbytes
    return linear_in(nbytes, sh)


def _attention_out(nbytes: float, sh: Shard, gated: bool = False) -> float:
    """The attention output: flash attention keeps it in 16 bits (8 under the delayed FP8
    attention, which saves its FP8 output, Transformer Engine d0067d0d backends.py:1586-1587,
    and hands the projection a dequantised copy, :1557-1559), the output projection what
    `_proj_input` says; the same tensor where both keep the kernel's 16-bit output (bf16, or
    `Shard.proj_keeps_original`), counted once. Without flash only the projection keeps it, and
    so with the core_attn module recomputed (its checkpoint keeps the inputs, q, k and v, not
    what the kernel saved; Megatron-LM d98e8a64 TransformerConfig warns it is not needed for
    fused attention). With the output gate (`ModelArch.attention_output_gate`; attention.py
    `_apply_output_gate`, compiled) the gating keeps the output and its gate (a contiguous copy
    of the projection's gate slice), and the projection its own gated input. Under TE's
    all-to-all context parallelism the kernel keeps its own output, head-sharded, and hands the
    projection the new tensor the all-to-all returns (`Shard.cp_out_part`), but not where the
    core attention is recomputed (its checkpoint saves nothing of that function)."""
    kernel = sh.flash_attention and not sh.drops("core_attn")
    proj = _proj_input(nbytes, sh)
    if not kernel:
        return 2 * widen(nbytes, sh) + proj if gated else proj
    kept = nbytes / 2 if sh.attention_fp8 == "delayed" else nbytes
    shared = not sh.cp_out_part and sh.attention_fp8 != "delayed"
    if gated:
        return 2 * widen(nbytes, sh) + proj + (0.0 if shared else kept)
    if shared and (sh.proj_keeps_original or not sh.quantised):
        return kept
    return kept + proj


def attention_bytes(arch: ModelArch, sh: Shard) -> float:
    """Attention block (incl. its norm and dropout), Korthikanti's 11sbh + 5as^2b generalised."""
    if arch.has_dsa:
        return _dsa_bytes(arch, sh)
    if arch.multi_latent_attention:
        return _mla_bytes(arch, sh)
    T, h = sh.tokens, arch.hidden_size
    a, d, g = arch.num_attention_heads, arch.head_dim, arch.query_groups
    rep = norm_in(T, h, sh) + linear_in(BF16 * T * h, sh) + masks(T, h, sh)
    out = _attention_out(BF16 * T * a * d, sh, arch.attention_output_gate)
    part = qkv_bytes(sh) * T * (a + 2 * g) * d + out + scores(arch, sh) + _qk_norm_bytes(arch, sh)
    part += _sink_rescale_bytes(arch, sh)
    return split(rep, part, sh) + _gathered_input_extra(T, h, sh)


def _sink_rescale_bytes(arch: ModelArch, sh: Shard) -> float:
    """What torchtitan's attention sinks keep beyond the kernel's output (`Shard.torchtitan`;
    Megatron's sinks are the fused kernel's softmax_offset):
    e347b1e5 models/gpt_oss/model/model.py:241-255 rescales FlexAttention's output by
    sigmoid(lse - sinks) and makes it contiguous for wo, so wo keeps its own 16-bit copy beside
    the output the kernel saved (with a quantised wo, its copy is `_attention_out`'s already);
    eager, the product also keeps sigmoid's fp32 output and its 16-bit cast, a per head: 4a + 2a.
    Compiled (`Shard.fused_norm`, compile's fusion of the elementwise ops in torchtitan) the
    scale is recomputed from the saved log-sum-exp, as a fused SwiGLU's activation is."""
    if arch.softmax_type != "learnable" or not sh.torchtitan:
        return 0.0
    T, a = sh.tokens, arch.num_attention_heads
    copy = 0.0 if sh.quantised else widen(BF16 * T * a * arch.head_dim, sh)
    return copy + (0.0 if sh.fused_norm else (FP32 + word(sh)) * T * a)


def _qk_norm_bytes(arch: ModelArch, sh: Shard) -> float:
    """What the query and key norms keep (`ModelArch.qk_layernorm`, outside MLA): Megatron-LM
    d98e8a64 builds them as TENorm (gpt_layer_specs.py:318, 327-332) on the split query and key
    (attention.py:1931-1935), and Transformer Engine's RMSNorm saves a contiguous copy of its input
    with one fp32 rstd per row (d0067d0d ops/basic/rmsnorm.py:189, :209): (a + g) heads of d
    values and 4 bytes each, beside the rotated q and k the attention kernel keeps. Kept under
    selective recompute (the norms are outside core attention). `ModelArch.qk_l2_norm`'s L2Norm
    (Megatron-LM torch_norm.py:94-106) keeps the same under jit_fuser, torch.compile by default
    (jit.py:16-33: its 16-bit input and an fp32 rsqrt per row; eager, x.float(), twice the input),
    on every layer (gpt_layer_specs.py:148-153, attention.py:1709-1711: HF's Llama 4 norms only its
    RoPE layers, a code planner does not model; torchtitan's none), in place of --qk-layernorm's
    norm where both are set (gpt_layer_specs.py:149)."""
    rows = sh.tokens * (arch.num_attention_heads + arch.query_groups)
    return rows * (word(sh) * arch.head_dim + FP32) * (arch.qk_l2_norm or arch.qk_layernorm)


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
    norm_out = 0.0 if sh.drops("layernorm") else word(sh) * T * h
    rep = norm_in(T, h, sh) + norm_out + masks(T, h, sh)
    rep += word(sh) * T * (r_q + r_kv + drope)  # the latents
    if not sh.drops("mla_up_proj"):
        rep += linear_in(BF16 * T * (r_q + r_kv), sh)  # their norms' outputs, the up-projections'
    part = _attention_out(BF16 * T * a * dv, sh) + scores(arch, sh)
    if not sh.drops("mla_up_proj"):
        part += qkv_bytes(sh) * T * a * (2 * (dqk + drope) + dv)
    return split(rep, part, sh)


def scores(arch: ModelArch, sh: Shard) -> float:
    """The s^2 scores of attention without a fused kernel (`planner.model.scores`: TE's fused or
    torch softmax, and the dropout's where the model has it), dropped by the core_attn module;
    with flash attention its softmax statistics, one fp32 per head and token (TE d0067d0d
    dot_product_attention/backends.py:1655-1664 saves aux_ctx_tensors, whose Stats are fp32
    [b, h, sq, 1], cpp_extensions/fused_attn.py:406-407), as `per_op_bytes` counts them."""
    if sh.drops("core_attn"):
        return 0.0
    if sh.flash_attention:
        return FP32 * sh.tokens * arch.num_attention_heads
    s, heads, b = sh.seq_per_cp_rank, arch.num_attention_heads, sh.micro_batch_size
    if word(sh) == FP32:  # fp32's torch softmax (`fp32.SCORE_BYTES`)
        return fp32.score_bytes(heads, s, b, sh.attention_dropout)
    kernel = (sh.unfused_attention, sh.masked_softmax_fusion, sh.tp)
    return score_bytes(heads, s, b, sh.attention_dropout, *kernel)


def mlp_bytes(arch: ModelArch, ffn: int, sh: Shard) -> float:
    """A dense MLP of width ffn with its norm and dropout: Korthikanti's 19sbh + 4sbh/2. With the
    mlp module recomputed, its input (the residual stream) and the dropout mask."""
    T, h = sh.tokens, arch.hidden_size
    if sh.drops("mlp"):
        return split(norm_in(T, h, sh) + masks(T, h, sh), 0.0, sh)
    glu = 2 if arch.gated_linear_unit else 1
    rep = norm_in(T, h, sh) + linear_in(BF16 * T * h, sh) + masks(T, h, sh)
    part = word(sh) * T * ffn * glu + linear_in(BF16 * T * ffn, sh)
    if glu == 2 and not sh.fused_swiglu:
        part += word(sh) * T * ffn  # silu(x), saved by the multiplication with the gate
    return split(rep, part, sh) + _gathered_input_extra(T, h, sh)


def linear_mixer_bytes(arch: ModelArch, sh: Shard, linear: mixers.LinearMixer) -> float:
    """A linear-time mixer's block (a hybrid stack's M or G layer, a transformer layer's gated
    delta net): the norm fused into in_proj (its input, and its output that in_proj keeps), what
    the mixer's training path keeps (`saved_widths`: the Mamba-2 mixer's zxBCdt, the scan's
    output, the gated norm's input and rstd, out_proj's input; the gated delta net's,
    `planner.model.gdn`), widened in fp32 training but for what is fp32 anyway (`fp32_widths`),
    and the dropout mask. Under CP the Mamba-2 mixer's B and C are as wide as
    `mamba.groups` makes them (`cp_of`)."""
    T, h = sh.tokens, arch.hidden_size
    rep = norm_in(T, h, sh) + linear_in(BF16 * T * h, sh) + masks(T, h, sh)
    width, out_in = linear.saved_widths(arch, sh.tp, cp_of(sh))
    fixed = linear.fp32_widths(arch)
    if linear is gdn and sh.drops("gdn_norm_out"):
        dropped, out_in = gdn.norm_out_widths(arch), 0.0
        width -= dropped
        fixed = gdn.fp32_widths(arch, norm_out=False)
    part = T * (widen(width - out_in - fixed, sh) + fixed) + linear_in(T * out_in, sh)
    return split(rep, part, sh) + _gathered_input_extra(T, h, sh)


def cp_of(sh: Shard) -> int:
    """The context-parallel size a Shard splits the sequence over (`Shard.seq_length` / its
    seq_per_cp_rank; 1 where it does not say)."""
    if not sh.seq_length or not sh.seq_per_cp_rank:
        return 1
    return max(1, sh.seq_length // sh.seq_per_cp_rank)


def layer_input_bytes(arch: ModelArch, sh: Shard) -> float:
    """What full recompute keeps of a layer: its input, 2sbh (split by tp under SP)."""
    nbytes = word(sh) * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def per_op_bytes(arch: ModelArch, is_moe: bool | LayerKind, sh: Shard) -> float:
    """What per-op selective checkpointing keeps of a layer: its input, the attention kernel's
    output (bf16) and log-sum-exp (fp32 per head and token), and the matmul outputs its policy
    saves (`planner.model.gemm_shapes.per_op_split`: every other aten.mm; none of the routed
    experts' grouped GEMMs), and under TP the reduce-scatter outputs its policy saves
    (`per_op_saved.reduce_scatter_bytes`; the all-to-alls' under EP: `stage_activations`)."""
    t, a = sh.tokens, arch.num_attention_heads
    _, v_width = flops.attention_core_width(arch)
    attention_out = 0.0
    if layer_kind(is_moe).mixer == "attention":
        attention_out = (word(sh) * t * v_width + FP32 * t * a) / sh.tp
    # ep = 1 puts every expert on this rank with all k x t routed tokens: the same token-expert
    # pairs an expert-parallel rank receives, so the same bytes
    gemms = gemm_shapes.linear_gemms(arch, t, sh.tp, 1, sh.etp, is_moe, sh.moe_load)
    saved, _, _ = gemm_shapes.per_op_split(arch, gemms, sh.tp, is_moe)
    scattered = per_op_saved.reduce_scatter_bytes(arch, layer_kind(is_moe), sh)
    return layer_input_bytes(arch, sh) + attention_out + word(sh) * saved + scattered


def layer_bytes(
    arch: ModelArch, is_moe: bool | LayerKind, sh: Shard, recompute: bool = True
) -> float:
    """Bytes one decoder layer of a kind (or a transformer layer's MoE flag) keeps for one
    micro-batch: its blocks' (with CUDA graphs, their static buffers, `graph_bytes`, and a MoE
    layer's router graph's outputs, `Shard.router_graph_outputs`). recompute=False ignores full
    and per-op recompute (the working set of the one layer being recomputed)."""
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
        out += moe_bytes(arch, sh) + sh.router_graph_outputs
    return out


def embedding_bytes(arch: ModelArch, sh: Shard) -> float:
    """First stage, per micro-batch: the token ids (int64) the embedding's backward needs and the
    dropout mask after it (Megatron's 8sbp + sbhp term). The embedding output itself is the first
    layer's input, counted there."""
    T, h = sh.tokens, arch.hidden_size
    mask = masks(T, h, sh)
    return 8 * T + (mask / sh.tp if sh.sequence_parallel else mask)
