"""Each pool's host memory in the pooled search (`planner.search.pool_search`): the split solver
keeps every stage within its pool's host, as within its GPUs' memory, so that the search's cut
(the top-th best step) is formed by plans that fit both, and a layout whose every split is over
a host is refused by the solver's own feasibility test (`solver.may_fit`, an order's empty
interval in `pool_order.order_ranks`).

What a stage pins on its host (`host_memory`): with the CPU-offloaded optimizer
(`optimizer_offload_fraction` f > 0), HOST_OPTIMIZER_BYTES x f per parameter of its
distributed-optimizer shard, its decoder layers' and its edges' (embedding on the first rank,
output layer on the last: `stage_params`), the same on every pool; the pool's host gives it
`usable_bytes` of its GPU's share. With one kind of layer the bytes are a line in the stage's
layers, a_r + b_r y, so each (rank, pool) holds at most (usable_k - a_r) / b_r layers
(`layer_caps`: `PoolSplitProblem.most_layers`), the line taken through the two sample counts
the memory lines use (`pools.problem`). Where the layer kinds differ the line is the samples'
and the exact model judges: a split over a host lowers the cap of each rank over it to one
layer fewer than it held and is solved again (`tightened`), as the GPUs' capacity is lowered
by their excess. The pooled layouts offload no activations; a layout that does gets no caps
(the exact check alone)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, pools
from planner.search import pool_bounds
from planner.search.pool_bounds import TimeLines
from planner.search.pool_plan import PoolPlan
from planner.search.solver import Grid, PoolSplitProblem

SLACK = 1e-9
"""Relative slack a cap leaves on the line's side (the exact check refuses what is over)."""


def pins_host(job: Job, layout: Layout) -> bool:
    """Whether the plan may pin host memory `host_memory` counts: the CPU-offloaded optimizer
    (f > 0 of a model that trains) or an activation offload; where not, its host bytes are 0,
    which every budget (>= 0) holds."""
    offloads = layout.cpu_offloading_num_layers > 0 or bool(layout.offload_modules)
    return offloads or (job.optimizer_offload_fraction > 0 and not job.frozen_model)


def host_ok(job: Job, layout: Layout) -> bool:
    """`host_memory.estimate(job, layout).fits`, without computing it where nothing is pinned."""
    return not pins_host(job, layout) or host_memory.estimate(job, layout).fits


def usable(job: Job, k: int) -> float:
    """Bytes a GPU of pool k may pin (`host_memory.usable_bytes` of its share)."""
    return host_memory.usable_bytes(host_memory.share_bytes(pools.pool_job(job, k))[0])


def layer_caps(
    job: Job, layout: Layout, sample: Callable[[int], Layout], pj: Job, ya: int, yb: int
) -> Grid:
    """`PoolSplitProblem.most_layers` of `layout` (empty: no cap): rank r on pool k holds at most
    the y whose offloaded optimizer, on the line through the samples (`sample(y)`: every rank
    with y layers, of the job `pj`), fits pool k's host, 0 where not even one layer does."""
    if not pins_host(job, layout) or layout.cpu_offloading_num_layers or layout.offload_modules:
        return ()
    L = job.arch.num_layers
    rooms = [usable(job, k) for k in range(len(job.pools))]
    at = {y: sample(y) for y in (ya, yb)}
    rows = []
    for r in range(layout.pp):
        va, vb = (host_memory.optimizer_bytes(pj, at[y], (r,)) for y in (ya, yb))
        per = (vb - va) / (yb - ya)
        fixed = va - ya * per
        row = []
        for room in rooms:
            if per <= 0:
                row.append(L if fixed + per <= room * (1 + SLACK) else 0)
            else:
                most = math.floor((room * (1 + SLACK) - fixed) / per)
                row.append(min(max(most, 0), L))
        rows.append(tuple(row))
    return tuple(rows)


def tightened(job: Job, p: PoolSplitProblem, plan: PoolPlan) -> PoolSplitProblem | None:
    """`p` with the cap of each rank of `plan`'s split over its pool's host lowered to one layer
    fewer than it holds (None: no rank is over a cap it had, or there are no caps)."""
    if not p.most_layers or plan.split is None:
        return None
    caps = [list(row) for row in p.most_layers]
    lowered = False
    for r, (y, k) in enumerate(zip(plan.split.layers, plan.split.pools, strict=True)):
        # caps exist only where nothing but the optimizer is offloaded (`layer_caps`)
        held = host_memory.optimizer_bytes(plan.job, plan.layout, (r,))
        if held > usable(job, k) and caps[r][k] >= y:
            caps[r][k] = y - 1
            lowered = True
    return replace(p, most_layers=tuple(map(tuple, caps))) if lowered else None


def capped_bound_s(times: TimeLines, caps: Grid) -> float | None:
    """Seconds no split within the layer caps `caps` beats, the GPUs' memory aside (None: no
    split keeps every stage within its pool's host): a lower bound of the EXACT 1F1B step plus
    its tail over the splits of each order with every rank's layers within its cap
    (`pool_bounds.capped_bound_s`, `pool_step_bound.order_floor`: recompute only adds time,
    recompute_us >= 0, and the tails do not read it), so no less than
    `pool_bounds.lower_bound_s`, which drops the caps."""
    return pool_bounds.capped_bound_s(times, caps)


def caps_allow(caps: Grid, stages: tuple[int, ...], num_layers: int) -> bool:
    """Whether some order of the pools (contiguous blocks of `stages` ranks) gives every rank at
    least one layer within its cap and room for all `num_layers` (what `solver.may_fit` asks of
    the caps alone, before any line is computed); True without caps."""
    if not caps:
        return True
    for order in itertools.permutations(range(len(stages))):
        ks = [k for k in order for _ in range(stages[k])]
        most = [min(caps[r][k], num_layers) for r, k in enumerate(ks)]
        if min(most) >= 1 and sum(most) >= num_layers:
            return True
    return False
