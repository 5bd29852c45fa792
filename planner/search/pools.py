"""Pipelines over heterogeneous pools (issue 25): the exact model's coefficients for the split
(`planner.search.pool_enum.best_splits`: enumeration, or CP-SAT), the exact model's score of
its answer, and the search over the uniform degrees.

What is uniform and what is per stage follows what stock Megatron-LM launches: tp, cp, ep, dp,
micro-batch size and ZeRO stage are one value for the job; each pipeline stage holds its own
number of decoder layers (`--pipeline-model-parallel-layout`); full recompute is Megatron's block
method with one `--recompute-num-layers` N, which each stage applies to min(N, its layers) (the
count is one flag, not per stage; selective recompute's modules are one list for the job).

Coefficients (`problem`): for each pool k, the job as that pool sees it and the layout with every
rank given y_a and then y_b layers, without recompute and with every layer recomputed; the exact
memory (`planner.model.memory`) and per-micro-batch stage time (`planner.model.cost`) of every
rank at the two counts give a line per (rank, pool): memory in MiB (rounded up) and time in
microseconds. The pipeline's role of a rank (embedding, loss, MTP, micro-batches in flight) is
its position, whatever pool runs it. A rank's sends in its sample are those of a pipeline of pp
ranks all on its pool (`cost.estimate`'s hop on one cluster); the line holds in their place its
pool's own hop (`pools.rank_hops`), and a boundary between pools costs each of its two stages,
per micro-batch (1F1B's blocking sends), the slow link's hop less its own pool's: one term per
pool (`pool_hops`), negative where the pool's own hop is the slower.

The answer is scored by the exact model on the pools in the solver's order; where the line was
optimistic about memory (the exact model judges), the pool's capacity is lowered by the excess
and the split solved again; a pool's host likewise (`planner.search.pool_host`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, memory, pools
from planner.model.job_memo import JobMemo
from planner.model.memory import StageMemory
from planner.search.pool_bounds import TimeLines
from planner.search.pool_enum import best_splits
from planner.search.pool_exact import refine, scorer
from planner.search.pool_hops import neighbours, send_hops, time_boundary
from planner.search.pool_host import host_ok, layer_caps, tightened
from planner.search.pool_order import rank_pools
from planner.search.pool_plan import PoolPlan, apply
from planner.search.pool_tails import TailFloor, tail_floor
from planner.search.rules import violations
from planner.search.solver import Grid, PoolSplitProblem
from planner.search.variant_bound import rank_stage_times

MIB = 2**20
RESOLVE_TRIES = 4
"""Times a split is solved again with a pool's capacity lowered by the exact model's excess."""


def _sample_counts(num_layers: int, pp: int) -> tuple[int, int]:
    """Two layer counts per rank that every rank can hold at once (the fewer, the more even)."""
    even = num_layers // pp
    return (max(even // 2, 1), even) if even >= 2 else (1, 2)


_LAYER_CACHES = (
    "moe_prefix",
    "moe_layers",
    "layer_kinds",
    "mtp_kinds",
    "kinds",
    "kind_prefix",
    "_kind_counts_memo",
)
"""The model's cached properties that read its layer count (a copy would share the memo)."""
_ROOMY: JobMemo[int, Job] = JobMemo()
"""`_room`'s jobs per job and layer count: one job object for every layout that asks for the
same count, so that the model's memos (per job, by identity) serve them all, and do not fill
with a new job per layout (`JobMemo` forgets everything past a few jobs)."""


def _room(job: Job, layers: int) -> Job:
    """The job with at least `layers` decoder layers (the sample of `problem` numbers every
    rank's layers in one sequence); the pattern of dense and MoE layers is the model's own
    where it reaches."""
    if layers <= job.arch.num_layers:
        return job
    memo = _ROOMY.of(job)
    if layers not in memo:
        arch = job.arch.model_copy(update={"num_layers": layers})
        for cached in _LAYER_CACHES:
            arch.__dict__.pop(cached, None)
        kinds = arch.layer_kinds
        if len(kinds) < layers:
            # a per-layer list (a tuple moe_layer_freq, window or linear-attention flags, a
            # hybrid pattern) names the model's own layers only: the rest repeat its last kind
            arch.__dict__["layer_kinds"] = kinds + (kinds[-1],) * (layers - len(kinds))
        memo[layers] = replace(job, arch=arch)
    return memo[layers]


def _at(job: Job, layout: Layout) -> tuple[int, int, Callable[[int, bool], Layout]]:
    """The two sample counts of `problem` and the layout with every rank given y layers, with
    or without every layer recomputed."""
    pp = layout.pp
    ya, yb = _sample_counts(job.arch.num_layers, pp)
    base = layout.with_(pipeline_layout=None, account_for_embedding_in_pipeline_split=False)
    base = base.with_(account_for_loss_in_pipeline_split=False)

    def at(y: int, full: bool) -> Layout:
        lay = base.with_(pipeline_layers=(y,) * pp)
        if full:  # selective's modules (unread under full) as Layout's default: `Recomputed`
            lay = lay.with_(recompute="full", recompute_method="block", recompute_num_layers=y)
            return lay.with_(recompute_modules=("core_attn",))
        return lay

    return ya, yb, at


