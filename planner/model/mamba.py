"""The Mamba-2 mixer of a hybrid stack's M layers: parameters, FLOPs, GEMMs, the activations its
training path keeps, and its chunked scan's work.

Megatron-LM d98e8a64 megatron/core/ssm/mamba_mixer.py (`MambaMixer`), built by mamba_layer.py
(`MambaLayer`, d_model = hidden_size only, so every other argument keeps its default: expand 2,
d_conv 4, chunk_size 128, no linear biases, a conv bias, the gated RMSNorm) with the TE spec of
megatron/core/models/hybrid/hybrid_layer_specs.py (in_proj a TELayerNormColumnParallelLinear:
the layer's norm is fused into it; out_proj a TERowParallelLinear). h hidden, H heads
(--mamba-num-heads, default 2h / P), P head dim (--mamba-head-dim, 64), d = H x P the inner width,
g groups (--mamba-num-groups, 8), n state dim (--mamba-state-dim, 128), Q the chunk size (128),
w the conv width (4); TP splits heads and groups (H / tp, g / tp; Megatron asserts both divide):

    in_proj     h -> 2d + 2gn + H   (z, x, B, C, dt)              column-parallel, no bias
    conv1d      d + 2gn channels of width w, and their bias         split by tp
    dt_bias, A_log, D   H each                                      split by tp
    norm        the gated RMSNorm over d (group size d / g)         split by tp
    out_proj    d -> h                                              row-parallel, no bias

Training (use_mem_eff_path, the default) runs mamba_ssm's `mamba_split_conv1d_scan_combined`
(state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py, `MambaSplitConv1dScanCombinedFn`):
conv1d, the SSD chunked scan and the z gate in one autograd function that saves only its input
zxBCdt and the scan's output before the gate (out_x), and recomputes the convolution and the
chunk states in its backward. Per token, what one M layer keeps for the backward (16-bit):

    the norm's input (fused into in_proj) and in_proj's saved input     2h + 2h   replicated w/o SP
    zxBCdt (the contiguous b-l-d copy the scan function saves)           2(2d + 2gn + H)
    out_x                                                                2d
    the gated RMSNorm's input and its rstd (fp32, one per group)         2d + 4g
    out_proj's input (the norm's output)                                 2d
    the residual add's dropout mask                                      h         replicated w/o SP

(`saved_widths`; the first and last lines are every block's, `planner.model.activations`; in
fp32 training every 16-bit value is 4 bytes, the rstd stays 4: `fp32_widths`). Its backward
(state-spaces/mamba 0048fbf2, the commit Megatron's pyproject.toml:250 pins, mamba_ssm/ops/
triton/ssd_combined.py `MambaSplitConv1dScanCombinedFn.backward` :903) recomputes xBC after the
convolution (:919-923, d + 2gn) and allocates the gradients of its input and of xBC
(`dzxbcdt = torch.empty_like(zxbcdt)` :928, `dxBC = torch.empty_like(xBC)` :930; the scan's
dx, dB, dC, dz and ddt are views of them), then runs `_mamba_chunk_scan_combined_bwd` (:397),
whose peak is the state passing's backward (:461-471): alive then are dt's clone (:440, in
the values' dtype) and the fp32 dA_cumsum and dt (:441, ssd_chunk_state.py:724-725), H each;
C B^T in fp32 (:443, Q g per token); the recomputed chunk states in fp32 (:444-447: H P n
per chunk of Q tokens, d n / Q per token); the z gate's dout_x (:450, ssd_chunk_scan.py:1386
`torch.empty_like(dout)`, d); the fp32 state gradients (:455); and the state dtype's
dstates and states_converted `_state_passing_bwd` allocates (ssd_state_passing.py:241, :243;
Megatron passes state_dtype, its params dtype: mamba_mixer.py:229-230, :704-705): 4 + 4 + 2 + 2
bytes per state element in bf16 states, 4 + 4 + 4 in fp32 ones (nothing to convert). After it
the fp32 dstates go, and in bf16 the fp32 states too (8 bytes a state element, 4 in fp32): more
than the fp32 partial dB, dC and d(C B^T) the later kernels allocate take at any length worth
planning (ssd_chunk_state.py:940, ssd_chunk_scan.py:1488, :1537: 4 x nsplits x g (2n + Q) a
token, nsplits set at :938-939, fewer the more chunks x heads there are per SM; Nemotron-H 56B
at tp 4, seq 4608 on an H100: nsplits 2, 10240 bytes a token against 8 d n / Q / tp = 65536
freed). That is the working set one M layer adds while its backward runs (`backward_working`).

Context parallelism (megatron/core/ssm/mamba_context_parallel.py:105-133, 171-190): the
all-to-alls before the convolution (one per tensor, `context_parallel_a2as`) hand each CP rank
the whole sequence for H / (tp cp) heads; where the groups on a TP rank, g / tp, are fewer than
cp, it repeats each group's B and C cp / (g / tp) times before the exchange
(`group_repeat_count`) and every CP rank holds one group (`ngroups_local_tpcp = 1`): B and C are
then n wide per token of the whole sequence, as if the model had tp x cp groups (`groups`). What
the scan saves and its backward allocates, and what the all-to-alls move, are that wide.

FLOPs. Model FLOPs follow Megatron's count (megatron/training/training.py `mamba_layer_flops`):
in_proj 2h(2d + 2gn + H), the scan 7dn, out_proj 2dh per token forward (Megatron writes d = 2h;
here d is the mixer's own H x P). The work the SSD kernels execute (Dao & Gu 2024,
arXiv:2405.21060 Sec. 6; mamba_ssm's forward `_chunk_cumsum_fwd`, `_chunk_state_fwd`,
`_state_passing_fwd`, `_bmm_chunk_fwd`, `_chunk_scan_fwd`), per token forward: C B^T over the
chunk 2Qgn, its masked product with x 2Qd, the chunk states B^T x 2nd and the output from the
states C h 2nd; the backward recomputes the states and C B^T (2nd + 2Qgn) and runs dstates 2nd,
dx 2Qd + 2nd, dB 2nd, dC 2nd, d(CB) 2Qd, the two C B^T gradients 4Qgn and ddA 2Qd
(`_mamba_chunk_scan_combined_bwd`): 10nd + 6Qd + 6Qgn. Time (`scan_time`): those FLOPs on the
GEMM roofline's large-GEMM rate plus the chunk states' HBM traffic (SSD_STATE_BYTES), additively;
the conv and the gate are elementwise, counted with every layer's elementwise passes over its
saved activations (`planner.model.layer_time`).
"""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model.gemm import Gpu

