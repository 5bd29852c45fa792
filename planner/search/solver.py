"""The one module that imports OR-Tools: CP-SAT for pipelines over heterogeneous pools
(`solve_pools`, below; the pooled search reaches it only where recompute may beat the exact
enumeration without it, `planner.search.pool_enum`); the uneven pipeline split of one pool
(`balanced_split`), an integer program of one free integer, is solved exactly by enumeration,
with a defined answer among equally good splits, and without loading OR-Tools (~0.3 s of
start-up with the pandas it imports).

Why here and not as the layout enumerator: on this machine class CP-SAT costs about 1 ms per
enumerated solution (DESIGN.md section 4), while planner's exact cost model scores a layout in
0.05-0.2 ms; `planner.search.top_k` therefore walks the structural space itself, bounded and
certified, and hands the sub-problem that is a genuine integer program, how many decoder layers
each pipeline rank gets, to an exact solver of its own.

The split problem (Megatron-LM's uneven pipeline: `--decoder-first-pipeline-num-layers`,
`--decoder-last-pipeline-num-layers`, the middle ranks equal; ecosystem.md section 1.2):

    variables   f, l   layers on the first and last rank;  k   layers on each middle rank
    constraints f + l + (pp - 2) k = L          (pp = 2: f + l = L)
                f, l, k >= vpp and multiples of vpp (each rank's layers split into vpp chunks)
    objective   minimise max(f + e_first, k, l + e_last)

where e_first and e_last are the extra work of the first and last rank (embedding; output layer,
loss and MTP) in units of one decoder layer, scaled to integers (x 1000). Llama 3 405B's published
split (one fewer layer on the first and last stage) is what this gives for its output layer.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

SCALE = 1000
"""Fixed-point scale for the extra work (in thousandths of a decoder layer)."""


@cache
def balanced_split(
    num_layers: int, pp: int, vpp: int, first_extra: float, last_extra: float
) -> tuple[int, ...] | None:
    """Layers per pipeline rank minimising the slowest rank's work, in Megatron's uneven form
    (first and last rank free, middle ranks equal); None when no split satisfies the constraints.
    Extras are rounded to 3 decimals before solving (cache key). Where several splits are
    equally slow, the lexicographically smallest (fewest layers on the first rank, then on each
    middle rank) is taken: a defined answer, whatever solver or version found the optimum.

    Solved exactly by enumeration, the integer program above being one integer per middle-rank
    count k: for each k the first rank's f ranges over an interval, and the slowest rank's work
    max(f u + e_first, l u + e_last, k u) (u = vpp x SCALE, l = chunks left) is least where the
    first two balance, so the optimum is found in O(L / vpp) steps (`_least_span`), and the
    smallest f (then k) reaching it in as many (`_first_optimum`). tests/search/
    test_split_enumeration.py checks both against enumerating every (f, k)."""
    if pp < 2 or num_layers % vpp:
        return None
    chunks = num_layers // vpp
    u = vpp * SCALE
    e_first, e_last = round(first_extra * SCALE), round(last_extra * SCALE)
    ks = range(1, chunks + 1) if pp > 2 else range(0, 1)
    span = _least_span(chunks, pp, u, e_first, e_last, ks)
    if span is None or span > (num_layers + 10) * SCALE * 2:
        return None  # CP-SAT's bound on the slowest rank, kept: no split within it
    fv, kv = _first_optimum(chunks, pp, u, e_first, e_last, ks, span)
    lv = chunks - fv - (pp - 2) * kv
    return (fv * vpp,) + (kv * vpp,) * (pp - 2) + (lv * vpp,)


def _slowest(f: int, rest: int, k: int, u: int, e_first: int, e_last: int) -> int:
    """The slowest rank's work (thousandths of a layer, at least 0) with f chunks on the first
    rank, rest - f on the last and k on each middle one."""
    return max(f * u + e_first, (rest - f) * u + e_last, k * u, 0)


def _least_span(chunks: int, pp: int, u: int, e_first: int, e_last: int, ks: range) -> int | None:
    """The least slowest-rank work over every split, None when there is none. For one k the
    first and last take rest = chunks - (pp - 2) k chunks, 1 <= f <= rest - 1; f u + e_first
    grows and (rest - f) u + e_last falls with f, so their max is least at the f nearest their
    crossing, (rest u + e_last - e_first) / (2 u): its floor or ceiling, clipped to [1, rest - 1]
    (k u does not depend on f)."""
    best: int | None = None
    for k in ks:
        rest = chunks - (pp - 2) * k
        if rest < 2:
            break  # rest only falls as k grows
        mid = (rest * u + e_last - e_first) // (2 * u)
        for f in {min(max(g, 1), rest - 1) for g in (mid, mid + 1)}:
            w = _slowest(f, rest, k, u, e_first, e_last)
            best = w if best is None else min(best, w)
    return best


def _first_optimum(
    chunks: int, pp: int, u: int, e_first: int, e_last: int, ks: range, span: int
) -> tuple[int, int]:
    """The lexicographically smallest (f, k) whose slowest rank's work is `span`: for each k
    with k u <= span, the smallest f with (rest - f) u + e_last <= span, if f u + e_first <=
    span too (then its work is exactly span, span being the least)."""
    best: tuple[int, int] | None = None
    for k in ks:
        rest = chunks - (pp - 2) * k
        if rest < 2 or k * u > span:
            break
        f = max(1, -((span - e_last - rest * u) // u))  # ceil((rest u + e_last - span) / u)
        if f <= rest - 1 and _slowest(f, rest, k, u, e_first, e_last) <= span:
            best = (f, k) if best is None else min(best, (f, k))
    assert best is not None
    return best


# --- heterogeneous pools (issue 25) -----------------------------------------------------------

SOLVE_SECONDS = 20.0
"""CP-SAT's time limit for one pools problem (its best answer so far is taken at the limit)."""

