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
import heapq
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


def _rank_pools(p: PoolSplitProblem) -> list[tuple[int, ...]]:
    """`twin_orders` spelled out per rank: each pool repeated for its stages."""
    return [tuple(k for k in o for _ in range(p.stages[k])) for o in twin_orders(p)]


def _hops(ks: tuple[int, ...], r: int) -> int:
    """How many of rank r's neighbours sit in another pool (each crossing costs boundary_us)."""
    return (r > 0 and ks[r - 1] != ks[r]) + (r + 1 < len(ks) and ks[r + 1] != ks[r])


def _ranks(p: PoolSplitProblem, ks: tuple[int, ...], least_memory: bool) -> list[Rank] | None:
    """Each rank's (a, b, lo, hi) in the order `ks` with N = 0 (`least_memory`: memory as if
    every layer were recomputed, the least any N gives); None when a rank fits no y."""
    L = p.num_layers
    out = []
    for r, k in enumerate(ks):
        per = p.layer_mib[r][k] + (min(p.recompute_mib[r][k], 0) if least_memory else 0)
        lo, hi = _interval(p.capacity_mib[k] - p.fixed_mib[r][k], per, L)
        if lo > hi:
            return None
        out.append((p.fixed_us[r][k] + p.boundary_us * _hops(ks, r), p.layer_us[r][k], lo, hi))
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
    for ks in _rank_pools(p):
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
    for ks in _rank_pools(p):
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


def _convex_times(p: PoolSplitProblem, ks: tuple[int, ...]) -> list[list[float]] | None:
    """Per rank, a convex lower bound of its time at each y in [1, L] over every N >= 1 (inf
    where none fits): y layers fit only with c >= need(y) = ceil((memory without recompute -
    capacity) / MiB saved per recomputed layer) of them recomputed, and c = min(N, y) >= 1, so
    its time is at least a + b y + recompute_us max(need(y), 1) (c <= y); the lower convex hull
    of those points is convex and, as they rise with y, rises too. None where a coefficient's
    sign breaks that (the caller takes a weaker bound)."""
    L = p.num_layers
    out = []
    for r, k in enumerate(ks):
        a = p.fixed_us[r][k] + p.boundary_us * _hops(ks, r)
        b, rt, rm = p.layer_us[r][k], p.recompute_us[r][k], p.recompute_mib[r][k]
        if b < 0 or rt < 0 or rm > 0 or p.layer_mib[r][k] < 0:
            return None
        spare = p.capacity_mib[k] - p.fixed_mib[r][k]
        points: list[tuple[int, int]] = []
        for y in range(1, L + 1):
            excess = y * p.layer_mib[r][k] - spare
            need = 1 if excess <= 0 else (max(-(-excess // -rm), 1) if rm < 0 else y + 1)
            if need > y:
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


def recompute_bound(p: PoolSplitProblem) -> float | None:
    """A lower bound of the objective over every N >= 1 (None: no N >= 1 fits, or recompute
    is off), memory-aware: each rank's least time at y layers (`_convex_times`), convex in y,
    so for each bound T on the slowest stage the least sum takes the cheapest marginal layers
    first (exact for the relaxation), T running upward as in `optimal_splits`."""
    if not p.recompute or sum(p.stages) > p.num_layers:
        return None
    L, m = p.num_layers, p.microbatches
    best = math.inf
    for ks in _rank_pools(p):
        rows = _convex_times(p, ks)
        if rows is None:
            weak = linear_optimum(p, least_memory=True)
            return None if weak is None else float(weak)
        best = min(best, _convex_best(rows, L, m, best))
    return None if best == math.inf else best


def split_bound(p: PoolSplitProblem) -> float | None:
    """A lower bound of the objective over every N (None: nothing fits): N = 0's optimum, or
    `recompute_bound`, the less."""
    exact = linear_optimum(p)
    rb = recompute_bound(p)
    if exact is None:
        return rb
    return float(exact) if rb is None else min(float(exact), rb)


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
    rb = recompute_bound(p)
    least = linear_optimum(p)
    return rb is not None and (least is None or rb < least)


def best_splits(p: PoolSplitProblem, cutoff_us: float | None = None) -> list[PoolSplit]:
    """The optimal assignments of `p` (`solve_pools`'s objective), best first: where no N >= 1
    can beat N = 0 (`recompute_bound`), every optimal one with N = 0 by enumeration
    (`optimal_splits`: the fewest layers recomputed), else CP-SAT's (`solve_pools`); [] when
    none fits, or when the bound over every N is at least `cutoff_us` (the split cannot enter
    the top)."""
    if sum(p.stages) > p.num_layers or not may_fit(p):
        return []
    ties = optimal_splits(p)
    rb = recompute_bound(p)
    if rb is None or (ties and rb >= ties[0].objective):
        return ties
    if cutoff_us is not None and min([rb, *(t.objective for t in ties[:1])]) >= cutoff_us:
        return []
    split = solve_pools(p)
    return [] if split is None else [split]