D_CONV = 4
"""The causal convolution's width (MambaMixer's d_conv default; MambaLayer passes none)."""

CHUNK_SIZE = 128
"""The SSD kernels' chunk length Q (MambaMixer's chunk_size default)."""

STATE_PASSING_BWD_BYTES = 12.0
"""Bytes per chunk-state element alive in the backward's state passing (mamba_ssm 0048fbf2
ssd_combined.py:444-471): the recomputed fp32 states (4), their fp32 gradients (4), and the
gradients and states `_state_passing_bwd` writes in the state dtype (ssd_state_passing.py:241,
:243; 2 + 2 in bf16; in fp32 training 4 and no converted copy): 12 either way."""

SSD_STATE_BYTES_FWD = 12.0
"""HBM bytes per chunk-state element in the forward (mamba_ssm ssd_combined.py): the chunk-state
kernel writes it in fp32 (4), the state passing reads that (4) and writes the bf16 state (2), the
chunk scan reads it (2)."""

SSD_STATE_BYTES_BWD = 34.0
"""The same in the backward: the recomputed states (write 4, read 4, write 2), the fp32 dstates
written by the chunk-scan kernel (4), read and rewritten by the state passing's backward with the
states (4 + 2 + 4), and read by the dx and dB kernels (4 + 4), the dC kernel reading the states
(2), ~34."""


def inner_width(arch: ModelArch) -> tuple[int, int, int, int]:
    """(d, H, g, n): the mixer's inner width, heads, groups and state dim."""
    return arch.mamba_inner, arch.mamba_heads, arch.mamba_num_groups, arch.mamba_state_dim


def in_proj_width(arch: ModelArch) -> int:
    """in_proj's output per token: z, x (d each), B, C (g n each), dt (H)."""
    d, heads, g, n = inner_width(arch)
    return 2 * d + 2 * g * n + heads


def groups(arch: ModelArch, tp: int = 1, cp: int = 1) -> int:
    """The groups whose B and C the scan sees per token over tp x cp ranks: the model's g, or
    tp x cp where context parallelism repeats each TP rank's g / tp groups to give every CP rank
    one (mamba_context_parallel.py:119-125, `group_repeat_count = cp / (g / tp)`)."""
    g = arch.mamba_num_groups
    return g if cp == 1 or g // tp >= cp else tp * cp


def zxbcdt_width(arch: ModelArch, tp: int = 1, cp: int = 1) -> int:
    """The scan's input zxBCdt per token (split by tp, after the CP all-to-all: `groups`)."""
    d, heads, _, n = inner_width(arch)
    return 2 * d + 2 * groups(arch, tp, cp) * n + heads


def mixer_params(arch: ModelArch) -> int:
    """One Mamba-2 mixer's parameters (the layer's norm, fused into in_proj, not included)."""
    d, heads, g, n = inner_width(arch)
    h = arch.hidden_size
    conv = (D_CONV + 1) * (d + 2 * g * n)
    return h * in_proj_width(arch) + conv + 3 * heads + d + d * h


def mixer_forward(arch: ModelArch) -> float:
    """Model FLOPs per token of one mixer's forward (Megatron's count, with d = H x P)."""
    d, _, _, n = inner_width(arch)
    h = arch.hidden_size
    return 2.0 * h * in_proj_width(arch) + 7.0 * d * n + 2.0 * d * h


def mixer_gemms(arch: ModelArch, t: float, tp: int) -> list[tuple[float, float, float, float]]:
    """(M, K, N, count) of one mixer's forward GEMMs on one GPU for t tokens: in_proj
    (column-parallel), out_proj (row-parallel)."""
    d, h = arch.mamba_inner, arch.hidden_size
    return [(t, h, in_proj_width(arch) / tp, 1), (t, d / tp, h, 1)]


