"""Each pool's host memory in the pooled search (`planner.search.pool_search`): the split solver
keeps every stage within its pool's host, as within its GPUs' memory, so that the search's cut
(the top-th best step) is formed by plans that fit both, and a layout whose every split is over
a host is refused by the solver's own feasibility test (`solver.may_fit`, an order's empty
interval in `pool_order.order_ranks`).

What a stage pins on its host whatever it offloads of its activations (`host_memory`): the
CPU-offloaded optimizer (`optimizer_offload_fraction` f > 0) and the pinned staging of the
checkpoint saves (`host_checkpoint.stages`: every Megatron plan at ZeRO 0/1, and at 2/3 with
async_save), of its decoder layers' and its edges' parameters (embedding on the first rank,
output layer on the last: `stage_params`), each pinned block rounded up to a power of two
(`host_pinned`), the same on every pool; the pool's host gives it `usable_bytes` of its GPU's
share. The round-up of each block is not linear in the stage's layers (nor, in principle,
monotone: a rank's pieces of the bucket move as layers are added), so each (rank, pool)'s cap
is found by evaluating the exact per-rank bytes (`host_memory.rank_fixed_bytes`, what
`host_memory.estimate` takes the most of over each pool's ranks) at every layer count the rank
can hold: the largest count whose bytes fit (`layer_caps`: `PoolSplitProblem.most_layers`).
Where the layers' kinds differ, a count's bytes are the least over the places the rank's
layers can start, so the cap is never below the largest count that fits (the bounds of
`pool_bounds.capped_bound_s` stay valid) and the exact model judges: a split over a host lowers
the cap of each rank over it to one layer fewer than it held and is solved again
(`tightened`). The pooled layouts offload no activations; a layout that does gets no caps
(the exact check alone)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from planner.inputs import pipeline_layout
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_checkpoint, host_memory, pools
from planner.model.host_pinned import Rounding
from planner.model.job_memo import JobMemo
from planner.model.schedule import Chunks
from planner.search.pool_plan import PoolPlan
from planner.search.solver import Grid, PoolSplitProblem

_CAPS: JobMemo[tuple[object, ...], Grid] = JobMemo()
"""`layer_caps` per job and what the host bytes read of the layout (`_caps_key`)."""


def pins_host(job: Job, layout: Layout) -> bool:
    """Whether the plan may pin host memory `host_memory` counts: the CPU-offloaded optimizer
    (f > 0 of a model that trains), an activation offload or the checkpoint staging
    (`host_checkpoint.stages`); where not, its host bytes are 0, which every budget (>= 0)
    holds."""
    offloads = layout.cpu_offloading_num_layers > 0 or bool(layout.offload_modules)
    optimizer = host_memory.offloads_optimizer(job)
    return offloads or optimizer or host_checkpoint.stages(job, layout.zero_stage)


def host_ok(job: Job, layout: Layout) -> bool:
    """`host_memory.estimate(job, layout).fits`, without computing it where nothing is pinned
    or where the pinned blocks' ceiling fits (`host_memory.fits_below_ceiling`)."""
    if not pins_host(job, layout) or host_memory.fits_below_ceiling(job, layout):
        return True
    return host_memory.estimate(job, layout).fits


def usable(job: Job, k: int) -> float:
    """Bytes a GPU of pool k may pin (`host_memory.usable_bytes` of its share)."""
    return host_memory.usable_bytes(host_memory.share_bytes(pools.pool_job(job, k))[0])


def layer_caps(job: Job, layout: Layout) -> Grid:
    """`PoolSplitProblem.most_layers` of `layout` (empty: no cap): rank r on pool k holds at most
    the largest y whose host bytes fit pool k's usable bytes, 0 where no count does
    (`_rank_caps`; the module docstring)."""
    if not pins_host(job, layout) or layout.cpu_offloading_num_layers or layout.offload_modules:
        return ()
    memo = _CAPS.of(job)
    key = _caps_key(layout)
    if key not in memo:
        rooms = [usable(job, k) for k in range(len(job.pools))]
        one_kind = len(set(job.arch.layer_kinds)) == 1
        rows: list[tuple[int, ...]] = []
        for r in range(layout.pp):
            if one_kind and 1 < r < layout.pp - 1:
                # a middle rank holds decoder layers only, and only rank 0 has DDP buckets
                # (`host_pinned.bucket_size`): with one kind, rank 1's bytes at every count
                rows.append(rows[1])
            else:
                rows.append(_rank_caps(job, layout, r, rooms))
        memo[key] = tuple(rows)
    return memo[key]


