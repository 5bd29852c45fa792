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
"""

from __future__ import annotations

from dataclasses import replace

from planner.model.layer_time import Layer

HOST_LAYER_ISSUE_S = 1.0e-3
"""Seconds the host takes to issue one decoder layer's forward kernels (see the docstring)."""
BACKWARD_ISSUE_RATIO = 2.0
"""The backward's issue time over the forward's."""


def issued(layer: Layer) -> Layer:
    """The layer's forward and backward, each at least as long as the host takes to issue it."""
    fwd = max(layer.fwd, HOST_LAYER_ISSUE_S)
    bwd = max(layer.bwd, BACKWARD_ISSUE_RATIO * HOST_LAYER_ISSUE_S)
    if fwd == layer.fwd and bwd == layer.bwd:
        return layer
    return replace(layer, fwd=fwd, bwd=bwd)
