"""`planner suggest` over pools with the data-parallel replicas across them (issue 25; where
`[cluster.between_pools] allow_data_parallel = true`): each pool runs whole pipeline replicas of
one layout, one distributed-optimizer instance per pool, and only the gradient all-reduce between
the instances crosses the link (`planner.model.pools`, `Layout.dp_pools`).

The layouts: the pools must be of one size (Megatron's instances are equal slices of every
data-parallel group); tp a power of two within every pool's node dividing the heads and query
groups, cp 1 or 2, pp up to the decoder layers with tp x cp x pp dividing a pool, a pool's share
of a stage (tp x cp x dp / pools) whole nodes, Megatron's even split or its first/last uneven one
(`planner.search.space.splits`), for a mixture of experts every ep dividing the experts and that
share (expert TP = tp), micro-batch sizes 1, 2 and 4, Megatron's TP overlap on and off (tp > 1),
ZeRO 1 (the instances are the distributed optimizer's), vpp 1; each with the least recompute that
fits (none, selective, full: each adds time, so the least that fits is the fastest). Every plan is
scored by the exact model (memory on every pool's GPU, the slowest pool's step). Layouts are
scanned in the order of a lower bound (the slowest pool's compute, `cost.compute_floor`, which no
recompute or overlap lowers), and the scan stops where the bound reaches the top-th best step
known, the pipeline-across plans' included. A layout the scan reaches is scored at once unless a
tighter bound (`step_floor`, with the pipeline's fill and drain) says its step cannot move the
top-th best; those wait, and are scored after the scan only while they may still be the best
plan of this kind or tie the top-th (`search`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.layout import Layout, Recompute
from planner.inputs.plan import Job
from planner.model import cost, memory, pools
from planner.search.bound import base_bound
from planner.search.pool_host import host_ok
from planner.search.pool_plan import (
    MICRO_BATCHES,
    PoolPlan,
    expert_degrees,
    pool_layout,
)
from planner.search.rules import violations
from planner.search.space import Space
from planner.search.splits import split_fields, splits

LADDER: tuple[Recompute, ...] = ("none", "selective", "full")
"""Recompute tried in turn until the memory fits (each later one only adds time)."""


def layouts(job: Job) -> list[Layout]:
    """Every layout of the job's pools with the data-parallel replicas across them (no memory
    check; recompute none), or [] where the pools differ in size."""
    sizes = {p.cluster.num_gpus for p in job.pools}
    if len(job.pools) < 2 or len(sizes) > 1 or job.framework != "megatron":
        return []
    n, count = sizes.pop(), len(job.pools)
    arch = job.arch
    node = min(p.cluster.gpus_per_node for p in job.pools)
    space = Space()
    out = []
    for tp in (1, 2, 4, 8, 16):
        if tp > node or arch.num_attention_heads % tp or (arch.num_query_groups or tp) % tp:
            continue
        for cp in (1, 2):
            if job.seq_length % (2 * cp):
                continue
            for pp in range(1, arch.num_layers + 1):
                if n % (tp * cp * pp):
                    continue
                per_pool = n // (tp * cp * pp)
                share = tp * cp * per_pool
                if any(share % p.cluster.gpus_per_node for p in job.pools):
                    continue
                dp = per_pool * count
                for split in splits(job, space, pp, 1):
                    for ep in expert_degrees(job, cp * per_pool):
                        for mbs, tpov in itertools.product(MICRO_BATCHES, (False, True)):
                            if job.global_batch_size % (dp * mbs) or (tpov and tp == 1):
                                continue
                            out.append(
                                pool_layout(
                                    job,
                                    tp,
                                    cp,
                                    pp=pp,
                                    dp=dp,
                                    ep=ep,
                                    micro_batch_size=mbs,
                                    **split_fields(split),
                                    tp_comm_overlap=tpov,
                                    dp_pools=count,
                                )
                            )
    return out


def lower_bound_s(job: Job, layout: Layout) -> float:
    """Seconds no recompute or overlap choice beats: the slowest pool's compute floor."""
    return max(cost.compute_floor(j, lay) for j, lay in pools.replica_views(job, layout))


ROUNDING = 1e-9
"""The relative slack `search` leaves between a bound and the steps it is compared with (the
bound sums the exact model's terms in another order; $ per token rounds the step again)."""


def step_floor(job: Job, layout: Layout) -> float:
    """Seconds the layout's step cannot go under, whichever recompute of LADDER it takes: the
    slowest pool's `bound.base_bound` (each pool's replicas are a job of one GPU kind, and the
    step is the slowest pool's, `cost.estimate`), less ROUNDING of itself."""
    views = dict.fromkeys(pools.replica_views(job, layout))
    return max(base_bound(j, lay) for j, lay in views) * (1 - ROUNDING)


