"""The output layer (LM head) in MXFP8 (training.fp8_output_proj; Megatron --fp8-output-proj):
its time, its weight cache, the plan's checks and the launch flags.

Oracles: Megatron-Core d98e8a64 (TransformerConfig raises unless fp8 with the mxfp8 recipe,
transformer_config.py:1569-1575; gpt_model.py builds the MXFP8 TELMHeadColumnParallelLinear then),
the roofline of `planner.model.gemm` by hand, and hand byte counts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from jobs import job
from plan_text import MODEL, PARALLEL, load_error, plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import layer_time, memory, output_time
from planner.model.gemm import gemm_time, quant_bytes

GB300 = "gb300-nvl72"


def _mxfp8(proj: bool) -> Job:
    return job(
        "llama3.1-8b", GB300, 8, 8192, 64, precision="fp8", fp8_recipe="mxfp8",
        fp8_output_proj=proj,
    )  # fmt: skip


def test_the_output_layer_runs_at_the_fp8_rate_plus_its_quantisation() -> None:
    # t = 8192 tokens, h = 4096, V = 128,256 (padded as the job pads it): 3 GEMMs at the FP8 peak
    # and fraction, then the input (t x h) and the logits' gradient (t x V) quantised once each
    # at MXFP8's 4 + 2/32 bytes per element; the loss's elementwise work is the same in both
    lay = Layout(dp=8)
    fp8, bf16 = _mxfp8(True), _mxfp8(False)
    gpu = layer_time.gpu_of(fp8)
    t, h = 8192.0, 4096
    v = fp8.arch.padded_vocab(1)
    gemm8 = gemm_time(t, h, v, gpu.peak_linear, gpu.ridge, gpu.e_linear)
    gemm16 = gemm_time(t, h, v, gpu.peak_bf16, gpu.ridge, gpu.e_bf16)
    quant = quant_bytes("mxfp8", True) * t * (h + v) / gpu.hbm
    assert quant_bytes("mxfp8", True) == pytest.approx(4 + 2 / 32)
    diff = output_time.output_layer_time(bf16, lay, gpu) - output_time.output_layer_time(
        fp8, lay, gpu
    )
    assert diff == pytest.approx(3 * (gemm16 - gemm8) - quant)
    assert diff > 0


def test_its_mxfp8_weight_is_cached_on_the_last_stage_only() -> None:
    # V x h / tp weights at 2 x (1 + 1/32) bytes (both orientations, an E8M0 scale per 32) on the
    # last pipeline rank, beside the bf16 weight; the first rank is unchanged
    lay = Layout(pp=2, dp=4, tp=1)
    fp8, bf16 = _mxfp8(True), _mxfp8(False)
    words = fp8.arch.padded_vocab(1) * 4096
    a, b = memory.estimate(fp8, lay), memory.estimate(bf16, lay)
    assert a.stages[0].total == b.stages[0].total
    assert a.stages[1].total - b.stages[1].total == pytest.approx((2 + 2 / 32) * words)


def test_plan_checks(tmp_path: Path) -> None:
    b200 = '[cluster]\ngpu = "b200-sxm-180gb"\nnum_gpus = 8\n'
    base = "[training]\nseq_length = 8192\nglobal_batch_size = 64\nfp8_output_proj = true\n"
    for extra, got in {
        "": 'got precision "bf16"',
        'precision = "fp8"\nfp8_recipe = "tensorwise"\n': 'fp8_recipe "tensorwise"',
        'precision = "fp4"\n': 'got precision "fp4"',
        'precision = "fp8"\nfp8_recipe = "mxfp8"\nframework = "torchtitan"\n': "Megatron's",
    }.items():
        err = load_error(write(tmp_path, plan_text(MODEL, b200, base + extra, PARALLEL)))
        assert "training.fp8_output_proj" in err and got in err, err


def test_a_bf16_twin_runs_the_output_layer_in_bf16() -> None:
    lay = Layout(dp=8)
    j = _mxfp8(True)
    gpu = layer_time.gpu_of(j)
    twin = replace(j, precision="bf16")
    assert output_time.output_layer_time(twin, lay, gpu) == output_time.output_layer_time(
        replace(twin, fp8_output_proj=False), lay, gpu
    )
