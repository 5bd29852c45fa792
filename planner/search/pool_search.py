"""`planner suggest` on a cluster of pools (issue 25): the uniform degrees searched here, the
per-stage part (layers per stage, the pools' order, block recompute) exactly
(`planner.search.pools.plan_split`), every answer scored by the exact model; a layout
whose split's bound is no better than the top-th best step so far is not solved.

The degrees: tp a power of two within every pool's node and dividing the attention heads and
query groups, cp 1 or 2, dp such that a stage's tp x cp x dp GPUs divide every pool (so each pool
holds whole stages), pp the stages that makes, between the number of pools and the decoder
layers; for a mixture of experts every ep dividing the experts and cp x dp (`expert_degrees`, EP
inside a stage, expert TP = tp); micro-batch sizes 1, 2 and 4 where the global batch divides;
ZeRO 1 and 2; Megatron's TP overlap off and on where tp > 1 (with sequence parallelism); vpp 1
(interleaving over pools of different speeds is left out); recompute none with the solver's
block count, or selective. Each of these is a layout of its own, bounded like the rest: ZeRO 2's
memory may spare a slow layout its recompute, and the overlap lowers a layout's bound, so
neither can be tried on the leaders alone. Ranked by step time, or by $ per token (`objective`
"cost").
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from planner.inputs.layout import Layout, Recompute, ZeroStage
from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import host_memory
from planner.search import pool_data
from planner.search.pool_bounds import TimeLines, lower_bound_s
from planner.search.pool_costs import usd_per_million_tokens
from planner.search.pool_enum import needs_solver, split_bound
from planner.search.pool_plan import MICRO_BATCHES, PoolPlan, expert_degrees, host_fits
from planner.search.pools import (
    Recomputed,
    apply,
    lines_floor,
    plan_split,
    problem,
    time_lines,
)
from planner.search.rules import violations
from planner.search.rules.context import exchange_for
from planner.search.solver import PoolSplitProblem, solve_pools

__all__ = ["MICRO_BATCHES", "PoolSearch", "expert_degrees", "layouts", "search"]

RECOMPUTE: tuple[Recompute, ...] = ("none", "selective")
ZERO_STAGES: tuple[ZeroStage, ...] = (1,)
"""The distributed optimizer alone: pools always pipeline (pp >= the number of pools >= 2),
and Megatron-FSDP (ZeRO 2-3) with pp > 1 is what the one-kind search leaves out too
(`space.zero_stages`: Megatron-LM's tests never run it, NVIDIA's recipes avoid it); `check`
takes a plan with it, with a warning."""


@dataclass(frozen=True)
class PoolSearch:
    """The plans that fit, best first, and how many layouts were solved."""

    plans: tuple[PoolPlan, ...]
    solved: int
    layouts: int
    closest: Closest | None = None
    """When nothing fits: the layout that comes nearest (`closest`)."""
    refused: str | None = None
    """When nothing fits and every layout `closest` tries breaks a rule of Megatron-LM's
    (`rules.violations`, a job's setting no layout can meet): the first such rule's message."""
    host_over: str | None = None
    """When the plans that fit the GPUs are all over a pool's host memory: the fastest's."""
    best_pipeline: PoolPlan | None = None
    """With data parallelism across the pools allowed: the best plan whose pipeline crosses
    the link, and (`data`) the search of those whose data-parallel replicas span the pools."""
    data: pool_data.DataSearch | None = None

    @property
    def best_data(self) -> PoolPlan | None:
        """The best plan with the data-parallel replicas across the pools (None: none found)."""
        return self.data.plans[0] if self.data and self.data.plans else None


@dataclass(frozen=True)
class Closest:
    """The binding constraint of an infeasible mix: the layout whose best split exceeds its
    worst stage's capacity the least, that stage, its pool (index into the job's pools) and
    the MiB it lacks (the solver's relaxed split, memory lines from the exact model)."""

    layout: Layout
    stage: int
    pool: int
    over_mib: int
    capacity_mib: int


CLOSEST_TRIES = 8
"""Layouts tried for `closest`: mbs 1, no recompute (the solver may add block recompute), most
sharded first (largest tp x cp x pp: the least memory per GPU)."""


def closest(job: Job, headroom_pct: float, todo: list[Layout]) -> tuple[Closest | None, str | None]:
    """The nearest miss among the most sharded layouts (relaxed CP-SAT: least excess) that
    pass the rules; else the first rule they break (None: no layout was tried)."""
    light = [lay for lay in todo if lay.micro_batch_size == 1 and lay.recompute == "none"]
    light.sort(key=lambda lay: -(lay.tp * lay.cp * lay.pp))
    best: Closest | None = None
    refused: str | None = None
    for lay in light[:CLOSEST_TRIES]:
        p = problem(job, lay, headroom_pct, True)
        split = solve_pools(p, relax=True)
        if split is None:
            continue
        pj, placed = apply(job, lay, split)
        if broken := violations(pj, placed):
            refused = refused or f"{broken[0].field}: {broken[0].message}"
            continue
        r, k, over = split.binding(p)
        if best is None or over < best.over_mib:
            best = Closest(placed, r, k, over, p.capacity_mib[k])
    return best, None if best is not None else refused


def layouts(job: Job) -> list[Layout]:
    """Every uniform layout of the job's pools (the per-stage split left to the solver)."""
    arch = job.arch
    gcd = math.gcd(*(p.cluster.num_gpus for p in job.pools))
    node = min(p.cluster.gpus_per_node for p in job.pools)
    total = job.cluster.num_gpus
    out = []
    for tp in (1, 2, 4, 8, 16):
        if tp > node or arch.num_attention_heads % tp or (arch.num_query_groups or tp) % tp:
            continue
        for cp in (1, 2):
            if job.seq_length % (2 * cp):
                continue
            for dp in range(1, gcd // (tp * cp) + 1):
                s = tp * cp * dp
                if gcd % s:
                    continue
                pp = total // s
                if not len(job.pools) <= pp <= arch.num_layers:
                    continue
                for ep, mbs in itertools.product(expert_degrees(job, cp * dp), MICRO_BATCHES):
                    if job.global_batch_size % (dp * mbs):
                        continue
                    overlaps = (False, True) if tp > 1 else (False,)
                    for rc, zero, ov in itertools.product(RECOMPUTE, ZERO_STAGES, overlaps):
                        out.append(
                            Layout(
                                tp=tp,
                                pp=pp,
                                dp=dp,
                                cp=cp,
                                cp_comm_type=exchange_for(job, tp, cp),
                                ep=ep,
                                sequence_parallel=tp > 1,
                                tp_comm_overlap=ov,
                                micro_batch_size=mbs,
                                recompute=rc,
                                zero_stage=zero,
                            )
                        )
    return out


def search(
    job: Job,
    headroom_pct: float,
    objective: str = "throughput",
    top: int = 5,
    progress: Callable[[str], None] | None = None,
) -> PoolSearch:
    """Solve the layouts' splits, most promising first, and rank what fits. A layout whose
    `lower_bound_s` is no better than the top-th best exact step found is not solved (every
    plan uses every GPU, so $ per token ranks as step time does)."""
    todo = layouts(job)
    # bounded on the time lines alone; the memory lines only for the layouts solved
    recomputed = Recomputed()  # the none and selective layouts' samples, every layer recomputed
    bounded = _by_bound(job, todo, recomputed)
    plans: list[PoolPlan] = []
    solved = 0
    # splits that only CP-SAT solves (recompute may beat none) wait for the others' plans, by
    # their memory-aware bound, so that the top-th best step may spare them (and OR-Tools)
    deferred: list[tuple[float, int, Layout, PoolSplitProblem]] = []
    for i, (lay, times) in enumerate(bounded):
        if progress is not None and i % 20 == 0:
            progress(f"pools: layout {i + 1} of {len(todo)}")
        best = sorted(q.performance.step_time_s for q in plans)
        if len(best) >= top and lower_bound_s(times) >= best[top - 1]:
            break  # sorted by the bound: no later layout can enter the top
        p = problem(job, lay, headroom_pct, lay.recompute == "none", times, recomputed)
        if needs_solver(p):
            bound = split_bound(p)
            if bound is not None:  # None: no block recompute count fits it
                deferred.append((bound * 1e-6, i, lay, p))
            continue
        solved += 1
        cut = best[top - 1] if len(best) >= top else None
        plan = plan_split(job, lay, headroom_pct, p=p, cutoff_s=cut)
        if plan is not None:
            plans.append(plan)
    for bound, _, lay, p in sorted(deferred, key=lambda d: d[:2]):
        best = sorted(q.performance.step_time_s for q in plans)
        cut = best[top - 1] if len(best) >= top else None
        if cut is not None and bound >= cut:
            break  # sorted by the bound
        solved += 1
        plan = plan_split(job, lay, headroom_pct, p=p, cutoff_s=cut)
        if plan is not None:
            plans.append(plan)

    layouts_seen = len(todo)
    data, best_pipeline = None, None
    if job.pools_data_parallel:  # the replicas across the pools too (planner.search.pool_data)
        known = [q.performance.step_time_s for q in plans]
        data = pool_data.search(job, headroom_pct, top, known)
        layouts_seen += data.layouts
        solved += data.scored
        best_pipeline = min(plans, key=lambda q: q.performance.step_time_s, default=None)
        plans += data.plans

    def key(p: PoolPlan) -> float:
        if objective == "cost":
            usd = usd_per_million_tokens(p.job, p.performance)
            return usd if usd is not None else math.inf
        return p.performance.step_time_s

    # each pool's host too (`pool_plan.host_fits`), judged of the plans found: the cut above
    # reads every plan's step, so a plan that fits the hosts but was slower than K that do not
    # can be missed (fewer rows), never one that does not fit shown
    over = [p for p in plans if not host_fits(p)]
    plans = [p for p in plans if host_fits(p)]
    near, refused = (None, None) if plans else closest(job, headroom_pct, todo)
    host_over = None
    if over and not plans:  # the fastest that fits the GPUs: its binding pool's host
        h = host_memory.estimate(over[0].job, over[0].layout)
        host_over = (
            f"{over[0].layout.describe()} holds {h.total / GIB:.2f} GiB a GPU on pool "
            f"{h.pool!r} (of its host's {h.capacity / GIB:.2f} GiB usable)"
        )
    ranked = tuple(sorted(plans, key=key)[:top])
    return PoolSearch(
        ranked,
        solved,
        layouts_seen,
        near,
        best_pipeline=best_pipeline,
        data=data,
        refused=refused,
        host_over=host_over,
    )


def _by_bound(
    job: Job, todo: list[Layout], recomputed: Recomputed
) -> Iterator[tuple[Layout, TimeLines]]:
    """The layouts with their time lines, in order of `lower_bound_s` (then of `todo`), each
    layout's lines computed only when it may come next: queued first on `lines_floor`, no more
    than that bound, and again on the bound itself once it comes first, so in the order of a
    sort by the bound, without the lines of the layouts the search never reaches. A stage's
    time per micro-batch does not read the ZeRO stage (`stage_time._FIXED`): one set of lines
    (and of floors) serves a layout's ZeRO 1 and ZeRO 2."""
    plains = [lay.with_(zero_stage=ZERO_STAGES[0]) for lay in todo]
    floors: dict[Layout, float] = {}
    lines: dict[Layout, TimeLines] = {}
    queue: list[tuple[float, int, bool]] = []
    for i, plain in enumerate(plains):
        if plain not in floors:
            floors[plain] = lines_floor(job, plain)
        queue.append((floors[plain], i, False))
    heapq.heapify(queue)
    while queue:
        _, i, exact = heapq.heappop(queue)
        plain = plains[i]
        if exact:
            yield todo[i], lines[plain]
            continue
        if plain not in lines:
            lines[plain] = time_lines(job, plain, recomputed)
        heapq.heappush(queue, (lower_bound_s(lines[plain]), i, True))
