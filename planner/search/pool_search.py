"""`planner suggest` on a cluster of pools (issue 25): the uniform degrees searched here, the
per-stage part (layers per stage, the pools' order, block recompute) exactly
(`planner.search.pools.plan_split`), every answer scored by the exact model; a layout
whose split's bound is no better than the top-th best step so far is not solved. The split is
solved under the solver's objective, 1F1B's closed form, scored by the exact step
(`one_f_one_b.step`, no more than the closed form), and then every order and split of the
layers whose bound is below both that step and the cut is scored exactly
(`planner.search.pool_exact`, the least block recompute count that fits each) where the
bound's box holds at most `pool_exact.SPLITS` splits: the top K are certified as "each
layout's split the exact model's fastest where at most 2,048 splits are left to bound, else the
best under the solver's objective, scored exactly", the bounds being of the exact step of every
split (`planner.search.pool_step_bound`), so of whichever one a layout is given.

The degrees: tp a power of two within every pool's node and dividing the attention heads and
query groups, cp 1 or 2, dp such that a stage's tp x cp x dp GPUs divide every pool (so each pool
holds whole stages), pp the stages that makes, between the number of pools and the decoder
layers; for a mixture of experts every ep dividing the experts and cp x dp (`expert_degrees`, EP
inside a stage, expert TP = tp); micro-batch sizes 1, 2 and 4 where the global batch divides;
ZeRO 1 only (`ZERO_STAGES`); Megatron's TP overlap off and on where tp > 1 (with sequence
parallelism); vpp 1 (interleaving over pools of different speeds is left out); recompute none
with the solver's block count, or selective (`pool_recompute`: where the one-kind search's
rule says it can save memory, so not core_attn under flash attention). Each of these is a
layout of its own, bounded like the rest: selective's memory may spare a slow layout its block
recompute, and the overlap lowers a layout's bound, so neither can be tried on the leaders
alone. Ranked by step time, or by $ per token with checkpoints and failures (`objective`
"cost": the figure explain prints, `pool_costs.cost_step_s`, its cuts as exact); twins
(`planner.search.twins`: layouts that only trade cp for micro-batch size at the same step and
split) are folded into one row, so the top K are K different layouts.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from planner.inputs.layout import Layout, ZeroStage
from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import host_memory
from planner.model.pools import pool_stages
from planner.ops.resilience import least_wall_per_work
from planner.search import pool_data
from planner.search.pool_bounds import TimeLines, capped_bound_s, lower_bound_s
from planner.search.pool_costs import cost_step_s
from planner.search.pool_enum import needs_solver, split_bound
from planner.search.pool_host import caps_allow, usable
from planner.search.pool_plan import MICRO_BATCHES, PoolPlan, expert_degrees, pool_layout
from planner.search.pool_recompute import needless, recompute_rungs
from planner.search.pool_tails import NONE, TailFloor, tail_floor
from planner.search.pools import (
    Recomputed,
    apply,
    floor_lines,
    host_caps,
    plan_split,
    problem,
    time_lines,
)
from planner.search.rules import violations
from planner.search.solver import PoolSplitProblem, solve_pools
from planner.search.top_k import rank_key
from planner.search.twins import fold

__all__ = ["MICRO_BATCHES", "PoolSearch", "expert_degrees", "layouts", "search"]

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
    twins: tuple[tuple[PoolPlan, ...], ...] = ()
    """Per plan: its twins folded into its row (`planner.search.twins`: the same layout but for
    cp traded for micro-batch size, at the same step time), in rank order."""

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
    kinds = recompute_rungs(job)
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
                    for rung, zero, ov in itertools.product(kinds, ZERO_STAGES, overlaps):
                        base = pool_layout(
                            job,
                            tp,
                            cp,
                            pp=pp,
                            dp=dp,
                            ep=ep,
                            tp_comm_overlap=ov,
                            micro_batch_size=mbs,
                            zero_stage=zero,
                        )
                        out.append(rung.on(base))
    return out


def search(
    job: Job,
    headroom_pct: float,
    objective: str = "throughput",
    top: int = 5,
    progress: Callable[[str], None] | None = None,
) -> PoolSearch:
    """Solve the layouts' splits, most promising first, and rank what fits. A layout whose
    bound (`_by_bound`) is no better than the rank of the top-th row found (twins folded,
    `row_cut`) is not solved: by step time, the step; by cost, `pool_costs.cost_step_s`, $ per
    token with failures over a constant of the job, never below the step, so a bound on the
    step bounds it too. Fits: the GPUs' memory and every pool's host, each split kept within
    both (`plan_split`, `pool_host`), so only plans that fit both form the cut."""
    rank = ranking(job, objective)
    todo = layouts(job)
    # bounded on the time lines alone; the memory lines only for the layouts solved
    recomputed = Recomputed()  # the none and selective layouts' samples, every layer recomputed
    refused_host: list[Layout] = []  # no split fits the hosts (`pool_host.layer_caps`)
    bounded = _by_bound(job, todo, recomputed, refused_host)
    plans: list[PoolPlan] = []
    over: list[PoolPlan] = []  # fit the GPUs, over a pool's host (`plan_split`)
    solved = 0
    # splits that only CP-SAT solves (recompute may beat none) wait for the others' plans, by
    # their memory-aware bound, so that the top-th best step may spare them (and OR-Tools)
    deferred: list[tuple[float, int, Layout, PoolSplitProblem, TailFloor]] = []
    for i, (lay, times, tails, bound) in enumerate(bounded):
        if progress is not None and i % 20 == 0:
            progress(f"pools: layout {i + 1} of {len(todo)}")
        cut = row_cut(plans, top, rank)
        if cut is not None and bound >= cut:
            break  # sorted by the bound: no later layout can enter the top
        p = problem(job, lay, headroom_pct, lay.recompute == "none", times, recomputed)
        if needs_solver(p):
            least = split_bound(p, tails)
            if least is not None:  # None: no block recompute count fits it
                deferred.append((least * 1e-6, i, lay, p, tails))
            continue
        solved += 1
        plan = plan_split(job, lay, headroom_pct, p=p, cutoff_s=cut, over=over, tails=tails)
        if plan is not None and not needless(plan, headroom_pct):
            plans.append(plan)
    for bound, _, lay, p, tails in sorted(deferred, key=lambda d: d[:2]):
        cut = row_cut(plans, top, rank)
        if cut is not None and bound >= cut:
            break  # sorted by the bound
        solved += 1
        plan = plan_split(job, lay, headroom_pct, p=p, cutoff_s=cut, over=over, tails=tails)
        if plan is not None and not needless(plan, headroom_pct):
            plans.append(plan)

    layouts_seen = len(todo)
    data, best_pipeline = None, None
    if job.pools_data_parallel:  # the replicas across the pools too (planner.search.pool_data)
        known = [rank(r.candidate) for r in fold(_ranked(plans, rank))]
        data = pool_data.search(job, headroom_pct, top, known, rank)
        layouts_seen += data.layouts
        solved += data.scored
        best_pipeline = min(plans, key=lambda q: q.performance.step_time_s, default=None)
        plans += data.plans
        over += data.over

    near, refused = (None, None) if plans else closest(job, headroom_pct, todo)
    host_over = None if plans else _host_over(job, over, refused_host)
    rows = fold(_ranked(plans, rank))[:top]
    return PoolSearch(
        tuple(r.candidate for r in rows),
        solved,
        layouts_seen,
        near,
        best_pipeline=best_pipeline,
        data=data,
        refused=refused,
        host_over=host_over,
        twins=tuple(r.equivalents for r in rows),
    )


def _host_over(job: Job, over: list[PoolPlan], refused: list[Layout]) -> str | None:
    """Why nothing fits where it is the hosts: the fastest plan that fits the GPUs, its binding
    pool's host; else the first layout (least bound) that no split fits the hosts, with the
    smallest host among its pools (None: neither)."""
    if over:
        worst = min(over, key=lambda q: q.step_time)
        h = host_memory.estimate(worst.job, worst.layout)
        return (
            f"{worst.layout.describe()} holds {h.total / GIB:.2f} GiB a GPU on pool "
            f"{h.pool!r} (of its host's {h.capacity / GIB:.2f} GiB usable)"
        )
    if not refused:
        return None
    k = min(range(len(job.pools)), key=lambda k: usable(job, k))
    return (
        f"{refused[0].describe()}, whose every split pins more host memory (the offloaded "
        f"optimizer, the checkpoint saves' staging) than a pool's host holds (pool "
        f"{job.pools[k].name!r}: {usable(job, k) / GIB:.2f} GiB usable a GPU)"
    )


def row_cut(
    plans: list[PoolPlan], top: int, rank: Callable[[PoolPlan], float] | None = None
) -> float | None:
    """The rank (`ranking`; the step by default) of the top-th row of `plans` ranked and their
    twins folded (`planner.search.twins.fold`, as `top_k` cuts with `fold_twins`), None while
    fewer: a layout whose bound is at least this holds nothing of the top rows (a twin of a row
    joins it)."""
    rank = rank or _step
    rows = fold(_ranked(plans, rank))
    return rank(rows[top - 1].candidate) if len(rows) >= top else None


def _step(p: PoolPlan) -> float:
    return p.performance.step_time_s


def _ranked(plans: list[PoolPlan], rank: Callable[[PoolPlan], float]) -> list[PoolPlan]:
    """`plans` by `rank`, then as `top_k.rank_key` (step, `simplicity`) breaks ties."""
    return sorted(plans, key=lambda q: (rank(q), *rank_key(q)))


def ranking(job: Job, objective: str) -> Callable[[PoolPlan], float]:
    """What the search ranks a plan by, in seconds no less than its step: the step, or for the
    cost objective `pool_costs.cost_step_s` ($ per token with failures, the figure the plans
    print, over a constant of the job), each plan's computed once."""
    if objective != "cost":
        return _step
    least = least_wall_per_work(job)
    seen: dict[int, tuple[PoolPlan, float]] = {}

    def rank(p: PoolPlan) -> float:
        if id(p) not in seen:  # the plan kept with its rank, so that its id is not reused
            seen[id(p)] = (p, cost_step_s(p.job, p.layout, p.performance, least))
        return seen[id(p)][1]

    return rank


