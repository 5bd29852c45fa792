"""One order of the pools with the block recompute count N = 0, exactly (issue 25): each pipeline
rank's lines (`order_ranks`: time a_r + b_r y_r, the layers its memory and its pool's host
allow, its tail), and every split that may be optimal (`best_of_order`, `minimisers`), for
`planner.search.pool_enum`.

With the order fixed, rank r's time is linear, t_r = a_r + b_r y_r (a_r its fixed time and
boundary hops), its memory fits on an interval of y_r and its tail (the sync and optimizer step
after the pipeline) is the largest of a few lines in y_r. For a bound T on the slowest stage and
S on the tail, the least sum of stage times is a linear programme over a box with one equality
(sum_r y_r = L, each y_r in [lo_r(T, S), up_r(T, S)]), solved exactly by filling the layers left
after every rank's least onto the ranks of least b_r first (integral: the bounds are integers).
The objective (m - 1) max_r t_r + sum_r t_r + tail is least at some T equal to one rank's time
and S equal to one rank's tail (or 0): T runs over those values upward from the least feasible
one and stops once (m - 1) T plus the least sum exceeds the best found; S likewise, each a sweep
over T, until S plus the least objective without the tail exceeds it.

Equally good splits: at an optimal (T, S), every minimiser puts the ranks of b_r below the
marginal one at up_r, above it at lo_r, and shares the rest among the marginal ranks in any way
(`minimisers`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Sequence

from planner.search.solver import Grid, PoolSplitProblem

Rank = tuple[int, int, int, int, tuple[tuple[int, int], ...]]
"""(a, b, lo, hi, tails): time a + b y, memory fitting for lo <= y <= hi, tail the largest of
sa + sb y over its (sa, sb) lines (none: 0)."""


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
    return -((t - a) // -b), math.inf  # y >= (a - t) / -b, rounded up


def twin_orders(p: PoolSplitProblem, same: Sequence[object] = ()) -> list[tuple[int, ...]]:
    """The pools' orders, twins (equal columns, capacity, stages, and `same`'s entries: per
    pool, what else a caller reads of it) in index order only."""
    npools = len(p.stages)
    grids: tuple[Grid, ...] = (p.fixed_mib, p.layer_mib, p.recompute_mib, p.fixed_us)
    grids += (p.layer_us, p.recompute_us, *(g for line in p.tail_us for g in line), p.whole_mib)
    grids += (p.most_layers,)
    cols = [
        (
            p.stages[k],
            p.capacity_mib[k],
            p.boundary_us[k],
            tuple(tuple(row[k] for row in g) for g in grids),
            same[k] if same else None,
        )
        for k in range(npools)
    ]
    out = []
    for o in itertools.permutations(range(npools)):
        if all(cols[i] != cols[j] or i < j for i, j in itertools.combinations(o, 2)):
            out.append(o)
    return out


def rank_pools(p: PoolSplitProblem, same: Sequence[object] = ()) -> list[tuple[int, ...]]:
    """`twin_orders` spelled out per rank: each pool repeated for its stages."""
    return [tuple(k for k in o for _ in range(p.stages[k])) for o in twin_orders(p, same)]


def hops(ks: tuple[int, ...], r: int) -> int:
    """How many of rank r's neighbours sit in another pool (each crossing costs its pool's
    boundary_us)."""
    return (r > 0 and ks[r - 1] != ks[r]) + (r + 1 < len(ks) and ks[r + 1] != ks[r])


def order_ranks(p: PoolSplitProblem, ks: tuple[int, ...], least_memory: bool) -> list[Rank] | None:
    """Each rank's (a, b, lo, hi, tails) in the order `ks` with N = 0 (`least_memory`: memory
    as with block recompute on and every layer recomputed, the least any N >= 1 gives); None when
    a rank fits no y."""
    L = p.num_layers
    out = []
    for r, k in enumerate(ks):
        saved = min(p.recompute_mib[r][k], 0)
        per = p.layer_mib[r][k] + (saved if least_memory else 0)
        spare = p.capacity_mib[k] - p.fixed_mib[r][k]
        # the least over c in [1, y]: c = y - 1 (one layer's saving short) or c = y (whole)
        spare -= min(p.whole(r, k), -saved) if least_memory else 0
        lo, hi = _interval(spare, per, L)
        hi = min(hi, p.most(r, k))  # its host's cap
        if lo > hi:
            return None
        a = p.fixed_us[r][k] + p.boundary_us[k] * hops(ks, r)
        tails = tuple((f[r][k], g[r][k]) for f, g in p.tail_us)
        out.append((a, p.layer_us[r][k], lo, hi, tails))
    return out


Capped = list[tuple[int, int, int, int]]
"""Each rank's (a, b, lo, hi): its time a + b y, and the layers its memory and a cap on its
tail allow (`_capped`)."""


def _capped(ranks: list[Rank], s: float) -> Capped | None:
    """The ranks with their tails capped at s folded into their layer bounds (None: a rank
    then holds no count)."""
    out = []
    for a, b, lo, hi, tails in ranks:
        low, up = float(lo), float(hi)
        for sa, sb in tails:
            sl, su = _time_interval(sa, sb, s)
            low, up = max(low, sl), min(up, su)
        if low > up:
            return None
        out.append((a, b, int(low), int(up)))
    return out


def _box_at(capped: Capped, t: float) -> tuple[list[int], list[int]] | None:
    """Each rank's least and most layers with its time <= t too (None: empty)."""
    lows, ups = [], []
    for a, b, lo, hi in capped:
        if t != math.inf:
            tl, tu = _time_interval(a, b, t)
            lo = int(tl) if tl > lo else lo
            hi = int(tu) if tu < hi else hi
        if lo > hi:
            return None
        lows.append(lo)
        ups.append(hi)
    return lows, ups


