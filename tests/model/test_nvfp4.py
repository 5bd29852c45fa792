"""NVFP4 training (precision "fp4"): the GEMM ceiling (planner.model.gemm.fp4_ceiling,
BLACKWELL_NON_MMA_TIME), the quantisation bytes, weights and saved inputs, the parameter gather,
and MFU against the FP4 peak.

Oracles: the B200 NVFP4 GEMM the ceiling is measured from (pytorch/ao PR #2427, bench_matmul.py
--recipe nvfp4: 5.50 PFLOP/s at M = K = N = 6144 of a 9.0 PFLOP/s dense peak), the MAMF table's
B200 FP8 figure (3432.5 TFLOP/s, hardware catalog) as an independent check of the same non-MMA
time, the catalog's dense peaks, and hand arithmetic in the comments.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.cli.report import performance_dict
from planner.inputs.layout import Layout
from planner.model import buffers, cost, gemm, stage_sync
from planner.model.layer_time import FP8_CEILING_FRACTION, GEMM_EFFICIENCY_MAX, gpu_of
from planner.model.shard import LINEAR_INPUT_BYTES
from planner.model.stage_activations import shard
from planner.model.stage_params import decoder_params

B200 = "b200-sxm-180gb"


def test_the_non_mma_time_reproduces_the_measured_b200_nvfp4_gemm() -> None:
    # 9000 / (1 + 0.159 x 9000 / 2250) = 9000 / 1.636 = 5501 TFLOP/s against the measured 5500
    best = gemm.fp4_ceiling(9000.0, 2250.0) * 9000.0
    assert best == pytest.approx(5500.0, rel=0.01)


def test_the_same_non_mma_time_predicts_b200s_measured_fp8_ceiling() -> None:
    # an independent measurement: FP8 at 4500 (2 x bf16) gives 1 / (1 / 4500 + 0.159 / 2250) =
    # 4500 / 1.318 = 3414 TFLOP/s; the MAMF table measured 3432.5 (within 1%)
    fp8 = 1.0 / (1.0 / 4500.0 + gemm.BLACKWELL_NON_MMA_TIME / 2250.0)
    assert fp8 == pytest.approx(3432.5, rel=0.01)


def test_faster_fp4_tensor_cores_gain_less_than_their_peak() -> None:
    # B300: FP4 peak 12600 over bf16 2250 (5.6 x), GB300: 15000 over 2500 (6 x), B200: 4 x
    b200 = gemm.fp4_ceiling(9000.0, 2250.0)
    b300 = gemm.fp4_ceiling(12600.0, 2250.0)
    gb300 = gemm.fp4_ceiling(15000.0, 2500.0)
    assert b300 == pytest.approx(1 / (1 + 0.159 * 5.6), rel=1e-6)
    assert gb300 < b300 < b200 == pytest.approx(0.611, abs=0.001)
    assert 12600.0 * b300 > 9000.0 * b200  # still faster in absolute terms


def test_fp4_jobs_run_their_linear_layers_at_the_fp4_peak() -> None:
    # B200: peak 9.0e15; fraction min(GEMM_EFFICIENCY_MAX, FP8_CEILING_FRACTION x 0.611)
    g = gpu_of(job("llama3.1-8b", B200, 8, 8192, 64, precision="fp4"))
    assert g.peak_linear == pytest.approx(9.0e15)
    expected = min(GEMM_EFFICIENCY_MAX, FP8_CEILING_FRACTION * gemm.fp4_ceiling(9000.0, 2250.0))
    assert g.e_linear == pytest.approx(expected)
    fp8 = gpu_of(job("llama3.1-8b", B200, 8, 8192, 64, precision="fp8"))
    # an FP4 GEMM is faster than the FP8 one (5.2 against 2.8 PFLOP/s at large shapes)
    assert g.peak_linear * g.e_linear > 1.5 * fp8.peak_linear * fp8.e_linear
    assert g.peak_bf16 == fp8.peak_bf16 and g.e_bf16 == fp8.e_bf16  # attention stays bf16


def test_nvfp4_quantisation_bytes_by_hand() -> None:
    # amax read 2 + cast read 2 + two orientations of 4-bit values with an E4M3 scale per 16:
    # 2 x (0.5 + 1/16) = 1.125; 5.125 per element on any GPU
    assert gemm.quant_bytes("nvfp4", blackwell=True) == pytest.approx(5.125)


def test_nvfp4_weights_and_saved_inputs() -> None:
    lay = Layout(dp=8, zero_stage=1)
    gathered = job("llama3.1-8b", B200, 8, 8192, 64, precision="fp4", fp4_param_gather=True)
    cached = job("llama3.1-8b", B200, 8, 8192, 64, precision="fp4", fp4_param_gather=False)
    # rows and columns, each 0.5 + 1/16 bytes: 1.125 per weight, the parameter itself with the
    # param gather, a cache beside the bf16 weight without it (or without a sharded optimizer)
    assert buffers.quantised_weight_bytes(gathered, lay) == pytest.approx((1.125, 0.0))
    assert buffers.quantised_weight_bytes(cached, lay) == pytest.approx((2.0, 1.125))
    unsharded = Layout(dp=8, zero_stage=0)
    assert buffers.quantised_weight_bytes(gathered, unsharded) == pytest.approx((2.0, 1.125))
    # the column-wise copy the weight gradient reads: 0.5625 bytes per element
    assert shard(gathered, lay).linear_bytes == LINEAR_INPUT_BYTES["fp4"] == pytest.approx(0.5625)


def test_the_distributed_optimizer_gathers_half_a_byte_per_nvfp4_weight() -> None:
    lay = Layout(dp=8, zero_stage=1)
    chunks = lay.chunk_layers(32)[0]
    j = job("llama3.1-8b", B200, 8, 8192, 64, precision="fp4")
    dense, expert = decoder_params(j, lay, chunks)
    total = dense * 1.25  # the embedding and output layer besides, in bf16
    got = stage_sync.gathered_param_bytes(j, lay, chunks, total, expert)[0]
    # decoder weights at 0.5, the rest at 2: 2 - 1.5 x decoder / total = 2 - 1.5 / 1.25 = 0.8
    assert got == pytest.approx(0.8)
    fp8 = job("llama3.1-8b", B200, 8, 8192, 64, precision="fp8")
    assert stage_sync.gathered_param_bytes(fp8, lay, chunks, total, expert)[0] == pytest.approx(1.2)


def test_fp4_plan_reports_mfu_against_both_peaks() -> None:
    lay = Layout(dp=8, sequence_parallel=False)
    p = cost.estimate(job("llama3.1-8b", B200, 8, 8192, 64, precision="fp4"), lay)
    flops = p.model_flops_per_step / (p.step_time_s * 8)
    assert p.mfu_bf16_peak == pytest.approx(flops / 2250e12)
    assert p.mfu_fp4_peak == pytest.approx(flops / 9000e12) and p.mfu == p.mfu_fp4_peak
    assert p.mfu_fp8_peak is None
    d = performance_dict(p, sparse_attention=False)
    assert d["mfu_bf16_peak"] == pytest.approx(4 * d["mfu_fp4_peak"], rel=2e-3)


def test_an_fp4_step_is_faster_than_fp8_which_is_faster_than_bf16_where_compute_bound() -> None:
    # Llama 3.1 70B on 8 B200 at tp 8 with CUDA graphs: GEMM-bound, no host issue in the way
    lay = Layout(tp=8, sequence_parallel=True)
    steps = {
        p: cost.estimate(
            job("llama3.1-70b", B200, 8, 8192, 8, precision=p, cuda_graphs=True), lay
        ).step_time_s
        for p in ("bf16", "fp8", "fp4")
    }
    assert steps["fp4"] < steps["fp8"] < steps["bf16"]