WORKERS = 8
"""CP-SAT's workers (its portfolio: several times faster than one on these problems)."""
CANONICAL_TIME = 2.0
"""CP-SAT's deterministic time (not wall clock: the same answer on any load) to pick one of the
equally good answers."""

Grid = tuple[tuple[int, ...], ...]
"""A table indexed [pipeline rank][pool]."""
TailLines = tuple[tuple[Grid, Grid], ...]
"""A stage's tail as the largest of lines: each (fixed, per layer), tables [rank][pool]."""


@dataclass(frozen=True)
class PoolSplitProblem:
    """The integer part of a pipeline over pools, with every coefficient from the exact model
    (`planner.search.pools.problem`): memory in MiB, time in microseconds per micro-batch.

    Stage r on pool k with y decoder layers, c of them fully recomputed:
        memory  fixed_mib[r][k] + y layer_mib[r][k] + c recompute_mib[r][k]
                + [c = y >= 1] whole_mib[r][k] <= capacity_mib[k]
        host    y <= most_layers[r][k]   (its pool's host memory; empty grid: no cap)
        time    fixed_us[r][k]  + y layer_us[r][k]  + c recompute_us[r][k]
                + boundary_us[k] for each neighbour on another pool (< 0 where pool k's
                  own hop is slower than the link between pools)
        tail    max over the lines (f, l) of tail_us of f[r][k] + y l[r][k]   (once a step)

    The tail is what the step adds after the pipeline for the stage: its exposed data-parallel
    sync and its optimizer step (`planner.model.stage_sync`), which grow with its parameters;
    the step waits for the stage where they take longest. Empty tail grids: none."""

    num_layers: int
    stages: tuple[int, ...]
    """Pipeline ranks each pool hosts (their sum is pp)."""
    capacity_mib: tuple[int, ...]
    fixed_mib: Grid
    layer_mib: Grid
    recompute_mib: Grid
    """Per recomputed layer (<= 0: what recomputing it saves)."""
    fixed_us: Grid
    layer_us: Grid
    recompute_us: Grid
    boundary_us: tuple[int, ...]
    """Per pool, what a neighbour on another pool adds to a stage's time over one on its own."""
    microbatches: int
    recompute: bool = True
    """Whether the block recompute count N may be above 0."""
    tail_us: TailLines = ()
    whole_mib: Grid = ()
    """What a stage whose every layer is recomputed (N >= y) adds to its memory: the working
    memory of rebuilding a layer whole, which a stage that keeps some layers' activations does
    without (block recompute frees its later layers first: `stage_activations.
    recompute_working`); empty: nothing."""

    most_layers: Grid = ()
    """The most decoder layers stage r holds on pool k within that pool's host memory (what the
    stage offloads there grows with its layers: `planner.search.pool_host`); empty: no cap."""

    def whole(self, r: int, k: int) -> int:
        """`whole_mib[r][k]` (0 where the grid is empty)."""
        return self.whole_mib[r][k] if self.whole_mib else 0

    def most(self, r: int, k: int) -> int:
        """`most_layers[r][k]`, at most num_layers (num_layers where the grid is empty)."""
        return min(self.most_layers[r][k], self.num_layers) if self.most_layers else self.num_layers


