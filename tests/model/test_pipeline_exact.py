"""Tests for planner.model.one_f_one_b, v_p2p and the 1F1B bounds of planner.search.pipe_floor.

Oracles: hand arithmetic of a two-stage 1F1B; brute force over every order of the stages; a
brute-force event simulation written here from Megatron-LM d98e8a64
forward_backward_pipelining_without_interleaving (schedules.py:2277-2278: pp - rank - 1 warm-up
forwards, at most m; then one forward one backward; then the cool-down backwards; a forward needs
the previous rank's, a backward the next rank's), and torch's V orders as `v_schedule.simulate_v`
times them (the brute force of tests/model/test_v_paths.py)."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.model import one_f_one_b, schedule, v_schedule
from planner.model.v_p2p import v_p2p_exposed
from planner.search.pipe_floor import pipeline_floor, scaled_floor


def _brute(fwd: list[float], bwd: list[float], m: int) -> float:
    """Event simulation: repeat passes over the ranks until every op is timed."""
    p = len(fwd)
    progs = []
    for r in range(p):
        w = min(p - r - 1, m)
        ops = [("F", i) for i in range(w)]
        for k in range(m - w):
            ops += [("F", w + k), ("B", k)]
        progs.append(ops + [("B", k) for k in range(m - w, m)])
    end: dict[tuple[str, int, int], float] = {}
    clock = [0.0] * p
    while len(end) < 2 * m * p:
        for r in range(p):
            for kind, i in progs[r]:
                if (kind, r, i) in end:
                    continue
                if kind == "F":
                    dep = ("F", r - 1, i) if r > 0 else None
                else:
                    dep = ("B", r + 1, i) if r < p - 1 else ("F", r, i)
                if dep is not None and dep not in end:
                    break
                start = max(clock[r], end[dep] if dep else 0.0)
                clock[r] = end[(kind, r, i)] = start + (fwd[r] if kind == "F" else bwd[r])
    return max(clock)


def test_two_stages_by_hand() -> None:
    # F = (2, 1), B = (4, 2), m = 2. Rank 0 (one warm-up forward): F0 0-2, F1 2-4, B0 waits
    # for rank 1's B0; rank 1: F0 2-3, B0 3-5, F1 5-6 (rank 0's F1 ended at 4), B1 6-8; rank 0:
    # B0 5-9, B1 9-13. Step 13; the closed form m max + sum - max = 2 x 6 + 3 = 15 counts the
    # second stage's fill (3) whole, where rank 0's second forward hides 2 of it.
    assert one_f_one_b.step([2, 1], [4, 2], 2) == pytest.approx(13)
    assert _brute([2, 1], [4, 2], 2) == pytest.approx(13)
    # schedule_bubble: the step less its steady state m max t = 12
    assert schedule.schedule_bubble("1F1B", [(2, 4), (1, 2)], [0, 0], 1, 2) == pytest.approx(1)
    # the search's floor: max(2 x 6 + 0, 2 x 3 + 6) = 12 <= 13
    assert one_f_one_b.floor([6, 3], 2) == pytest.approx(12)


def test_exact_against_brute_force_and_floor_below() -> None:
    rng = random.Random(7)
    for _ in range(300):
        p, m = rng.randint(1, 6), rng.randint(1, 12)
        fwd = [rng.uniform(0.5, 2) for _ in range(p)]
        bwd = [rng.uniform(1, 4) for _ in range(p)]
        want = _brute(fwd, bwd, m)
        assert one_f_one_b.step(fwd, bwd, m) == pytest.approx(want, rel=1e-12)
        times = [f + b for f, b in zip(fwd, bwd, strict=True)]
        assert pipeline_floor(times, m, 1, ordered=True) <= want * (1 + 1e-12)
        assert pipeline_floor(times, m, 1, ordered=False) <= want * (1 + 1e-12)
        # the closed form is exact when the last stage is the slowest, above otherwise
        closed = one_f_one_b.closed_form(times, m)
        assert closed >= want * (1 - 1e-12)
        if times[-1] >= max(times):
            assert closed == pytest.approx(want, rel=1e-12)


def test_heavy_first_stage_ranks_as_simulated() -> None:
    # QA's Llama 3.1 8B pp4 m 16 case in shape: layer splits 7,9,9,7 and 9,9,9,5 with the
    # output layer worth ~3 layers on the last stage (forward 1, backward 2 a layer): the brute
    # force ranks 9,9,9,5 first; the closed form ranked them the other way.
    def step(split: list[int]) -> float:
        fwd = [float(n) for n in split]
        fwd[-1] += 3
        bwd = [2 * f for f in fwd]
        return one_f_one_b.step(fwd, bwd, 16)

    for split in ([7, 9, 9, 7], [9, 9, 9, 5]):
        fwd = [float(n) for n in split]
        fwd[-1] += 3
        assert step(split) == pytest.approx(_brute(fwd, [2 * f for f in fwd], 16))
    assert step([9, 9, 9, 5]) < step([7, 9, 9, 7])


@pytest.mark.parametrize("name", ["ZBVZeroBubble", "DualPipeV"])
def test_v_hops_from_torch_order(name: str) -> None:
    # a V's chunk turn is local: what the hops add is the simulated order's own difference, not
    # Megatron's wrap-around count 2 (pp vpp - 1) hops of the interleaved formula
    stages = [(1.0, 2.0), (1.1, 2.2), (0.9, 1.8), (1.3, 2.6)]
    hop = 0.05
    fwd, bwd = [f for f, _ in stages], [b for _, b in stages]
    wgt = [schedule.WGRAD_SHARE * b for b in bwd]

    def end(p2p: float) -> float:
        ops = v_schedule.simulate_v(name, 4, 8, fwd, bwd, wgt, p2p)
        return max(op.end for rank in ops for op in rank)

    got = v_p2p_exposed(name, 8, hop, stages, [0.0] * 4)
    assert got == pytest.approx(end(hop) - end(0.0))
    assert got != pytest.approx(schedule.interleaved_p2p_exposed(2, 8, hop, fwd, bwd))


def test_order_free_floor_is_the_least_over_every_order() -> None:
    # brute force: one_f_one_b.floor over every permutation of the stages; the least is the
    # descending order's, and no order's exact step is below it
    rng = random.Random(11)
    for _ in range(200):
        p, m = rng.randint(1, 5), rng.randint(1, 9)
        times = [rng.uniform(1, 4) for _ in range(p)]
        least = min(one_f_one_b.floor(list(o), m) for o in itertools.permutations(times))
        assert pipeline_floor(times, m, 1, ordered=False) == pytest.approx(least, rel=1e-12)
        for o in itertools.permutations(range(p)):
            fwd = [times[i] / 3 for i in o]
            bwd = [2 * times[i] / 3 for i in o]
            assert least <= _brute(fwd, bwd, m) * (1 + 1e-12)
    # even stages t = 1, pp 4, m 8: (m + pp - 1) t = 11 by hand, the closed form, not m t = 8
    assert pipeline_floor([1.0] * 4, 8, 1, ordered=False) == pytest.approx(11)
    # bound.below's d = 1 term: floors (2, 2, 2) at m_top 4 seen at m = 8 are h = g / 2 = 1:
    # descending floor of h at m = 8: max(8, 8 + 1, 8 + 2) = 10 by hand (m max h = 8 alone);
    # the spares' raised worst 3 gives m_top x 3 = 12 instead
    assert scaled_floor((2.0, 2.0, 2.0), 2.0, 4, 8) == pytest.approx(10)
    assert scaled_floor((2.0, 2.0, 2.0), 3.0, 4, 8) == pytest.approx(12)


def test_simulation_remembered_and_fast_order_cached() -> None:
    # the op order is found once per (pp, m); a repeated stage-time tuple is not simulated again
    one_f_one_b._simulated.cache_clear()
    fwd, bwd = (3.0, 1.0, 1.0), (6.0, 2.0, 2.0)
    first = one_f_one_b.step(fwd, bwd, 6)
    assert first == pytest.approx(_brute(list(fwd), list(bwd), 6))
    assert one_f_one_b.step(fwd, bwd, 6) == first
    assert one_f_one_b._simulated.cache_info().hits == 1
