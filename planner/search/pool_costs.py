"""What a plan over heterogeneous pools costs beyond its step time's total: the slow link's part of
the step (`slow_link`: the pipeline's crossings, or the gradient all-reduces between replicas that
span the pools, each against the same plan with a link as fast as the first pool's own) and its
price (`price_per_hour`, `usd_per_million_tokens`). `planner.search.pools` finds the plans."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, fp32, performance, pools, stage_params
from planner.model.schedule import layer_count


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


def price_per_hour(job: Job) -> float | None:
    """$ per hour of every GPU of the job (None when a pool's GPU has no price)."""
    total = 0.0
    for p in job.pools:
        if p.price is None:
            return None
        total += p.price * p.cluster.num_gpus
    return total


def usd_per_million_tokens(job: Job, perf: performance.Performance) -> float | None:
    """$ per million trained tokens at the predicted step time (no failures counted)."""
    rate = price_per_hour(job)
    if rate is None:
        return None
    return rate / 3600 * perf.step_time_s / job.tokens_per_step * 1e6
