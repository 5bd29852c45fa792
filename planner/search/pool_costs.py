"""What a plan over heterogeneous pools costs beyond its step time's total: the slow link's part of
the step (`slow_link`: the pipeline's crossings, or the gradient all-reduces between replicas that
span the pools, each against the same plan with a link as fast as the first pool's own) and its
price (`usd_per_million_tokens`, failures included as everywhere, and `cost_step_s`, what the
cost objective ranks by). `planner.search.pools` finds the plans."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, fp32, performance, pools, stage_params
from planner.model.schedule import layer_count
from planner.ops.assumptions import OpsParams
from planner.ops.operations import operations
from planner.ops.resilience import resilience


@dataclass(frozen=True)
class SlowLink:
    """What the link between pools costs a plan: one message's hop on it, the pool boundaries
    the pipeline crosses, and the step time it adds over a link as fast as the first pool's
    own outermost tier (the exact model run twice). With the data-parallel replicas across the
    pools (`data_parallel_s` not None) the pipeline crosses nothing: the gradient all-reduces
    between the pools' optimizer instances cross, `data_parallel_s` seconds per step on the
    link for the stage that spends the most there, hidden or not."""

    hop_s: float
    crossings: int
    added_s: float
    share: float
    data_parallel_s: float | None = None


def slow_link(job: Job, layout: Layout, perf: performance.Performance) -> SlowLink | None:
    """The slow link's part of a plan's step (None with one pool)."""
    if len(job.pools) < 2 or job.between_pools is None:
        return None
    views = pools.replica_views(job, layout)
    if views:
        return _data_link(job, layout, perf, views)
    if layout.pp < 2:
        return None
    fast = cost.estimate(pools.without_slow_link(job), layout)
    t = layout.micro_batch_size * job.seq_length / layout.cp
    # config.pipeline_dtype, params_dtype: fp32 in fp32 training (`fp32.value_bytes`)
    word = fp32.value_bytes(job)
    size = t * job.arch.hidden_size * word / (layout.tp if layout.sequence_parallel else 1)
    hop = comms.p2p(size, comms.achieved(job.between_pools, False))
    ranks = pools.rank_pools(job, layout)
    crossings = sum(a != b for a, b in itertools.pairwise(ranks))
    added = perf.step_time_s - fast.step_time_s
    return SlowLink(hop, crossings, added, added / perf.step_time_s)


def _data_link(
    job: Job, layout: Layout, perf: performance.Performance, views: tuple[tuple[Job, Layout], ...]
) -> SlowLink:
    """`slow_link` of a plan whose data-parallel replicas span the pools."""
    seconds = 0.0
    for j, lay in dict.fromkeys(views):
        for rank, chunks in enumerate(lay.chunk_layers(j.arch.num_layers)):
            dense, expert = stage_params.stage_params(j, lay, rank, chunks)
            layers = layer_count(chunks)
            seconds = max(seconds, pools.link_seconds(j, lay, dense, expert, layers))
    fast = cost.estimate(pools.without_slow_link(job), layout)
    added = perf.step_time_s - fast.step_time_s
    return SlowLink(0.0, 0, added, added / perf.step_time_s, seconds)


def usd_per_million_tokens(job: Job, layout: Layout, perf: performance.Performance) -> float | None:
    """$ per million trained tokens with checkpoints and failures, the figure explain and scale
    print for the same plan (`Operations.usd_per_million_tokens`: each pool's GPUs at its own
    price, the default operations assumptions, the job's own asynchronous save); None where a
    pool's GPU has no price."""
    return operations(job, perf, None, zero_stage=layout.zero_stage).usd_per_million_tokens


def cost_step_s(job: Job, layout: Layout, perf: performance.Performance, least: float) -> float:
    """The step time a pooled plan's cost ranks by: step / goodput / `least`, where `least` is
    the job's `resilience.least_wall_per_work` (no goodput of the job is above its inverse).
    Every pooled plan of a job runs the same GPUs at the same prices for the same tokens per
    step, so $ per token (`usd_per_million_tokens`; GPU-hours per token without a price) is
    this times a constant of the job, and it is never below the step: a bound on a layout's step
    bounds it too, and the search's cuts stay exact (`pool_search.search`). Goodput depends on
    the layout through the step time (whole-step intervals) and the ZeRO stage (the
    checkpoint's size); `least` is under both."""
    step = perf.step_time_s
    good = resilience(job, step, OpsParams(), zero_stage=layout.zero_stage).goodput
    return max(step, step / good / least)