def _box(ranks: list[Rank], t: float, s: float) -> tuple[list[int], list[int]] | None:
    """Each rank's least and most layers with its time <= t and its tail <= s (None: empty)."""
    capped = _capped(ranks, s)
    return None if capped is None else _box_at(capped, t)


def _fill_at(capped: Capped, cheap: list[int], L: int, t: float) -> list[int] | None:
    """`_fill` of ranks whose tails are capped already (`_capped`)."""
    box = _box_at(capped, t)
    if box is None:
        return None
    lows, ups = box
    rest = L - sum(lows)
    if rest < 0:
        return None
    y = list(lows)
    for r in cheap:
        if rest == 0:
            break
        take = min(rest, ups[r] - lows[r])
        y[r] += take
        rest -= take
    return None if rest else y


def _fill(ranks: list[Rank], cheap: list[int], L: int, t: float, s: float) -> list[int] | None:
    """The lexicographically smallest y of least sum of times with every time <= t and every
    tail <= s (None when there is none): each rank at its least, the rest onto `cheap` (ranks
    by b, then by last)."""
    capped = _capped(ranks, s)
    return None if capped is None else _fill_at(capped, cheap, L, t)


def _times(ranks: list[Rank], y: list[int]) -> list[int]:
    return [rk[0] + rk[1] * v for rk, v in zip(ranks, y, strict=True)]


def _tail(ranks: list[Rank], y: list[int]) -> int:
    """The step's tail of y (`solver.tail_of`)."""
    return max(0, max(_rank_tail(rk, v) for rk, v in zip(ranks, y, strict=True)))


def _rank_tail(rk: Rank, y: int) -> int:
    """A rank's tail at y layers: the largest of its lines (0 without any)."""
    return max((sa + sb * y for sa, sb in rk[4]), default=0)


def objective(ranks: list[Rank], y: list[int], m: int) -> int:
    times = _times(ranks, y)
    return (m - 1) * max(times) + sum(times) + _tail(ranks, y)


def _cheap(ranks: list[Rank]) -> list[int]:
    """The ranks by their time per layer, then last first (`_fill`'s order)."""
    return sorted(range(len(ranks)), key=lambda r: (ranks[r][1], -r))


def _time_values(ranks: list[Rank]) -> list[int]:
    """Every time a rank can take (the candidates for the slowest stage), ascending."""
    return sorted({rk[0] + rk[1] * v for rk in ranks for v in range(rk[2], rk[3] + 1)})


def least_tail(ranks: list[Rank], L: int) -> int | None:
    """The least tail any split of the ranks has (None: none fits)."""
    values = _tail_values(ranks)
    at = _first_tail(ranks, L, values)
    return values[at] if at < len(values) else None


