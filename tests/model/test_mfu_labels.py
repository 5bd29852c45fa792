"""MFU against the bf16 peak (the usual convention) and, for FP8 plans, against the FP8 peak.

Oracle: the catalog peaks (H100 SXM dense bf16 989, FP8 1979 TFLOP/s) and the definition MFU =
model FLOPs / (step time x GPUs x peak), by hand from the Performance's own fields.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.cli.report import performance_dict
from planner.inputs.layout import Layout
from planner.model import cost

LAY = Layout(tp=2, pp=1, dp=4, sequence_parallel=True)


def test_bf16_plan_has_one_mfu() -> None:
    p = cost.estimate(job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64), LAY)
    by_hand = p.model_flops_per_step / (p.step_time_s * 8 * 989e12)
    assert p.mfu == pytest.approx(by_hand) and p.mfu_bf16_peak == pytest.approx(by_hand)
    assert p.mfu_fp8_peak is None
    d = performance_dict(p, sparse_attention=False)
    assert d["mfu"] == d["mfu_bf16_peak"] and d["mfu_fp8_peak"] is None


def test_fp8_plan_reports_both_peaks() -> None:
    p = cost.estimate(job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, precision="fp8"), LAY)
    flops = p.model_flops_per_step / (p.step_time_s * 8)
    assert p.mfu_bf16_peak == pytest.approx(flops / 989e12)
    assert p.mfu_fp8_peak == pytest.approx(flops / 1979e12)
    assert p.mfu == p.mfu_fp8_peak  # `Performance.mfu`: the job's precision's peak
    d = performance_dict(p, sparse_attention=False)
    # the JSON's `mfu` is the contract's (DESIGN.md: against the bf16 peak; the FP8 peak's
    # labelled beside it): an FP8 plan's was its FP8-peak figure, half the headline one
    assert d["mfu"] == d["mfu_bf16_peak"]
    assert d["mfu_bf16_peak"] == pytest.approx(2 * d["mfu_fp8_peak"], rel=2e-3)