def _twins(job: Job) -> list[int]:
    """For each pool, the first pool with an equal cluster (itself if none before it): a pool's
    job is the job with its cluster (`pools.pool_job`), so equal clusters give the same memory
    and stage times, rank by rank (a rank's role is its position, whatever pool runs it)."""
    clusters = [p.cluster for p in job.pools]
    return [clusters.index(c) for c in clusters]


Stages = tuple[tuple[float, float], ...]
"""`Performance.stages`: each rank's (forward, backward) seconds per micro-batch."""
Tails = tuple[float, ...]
"""`Performance.tails`: each rank's seconds after the pipeline (sync and optimizer step)."""


@dataclass
class Recomputed:
    """What the exact model said of the sample layouts with every layer recomputed (`_at`'s
    `full`), by pool and sample layout, kept by a search across the layouts it asks about: `_at`
    sets their recompute and modules, so layouts that differ only in their own (the searches'
    none and selective of any modules) have the same ones, estimated once."""

    times: dict[tuple[int, Layout], tuple[Stages, Tails]] = field(default_factory=dict)
    memory: dict[tuple[int, Layout], tuple[StageMemory, ...]] = field(default_factory=dict)

    def stage_times(self, k: int, pj: Job, lay: Layout) -> tuple[Stages, Tails]:
        """`cost.estimate(pj, lay)`'s stages and tails of pool k's sample `lay`, kept where it
        is one."""
        if lay.recompute != "full":
            perf = cost.estimate(pj, lay)
            return perf.stages, perf.tails
        if (k, lay) not in self.times:
            perf = cost.estimate(pj, lay)
            self.times[k, lay] = perf.stages, perf.tails
        return self.times[k, lay]

    def stage_memory(self, k: int, pj: Job, lay: Layout) -> tuple[StageMemory, ...]:
        """`memory.estimate(pj, lay).stages` of pool k's sample `lay`, kept where it is one."""
        if lay.recompute != "full":
            return memory.estimate(pj, lay).stages
        if (k, lay) not in self.memory:
            self.memory[k, lay] = memory.estimate(pj, lay).stages
        return self.memory[k, lay]


def time_lines(job: Job, layout: Layout, known: Recomputed | None = None) -> TimeLines:
    """`problem`'s time coefficients of `layout`'s degrees on the job's pools (the same values,
    from the same stage times); `known`: the recomputed samples' times, where the caller keeps
    them across layouts."""
    pp = layout.pp
    ya, yb, at = _at(job, layout)
    known = Recomputed() if known is None else known
    # the tail (sync and optimizer step, as many with recompute: its windows and parameters
    # are the same): the chords through the samples at 1, ya and yb, the larger, exact at the
    # samples. An estimate for the solver's objective only, no bound: the tail is neither
    # convex nor monotone in y (seed 0 of tests/search/test_pool_exact_split.random_job, L40S
    # rank 0, tp1 pp2 dp2 mbs2: 58,932 us at y = 1, 54,941 at 2, where the chord through 1
    # and 7 says 68,054), so the bounds read the lines it is never below (`pool_tails`)
    _, inner, sample = send_hops(job, layout)
    chords = [(ya, yb)] + ([(1, ya)] if ya > 1 else [])
    names = ("ft", "lt", "rt", *(f"{x}{c}" for c in range(len(chords)) for x in "fl"))
    grids: dict[str, list[list[int]]] = {n: [[] for _ in range(pp)] for n in names}
    for k, src in enumerate(_twins(job)):
        if src < k:  # the same cluster as an earlier pool: the same lines
            for rows in grids.values():
                for row in rows:
                    row.append(row[src])
            continue
        pj = _room(pools.pool_job(job, k), yb * pp)
        tim = {(y, f): known.stage_times(k, pj, at(y, f)) for y in (ya, yb) for f in (False, True)}
        if ya > 1:  # the tail's third sample
            tim[1, False] = known.stage_times(k, pj, at(1, False))
        for r in range(pp):
            t_line = [
                _line(sum(tim[ya, f][0][r]) * 1e6, sum(tim[yb, f][0][r]) * 1e6, ya, yb)
                for f in (False, True)
            ]
            # the sample's sends (`neighbours` of them, its cluster's hop) made its pool's own
            own = neighbours(r, pp) * (inner[k] - sample[k]) * 1e6
            grids["ft"][r].append(round(min(t_line[0][0], t_line[1][0]) + own))
            grids["lt"][r].append(round(t_line[0][1]))
            grids["rt"][r].append(max(round(t_line[1][1] - t_line[0][1]), 0))
            tail = {y: v[1][r] * 1e6 for (y, f), v in tim.items() if not f}
            for c, (y0, y1) in enumerate(chords):
                line = _line(tail[y0], tail[y1], y0, y1)
                grids[f"f{c}"][r].append(round(line[0]))
                grids[f"l{c}"][r].append(round(line[1]))
    g = {n: tuple(tuple(row) for row in rows) for n, rows in grids.items()}
    return TimeLines(
        num_layers=job.arch.num_layers,
        fixed_us=g["ft"],
        layer_us=g["lt"],
        recompute_us=g["rt"],
        microbatches=layout.num_microbatches(job.global_batch_size),
        stages=pools.pool_stages(job, layout),
        boundary_us=time_boundary(job, layout),
        tail_us=tuple((g[f"f{c}"], g[f"l{c}"]) for c in range(len(chords))),
    )


