"""torchtitan's ZBVZeroBubble bubble (planner.model.v_bubble.zbv_bubble, through
schedule.schedule_bubble) against torch's own order, timed.

Oracles: `v_schedule.simulate_v` (p2p 0), torch's action order (pytorch/pytorch 00722e64
torch/distributed/pipelining/schedules.py, ScheduleZBVZeroBubble._calculate_single_rank_operations,
as tests/cli/test_timeline_v.py checks it by hand and by brute force), each action when its rank is
free and its input is ready; and a brute force of the longest path through that order, each path
summed as counts of chunk forwards, input gradients and weight gradients, whose maximal sums are
the closed form's terms. torch lays out max(2 pp - 1, m) micro-batches (empty slots past m), so it
runs any m; the closed form holds from m = 2 pp - 1, and below it the order's own step
(`v_paths.v_step`) prices the empty slots.
"""

from __future__ import annotations

import itertools
import random

import pytest

from planner.model.schedule import schedule_bubble
from planner.model.v_bubble import zbv_bubble
from planner.model.v_schedule import needs, produced, rank_order, simulate_v

ZBV = "ZBVZeroBubble"
# a chunk's forward, input gradient and weight gradient (the brief's grid; I > W is recompute)
GRID = list(itertools.product([1.0, 2.0], [1.0, 1.5, 2.0], [0.5, 1.0, 2.0]))


def simulated(pp: int, m: int, fwd: list[float], bwd: list[float], wgt: list[float]) -> float:
    """The step's idle time beyond the busiest rank's work, fwd / bwd / wgt per rank (stage)."""
    sim = simulate_v(ZBV, pp, m, fwd, bwd, wgt)
    return max(op.end for ops in sim for op in ops) - m * max(map(sum, zip(fwd, bwd, strict=True)))


def test_pp4_m8_by_hand() -> None:
    # F = I = W = 1 a chunk: 8 micro-batches x 2 chunks x 3 = 48 of work a rank; the last rank's
    # first forward waits for 3 others (1 + 2 + 3) and it never idles after: 51. The ZB-V paper's
    # (p-1)(F+B-3W)/2 = 3 (2 + 4 - 6) / 2 = 0.
    assert simulated(4, 8, [2.0] * 4, [4.0] * 4, [2.0] * 4) == pytest.approx(3.0)
    assert zbv_bubble(4, 2.0, 4.0, 2.0) == pytest.approx(3.0)
    # through the cost model's inputs: B = 4, no recompute, W = B / 2
    assert schedule_bubble(ZBV, [(2.0, 4.0)] * 4, [0.0] * 4, 2) == pytest.approx(3.0)


@pytest.mark.parametrize("pp", range(2, 9))
def test_equal_stages_match_the_simulation(pp: int) -> None:
    for m in range(2 * pp - 1, 4 * pp + 4):
        for f, i, w in GRID:
            want = simulated(pp, m, [2 * f] * pp, [2 * (i + w)] * pp, [2 * w] * pp)
            assert zbv_bubble(pp, 2 * f, 2 * (i + w), 2 * w) == pytest.approx(want), (m, f, i, w)
            if w <= i:  # W = WGRAD_SHARE (B - recompute): recompute 2 (i - w) >= 0
                got = schedule_bubble(ZBV, [(2 * f, 2 * (i + w))] * pp, [2 * (i - w)] * pp, 2)
                assert got == pytest.approx(want), (m, f, i, w)


def test_random_equal_stages_and_long_steps() -> None:
    rng = random.Random(7)
    for _ in range(60):
        pp = rng.randint(2, 10)
        m = rng.choice([2 * pp - 1, 3 * pp, 8 * pp + 1])
        f, i, w = rng.uniform(0.1, 3), rng.uniform(0.1, 3), rng.uniform(0.05, 3)
        want = simulated(pp, m, [2 * f] * pp, [2 * (i + w)] * pp, [2 * w] * pp)
        assert zbv_bubble(pp, 2 * f, 2 * (i + w), 2 * w) == pytest.approx(want)


UNIT = {"F": (1, 0, 0), "I": (0, 1, 0), "W": (0, 0, 1)}