@dataclass(frozen=True)
class PoolSplit:
    """A solution: layers and pool of every pipeline rank, the block recompute count N (each
    stage recomputes min(N, its layers): Megatron's --recompute-num-layers is one value), the
    objective (`objective_of`) in microseconds, and the stage times."""

    layers: tuple[int, ...]
    pools: tuple[int, ...]
    recompute_layers: int
    objective: int
    times: tuple[int, ...]
    excess_mib: int = 0
    """MiB the most loaded stage lacks (relaxed solves only)."""

    def binding(self, p: PoolSplitProblem) -> tuple[int, int, int]:
        """(stage, pool, MiB over its capacity) of the stage furthest over."""
        used, _ = stage_values(p, self.layers, self.pools, self.recompute_layers)
        over = [v - p.capacity_mib[k] for v, k in zip(used, self.pools, strict=True)]
        r = max(range(len(over)), key=over.__getitem__)
        return r, self.pools[r], over[r]


def stage_values(
    p: PoolSplitProblem, layers: tuple[int, ...], pools: tuple[int, ...], n: int
) -> tuple[list[int], list[int]]:
    """(memory MiB, time us) of every stage of an assignment: the solver-free re-check."""
    mem, time = [], []
    for r, (y, k) in enumerate(zip(layers, pools, strict=True)):
        c = min(n, y)
        whole = p.whole(r, k) if 0 < y <= n else 0
        mem.append(p.fixed_mib[r][k] + whole + y * p.layer_mib[r][k] + c * p.recompute_mib[r][k])
        t = p.fixed_us[r][k] + y * p.layer_us[r][k] + c * p.recompute_us[r][k]
        t += p.boundary_us[k] * (
            (r > 0 and pools[r - 1] != k) + (r + 1 < len(pools) and pools[r + 1] != k)
        )
        time.append(t)
    return mem, time


def tail_of(p: PoolSplitProblem, layers: tuple[int, ...], pools: tuple[int, ...]) -> int:
    """The step's tail: the longest stage tail (at least 0; 0 without tail grids)."""
    lines = (
        f[r][k] + y * g[r][k]
        for f, g in p.tail_us
        for r, (y, k) in enumerate(zip(layers, pools, strict=True))
    )
    return max(0, max(lines, default=0))


def objective_of(p: PoolSplitProblem, times: list[int], tail: int = 0) -> int:
    """(m - 1) x slowest + sum + tail: the 1F1B step's pipeline part (steady state plus bubble)
    and what follows it (`tail_of`)."""
    return (p.microbatches - 1) * max(times) + sum(times) + tail


