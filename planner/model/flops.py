"""FLOPs of one training step, counted the way Megatron-LM counts them.

Convention (benchmarks/data/conventions.md): a multiply-accumulate is 2 FLOPs; backward
costs twice the forward (dgrad + wgrad), so a step is 3 x forward. **Causal attention is NOT
halved** in the model-FLOP count (`CAUSAL_HALVED = False`): that is Megatron-Core r0.8.0, NeMo
24.07, Korthikanti eq.(7), torchtitan and the Hagemann/PaLM MFU, i.e. every source in the reference
set that reports MFU except Megatron-LM after 2025-03. The cost model's *time* uses the work a
flash-attention kernel really executes (half the score matrix under a causal mask), see
`planner.model.layer_time`; that choice is separate from this counting convention.

Forward FLOPs per token (h hidden, a heads, n_q query groups, d_h head dim, Q = a*d_h, F dense
ffn, F_e expert ffn, F_s shared-expert ffn, k top-k, V vocab, s sequence; φ = 3 matrices for a
gated (SwiGLU) MLP, 2 otherwise):

    attention projections (MHA/GQA)  2*[h*(Q + 2*n_q*d_h) + Q*h]
    attention projections (MLA)      2*[q + h*(r_kv + d_r) + r_kv*a*(d_qk + d_v) + a*d_v*h],
                                     q = r_q*(h + a*(d_qk + d_r)) with q-LoRA, else h*a*(d_qk + d_r)
    core attention (QK^T and AV)     2*s*a*d_qk' + 2*s*a*d_v  (= 4*s*Q for MHA/GQA; MLA:
                                     d_qk' = d_qk + d_r); not halved for the causal mask; a
                                     sliding-window layer's s is its window, min(s, w + 1)
                                     (Megatron's own count takes the whole sequence there,
                                     which put gpt-oss at 131k tokens above 100% MFU)
    dense MLP                        2*φ*h*F
    MoE MLP                          2*φ*h*(k*F_e + F_s)   (the router's 2*h*E is not counted,
                                                          as in Megatron)
    logits                           2*h*V
    MTP layer                        one decoder layer of the last layer's type + eh_proj 2*2h*h
                                     + logits 2*h*V (Megatron counts 6*(3h + 2h^2) for the
                                     norms and projection; the 3h norm term is left out here);
                                     a hybrid stack's MTP depth: its pattern's layers
    Mamba-2 mixer (hybrid M layer)   2h(2d + 2gn + H) + 7dn + 2dh (`planner.model.mamba`)
    gated delta net (linear-attention 2[h(2qk + 2vd + 2n_v) + w(2qk + vd) + 4 n_v d_v^2 + vd h]
    layer, hybrid G layer)           (`planner.model.gdn`)

A layer is the sum of its kind's blocks (`planner.inputs.hybrid.LayerKind`): a transformer layer
attention (or a gated delta net) and an MLP or MoE, a hybrid stack's layers one of a Mamba mixer,
attention, a gated delta net, an MLP or an MoE block.

Model FLOPs per step = 3 x forward x (B x s) tokens. This is ecosystem.md 1.5
(`num_floating_point_operations`) with the attention term not halved: for GQA + SwiGLU it is
conventions.md item 3 (Megatron-Core r0.8.0),
    12*B*s*L*h^2*[(1 + g/n + s/h)*(Q/h) + (F/h)*(3/2) + V/(2*L*h)],
and for MHA with a 4h GELU MLP it is Korthikanti et al. 2022 eq.(7),
    72*B*L*s*h^2*(1 + s/(6h) + V/(12*h*L)).

`linear_gemms` lists the (M, K, N) shapes those linear-layer FLOPs run as on one GPU under a
tensor / expert-parallel split; `planner.model.layer_time` turns shapes into time. The attention
projections are listed once, in `attention_gemms`: their forward FLOPs per token are 2 x K x N
summed over its shapes at one token and tp = 1 (2 x the weight count; `planner.model.params`
also counts biases and norms, which the FLOP convention leaves out).

Hardware FLOPs add recomputation (never counted in model FLOPs / MFU):
  - full: one more forward of every decoder layer (projections, core attention, MLP); the output
    layer is not recomputed (Megatron checkpoints transformer layers only). With a 4h MHA model this
    is SC21 eq.(3): 96*B*s*L*h^2*(1 + s/(6h) + V/(16*L*h)).
  - selective: one more forward of core attention, 4*s*Q per token per layer. (Korthikanti eq.(8)
    writes 1 + s/(3h), i.e. three forwards' worth; we count the one forward that is re-executed.)
    With Megatron's --recompute-modules, the forward of each module's GEMMs: mla_up_proj MLA's
    up-projections, mlp the dense MLPs, moe the MoE MLPs, shared_experts the shared experts
    (layernorm and moe_act re-run no matmul).
    PyTorch's per-op policy (torchtitan "op") instead re-executes every other linear-layer matmul:
    half the decoder's forward FLOPs without core attention.
"""