def problem(
    job: Job,
    layout: Layout,
    headroom_pct: float,
    recompute: bool,
    times: TimeLines | None = None,
    known: Recomputed | None = None,
) -> PoolSplitProblem:
    """The CP-SAT problem of `layout`'s degrees on the job's pools (see the module docstring);
    `times`: its `time_lines`, where the caller has them already; `known`: the recomputed
    samples' memory, where the caller keeps them across layouts."""
    pp = layout.pp
    ya, yb, at = _at(job, layout)
    known = Recomputed() if known is None else known
    times = times or time_lines(job, layout, known)
    names = ("fm", "lm", "rm", "fr")
    grids: dict[str, list[list[int]]] = {n: [[] for _ in range(pp)] for n in names}
    caps: list[int] = []
    for k, src in enumerate(_twins(job)):
        if src < k:  # the same cluster as an earlier pool: the same lines
            caps.append(caps[src])
            for rows in grids.values():
                for row in rows:
                    row.append(row[src])
            continue
        pj = _room(pools.pool_job(job, k), yb * pp)
        caps.append(math.floor(memory.usable_bytes(pj.cluster.capacity_bytes, headroom_pct) / MIB))
        mem = {(y, f): known.stage_memory(k, pj, at(y, f)) for y in (ya, yb) for f in (False, True)}
        for r in range(pp):
            m_line = [
                _line(mem[ya, f][r].total / MIB, mem[yb, f][r].total / MIB, ya, yb)
                for f in (False, True)
            ]
            # the first line, less what each recomputed layer saves; a stage that recomputes
            # all its layers (the second line's samples) has the second line's fixed part
            grids["fm"][r].append(math.ceil(m_line[0][0]))
            grids["fr"][r].append(math.ceil(m_line[1][0]) - math.ceil(m_line[0][0]))
            grids["lm"][r].append(math.ceil(m_line[0][1]))
            grids["rm"][r].append(min(math.ceil(m_line[1][1] - m_line[0][1]), 0))
    g = {n: tuple(tuple(row) for row in rows) for n, rows in grids.items()}
    return PoolSplitProblem(
        num_layers=job.arch.num_layers,
        stages=times.stages,
        capacity_mib=tuple(caps),
        fixed_mib=g["fm"],
        layer_mib=g["lm"],
        recompute_mib=g["rm"],
        fixed_us=times.fixed_us,
        layer_us=times.layer_us,
        recompute_us=times.recompute_us,
        boundary_us=times.boundary_us,
        microbatches=times.microbatches,
        recompute=recompute,
        tail_us=times.tail_us,
        whole_mib=g["fr"],
        most_layers=host_caps(job, layout),
    )


def host_caps(job: Job, layout: Layout) -> Grid:
    """`PoolSplitProblem.most_layers` (`pool_host.layer_caps`)."""
    return layer_caps(job, layout)


def _line(a: float, b: float, ya: int, yb: int) -> tuple[float, float]:
    """(value at 0 layers, per layer) of the line through (ya, a) and (yb, b)."""
    slope = (b - a) / (yb - ya)
    return a - ya * slope, slope


