"""Fine-grained activation offloading (Megatron-LM --fine-grained-activation-offloading
--offload-modules): the bytes of one layer's saved activations that live in host memory instead of
on the GPU, per micro-batch, by module (which of a rank's groups move, chunk by chunk:
`planner.model.offload_chunks`).

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
    core_attn   what core attention saves: Q, K, V (MLA: copied but no saving where mla_up_proj
                recomputes them) and the flash kernel's 16-bit output, or without a flash kernel
                the s^2 softmax output its second batched GEMM saves (`activations.scores`):
                the offload context's saved-tensor hooks (pipeline_parallel/
                fine_grained_activation_offload.py) take whatever the backend saves; nothing
                where selective recompute checkpoints core attention. The flash output leaves
                the GPU only where nothing else holds it (`_attention_modules`): in bf16 the
                output projection saves it too, so without attn_proj it is copied and kept
    attn_proj   the output projection's input: in bf16 with flash attention the tensor core_attn
                copies (Megatron requires core_attn with it), copied a second time; its 8-bit
                copy under FP8; without flash its own input
    mlp_norm    a separate pre-MLP norm's input (MoE layers; fused into fc1 in dense TE layers)
    expert_fc1  the experts' fc1 input per routed pair (x etp; 8 bits under MXFP8, bf16 under
                the other FP8 recipes, whose offload makes fc1 save its original)
    moe_act     the experts' activation input, fc1's output per pair (2F wide when gated)
    fused_group_mlp  the whole grouped MLP's saved inputs: expert_fc1's, moe_act's, fc2's

What is on the GPU instead: the layer's other activations, and the offloaded groups of about two
layers per rank (one being reloaded for its backward, one prefetched ahead),
`offload_chunks.window_bytes`.

Under full recompute only the layers it leaves whole offload (`offload_chunks.offloading_layers`):
a checkpointed layer's forward runs under torch.no_grad (tensor_parallel/random.py:616,
CheckpointFunction), so autograd saves nothing for the offload hooks to move, and the layer
input the checkpoint saves (:628) is saved outside every module's offload context (those open
inside the layer), so it stays on the GPU. Block recompute runs the layers after a chunk's
first N without a checkpoint (megatron/core/recompute.py:167-181, `cf(*args)`), each module's
offload on as set per layer whatever the recompute (transformer_layer.py:1544-1555, the
experts' experts.py:254-267); uniform recompute checkpoints every layer. The activation
offload fraction counts only the groups that moved bytes (fine_grained_activation_offload.py
:650-655, `total_offload_bytes > 0`): those of the whole layers. (NVIDIA/Megatron-LM d98e8a64.)

Megatron skips tensors below min_offloaded_tensor_size (1M elements, MIN_OFFLOADED_ELEMENTS): a
module whose per-GPU share is smaller stays on the GPU here too (tested per module, a slight
over-count on the GPU: the safe side for a memory gate).
Time: `transfer_seconds`, the bytes copied (`copied_bytes`) one way over the GPU's host link.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind, layer_kind
from planner.inputs.layout import MIN_OFFLOADED_ELEMENTS
from planner.model.activations import scores
from planner.model.fp32 import word
from planner.model.job_memo import ModelMemo
from planner.model.moe_activations import fc1_input_bytes, pairs
from planner.model.shard import BF16, FP32, Shard, linear_in, split


def _big(nbytes: float, elem: float = BF16) -> float:
    """`nbytes` if the tensor(s) reach MIN_OFFLOADED_ELEMENTS, else 0 (they stay on the GPU)."""
    return nbytes if nbytes / elem >= MIN_OFFLOADED_ELEMENTS else 0.0


@dataclass(frozen=True)
class Moved:
    """One layer's offload groups per micro-batch, bytes (module docstring): `freed`, what leaves
    the GPU (counted against `planner.model.activations`); `copied`, what the groups copy to the
    host and back (host memory and transfer time); `reloaded`, what their reload puts back on the
    GPU at once (`offload_chunks.window_bytes`). They differ at the attention output
    (`_attention_modules`) and where recompute already frees what a group copies."""

    freed: float = 0.0
    copied: float = 0.0
    reloaded: float = 0.0

    def __add__(self, other: Moved) -> Moved:
        return Moved(
            self.freed + other.freed,
            self.copied + other.copied,
            self.reloaded + other.reloaded,
        )

    def big(self, elem: float) -> Moved:
        """`self`, or nothing where what is copied is below MIN_OFFLOADED_ELEMENTS (`_big`)."""
        return self if _big(self.copied, elem) else Moved()


def _all(nbytes: float) -> Moved:
    """Bytes a group copies that nothing else holds: freed, copied and reloaded alike."""
    return Moved(nbytes, nbytes, nbytes)


def _attention_modules(arch: ModelArch, sh: Shard, modules: frozenset[str]) -> Moved:
    """The attention block's groups together (`_attention_groups`), or nothing where what they
    copy is below MIN_OFFLOADED_ELEMENTS."""
    return sum((m for _, m in _attention_groups(arch, sh, modules)), Moved()).big(word(sh))


def _attention_groups(
    arch: ModelArch, sh: Shard, modules: frozenset[str]
) -> tuple[tuple[str, Moved], ...]:
    """The attention block's groups, each on one GPU of the TP group, in the order Megatron
    opens them (attn_norm, qkv_linear, core_attn, attn_proj; attn_norm only with a separate
    input norm, MLA's). Core attention runs in the core_attn group unless selective recompute
    checkpoints it (Megatron-LM d98e8a64 attention.py:1555-1564, MLA
    multi_latent_attention.py:384-392: the checkpoint runs outside the group's context, so
    nothing of it moves). The group copies what the kernel saves (Q, K, V and the flash kernel's
    output, or the unfused one's s^2 scores) and releases Q, K and V by force (:1605-1606,
    MLA :430-431); each group replaces only its own reference by the host copy
    (fine_grained_activation_offload.py:1093-1124, :895-935). So the flash kernel's output
    leaves the GPU only where nothing outside the group holds it: the output projection saves
    that very tensor in bf16 (attention.py:1626-1629), on the GPU unless attn_proj offloads
    and releases it (:1629); a quantised projection saves its own copy; the output gate
    (:1617-1619, outside both groups) keeps the kernel's output; all-to-all context parallelism
    hands the projection a new tensor (`Shard.cp_out_part`). With attn_proj as well the two
    groups copy the shared output each (no dedup across groups: `_set_duplicate_storage_info`
    only reports within one) and reload it one after the other: attn_proj's for the
    projection's backward, core_attn's when that backward is done (the group start's
    backward, :1456-1461). Where mla_up_proj recomputes Q, K and V (discarded after the
    forward, multi_latent_attention.py:455-457) the group still copies them: host bytes, no
    saving. What is copied but kept is reloaded beside the original."""
    T, h, a = sh.tokens, arch.hidden_size, arch.num_attention_heads
    w = word(sh)  # a 16-bit value of bf16 training: 4 bytes in fp32
    out_groups: list[tuple[str, Moved]] = []
    moved = Moved()
    mla = arch.multi_latent_attention
    if "attn_norm" in modules and mla:
        out_groups.append(("attn_norm", _all(split(w * T * h, 0.0, sh))))
    if "qkv_linear" in modules:
        rep = w * T * h if mla else w * T * h + linear_in(BF16 * T * h, sh)
        out_groups.append(("qkv_linear", _all(split(rep, 0.0, sh))))
    if mla:
        assert arch.qk_head_dim and arch.qk_pos_emb_head_dim and arch.v_head_dim
        dqk, dv = arch.qk_head_dim + arch.qk_pos_emb_head_dim, arch.v_head_dim
        qkv, out = w * T * a * (2 * dqk + dv), w * T * a * dv
    else:
        d, g = arch.head_dim, arch.query_groups
        qkv, out = w * T * (a + 2 * g) * d, w * T * a * d
    kernel = sh.flash_attention and not sh.drops("core_attn")
    gated = arch.attention_output_gate and not sh.cp_out_part  # the gate holds the output
    # the projection saves the very tensor the flash kernel saved (bf16, no gate, no all-to-all)
    shared = kernel and not (sh.quantised or arch.attention_output_gate or sh.cp_out_part)
    core = "core_attn" in modules and not sh.drops("core_attn")
    if core:
        recomputed = mla and sh.drops("mla_up_proj")  # freed by the recompute, copied all the same
        moved += Moved(0.0 if recomputed else qkv, qkv, qkv)
        if not kernel:
            moved += _all(scores(arch, sh))
        elif gated or (shared and "attn_proj" not in modules):
            moved += Moved(0.0, out, out)  # copied, kept on the GPU by the gate or projection
        else:
            moved += _all(out)
        out_groups.append(("core_attn", _split(moved, sh)))
    if "attn_proj" in modules:
        proj_in = out if shared else linear_in(out * BF16 / w, sh)  # the projection's input
        # the shared output a second time: freed and reloaded once, with core_attn's
        proj = Moved(0.0, proj_in, 0.0) if shared and core else _all(proj_in)
        out_groups.append(("attn_proj", _split(proj, sh)))
    return tuple(out_groups)


def _split(m: Moved, sh: Shard) -> Moved:
    """`m`, head-parallel bytes, on one GPU of the TP group (`shard.split`)."""
    return Moved(split(0.0, m.freed, sh), split(0.0, m.copied, sh), split(0.0, m.reloaded, sh))


def _moe_groups(
    arch: ModelArch, sh: Shard, modules: frozenset[str]
) -> tuple[tuple[str, float], ...]:
    """The MoE block's groups and what each copies on one GPU, in the order Megatron opens them
    (mlp_norm, then fused_group_mlp or expert_fc1 and moe_act), each below
    MIN_OFFLOADED_ELEMENTS nothing."""
    h, local = arch.hidden_size, sh.tokens / sh.tp
    n = pairs(arch, sh)
    glu = 2 if arch.gated_linear_unit else 1
    w = word(sh)  # a 16-bit value of bf16 training: 4 bytes in fp32
    F = arch.expert_ffn
    fc1_in = n * sh.etp * fc1_input_bytes(arch, sh)
    act_in = n * (w * F * glu + FP32)
    fc2_in = 0.0 if sh.drops("moe_act") else n * linear_in(BF16 * F, sh)
    out: list[tuple[str, float]] = []
    if "mlp_norm" in modules:
        out.append(("mlp_norm", _big(w * local * h, w)))
    if "fused_group_mlp" in modules:
        return (*out, ("fused_group_mlp", _big(fc1_in + act_in + fc2_in, w)))
    if "expert_fc1" in modules:
        out.append(("expert_fc1", _big(fc1_in, w)))
    if "moe_act" in modules:
        out.append(("moe_act", _big(act_in, w)))
    return tuple(out)


def group_moves(
    arch: ModelArch,
    is_moe: bool | LayerKind,
    sh: Shard,
    modules: frozenset[str],
    recompute: bool = True,
) -> tuple[tuple[str, Moved], ...]:
    """What each of one layer's offload groups moves per micro-batch (`Moved`), in the order
    Megatron opens them in the layer's forward (attn_norm, qkv_linear, core_attn, attn_proj,
    mlp_norm, expert_fc1 / fused_group_mlp, moe_act), for a layer of a kind (or a transformer
    layer's MoE flag: a hybrid stack's layers offload their attention or MoE block's modules, a
    Mamba mixer or a gated delta net none: Megatron-Core marks no offload group in either). The
    attention block's groups move nothing where their tensors together are below
    MIN_OFFLOADED_ELEMENTS (`_attention_modules`), each MoE group where its own are; such a
    group is still opened. None without modules, under full or per-op recompute (nothing is
    saved inside the checkpointed layer), or for the MoE block where a checkpoint discards it.
    recompute=False ignores full and per-op recompute: the groups of a layer that full
    recompute leaves whole (block recompute's layers after the first N of a chunk,
    `offload_chunks.offloading_layers`). Remembered (`_GROUP_MOVES`)."""
    key = (layer_kind(is_moe), sh, modules, recompute)
    return _GROUP_MOVES.get(arch, key, lambda: _group_moves(arch, key[0], sh, modules, recompute))


_GROUP_MOVES: ModelMemo[tuple[object, ...], tuple[tuple[str, Moved], ...]] = ModelMemo(1 << 14)
"""`group_moves` per model and what it reads besides: the layer kind, the shard, the modules and
whether recompute applies (no calibrated constant): the search asks it of every kind of every
rank of every layout that offloads."""


def _group_moves(
    arch: ModelArch, kind: LayerKind, sh: Shard, modules: frozenset[str], recompute: bool
) -> tuple[tuple[str, Moved], ...]:
    if not modules or (recompute and sh.recompute in ("full", "per_op")):
        return ()
    out: list[tuple[str, Moved]] = []
    if kind.mixer == "attention":
        groups = _attention_groups(arch, sh, modules)
        keep = bool(_attention_modules(arch, sh, modules).copied)  # the floor on them together
        out += [(name, m if keep else Moved()) for name, m in groups]
    if kind.moe and not sh.drops("moe"):
        out += [(name, _all(b)) for name, b in _moe_groups(arch, sh, modules)]
    return tuple(out)


def moved(
    arch: ModelArch,
    is_moe: bool | LayerKind,
    sh: Shard,
    modules: frozenset[str],
    recompute: bool = True,
) -> Moved:
    """What fine-grained offloading moves of one layer's saved activations per micro-batch
    (module docstring; `Moved`: freed on the GPU, copied to the host, reloaded at once) where
    every group moves: `group_moves` together."""
    return sum((m for _, m in group_moves(arch, is_moe, sh, modules, recompute)), Moved())


def offloaded_bytes(
    arch: ModelArch,
    is_moe: bool | LayerKind,
    sh: Shard,
    modules: frozenset[str],
    recompute: bool = True,
) -> float:
    """Bytes of one layer's saved activations per micro-batch off the GPU (`moved(...).freed`)."""
    return moved(arch, is_moe, sh, modules, recompute).freed


def copied_bytes(
    arch: ModelArch, is_moe: bool | LayerKind, sh: Shard, modules: frozenset[str]
) -> float:
    """Bytes one layer's offload groups copy to the host per micro-batch, and back, in a layer
    that moves them (`moved(..., recompute=False).copied`): host memory and transfer time."""
    return moved(arch, is_moe, sh, modules, recompute=False).copied


def group_bytes(
    arch: ModelArch, is_moe: bool | LayerKind, sh: Shard, modules: frozenset[str]
) -> tuple[tuple[str, float], ...]:
    """One layer's offload groups as Megatron opens them in its forward, each with the bytes it
    copies to the host and back in a layer that moves them (`group_moves(...,
    recompute=False)`, copied: 0 for a group whose tensors are below the size floor)."""
    return tuple((name, m.copied) for name, m in group_moves(arch, is_moe, sh, modules, False))


def transfer_seconds(nbytes: float, host_link_bytes_per_s: float) -> float:
    """Seconds to move `nbytes` one way over the host link."""
    return nbytes / host_link_bytes_per_s if nbytes > 0 else 0.0