def may_fit(p: PoolSplitProblem) -> bool:
    """False only where no assignment fits (what CP-SAT would prove at length): in every order
    of the pools some rank holds not even one layer, or the most layers each rank can hold sum
    to fewer than L. A rank on pool k holds y layers only if fixed + y layer + c recompute <=
    capacity for some c <= y; as recompute_mib <= 0, c = y is the least memory (N = L recomputes
    every layer; without recompute c = 0), so y <= (capacity - fixed) / per, per = layer +
    recompute (or layer); where per <= 0, any y up to L if y = L fits. The common N and the
    times are relaxed, so this never refuses an assignment that fits (tests/search/
    test_solver_pools.py checks it against the enumeration)."""
    pp, L = sum(p.stages), p.num_layers
    for order in itertools.permutations(range(len(p.stages))):
        ks = [k for k in order for _ in range(p.stages[k])]
        room = 0
        for r, k in enumerate(ks):
            spare = p.capacity_mib[k] - p.fixed_mib[r][k]
            spare -= min(p.whole(r, k), 0) if p.recompute else 0
            per = p.layer_mib[r][k] + (min(p.recompute_mib[r][k], 0) if p.recompute else 0)
            # where memory falls with y (per <= 0), some y fits iff y = L does
            most = spare // per if per > 0 else (L if L * per <= spare else 0)
            most = min(most, p.most(r, k))  # and its host's cap
            if most < 1:
                break
            room += min(most, L)
        else:
            if room >= L and pp <= L:
                return True
    return False


