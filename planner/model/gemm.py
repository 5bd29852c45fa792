"""GEMM kernels on the roofline: the GPU as the roofline sees it (`Gpu`: peaks, achieved HBM
bandwidth, ridge point, large-GEMM fractions), a forward GEMM's time, the row padding of the
routed experts' grouped GEMM, the HBM traffic of FP8's and NVFP4's operand quantisation, and the
NVFP4 GEMM's ceiling.

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
Engine's quantisers; DeepSeek-V3's blockwise scaling; Blackwell's MXFP8), and NVFP4 by its own
entry there; torchtitan's float8 (torchao) without torch.compile casts op by op
(`eager_float8`). NVFP4 GEMMs run at `fp4_ceiling` of the FP4 peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from planner.inputs.hardware import GpuSpec

GROUPED_GEMM_TILE_ROWS = 128
"""Rows of the grouped GEMM's tile along the token dimension: each expert's tokens are padded to
a multiple (DeepGEMM's contiguous layout aligns every expert to 128 rows,
`get_m_alignment_for_contiguous_layout`; CUTLASS / cuBLAS Hopper grouped kernels use 128-row
tiles). It only matters where an expert gets few tokens (fine-grained experts, small batches)."""

FP8_QUANT_BYTES: dict[str, float] = {
    "delayed": 4.0,
    "tensorwise": 6.0,
    "rowwise": 2 * (2.0 + 2.0 + 1.0),
    "rowwise_with_gw_hp": 2.0 + 2.0 + 1.0,
    "blockwise": 4.0 + 2 * 4.0 / 128,
    "mxfp8": 4.0 + 2 * 1.0 / 32,
    "nvfp4": 2.0 + 2.0 + 2 * (0.5 + 1.0 / 16),
}
"""HBM bytes moved per element to quantise a GEMM operand for FP8, by Megatron --fp8-recipe
(Transformer Engine's quantisers; each GEMM's input and output gradient per micro-batch, its
weight once per step: Megatron passes is_first_microbatch, so TE caches the FP8 weight and its
transpose across micro-batches). delayed: one fused cast-transpose with the previous steps' amax
(read bf16 2, write fp8 and its transpose 1 + 1). tensorwise (current scaling): the same after a
pass that reads the tensor for its amax (+2). blockwise (DeepSeek-V3's 1 x 128 / 128 x 128): the
scale is local to its block, so one pass writes both orientations and one fp32 scale per 128
elements each. mxfp8 (Blackwell, 1 x 32 blocks): the same with one 1-byte E8M0 scale per 32.
rowwise (torchao's float8 under torchtitan: one scale per row of each GEMM operand, so each
orientation a GEMM takes is quantised on its own: a pass reading the bf16 tensor for the rows'
amaxes, then one reading it again and writing fp8, 2 + 2 + 1 bytes, for the forward / input-
gradient orientation and again for the weight gradient's); rowwise_with_gw_hp runs the weight
gradient in bf16, so the activations and output gradients take one orientation.
nvfp4 (Transformer Engine NVFP4BlockScaling @d0067d0d: 4-bit E2M1 values with a 1-byte E4M3 scale
per 16 and a per-tensor fp32 scale): a pass that reads the bf16 tensor for its two amaxes (plain
rows, and the columns after the random Hadamard transform the weight gradient's operands take;
TE fuses them, `hadamard_transform_amax`), then one that reads it again and writes both
orientations (0.5 + 1/16 bytes each; the columnwise copy Hadamard-transformed). The
GEMMs themselves run at the part's FP8 matmul ceiling under every recipe but blockwise on Hopper
(HOPPER_BLOCKWISE_GEMM_SHARE of it: Transformer Engine's cuBLAS block-scaled kernels), and
Blackwell's tensor cores apply MX scales in hardware (on Blackwell at most BLACKWELL_FP8_SPEEDUP x
the bf16 rate, `linear_fraction`)."""


COMPILED_AMAX_SAVING = 2.0
"""HBM bytes per element and quantised orientation that torchao's dynamic scaling (tensorwise,
rowwise) saves under torch.compile (torchtitan's
[torchtitan] compile with torchao's Float8: "torch.compile fuses the float8 scaling/casting
kernels", pytorch/torchtitan b5bcd76c components/quantization/float8.md): Inductor fuses the amax
reduction into the kernel that produces the operand (a reduction fused with its pointwise
producer), so the separate pass that reads the bf16 tensor for its amax (tensorwise's 2 bytes
over delayed scaling) is gone; the cast itself stays."""


AMAX_PASSES = {"tensorwise": 1, "rowwise": 2, "rowwise_with_gw_hp": 1}
"""The separate amax passes of torchao's dynamic scaling that torch.compile fuses, by recipe: one
for a per-tensor scale (both orientations share it), one per quantised orientation for per-row
scales."""


EAGER_CAST_BYTES = (2.0 + 2.0) + 2.0 + (2.0 + 4.0) + (4.0 + 4.0) + (4.0 + 4.0) + (4.0 + 1.0)
"""HBM bytes per element of one torchao dynamic float8 cast of a bf16 tensor run eagerly
(`hp_tensor_to_float8_dynamic`, pytorch/ao 36027d82 torchao/float8/float8_scaling_utils.py:29-72),
one kernel per op, nothing fused: the amax, torch.abs (read bf16 2, write bf16 2) then max or, per
row, amax (read 2; float8_utils.py:65, :69); the scaling, .to(float32) (read 2, write fp32 4)
then * scale (read 4, write 4; float8_training_tensor.py:153); the saturation, clamp (read 4,
write 4) then .to(float8) (read 4, write 1; float8_utils.py:136-137): 33. The scale's own ops
(float8_utils.py:45-53) touch one value per tensor or row: nothing per element."""

FP8_LAYOUT_COPY_BYTES = 1.0 + 1.0
"""HBM bytes per element of the copy torchao makes of a float8 GEMM operand in the wrong layout
for torch._scaled_mm (row-major left, column-major right; pytorch/ao 36027d82
torchao/float8/float8_ops.py:342-345, read fp8 1, write 1): Float8Linear's input-gradient GEMM
takes the weight row-major (float8_linear.py:143-146) and its weight-gradient GEMM the output
gradient transposed and the input row-major (:197-200), so the weight, the input and the output
gradient are each copied once per backward where their GEMMs run in float8."""


class EagerFloat8(NamedTuple):
    """HBM bytes per element of torchao's Float8Linear casts run eagerly (`eager_float8`): of
    each GEMM's input and of its output gradient per micro-batch, and of its weight in the
    forward and in the backward."""

    operand: float
    weight_fwd: float
    weight_bwd: float


def eager_float8(recipe: str) -> EagerFloat8 | None:
    """torchao 36027d82's Float8Linear without torch.compile, by recipe (float8/config.py:331-378;
    each cast EAGER_CAST_BYTES, each layout copy FP8_LAYOUT_COPY_BYTES); None for a recipe it
    does not run (Transformer Engine's). It saves the bf16 input and weight for the backward
    (float8_linear.py:45) and casts afresh for each GEMM: the input in the forward (:56) and
    again for the weight gradient (:185), the output gradient for the input gradient (:113) and
    again for the weight gradient (:167), the weight in the forward (:73) and again for the input
    gradient (:131), so under tensorwise and rowwise each operand is cast twice and copied once
    (33 + 33 + 2 = 68 bytes; one tensorwise scale serves both casts of a tensor but is computed
    twice). rowwise_with_gw_hp runs the weight gradient in bf16 (config.py:364-368: both of its
    operands DISABLED, torch.mm takes the transposes as they are): the input and the output
    gradient are cast once (33), the weight twice and copied once (68), as tensorwise's."""
    if recipe not in AMAX_PASSES:
        return None
    cast, copy = EAGER_CAST_BYTES, FP8_LAYOUT_COPY_BYTES
    operand = cast if recipe == "rowwise_with_gw_hp" else 2 * cast + copy
    return EagerFloat8(operand, cast, cast + copy)


def quant_bytes(recipe: str, blackwell: bool, compiled: bool = False) -> float:
    """FP8_QUANT_BYTES of a recipe (or "nvfp4") on a GPU. Blackwell's FP8 GEMMs read either
    operand layout (Transformer Engine `is_non_tn_fp8_gemm_supported`; `planner.model.buffers`
    keeps one FP8 copy there too), so delayed and tensorwise scaling write no transpose: one FP8
    byte less per element. MXFP8, blockwise and NVFP4 scales run along one axis and keep both
    orientations anyway. `compiled` (the training step under torch.compile): tensorwise less
    COMPILED_AMAX_SAVING, rowwise less it for each orientation."""
    q = FP8_QUANT_BYTES[recipe]
    if compiled:
        q -= COMPILED_AMAX_SAVING * AMAX_PASSES.get(recipe, 0)
    return q - 1.0 if blackwell and recipe in ("delayed", "tensorwise") else q


BLACKWELL_FP8_SPEEDUP = 1.69
"""An FP8 GEMM's throughput over the same GEMM's in bf16 on Blackwell (B200, GB200) at training
shapes, where the dense peaks promise 2. Measured on B200 (vLLM PR #19566, bench_fp8_gemm.py,
per-tensor FP8 CUTLASS without quantisation against torch bf16, Llama-3.1-8B N=6144 K=4096):
2544.7 / 1512.8 = 1.68 at M=16384, 2341.4 / 1379.7 = 1.70 at M=1024. FP8 halves only the
tensor-core time of each output tile; the accumulator read-out, conversion and store of the tile
and the operand pipeline's synchronisation take as long as in bf16, and on Blackwell those units
did not grow with the tensor cores (H100 -> B200: bf16 tensor throughput x2.25, shared-memory
bandwidth and special-function units unchanged: FlashAttention-4, arXiv:2603.05451 abstract, and
Together AI's FlashAttention-4 blog). A fixed non-MMA share f of the bf16 tile time gives
1 / ((1 - f) / 2 + f) = 1.69 at f = 0.18. Hopper needs no such cap: its measured FP8 ceiling
(H100 MAMF 1402.6 of 1979) is itself at most 2 x 0.709 / 0.768 = 1.85 x its bf16 GEMM, and a
hand-tuned FP8 kernel reaches it (DeepGEMM PR #74: 1404-1470 TFLOP/s at M=4096 N=7168 K=16384 on
H800, H100's SMs and FP8 peak); Transformer Engine's GEMMs in training reach the fitted
`layer_time.FP8_CEILING_FRACTION` of it. B200's best-shape FP8 MAMF
(3432.5 of 4500, hardware catalog) is 1.97 x its bf16 MAMF: one favourable shape of a sweep,
not what a training step's GEMMs reach. Against it: Transformer Engine's B300 benchmark
(benchmarks/gemm_kernels.py) runs a layer's FP8 GEMMs 1.92 x (tensorwise) and 1.83 x (MXFP8) its
bf16 ones with pre-quantised operands; on B300 this cap does not bind (its MAMF FP8 ceiling
does), and lifting it would speed B200's and GB200's FP8 GEMMs 3-4%, which their MLPerf FP8 rows,
already predicted fast, do not want: kept as measured on B200."""


BLACKWELL_BF16_MAMF_SHARE = 0.95
"""The bf16 rate BLACKWELL_FP8_SPEEDUP multiplies, as a share of the part's measured bf16 matmul
ceiling (MAMF): the speedup is the FP8 over the bf16 GEMM at one shape, and vLLM's torch bf16
GEMM there (M=16384 N=6144 K=4096, vLLM PR #19566) ran 1512.8 TFLOP/s on B200, a large-GEMM
fraction of 0.737 through the roofline (ridge 2250 / 8 = 281 FLOP/B, I = 2137): 0.95 of B200's
MAMF fraction 1745 / 2250 = 0.776. So the FP8 cap is 1.69 x a measured bf16 rate (2586 TFLOP/s
at that shape against the measured 2544.7), not 1.69 x the fitted GEMM_EFFICIENCY_MAX."""


HOPPER_BLOCKWISE_GEMM_SHARE = 0.83
"""An FP8 GEMM's throughput under the blockwise recipe (1 x 128 / 128 x 128 scales) over the same
GEMM's with one scale per tensor, on Hopper. Hopper's tensor cores take no block scales: each
128-deep slice of the reduction is scaled and added to the FP32 accumulator on the CUDA cores
(DeepSeek-V3 arXiv:2412.19437 Sec. 3.3.2's promotion), and cuBLAS's sm90 block-scaled kernels that
Transformer Engine calls pay for it. Measured: Transformer Engine's GEMM benchmark on H200 NVL for
a 5B model config (h 4096, ffn 16384, 15,872 tokens; TransformerEngine d0067d0d
docs/examples/gemm_profiling/gemm_profiling.rst, "Worked Example: 5B Model on H200", autocast,
quantisation included), per layer: delayed 18.978 ms, current 20.285, block 22.882. With
planner's quantisation traffic (FP8_QUANT_BYTES: 1.29, 1.94 and 1.31 ms of it on H200) the
GEMMs must run at 0.82 (block over delayed, 1.206) or 0.85 (block over current, 1.128) of the
per-tensor rate; 0.83 between the two (tests/model/test_fp8_recipes_hopper.py). DeepGEMM's
hand-tuned blockwise kernels come within ~10% of the per-tensor roofline on H800; Megatron's
blockwise recipe runs Transformer Engine's. Blackwell applies block scales in its tensor cores
(MXFP8; TE runs the blockwise recipe there as MXFP8): 1 there."""


def linear_fraction(
    e_linear: float,
    e_bf16: float,
    fp8: bool,
    blackwell: bool,
    bf16_ceiling: float | None,
    recipe: str,
) -> float:
    """Large-GEMM fraction of the FP8 (or bf16) peak for the decoder's linear layers: on
    Blackwell an FP8 GEMM runs at most BLACKWELL_FP8_SPEEDUP x its bf16 rate (that rate at most
    BLACKWELL_BF16_MAMF_SHARE of the part's bf16 ceiling `bf16_ceiling`, where measured), i.e.
    at most BLACKWELL_FP8_SPEEDUP / 2 of that bf16 fraction of the (twice as high) FP8 peak; on
    Hopper the blockwise recipe's GEMMs run at HOPPER_BLOCKWISE_GEMM_SHARE of that fraction."""
    if fp8 and blackwell:
        if bf16_ceiling is not None:
            e_bf16 = min(e_bf16, BLACKWELL_BF16_MAMF_SHARE * bf16_ceiling)
        return min(e_linear, e_bf16 * BLACKWELL_FP8_SPEEDUP / 2.0)
    if fp8 and recipe == "blockwise":
        return e_linear * HOPPER_BLOCKWISE_GEMM_SHARE
    return e_linear


BLACKWELL_NON_MMA_TIME = 0.159
"""Time per FLOP of a Blackwell GEMM that a faster tensor-core format does not shorten (the tile's
accumulator read-out, conversion and store, scale-factor handling, pipeline synchronisation), in
units of 1 / the part's bf16 peak: an M x K x N GEMM at precision p takes 2MKN x (1 / peak_p +
BLACKWELL_NON_MMA_TIME / peak_bf16) at best, so its best fraction of peak_p is
1 / (1 + BLACKWELL_NON_MMA_TIME x peak_p / peak_bf16) (`fp4_ceiling`). Measured on B200 from one
NVFP4 GEMM: cuBLASLt through torch._scaled_mm at M = K = N = 6144 ran 5.50 of 9.0 PFLOP/s, the
fastest of the square shapes 1024-8192 the benchmark printed (pytorch/ao PR #2427,
bench_matmul.py --recipe nvfp4; 8192 ran 5.37), so 2250 x (1 / 5500 - 1 / 9000) = 0.159. Check
(tests/model/test_nvfp4.py): the same time predicts B200's FP8 best-shape rate
1 / (1 / 4500 + 0.159 / 2250) = 3414 TFLOP/s against the MAMF table's measured 3432.5. It scales
with the clock through peak_bf16 (GB200 runs B200's die 11% faster), and on Blackwell Ultra
(B300, GB300: FP4 peaks 5.6-6 x bf16 against B200's 4) it makes the faster FP4 tensor cores worth
less than their peak."""


def fp4_ceiling(peak_fp4: float, peak_bf16: float) -> float:
    """Best-shape NVFP4 GEMM throughput over the FP4 peak (`BLACKWELL_NON_MMA_TIME`): B200 0.611,
    GB200 the same, B300 (12600 over 2250) 0.529, GB300 (15000 over 2500) 0.512."""
    return 1.0 / (1.0 + BLACKWELL_NON_MMA_TIME * peak_fp4 / peak_bf16)


@dataclass(frozen=True)
class Gpu:
    """The GPU as the roofline sees it (`layer_time.gpu_of` builds it from the job)."""

    peak_bf16: float
    peak_linear: float
    """Peak for the decoder's linear layers (FP8 or FP4 when the job is fp8 or fp4)."""
    hbm: float
    """Achieved HBM bandwidth, bytes/s."""
    ridge: float
    """bf16 peak / nominal HBM bandwidth, FLOP per byte."""
    e_bf16: float
    """Large-GEMM fraction of the bf16 peak: GEMM_EFFICIENCY_MAX, at most the measured ceiling."""
    e_linear: float
    """The same for the decoder's linear layers, in the job's precision."""


def fp32_peak(spec: GpuSpec, gpu: Gpu) -> float:
    """The CUDA cores' FP32 FLOP/s (`GpuSpec.peak_tflops_fp32`) at the clock the job's power cap
    leaves (the bf16 peak's ratio to its rated value)."""
    return spec.peak_tflops_fp32 * 1e12 * gpu.peak_bf16 / spec.peak_flops("bf16")


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
