"""Seconds no split of a pools problem beats, memory aside (`lower_bound_s`): what the pooled
search (`planner.search.pool_search`) bounds each layout's split by before it solves it, on the
time lines of `planner.search.pools` (or the solver's problem built from them)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.search.pool_step_bound import Line
from planner.search.pool_tails import NONE, TailFloor, tailed_floor
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
    boundary_us: tuple[int, ...]
    tail_us: TailLines = ()
    """The stages' tails after the pipeline (`PoolSplitProblem`'s): an estimate for the solver's
    objective, no bound (`pools.time_lines`); `lower_bound_s` reads the tail's floor
    (`pool_tails.TailFloor`) instead."""


def lower_bound_s(
    p: PoolSplitProblem | TimeLines, tight: bool = True, tails: TailFloor = NONE
) -> float:
    """Seconds no split of the problem beats, memory aside: a lower bound of the EXACT 1F1B
    step plus its tail (`planner.model.one_f_one_b.step`, what the exact model scores), not of
    the solver's closed form (m - 1) max_r t_r + sum_r t_r, which is above the exact step where
    an earlier stage is the slowest: the larger of two bounds.

    Any order: the step is at least m max_r t_r (`one_f_one_b.floor`, the slowest rank's term),
    and max_r t_r at least the slowest stage of the fluid split (each rank at its fastest pool's
    per-layer time, layers divisible).

    Per order of the pools (`_order_bound`, the least over the orders): with the order fixed,
    each rank's pool and pool boundaries are known, and so its a_r (fixed time plus the boundary
    hops) and b_r (per layer) with t_r >= a_r + y_r b_r (recompute adds c_r x recompute_us >= 0),
    y_r >= 1, sum_r y_r = L: `pool_step_bound.order_floor` (its proof there), with the tail
    after the pipeline (sync and optimizer step) from the lines it is never below (`tails`,
    `pool_tails.tailed_floor`; none: taken as 0, the least it is). Not from its lines
    `tail_us`: chords of a curve that is neither convex nor monotone in the layers, above it
    between their samples (`pools.time_lines`). Without `tight`: `order_floor`'s cheap
    weightings alone (no simplex)."""
    return max(_any_order_bound(p), _order_bound(p, tight=tight, tails=tails)) * 1e-6


def _any_order_bound(p: PoolSplitProblem | TimeLines) -> float:
    """`lower_bound_s`'s part for any order, in microseconds: m x the fluid slowest stage T.
    Rank r's time on any pool is at least a_r + b_r y_r with a_r, b_r its least fixed and
    per-layer times over the pools, a_r with the boundary term of each of its neighbours where
    that is negative on the pool (else none), so with b_r > 0 every
    y_r <= (T - a_r) / b_r, and as they sum to L, T >= (L + sum_r a_r / b_r) / sum_r 1 / b_r
    (0, no bound claimed, where some b_r is not positive)."""
    pp = len(p.fixed_us)
    least = []
    for r, (f, g) in enumerate(zip(p.fixed_us, p.layer_us, strict=True)):
        ends = (r > 0) + (r < pp - 1)  # its neighbours: each may sit in another pool
        least.append(
            (min(a + ends * min(h, 0) for a, h in zip(f, p.boundary_us, strict=True)), min(g))
        )
    if min(b for _, b in least) <= 0:
        return 0.0
    fluid = (p.num_layers + sum(a / b for a, b in least)) / sum(1 / b for _, b in least)
    return p.microbatches * max(fluid, 0.0)


def order_lines(p: PoolSplitProblem | TimeLines, ks: Sequence[int], caps: Grid = ()) -> list[Line]:
    """Each rank's (a, b, 1, most) in the order `ks` (the ranks' pools): fixed time plus its
    boundary hops, per-layer time, at most its cap (`caps`, [rank][pool]; empty: L) layers."""
    L = p.num_layers
    out = []
    for r, k in enumerate(ks):
        a = float(p.fixed_us[r][k])
        a += p.boundary_us[k] * ((r > 0 and ks[r - 1] != k) + (r + 1 < len(ks) and ks[r + 1] != k))
        out.append((a, float(p.layer_us[r][k]), 1, min(caps[r][k], L) if caps else L))
    return out


def _order_bound(
    p: PoolSplitProblem | TimeLines, caps: Grid = (), tight: bool = True, tails: TailFloor = NONE
) -> float:
    """`lower_bound_s`'s per-order part in microseconds, each rank within its cap (`caps`;
    inf: no order fits them)."""
    pp, L, m = sum(p.stages), p.num_layers, p.microbatches
    if pp > L:
        return 0.0
    best = math.inf
    for order in _orders(p, caps, tails):
        ks = [k for k in order for _ in range(p.stages[k])]
        lines = order_lines(p, ks, caps)
        best = min(best, tailed_floor(lines, L, m, tight, tails.order(ks)))
    return best


def _orders(p: PoolSplitProblem | TimeLines, caps: Grid, tails: TailFloor) -> list[tuple[int, ...]]:
    """The pools' orders, twins (equal stages and columns in every table the bound reads) in
    index order only: swapping twins changes no rank's lines, hops or tail."""
    grids = (p.fixed_us, p.layer_us, *(g for line in p.tail_us for g in line), caps)
    cols = [
        (
            p.stages[k],
            p.boundary_us[k],
            tuple(tuple(row[k] for row in g) for g in grids),
            tails.column(k),
        )
        for k in range(len(p.stages))
    ]
    return [
        o
        for o in itertools.permutations(range(len(p.stages)))
        if all(cols[i] != cols[j] or i < j for i, j in itertools.combinations(o, 2))
    ]


def capped_bound_s(
    p: PoolSplitProblem | TimeLines, caps: Grid, tails: TailFloor = NONE
) -> float | None:
    """`lower_bound_s` with each rank on pool k at most caps[r][k] layers (its pool's host:
    `planner.search.pool_host`), so no less than it (None: no order fits the caps)."""
    if sum(p.stages) > p.num_layers:
        return None
    bound = _order_bound(p, caps, tails=tails)
    return None if bound == math.inf else max(bound, _any_order_bound(p)) * 1e-6
