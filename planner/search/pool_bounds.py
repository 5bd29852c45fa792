"""Seconds no split of a pools problem beats, memory aside (`lower_bound_s`): what the pooled
search (`planner.search.pool_search`) bounds each layout's split by before it solves it, on the
time lines of `planner.search.pools` (or the solver's problem built from them)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from planner.search.solver import Grid, PoolSplitProblem, TailLines


@dataclass(frozen=True)
class TimeLines:
    """The time part of `pools.problem` (microseconds per micro-batch, [rank][pool]): all that
    `lower_bound_s` reads, from the exact model's stage times alone (no memory estimate), so a
    layout can be bounded before its memory lines are computed."""

    num_layers: int
    fixed_us: Grid
    layer_us: Grid
    recompute_us: Grid
    microbatches: int
    stages: tuple[int, ...]
    boundary_us: int
    tail_us: TailLines = ()
    """The stages' tails after the pipeline (`PoolSplitProblem`'s); `lower_bound_s` takes them
    as 0, the least a tail is."""


def lower_bound_s(p: PoolSplitProblem | TimeLines) -> float:
    """Seconds no split of the problem beats, memory aside, in the solver's objective
    (m - 1) max_r t_r + sum_r t_r: the larger of two bounds.

    Any order: max_r t_r is at least the slowest stage of the fluid split (each rank at its
    fastest pool's per-layer time, layers divisible), and sum_r t_r at least every layer at the
    fastest per-layer time plus each rank's least fixed time.

    Per order of the pools (`_order_bound`, the least over the orders): with the order fixed,
    each rank's pool and pool boundaries are known, and so its a_r (fixed time plus the boundary
    hops) and b_r (per layer) with t_r >= a_r + y_r b_r (recompute adds c_r x recompute_us >= 0).
    With y_r >= 1 and sum_r y_r = L (real y_r, a relaxation of the integer layers):
    max_r t_r >= max_r (a_r + b_r), and >= T_w = (L + sum_r a_r / b_r) / sum_r 1 / b_r, as
    every y_r <= (max_r t_r - a_r) / b_r and they sum to L; sum_r t_r >= sum_r (a_r + b_r)
    + (L - pp) min_r b_r (every layer past each rank's first at the least per-layer time), and
    the tail (`_tail_bound`). Each part is minimised separately, so their sum is at most the
    objective's least value."""
    return max(_any_order_bound(p), _order_bound(p)) * 1e-6


def _any_order_bound(p: PoolSplitProblem | TimeLines) -> float:
    """`lower_bound_s`'s part for any order, in microseconds."""
    rates = [1 / max(min(row), 1) for row in p.layer_us]
    fluid = p.num_layers / sum(rates)
    total = p.num_layers * min(map(min, p.layer_us)) + sum(max(min(row), 0) for row in p.fixed_us)
    return (p.microbatches - 1) * fluid + total


def _order_bound(p: PoolSplitProblem | TimeLines) -> float:
    """`lower_bound_s`'s per-order part in microseconds (0 where a per-layer time is not
    positive: no bound claimed)."""
    pp, L, m = sum(p.stages), p.num_layers, p.microbatches
    if pp > L:
        return 0.0
    best = math.inf
    for order in itertools.permutations(range(len(p.stages))):
        ks = [k for k in order for _ in range(p.stages[k])]
        a = [float(p.fixed_us[r][k]) for r, k in enumerate(ks)]
        b = [p.layer_us[r][k] for r, k in enumerate(ks)]
        if min(b) <= 0:
            return 0.0
        for r in range(pp - 1):
            if ks[r] != ks[r + 1]:
                a[r] += p.boundary_us
                a[r + 1] += p.boundary_us
        slowest = max(max(x + y for x, y in zip(a, b, strict=True)), 0.0)
        fluid = (L + sum(x / y for x, y in zip(a, b, strict=True))) / sum(1 / y for y in b)
        total = sum(a) + sum(b) + (L - pp) * min(b)
        best = min(best, (m - 1) * max(slowest, fluid) + total + _tail_bound(p, ks))
    return best


def _tail_bound(p: PoolSplitProblem | TimeLines, ks: list[int]) -> float:
    """No more than the tail of any split in the order `ks` (the ranks' pools), memory aside,
    from each of its lines (a rank's tail is at least each): at least 0 and each rank's line at
    its fewest layers (1, or L where it falls), and, where every rank's line rises with the
    layers, the fluid bound: every y_r <= (S - sa_r) / sb_r, summing to L, so
    S >= (L + sum_r sa_r / sb_r) / sum_r 1 / sb_r."""
    L = p.num_layers
    least = 0.0
    for f, g in p.tail_us:
        sa = [f[r][k] for r, k in enumerate(ks)]
        sb = [g[r][k] for r, k in enumerate(ks)]
        least = max(least, max(x + y * (1 if y >= 0 else L) for x, y in zip(sa, sb, strict=True)))
        if min(sb) > 0:
            fluid = (L + sum(x / y for x, y in zip(sa, sb, strict=True))) / sum(1 / y for y in sb)
            least = max(least, fluid)
    return least