def solve_pools(p: PoolSplitProblem, relax: bool = False) -> PoolSplit | None:
    """Layers per stage, stage-to-pool assignment (contiguous blocks, any pool order) and the
    block recompute count minimising `objective_of` under every stage's memory; None when no
    assignment fits. Re-checked by `stage_values`. With `relax`, every capacity may be exceeded
    by one excess, and the assignment minimising it is returned (`PoolSplit.excess_mib`: what
    the closest assignment lacks; the binding stage is the one at it)."""
    pp, npools, L = sum(p.stages), len(p.stages), p.num_layers
    if pp > L or (not relax and not may_fit(p)):
        return None
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    # w[o]: the pools run in order o, each a contiguous block of its ranks (one order chosen)
    orders = list(itertools.permutations(range(npools)))
    w = [m.new_bool_var(f"order_{'_'.join(map(str, o))}") for o in orders]
    m.add_exactly_one(w)
    on: list[list[list[int]]] = [[[] for _ in range(npools)] for _ in range(pp)]
    edge: list[list[int]] = [[] for _ in range(pp - 1)]
    for i, o in enumerate(orders):
        r = 0
        for k in o:
            for q in range(r, r + p.stages[k]):
                on[q][k].append(i)
            r += p.stages[k]
            if r < pp:
                edge[r - 1].append(i)
    # x[r][k]: pipeline rank r runs on pool k (the orders that put it there)
    x = [[m.new_bool_var(f"on_{r}_{k}") for k in range(npools)] for r in range(pp)]
    for r in range(pp):
        for k in range(npools):
            m.add(x[r][k] == sum(w[i] for i in on[r][k]))
    # b[r]: ranks r and r + 1 on different pools (the orders with a block edge there)
    b = [sum(w[i] for i in edge[r]) for r in range(pp - 1)]
    # y[r]: its decoder layers, every layer placed once; c[r] = min(N, y[r]) recomputed
    y = [m.new_int_var(1, L, f"layers_{r}") for r in range(pp)]
    n = m.new_int_var(0, L if p.recompute else 0, "recompute_num_layers")
    c = [m.new_int_var(0, L, f"recomputed_{r}") for r in range(pp)]
    for r in range(pp):
        m.add_min_equality(c[r], [n, y[r]])
    m.add(sum(y) == L)
    # whole[r]: every layer of rank r recomputed (N >= y[r], so c[r] = y[r]; N >= 1 as y >= 1)
    whole = [m.new_bool_var(f"whole_{r}") for r in range(pp)]
    for r in range(pp):
        m.add(n >= y[r]).only_enforce_if(whole[r])
        m.add(n <= y[r] - 1).only_enforce_if(~whole[r])
    # excess: MiB any stage may exceed its pool's capacity by (0 unless relaxed)
    grids = (p.fixed_mib, p.layer_mib, p.whole_mib)
    top_mib = sum(max(map(abs, row)) for g in grids for row in g) * (L + 1)
    excess = m.new_int_var(0, top_mib if relax else 0, "excess_mib")
    # per rank and pool: memory within the pool's capacity, time as a linear form
    big = max(max(map(abs, row)) for g in (p.layer_us, p.recompute_us, p.fixed_us) for row in g)
    top = (big * (2 * L + 1) + 2 * max(map(abs, p.boundary_us), default=0)) or 1
    t = [m.new_int_var(0, top, f"time_{r}") for r in range(pp)]
    for r in range(pp):
        for k in range(npools):
            mem = p.fixed_mib[r][k] + whole[r] * p.whole(r, k)
            mem += y[r] * p.layer_mib[r][k] + c[r] * p.recompute_mib[r][k]
            m.add(mem <= p.capacity_mib[k] + excess).only_enforce_if(x[r][k])
            if not relax:  # the relaxed solve reports the GPUs' memory alone
                m.add(y[r] <= p.most(r, k)).only_enforce_if(x[r][k])
            work = p.fixed_us[r][k] + y[r] * p.layer_us[r][k] + c[r] * p.recompute_us[r][k]
            hops = (b[r - 1] if r > 0 else 0) + (b[r] if r + 1 < pp else 0)
            m.add(t[r] >= work + p.boundary_us[k] * hops).only_enforce_if(x[r][k])
    span = m.new_int_var(0, top, "slowest_stage")
    m.add_max_equality(span, t)
    # tail: at least every stage's, and 0 (`tail_of`)
    tails = [abs(v) for line in p.tail_us for g in line for row in g for v in row]
    tail = m.new_int_var(0, max(tails, default=0) * (L + 1), "tail")
    for r in range(pp):
        for k in range(npools):
            for f, g in p.tail_us:
                m.add(tail >= f[r][k] + y[r] * g[r][k]).only_enforce_if(x[r][k])
    goal = excess if relax else (p.microbatches - 1) * span + sum(t) + tail
    m.minimize(goal)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = WORKERS
    solver.parameters.max_time_in_seconds = SOLVE_SECONDS
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    if status == cp_model.OPTIMAL:
        # which of the equally good answers the workers' race found is chance: pick one by a
        # single worker (deterministic) from the found one, least N then least sum r y_r
        m.add(goal <= round(solver.objective_value))
        for v in (*y, n):
            m.add_hint(v, solver.value(v))
        m.minimize(n * (pp * L * L + 1) + sum(r * y[r] for r in range(pp)))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = CANONICAL_TIME
        again = solver.solve(m)
        assert again in (cp_model.OPTIMAL, cp_model.FEASIBLE)  # the hint is feasible
    layers = tuple(solver.value(v) for v in y)
    pools = tuple(next(k for k in range(npools) if solver.value(x[r][k])) for r in range(pp))
    nv = solver.value(n)
    used, times = stage_values(p, layers, pools, nv)
    # the re-check: every stage within its pool's memory, every layer placed once
    over = max(v - p.capacity_mib[k] for v, k in zip(used, pools, strict=True))
    assert sum(layers) == L and over <= solver.value(excess)
    caps = (p.most(r, k) for r, k in enumerate(pools))
    assert relax or all(y <= c for y, c in zip(layers, caps, strict=True))
    obj = objective_of(p, times, tail_of(p, layers, pools))
    return PoolSplit(layers, pools, nv, obj, tuple(times), max(over, 0))
