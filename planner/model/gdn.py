"""The gated delta net (GDN, Yang, Kautz & Hatamizadeh 2025, arXiv:2412.06464) of a transformer's
linear-attention layers (Qwen3-Next, Qwen3.5) and of a hybrid stack's G layers: parameters,
FLOPs, GEMMs, the activations its training path keeps, and its chunked kernels' work.

Megatron-LM d98e8a64 megatron/core/ssm/gated_delta_net/ (gdn.py `GatedDeltaNet`, common.py
`_GDNBase`), built by megatron/core/models/gpt/experimental_attention_variant_module_specs.py
(`get_gated_delta_net_module_spec`: in_proj a TE LayerNormColumnParallelLinear, the layer's
input norm fused into it; out_norm a TE norm over one value head; out_proj a row-parallel
linear; the module's own defaults: no linear biases, no conv bias, q/k L2-normalised, chunk 64).
h hidden, n_k key heads and n_v value heads (--linear-num-key-heads, --linear-num-value-heads),
d_k and d_v their head dims, qk = n_k d_k, vd = n_v d_v, w the conv width
(--linear-conv-kernel-dim); TP (and CP, after its all-to-all) split the heads (Megatron asserts
both head counts divide by tp x cp):

    in_proj    h -> 2qk + 2vd + 2n_v  (q, k, v, the output gate z, beta, alpha)  column-parallel
    conv1d     2qk + vd channels of width w (depthwise, no bias)                    split by tp
    dt_bias, A_log   n_v each                                                       split by tp
    out_norm   the gated norm over one value head (d_v weights, shared by the heads)
    out_proj   vd -> h                                                               row-parallel

Training runs FLA's kernels (fla-org/flash-linear-attention bc3b101d: fla/modules/conv
`causal_conv1d`, fla/modules/l2norm.py, fla/ops/gated_delta_rule/chunk.py
`ChunkGatedDeltaRuleFunction`). Per token, what one GDN mixer keeps for the backward (16-bit
unless marked), beyond its block's norm input and output and dropout mask
(`planner.model.activations`):

    in_proj's output qkvzba, held by views of it (alpha, conv input)  2(2qk + 2vd + 2n_v)
    the L2 norm's output and its fp32 rstd (per q and k head)         4qk + 8n_k
    the kernel's q, k (n_v heads each, repeat_interleave) and v      4 n_v d_k + 2vd
    its g (fp32 chunk-local cumsum), beta, and A (C wide per head)    4n_v + 2n_v + 2C n_v
    its output (the gated norm's input) and the norm's fp32 rstd      2vd + 4n_v
    the norm's output and the gate z's copy (the SiLU gate's input)   2vd + 2vd
    out_proj's input                                                  2vd

(`saved_widths`). The convolution's input is no copy: Megatron transposes qkvzba (gdn.py:187)
and splits qkv off it (:191, `_split_projection` :295), a strided view, which it hands to FLA's
causal_conv1d (:232-240, the triton backend); FLA takes x as it is (fla/modules/conv/
causal_conv1d.py:16 and conv/triton/ops.py:369 `@input_guard(no_guard_contiguous=["x"])`) and
saves that view (ops.py:392; the same at :366 and :389 in v0.5.1, the version Megatron's
pyproject.toml:140 pins, and since FLA 9afb9fb8 took strided inputs), whose storage is
qkvzba, counted whole above. Its backward (chunk.py `chunk_gated_delta_rule_bwd`) recomputes
w and u (the WY representation) and the chunk states h, and holds v_new, dv, the state
gradients dh, dq, dk, dw and the WY gradients' dk2 and dv while it runs (`backward_working`):
the states are n_v d_k d_v per chunk of C = 64 tokens, bf16 (chunk_delta_h.py `k.new_empty`).
Megatron's --deterministic-mode runs a PyTorch reference of the rule (gdn.py
`torch_chunk_gated_delta_rule`) that keeps more; planner counts the FLA path.

FLOPs. Model FLOPs follow Megatron's count (megatron/training/training.py `gdn_layer_flops`):
per token forward 2[h(2qk + 2vd + 2n_v) + w(2qk + vd) + 4 n_v d_v^2 + vd h]. The work FLA's
chunked kernels execute, per token and value head (C the chunk): forward, K K^T within the chunk
2C d_k, w and u from A 2C d_k + 2C d_v, the state recurrence (u - w h, then k^T v_new) 4 d_k d_v,
the output q h 2 d_k d_v and the intra-chunk (q k^T) v_new 2C d_k + 2C d_v: 6 d_k d_v + 6C d_k +
4C d_v; the backward recomputes w, u and h and runs dv, dh, dq, dk, dw and the WY gradients
(chunk.py `chunk_gated_delta_rule_bwd`): about 14 d_k d_v + 14C d_k + 8C d_v. Time (`scan_time`):
those FLOPs at the GEMM roofline's large-GEMM rate plus the HBM traffic of the chunk states and
of the kernels' per-token tensors, additively, as the Mamba mixer's scan
(`planner.model.mamba.scan_time`). The kernels hand each other per-token tensors through HBM
(q, k, v, w, u, v_new, o and their gradients; the forward's three kernels, intra-chunk, state and
output, read or write 12 bytes per key and per value element, the backward's six 32) and the
chunk-wide A (2C bytes, read once more in the backward). Against FLA's own GB200 benchmark of
the kernels (benchmarks/linear_kernels.py) the forward runs at that roofline and the backward at
BWD_ROOFLINE_FRACTION of it. The convolution, L2 norm, gates and gated norm are elementwise,
counted with every layer's passes over its saved activations.
"""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model.gemm import Gpu

