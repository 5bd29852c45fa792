"""GEMM kernels on the roofline: the GPU as the roofline sees it (`Gpu`: peaks, achieved HBM
bandwidth, ridge point, large-GEMM fractions), a forward GEMM's time, the row padding of the
routed experts' grouped GEMM, and the HBM traffic of FP8's operand quantisation.

A GEMM of 2MKN FLOPs runs at (`gemm_efficiency`, `gemm_time`)

    peak x e / (1 + e x ridge / I),    e the large-GEMM fraction of the peak,

I = 1 / (1/M + 1/K + 1/N) its arithmetic intensity in FLOP per byte of 16-bit operands (set by
the smallest dimension: a thin TP slice, a small micro-batch, a rarely-routed expert) and
ridge = bf16 peak / HBM bandwidth the GPU's roofline ridge point. This is the additive roofline: the
GEMM's FLOPs at e x peak plus its operand traffic (2MKN / I bytes) at HBM speed, so a GEMM with
I = e x ridge gets half of e and memory-bound ones fall off like I / ridge; no constant beyond e
(`planner.model.layer_time`: GEMM_EFFICIENCY_MAX, at most the part's measured matmul ceiling).

Routed experts run as one grouped GEMM whose experts are each padded to the kernel's row tile
(`grouped_rows`; DeepGEMM's contiguous layout, CUTLASS / cuBLAS Hopper grouped kernels). FP8
quantises each GEMM operand at FP8_QUANT_BYTES per element by Megatron --fp8-recipe (Transformer
Engine's quantisers; DeepSeek-V3's blockwise scaling; Blackwell's MXFP8).
"""

from __future__ import annotations

from dataclasses import dataclass

GROUPED_GEMM_TILE_ROWS = 128
"""Rows of the grouped GEMM's tile along the token dimension: each expert's tokens are padded to
a multiple (DeepGEMM's contiguous layout aligns every expert to 128 rows,
`get_m_alignment_for_contiguous_layout`; CUTLASS / cuBLAS Hopper grouped kernels use 128-row
tiles). It only matters where an expert gets few tokens (fine-grained experts, small batches)."""

FP8_QUANT_BYTES: dict[str, float] = {
    "delayed": 4.0,
    "tensorwise": 6.0,
    "blockwise": 4.0 + 2 * 4.0 / 128,
    "mxfp8": 4.0 + 2 * 1.0 / 32,
}
"""HBM bytes moved per element to quantise a GEMM operand for FP8, by Megatron --fp8-recipe
(Transformer Engine's quantisers; each GEMM's input and output gradient per micro-batch, its
weight once per step: Megatron passes is_first_microbatch, so TE caches the FP8 weight and its
transpose across micro-batches). delayed: one fused cast-transpose with the previous steps' amax
(read bf16 2, write fp8 and its transpose 1 + 1). tensorwise (current scaling): the same after a
pass that reads the tensor for its amax (+2). blockwise (DeepSeek-V3's 1 x 128 / 128 x 128): the
scale is local to its block, so one pass writes both orientations and one fp32 scale per 128
elements each. mxfp8 (Blackwell, 1 x 32 blocks): the same with one 1-byte E8M0 scale per 32. The
GEMMs themselves run at the part's FP8 matmul ceiling under every recipe: DeepGEMM's published
1 x 128 / 128 x 128 blockwise kernels reach the per-tensor roofline within ~10% on H800
(tests/model/test_time_moe.py), and Blackwell's tensor cores apply MX scales in hardware."""


@dataclass(frozen=True)
class Gpu:
    """The GPU as the roofline sees it (`layer_time.gpu_of` builds it from the job)."""

    peak_bf16: float
    peak_linear: float
    """Peak for the decoder's linear layers (FP8 when the job is fp8)."""
    hbm: float
    """Achieved HBM bandwidth, bytes/s."""
    ridge: float
    """bf16 peak / nominal HBM bandwidth, FLOP per byte."""
    e_bf16: float
    """Large-GEMM fraction of the bf16 peak: GEMM_EFFICIENCY_MAX, at most the measured ceiling."""
    e_linear: float
    """The same for the decoder's linear layers, in the job's precision."""


def gemm_efficiency(m: float, k: float, n: float, ridge: float, e: float) -> float:
    """Fraction of peak for an M x K x N GEMM (additive roofline): e / (1 + e x ridge / I), e the
    large-GEMM fraction."""
    intensity = 1.0 / (1.0 / m + 1.0 / k + 1.0 / n)
    return e / (1.0 + e * ridge / intensity)


def gemm_time(
    m: float, k: float, n: float, peak: float, ridge: float, e: float, count: float = 1
) -> float:
    """Seconds for `count` forward GEMMs of M x K x N at large-GEMM fraction e of `peak`."""
    if m <= 0 or k <= 0 or n <= 0 or count <= 0:
        return 0.0
    return count * 2.0 * m * k * n / (peak * gemm_efficiency(m, k, n, ridge, e))


def grouped_rows(m: float) -> float:
    """Rows a grouped-GEMM expert really computes: its tokens padded to the kernel's row tile,
    on average half a tile more (the remainder is uniform), never less than one tile."""
    return max(GROUPED_GEMM_TILE_ROWS, m + GROUPED_GEMM_TILE_ROWS / 2)
