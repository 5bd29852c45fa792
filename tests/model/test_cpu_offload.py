"""Transformer Engine's default CPU-offload schedule (planner.model.cpu_offload).

Oracle: the schedule as TransformerEngine d0067d0d pytorch/cpu_offload.py defines it
(DefaultOffloadSynchronizer: layer i's copy starts at layer i + 1's forward, layer n - k + i waits
for it; layer i's reload starts at the backward of layer n - 1 - k + i), played by hand below."""

from __future__ import annotations

import pytest

from planner.model.cpu_offload import exposed_seconds, peak_window


def test_peak_is_the_largest_window_of_layers_not_offloaded() -> None:
    sizes = [5.0, 1.0, 1.0, 4.0, 2.0]

    def window(start: int, length: int) -> float:
        return sum(sizes[start : start + length])

    # n = 5, k = 2: windows of 3 layers, (5, 1, 1) = 7, (1, 1, 4) = 6, (1, 4, 2) = 7
    assert peak_window(5, 2, window) == 7.0
    # k = 4 = n - 1: one layer at a time, the largest
    assert peak_window(5, 4, window) == 5.0
    # nothing offloaded: all of them; k >= n is taken as n - 1 (TE refuses more)
    assert peak_window(5, 0, window) == 13.0
    assert peak_window(5, 9, window) == 5.0


def test_copies_longer_than_the_layers_queue_and_show() -> None:
    # n = 4, k = 2, f = b = 1, x = 3 (lag n - k = 2). Forward: layer 0 ends at 1; copy 0 runs
    # 1-4; layer 1 ends at 2; copy 1 queues 4-7; layer 2 waits for copy 0 (4), ends at 5; layer
    # 3 waits for copy 1 (7), ends at 8: 4 s waited. Backward: layer 3 ends at 1; reload 1 runs
    # 1-4 (started at layer 2); layer 2 ends at 2; reload 0 queues 4-7 (started at layer 1);
    # layer 1 waits for reload 1 (4), ends at 5; layer 0 waits for reload 0 (7), ends at 8: 4 s
    assert exposed_seconds([1.0] * 4, [1.0] * 4, [3.0] * 4, 2) == pytest.approx(8.0)


def test_copies_under_their_window_show_nothing() -> None:
    # n = 8, k = 3, x = 2 with f = b = 1: copy i done by 1 + 2(i + 1) <= 5 + i, layer 5 + i's start
    assert exposed_seconds([1.0] * 8, [1.0] * 8, [2.0] * 8, 3) == 0.0
    assert exposed_seconds([1.0] * 8, [1.0] * 8, [2.0] * 8, 0) == 0.0


def test_offloading_all_but_one_layer_shows_every_copy() -> None:
    # k = n - 1: each forward waits for the previous layer's copy, each backward for its own
    # reload, started as it is due: (n - 1) x each way
    assert exposed_seconds([1.0] * 6, [2.0] * 6, [0.5] * 6, 5) == pytest.approx(2 * 5 * 0.5)


def test_short_transfers_are_never_a_gain() -> None:
    """Transfers far shorter than the layers they hide under cost nothing, and never less than
    nothing: the waits are differences of float sums, whose rounding (-4.3e-19 s here before
    the clamp; QA: offloading looked 2e-16 s faster than none on gemma2-2b) must not rank an
    offloading layout above the same layout without it."""
    fwd = [6.074379962852603e-4, 7.671576291479621e-4, 6.958328667684434e-4]
    fwd += [2.6633056045725955e-4, 8.018263669964836e-4]
    bwd = [1.1823068700026079e-3, 2.0445431622009646e-4, 6.348592643527684e-4]
    bwd += [4.464422204264773e-5, 1.2990922710509967e-3]
    transfer = [9.204938554384979e-8, 8.812338589221555e-6, 6.864838541790798e-6]
    transfer += [9.690406502940996e-6, 7.258526014465153e-6]
    assert exposed_seconds(fwd, bwd, transfer, 2) == 0.0
