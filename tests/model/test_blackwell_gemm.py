"""Blackwell's FP8 GEMMs (planner.model.gemm: BLACKWELL_FP8_SPEEDUP, linear_fraction, quant_bytes)
against the kernel measurements they come from, and the parts they leave alone (Hopper).

Oracle for the speeds: vLLM PR #19566 (benchmarks/kernels/bench_fp8_gemm.py on B200, Llama-3.1-8B
N=6144 K=4096, M=16384): torch bf16 1512.8 TFLOP/s, per-tensor FP8 CUTLASS without quantisation
2544.7 TFLOP/s. The rest is hand arithmetic in the comments.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.model import gemm
from planner.model.layer_time import FP8_CEILING_FRACTION, GEMM_EFFICIENCY_MAX, gpu_of

B200_M, B200_N, B200_K = 16384, 6144, 4096
B200_BF16_TFLOPS = 1512.8
B200_FP8_TFLOPS = 2544.7


def _tflops(peak: float, ridge: float, e: float) -> float:
    seconds = gemm.gemm_time(B200_M, B200_K, B200_N, peak, ridge, e)
    return 2.0 * B200_M * B200_K * B200_N / seconds / 1e12


def test_b200_fp8_gemm_follows_the_measured_speedup_over_bf16() -> None:
    # e_bf16 = min(GEMM_EFFICIENCY_MAX 0.7594, MAMF 1745 / 2250 = 0.7756) = 0.7594; e_fp8 =
    # min(FP8_CEILING_FRACTION 0.8348 x 3432.5 / 4500 = 0.637, 0.95 x 0.7756 x 1.69 / 2 = 0.623)
    # = 0.623; ridge 2250 / 8 = 281 FLOP/B, I = 2137 FLOP/B: bf16 0.7594 / (1 + 0.7594 x 0.1316)
    # x 2250 = 1553, FP8 0.623 / (1 + 0.623 x 0.1316) x 4500 = 2586 TFLOP/s: 1.67 x, against the
    # measured 2544.7 / 1512.8 = 1.68 x
    g = gpu_of(job("llama3.1-8b", "b200-sxm-180gb", 8, 8192, 64, precision="fp8"))
    bf16 = _tflops(g.peak_bf16, g.ridge, g.e_bf16)
    fp8 = _tflops(g.peak_linear, g.ridge, g.e_linear)
    assert fp8 / bf16 == pytest.approx(B200_FP8_TFLOPS / B200_BF16_TFLOPS, rel=0.03)
    assert bf16 == pytest.approx(B200_BF16_TFLOPS, rel=0.05)
    assert fp8 == pytest.approx(B200_FP8_TFLOPS, rel=0.06)


def test_blackwell_fp8_fraction_is_the_least_of_ceiling_and_speedup() -> None:
    # B200: min(0.8348 x 3432.5 / 4500 = 0.637, 1.69 / 2 x the bf16 rate the speedup was measured
    # against, 0.95 of the bf16 MAMF fraction 1745 / 2250: 0.95 x 0.7756 x 0.845 = 0.623) = 0.623;
    # GB200: min(0.8348 x 3615.6 / 5000 = 0.604, 0.95 x 1822 / 2500 x 0.845 = 0.585) = 0.585
    b200 = gpu_of(job("llama3.1-8b", "b200-sxm-180gb", 8, 8192, 64, precision="fp8"))
    gb200 = gpu_of(job("llama3.1-8b", "gb200-nvl72", 8, 8192, 64, precision="fp8"))
    b200_ceiling = FP8_CEILING_FRACTION * 3432.5 / 4500
    b200_speedup = min(GEMM_EFFICIENCY_MAX, 0.95 * 1745.0 / 2250) * 1.69 / 2
    assert b200.e_linear == pytest.approx(min(b200_ceiling, b200_speedup), rel=1e-9)
    gb200_ceiling = FP8_CEILING_FRACTION * 3615.6 / 5000
    gb200_speedup = 0.95 * 1822.0 / 2500 * 1.69 / 2
    assert gb200.e_linear == pytest.approx(min(gb200_ceiling, gb200_speedup), rel=1e-9)


def test_bf16_jobs_and_hopper_fp8_keep_their_ceilings() -> None:
    # bf16 on B200: e_linear = e_bf16 = min(GEMM_EFFICIENCY_MAX, MAMF 1745 / 2250 = 0.776), no
    # speedup cap; FP8 on H100: FP8_CEILING_FRACTION of its MAMF 1402.6 / 1979 = 0.7087
    # (0.8348 x 0.7087 = 0.592: 2 x 0.592 / 0.7594 = 1.56 x bf16), not capped
    b200 = gpu_of(job("llama3.1-8b", "b200-sxm-180gb", 8, 8192, 64))
    h100 = gpu_of(job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, precision="fp8"))
    assert b200.e_linear == b200.e_bf16 == pytest.approx(min(GEMM_EFFICIENCY_MAX, 1745 / 2250))
    assert h100.e_linear == pytest.approx(FP8_CEILING_FRACTION * 1402.6 / 1979, rel=1e-9)


@pytest.mark.parametrize(
    ("recipe", "hopper", "blackwell"),
    [
        ("delayed", 4.0, 3.0),  # read bf16 2, write FP8 1 (+ its transpose 1 on Hopper)
        ("tensorwise", 6.0, 5.0),  # the same after the amax pass (+2)
        ("mxfp8", 4.0 + 2 / 32, 4.0 + 2 / 32),  # both orientations and their scales anyway
        ("blockwise", 4.0 + 8 / 128, 4.0 + 8 / 128),
    ],
)
def test_blackwell_writes_no_fp8_transpose(recipe: str, hopper: float, blackwell: float) -> None:
    assert gemm.quant_bytes(recipe, blackwell=False) == pytest.approx(hopper)
    assert gemm.quant_bytes(recipe, blackwell=True) == pytest.approx(blackwell)
