"""Fine-grained activation offloading (Megatron-LM --fine-grained-activation-offloading
--offload-modules): the bytes of one layer's saved activations that live in host memory instead of
on the GPU, per micro-batch, by module.

The mechanism (NVIDIA/Megatron-LM d98e8a64, docs/user-guide/features/
fine_grained_activation_offloading.md and TransformerConfig.offload_modules): each listed
submodule's forward runs inside an offload context that copies the tensors it saves for backward
to pinned host memory on a side stream (device to host) once the module's forward is done, and
reloads them (host to device) before its backward, prefetched one group ahead. Per module, what
it saves (`planner.model.activations` terms, split over TP as there):

    attn_norm   a separate input norm's input (MLA's; fused into TE's QKV linear otherwise:
                Megatron's spec puts an IdentityOp there and nothing is offloaded)
    qkv_linear  the QKV linear's input: with TE's fused LayerNormLinear the norm's input and its
                output (8 bits under FP8); MLA: the down-projections' input, the norm output
    core_attn   what core attention saves: Q, K, V (MLA: unless mla_up_proj recomputes them) and
                the flash kernel's 16-bit output, or without a flash kernel the s^2 softmax
                output its second batched GEMM saves (`activations.scores`): the offload
                context's saved-tensor hooks (pipeline_parallel/fine_grained_activation_offload.py)
                take whatever the backend saves
    attn_proj   the output projection's input: the attention output, the same tensor core_attn
                saves (Megatron requires core_attn with it), plus its 8-bit copy under FP8
    mlp_norm    a separate pre-MLP norm's input (MoE layers; fused into fc1 in dense TE layers)
    expert_fc1  the experts' fc1 input per routed pair (x etp; 8 bits under MXFP8, bf16 under
                the other FP8 recipes, whose offload makes fc1 save its original)
    moe_act     the experts' activation input, fc1's output per pair (2F wide when gated)
    fused_group_mlp  the whole grouped MLP's saved inputs: expert_fc1's, moe_act's, fc2's

What is on the GPU instead: the layer's other activations, and the offloaded groups of about two
layers per rank (one being reloaded for its backward, one prefetched ahead), `window_bytes`.

Under full recompute only the layers it leaves whole offload (`offloading_layers`): a checkpointed
layer's forward runs under torch.no_grad (tensor_parallel/random.py:616, CheckpointFunction), so
autograd saves nothing for the offload hooks to move, and the layer input the checkpoint saves
(:628) is saved outside every module's offload context (those open inside the layer), so it stays
on the GPU. Block recompute runs the layers after a chunk's first N without a checkpoint
(megatron/core/recompute.py:167-181, `cf(*args)`), each module's offload on as set per layer
whatever the recompute (transformer_layer.py:1544-1555, the experts' experts.py:254-267); uniform
recompute checkpoints every layer. The activation offload fraction counts only the groups that
moved bytes (fine_grained_activation_offload.py:650-655, `total_offload_bytes > 0`): those of
the whole layers. (NVIDIA/Megatron-LM d98e8a64.)

Megatron skips tensors below min_offloaded_tensor_size (1M elements, MIN_OFFLOADED_ELEMENTS): a
module whose per-GPU share is smaller stays on the GPU here too (tested per module, a slight
over-count on the GPU: the safe side for a memory gate).
Time: `transfer_seconds`, the bytes one way over the GPU's host link.
"""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.inputs.layout import MIN_OFFLOADED_ELEMENTS, Layout
from planner.inputs.titan_every_layers import block_ranges
from planner.model.activations import scores
from planner.model.fp32 import word
from planner.model.moe_activations import fc1_input_bytes, pairs
from planner.model.shard import BF16, FP32, Shard, linear_in, split


def _big(nbytes: float, elem: float = BF16) -> float:
    """`nbytes` if the tensor(s) reach MIN_OFFLOADED_ELEMENTS, else 0 (they stay on the GPU)."""
    return nbytes if nbytes / elem >= MIN_OFFLOADED_ELEMENTS else 0.0


def _attention_modules(arch: ModelArch, sh: Shard, modules: frozenset[str]) -> float:
    T, h, a = sh.tokens, arch.hidden_size, arch.num_attention_heads
    w = word(sh)  # a 16-bit value of bf16 training: 4 bytes in fp32
    rep = part = 0.0
    mla = arch.multi_latent_attention
    if "attn_norm" in modules and mla:
        rep += w * T * h
    if "qkv_linear" in modules:
        rep += w * T * h if mla else w * T * h + linear_in(BF16 * T * h, sh)
    if "core_attn" in modules:
        if mla:
            assert arch.qk_head_dim and arch.qk_pos_emb_head_dim and arch.v_head_dim
            dqk, dv = arch.qk_head_dim + arch.qk_pos_emb_head_dim, arch.v_head_dim
            if not sh.drops("mla_up_proj"):
                part += w * T * a * (2 * dqk + dv)
            out = w * T * a * dv
        else:
            d, g = arch.head_dim, arch.query_groups
            part += w * T * (a + 2 * g) * d
            out = w * T * a * d
        # the flash kernel saves its output; the unfused one its s^2 softmax output instead
        part += out if sh.flash_attention else scores(arch, sh)
    if "attn_proj" in modules:
        width = (arch.v_head_dim or 0) if mla else arch.head_dim
        out = w * T * a * width
        # with flash attention the projection's bf16 input is core_attn's tensor (counted there):
        # it adds its quantised copy under FP8 / NVFP4; without flash its own input
        quantised = out * sh.linear_bytes / BF16 if sh.quantised else 0.0
        part += quantised if sh.flash_attention else linear_in(out * BF16 / w, sh)
    return _big(split(rep, part, sh), w)


