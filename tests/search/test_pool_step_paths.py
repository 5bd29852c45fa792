"""`planner.search.pool_step_bound`'s parts, each against its oracle: every path of `terms` is
no longer than Megatron's 1F1B step (`one_f_one_b.simulate_1f1b`, the longest path through the
ops, with random forward and backward times); `order_floor` is below the least exact step of
its order (brute force over every composition, random forward shares); where it skips the
simplex (`_top` certifies the cheap weights), the simplex's weights give no more; equal
ranks meet the closed form (hand arithmetic); and with the tail after the pipeline
(`pool_tails`), the bounds stay below the least exact step (brute force)."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.model.one_f_one_b import closed_form, simulate_1f1b, step
from planner.search import pool_step_bound as psb
from planner.search import pool_tails
from tests.search.test_solver_pools import compositions

REL = 1e-9


@pytest.mark.parametrize("seed", range(60))
def test_every_path_is_below_the_step(seed: int) -> None:
    rng = random.Random(7300 + seed)
    pp, m = rng.randint(1, 7), rng.randint(1, 12)
    fwd = [rng.uniform(0.1, 5) for _ in range(pp)]
    bwd = [rng.uniform(0.1, 5) for _ in range(pp)]
    got = simulate_1f1b(fwd, bwd, m)
    rows, _, shapes = psb.terms(pp, m)
    for row, (r, c, d) in zip(rows, shapes, strict=True):
        assert row == (1,) * r + (c,) + (d,) * (pp - r - 1)
        path = sum(k * (f + b) for k, f, b in zip(row, fwd, bwd, strict=True))
        assert path <= got * (1 + REL), (pp, m, row)


def _lines(rng: random.Random, pp: int, L: int) -> list[psb.Line]:
    out = []
    for _ in range(pp):
        lo = rng.choice((1, 1, 2))
        out.append((rng.uniform(0, 40), rng.uniform(5, 30), lo, rng.choice((L, lo + 2))))
    return out


@pytest.mark.parametrize("seed", range(60))
def test_the_order_floor_is_below_the_least_exact_step(seed: int) -> None:
    rng = random.Random(7500 + seed)
    pp = rng.randint(1, 5)
    L, m = rng.randint(2 * pp, 2 * pp + 5), rng.choice((1, 2, 3, pp, pp + 1, 2 * pp, 3 * pp))
    lines = _lines(rng, pp, L)
    share = [rng.uniform(0.2, 0.6) for _ in range(pp)]
    least = None
    for ys in compositions(L, pp):
        if any(not lo <= y <= hi for y, (_, _, lo, hi) in zip(ys, lines, strict=True)):
            continue
        times = [a + b * y for y, (a, b, _, _) in zip(ys, lines, strict=True)]
        fwd = [f * t for f, t in zip(share, times, strict=True)]
        got = step(fwd, [t - f for f, t in zip(fwd, times, strict=True)], m)
        least = got if least is None else min(least, got)
    for tight in (False, True):
        bound = psb.order_floor(lines, L, m, tight)
        assert (least is None) == (bound == float("inf"))
        if least is not None:
            assert bound <= least * (1 + REL)


@pytest.mark.parametrize("seed", range(60))
def test_the_simplex_is_skipped_only_where_it_finds_no_more(seed: int) -> None:
    rng = random.Random(7700 + seed)
    pp = rng.randint(1, 6)
    L, m = rng.randint(pp, 4 * pp), rng.choice((1, 2, pp, pp + 1, 2 * pp, 4 * pp))
    if rng.random() < 0.5:  # equal per-layer times within two pools, as the pools give
        b = (rng.uniform(5, 30), rng.uniform(5, 30))
        lines = [(rng.uniform(0, 40), b[r * 2 // pp], 1, L) for r in range(pp)]
    else:
        lines = [(rng.uniform(0, 40), rng.uniform(5, 30), 1, L) for _ in range(pp)]
    cheap = psb.order_floor(lines, L, m, tight=False)
    top = psb._top(lines, L, m)
    w = psb._game(lines, L, m)
    assert w is not None
    simplex = psb.least(lines, w, L)
    if top is not None:  # an upper bound of the linear programme's optimum
        assert simplex <= top * (1 + 1e-6)
        if cheap >= top * (1 - 1e-9):
            assert simplex <= cheap * (1 + 1e-6)
    assert psb.order_floor(lines, L, m) >= max(cheap, simplex) * (1 - 1e-9)


@pytest.mark.parametrize(
    ("pp", "m"), [(pp, m) for pp, m in itertools.product((2, 4, 8), (8, 16, 32)) if m > pp]
)
def test_equal_ranks_meet_the_closed_form(pp: int, m: int) -> None:
    """pp equal ranks of 3 layers at 10 us, no fixed time (hand arithmetic): every split's
    closed form is at least that of 3 layers a rank, (m - 1) 30 + pp 30 us, the exact step of
    equal stages; with m > pp the paths with two round trips (D = 2) reach it."""
    L = 3 * pp
    lines = [(0.0, 10.0, 1, L)] * pp
    want = (m - 1) * 30 + pp * 30
    assert closed_form([30] * pp, m) == want
    assert psb.order_floor(lines, L, m) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("seed", range(200))
def test_the_tailed_bounds_are_below_the_least_exact_step(seed: int) -> None:
    """`pool_tails.path_tails` (one split) and `pool_tails.tailed_floor` (every split of the
    order) with random tail lines, against brute force: each rank's time its line plus a random
    shortfall of the line (the exact time is only at least the line), its tail the least that
    its two forms allow, max(0, o0 + o1 y, o0 + o1 y + s0 + s1 y - k t), the step
    `one_f_one_b.step` of random forward shares plus the largest tail. (Without its limit
    k nu <= w the floor's tail weighting is above it at seed 177; without the path's
    coefficient >= k, at seed 5.)"""
    rng = random.Random(7900 + seed)
    pp = rng.randint(1, 5)
    L, m = rng.randint(2 * pp, 2 * pp + 5), rng.choice((1, 2, 3, pp, pp + 1, 2 * pp, 3 * pp))
    lines = _lines(rng, pp, L)
    tails = [
        (
            rng.uniform(-5, 40),
            rng.uniform(0, 20),
            rng.uniform(-100, 100),
            rng.uniform(0, 60),
            rng.choice((0.0, 0.5, 0.85, 1.0)),
        )
        for _ in range(pp)
    ]
    short = [rng.choice((0.0, rng.uniform(0, 60))) for _ in range(pp)]
    share = [rng.uniform(0.2, 0.6) for _ in range(pp)]
    rows = psb.terms(pp, m)[0]
    least = None
    for ys in compositions(L, pp):
        if any(not lo <= y <= hi for y, (_, _, lo, hi) in zip(ys, lines, strict=True)):
            continue
        low = [a + b * y for y, (a, b, _, _) in zip(ys, lines, strict=True)]
        times = [t + s for t, s in zip(low, short, strict=True)]
        tail = max(
            max(0.0, o0 + o1 * y, o0 + o1 * y + s0 + s1 * y - k * t)
            for (o0, o1, s0, s1, k), y, t in zip(tails, ys, times, strict=True)
        )
        fwd = [f * t for f, t in zip(share, times, strict=True)]
        got = step(fwd, [t - f for f, t in zip(fwd, times, strict=True)], m) + tail
        assert pool_tails.path_tails(rows, low, ys, tails) <= got * (1 + REL), ys
        least = got if least is None else min(least, got)
    for tight in (False, True):
        bound = pool_tails.tailed_floor(lines, L, m, tight, tails)
        assert (least is None) == (bound == float("inf"))
        if least is not None:
            assert bound <= least * (1 + REL)
