"""The linear GEMMs of one decoder layer on one GPU, as (M, K, N, count) shapes: the attention
projections (MHA / GQA, MLA with its replicated down-projections), a Mamba mixer's, the dense MLP,
routed experts under Megatron's MoE parallel folding, a latent MoE's projections and shared
experts (`linear_gemms`); what each entry belongs to (`linear_gemm_parts`, `gemm_blocks`), and
torchtitan's per-op checkpointing split of them (`per_op_split`). `planner.model.flops` counts a
step's FLOPs from them; `planner.model.layer_time` times them on the roofline."""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.model import mixers
from planner.model.job_memo import ModelMemo


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
        q = 2 * a if arch.attention_output_gate else a  # the gate is a query-sized output
        return [(t, h, q * d / tp + 2 * kv * d, 1), (t, a * d / tp, h, 1)]
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
(MLA's q and kv up-projections), "mamba" (a Mamba mixer's in_proj and out_proj), "gdn" (a gated
delta net's in_proj and out_proj), "mlp" (a dense
MLP), "expert" (routed experts, one grouped GEMM over the rank's local experts), "latent" (a
latent MoE's down- and up-projections), "shared" (shared experts)."""


_PARTS: ModelMemo[LayerKind, tuple[GemmPart, ...]] = ModelMemo()
_BLOCKS: ModelMemo[LayerKind, tuple[tuple[str, range], ...]] = ModelMemo()
"""`linear_gemm_parts` and `gemm_blocks` per model and kind (all they read): the search asks
for them on every layer time it computes."""


def linear_gemm_parts(arch: ModelArch, moe: bool | LayerKind) -> tuple[GemmPart, ...]:
    """What each of `linear_gemms`' entries is, in its order (what selective recompute modules
    re-run: mla_up_proj the "mla_up" GEMMs, mlp "mlp", moe "expert" and "shared",
    shared_experts "shared"). Remembered per model and kind."""
    kind = layer_kind(moe)
    return _PARTS.get(arch, kind, lambda: _parts_of(arch, kind))


def _parts_of(arch: ModelArch, kind: LayerKind) -> tuple[GemmPart, ...]:
    mixer: tuple[GemmPart, ...] = ()
    if kind.mixer is not None and mixers.of(kind) is not None:
        mixer = (kind.mixer, kind.mixer)
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


def dsa_indexer_gathered_width(arch: ModelArch) -> float:
    """The width of what DeepSeek sparse attention's indexer gathers over TP itself, beside
    MLA's latents: the layer's input and the q latent (or the input again without one),
    h + q_lora_rank (dsa.py d98e8a64 :1273-1275; `planner.model.dsa_comm`); 0 without DSA."""
    if not arch.has_dsa:
        return 0.0
    return arch.hidden_size + (arch.q_lora_rank or arch.hidden_size)


def _mixer_gemms(arch: ModelArch, kind: LayerKind) -> int:
    """How many of a layer's `linear_gemms` its mixer's projections are (they come first)."""
    if kind.mixer == "attention":
        return len(attention_gemms(arch, 1.0, 1))
    return 2 if mixers.of(kind) is not None else 0


def gemm_blocks(arch: ModelArch, moe: bool | LayerKind) -> tuple[tuple[str, range], ...]:
    """The blocks of a layer's `linear_gemms`, in order, each with the indices of its entries:
    the mixer ("attention", "mamba" or "gdn"), then the channel block ("dense" or "moe"). A block's
    column-parallel GEMMs read the h-wide input; its last is the row-parallel one (an MoE block's
    experts are neither: the dispatcher moves their tokens). Remembered per model and kind."""
    kind = layer_kind(moe)
    return _BLOCKS.get(arch, kind, lambda: _blocks_of(arch, kind))


def _blocks_of(arch: ModelArch, kind: LayerKind) -> tuple[tuple[str, range], ...]:
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

    The mixer's projections (`attention_gemms`, or a linear-time mixer's `mixer_gemms`,
    `planner.model.mixers`), then
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
    elif (linear := mixers.of(kind)) is not None:
        g = linear.mixer_gemms(arch, t, tp)
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
    arch: ModelArch, gemms: Sequence[tuple[float, float, float, float]], tp: int, kind: LayerKind
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """A torchtitan layer's forward matmuls, from its `linear_gemms`, each as (output elements,
    FLOPs), in two lists: the aten.mm calls its per-op checkpointing counts one by one, in the
    order they run (the attention's wq, wk and wv, which its models run as separate linears, or
    MLA's projections as `attention_gemms` lists them, then wo; a Mamba mixer's projections; a
    dense MLP's w1, w3 and w2, or fc1 and fc2 without a gated unit; an MoE block's latent
    projections and its shared experts' w1, w3 and w2, which run after the routed experts,
    e347b1e5 models/moe/moe.py:524-529, as separate linears, :67-68), and the routed experts'
    grouped GEMMs (aten._grouped_mm), which the policy does not count. The router's gate, forced
    to recompute and left out of the count (per_op_sac_force_recompute_mm_shapes_by_fqns,
    config/job_config.py:661-663, activation_checkpoint.py:110-113), is no `linear_gemms` entry."""
    n_mixer = _mixer_gemms(arch, kind)
    n_dense = 2 if kind.ffn == "dense" else 0
    counted = list(gemms[: n_mixer + n_dense])
    if kind.mixer == "attention" and not arch.multi_latent_attention:  # split QKV
        (m, k, _, _), kv = counted[0], kv_heads(arch, tp) * arch.head_dim
        q = arch.num_attention_heads * arch.head_dim / tp
        counted[:1] = [(m, k, q, 1), (m, k, kv, 1), (m, k, kv, 1)]
    n_routed = 2 if kind.moe else 0
    routed = gemms[n_mixer + n_dense : n_mixer + n_dense + n_routed]
    moe_mms = list(gemms[n_mixer + n_dense + n_routed :])  # latent, then shared experts
    if kind.moe and arch.moe_shared_expert_intermediate_size and arch.gated_linear_unit:
        m, k, n, c = moe_mms[-2]  # the shared experts' fc1 as w1 and w3
        moe_mms[-2:-1] = [(m, k, n / 2, c), (m, k, n / 2, c)]
    if n_dense and arch.gated_linear_unit:  # split fc1 into w1 and w3
        m, k, n, c = counted[-2]
        counted[-2:-1] = [(m, k, n / 2, c), (m, k, n / 2, c)]
    ops = [(m * n * c, 2.0 * m * k * n * c) for m, k, n, c in counted + moe_mms]
    rest = [(m * n * c, 2.0 * m * k * n * c) for m, k, n, c in routed]
    return ops, rest


