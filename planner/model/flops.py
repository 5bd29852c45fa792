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
                                     d_qk' = d_qk + d_r); not halved for the causal mask
    dense MLP                        2*φ*h*F
    MoE MLP                          2*φ*h*(k*F_e + F_s)   (the router's 2*h*E is not counted,
                                                          as in Megatron)
    logits                           2*h*V
    MTP layer                        one decoder layer of the last layer's type + eh_proj 2*2h*h
                                     + logits 2*h*V (Megatron counts 6*(3h + 2h^2) for the
                                     norms and projection; the 3h norm term is left out here);
                                     a hybrid stack's MTP depth: its pattern's layers
    Mamba-2 mixer (hybrid M layer)   2h(2d + 2gn + H) + 7dn + 2dh (`planner.model.mamba`)

A layer is the sum of its kind's blocks (`planner.inputs.hybrid.LayerKind`): a transformer layer
attention and an MLP or MoE, a hybrid stack's layers one of a Mamba mixer, attention, an MLP or
an MoE block.

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
from planner.model import mamba

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


def layer_forward(arch: ModelArch, seq_length: int, moe: bool | LayerKind) -> float:
    """Forward FLOPs per token of one decoder layer of a kind (or a transformer layer's MoE
    flag): its mixer and its channel block."""
    kind = layer_kind(moe)
    out = 0.0
    if kind.mixer == "attention":
        out += attention_linear_forward(arch) + attention_core_forward(arch, seq_length)
    elif kind.mixer == "mamba":
        out += mamba.mixer_forward(arch)
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
    core = n_attn * attention_core_forward(arch, seq_length)
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


def kv_heads(arch: ModelArch, tp: int) -> float:
    """K/V heads on one TP rank: replicated when tp exceeds the query groups (at least one)."""
    return max(arch.query_groups / tp, 1)


def attention_gemms(
    arch: ModelArch, t: float, tp: int, latents_on_shard: bool = False
) -> list[tuple[float, float, float, float]]:
    """(M, K, N, count) of one layer's forward attention projections on one GPU, for t tokens.

    TP slices the weights' output (column-parallel) or input (row-parallel) dimension; KV heads
    are replicated when tp exceeds num_query_groups; MLA's down-projections are not split: whole
    weights on every TP rank, run on the whole t tokens, or with `latents_on_shard` on the rank's
    t / tp (Megatron-Core's MLA under sequence parallelism: Transformer Engine's "duplicated"
    linears read the layer's sequence shard, and the latents are gathered for the column-parallel
    up-projections: multi_latent_attention.py d98e8a64 `_qkv_down_projection`)."""
    h, a = arch.hidden_size, arch.num_attention_heads
    if not arch.multi_latent_attention:
        d = arch.head_dim
        kv = kv_heads(arch, tp)
        return [(t, h, a * d / tp + 2 * kv * d, 1), (t, a * d / tp, h, 1)]
    # the model validator guarantees these are set when multi_latent_attention is on
    assert arch.kv_lora_rank and arch.qk_head_dim and arch.v_head_dim
    assert arch.qk_pos_emb_head_dim
    d_qk, d_r, d_v, r_kv = (
        arch.qk_head_dim,
        arch.qk_pos_emb_head_dim,
        arch.v_head_dim,
        arch.kv_lora_rank,
    )
    g: list[tuple[float, float, float, float]] = []
    down = t / tp if latents_on_shard else t
    if arch.q_lora_rank:
        g.append((down, h, arch.q_lora_rank, 1))
        g.append((t, arch.q_lora_rank, a * (d_qk + d_r) / tp, 1))
    else:
        g.append((t, h, a * (d_qk + d_r) / tp, 1))
    g.append((down, h, r_kv + d_r, 1))
    g.append((t, r_kv, a * (d_qk + d_v) / tp, 1))
    g.append((t, a * d_v / tp, h, 1))
    return g


GemmPart = str
"""What a linear GEMM belongs to (`linear_gemm_parts`): "attn" (attention projections), "mla_up"
(MLA's q and kv up-projections), "mamba" (a Mamba mixer's in_proj and out_proj), "mlp" (a dense
MLP), "expert" (routed experts, one grouped GEMM over the rank's local experts), "latent" (a
latent MoE's down- and up-projections), "shared" (shared experts)."""


