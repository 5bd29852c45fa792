"""The host's floor under a layer's time: the GPU cannot run a layer faster than the CPU issues
its kernels.

PyTorch runs eagerly: every operation of a Megatron-Core / Transformer Engine layer is Python,
the dispatcher and a kernel launch on the host, queued ahead of the GPU. While a layer's
kernels take longer than their issue, the queue stays full and the host is hidden (the
production-size layers of every published run). Small layers (a model of a few hundred million
parameters, a short micro-batch, tp 8 on a small hidden size) drain the queue, and the layer
takes what its issue takes: the regime where Megatron's functional tests run, and the reason
CUDA graphs exist.

HOST_LAYER_ISSUE_S is the host time of one decoder layer's forward: about 40 kernels (two norm
+ GEMM pairs, RoPE, attention, the output projection, bias-dropout-adds, the activation, the
second MLP GEMM, with their casts) at ~25 us of Python, dispatch and launch each. The backward
issues about twice the forward's operations (autograd runs a data-gradient and a weight-gradient
kernel per GEMM): BACKWARD_ISSUE_RATIO. An estimate, not a fit: a cluster's logs refit it
(`planner calibrate`, `layer_issue_s`), and the functional tests' step times
(benchmarks/calibration_loo.py) show what it absorbs.

CUDA graphs (`Job.cuda_graphs`, Megatron --cuda-graph-impl): the layer's kernels are captured
once and each micro-batch replays the layer's forward graph and its backward graph, one launch
each, so the Python, dispatch and launch of each kernel are gone. What stays is the GPU's own
work per graph node, GRAPH_KERNEL_S for each of the layer's HOST_LAYER_ISSUE_S /
KERNEL_ISSUE_S kernels: a floor two orders of magnitude under the eager one.
"""

from __future__ import annotations

from dataclasses import replace

from planner.model.layer_time import Layer

HOST_LAYER_ISSUE_S = 1.0e-3
"""Seconds the host takes to issue one decoder layer's forward kernels (see the docstring)."""
BACKWARD_ISSUE_RATIO = 2.0
"""The backward's issue time over the forward's."""
KERNEL_ISSUE_S = 25e-6
"""Host seconds per eager kernel (Python, dispatcher, launch): HOST_LAYER_ISSUE_S over it is
the layer's forward kernel count (~40, see the docstring)."""
GRAPH_KERNEL_S = 0.5e-6
"""GPU seconds per kernel node of a replayed CUDA graph beyond the kernel's own run: NVIDIA's
"Getting Started with CUDA Graphs" (A. Gray, developer.nvidia.com/blog/cuda-graphs, 2019) times
20 short kernels (2.9 us each) at 3.8 us per kernel launched back to back on a stream and 3.4 us
per kernel replayed as a graph: ~0.5 us per node."""


def floor_s(cuda_graphs: bool) -> float:
    """The forward's floor: the host's issue of an eager layer, or a graph's per-node cost."""
    if cuda_graphs:
        return HOST_LAYER_ISSUE_S / KERNEL_ISSUE_S * GRAPH_KERNEL_S
    return HOST_LAYER_ISSUE_S


def issued(layer: Layer, cuda_graphs: bool = False) -> Layer:
    """The layer's forward and backward, each at least as long as the host takes to issue it
    (eager) or the GPU takes to step through its graph (`cuda_graphs`)."""
    floor = floor_s(cuda_graphs)
    fwd = max(layer.fwd, floor)
    bwd = max(layer.bwd, BACKWARD_ISSUE_RATIO * floor)
    if fwd == layer.fwd and bwd == layer.bwd:
        return layer
    return replace(layer, fwd=fwd, bwd=bwd)
