"""A lower bound of the EXACT 1F1B step over every split of one order of the pools: what the
pooled search (`planner.search.pool_search`) prunes a layout by, on the time lines of
`planner.search.pools` (microseconds per micro-batch).

The split's solver minimises 1F1B's closed form (m - 1) max_r t_r + sum_r t_r + tail; the exact
model scores a split by Megatron's op order (`planner.model.one_f_one_b.step`), which is no more
than the closed form and less where an earlier stage is the slowest. A bound of the closed form
is therefore no bound of the exact step (tests/search/test_pool_step_bound.py has stage lines
where it is above the least exact step); this one is.

Paths. The step is the longest path through the ops (each op after its rank's previous one and
after its input), so every path's length is a lower bound, whatever the forward and backward
shares of a stage: a path running nF_r forwards and nB_r backwards of rank r is at least
sum_r min(nF_r, nB_r) t_r. With w_r = min(pp - r - 1, m) rank r's warm-up forwards
(Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py:2277-2278), three paths per
rank (`terms`), each entering rank r by micro-batch 0's forward chain over ranks 0 .. r - 1 and
leaving it by micro-batch m - 1's backward chain over r - 1 .. 0 (t_q once for q < r):
  D = 0: every op of rank r: m t_r (`one_f_one_b.floor`'s term);
  D = 1: micro-batch 0's round trip from rank r (forward over r + 1 .. pp - 1, backward back,
         t_q once for q > r) in place of the min(w_r, m - 1) forwards rank r runs between its
         F_0 and its B_0, then every op of rank r after B_0: (m - min(w_r, m - 1)) t_r;
  D = 2 (where m >= w_r + 2, so that F_{m-1} follows B_0): also micro-batch m - 1's round trip
         in place of the w_r backwards between F_{m-1} and B_{m-1}: (m - w_r) t_r, 2 t_q for
         q > r.
Each is sum_q A_jq t_q with A_jq >= 0 (1 before r, the count at r, D after r).

Bound. With the order fixed, rank r's time is at least a_r + b_r y_r (its fixed time and
boundary hops, its per-layer time; recompute only adds), y_r in [lo_r, hi_r] (1 and L, or what
its memory and host allow), sum_r y_r = L. For any weights lambda_j >= 0 summing to 1 over the
paths, the step is at least sum_j lambda_j A_j . t = sum_q w_q t_q with w = A^T lambda >= 0, so
at least the least of sum_q w_q (a_q + b_q y_q) over the box {lo <= y <= hi, sum y = L}
(`least`: the layers past each rank's lo_r go to the least w_q b_q first, up to hi_q; exact for
the linear programme, so no more than any integer split's value). Every lambda gives a bound
(weak duality of min_y max_j A_j . t(y)); `order_floor` takes the largest of a few: the last
rank's D = 0 path (the closed form's own), the D = 0 weights that make every w_q b_q equal, the
weights over each rank's longest path that make every w_q b_q equal (`_balanced`), and (with
`tight`) the optimal lambda of the linear programme, a matrix game solved by the simplex method
(`_game`: the ranks its split puts past their upper ends held there, and solved again), unless
the real split where every longest path takes one value (`_top`) shows the cheap weights
already reach the programme's optimum (the longest path there is an upper bound of it). The
bound itself is always `least` of the weights found, with the box's both ends, so neither
rounding in the simplex nor a skipped simplex can make it more than a bound: only less tight.

The tail (data-parallel sync and optimizer step after the pipeline) is the step's too, and
not in this bound: `pool_tails.tailed_floor` adds its lines to the weights found here
(`order_weights`), each weighting still a bound through `least`.

What it covers: every split of the order, not only the solver's. The solver's split is chosen
by the closed form (`planner.search.pool_enum`), and the exact model may prefer another, which
`planner.search.pool_exact` seeks where the splits left to bound are few; whichever split a
layout is given, this bound is below its exact step, as below every split's.

Tightness: the D = 0 paths alone leave out the stages after r, 14% below the closed form for
equal ranks (pp 8, m 16); with D = 2 the paths of equal ranks are all (m - 1 + pp) t, the closed
form's value; on the pools benchmark's leading layouts (examples/pools-two-datacentres-h100.toml)
the bound is the former closed-form bound's, and the search solves as many layouts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

Line = tuple[float, float, int, int]
"""A rank's (a, b, lo, hi): time a + b y for lo <= y <= hi layers."""

PIVOTS = 8
"""The simplex's most pivots, per row and column of the game (then the weights found so far)."""


