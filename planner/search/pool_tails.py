"""The tail after the pipeline in the pooled search's bounds (`pool_bounds`, `pool_exact`,
`pool_enum.split_bound`): each (rank, pool)'s lines its tail is never below
(`planner.model.tail_floor`), in microseconds.

The step waits for the largest tail, T = max_r T_r, and T_r >= o_r(y_r) and
T_r >= o_r(y_r) + s_r(y_r) - k_r t_r (t_r the rank's stage time per micro-batch, 0 <= k_r <= 1),
each line in the rank's layers y_r. A bound that adds a tail to the pipeline's paths adds
sum_r mu_r of those forms, mu >= 0 of sum at most 1 (T >= 0): the pipeline's part is
sum_q w_q t_q with w >= 0 (`pool_step_bound`), so with the second form's weight nu_r <= mu_r
the t_q's weight becomes w_q - k_q nu_q, which must stay >= 0 for t_q's lower line to bound it
(`tailed_floor`); one split's path j takes one rank's form, the second where A_jr >= k_r
(`path_tails`).

Unlike `pools.time_lines`' chords (an estimate for the split solver's objective, above the tail
between their samples), these read no exact estimate, and hold at every count. Each line is the
model's in seconds times 1e6, its intercept 1 us less (the model's sums and these lines round
differently, by far less)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import pools
from planner.model.tail_floor import TailLine, tail_lines
from planner.search.pool_plan import apply
from planner.search.pool_step_bound import Line, least, order_weights
from planner.search.solver import PoolSplit

TailGrid = tuple[tuple[TailLine, ...], ...]
"""Each (rank, pool)'s `TailLine` in microseconds (k as it is), [rank][pool]."""


@dataclass(frozen=True)
class TailFloor:
    """The tail lines of a pooled layout's ranks on each pool (module docstring)."""

    lines: TailGrid

    def order(self, ks: tuple[int, ...] | list[int]) -> list[TailLine]:
        """Each rank's lines on its pool in the order `ks` (the ranks' pools; [] for `NONE`)."""
        return [self.lines[r][k] for r, k in enumerate(ks)] if self.lines else []

    def column(self, k: int) -> tuple[TailLine, ...]:
        """Pool k's lines, rank by rank (equal columns: the pools are twins for the tail; ()
        for `NONE`)."""
        return tuple(row[k] for row in self.lines)


NONE = TailFloor(())
"""No tail lines: the tail taken as 0, its least."""