def linear_gemm_parts(arch: ModelArch, moe: bool | LayerKind) -> tuple[GemmPart, ...]:
    """What each of `linear_gemms`' entries is, in its order (what selective recompute modules
    re-run: mla_up_proj the "mla_up" GEMMs, mlp "mlp", moe "expert" and "shared",
    shared_experts "shared")."""
    kind = layer_kind(moe)
    mixer: tuple[GemmPart, ...] = ()
    if kind.mixer == "mamba":
        mixer = ("mamba", "mamba")
    elif kind.mixer == "attention" and arch.multi_latent_attention:
        q = ("attn", "mla_up") if arch.q_lora_rank else ("attn",)
        mixer = (*q, "attn", "mla_up", "attn")
    elif kind.mixer == "attention":
        mixer = ("attn", "attn")
    if kind.ffn == "dense":
        return (*mixer, "mlp", "mlp")
    if kind.ffn is None:
        return mixer
    shared = ("shared", "shared") if arch.moe_shared_expert_intermediate_size else ()
    latent = ("latent", "latent") if arch.moe_latent_size else ()
    return (*mixer, "expert", "expert", *latent, *shared)


def mla_gathered_width(arch: ModelArch) -> float:
    """The width of what Megatron-Core's MLA gathers over TP before its column-parallel
    projections: the q latent (or, without one, the h-wide input of the whole query projection)
    and the kv latent with the shared rope key (multi_latent_attention.py d98e8a64: the
    up-projections' sequence-parallel gather, and k_pos_emb's own)."""
    assert arch.kv_lora_rank and arch.qk_pos_emb_head_dim
    return (arch.q_lora_rank or arch.hidden_size) + arch.kv_lora_rank + arch.qk_pos_emb_head_dim


def _mixer_gemms(arch: ModelArch, kind: LayerKind) -> int:
    """How many of a layer's `linear_gemms` its mixer's projections are (they come first)."""
    return {"attention": len(attention_gemms(arch, 1.0, 1)), "mamba": 2, None: 0}[kind.mixer]


def gemm_blocks(arch: ModelArch, moe: bool | LayerKind) -> tuple[tuple[str, range], ...]:
    """The blocks of a layer's `linear_gemms`, in order, each with the indices of its entries:
    the mixer ("attention" or "mamba"), then the channel block ("dense" or "moe"). A block's
    column-parallel GEMMs read the h-wide input; its last is the row-parallel one (an MoE block's
    experts are neither: the dispatcher moves their tokens)."""
    kind = layer_kind(moe)
    parts = linear_gemm_parts(arch, kind)
    n_mixer = _mixer_gemms(arch, kind)
    out: list[tuple[str, range]] = []
    if kind.mixer is not None:
        out.append((kind.mixer, range(n_mixer)))
    if kind.ffn is not None:
        out.append((kind.ffn, range(n_mixer, len(parts))))
    return tuple(out)


def linear_gemms(
    arch: ModelArch,
    t: float,
    tp: int,
    ep: int,
    etp: int,
    moe: bool | LayerKind,
    imbalance: float = 1.0,
    latents_on_shard: bool = False,
) -> list[tuple[float, float, float, float]]:
    """(M, K, N, count) of one decoder layer's forward linear GEMMs on one GPU, for the t tokens
    of a micro-batch that the layer's TP group shares (the column-parallel GEMMs see all t); `moe`
    the layer's kind, or a transformer layer's MoE flag; `latents_on_shard` as
    `attention_gemms` takes it.

    The mixer's projections (`attention_gemms`, or a Mamba mixer's `mamba.mixer_gemms`), then
    the MLP: TP slices the dense MLP and the shared experts. Routed experts (Megatron's MoE
    parallel folding): with sequence parallelism (required for MoE with tp > 1) each rank holds
    t / tp tokens; the expert-TP group gathers those of its etp ranks, and the dispatcher sends
    each of the etp x t / tp tokens' top_k copies to the experts of the ep ranks, so each of the
    E / ep local experts receives (t / tp) x etp x top_k x ep / E tokens on average, times
    `imbalance` for the busiest rank, against weights sliced by etp. With etp = tp this is
    t x top_k x ep / E. A latent MoE's experts read and write its latent width, and its down- and
    up-projections (whole on every TP rank) run on the rank's t / tp tokens."""
    kind = layer_kind(moe)
    h = arch.hidden_size
    g: list[tuple[float, float, float, float]] = []
    if kind.mixer == "attention":
        g = attention_gemms(arch, t, tp, latents_on_shard)
    elif kind.mixer == "mamba":
        g = mamba.mixer_gemms(arch, t, tp)
    glu = 2 if arch.gated_linear_unit else 1
    if kind.ffn == "dense":
        f = arch.ffn_hidden_size / tp
        g += [(t, h, glu * f, 1), (t, f, h, 1)]
    if not kind.moe:
        return g
    e = arch.num_moe_experts or 1
    per_expert = t / tp * etp * arch.moe_router_topk * ep / e * imbalance
    local = e / ep
    fe, he = arch.expert_ffn / etp, arch.expert_hidden
    g += [(per_expert, he, glu * fe, local), (per_expert, fe, he, local)]
    if arch.moe_latent_size:
        g += [(t / tp, h, he, 1), (t / tp, he, h, 1)]
    if arch.moe_shared_expert_intermediate_size:
        fs = arch.moe_shared_expert_intermediate_size / tp
        g += [(t, h, glu * fs, 1), (t, fs, h, 1)]
    return g