Shape = tuple[int, int, int]
"""A path's (rank r, its count at r, its count after r); 1 before r."""
Terms = tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[Shape, ...]]
"""`terms`: the paths' coefficients [path][rank], each rank's longest path, each path's shape."""


@lru_cache(maxsize=64)
def terms(pp: int, m: int) -> Terms:
    """The paths' coefficients A (module docstring), one row per path, [path][rank], each
    rank's longest path (its last row: D = 2, else 1, else 0), and each path's shape."""
    shapes: list[Shape] = []
    longest = []
    for r in range(pp):
        w = min(pp - r - 1, m)
        shapes.append((r, m, 0))
        if w > 0:
            shapes.append((r, m - min(w, m - 1), 1))
            if m >= w + 2:
                shapes.append((r, m - w, 2))
        longest.append(len(shapes) - 1)
    rows = tuple((1,) * r + (c,) + (d,) * (pp - r - 1) for r, c, d in shapes)
    return rows, tuple(longest), tuple(shapes)


def least(lines: Sequence[Line], w: Sequence[float], L: int) -> float:
    """The least sum_q w_q (a_q + b_q y_q) over lo <= y <= hi, sum y = L (inf: none)."""
    base = 0.0
    rest = L
    for (a, b, lo, _), wq in zip(lines, w, strict=True):
        base += wq * (a + b * lo)
        rest -= lo
    if rest < 0:
        return math.inf
    for q in sorted(range(len(lines)), key=lambda q: w[q] * lines[q][1]):
        if rest == 0:
            break
        _, b, lo, hi = lines[q]
        take = min(hi - lo, rest)
        base += take * w[q] * b
        rest -= take
    return base if rest == 0 else math.inf


def _floor_weights(lam: Sequence[float], m: int) -> list[float]:
    """w_q = m lambda_q + sum_{r>q} lambda_r: the weights of the D = 0 paths lambda."""
    out = [0.0] * len(lam)
    after = 0.0
    for q in range(len(lam) - 1, -1, -1):
        out[q] = m * lam[q] + after
        after += lam[q]
    return out


def _equalising(lines: Sequence[Line], m: int) -> list[float]:
    """The D = 0 lambda that makes every w_q b_q equal where it can: from the last rank
    backwards, lambda_q = max(0, (1 / b_q - sum_{r>q} lambda_r) / m), normalised."""
    lam = [0.0] * len(lines)
    after = 0.0
    for q in range(len(lines) - 1, -1, -1):
        b = lines[q][1]
        if b > 0:
            lam[q] = max(0.0, (1 / b - after) / m)
        after += lam[q]
    if after <= 0:
        lam[-1], after = 1.0, 1.0
    return [x / after for x in lam]


def _balanced(lines: Sequence[Line], m: int) -> list[float]:
    """The weights w = A^T lambda of each rank's longest path (`terms`: 1 before r, c_r at r,
    D_r after r) with lambda making every w_q b_q equal where it can: with Lambda the sum,
    L_q = sum_{r<q} lambda_r and U_q = sum_{r<q} D_r lambda_r, w_q = Lambda - L_q + U_q +
    (c_q - 1) lambda_q, so from the first rank on each lambda_q is affine in Lambda, and
    Lambda = sum_q lambda_q fixes it; negative ones are set to 0 (any lambda >= 0 bounds the
    step: equal products only make it tight). Equal ranks with m > pp: every w_q equal, the
    linear programme's optimum, the closed form's value."""
    pp = len(lines)
    rows = _longest(pp, m)
    coef = []  # lambda_q = x + y Lambda
    lx = ly = ux = uy = 0.0
    for (_, b, _, _), (c, after) in zip(lines, rows, strict=True):
        x = y = 0.0
        if b > 0 and c > 1:  # (1 / b - Lambda + L_q - U_q) / (c - 1)
            x, y = (1 / b + lx - ux) / (c - 1), (ly - uy - 1) / (c - 1)
        coef.append((x, y))
        lx, ly, ux, uy = lx + x, ly + y, ux + after * x, uy + after * y
    total = lx / (1 - ly) if ly < 1 else 0.0
    lam = [max(x + y * total, 0.0) for x, y in coef]
    if sum(lam) <= 0:
        lam[-1] = 1.0
    norm = sum(lam)
    w, before = [0.0] * pp, 0.0  # before: sum_{r<q} D_r lambda_r
    tail = sum(lam)
    for q, ((c, d), lq) in enumerate(zip(rows, lam, strict=True)):
        tail -= lq  # sum_{r>q} lambda_r
        w[q] = (tail + c * lq + before) / norm
        before += d * lq
    return w


