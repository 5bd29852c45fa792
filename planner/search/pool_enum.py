"""The split over pools without recompute, exactly and without OR-Tools (issue 25): every optimal
assignment of `planner.search.solver.PoolSplitProblem` with the block recompute count N = 0, in a
defined order, so that the pooled search neither loads OR-Tools (~0.4 s) nor depends on which of
several equally good splits a parallel solver happens to find first.

With N = 0 and the pools' order fixed, rank r's time is linear, t_r = a_r + b_r y_r (a_r its
fixed time and boundary hops), and its memory fits on an interval of y_r. For a bound T on the
slowest stage, the least sum of stage times is a linear programme over a box with one equality
(sum_r y_r = L, each y_r in [lo_r(T), up_r(T)]), solved exactly by filling the layers left after
every rank's least onto the ranks of least b_r first (integral: the bounds are integers). The
objective (m - 1) max_r t_r + sum_r t_r is least at some T equal to one rank's time, so T runs
over those values upward from the least feasible one and stops once (m - 1) T plus the least sum
at any T exceeds the best found. Orders equal up to swapping twin pools (equal columns in every
table, capacity and stages) give the same problem: one of each is solved.

Equally good splits: at an optimal T, every minimiser puts the ranks of b_r below the marginal
one at up_r, above it at lo_r, and shares the rest among the marginal ranks in any way; these are
listed, lexicographically in (pools, layers), up to `TIES` (`optimal_splits`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator

from planner.search.solver import (
    PoolSplit,
    PoolSplitProblem,
    may_fit,
    objective_of,
    solve_pools,
    stage_values,
)

TIES = 8
"""The most equally good splits listed (the first in lexicographic order of pools, layers)."""

Rank = tuple[int, int, int, int]
"""(a, b, lo, hi): time a + b y, memory fitting for lo <= y <= hi."""


def _interval(spare: int, per: int, num_layers: int) -> tuple[int, int]:
    """The y in [1, L] with per y <= spare (empty: lo > hi)."""
    if per > 0:
        return 1, min(num_layers, spare // per)
    if per == 0:
        return (1, num_layers) if spare >= 0 else (1, 0)
    return max(1, -(-spare // per)), num_layers  # y >= ceil(spare / per)


def _time_interval(a: int, b: int, t: float) -> tuple[float, float]:
    """The y with a + b y <= t."""
    if t == math.inf:
        return -math.inf, math.inf
    if b > 0:
        return -math.inf, (t - a) // b
    if b == 0:
        return (-math.inf, math.inf) if a <= t else (math.inf, -math.inf)
    return -((a - t) // -b), math.inf  # y >= ceil((t - a) / b)


def twin_orders(p: PoolSplitProblem) -> list[tuple[int, ...]]:
    """The pools' orders, twins (equal columns, capacity, stages) in index order only."""
    npools = len(p.stages)
    grids = (p.fixed_mib, p.layer_mib, p.recompute_mib, p.fixed_us, p.layer_us, p.recompute_us)
    cols = [
        (p.stages[k], p.capacity_mib[k], tuple(tuple(row[k] for row in g) for g in grids))
        for k in range(npools)
    ]
    out = []
    for o in itertools.permutations(range(npools)):
        if all(cols[i] != cols[j] or i < j for i, j in itertools.combinations(o, 2)):
            out.append(o)
    return out


def _ranks(p: PoolSplitProblem, ks: tuple[int, ...], least_memory: bool) -> list[Rank] | None:
    """Each rank's (a, b, lo, hi) in the order `ks` with N = 0 (`least_memory`: memory as if
    every layer were recomputed, the least any N gives); None when a rank fits no y."""
    pp, L = len(ks), p.num_layers
    out = []
    for r, k in enumerate(ks):
        hops = (r > 0 and ks[r - 1] != k) + (r + 1 < pp and ks[r + 1] != k)
        per = p.layer_mib[r][k] + (min(p.recompute_mib[r][k], 0) if least_memory else 0)
        lo, hi = _interval(p.capacity_mib[k] - p.fixed_mib[r][k], per, L)
        if lo > hi:
            return None
        out.append((p.fixed_us[r][k] + p.boundary_us * hops, p.layer_us[r][k], lo, hi))
    return out


def _fill(ranks: list[Rank], cheap: list[int], L: int, t: float) -> list[int] | None:
    """The lexicographically smallest y of least sum of times with every time <= t (None when
    there is none): each rank at its least, the rest onto `cheap` (ranks by b, then by last)."""
    lows, ups = [], []
    for a, b, lo, hi in ranks:
        tl, tu = _time_interval(a, b, t)
        lows.append(max(lo, tl))
        ups.append(min(hi, tu))
    rest = L - sum(lows)
    if rest < 0 or any(lo > up for lo, up in zip(lows, ups, strict=True)):
        return None
    y = [int(v) for v in lows]
    for r in cheap:
        if rest == 0:
            break
        take = int(min(rest, ups[r] - lows[r]))
        y[r] += take
        rest -= take
    return None if rest else y


def _times(ranks: list[Rank], y: list[int]) -> list[int]:
    return [a + b * v for (a, b, _, _), v in zip(ranks, y, strict=True)]


