"""The pipeline's sends in the pooled search's time lines (`planner.search.pools.time_lines`):
1F1B's blocking exchanges (`cost._exchanges`) cost a rank one hop per pipeline neighbour and
micro-batch. A pool's sample times them as a pipeline of pp ranks on its cluster alone; the
split runs them at its own pool's hop (`planner.model.pools.rank_hops`: its stages' group) and,
across a boundary, at the slow link's, so each pool's line holds its own hop and each crossing
adds that pool's term (`time_boundary`), which may be negative (seed 0 of
tests/search/test_pool_exact_split.random_job, L40S + H200, tp1 pp2 dp2 mbs1: the L40S pool's
own hop 1,186.9 us, the H200's 83.6, the slow link's 648.3)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, dp_sync, fp32, pools


def time_boundary(job: Job, layout: Layout) -> tuple[int, ...]:
    """`pool_bounds.TimeLines.boundary_us`: per pool, microseconds a crossing to another pool
    adds to one of its stages over a neighbour on its own pool (`send_hops`: the slow link's hop
    less the pool's own; < 0 where the pool's own is the slower)."""
    wan, inner, _ = send_hops(job, layout)
    return tuple(round((wan - i) * 1e6) for i in inner)


def neighbours(r: int, pp: int) -> int:
    """Rank r's pipeline neighbours: the exchanges 1F1B's blocking sends cost it per micro-batch
    (`cost._exchanges`: none past the first and last ranks)."""
    return (r > 0) + (r < pp - 1)


def send_hops(job: Job, layout: Layout) -> tuple[float, list[float], list[float]]:
    """Seconds of one activation send (`fp32.pipeline_message_bytes`): on the slow link, inside
    each pool as `pools.rank_hops` times it (its stages' group), and inside each pool's sample
    of `pools.time_lines` (pp ranks on the pool's cluster alone, as `cost.estimate` times a job
    without pools: the pipeline group's stride, `dp_sync.pp_stride`)."""
    size = fp32.pipeline_message_bytes(job, layout)
    assert job.between_pools is not None
    wan = comms.p2p(size, comms.achieved(job.between_pools, False))
    counts, gpus = pools.pool_stages(job, layout), pools.stage_gpus(layout)
    inner = [
        comms.p2p(size, comms.p2p_link(p.cluster, gpus, max(n, 2)))
        for p, n in zip(job.pools, counts, strict=True)
    ]
    stride, pp = dp_sync.pp_stride(layout), layout.pp
    sample = [comms.p2p(size, comms.p2p_link(p.cluster, stride, pp)) for p in job.pools]
    return wan, inner, sample