def saved_widths(arch: ModelArch, tp: int = 1, cp: int = 1) -> tuple[float, float]:
    """(bytes per token split by tp, of which out_proj's saved input) that one mixer keeps
    beyond its block's norm input, norm output and dropout mask: zxBCdt (B and C as wide as
    `groups` makes them under CP), out_x, the gated norm's input and rstd, out_proj's input
    (module docstring), in 16-bit values but for `fp32_widths`."""
    d, _, g, _ = inner_width(arch)
    return 2.0 * zxbcdt_width(arch, tp, cp) + 2 * d + 2 * d + 4 * g + 2 * d, 2.0 * d


def fp32_widths(arch: ModelArch) -> float:
    """Of `saved_widths`, the bytes per token kept in fp32 whatever the training's dtype: the
    gated norm's rstd, one per group."""
    return 4.0 * arch.mamba_num_groups


def backward_working(
    arch: ModelArch, tokens: float, tp: int, cp: int = 1, value_bytes: float = 2.0
) -> float:
    """Bytes one mixer's backward holds beyond what it kept, for `tokens` tokens on one GPU, at
    its peak, the state passing's backward (module docstring): in the values' dtype
    (`value_bytes`, 4 in fp32 training) the recomputed xBC, dzxbcdt, dxBC, the z gate's dout_x
    (d) and dt's clone (H); the fp32 dA_cumsum and dt (8 H); C B^T in fp32 (4 Q g); 12 bytes
    per chunk-state element (the fp32 states and gradients and their copies in the state
    dtype; in fp32 training three fp32 tensors: 12 too). B and C as wide as `groups` makes
    them."""
    d, heads, _, n = inner_width(arch)
    g = groups(arch, tp, cp)
    xbc = d + 2 * g * n
    values = xbc + zxbcdt_width(arch, tp, cp) + xbc + d + heads  # xBC, dzxbcdt, dxBC, dout_x, dt
    states = STATE_PASSING_BWD_BYTES * d * n / CHUNK_SIZE
    per_token = value_bytes * values + states + 4 * CHUNK_SIZE * g + 8 * heads
    return tokens * per_token / tp


def scan_flops(arch: ModelArch) -> tuple[float, float]:
    """(forward, backward) FLOPs per token the SSD kernels execute (module docstring), tp = 1."""
    d, _, g, n = inner_width(arch)
    q = CHUNK_SIZE
    fwd = 2.0 * q * g * n + 2.0 * q * d + 4.0 * n * d
    bwd = 10.0 * n * d + 6.0 * q * d + 6.0 * q * g * n
    return fwd, bwd


def scan_time(arch: ModelArch, gpu: Gpu, tokens: float, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of one mixer's SSD kernels per micro-batch of `tokens` on one
    GPU: their FLOPs at the large-GEMM fraction of the bf16 peak plus the chunk states' HBM
    bytes at the achieved bandwidth."""
    fwd_f, bwd_f = scan_flops(arch)
    states = tokens * arch.mamba_inner * arch.mamba_state_dim / CHUNK_SIZE / tp
    rate = gpu.peak_bf16 * gpu.e_bf16
    fwd = tokens * fwd_f / tp / rate + SSD_STATE_BYTES_FWD * states / gpu.hbm
    bwd = tokens * bwd_f / tp / rate + SSD_STATE_BYTES_BWD * states / gpu.hbm
    return fwd, bwd


def context_parallel_a2as(
    arch: ModelArch, tokens: float, tp: int, cp: int = 1
) -> tuple[float, ...]:
    """The bytes one GPU sends through each context-parallel all-to-all of one mixer's forward
    per micro-batch, in order, as Megatron runs them one tensor at a time (Megatron-LM d98e8a64
    megatron/core/ssm/mamba_context_parallel.py:162, :165, :187, :190, :193 `_all_to_all_cp2hp`
    of z, x, B, C and dt before the convolution, B and C repeated first where `groups` says so;
    :208 `_all_to_all_hp2cp` of the scan's output y; called from mamba_mixer.py:512 and :728).
    Each is a `_AllToAll` (tensor_parallel/mappings.py:424) whose backward runs the same
    all-to-all on the gradient: the backward moves as many, as large."""
    d, heads, _, n = inner_width(arch)
    bc = groups(arch, tp, cp) * n
    return tuple(2.0 * tokens * w / tp for w in (d, d, bc, bc, heads, d))


def context_parallel_bytes(
    arch: ModelArch, tokens: float, tp: int, cp: int = 1
) -> tuple[float, float]:
    """(forward, backward) bytes one GPU sends through the context-parallel all-to-alls of one
    mixer per micro-batch: zxBCdt from sequence-sharded to head-sharded before the convolution,
    the output back after the scan (`context_parallel_a2as`, summed); the backward moves their
    gradients."""
    both = sum(context_parallel_a2as(arch, tokens, tp, cp))
    return both, both