CHUNK_SIZE = 64
"""FLA's chunk length C as Megatron's GatedDeltaNet sets it (gdn.py `self.chunk_size = 64`)."""

STATE_BYTES_FWD = 4.0
"""HBM bytes per chunk-state element in the forward (FLA chunk_delta_h.py, chunk_o.py): the state
kernel writes each chunk's state in bf16 (2) and the output kernel reads it (2)."""

STATE_BYTES_BWD = 8.0
"""The same in the backward: the recomputed states written (2) and read by the dq / dk / dw kernel
(2), the state gradients dh written by the backward recurrence (2) and read there (2)."""

FWD_STATE_FLOPS, FWD_KEY_FLOPS, FWD_VALUE_FLOPS = 6.0, 6.0, 4.0
"""Forward FLOPs per token and value head of FLA's chunked kernels: x d_k d_v, x C d_k, x C d_v
(module docstring)."""

BWD_STATE_FLOPS, BWD_KEY_FLOPS, BWD_VALUE_FLOPS = 14.0, 14.0, 8.0
"""The backward's, with its recomputation of w, u and the states (module docstring)."""

IO_BYTES_FWD = 12.0
"""HBM bytes per key and per value element of one token and value head that the forward's kernels
move (chunk_fwd.py, chunk_delta_h.py, chunk_o.py; bf16): the intra-chunk kernel reads k and v and
writes w and u, the state kernel reads k, w and u and writes v_new, the output kernel reads q, k
and v_new and writes o: 6 x 2 bytes on each side."""

IO_BYTES_BWD = 32.0
"""The same for the backward's kernels (recompute of w and u and of the states with v_new, dv
local, the state-gradient recurrence, dq / dk / dw, the WY gradients): about 16 reads and writes
of 2 bytes on each side (17 on the key side, 15 on the value side)."""

BWD_ROOFLINE_FRACTION = 0.605
"""The fraction of its roofline (the FLOPs at the large-GEMM rate plus the HBM bytes at the
achieved bandwidth, as `scan_time` counts them) FLA's backward kernels sustain. Fitted by
benchmarks/linear_kernels.py (`--fit`) on FLA's own GB200 benchmark of the chunked gated delta
rule (benchmarks/data/fla_kernels): the slope of time over token-heads through its four shapes
at head dim 128 is 3.32 ns a token-head backward, 3.08 less the L2 norms the benchmarked call
runs inside it (Megatron runs them before it), against 1.87 at the roofline. The forward
sustains its roofline (0.73 ns measured without the norms, 0.76 counted: 1.04, taken as 1). The
backward's two recurrences over the chunks (the recomputed states and the state gradients) and
its six kernels' hand-offs run further from it; at head dim 256 (one shape) further still, which
no model planner knows has."""


def dims(arch: ModelArch) -> tuple[int, int, int, int]:
    """(n_k, n_v, d_k, d_v): key heads, value heads and their head dims."""
    return (
        arch.linear_num_key_heads,
        arch.linear_num_value_heads,
        arch.linear_key_head_dim,
        arch.linear_value_head_dim,
    )


def widths(arch: ModelArch) -> tuple[int, int]:
    """(qk, vd): the query (and key) width n_k d_k and the value width n_v d_v."""
    n_k, n_v, d_k, d_v = dims(arch)
    return n_k * d_k, n_v * d_v