from __future__ import annotations

from functools import cache

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.model import mixers
from planner.model.gemm_shapes import (
    attention_gemms,
    linear_gemm_parts,
    linear_gemms,
    per_op_split,
)

CAUSAL_HALVED = False
"""Model FLOPs count the full s x s attention matrix (Megatron-Core r0.8 / Korthikanti eq.(7))."""

FWD_BWD = 3
"""Forward + backward = 3 forwards (dgrad and wgrad each cost one forward)."""


def mlp_matrices(arch: ModelArch) -> int:
    """φ: weight matrices in one MLP: 3 when gated (SwiGLU/GeGLU), 2 otherwise."""
    return 3 if arch.gated_linear_unit else 2


def attention_linear_forward(arch: ModelArch) -> float:
    """Forward FLOPs per token of one layer's attention projections (QKV/MLA + output):
    2 x K x N of each of `attention_gemms` at one token, tp = 1."""
    return sum(2.0 * k * n * c for _, k, n, c in attention_gemms(arch, 1.0, 1))


def attention_core_width(arch: ModelArch) -> tuple[int, int]:
    """(a x score head dim, a x value head dim): the widths of QK^T and AV per token."""
    a = arch.num_attention_heads
    if arch.multi_latent_attention:
        assert arch.qk_head_dim and arch.qk_pos_emb_head_dim and arch.v_head_dim
        return a * (arch.qk_head_dim + arch.qk_pos_emb_head_dim), a * arch.v_head_dim
    return a * arch.head_dim, a * arch.head_dim


def attention_core_forward(arch: ModelArch, seq_length: int) -> float:
    """Forward FLOPs per token of QK^T and AV at sequence length s (full matrix, not halved)."""
    qk, v = attention_core_width(arch)
    full = 2.0 * seq_length * (qk + v)
    return full / 2 if CAUSAL_HALVED else full


def dense_mlp_forward(arch: ModelArch) -> float:
    """Forward FLOPs per token of one dense MLP."""
    return 2.0 * mlp_matrices(arch) * arch.hidden_size * arch.ffn_hidden_size


def moe_mlp_forward(arch: ModelArch) -> float:
    """Forward FLOPs per token of one MoE MLP: top-k routed experts (at the latent width for a
    latent MoE, with its down- and up-projections) plus the shared experts."""
    shared = arch.moe_shared_expert_intermediate_size or 0
    h, routed = arch.hidden_size, arch.moe_router_topk * arch.expert_ffn
    latent = 2.0 * 2 * h * arch.moe_latent_size if arch.moe_latent_size else 0.0
    return 2.0 * mlp_matrices(arch) * (arch.expert_hidden * routed + h * shared) + latent


def attended(arch: ModelArch, seq_length: int, kind: LayerKind) -> int:
    """Keys a query of an attention layer of `kind` attends to: the sequence, or its sliding
    window."""
    if kind.window and arch.window_size is not None:
        return min(seq_length, arch.window_size + 1)
    return seq_length


def layer_forward(arch: ModelArch, seq_length: int, moe: bool | LayerKind) -> float:
    """Forward FLOPs per token of one decoder layer of a kind (or a transformer layer's MoE
    flag): its mixer and its channel block."""
    kind = layer_kind(moe)
    out = 0.0
    if kind.mixer == "attention":
        span = attended(arch, seq_length, kind)
        out += attention_linear_forward(arch) + attention_core_forward(arch, span)
    elif (linear := mixers.of(kind)) is not None:
        out += linear.mixer_forward(arch)
    if kind.ffn == "dense":
        out += dense_mlp_forward(arch)
    elif kind.ffn == "moe":
        out += moe_mlp_forward(arch)
    return out


def logits_forward(arch: ModelArch) -> float:
    """Forward FLOPs per token of the output layer (unpadded vocabulary)."""
    return 2.0 * arch.hidden_size * arch.vocab_size


def mtp_forward(arch: ModelArch, seq_length: int) -> float:
    """Forward FLOPs per token of the multi-token-prediction layers (0 without MTP)."""
    if arch.mtp_num_layers == 0:
        return 0.0
    h = arch.hidden_size
    one = sum(layer_forward(arch, seq_length, k) for k in arch.mtp_kinds) + 2.0 * 2 * h * h
    return arch.mtp_num_layers * (one + logits_forward(arch))