def _caps_key(layout: Layout) -> tuple[object, ...]:
    """What the host bytes of a pooled layout's rank read of the layout besides its split
    (`stage_params`, `host_pinned.rank_rounding`, `host_memory.rank_optimizer_bytes`,
    `host_checkpoint.rank_staging_bytes`): the degrees, the data-parallel groups, the ZeRO stage
    and the DDP bucketing (pooled layouts are 1F1B, one chunk a rank: the last rank the output
    rank)."""
    lay = layout
    buckets = (lay.overlap_grad_reduce, lay.ddp_bucket_size, lay.ddp_num_buckets)
    return (
        lay.tp,
        lay.ep,
        lay.expert_tp,
        lay.pp,
        lay.dense_dp,
        lay.expert_dp,
        lay.zero_stage,
        buckets,
    )


def _rank_caps(job: Job, layout: Layout, rank: int, rooms: list[float]) -> tuple[int, ...]:
    """For each usable size in `rooms`, the largest layer count y that rank `rank` can hold
    (every other rank one layer at least) whose host bytes fit it, 0 where none: the bytes are
    `host_memory.rank_fixed_bytes` (pool 0's job: they do not read the cluster), where the
    layers' kinds differ the least over the starts s of the rank's layers (`rank` <= s <=
    L - (pp - 1 - rank) - y, each distinct sequence of kinds once; with one kind, s = rank).
    Every y is tried from the most down, not bisected (the bytes need not be monotone in y);
    a y whose bytes without the round-up (a floor) are over is passed, and one whose bytes
    with every block twice its piece (a ceiling) fit is taken, without the pieces' walk."""
    L, pp = job.arch.num_layers, layout.pp
    pj = pools.pool_job(job, 0)
    kinds = job.arch.layer_kinds
    one_kind = len(set(kinds)) == 1
    places: dict[int, list[tuple[Layout, Chunks]]] = {}
    known: dict[tuple[int, Rounding], float] = {}

    def least(y: int, rounding: Rounding) -> float:
        """The least bytes of y layers over their starts, each bound or exact asked once."""
        if y not in places:
            last = L - (pp - 1 - rank) - y
            seen: set[tuple[object, ...]] = set()
            places[y] = []
            for s in range(rank, rank + 1 if one_kind else last + 1):
                window = tuple(kinds[s : s + y])
                if window not in seen:
                    seen.add(window)
                    lay = _placed(job, layout, rank, s, y)
                    places[y].append((lay, lay.chunk_layers(L)[rank]))
        if (y, rounding) not in known:
            known[y, rounding] = min(
                sum(host_memory.rank_fixed_bytes(pj, lay, rank, chunks, rounding))
                for lay, chunks in places[y]
            )
        return known[y, rounding]

    caps = []
    for room in rooms:
        cap = 0
        for y in range(L - pp + 1, 0, -1):  # from the most layers down
            if least(y, "floor") > room:
                continue
            # fits without the walk of the pieces where its ceiling does
            if least(y, "ceiling") <= room or least(y, "exact") <= room:
                cap = y
                break
        caps.append(cap)
    return tuple(caps)


def _placed(job: Job, layout: Layout, rank: int, start: int, y: int) -> Layout:
    """The pooled layout (`pools.apply`'s stages: one chunk a rank) with rank `rank` holding the
    y layers from `start`, the ranks before it `start` layers, those after it the rest, each
    of them one but the first and the last."""
    L, pp = job.arch.num_layers, layout.pp
    before = [start - rank + 1] + [1] * (rank - 1) if rank else []
    after = [1] * (pp - 2 - rank) + [L - start - y - (pp - 2 - rank)] if rank < pp - 1 else []
    split = [*before, y, *after]
    stages = pipeline_layout.stages_of([[n] for n in split], job.arch.mtp_num_layers)
    return layout.with_(pipeline_layers=None, pipeline_layout=stages, vpp=1)


def tightened(job: Job, p: PoolSplitProblem, plan: PoolPlan) -> PoolSplitProblem | None:
    """`p` with the cap of each rank of `plan`'s split over its pool's host lowered to one layer
    fewer than it holds (None: no rank is over a cap it had, or there are no caps)."""
    if not p.most_layers or plan.split is None:
        return None
    caps = [list(row) for row in p.most_layers]
    lowered = False
    for r, (y, k) in enumerate(zip(plan.split.layers, plan.split.pools, strict=True)):
        # caps exist only where no activation is offloaded (`layer_caps`)
        held = host_memory.fixed_bytes(plan.job, plan.layout, (r,))
        if held > usable(job, k) and caps[r][k] >= y:
            caps[r][k] = y - 1
            lowered = True
    return replace(p, most_layers=tuple(map(tuple, caps))) if lowered else None


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
