"""Seconds Megatron's selective recompute re-runs in one layer's backward per micro-batch: each
entry of its --recompute-modules re-runs its GEMMs' forward (their times from
`planner.model.layer_time`, on the roofline of `planner.model.gemm`) and reads and writes its
elementwise kernels' bytes once, at the GPU's achieved HBM bandwidth: core_attn the attention
kernel, layernorm the norms not fused into a linear layer (`separate_norms`), mla_up_proj MLA's
up-projections and rope, moe_act the experts' SwiGLU, mlp a dense MLP, moe the MoE block with one
more dispatch and combine, shared_experts the shared experts, gdn_norm_out the gated delta net's
output norm and its CP all-to-all.
`layer_time` sums the modules a layout names into `Layer.recompute`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, gdn
from planner.model.fp32 import value_bytes
from planner.model.gemm import Gpu


@dataclass(frozen=True)
class Pieces:
    """One layer's forward pieces that selective recompute re-runs."""

    parts: tuple[str, ...]
    times: Sequence[float]
    """Forward seconds of each linear GEMM (`gemm_shapes.linear_gemm_parts` order)."""
    casts: Sequence[float]
    """FP8 quantisation seconds of each GEMM's input and output gradient (fwd + bwd)."""
    attn_fwd: float
    tokens: float
    load: float
    permute_fwd: float = 0.0
    """The forward's token permutations (an MoE layer's permute and unpermute), seconds."""


def module_time(
    job: Job, lay: Layout, gpu: Gpu, moe: bool | LayerKind, p: Pieces, module: str
) -> float:
    """Seconds one recompute module re-runs in the backward of one layer per micro-batch (Megatron
    --recompute-modules): its GEMMs' forward, the quantisation of their inputs (a third of `casts`,
    the input side), and the HBM bytes of its elementwise kernels read and written once. core_attn:
    the attention kernel's forward. layernorm: the layer's separate norms (`separate_norms`; read
    and write h per token). mla_up_proj: the q and kv up-projections and the rope / concatenation
    writing q, k, v. Values are in the job's dtype (`fp32.value_bytes`: 4 bytes in fp32 training).
    moe_act: the experts' SwiGLU (read 2 x F_e, write F_e per routed token). mlp / moe /
    shared_experts: the block's GEMMs and activation (a dense layer's MLP; the experts and the
    shared experts, with the forward's token permutations; the shared experts). gdn_norm_out: a
    gated delta net's gated norm (read the kernel's output and the gate, write the norm's output, vd
    each per token) and, under CP, its output's all-to-all.
    A module the layer lacks costs 0 (`moe`: the layer's kind, or a transformer layer's MoE
    flag)."""
    kind = layer_kind(moe)
    moe = kind.moe
    arch = job.arch
    word = value_bytes(job)  # each value's bytes: 4 in fp32 training (planner.model.fp32)
    h = arch.hidden_size
    sp_tp = lay.tp if lay.sequence_parallel else 1
    glu = 2 if arch.gated_linear_unit else 1

    def gemms(*kinds: str) -> float:
        sel = [i for i, part in enumerate(p.parts) if part in kinds]
        return sum(p.times[i] + p.casts[i] / 3 for i in sel)

    def act(rows: float, width: float) -> float:
        # read the (gated) fc1 output, write the activation, in the job's values
        return rows * width * (glu + 1) * word / gpu.hbm

    routed = p.tokens * arch.moe_router_topk * p.load * lay.expert_tp / lay.tp
    fe = arch.expert_ffn / lay.expert_tp
    fs = (arch.moe_shared_expert_intermediate_size or 0) / lay.tp
    if module == "core_attn":
        return p.attn_fwd
    if module == "layernorm":
        return separate_norms(arch, kind) * (p.tokens / sp_tp) * h * 2 * word / gpu.hbm
    if module == "mla_up_proj":
        if not arch.multi_latent_attention:
            return 0.0
        assert arch.qk_head_dim and arch.qk_pos_emb_head_dim and arch.v_head_dim
        width = (
            arch.num_attention_heads
            / lay.tp
            * (2 * (arch.qk_head_dim + arch.qk_pos_emb_head_dim) + arch.v_head_dim)
        )
        return gemms("mla_up") + 2 * p.tokens * width * word / gpu.hbm
    if module == "moe_act":
        return act(routed, fe) if moe else 0.0
    if module == "mlp":
        dense = kind.ffn == "dense"
        return gemms("mlp") + act(p.tokens, arch.ffn_hidden_size / lay.tp) if dense else 0.0
    if module == "moe":
        if not moe:
            return 0.0
        experts = gemms("expert", "latent", "shared") + act(routed, fe) + act(p.tokens, fs)
        return experts + p.permute_fwd
    if module == "shared_experts":
        return gemms("shared") + act(p.tokens, fs) if moe else 0.0
    if module == "gdn_norm_out" and kind.mixer == "gdn":
        # the gated norm reads the kernel's output and the gate and writes its output
        vd = arch.linear_num_value_heads * arch.linear_value_head_dim / lay.tp
        norm = 3 * p.tokens * vd * word / gpu.hbm
        # under CP the checkpointed function ends in the output's all-to-all (Megatron-LM
        # d98e8a64 gated_delta_net/gdn.py:266-276 wraps common.py:347-368 `_gated_norm_and_a2a`,
        # `a2a_hp_to_cp`): the backward runs it once more, in the job's values
        out = gdn.context_parallel_a2as(arch, p.tokens, lay.tp, lay.cp)[-1] * word / 2.0
        return norm + comms.all_to_all(out, comms.place(job.cluster, lay.tp, lay.cp))
    return 0.0


def separate_norms(arch: ModelArch, kind: LayerKind) -> int:
    """The norms of a layer the layernorm module re-runs: those that are modules of their own.
    Megatron recomputes a norm only where it is not an IdentityOp (Megatron-LM d98e8a64
    transformer_layer.py:475-479 the input norm, :521-527 the pre-MLP norm); Transformer Engine's
    layer specs fuse the input norm into linear_qkv and a dense MLP's into linear_fc1
    (TELayerNormColumnParallelLinear), leaving IdentityOps, but keep MLA's input norm and an MoE
    layer's pre-MLP norm separate: the norms whose outputs the memory side drops for the module
    (`planner.model.activations`' MLA blocks, `moe_activations.moe_bytes`)."""
    mla = kind.mixer == "attention" and arch.multi_latent_attention
    return int(mla) + int(kind.moe)