def per_op_split(
    arch: ModelArch,
    gemms: Sequence[tuple[float, float, float, float]],
    tp: int,
    moe: bool | LayerKind,
) -> tuple[float, float, float]:
    """(saved output elements, re-run FLOPs, all FLOPs) of a layer's linear matmuls (its
    `linear_gemms` on one GPU of TP size `tp`) under torchtitan's per-op selective activation
    checkpointing: its policy saves the output of every aten.mm but every second one, counted
    from the start of each transformer block's forward (pytorch/torchtitan ba246978,
    parallelisms/parallelize_llama.py `_custom_policy`, Dec 2024; the same rule at e347b1e5,
    distributed/activation_checkpoint.py:109-117, and b5bcd76c): the 1st, 3rd, ... of the
    counted matmuls (`_titan_mms`) are kept, the others re-run in the backward with the
    elementwise work that feeds them (for a Llama layer wq, wv, w1 and w2 kept; wk, wo and w3
    re-run: 37% of an 8B layer's linear FLOPs, not half). The routed experts' grouped GEMMs are
    not on its save list (e347b1e5 models/deepseek_v3/infra/parallelize.py:33-47,
    qwen3/infra/parallelize.py:39-53; b5bcd76c distributed/activation_checkpoint.py:31-94 lists
    torch's compute-intensive ops, aten.linear and the collectives, no aten._grouped_mm): none
    of their outputs kept, all three (w1, w3, w2) re-run."""
    ops, routed = _titan_mms(arch, gemms, tp, layer_kind(moe))
    saved = sum(e for e, _ in ops[0::2])
    rerun = sum(f for _, f in ops[1::2]) + sum(f for _, f in routed)
    return saved, rerun, sum(f for _, f in ops) + sum(f for _, f in routed)