def floor_lines(job: Job, layout: Layout) -> TimeLines | None:
    """Lines whose every coefficient is no more than `time_lines`', without the exact model's
    estimates: each bound of their least exact step (`pool_bounds.lower_bound_s`, less 1e-9 of
    itself for rounding) bounds the exact lines' too, the step only growing with each stage
    time, and so does `lower_bound_s` of the exact lines but for the simplex's rounding.

    A rank's stage time at the two sample counts, as `variant_bound.rank_stage_times` sums it
    from the layer times, leaves out only terms that are >= 0 and the same at both counts (its
    sends, a vision encoder): its line through them has the exact line's slope and no more than its
    intercept (where `time_lines` holds the rank's sends at its own pool's hop, >= 0; the
    boundary terms are `time_lines`' own). `time_lines` rounds both to the microsecond (by 1/2
    at most); here 1 us less, rounded down. None for other training codes than Megatron, or
    with the deferred output-layer weight gradients (tests/search/test_pool_floor.py checks it
    below)."""
    if job.framework != "megatron" or layout.defer_embedding_wgrad_compute:
        return None
    pp = layout.pp
    ya, yb, at = _at(job, layout)
    grids: dict[str, list[list[int]]] = {n: [[] for _ in range(pp)] for n in ("ft", "lt")}
    for k, src in enumerate(_twins(job)):
        if src < k:
            for rows in grids.values():
                for row in rows:
                    row.append(row[src])
            continue
        pj = _room(pools.pool_job(job, k), yb * pp)
        v = {(y, f): rank_stage_times(pj, at(y, f))[1] for y in (ya, yb) for f in (False, True)}
        for r in range(pp):
            lines = [_line(v[ya, f][r] * 1e6, v[yb, f][r] * 1e6, ya, yb) for f in (False, True)]
            grids["ft"][r].append(math.floor(min(lines[0][0], lines[1][0]) - 1))
            grids["lt"][r].append(math.floor(lines[0][1] - 1))
    g = {n: tuple(tuple(row) for row in rows) for n, rows in grids.items()}
    return TimeLines(
        num_layers=job.arch.num_layers,
        fixed_us=g["ft"],
        layer_us=g["lt"],
        recompute_us=tuple((0,) * len(job.pools) for _ in range(pp)),
        microbatches=layout.num_microbatches(job.global_batch_size),
        stages=pools.pool_stages(job, layout),
        boundary_us=time_boundary(job, layout),
    )


def plan_split(
    job: Job,
    layout: Layout,
    headroom_pct: float,
    recompute: bool = True,
    p: PoolSplitProblem | None = None,
    cutoff_s: float | None = None,
    over: list[PoolPlan] | None = None,
    tails: TailFloor | None = None,
) -> PoolPlan | None:
    """Solve the split of `layout`'s degrees over the pools and score it exactly; None when no
    split fits (by the solver, or by the exact model after RESOLVE_TRIES tightenings), or when
    the split's bound is at least `cutoff_s` (`pool_enum.best_splits`). Of equally good splits
    in the solver's objective, the exact model's fastest that fits is taken, the first in
    (pools, layers) order among equally fast ones: a defined answer; then every split whose
    bound is below its step and `cutoff_s`, where few (`pool_exact.refine`): the exact model's
    fastest, the first in (pools, layers) order of equally fast ones. Fits: the GPUs and every
    host (`pool_host`); where only the GPUs fit, the fastest such goes to `over`. `tails`: the
    layout's tail floor in the bounds (`pool_tails.tail_floor`, computed where not given)."""
    if p is None:
        p = problem(job, layout, headroom_pct, recompute and layout.recompute == "none")
    tails = tail_floor(job, layout) if tails is None else tails
    cutoff_us = None if cutoff_s is None else cutoff_s * 1e6
    missed: list[PoolPlan] = []  # fit the GPUs, over a host
    for _ in range(RESOLVE_TRIES):
        splits = best_splits(p, cutoff_us, tails)
        best: PoolPlan | None = None
        miss: PoolPlan | None = None  # this try's fastest over a host
        first: memory.MemoryReport | None = None
        for split in splits:
            pj, lay = apply(job, layout, split)
            if violations(pj, lay):
                continue
            mem = memory.estimate(pj, lay, headroom_pct)
            first = first or mem
            if not mem.fits:
                continue
            plan = PoolPlan(pj, lay, mem, cost.estimate(pj, lay), split)
            if not host_ok(pj, lay):
                miss = plan if miss is None or plan.step_time < miss.step_time else miss
            elif best is None or plan.step_time < best.step_time:
                best = plan
        if best is not None or first is None:  # fits, none, or the rules refuse every split
            break
        if miss is not None:  # the GPUs fit: fewer layers where a host is over
            missed.append(miss)
            if (tight := tightened(job, p, miss)) is None:
                break
            p = tight
            continue
        caps = list(p.capacity_mib)
        for st in first.stages:
            excess = math.ceil((st.total - st.capacity) / MIB)
            k = next(i for i, q in enumerate(job.pools) if q.name == st.pool)
            if excess > 0:
                caps[k] -= excess
        p = replace(p, capacity_mib=tuple(caps))
    if best is None and missed and over is not None:
        over.append(min(missed, key=lambda q: q.step_time))
    if best is None:
        return None
    score = scorer(job, layout, headroom_pct, p)
    orders = rank_pools(p, [tails.column(k) for k in range(len(job.pools))])
    return refine(p, orders, best, score, cutoff_s, tails=tails)