def in_proj_width(arch: ModelArch) -> int:
    """in_proj's output per token: q, k (qk each), v, z (vd each), beta, alpha (n_v each)."""
    qk, vd = widths(arch)
    return 2 * qk + 2 * vd + 2 * arch.linear_num_value_heads


def conv_width(arch: ModelArch) -> int:
    """The convolution's channels: q, k and v."""
    qk, vd = widths(arch)
    return 2 * qk + vd


def mixer_params(arch: ModelArch) -> int:
    """One GDN mixer's parameters (the layer's norm, fused into in_proj, not included)."""
    _, vd = widths(arch)
    h, n_v = arch.hidden_size, arch.linear_num_value_heads
    norm = (2 if arch.normalization == "LayerNorm" else 1) * arch.linear_value_head_dim
    conv = arch.linear_conv_kernel_dim * conv_width(arch)
    return h * in_proj_width(arch) + conv + 2 * n_v + norm + vd * h


def mixer_forward(arch: ModelArch) -> float:
    """Model FLOPs per token of one mixer's forward (Megatron's `gdn_layer_flops`)."""
    _, n_v, _, d_v = dims(arch)
    _, vd = widths(arch)
    h = arch.hidden_size
    conv = arch.linear_conv_kernel_dim * conv_width(arch)
    return 2.0 * (h * in_proj_width(arch) + conv + 4 * n_v * d_v * d_v + vd * h)


def mixer_gemms(arch: ModelArch, t: float, tp: int) -> list[tuple[float, float, float, float]]:
    """(M, K, N, count) of one mixer's forward GEMMs on one GPU for t tokens: in_proj
    (column-parallel), out_proj (row-parallel)."""
    _, vd = widths(arch)
    h = arch.hidden_size
    return [(t, h, in_proj_width(arch) / tp, 1), (t, vd / tp, h, 1)]


def saved_widths(arch: ModelArch, tp: int = 1, cp: int = 1) -> tuple[float, float]:
    """(bytes per token split by tp, of which out_proj's saved input) that one mixer keeps
    beyond its block's norm input, norm output and dropout mask (module docstring), in 16-bit
    values but for `fp32_widths`. Under CP Megatron asserts both head counts divide tp x cp:
    nothing is repeated, so tp and cp change nothing here."""
    n_k, n_v, d_k, _ = dims(arch)
    qk, vd = widths(arch)
    kernel = 4 * n_v * d_k + 2 * vd + 4 * n_v + 2 * n_v + 2 * CHUNK_SIZE * n_v
    norm = 2 * vd + 4 * n_v + 2 * vd + 2 * vd
    # the convolution's saved input is a view into qkvzba (module docstring): no bytes of its own
    width = 2 * in_proj_width(arch) + 4 * qk + 8 * n_k + kernel + norm
    return float(width + 2 * vd), 2.0 * vd


def fp32_widths(arch: ModelArch, norm_out: bool = True) -> float:
    """Of `saved_widths`, the bytes per token kept in fp32 whatever the training's dtype: the L2
    norms' rstd (8 n_k), the kernel's g (4 n_v: FLA's chunk_local_cumsum in fp32) and, unless
    gdn_norm_out drops it (norm_out False), the gated norm's rstd (4 n_v). FLA's A is written in
    k's dtype (fp32 in fp32 training) and widens with the rest."""
    n_k, n_v = arch.linear_num_key_heads, arch.linear_num_value_heads
    return 8.0 * n_k + 4.0 * n_v + (4.0 * n_v if norm_out else 0.0)


def norm_out_widths(arch: ModelArch) -> float:
    """Bytes per token (split by tp) that --recompute-modules gdn_norm_out drops (common.py: the
    gated norm and its all-to-all run under a CheckpointWithoutOutput): the norm's output, its
    rstd and out_proj's input; its inputs (the kernel's output and the gate) stay."""
    _, vd = widths(arch)
    return 2.0 * vd + 4 * arch.linear_num_value_heads + 2.0 * vd


def state_elements(arch: ModelArch) -> float:
    """Chunk-state elements per token: n_v d_k d_v per chunk of CHUNK_SIZE tokens."""
    _, n_v, d_k, d_v = dims(arch)
    return n_v * d_k * d_v / CHUNK_SIZE