def _by_bound(
    job: Job, todo: list[Layout], recomputed: Recomputed, refused: list[Layout]
) -> Iterator[tuple[Layout, TimeLines, TailFloor, float]]:
    """The layouts with their time lines, tail floor and bound, in order of the bound (then of
    `todo`): `lower_bound_s`, or where the plan offloads to the hosts the larger
    `capped_bound_s` (the split within each pool's host: `pools.host_caps`), each a bound of
    the exact step of every split (`pool_step_bound`) with its tail (`pool_tails.tail_floor`);
    a layout no split of which fits the hosts goes to `refused` instead. Each layout's bounds
    are computed only when it may come next: queued first on `lower_bound_s` of
    `pools.floor_lines` without the simplex (`tight` off), again with it once it comes first,
    again on `lower_bound_s` of its time lines once that comes first, and on the capped bound
    once that comes first, each time the larger of the bounds so far (each bounds the same
    steps), so in the order of a sort by the last, without the simplex or the lines of the
    layouts the search never reaches (the first queueing without the tail, too). A stage's
    time per micro-batch does not read the ZeRO stage (`stage_time._FIXED`): one set of lines
    (and of floor lines) serves a layout's ZeRO stages; its tail does, so each layout has its
    own tail floor."""
    plains = [lay.with_(zero_stage=ZERO_STAGES[0]) for lay in todo]
    least: dict[Layout, TimeLines | None] = {}  # floor lines
    floors: dict[tuple[int, bool], float] = {}
    lines: dict[Layout, TimeLines] = {}
    tails: dict[int, TailFloor] = {}
    queue: list[tuple[float, int, int]] = []  # (bound, place, what the bound is: 0 .. 3)
    caps = [host_caps(job, lay) for lay in todo]

    def tail(i: int) -> TailFloor:
        if i not in tails:
            tails[i] = tail_floor(job, todo[i])
        return tails[i]

    def floor(i: int, tight: bool) -> float:
        """The floor lines' bound; with `tight`, with the simplex and the tail."""
        if (i, tight) not in floors:
            if plains[i] not in least:
                least[plains[i]] = floor_lines(job, plains[i])
            low = least[plains[i]]
            bound = 0.0 if low is None else lower_bound_s(low, tight, tail(i) if tight else NONE)
            floors[i, tight] = bound * (1 - 1e-9)
        return floors[i, tight]

    for i, plain in enumerate(plains):
        if not caps_allow(caps[i], pool_stages(job, plain), job.arch.num_layers):
            refused.append(todo[i])  # some pool's host holds too few layers in every order
            continue
        queue.append((floor(i, False), i, 0))
    heapq.heapify(queue)
    while queue:
        bound, i, stage = heapq.heappop(queue)
        plain = plains[i]
        if stage == 3:
            yield todo[i], lines[plain], tail(i), bound
            continue
        if stage == 0:
            heapq.heappush(queue, (max(bound, floor(i, True)), i, 1))
            continue
        if stage == 1:
            if plain not in lines:
                lines[plain] = time_lines(job, plain, recomputed)
            heapq.heappush(queue, (max(bound, lower_bound_s(lines[plain], True, tail(i))), i, 2))
            continue
        capped = capped_bound_s(lines[plain], caps[i], tail(i)) if caps[i] else bound
        if capped is None:
            refused.append(todo[i])
        else:
            heapq.heappush(queue, (max(bound, capped), i, 3))
