"""Megatron's CPU offloading of whole layers (--cpu-offloading-num-layers k, one pipeline stage,
no recompute) as Transformer Engine schedules it: what stays on the GPU (`peak_window`) and what
the host transfers leave exposed (`exposed_seconds`).

Megatron-Core's TransformerBlock hands k and the stage's n layers to Transformer Engine's
get_cpu_offload_context (Megatron-LM d98e8a64 extensions/transformer_engine.py), whose default
schedule since TE 2.10 (TransformerEngine d0067d0d pytorch/cpu_offload.py,
DefaultOffloadSynchronizer; the older double-buffered handler is behind NVTE_CPU_OFFLOAD_V1=1):
- layers 0 .. k-1 are offloaded; layer i's copy to the host starts on one offload stream when
  layer i + 1's forward starts, and layer n - k + i's forward waits for it to finish (the GPU
  copy is freed then);
- in the backward, layer i's reload starts when the backward reaches layer n - 1 - k + i, and
  layer i's backward waits for it.
So at most n - k layers' activations are on the GPU at once, the saved activations' peak being
"(num_layers - num_offloaded_layers) * T" (its docstring): any n - k consecutive layers. The
copies run one after another on their stream, each hidden under the n - k - 1 layers between
its start and its deadline; k = n - 1 leaves no layer between and exposes every copy.
Not modelled: the v1 handler (NVTE_CPU_OFFLOAD_V1=1, or TE before 2.10), which offloads each
layer as the next one runs and keeps one or two layers more at its peak (this model is that much
low there), and the HBM traffic of the copies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def peak_window(n: int, k: int, window_bytes: Callable[[int, int], float]) -> float:
    """Saved-activation bytes at the peak of a stage of `n` layers with the first `k` offloaded:
    the largest `window_bytes(start, length)` over the windows of n - k consecutive layers."""
    k = min(k, n - 1)
    if k <= 0:
        return window_bytes(0, n)
    return max(window_bytes(a, n - k) for a in range(k + 1))


def exposed_seconds(
    fwd: Sequence[float], bwd: Sequence[float], transfer: Sequence[float], k: int
) -> float:
    """Seconds per micro-batch the compute stream waits for the offload stream: the forward and
    backward of layers with times `fwd`, `bwd` and one-way host transfers `transfer`, the first
    `k` layers offloaded, played through the schedule above."""
    n = len(fwd)
    k = min(k, n - 1)
    if k <= 0:
        return 0.0
    lag = n - k  # the layers between an offload's start and the forward that waits for it, + 1
    t = free = 0.0
    done: dict[int, float] = {}
    for j in range(n):  # forward: before layer j, start layer j - 1's copy, then wait for j - lag
        if 1 <= j <= k:
            free = done[j - 1] = max(t, free) + transfer[j - 1]
        if 0 <= j - lag < k:
            t = max(t, done[j - lag])
        t += fwd[j]
    waited = t - sum(fwd)
    t = free = 0.0
    for layer in range(n - 1, -1, -1):  # backward: start reload i at layer lag - 1 + i
        i = layer - (lag - 1)
        if 0 <= i < k:
            free = done[i] = max(t, free) + transfer[i]
        if layer < k:
            t = max(t, done[layer])
        t += bwd[layer]
    # the waits are differences of float sums: clamped, a rounding error is not a gain
    return max(0.0, waited + t - sum(bwd))