@lru_cache(maxsize=64)
def _longest(pp: int, m: int) -> tuple[tuple[float, float], ...]:
    """Each rank's path for `_balanced` and `_top` as (its count c at r, its count D after r):
    its longest (`terms`) with c >= 2 (else the D = 0 path, m at r), so that lambda_r can
    balance w_r."""
    _, longest, shapes = terms(pp, m)
    out = []
    for j in longest:
        while shapes[j][1] < 2 and shapes[j][2] > 0:
            j -= 1  # a rank's paths are consecutive, D = 0 first
        out.append((float(shapes[j][1]), float(shapes[j][2])))
    return tuple(out)


def _top(lines: Sequence[Line], L: int, m: int) -> float | None:
    """An upper bound of the linear programme's optimum: the longest path (every one of
    `terms`) at the real split where each rank's `_longest` path takes one value z (None: no
    such split within the boxes, or not one alone). With S the sum of the stage times and P_r
    the sum before r, the path (r, c, D) is (1 - D) P_r + (c - D) t_r + D S = z: t_r is affine
    in z, S and the t_q of the ranks before whose path does not read their own (c = D, each an
    unknown of its own, and its path an equation); sum_r t_r = S and sum_r (t_r - a_r) / b_r = L
    complete the square system, solved by elimination."""
    pp = len(lines)
    rows = _longest(pp, m)
    if min(b for _, b, _, _ in lines) <= 0:
        return None
    n = 3 + sum(c == d for c, d in rows)  # affine forms: [1, z, S, free t_r ...]
    unit = [[float(i == j) for i in range(n)] for j in range(n)]
    before, forms, eqs, free = [0.0] * n, [], [], 3
    for c, d in rows:
        if c == d:  # (1 - d) P_r + d S - z = 0; t_r free
            eqs.append(
                [(1 - d) * p + d * s - z for p, s, z in zip(before, unit[2], unit[1], strict=True)]
            )
            t, free = unit[free], free + 1
        else:
            t = [
                (z - d * s - (1 - d) * p) / (c - d)
                for p, s, z in zip(before, unit[2], unit[1], strict=True)
            ]
        forms.append(t)
        before = [x + y for x, y in zip(before, t, strict=True)]
    eqs.append([x - s for x, s in zip(before, unit[2], strict=True)])
    layers = [0.0] * n
    for (a, b, _, _), t in zip(lines, forms, strict=True):
        layers = [
            v + (x - (a if i == 0 else 0.0)) / b
            for i, (v, x) in enumerate(zip(layers, t, strict=True))
        ]
    layers[0] -= L
    eqs.append(layers)
    values = _solve(eqs)
    if values is None:
        return None
    point = [1.0, *values]
    times = [sum(x * v for x, v in zip(form, point, strict=True)) for form in forms]
    for (a, b, lo, hi), time in zip(lines, times, strict=True):
        if not lo - 1e-9 <= (time - a) / b <= hi + 1e-9:
            return None
    total, prefix = sum(times), [0.0]
    for time in times:
        prefix.append(prefix[-1] + time)
    return max(
        prefix[r] + c * times[r] + d * (total - prefix[r] - times[r]) for r, c, d in terms(pp, m)[2]
    )


def _solve(eqs: list[list[float]]) -> list[float] | None:
    """The unknowns x with e[0] + sum_i e[i] x[i - 1] = 0 for every equation e (as many as
    unknowns), by Gaussian elimination with partial pivoting (None: singular)."""
    k = len(eqs)
    rows = [[*e[1:], -e[0]] for e in eqs]
    for col in range(k):
        piv = max(range(col, k), key=lambda i: abs(rows[i][col]))
        if abs(rows[piv][col]) < 1e-12:
            return None
        rows[col], rows[piv] = rows[piv], rows[col]
        for i in range(k):
            if i != col and rows[i][col]:
                f = rows[i][col] / rows[col][col]
                rows[i] = [x - f * y for x, y in zip(rows[i], rows[col], strict=True)]
    return [rows[i][k] / rows[i][i] for i in range(k)]


