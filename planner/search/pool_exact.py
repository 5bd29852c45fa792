"""The exact model's fastest split of one pooled layout (issue 25), where the bound leaves few
to score: `planner.search.pools.plan_split` takes the split solver's answer (1F1B's closed form
on the problem's lines) and scores it exactly; the exact step (`one_f_one_b.step`, Megatron's
op order) runs an earlier slowest stage faster than the closed form, so another split may be
faster exactly (Llama 3.1 70B on h100 + a100 with a small h100 host: 14.65 s against 14.39 s,
tests/search/test_pools_host_search.py). Here every order of the pools (twins once) and every
split of the layers is bounded, and those whose bound does not exceed the best step so far are
scored exactly, least bound first (then pools, then layers).

Bound of one split (`split_floor`), on the lines the pooled search bounds every layout by
(`pool_bounds.lower_bound_s` on `pools.time_lines`: a rank's stage time a_r + b_r y_r on its
pool, exact at the sampled counts, with its sends at its pool's hop and each crossing's term of
its pool), less what rounding them to the microsecond may have added (`lowered`); recompute
only adds to a stage. For every path j of `pool_step_bound.terms` the pipeline takes at least
sum_q A_jq t_q (that module's proof: a path's ops run one after another), and the tail after
it at least each rank's tail forms (`pool_tails`: lines no exact estimate goes into, not the
chords of `pools.time_lines`, which are above the tail between their samples). Rank r's own
path (D = 0: m t_r and the ranks before it) gives m (a_r + b_r y_r) <= step, so no split faster
than a step E has y_r above (E / m - a_r) / b_r, nor, with the tail after it (the largest, at
least rank r's o0_r + o1_r y_r), above (E - m a_r - o0_r) / (m b_r + o1_r): the box the splits
are listed in (`_box`; it drops only splits `split_floor` puts above E, so more layouts come
under `SPLITS` and are refined exactly).

Scored (`scorer`): first the split without recompute, whose step is the least of its steps at
any block recompute count N (recompute only adds time): where that is slower than the best so
far, the split is done; else the least N that fits (`_least_n`), the exact model judging.

Exact where the box is small: where the splits in the box, over every order, number at most
`SPLITS`, the best found is the exact model's fastest split of the layout;
else the solver's answer stands, scored exactly. With the search's cut (the top-th step so
far), splits whose bound reaches it are not scored: they cannot enter the top rows."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, memory
from planner.model.memory import StageMemory
from planner.model.tail_floor import TailLine
from planner.search.pool_bounds import order_lines
from planner.search.pool_host import host_ok
from planner.search.pool_plan import PoolPlan, apply
from planner.search.pool_step_bound import Line, terms
from planner.search.pool_tails import NONE, TailFloor, path_tails
from planner.search.rules import violations
from planner.search.solver import PoolSplit, PoolSplitProblem, objective_of, stage_values, tail_of

MIB = 2**20
SPLITS = 2048
"""The most splits (over every order) bounded one by one; above it the solver's answer stands.
Two stages of L layers are 2 (L - 1) splits; three of 40 layers, 2 x 741 (pools examples:
Llama 3.1 70B's 80 layers over two stages, 158)."""

Fitted = tuple[Job, Layout, memory.MemoryReport, PoolSplit]
"""A split that fits the GPUs: the job and layout it applies to, their memory, the split."""
Score = Callable[[tuple[int, ...], tuple[int, ...], float], PoolPlan | None]
"""The exact model's plan of (pools per rank, layers per rank), None where it does not fit or
is slower than the seconds given."""


def scorer(job: Job, layout: Layout, headroom_pct: float, p: PoolSplitProblem) -> Score:
    """`Score` of `layout` on the job's pools: the split with the least block recompute count N
    that fits the GPUs (0 only where `p` allows none; the time only grows with N, each stage
    recomputing min(N, its layers)), None where none does, it breaks a rule or is over a host;
    its `PoolSplit` carries `p`'s objective and times, as the solver's do (`_least_n`)."""

    def at(ks: tuple[int, ...], ys: tuple[int, ...], n: int) -> Fitted | list[StageMemory]:
        """The split at N = n where it fits the GPUs, else its stages over their capacity
        ([] where it breaks a rule)."""
        pj, lay = apply(job, layout, PoolSplit(ys, ks, n, 0, ()))
        if violations(pj, lay):
            return []
        mem = memory.estimate(pj, lay, headroom_pct)
        if not mem.fits:
            return [st for st in mem.stages if st.total > st.capacity]
        times = stage_values(p, ys, ks, n)[1]
        split = PoolSplit(ys, ks, n, objective_of(p, times, tail_of(p, ys, ks)), tuple(times))
        return pj, lay, mem, split

    def score(ks: tuple[int, ...], ys: tuple[int, ...], beat: float) -> PoolPlan | None:
        # the step without recompute: the least of the split's at any N (recompute only adds)
        pj, lay = apply(job, layout, PoolSplit(ys, ks, 0, 0, ()))
        plain = None
        if not violations(pj, lay):
            if (plain := cost.estimate(pj, lay)).step_time_s > beat:
                return None
        elif not p.recompute:
            return None
        got = _least_n(p, ks, ys, lambda n: at(ks, ys, n))
        if got is None or not host_ok(got[0], got[1]):  # what a host pins does not read N
            return None
        perf = plain if plain and not got[3].recompute_layers else cost.estimate(*got[:2])
        return PoolPlan(*got[:3], perf, got[3])

    return score


def _least_n(
    p: PoolSplitProblem,
    ks: tuple[int, ...],
    ys: tuple[int, ...],
    at: Callable[[int], Fitted | list[StageMemory]],
) -> Fitted | None:
    """The split at the least N that fits (None: none does), the exact model judging each N.
    A stage's memory falls with each layer it recomputes (c = min(N, y) < y) and at c = y adds
    the working memory of rebuilding a layer whole (`PoolSplitProblem.whole_mib`), the same
    for every N >= y: the N it fits at are an interval [lo_r, hi_r], and so the N every stage
    fits at, [lo, hi]. So an N that does not fit below one that does is below lo; so is one at
    which a stage with c < y is over (below its lo_r); where only whole stages are over, no N
    from the least of their y fits. From the least N that `p`'s memory lines fit (0 where
    none), each N below lo jumps by what the stages over lack over each layer's saving on the
    lines (at least one), to the first N that fits; then N - 1, and bisection back to lo
    (between an N below lo and one in [lo, hi] the predicate is monotone)."""
    ceiling = max(ys) if p.recompute else 0
    fits = (n for n in range(ceiling + 1) if _lines_fit(p, ks, ys, n))
    below, n = -1, next(fits, 0)
    found: Fitted | None = None
    while n <= ceiling:
        got = at(n)
        if isinstance(got, tuple):
            found = got
            break
        if not got:  # a rule refuses it; the rules read no N >= 1 of the block method
            if n == 0:  # (`rules.features`): N = 0 against N >= 1, recompute or not
                below, n = 0, 1
                continue
            if below < 0 and isinstance(plain := at(0), tuple):
                return plain
            return None
        short = [st for st in got if min(n, ys[st.stage]) < ys[st.stage]]
        if not short:  # only whole stages over: no N from the least of their y fits
            ceiling = min(ceiling, min(ys[st.stage] for st in got) - 1)
            n = below + 1
            continue
        below = n
        step = 1
        for st in short:
            saved = -p.recompute_mib[st.stage][ks[st.stage]]
            if saved > 0:
                step = max(step, math.ceil((st.total - st.capacity) / MIB / saved))
        n = min(n + step, max(n + 1, ceiling))
    if found is None:
        return None
    top = n
    while top - below > 1:
        mid = top - 1 if top == n else (below + top) // 2  # N - 1 first: the lines' is close
        got = at(mid)
        if isinstance(got, tuple):
            top, found = mid, got
        else:
            below = mid
    return found


def _lines_fit(p: PoolSplitProblem, ks: tuple[int, ...], ys: tuple[int, ...], n: int) -> bool:
    """Whether every stage of the split at N = n fits `p`'s memory lines."""
    used = stage_values(p, ys, ks, n)[0]
    return all(v <= p.capacity_mib[k] for v, k in zip(used, ks, strict=True))


def split_floor(
    lines: Sequence[Line], ys: Sequence[int], m: int, tails: Sequence[TailLine] = ()
) -> float:
    """No more than the exact step (microseconds) of the split `ys` of ranks with `lines`
    (module docstring): the longest of `terms`' paths at the lines' times, with a rank's tail
    form after it (`pool_tails.path_tails`; `tails` empty: the tail taken as 0)."""
    times = [a + b * y for (a, b, _, _), y in zip(lines, ys, strict=True)]
    rows = terms(len(lines), m)[0]
    if tails:
        return path_tails(rows, times, ys, tails)
    return max(sum(c * t for c, t in zip(row, times, strict=True)) for row in rows)


def lowered(p: PoolSplitProblem, ks: tuple[int, ...]) -> list[Line]:
    """The order's lines (`pool_bounds.order_lines`: fixed time with the boundary hops, time a
    layer) of `p`, each less what rounding to the microsecond may have added (1/2 a
    coefficient: the intercept, the slope, each hop)."""
    return [(a - 1.5, b - 0.5, lo, hi) for a, b, lo, hi in order_lines(p, ks)]


def _box(
    lines: Sequence[Line], L: int, m: int, step_us: float, tail: Sequence[TailLine] = ()
) -> list[int]:
    """Each rank's most layers in a split whose step is at most `step_us`: its D = 0 path,
    m (a_r + b_r y_r), and after the pipeline the largest tail, at least rank r's own first
    form o0_r + o1_r y_r (`pool_tails`; none where `tail` is empty)."""
    pp = len(lines)
    out = []
    for r, (a, b, _, _) in enumerate(lines):
        o0, o1 = (tail[r][0], tail[r][1]) if tail else (0.0, 0.0)
        most = L - (pp - 1)
        if m * b + o1 > 0:
            most = min(most, math.floor((step_us - m * a - o0) / (m * b + o1)))
        out.append(most)
    return out


def _splits(L: int, most: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every y with 1 <= y_r <= most_r and sum y = L, lexicographically."""
    if len(most) == 1:
        if 1 <= L <= most[0]:
            yield (L,)
        return
    room = sum(most[1:])
    for y in range(max(1, L - room), min(most[0], L - (len(most) - 1)) + 1):
        for rest in _splits(L - y, most[1:]):
            yield (y, *rest)


def _count(L: int, most: Sequence[int], limit: int) -> int:
    """How many `_splits` there are, counting stopped past `limit`."""
    ways = [1] + [0] * L  # ways[s]: splits of s layers over the ranks so far
    for hi in most:
        nxt = [0] * (L + 1)
        for s, w in enumerate(ways):
            if w:
                for y in range(1, min(hi, L - s) + 1):
                    nxt[s + y] += w
        ways = nxt
    return min(ways[L], limit + 1)


def refine(
    p: PoolSplitProblem,
    orders: Sequence[tuple[int, ...]],
    best: PoolPlan,
    score: Score,
    cutoff_s: float | None = None,
    limit: int = SPLITS,
    tails: TailFloor = NONE,
) -> PoolPlan:
    """The exact model's fastest split where the box holds at most `limit` splits (module
    docstring), else `best` (the solver's). Of equally fast splits, the first in (pools, layers)
    order. With `cutoff_s` (the search's top-th step so far), a split whose bound is at least
    it is not scored: it cannot enter the top rows, so what is returned is the layout's
    fastest split wherever that is below the cut, and no faster than the cut where not.
    `tails`: the layout's tail floor (`pool_tails.tail_floor`), in each split's bound."""
    L, m = p.num_layers, p.microbatches
    assert best.split is not None
    key = (best.step_time, best.split.pools, best.split.layers)
    cut = math.inf if cutoff_s is None else cutoff_s * 1e6

    def beaten(low: float) -> bool:
        """No split of this bound is faster than the best so far, or enters the top rows."""
        return low > key[0] * 1e6 or low >= cut

    boxes = []
    for ks in orders:
        lines, tail = lowered(p, ks), tails.order(ks)
        boxes.append((ks, lines, tail, _box(lines, L, m, min(key[0] * 1e6, cut), tail)))
    if sum(_count(L, most, limit) for *_, most in boxes) > limit:
        return best
    listed: list[tuple[float, tuple[int, ...], tuple[int, ...]]] = []
    for ks, lines, tail, most in boxes:
        for ys in _splits(L, most):
            if not beaten(low := split_floor(lines, ys, m, tail)):
                listed.append((low, ks, ys))
    listed.sort()
    for low, ks, ys in listed:
        if beaten(low):
            break  # sorted by the bound: no later split is faster
        plan = score(ks, ys, min(key[0], cut * 1e-6))
        if plan is not None and (plan.step_time, ks, ys) < key:
            best, key = plan, (plan.step_time, ks, ys)
    return best
