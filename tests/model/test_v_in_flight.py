"""The activations a rank of torch's V schedules holds at its peak (planner.model.in_flight
`v_in_flight`, through `schedule_peak`) against a walk of torch's own order.

Oracle: each rank's actions as torch builds them (pytorch/pytorch 00722e64
torch/distributed/pipelining/schedules.py, ScheduleZBVZeroBubble and ScheduleDualPipeV
`_calculate_single_rank_operations`, rebuilt in `v_schedule.rank_order` and checked against
torch's order in tests/cli/test_timeline_v.py), walked action by action: a forward adds its chunk
micro-batch's activations, and they go at its whole backward or at its weight-gradient part W
(torch's stage.py `backward_one_chunk(full_backward=False)` keeps the split autograd nodes,
param_groups, in `backward_state` until `backward_weight_one_chunk`; _backward.py
`stage_backward_input` runs with retain_graph=True); freed at the input-gradient part I instead,
the walk's peak is the same (checked too). An overlapped pair (DualPipeV) runs its forward
first. The peak is the largest sum over the walk of kept[c] x the chunk-c micro-batches live."""

from __future__ import annotations

import random

import pytest

from planner.inputs.layout import Layout
from planner.model.in_flight import schedule_peak, v_in_flight
from planner.model.v_schedule import rank_order

V = ("ZBVZeroBubble", "DualPipeV")


def _walk(name: str, pp: int, m: int, rank: int, kept: tuple[float, float], free: str) -> float:
    """The most activation bytes rank `rank` holds at once in torch's order (module docstring),
    each chunk micro-batch released at its whole backward or at `free` ("W" or "I")."""
    live: list[set[int]] = [set(), set()]
    peak = 0.0
    for step in rank_order(name, pp, m, rank):
        for a in step:
            if a.kind == "F":
                live[a.chunk].add(a.micro)
            elif a.kind in ("B", free):
                live[a.chunk].discard(a.micro)
            peak = max(peak, kept[0] * len(live[0]) + kept[1] * len(live[1]))
    return peak


@pytest.mark.parametrize("name", V)
def test_peak_is_the_walk_of_torchs_order(name: str) -> None:
    """Every rank, every m torch runs (ZB-V any, DualPipeV from 2 pp), chunks keeping random
    bytes either way round (chunk 0 keeping more is where the steady chunk-0 forward peaks)."""
    rng = random.Random(17)
    for pp in range(2, 8):
        lay = Layout(tp=1, pp=pp, dp=1, vpp=2, v_stages=True)
        for m in range(1 if name == "ZBVZeroBubble" else 2 * pp, 4 * pp + 2):
            for r in range(pp):
                kept = (rng.uniform(0.2, 3.0), rng.uniform(0.2, 3.0))
                at_w = _walk(name, pp, m, r, kept, "W")
                assert _walk(name, pp, m, r, kept, "I") == pytest.approx(at_w)
                got = schedule_peak(kept, lay, r, m, name)
                assert got == pytest.approx(at_w, rel=1e-12), (name, pp, m, r)


def test_zbv_steady_forward_by_hand() -> None:
    """pp 2, m 4, rank 0 of ScheduleZBVZeroBubble (n = max(2 pp - 1, m) = 4 slots): warm-up
    2 (pp - r) - 1 = 3 chunk-0 forwards, no (F1, F0) pairs (r = 0), then pp - r = 2 times
    (F1, I1, W1): chunk 0 holds 3, chunk 1 at most 1; the steady loop's first action is chunk 0's
    4th forward (f0 = 3 < n), before any chunk-0 backward: 4 and 0. With kept (10, 1): 31 at the
    warm-up's end, 40 there (the count of 2 pp - 1 - r = 3 and r + 1 = 1 said 31); rank 1: warm-up
    1 F0, one pair (F1, F0), one trio (F1, I1, W1): 2 and 2 (22), then F0: 3 and 1 (31)."""
    lay = Layout(tp=1, pp=2, dp=1, vpp=2, v_stages=True)
    assert schedule_peak((10.0, 1.0), lay, 0, 4, "ZBVZeroBubble") == pytest.approx(40.0)
    assert schedule_peak((10.0, 1.0), lay, 1, 4, "ZBVZeroBubble") == pytest.approx(31.0)
    assert schedule_peak((1.0, 10.0), lay, 0, 4, "ZBVZeroBubble") == pytest.approx(13.0)
    assert v_in_flight("ZBVZeroBubble", 2, 0, 4) == ((3, 1), (4, 0))
    # at m 3 (n = 3) the steady loop runs no chunk-0 forward: 3 and 1 are the most
    assert v_in_flight("ZBVZeroBubble", 2, 0, 3) == ((3, 1),)