@cache
def decoder_forward(arch: ModelArch, seq_length: int) -> float:
    """Forward FLOPs per token of all decoder layers (no logits, no MTP). Cached: `cost.estimate`
    asks for it, through the model and hardware FLOPs, on every layout the search scores."""
    counts = arch.kind_counts((range(arch.num_layers),))
    kinds = zip(arch.kinds, counts, strict=True)
    return sum(n * layer_forward(arch, seq_length, k) for k, n in kinds if n)


@cache
def forward_per_token(arch: ModelArch, seq_length: int) -> float:
    """Forward FLOPs per token of the whole model: layers, logits, MTP (cached, as above)."""
    return decoder_forward(arch, seq_length) + logits_forward(arch) + mtp_forward(arch, seq_length)


def model_flops_per_token(arch: ModelArch, seq_length: int) -> float:
    """Model FLOPs (forward + backward, no recompute) per token."""
    return FWD_BWD * forward_per_token(arch, seq_length)


def model_flops(arch: ModelArch, seq_length: int, global_batch_size: int) -> float:
    """Model FLOPs of one step (global_batch_size sequences of seq_length tokens): for MFU."""
    return model_flops_per_token(arch, seq_length) * seq_length * global_batch_size


def recompute_flops_per_token(
    arch: ModelArch, seq_length: int, policy: str, modules: tuple[str, ...] = ("core_attn",)
) -> float:
    """Extra forward FLOPs per token re-executed by activation recomputation, for a recompute
    policy (`Job.recompute_policy`): none, per_op (the linear layers torchtitan's per-op policy
    re-runs, `per_op_split`), full, or Megatron's selective ("core_attn") with its `modules`
    (Megatron --recompute-modules): core_attn the core attention, mla_up_proj MLA's q and kv
    up-projections, mlp the dense layers' MLPs, moe the MoE layers' experts (top-k routed and
    shared), shared_experts their shared experts; layernorm and moe_act re-run no matmul."""
    n_attn, n_mlp, n_moe = _block_counts(arch)
    core = sum(
        attention_core_forward(arch, attended(arch, seq_length, k))
        for k in arch.layer_kinds
        if k.mixer == "attention"
    )
    if policy == "full":
        return decoder_forward(arch, seq_length)
    if policy == "per_op":
        return _per_op_rerun(arch)
    if policy != "core_attn":
        return 0.0
    shared = arch.moe_shared_expert_intermediate_size or 0
    per_module = {
        "core_attn": core,
        "mla_up_proj": n_attn * _mla_up_forward(arch),
        "mlp": n_mlp * dense_mlp_forward(arch),
        "moe": n_moe * moe_mlp_forward(arch) if n_moe else 0.0,
        "shared_experts": n_moe * 2.0 * mlp_matrices(arch) * arch.hidden_size * shared,
    }
    return sum(per_module.get(m, 0.0) for m in modules)


@cache
def _per_op_rerun(arch: ModelArch) -> float:
    """Forward FLOPs per token torchtitan's per-op checkpointing re-runs over all decoder layers
    (`per_op_split`); cached, as `decoder_forward`: `cost.estimate` asks on every layout."""
    counts = arch.kind_counts((range(arch.num_layers),))
    kinds = zip(arch.kinds, counts, strict=True)
    return sum(
        n * per_op_split(arch, linear_gemms(arch, 1.0, 1, 1, 1, k), 1, k)[1] for k, n in kinds if n
    )


@cache
def _block_counts(arch: ModelArch) -> tuple[int, int, int]:
    """Decoder layers with attention, with a dense MLP, with a mixture of experts."""
    kinds = arch.layer_kinds
    attn = sum(k.mixer == "attention" for k in kinds)
    return attn, sum(k.ffn == "dense" for k in kinds), sum(k.moe for k in kinds)


def _mla_up_forward(arch: ModelArch) -> float:
    """Forward FLOPs per token of MLA's up-projections (the "mla_up" GEMMs); 0 without MLA."""
    parts = linear_gemm_parts(arch, False)
    gemms = attention_gemms(arch, 1.0, 1)
    return sum(
        2.0 * k * n * c for (_, k, n, c), p in zip(gemms, parts, strict=False) if p == "mla_up"
    )


def hardware_flops(
    arch: ModelArch,
    seq_length: int,
    global_batch_size: int,
    policy: str,
    modules: tuple[str, ...] = ("core_attn",),
) -> float:
    """Model FLOPs plus the recomputed forward FLOPs of one step (for HFU)."""
    tokens = seq_length * global_batch_size
    extra = recompute_flops_per_token(arch, seq_length, policy, modules) * tokens
    return model_flops(arch, seq_length, global_batch_size) + extra