def _game(lines: Sequence[Line], L: int, m: int) -> list[float] | None:
    """The weights w = A^T lambda of a linear programme's optimal lambda (None: the simplex did
    not finish). With some ranks held at their upper ends (none at first) and the rest at
    their lo, K layers left: min over the extra layers' shares u (a point of the simplex, over
    the ranks not held) of max_j (d_j + K (A_j . b u)), d_j the paths at that base: a matrix
    game, G_jq = d_j + K A_jq b_q, shifted to be positive; its value is 1 / max{sum x : G x <= 1,
    x >= 0} (u = x / sum x), and its optimal lambda is the normalised dual of that packing
    programme (the slack columns' reduced costs), solved from the slack basis by Dantzig's
    rule. Where u puts a rank past its upper end, that rank is held there and the game solved
    again: the optimum within the boxes where the held ranks are the ones at their ends, else
    weights that `least` (with the boxes) still turns into a bound."""
    import numpy as np  # here: only the simplex needs it (~0.1 s to load)

    A = np.array(terms(len(lines), m)[0], dtype=float)
    a = np.array([x[0] for x in lines])
    b = np.array([x[1] for x in lines])
    lo = np.array([x[2] for x in lines], dtype=float)
    hi = np.array([x[3] for x in lines], dtype=float)
    held = np.zeros(len(lines), dtype=bool)
    weights = None
    for _ in range(len(lines)):
        base = np.where(held, hi, lo)
        free = np.flatnonzero(~held)
        if free.size == 0:
            break
        d = A @ (a + b * base)
        G = d[:, None] + (L - base.sum()) * A[:, free] * b[None, free]
        G += max(0.0, 1.0 - G.min())
        solved = _packing(G)
        if solved is None:
            return weights
        x, y = solved
        weights = [float(v) for v in A.T @ (y / y.sum())]
        u = np.zeros(len(lines))
        u[free] = x / x.sum()
        over = ~held & (base + (L - base.sum()) * u > hi + 1e-9)
        if not over.any():
            break
        held |= over
    return weights


def _packing(G: Any) -> tuple[Any, Any] | None:
    """(x, y): the optimum of max {sum x : G x <= 1, x >= 0} (G > 0) and its dual, by the
    simplex method from the slack basis (None: not finished within PIVOTS per row and
    column)."""
    import numpy as np

    n, p = G.shape
    tab = np.hstack([G, np.eye(n), np.ones((n, 1))])
    cost = np.concatenate([np.ones(p), np.zeros(n + 1)])
    basis = list(range(p, p + n))
    for _ in range(PIVOTS * (n + p)):
        col = int(np.argmax(cost[:-1]))
        if cost[col] <= 1e-12:
            y = np.maximum(-cost[p:-1], 0.0)
            x = np.zeros(p)
            for i, v in enumerate(basis):
                if v < p:
                    x[v] = max(tab[i, -1], 0.0)
            return (x, y) if y.sum() > 0 and x.sum() > 0 else None
        column = tab[:, col]
        ok = column > 1e-12
        ratios = np.where(ok, tab[:, -1] / np.where(ok, column, 1.0), np.inf)
        row = int(np.argmin(ratios))
        tab[row] /= tab[row, col]
        factor = tab[:, col].copy()
        factor[row] = 0.0
        tab -= np.outer(factor, tab[row])
        cost -= cost[col] * tab[row]
        basis[row] = col
    return None


def order_floor(lines: Sequence[Line], L: int, m: int, tight: bool = True) -> float:
    """A lower bound (us) of the exact 1F1B step's pipeline part over every split of one order
    of the pools (module docstring); inf where no split fits the boxes. Without `tight`, the two
    cheap weightings alone (no simplex)."""
    return order_weights(lines, L, m, tight)[0]


def order_weights(
    lines: Sequence[Line], L: int, m: int, tight: bool = True
) -> tuple[float, list[list[float]]]:
    """`order_floor` and the weights w = A^T lambda it tried (each a bound through `least`; [],
    with inf, where no split fits the boxes)."""
    if sum(lo for _, _, lo, _ in lines) > L or sum(hi for *_, hi in lines) < L:
        return math.inf, []
    if any(lo > hi for _, _, lo, hi in lines):
        return math.inf, []
    last = [0.0] * len(lines)
    last[-1] = 1.0
    tried = [_floor_weights(v, m) for v in (last, _equalising(lines, m))]
    tried.append(_balanced(lines, m))
    best = max(least(lines, w, L) for w in tried)
    if not tight:
        return best, tried
    top = _top(lines, L, m)
    if top is not None and best >= top * (1 - 1e-9):
        return best, tried  # the linear programme's optimum, to rounding: no simplex needed
    if (w := _game(lines, L, m)) is not None:
        tried.append([max(x, 0.0) for x in w])
        best = max(best, least(lines, tried[-1], L))
    return best, tried
