"""Megatron-FSDP's unit buffers coupled with the activations held at each moment
(`planner.model.fsdp_coupling`).

Oracles: a step-by-step simulation written here of one micro-batch through a model chunk, from
NVIDIA/Megatron-LM d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/ (pgb:
param_and_grad_buffer.py) and TransformerEngine d0067d0d transformer_engine/pytorch/
cpu_offload.py, compared with planner's coupled peak over random units, layer bytes, unit sizes
and offloaded layers; and hand arithmetic.
"""

from __future__ import annotations

import random

import pytest

from planner.model import fsdp_coupling, megatron_fsdp
from planner.model.megatron_fsdp_bytes import uniform

Unit = tuple[float, float]


def _gathered(order: list[tuple[int, float]], mine: int, prefetch: float, held: dict) -> float:
    """pgb:4487-4510: unit `mine`'s gather takes its groups, then the next ones in `order`
    ((unit, elements), in the pass's order) while the prefetched sum is below `prefetch`; the
    groups of units already run were released (megatron_fsdp.py:998 forward, :699-700
    backward), those prefetched before stay. `held`: group position -> elements, updated."""
    start = min(p for p, (u, _) in enumerate(order) if u == mine)
    for p in [p for p in held if p < start]:
        del held[p]
    p, extra = start, 0.0
    while p < len(order) and (order[p][0] == mine or extra < prefetch):
        if order[p][0] != mine:
            extra += order[p][1]
        held[p] = order[p][1]
        p += 1
    return sum(held.values())


def _simulated_peak(
    units: list[Unit],
    layers: list[float],
    working: float,
    offloaded: int,
    capacity: float,
    zero3: bool,
    ends: tuple[float, float],
    dtypes: tuple[float, float],
) -> float:
    """The most one micro-batch's forward and backward through a chunk hold at once: its layers'
    activations on the GPU, `working` more (the loss's or a layer's working set), the gathered
    parameters and the gradient buckets. Transformer Engine's default offload schedule
    (cpu_offload.py:616-624): layer i < k is released from the GPU before layer n - k + i's
    forward, reloaded before layer n - 1 - k + i's backward (:646-647), and every layer is
    released before the next layer's backward (:538-539). Gradients (pgb:3094-3117, :3935-3948,
    :4230-4254): a unit's buckets allocated at its backward (experts' first), each dispatched
    after the queue pops its oldest while its sum exceeds `capacity`, freed when popped; the
    output side's bucket (ends[1]) first, the embedding's (ends[0]) last."""
    n, k = len(units), offloaded
    g, w = dtypes
    prefetch = capacity // 2
    fwd_order = [(i, x) for i, (d, e) in enumerate(units) for x in (d, e) if x]
    bwd_order = [(i, x) for i in range(n - 1, -1, -1) for x in units[i][::-1] if x]
    on_gpu: set[int] = set()
    moments: list[float] = []
    held: dict[int, float] = {}
    for layer in range(n):
        on_gpu -= {i for i in range(k) if n - k + i == layer}
        on_gpu.add(layer)
        acts = working + sum(layers[i] for i in on_gpu)
        gathered = _gathered(fwd_order, layer, prefetch, held) if zero3 else 0.0
        moments.append(acts + gathered * w)
    peak_acts = working + max(
        sum(layers[i] for i in range(n) if i <= j and not (i < k and n - k + i <= j))
        for j in range(n)
    )
    queue: list[float] = []

    def dispatch(groups: tuple[float, ...], acts: float, gathered: float) -> None:
        moments.append(acts + (sum(queue) + sum(groups)) * g + gathered * w)
        for x in groups:
            while queue and sum(queue) > capacity:
                queue.pop(0)
            queue.append(x)

    head, tail = ends
    if tail:
        dispatch((tail,), working + sum(layers[i] for i in on_gpu), 0.0)
    held = {}
    for layer in range(n - 1, -1, -1):
        on_gpu.discard(layer + 1)
        on_gpu |= {i for i in range(k) if n - 1 - k + i == layer}
        acts = working + sum(layers[i] for i in on_gpu)
        gathered = _gathered(bwd_order, layer, prefetch, held) if zero3 else 0.0
        dispatch(tuple(x for x in units[layer][::-1] if x), acts, gathered)
    if head:
        dispatch((head,), working, 0.0)
    return max(peak_acts, *moments)


@pytest.mark.parametrize("seed", range(60))
def test_coupled_peak_against_a_step_by_step_simulation(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 20)
    units = [
        (rng.uniform(1e7, 6e8), rng.uniform(1e7, 6e8) if rng.random() < 0.3 else 0.0)
        for _ in range(n)
    ]
    layers = [rng.uniform(1e8, 3e9) for _ in range(n)]
    working = rng.uniform(0.0, 5e9)
    offloaded = rng.randint(1, n - 1) if n > 1 and rng.random() < 0.4 else 0
    capacity = rng.choice([1e8, 5e8, 1e9, 2e9])
    zero3 = rng.random() < 0.7
    ends = (rng.choice([0.0, rng.uniform(1e7, 1e9)]), rng.choice([0.0, rng.uniform(1e7, 1e9)]))
    dtypes = (rng.choice([2.0, 4.0]), rng.choice([1.0, 2.0, 4.0]))
    price = uniform(dtypes[0], dtypes[1] if zero3 else 0.0)  # ZeRO 2 gathers nothing
    moments = megatron_fsdp.chunk_moments(units, [price] * n, ends, 0.0, capacity, dtypes[0])
    freed = fsdp_coupling.freed_bytes(layers, offloaded)
    peak_acts = working + freed[0]  # with h = 0 layers holding, all the chunk kept is freed
    got = peak_acts + fsdp_coupling.coupled((moments,), (freed,))
    want = _simulated_peak(units, layers, working, offloaded, capacity, zero3, ends, dtypes)
    assert got == pytest.approx(want)
    # the bound (nothing freed) is never below it
    assert peak_acts + fsdp_coupling.coupled((moments,), (None,)) >= want * (1 - 1e-12)


def test_freed_bytes_by_hand() -> None:
    """Layers of 1, 2, 3, 4, 5 bytes. Without offloading the chunk keeps 15 and h layers hold
    the first h: freed 15, 14, 12, 9, 5, 0. With the first 2 offloaded (Transformer Engine keeps
    n - k = 3 consecutive layers, cpu_offload.py:610-614) the chunk keeps the largest window,
    3 + 4 + 5 = 12, and h layers holding hold the 3 up to layer h - 1: 0, 1, 1 + 2, 1 + 2 + 3,
    2 + 3 + 4, 3 + 4 + 5, so freed 12, 11, 9, 6, 3, 0."""
    assert fsdp_coupling.freed_bytes([1, 2, 3, 4, 5]) == (15, 14, 12, 9, 5, 0)
    assert fsdp_coupling.freed_bytes([1, 2, 3, 4, 5], 2) == (12, 11, 9, 6, 3, 0)


def test_a_moment_held_all_step_or_past_the_layers_frees_nothing_more() -> None:
    """Double buffering's pool (h None) is added whole; a moment with more units holding than
    the chunk has layers (its MTP units) frees what all held do (0 here); the remainder is
    never below 0 (the activations' peak alone)."""
    freed = fsdp_coupling.freed_bytes([4.0, 4.0])
    assert fsdp_coupling.coupled((((None, 3.0), (0, 5.0)),), (freed,)) == 3.0
    assert fsdp_coupling.coupled((((5, 2.0),),), (freed,)) == 2.0
    assert fsdp_coupling.coupled((((0, 5.0),),), (freed,)) == 0.0