def _tail_values(ranks: list[Rank]) -> list[int]:
    """Every tail a rank can have at a count its memory allows, and 0 (the step's tail is at
    least 0), ascending; the negative ones left out."""
    values = {0}
    for _, _, lo, hi, lines in ranks:
        if not lines:
            continue
        counts = range(lo, hi + 1)
        sa, sb = lines[0]
        tails = [sa + sb * v for v in counts]
        for sa, sb in lines[1:]:
            tails = [max(t, sa + sb * v) for t, v in zip(tails, counts, strict=True)]
        values.update(t for t in tails if t > 0)
    return sorted(values)


def _first_tail(ranks: list[Rank], L: int, values: list[int]) -> int:
    """The index of the first of `values` at which, every tail capped there, a split exists
    (len(values): none)."""
    cheap = _cheap(ranks)
    return bisect.bisect_left(
        values, True, key=lambda s: _fill(ranks, cheap, L, math.inf, s) is not None
    )


def _sweep(
    ranks: list[Rank], times: list[int], L: int, m: int, s: float, best: float
) -> tuple[list[tuple[int, float]], float, float]:
    """With every tail capped at s: (objective, T) of every bound T on the slowest stage (one
    of `times`) whose least split may be optimal (objective <= `best` so far, and no worse than
    any later T; T = inf where only the sum counts, m = 1), the least objective seen, and a
    lower bound of the objective without the tail of every split (the least seen, or what the
    first T not visited leaves: (m - 1) T plus the least sum)."""
    cheap = _cheap(ranks)
    capped = _capped(ranks, s)
    y_inf = None if capped is None else _fill_at(capped, cheap, L, math.inf)
    if capped is None or y_inf is None:
        return [], best, math.inf
    least_sum = sum(_times(ranks, y_inf))
    if m == 1:
        obj = least_sum + _tail(ranks, y_inf)
        return [(obj, math.inf)], min(best, obj), least_sum
    best = min(best, objective(ranks, y_inf, m))
    # the T the loop below may visit: (m - 1) T + least_sum <= best (one more for rounding)
    top = len(times)
    if best < math.inf:
        top = bisect.bisect_right(times, (best - least_sum) / (m - 1) + 1)

    def feasible(t: float) -> bool:
        return _fill_at(capped, cheap, L, t) is not None

    first = bisect.bisect_left(times, True, hi=top, key=feasible)
    found: list[tuple[int, float]] = []
    pipeline = math.inf
    for t in times[first:]:
        if (m - 1) * t + least_sum > best:
            pipeline = min(pipeline, (m - 1) * t + least_sum)
            break
        y = _fill_at(capped, cheap, L, t)
        assert y is not None
        ts = _times(ranks, y)
        pipe = (m - 1) * max(ts) + sum(ts)
        obj = pipe + _tail(ranks, y)
        if max(ts) == t:
            found.append((obj, t))
        best = min(best, obj)
        pipeline = min(pipeline, pipe)
    return found, best, pipeline


def best_of_order(ranks: list[Rank], L: int, m: int, best: float) -> list[tuple[int, float, float]]:
    """(objective, T, S) of every bound T on the slowest stage and S on the tail whose least
    split may be optimal: first with the tails free (S = inf, `_sweep`), then, where the ranks
    have tails, S upward over their values from the least feasible one, each a sweep over T with
    the tails capped at S, until S plus the least objective without the tail exceeds the best
    found (a split whose tail is S costs at least that)."""
    times = _time_values(ranks)
    free, best, pipeline = _sweep(ranks, times, L, m, math.inf, best)
    out = [(obj, t, math.inf) for obj, t in free]
    if not any(rk[4] for rk in ranks) or pipeline == math.inf:
        return out
    values = _tail_values(ranks)
    first = _first_tail(ranks, L, values)
    assert first < len(values)  # the free sweep found a split
    for s in values[first:]:
        if s + pipeline > best:
            break
        found, best, _ = _sweep(ranks, times, L, m, s, best)
        out += [(obj, t, float(s)) for obj, t in found]
    return out


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


def minimisers(ranks: list[Rank], L: int, t: float, s: float) -> Iterator[list[int]]:
    """Every y of least sum with times <= t and tails <= s, lexicographically (`_fill`'s
    first)."""
    y = _fill(ranks, _cheap(ranks), L, t, s)
    box = _box(ranks, t, s)
    assert y is not None and box is not None
    lows, ups = box
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
