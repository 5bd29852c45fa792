"""The split over pools without recompute, exactly and without OR-Tools (issue 25): every optimal
assignment of `planner.search.solver.PoolSplitProblem` with the block recompute count N = 0, in a
defined order, so that the pooled search neither loads OR-Tools (~0.4 s) nor depends on which of
several equally good splits a parallel solver happens to find first.

Each order of the pools is solved exactly on its own (`planner.search.pool_order`); orders equal
up to swapping twin pools (equal columns in every table, capacity and stages) give the same
problem: one of each is solved. Equally good splits are listed, lexicographically in (pools,
layers), up to `TIES` (`optimal_splits`). Where block recompute (N >= 1) may beat N = 0, a
memory-aware lower bound over every N >= 1 (`recompute_bound`) says so, and CP-SAT
(`planner.search.solver.solve_pools`) solves the split.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math

from planner.search.pool_order import (
    Rank,
    best_of_order,
    hops,
    least_tail,
    minimisers,
    objective,
    order_ranks,
    rank_pools,
)
from planner.search.pool_tails import NONE, TailFloor, tailed_floor
from planner.search.solver import (
    PoolSplit,
    PoolSplitProblem,
    may_fit,
    objective_of,
    solve_pools,
    stage_values,
    tail_of,
)

TIES = 8
"""The most equally good splits listed (the first in lexicographic order of pools, layers)."""


def linear_optimum(p: PoolSplitProblem, least_memory: bool = False) -> int | None:
    """The least objective with N = 0 (with `least_memory`: each rank's memory at its least
    over every N >= 1, times without recompute: a lower bound of every N >= 1's optimum); None
    when no assignment fits."""
    best: float = math.inf
    for ks in rank_pools(p):
        ranks = order_ranks(p, ks, least_memory)
        if ranks is None:
            continue
        for obj, _, _ in best_of_order(ranks, p.num_layers, p.microbatches, best):
            best = min(best, obj)
    return None if best == math.inf else int(best)


def optimal_splits(p: PoolSplitProblem) -> list[PoolSplit]:
    """Every optimal assignment with N = 0 (up to `TIES`, lexicographically in pools and
    layers); [] when none fits. Each is re-checked by `stage_values`. An optimal split is a
    least-sum split of the box of its own slowest stage and tail, so it is among the minimisers
    of some (T, S) that `best_of_order` reports at the optimum; each minimiser's own objective
    decides."""
    L, m = p.num_layers, p.microbatches
    found: list[tuple[int, tuple[int, ...], list[Rank], float, float]] = []
    best: float = math.inf
    for ks in rank_pools(p):
        ranks = order_ranks(p, ks, False)
        if ranks is None:
            continue
        for obj, t, s in best_of_order(ranks, L, m, best):
            found.append((obj, ks, ranks, t, s))
            best = min(best, obj)
    splits: dict[tuple[tuple[int, ...], tuple[int, ...]], PoolSplit] = {}
    for obj, ks, ranks, t, s in found:
        if obj != best:
            continue
        for y in itertools.islice(minimisers(ranks, L, t, s), TIES):
            if objective(ranks, y, m) != best or (ks, tuple(y)) in splits:
                continue
            mem, times = stage_values(p, tuple(y), ks, 0)
            assert sum(y) == L and objective_of(p, times, tail_of(p, tuple(y), ks)) == obj
            assert all(v <= p.capacity_mib[k] for v, k in zip(mem, ks, strict=True))
            assert all(v <= p.most(r, k) for r, (v, k) in enumerate(zip(y, ks, strict=True)))
            splits[ks, tuple(y)] = PoolSplit(tuple(y), ks, 0, int(obj), tuple(times))
    return [splits[key] for key in sorted(splits)][:TIES]


def _convex_times(p: PoolSplitProblem, ks: tuple[int, ...]) -> list[list[float]] | None:
    """Per rank, a convex lower bound of its time at each y in [1, L] over every N >= 1 (inf
    where none fits): y layers fit only with c >= need(y) of them recomputed (`_need`), and
    c = min(N, y) >= 1, so its time is at least a + b y + recompute_us need(y); the lower convex
    hull of those points is convex and, as they rise with y, rises too. None where a
    coefficient's sign breaks that (the caller takes a weaker bound)."""
    L = p.num_layers
    out = []
    for r, k in enumerate(ks):
        a = p.fixed_us[r][k] + p.boundary_us[k] * hops(ks, r)
        b, rt, rm = p.layer_us[r][k], p.recompute_us[r][k], p.recompute_mib[r][k]
        if b < 0 or rt < 0 or rm > 0 or p.layer_mib[r][k] < 0:
            return None
        spare = p.capacity_mib[k] - p.fixed_mib[r][k]
        points: list[tuple[int, int]] = []
        for y in range(1, p.most(r, k) + 1):  # within its host's cap
            need = _need(y * p.layer_mib[r][k] - spare, rm, p.whole(r, k), y)
            if need is None:
                if points:
                    break  # memory grows with y: no more y fits
                continue
            if len(points) < y - 1:
                return None  # a gap: not an interval
            points.append((y, a + b * y + rt * need))
        if not points:
            return None
        row = _hull(points) + [math.inf] * (L - points[-1][0])
        if points[0][0] > 1 or any(u > v for u, v in itertools.pairwise(row)):
            return None  # not rising in y from y = 1: no convex bound claimed
        out.append(row)
    return out


def _need(excess: int, saved: int, whole: int, y: int) -> int | None:
    """The fewest of a stage's y layers recomputed (at least 1) that fit it, its memory without
    recompute `excess` MiB over its capacity: c < y saves -`saved` each; c = y also adds
    `whole` (`PoolSplitProblem.whole_mib`); None: no c fits."""
    if y > 1:
        c = 1 if excess <= 0 else (-(-excess // -saved) if saved < 0 else y)
        if c < y:
            return c
    return y if excess + y * saved + whole <= 0 else None


def _hull(points: list[tuple[int, int]]) -> list[float]:
    """The lower convex hull of points at y = y0, y0 + 1, ..., evaluated at each of them."""
    hull: list[tuple[int, int]] = []
    for pt in points:
        while len(hull) >= 2:
            (x1, t1), (x2, t2) = hull[-2], hull[-1]
            if (t2 - t1) * (pt[0] - x1) >= (pt[1] - t1) * (x2 - x1):
                hull.pop()  # hull[-1] is on or above the chord from hull[-2] to pt
            else:
                break
        hull.append(pt)
    out: list[float] = []
    for (x1, t1), (x2, t2) in itertools.pairwise(hull):
        out += [t1 + (t2 - t1) * (x - x1) / (x2 - x1) for x in range(x1, x2)]
    out.append(float(hull[-1][1]))
    return out


def recompute_bound(p: PoolSplitProblem, target: float = math.inf) -> float | None:
    """A lower bound of the objective over every N >= 1 (None: no N >= 1 fits, or recompute
    is off), memory-aware: each rank's least time at y layers (`_convex_times`), convex in y,
    so for each bound T on the slowest stage the least sum takes the cheapest marginal layers
    first (exact for the relaxation), T running upward as in `optimal_splits`, plus the least
    tail any split has with each rank's memory at its least (`least_tail`). With tails, the two
    parts are least at different splits: where that leaves an order's bound below the best so
    far and below `target`, the order's optimum with
    every rank's memory at its least and times without recompute (`best_of_order`, exact for
    that relaxation, and so also below every N's objective) is taken where it is higher. Where
    the optimum over every N >= 1 is at least `target`, what is returned may be any value at
    least `target` (a caller asking whether it is below `target` needs no more)."""
    if not p.recompute or sum(p.stages) > p.num_layers:
        return None
    L, m = p.num_layers, p.microbatches
    best = math.inf
    for ks in rank_pools(p):
        rows = _convex_times(p, ks)
        if rows is None:
            weak = linear_optimum(p, least_memory=True)
            return None if weak is None else float(weak)
        if not p.tail_us:
            best = min(best, _convex_best(rows, L, m, best))
            continue
        # each rank's memory at its least over every N >= 1: None, no such split in this order
        ranks = order_ranks(p, ks, True)
        if ranks is None:
            continue
        floor = least_tail(ranks, L) or 0
        bound = _convex_best(rows, L, m, best - floor) + floor
        if bound < min(best, target):
            # the order's relaxed optimum where it is below min(best, target), else something
            # above that
            found = best_of_order(ranks, L, m, min(best, target))
            bound = max(bound, min((obj for obj, _, _ in found), default=math.inf))
        best = min(best, bound)
    return None if best == math.inf else best


def split_bound(p: PoolSplitProblem, tails: TailFloor = NONE) -> float | None:
    """A lower bound of the EXACT 1F1B step plus tail (`pool_step_bound`, not of the solver's
    closed form, which is above it where an earlier stage is the slowest) over every split and
    every N (None: nothing fits), memory-aware: per order, each rank's layers within what its
    memory allows at its least over every N (`order_ranks` with `least_memory` where recompute
    is on: N = 0's memory is no less, recompute_mib <= 0), its time without recompute (which
    only adds), `pool_step_bound.order_floor` with the tail's floor `tails`
    (`pool_tails.tailed_floor`; none: the tail taken as 0). Not with the least of the tail
    lines `p.tail_us`: chords, above the tail between their samples (`pools.time_lines`)."""
    best = math.inf
    for ks in rank_pools(p, [tails.column(k) for k in range(len(p.stages))]):
        ranks = order_ranks(p, ks, p.recompute)
        if ranks is None:
            continue
        lines = [(a, b, lo, hi) for a, b, lo, hi, _ in ranks]
        best = min(best, tailed_floor(lines, p.num_layers, p.microbatches, True, tails.order(ks)))
    return None if best == math.inf else best


def _convex_best(rows: list[list[float]], L: int, m: int, best: float) -> float:
    """The relaxation's least objective in one order (inf where nothing fits)."""

    def least_sum(t: float) -> tuple[float, float] | None:
        """(sum, max) of the least sum with every time <= t."""
        ups = [bisect.bisect_right(row, t) for row in rows]  # rows rise: y in [1, ups]
        if min(ups) < 1 or sum(ups) < L:
            return None
        y = [1] * len(rows)
        heap = [(row[1] - row[0], r) for r, row in enumerate(rows) if ups[r] > 1]
        heapq.heapify(heap)
        for _ in range(L - len(rows)):
            _, r = heapq.heappop(heap)
            y[r] += 1
            if y[r] < ups[r]:
                heapq.heappush(heap, (rows[r][y[r]] - rows[r][y[r] - 1], r))
        times = [row[v - 1] for row, v in zip(rows, y, strict=True)]
        return sum(times), max(times)

    if len(rows) > L:
        return math.inf
    top = least_sum(math.inf)
    if top is None or top[0] == math.inf:
        return math.inf
    least, slowest = top
    best = min(best, (m - 1) * slowest + least)
    values = sorted({v for row in rows for v in row if v < math.inf})
    first = bisect.bisect_left(values, True, key=lambda t: least_sum(t) is not None)
    for t in values[first:]:
        if (m - 1) * t + least > best:
            break
        got = least_sum(t)
        assert got is not None
        best = min(best, (m - 1) * got[1] + got[0])
    return best


def needs_solver(p: PoolSplitProblem) -> bool:
    """Whether `best_splits` hands `p` to CP-SAT: some N >= 1 may beat N = 0."""
    if not p.recompute or sum(p.stages) > p.num_layers or not may_fit(p):
        return False
    least = linear_optimum(p)
    rb = recompute_bound(p, math.inf if least is None else least)
    return rb is not None and (least is None or rb < least)


def best_splits(
    p: PoolSplitProblem, cutoff_us: float | None = None, tails: TailFloor = NONE
) -> list[PoolSplit]:
    """The optimal assignments of `p` (`solve_pools`'s objective), best first: where no N >= 1
    can beat N = 0 (`recompute_bound`), every optimal one with N = 0 by enumeration
    (`optimal_splits`: the fewest layers recomputed), else CP-SAT's (`solve_pools`); [] when
    none fits, or, before CP-SAT, when `split_bound` (of the exact step over every split and N)
    is at least `cutoff_us`, an exact step (the split cannot enter the top); `tails`: the
    layout's tail floor, in that bound."""
    if sum(p.stages) > p.num_layers or not may_fit(p):
        return []
    ties = optimal_splits(p)
    rb = recompute_bound(p, ties[0].objective if ties else math.inf)
    if rb is None or (ties and rb >= ties[0].objective):
        return ties
    least = None if cutoff_us is None else split_bound(p, tails)
    if cutoff_us is not None and least is not None and least >= cutoff_us:
        return []  # not the closed-form values: the cut is an exact step
    split = solve_pools(p)
    return [] if split is None else [split]