def _best_of_order(ranks: list[Rank], L: int, m: int, best: float) -> list[tuple[int, int]]:
    """(objective, T) of every T whose least split may be optimal (objective <= `best` so far,
    and no worse than any later T); T = inf where only the sum counts (m = 1)."""
    cheap = sorted(range(len(ranks)), key=lambda r: (ranks[r][1], -r))
    y_inf = _fill(ranks, cheap, L, math.inf)
    if y_inf is None:
        return []
    t_inf = _times(ranks, y_inf)
    least_sum = sum(t_inf)
    if m == 1:
        return [(least_sum, -1)]
    values = sorted({a + b * v for a, b, lo, hi in ranks for v in range(lo, hi + 1)})
    first = bisect.bisect_left(values, True, key=lambda t: _fill(ranks, cheap, L, t) is not None)
    found = []
    best = min(best, (m - 1) * max(t_inf) + least_sum)
    for t in values[first:]:
        if (m - 1) * t + least_sum > best:
            break
        y = _fill(ranks, cheap, L, t)
        assert y is not None
        times = _times(ranks, y)
        obj = (m - 1) * max(times) + sum(times)
        if max(times) == t:
            found.append((obj, t))
        best = min(best, obj)
    return found


def _shares(lows: list[int], ups: list[int], rest: int) -> Iterator[tuple[int, ...]]:
    """Every way to add `rest` to `lows` within `ups`, lexicographically."""
    if not lows:
        if rest == 0:
            yield ()
        return
    room = sum(u - lo for u, lo in zip(ups[1:], lows[1:], strict=True))
    for v in range(max(lows[0], lows[0] + rest - room), min(ups[0], lows[0] + rest) + 1):
        for tail in _shares(lows[1:], ups[1:], rest - (v - lows[0])):
            yield (v, *tail)


def _minimisers(ranks: list[Rank], cheap: list[int], L: int, t: float) -> Iterator[list[int]]:
    """Every y of least sum with times <= t, lexicographically (`_fill`'s first)."""
    y = _fill(ranks, cheap, L, t)
    assert y is not None
    lows, ups = [], []
    for a, b, lo, hi in ranks:
        tl, tu = _time_interval(a, b, t)
        lows.append(int(max(lo, tl)))
        ups.append(int(min(hi, tu)))
    filled = [r for r in range(len(ranks)) if y[r] > lows[r]]
    if not filled:
        yield y
        return
    marginal = max(ranks[r][1] for r in filled)
    group = [r for r in range(len(ranks)) if ranks[r][1] == marginal]
    rest = sum(y[r] - lows[r] for r in group)
    for share in _shares([lows[r] for r in group], [ups[r] for r in group], rest):
        out = list(y)
        for r, v in zip(group, share, strict=True):
            out[r] = v
        yield out


def linear_optimum(p: PoolSplitProblem, least_memory: bool = False) -> int | None:
    """The least objective with N = 0 (with `least_memory`: each rank's memory at its least
    over every N, times without recompute: a lower bound of every N's optimum); None when no
    assignment fits."""
    best: float = math.inf
    for o in twin_orders(p):
        ks = tuple(k for k in o for _ in range(p.stages[k]))
        ranks = _ranks(p, ks, least_memory)
        if ranks is None:
            continue
        for obj, _ in _best_of_order(ranks, p.num_layers, p.microbatches, best):
            best = min(best, obj)
    return None if best == math.inf else int(best)


def optimal_splits(p: PoolSplitProblem) -> list[PoolSplit]:
    """Every optimal assignment with N = 0 (up to `TIES`, lexicographically in pools and
    layers); [] when none fits. Each is re-checked by `stage_values`."""
    L, m = p.num_layers, p.microbatches
    found: list[tuple[int, tuple[int, ...], list[Rank], float]] = []
    best: float = math.inf
    for o in twin_orders(p):
        ks = tuple(k for k in o for _ in range(p.stages[k]))
        ranks = _ranks(p, ks, False)
        if ranks is None:
            continue
        for obj, at in _best_of_order(ranks, L, m, best):
            found.append((obj, ks, ranks, math.inf if at < 0 else at))
            best = min(best, obj)
    splits = []
    for obj, ks, ranks, t in found:
        if obj != best:
            continue
        cheap = sorted(range(len(ranks)), key=lambda r: (ranks[r][1], -r))
        for y in itertools.islice(_minimisers(ranks, cheap, L, t), TIES):
            mem, times = stage_values(p, tuple(y), ks, 0)
            assert sum(y) == L and objective_of(p, times) == obj
            assert all(v <= p.capacity_mib[k] for v, k in zip(mem, ks, strict=True))
            splits.append(PoolSplit(tuple(y), ks, 0, int(obj), tuple(times)))
    splits.sort(key=lambda s: (s.pools, s.layers))
    return splits[:TIES]


def best_splits(p: PoolSplitProblem, cutoff_us: float | None = None) -> list[PoolSplit]:
    """The optimal assignments of `p` (`solve_pools`'s objective), best first: without recompute
    (or where the least memory any N gives, times without recompute, does no better than N = 0)
    every optimal one by enumeration (`optimal_splits`), else CP-SAT's (`solve_pools`); [] when
    none fits, or when that bound is at least `cutoff_us` (the split cannot enter the top)."""
    if sum(p.stages) > p.num_layers or not may_fit(p):
        return []
    ties = optimal_splits(p)
    if not p.recompute:
        return ties
    bound = linear_optimum(p, least_memory=True)
    if bound is None:
        return []  # no N lets every rank hold its layers
    if ties and bound >= ties[0].objective:
        return ties  # recompute cannot do better: N = 0 (the fewest layers recomputed)
    if cutoff_us is not None and bound >= cutoff_us:
        return []
    split = solve_pools(p)
    return [] if split is None else [split]
