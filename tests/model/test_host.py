"""The host's floor under a layer's time (planner/model/host.py).

Oracle: hand arithmetic on the floor's definition (forward >= HOST_LAYER_ISSUE_S, backward >=
BACKWARD_ISSUE_RATIO x that), and the published runs, whose layers are far above it."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import calibratable, cost, host
from planner.model.layer_time import Layer


def test_a_short_layer_takes_what_its_issue_takes() -> None:
    floor = host.HOST_LAYER_ISSUE_S
    short = host.issued(Layer(fwd=0.2 * floor, bwd=0.5 * floor, tp=1.0))
    assert (short.fwd, short.bwd, short.tp) == (floor, host.BACKWARD_ISSUE_RATIO * floor, 1.0)
    long = Layer(fwd=5 * floor, bwd=10 * floor)
    assert host.issued(long) is long  # the queue stays full: the host is hidden


def test_small_layers_are_host_bound_and_large_ones_are_not() -> None:
    """Llama 3.1 8B at 8k tokens per micro-batch: ~7 ms per layer forward on an H100, far above
    the floor, so the floor changes nothing; at tp 8 and 1k tokens a layer's forward is ~0.1 ms,
    so each of its 32 layers x 8 micro-batches costs the issue time instead."""
    big = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(tp=1, pp=1, dp=8)
    with calibratable.calibrated({"layer_issue_s": 0.0}):
        free = cost.estimate(big, lay).step_time_s
    assert cost.estimate(big, lay).step_time_s == pytest.approx(free, rel=1e-9)
    small = job("llama3.1-8b", "h100-sxm-80gb", 8, 1024, 8)
    lay = Layout(tp=8, pp=1, dp=1, sequence_parallel=True)
    with calibratable.calibrated({"layer_issue_s": 0.0}):
        free = cost.estimate(small, lay).step_time_s
    floored = cost.estimate(small, lay).step_time_s
    # 32 layers x 8 micro-batches x (1 + 2) x 1 ms = 0.77 s of issue at least
    assert floored >= 32 * 8 * 3 * host.HOST_LAYER_ISSUE_S > free


def test_cuda_graphs_replace_the_host_floor_by_the_graph_nodes() -> None:
    """A graphed layer is floored by its ~40 kernel nodes at GRAPH_KERNEL_S each (NVIDIA's CUDA
    graphs blog: 3.4 against 2.9 us per short kernel, ~0.5 us a node): 40 x 0.5 us = 20 us
    forward, 40 us backward, against the eager 1 ms and 2 ms."""
    assert host.floor_s(True) == pytest.approx(40 * 0.5e-6)
    short = host.issued(Layer(fwd=1e-4, bwd=2e-4), cuda_graphs=True)
    assert (short.fwd, short.bwd) == (1e-4, 2e-4)  # above the graph's floor: unchanged
    tiny = host.issued(Layer(fwd=1e-6, bwd=1e-6), cuda_graphs=True)
    assert (tiny.fwd, tiny.bwd) == pytest.approx((20e-6, 40e-6))


def test_graphs_lift_the_small_layouts_host_bound_step() -> None:
    """The host-bound case above with CUDA graphs: back to its layers' own time (within the
    graph nodes' 20 us a layer), faster than the eager floored step."""
    from dataclasses import replace

    small = job("llama3.1-8b", "h100-sxm-80gb", 8, 1024, 8)
    lay = Layout(tp=8, pp=1, dp=1, sequence_parallel=True)
    eager = cost.estimate(small, lay).step_time_s
    graphed = cost.estimate(replace(small, cuda_graphs=True), lay).step_time_s
    with calibratable.calibrated({"layer_issue_s": 0.0}):
        free = cost.estimate(small, lay).step_time_s
    assert graphed < eager
    assert graphed == pytest.approx(free, abs=32 * 8 * 3 * host.floor_s(True))