def _moe_modules(arch: ModelArch, sh: Shard, modules: frozenset[str]) -> float:
    h, local = arch.hidden_size, sh.tokens / sh.tp
    n = pairs(arch, sh)
    glu = 2 if arch.gated_linear_unit else 1
    w = word(sh)  # a 16-bit value of bf16 training: 4 bytes in fp32
    F = arch.expert_ffn
    fc1_in = n * sh.etp * fc1_input_bytes(arch, sh)
    act_in = n * (w * F * glu + FP32)
    fc2_in = 0.0 if sh.drops("moe_act") else n * linear_in(BF16 * F, sh)
    out = _big(w * local * h, w) if "mlp_norm" in modules else 0.0
    if "fused_group_mlp" in modules:
        return out + _big(fc1_in + act_in + fc2_in, w)
    if "expert_fc1" in modules:
        out += _big(fc1_in, w)
    if "moe_act" in modules:
        out += _big(act_in, w)
    return out


def offloaded_bytes(
    arch: ModelArch,
    is_moe: bool | LayerKind,
    sh: Shard,
    modules: frozenset[str],
    recompute: bool = True,
) -> float:
    """Bytes of one layer's saved activations per micro-batch that fine-grained offloading keeps
    in host memory (module docstring), for a layer of a kind (or a transformer layer's MoE flag:
    a hybrid stack's layers offload their attention or MoE block's modules, a Mamba mixer or a
    gated delta net none: Megatron-Core marks no offload group in either);
    0 without modules, under full recompute (nothing is saved inside the checkpointed layer), or
    for modules a checkpointed block (mlp, moe) discards. recompute=False ignores full and per-op
    recompute: what a layer that full recompute leaves whole offloads (block recompute's layers
    after the first N of a chunk, `offloading_layers`)."""
    if not modules or (recompute and sh.recompute in ("full", "per_op")):
        return 0.0
    kind = layer_kind(is_moe)
    total = _attention_modules(arch, sh, modules) if kind.mixer == "attention" else 0.0
    if kind.moe and not sh.drops("moe"):
        total += _moe_modules(arch, sh, modules)
    return total


def offloading_layers(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: tuple[range, ...]
) -> tuple[tuple[int, ...], ...]:
    """Per chunk of one rank, per layer kind (`ModelArch.kinds`): the layers whose offload groups
    move (`offloaded_bytes(..., recompute=False)` each; module docstring): every layer without
    full or per-op recompute; under full recompute those it leaves whole: a chunk's layers after
    its first recompute_num_layers (block), none (uniform), those torchtitan's every-N-th
    checkpointing does not wrap (both `titan_every_layers.block_ranges`, the layers the models
    count recomputed); none under per-op recompute."""
    zero = tuple(0 for _ in arch.kinds)
    if not lay.offload_modules or sh.recompute == "per_op":
        return tuple(zero for _ in chunks)
    if sh.recompute != "full":
        return tuple(arch.kind_counts((c,)) for c in chunks)
    if lay.recompute_method == "uniform":
        return tuple(zero for _ in chunks)
    ran = block_ranges(lay, chunks)
    return tuple(
        tuple(
            n - r
            for n, r in zip(
                arch.kind_counts((c,)),
                arch.kind_counts(tuple(x for x in ran if x.start in c)),
                strict=True,
            )
        )
        for c in chunks
    )


def offloading_totals(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: tuple[range, ...]
) -> tuple[int, ...]:
    """`offloading_layers` over all of `chunks`: per layer kind, the rank's layers that move
    their offload groups."""
    out = [0] * len(arch.kinds)
    for counts in offloading_layers(arch, lay, sh, chunks):
        for j, n in enumerate(counts):
            out[j] += n
    return tuple(out)


WINDOW_LAYERS = 2
"""Layers whose offloaded groups are on the GPU at once besides what each layer keeps: the one whose
backward runs (reloaded) and the next, prefetched (Megatron's offload manager reloads one group
ahead); the forward's device-to-host copies free each group as its copy completes."""


def window_bytes(per_layer: float) -> float:
    """Offloaded bytes on the GPU at a rank's peak: WINDOW_LAYERS layers' groups."""
    return WINDOW_LAYERS * per_layer


def transfer_seconds(nbytes: float, host_link_bytes_per_s: float) -> float:
    """Seconds to move `nbytes` one way over the host link."""
    return nbytes / host_link_bytes_per_s if nbytes > 0 else 0.0