def _maximal(sums: set[tuple[int, int, int]]) -> set[tuple[int, int, int]]:
    return {v for v in sums if not any(u != v and all(map(int.__ge__, u, v)) for u in sums)}


def longest_paths(pp: int, m: int) -> set[tuple[int, int, int]]:
    """Every path's (forwards, input gradients, weight gradients) through torch's order, the
    maximal ones: a brute force of the step for every F, I, W >= 0 at once."""
    orders = [[step[0] for step in rank_order(ZBV, pp, m, r)] for r in range(pp)]
    ends: dict[tuple[str, int, int], set[tuple[int, int, int]]] = {}
    last: list[set[tuple[int, int, int]]] = [{(0, 0, 0)} for _ in range(pp)]
    pos = [0] * pp
    while any(pos[r] < len(orders[r]) for r in range(pp)):
        for r in range(pp):
            while pos[r] < len(orders[r]):
                a = orders[r][pos[r]]
                need = needs(pp, a, r)  # torch's dependencies, as the simulation reads them
                if need is not None and need not in ends:
                    break
                start = last[r] | (ends[need] if need is not None else set())
                unit = UNIT[a.kind]
                last[r] = _maximal({tuple(map(int.__add__, v, unit)) for v in start})  # type: ignore[misc]
                ends[produced(pp, a, r)] = last[r]
                pos[r] += 1
    return _maximal(set().union(*last))


@pytest.mark.parametrize("pp", [2, 3, 4, 5])
def test_the_eight_detours(pp: int) -> None:
    # zbv_bubble's terms in chunk units (f, i, w = F/2, I/2, W/2), k = p - 1, as count vectors
    # beyond one rank's 2m of each; X and Y the two optional legs
    k = pp - 1
    terms = {
        (0, 1, k - 1),  # max(F, I) + (p-2) W
        (1, 0, k - 1),
        (0, k, 0),  # (p-1) I
        (0, 2 * k, -2 * k),  # (p-1)(I + X)
        (2 * k - 1, -(k - 1), 0),  # (2p-3) F - (p-2) I
        (2 * k - 1, 1, -2 * k),  # ... + (p-1) X
        (2 * k, -k, -1),  # ... + Y
        (2 * k, 0, -(2 * k + 1)),  # ... + (p-1) X + Y
    }
    for m in (2 * pp - 1, 2 * pp + 3):
        paths = {(a - 2 * m, b - 2 * m, c - 2 * m) for a, b, c in longest_paths(pp, m)}
        assert terms <= paths
        # every other maximal path is below one of the eight wherever F, I, W >= 0: a convex
        # combination of them bounds it (checked on a lattice of weights)
        for x in itertools.product(range(1, 7), repeat=3):
            best = max(sum(map(int.__mul__, t, x)) for t in terms)
            assert all(sum(map(int.__mul__, v, x)) <= best for v in paths)


def test_uneven_stages_match_the_simulation() -> None:
    """Uneven stages at the step's m (v_paths, tests/model/test_v_paths.py): rank 0, which holds
    the embedding and the output layer, up to 40% slower, the others within 3%. The mean of the
    stages but the slowest, priced before, was up to 10.5% of the step above the simulation on
    these draws (a slower rank 0 absorbs the others' fill, and its own starts at once)."""
    rng = random.Random(5)
    for _ in range(150):
        pp = rng.randint(2, 8)
        m = rng.randint(2 * pp - 1, 4 * pp + 3)
        f, i, w = rng.uniform(0.5, 2), rng.uniform(0.5, 3), rng.uniform(0.3, 2)
        if w > i:
            f, i, w = f, w, i  # expressible as W = (B - recompute) / 2
        u = [rng.uniform(1.0, 1.4)] + [rng.uniform(0.97, 1.03) for _ in range(pp - 1)]
        fwd = [2 * f * x for x in u]
        bwd = [2 * (i + w) * x for x in u]
        wgt = [2 * w * x for x in u]
        rec = [b - 2 * x for b, x in zip(bwd, wgt, strict=True)]
        got = schedule_bubble(ZBV, list(zip(fwd, bwd, strict=True)), rec, 2, m)
        assert got == pytest.approx(simulated(pp, m, fwd, bwd, wgt), abs=1e-9), (pp, m)