def _titan_mms(
    arch: ModelArch, gemms: list[tuple[float, float, float, float]], tp: int, kind: LayerKind
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """A torchtitan layer's forward matmuls, from its `linear_gemms`, each as (output elements,
    FLOPs), in two lists: those its per-op checkpointing counts one by one, in the order they run
    (the attention's wq, wk and wv, which its models run as separate linears, or MLA's
    projections as `attention_gemms` lists them, then wo; a Mamba mixer's projections; a dense
    MLP's w1, w3 and w2, or fc1 and fc2 without a gated unit), and an MoE block's (routed and
    shared experts, a latent MoE's projections)."""
    n_mixer = _mixer_gemms(arch, kind)
    n_dense = 2 if kind.ffn == "dense" else 0
    counted = gemms[: n_mixer + n_dense]
    if kind.mixer == "attention" and not arch.multi_latent_attention:  # split QKV
        (m, k, _, _), kv = counted[0], kv_heads(arch, tp) * arch.head_dim
        q = arch.num_attention_heads * arch.head_dim / tp
        counted[:1] = [(m, k, q, 1), (m, k, kv, 1), (m, k, kv, 1)]
    if n_dense and arch.gated_linear_unit:  # split fc1 into w1 and w3
        m, k, n, c = counted[-2]
        counted[-2:-1] = [(m, k, n / 2, c), (m, k, n / 2, c)]
    ops = [(m * n * c, 2.0 * m * k * n * c) for m, k, n, c in counted]
    rest = [(m * n * c, 2.0 * m * k * n * c) for m, k, n, c in gemms[n_mixer + n_dense :]]
    return ops, rest


def per_op_split(
    arch: ModelArch,
    gemms: list[tuple[float, float, float, float]],
    tp: int,
    moe: bool | LayerKind,
) -> tuple[float, float, float]:
    """(saved output elements, re-run FLOPs, all FLOPs) of a layer's linear matmuls (its
    `linear_gemms` on one GPU of TP size `tp`) under torchtitan's per-op selective activation
    checkpointing: its policy saves the output of every aten.mm but every second one, counted
    from the start of each transformer block's forward (pytorch/torchtitan ba246978,
    parallelisms/parallelize_llama.py `_custom_policy`, Dec 2024; the same rule at b5bcd76c,
    distributed/activation_checkpoint.py): the 1st, 3rd, ... of the counted matmuls
    (`_titan_mms`) are kept, the others re-run in the backward with the elementwise work that
    feeds them (for a Llama layer wq, wv, w1 and w2 kept; wk, wo and w3 re-run: 37% of an 8B
    layer's linear FLOPs, not half). An MoE block's matmuls (grouped expert GEMMs and the rest,
    whose ops and count the policy's list does not settle across versions) are taken as half
    kept, half re-run."""
    ops, rest = _titan_mms(arch, gemms, tp, layer_kind(moe))
    saved = sum(e for e, _ in ops[0::2]) + sum(e for e, _ in rest) / 2
    rerun = sum(f for _, f in ops[1::2]) + sum(f for _, f in rest) / 2
    return saved, rerun, sum(f for _, f in ops) + sum(f for _, f in rest)