def tail_floor(job: Job, layout: Layout) -> TailFloor:
    """`TailFloor` of `layout`'s degrees on the job's pools: `tail_lines` of each pool's job
    (`pools.pool_job`) on the layout split as every split is applied (`pool_plan.apply`: the
    embedding on the first rank, the output and MTP layers on the last), its layers even
    (the lines leave the count free)."""
    L, pp = job.arch.num_layers, layout.pp
    ys = tuple(L // pp + (r < L % pp) for r in range(pp))
    _, lay = apply(job, layout, PoolSplit(ys, pools.rank_pools(job, layout), 0, 0, ()))
    clusters = [p.cluster for p in job.pools]
    cols: list[tuple[TailLine, ...]] = []
    for k, cluster in enumerate(clusters):
        twin = clusters.index(cluster)
        cols.append(cols[twin] if twin < k else tail_lines(pools.pool_job(job, k), lay))
    rows = [
        tuple(_us(col[r]) for col in cols)  # [rank][pool]
        for r in range(pp)
    ]
    return TailFloor(tuple(rows))


def _us(line: TailLine) -> TailLine:
    """A line in seconds as microseconds, its intercepts 1 us lower (module docstring)."""
    o0, o1, s0, s1, k = line
    return o0 * 1e6 - 1, o1 * 1e6, s0 * 1e6 - 1, s1 * 1e6, k


def tailed_floor(
    lines: Sequence[Line], L: int, m: int, tight: bool, tails: Sequence[TailLine]
) -> float:
    """`pool_step_bound.order_floor` of one order's `lines` plus its tail (`tails`, rank by
    rank; empty: the tail taken as 0): for each pipeline weighting w it tries and each tail
    weighting (`_shares`), the least over the box of sum_q (w_q - k_q nu_q) t_q(y_q) +
    mu_q o_q(y_q) + nu_q (s_q(y_q)) (module docstring: mu >= 0 of sum at most 1, nu <= mu,
    k nu <= w), `pool_step_bound.least`, exact for the linear programme; the largest."""
    best, tried = order_weights(lines, L, m, tight)
    if not tails or best == math.inf:
        return best
    shares = _shares(lines, tails, _fluid(lines, L))
    for w in tried:
        for mu, second in shares:
            merged = []
            for (a, b, lo, hi), (o0, o1, s0, s1, k), wq, mq, sq in zip(
                lines, tails, w, mu, second, strict=True
            ):
                nq = 0.0 if not sq else min(mq, wq / k) if k > 0 else mq  # k nu <= w
                c = wq - k * nq  # >= 0
                merged.append((c * a + mq * o0 + nq * s0, c * b + mq * o1 + nq * s1, lo, hi))
            best = max(best, least(merged, [1.0] * len(lines), L))
    return best


def _fluid(lines: Sequence[Line], L: int) -> list[float]:
    """The (real) split where every rank's line takes one value, within the boxes (L / pp
    each where some line does not rise): where `_shares` reads which form of a rank's tail
    binds."""
    if min(b for _, b, _, _ in lines) <= 0:
        return [L / len(lines)] * len(lines)
    t = (L + sum(a / b for a, b, _, _ in lines)) / sum(1 / b for _, b, _, _ in lines)
    return [min(max((t - a) / b, lo), hi) for a, b, lo, hi in lines]


def _shares(
    lines: Sequence[Line], tails: Sequence[TailLine], y: Sequence[float]
) -> list[tuple[list[float], list[bool]]]:
    """Tail weightings: mu, and on which ranks it takes the second form (nu = mu there, at most
    w / k: `tailed_floor`). Any within the module docstring's limits is a bound; these aim at
    the least split's largest tail: each rank's binding form at the fluid split y (the second
    where it adds and rises in y once k t_q is taken off, else the first where it rises),
    weighted 1 / its slope so that no rank draws the layers (the first form alone, too), and
    all on the rank whose tail is largest there."""
    pp = len(lines)
    slope, second, value = [0.0] * pp, [False] * pp, [0.0] * pp
    for q, ((a, b, _, _), (o0, o1, s0, s1, k), yq) in enumerate(zip(lines, tails, y, strict=True)):
        gain, rise = s0 + s1 * yq - k * (a + b * yq), o1 + s1 - k * b
        second[q] = gain > 0 and rise > 0
        slope[q] = rise if second[q] else o1
        value[q] = o0 + o1 * yq + (gain if second[q] else 0.0)
    out = []
    for slopes, use in ((slope, second), ([t[1] for t in tails], [False] * pp)):
        inv = [1 / v if v > 0 else 0.0 for v in slopes]
        if (total := sum(inv)) > 0:
            out.append(([x / total for x in inv], use))
    top = max(range(pp), key=value.__getitem__)
    out.append(([float(q == top) for q in range(pp)], second))
    return out


def path_tails(
    rows: Sequence[Sequence[int]],
    times: Sequence[float],
    ys: Sequence[int],
    tails: Sequence[TailLine],
) -> float:
    """The largest of the paths `rows` (`pool_step_bound.terms`: coefficients on the stage
    `times`, lower lines of them) plus a rank's tail form at its layers `ys`: the first always,
    the second where the path's coefficient on that rank is at least its k (module docstring:
    the path less k t_r is then a form of the times with coefficients >= 0); at least the
    longest path (the tail >= 0)."""
    firsts = [o0 + o1 * y for (o0, o1, *_), y in zip(tails, ys, strict=True)]
    seconds = [
        f + s0 + s1 * y - k * t
        for f, (_, _, s0, s1, k), y, t in zip(firsts, tails, ys, times, strict=True)
    ]
    best = -math.inf
    for row in rows:
        path = sum(c * t for c, t in zip(row, times, strict=True))
        tail = max(
            max(f, s if c >= tl[4] else f)
            for f, s, c, tl in zip(firsts, seconds, row, tails, strict=True)
        )
        best = max(best, path + max(tail, 0.0))
    return best