def score(job: Job, layout: Layout, headroom_pct: float) -> PoolPlan | None:
    """The layout with the least recompute of LADDER that fits, scored exactly (None: it breaks
    a rule, or nothing fits)."""
    for rc in LADDER:
        lay = layout.with_(recompute=rc)
        if violations(job, lay):
            return None
        mem = memory.estimate(job, lay, headroom_pct)
        if mem.fits:
            return PoolPlan(job, lay, mem, cost.estimate(job, lay), None)
    return None


@dataclass(frozen=True)
class DataSearch:
    """The plans that fit, best first, the layouts there were and those scored, and the least
    lower bound of any layout (None: no layout)."""

    plans: tuple[PoolPlan, ...]
    layouts: int
    scored: int
    least_bound_s: float | None = None
    over: tuple[PoolPlan, ...] = ()
    """Plans that fit the GPUs and are over a pool's host (`pool_host.host_ok`): left out of
    `plans` and of every bound's comparison, as each is scored."""


def search(
    job: Job,
    headroom_pct: float,
    top: int,
    known: list[float],
    rank: Callable[[PoolPlan], float] | None = None,
) -> DataSearch:
    """The plans that fit, each layout with its least recompute that fits; `known`: the ranks
    found so far (the pipeline-across plans'), which bound the scan. `rank`: what the top is
    ranked by, in seconds never below a plan's step (`pool_search.ranking`: the step, the
    default, or the cost objective's `pool_costs.cost_step_s`), so that a bound on the step
    bounds it; "step" below reads as it.

    What the plans decide is the top-th best step of all (the scan's stop, and with it the
    layouts scanned), the plans that may enter the top (the top-th best or faster, ties
    included) and the best of this kind (`PoolSearch.best_data`, the first of equals in scan
    order). Once `top` steps are known, a layout whose `step_floor` is at least the top-th best
    changes none of the first (its step is no better, and goes in after its equals), so it waits
    (`_waiting`) and the scan goes on as if it had been scored; the plans found are those a
    scan scoring every layout finds, less only plans slower than both the final top-th best and
    the best of this kind (tests/search/test_pool_data_search.py checks the search against
    every layout scored)."""
    times = sorted(known)
    todo = layouts(job)
    bounded = sorted((lower_bound_s(job, lay), i, lay) for i, lay in enumerate(todo))
    found: list[tuple[int, PoolPlan]] = []  # (place in the scan, plan)
    over: list[PoolPlan] = []  # fit the GPUs, over a pool's host
    waiting: list[tuple[float, int, Layout]] = []
    scored = 0
    for place, (bound, _, lay) in enumerate(bounded):
        if len(times) >= top and bound >= times[top - 1]:
            break  # sorted by the bound: no later layout can enter the top
        if len(times) >= top:
            floor = step_floor(job, lay)
            if floor >= times[top - 1]:
                waiting.append((floor, place, lay))
                continue
        scored += 1
        plan = score(job, lay, headroom_pct)
        if plan is not None and not host_ok(plan.job, plan.layout):
            over.append(plan)
        elif plan is not None:
            found.append((place, plan))
            bisect.insort(times, rank(plan) if rank else plan.performance.step_time_s)
    last = times[top - 1] if len(times) >= top else math.inf
    found, extra = _waiting(job, headroom_pct, waiting, found, last, over)
    plans = [p for _, p in sorted(found, key=lambda f: f[0])]
    ranked = tuple(sorted(plans, key=lambda q: q.performance.step_time_s))
    least = bounded[0][0] if bounded else None
    return DataSearch(ranked, len(todo), scored + extra, least, tuple(over))


def _waiting(
    job: Job,
    headroom_pct: float,
    waiting: list[tuple[float, int, Layout]],
    found: list[tuple[int, PoolPlan]],
    last: float,
    over: list[PoolPlan],
) -> tuple[list[tuple[int, PoolPlan]], int]:
    """`found` with the plans of the `waiting` layouts (floor, place in the scan, layout) that
    may matter: scored in order of their floor while it is at most `last` (the scan's final
    top-th best step: a plan that ties it may enter the top) or the best step found so far (a
    plan that ties it may be the first of equals), each with ROUNDING to spare; once a floor is
    above both, every later layout's step is too. And how many were scored; a plan over a
    pool's host goes to `over` instead."""
    best = min((p.performance.step_time_s for _, p in found), default=math.inf)
    found = list(found)
    scored = 0
    for floor, place, lay in sorted(waiting):
        if floor > max(last, best) * (1 + ROUNDING):
            break
        scored += 1
        plan = score(job, lay, headroom_pct)
        if plan is not None and not host_ok(plan.job, plan.layout):
            over.append(plan)
        elif plan is not None:
            found.append((place, plan))
            best = min(best, plan.performance.step_time_s)
    return found, scored
