"""Tests for the floor of a layer's small kernels (planner/model/layer_time.py KERNEL_MIN_S).

Oracle: hand arithmetic on the documented rule. A layer's streamed (elementwise and
quantisation) work runs in its `host.kernels` launches forward less its GEMMs and its attention
kernel, and BACKWARD_ISSUE_RATIO (2) times as many backward; a stream runs at most one kernel per
KERNEL_MIN_S, so that work takes max(its bytes' time, those kernels x KERNEL_MIN_S), a third of
it forward and the rest backward (full recompute runs the forward's share again).
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.hybrid import layer_kind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import gemm_shapes, host, layer_time
from planner.model.layer_time import Layer, gpu_of

FLOOR = 3e-6  # a round value for the arithmetic, not the fitted one
DENSE = layer_kind(False)


def _at(j: Job, lay: Layout, floor: float) -> Layer:
    saved = layer_time.KERNEL_MIN_S
    try:
        layer_time.KERNEL_MIN_S = floor
        return layer_time.layer_time(j, lay, gpu_of(j), DENSE)
    finally:
        layer_time.KERNEL_MIN_S = saved


def test_a_dense_layer_counts_its_small_kernels() -> None:
    # Llama 3.1 8B in bf16 at tp 1: an attention and an MLP block, 0.5 + 0.5 = 1 issue unit,
    # 1.22e-3 / 25e-6 = 48.8 kernels forward; less its 4 GEMMs (QKV, output projection, fc1, fc2)
    # and its attention kernel, 43.8, and twice as many backward: 131.4
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(tp=1, dp=8)
    gemms = gemm_shapes.linear_gemms(j.arch, 8192.0, 1, 1, 1, DENSE, 1.0)
    assert len(gemms) == 4
    assert host.kernels(j, lay, DENSE) == pytest.approx(48.8)
    assert layer_time.small_kernels(j, lay, DENSE, len(gemms)) == pytest.approx(131.4)


def test_a_tiny_layer_waits_on_its_kernels_not_its_bytes() -> None:
    # 256 tokens per micro-batch, full recompute: the streamed work's bytes take less than
    # 131.4 x 3 us = 394.2 us, so the floor sets it; the GEMMs and attention (G) are untouched.
    # With the floor at 1 s the forward is G + 131.4 / 3 s, which gives G; the streamed work
    # without the floor is 3 x (forward - G).
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 256, 8)
    lay = Layout(tp=1, dp=8, recompute="full")
    off, on, huge = _at(j, lay, 0.0), _at(j, lay, FLOOR), _at(j, lay, 1.0)
    n = 131.4
    g = huge.fwd - n / 3
    streamed = 3 * (off.fwd - g)
    assert streamed < n * FLOOR  # the premise: the floor binds
    assert on.fwd == pytest.approx(g + n * FLOOR / 3)
    assert on.bwd - off.bwd == pytest.approx(2 * (on.fwd - off.fwd))
    assert on.recompute - off.recompute == pytest.approx(on.fwd - off.fwd)


def test_a_production_layer_never_reaches_the_floor() -> None:
    # Llama 3.1 70B at tp 8 with sequence parallelism, 8k tokens: each elementwise kernel moves
    # tens of MB (8192 x 8192 x 2 B / 8 = 16.8 MB a tensor), far above 3 us of HBM time
    j = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 64)
    lay = Layout(tp=8, dp=8, sequence_parallel=True)
    assert _at(j, lay, FLOOR) == _at(j, lay, 0.0)


def test_mla_and_expert_tp_count_their_launches_not_their_host_time() -> None:
    # DeepSeek-V3's MoE layer in bf16 at tp 2: attention 0.5 + MLA's launches 0.2 (not its 1.71
    # units of host issue) + MoE 1.22, and no TP share at etp 1 (the dispatcher gathers over the
    # expert-TP group only): 1.92 x 48.8 = 93.696 kernels forward; at etp 2 the expert-TP
    # gathers and reduce-scatter add 0.1 x 48.8: 98.576
    j = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64)
    moe = layer_kind(True)
    etp1 = Layout(tp=2, dp=32, ep=8, etp=1, sequence_parallel=True)
    etp2 = Layout(tp=2, dp=32, ep=8, etp=2, sequence_parallel=True)
    assert host.kernels(j, etp1, moe) == pytest.approx((0.5 + 0.2 + 1.22) * 48.8)
    assert host.kernels(j, etp2, moe) == pytest.approx((0.5 + 0.2 + 1.22 + 0.1) * 48.8)
    # the host still pays MLA's and the TP share's Python: 0.5 + 1.71 + 1.22 + 0.196 units
    assert host.issue_units(j, etp1, moe) == pytest.approx(0.5 + 1.71 + 1.22 + 0.196)