def backward_working(
    arch: ModelArch, tokens: float, tp: int, cp: int = 1, value_bytes: float = 2.0
) -> float:
    """Bytes one mixer's backward holds beyond what it kept, for `tokens` tokens on one GPU, at
    its peak: FLA bc3b101d fla/ops/gated_delta_rule/chunk.py:233 (v0.5.1 :221), the WY
    gradients `prepare_wy_repr_bwd`, which allocates dk2, a new dv, db and dg2 (wy_fast.py:318-
    321; v0.5.1 :289-292) while the function's locals are alive: the recomputed w, u (:147)
    and states h with v_new (:160), the state gradients dh and the dv they update (:202),
    dq, dk, dw and dg (:217). Per token and value head: w, dq, dk, dw, dk2 5 d_k; u, v_new,
    dv, the new dv 4 d_v; h and dh 2 x d_k d_v / C; db 1; in the values' dtype (`value_bytes`,
    4 in fp32 training); dg and dg2 (FLA's ops common chunk_o.py:741, summed at :778; like g,
    FLA's cumsum, fp32) 4 bytes each whatever the dtype: 10 n_v bytes in all with db, 0.3% of
    Qwen3-Next's working set. The earlier steps hold less: the state-gradient pass (:202) w, u,
    h, v_new, dh and two dv; dq/dk/dw (:217) one dv and no dk2. cp changes nothing."""
    _, n_v, d_k, _ = dims(arch)
    _, vd = widths(arch)
    vk = n_v * d_k
    values = 5 * vk + 4 * vd + 2 * state_elements(arch) + n_v
    return tokens * (value_bytes * values + 8.0 * n_v) / tp


def scan_flops(arch: ModelArch) -> tuple[float, float]:
    """(forward, backward) FLOPs per token FLA's chunked kernels execute (module docstring),
    tp = 1."""
    _, n_v, d_k, d_v = dims(arch)
    c = CHUNK_SIZE
    fwd = FWD_STATE_FLOPS * d_k * d_v + FWD_KEY_FLOPS * c * d_k + FWD_VALUE_FLOPS * c * d_v
    bwd = BWD_STATE_FLOPS * d_k * d_v + BWD_KEY_FLOPS * c * d_k + BWD_VALUE_FLOPS * c * d_v
    return n_v * fwd, n_v * bwd


def scan_time(arch: ModelArch, gpu: Gpu, tokens: float, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of one mixer's chunked kernels per micro-batch of `tokens` on
    one GPU: their FLOPs at the large-GEMM fraction of the bf16 peak plus the HBM bytes of the
    chunk states, the per-token tensors and A at the achieved bandwidth, the backward's at
    BWD_ROOFLINE_FRACTION of that."""
    fwd_f, bwd_f = scan_flops(arch)
    _, n_v, d_k, d_v = dims(arch)
    states = tokens * state_elements(arch) / tp
    heads = tokens * n_v / tp  # token-heads on this GPU
    rate = gpu.peak_bf16 * gpu.e_bf16
    fwd_bytes = STATE_BYTES_FWD * states + heads * (IO_BYTES_FWD * (d_k + d_v) + 2 * CHUNK_SIZE)
    bwd_bytes = STATE_BYTES_BWD * states + heads * (IO_BYTES_BWD * (d_k + d_v) + 4 * CHUNK_SIZE)
    fwd = tokens * fwd_f / tp / rate + fwd_bytes / gpu.hbm
    bwd = (tokens * bwd_f / tp / rate + bwd_bytes / gpu.hbm) / BWD_ROOFLINE_FRACTION
    return fwd, bwd


def context_parallel_a2as(
    arch: ModelArch, tokens: float, tp: int, cp: int = 1
) -> tuple[float, ...]:
    """The bytes one GPU sends through each context-parallel all-to-all of one mixer's forward
    per micro-batch, in order (Megatron-LM d98e8a64 megatron/core/ssm/gated_delta_net/
    common.py:819-866 `a2a_cp_to_hp`: qkvzba in one all-to-all before the convolution, its
    heads permuted first so that one unsectioned all-to-all serves every section;
    :869-900 `a2a_hp_to_cp`: the gated norm's output back, 2 t vd / tp). The backward runs
    each one's gradient through the same all-to-all. cp changes no width: the heads divide
    tp x cp."""
    _, vd = widths(arch)
    return 2.0 * tokens * in_proj_width(arch) / tp, 2.0 * tokens * vd / tp


def context_parallel_bytes(
    arch: ModelArch, tokens: float, tp: int, cp: int = 1
) -> tuple[float, float]:
    """(forward, backward) bytes one GPU sends through the context-parallel all-to-alls of one
    mixer per micro-batch (`context_parallel_a2as`, summed; the backward moves their
    gradients)."""
    both = sum(context_parallel_a2as(arch, tokens, tp, cp))
    return both, both
