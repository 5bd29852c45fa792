"""Heterogeneous pools in the model (issue 25): which pool each pipeline rank runs on, the job as
each pool sees it, and the point-to-point hops between stages.

Megatron's rank order is tp-cp-ep-dp-pp: pipeline rank r holds the global ranks
[r s, (r + 1) s), s = tp x cp x dp GPUs, so TP, CP, EP and DP groups never leave a stage. Pools are
listed in pipeline order and pool k hosts a contiguous block of n_k = num_gpus_k / s pipeline ranks
(`rank_pools`): the slow link between pools is crossed only by the pipeline's point-to-point
traffic, once per pool boundary and direction. Each rank's memory is checked against its own
pool's GPU and its layers timed at that GPU's rates (`rank_jobs`: the job with `cluster` set to
the rank's pool, so every existing per-GPU formula applies unchanged).

A hop from rank r to a neighbour in the same pool runs on that pool's link between stages
(`comms.p2p_link` over its n_k stages); across pools on `Job.between_pools` at the scale-out bus
efficiency.
"""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms
from planner.model.job_memo import JobMemo

_POOL_JOBS: JobMemo[int, Job] = JobMemo()
"""The job of each pool, per job (one object per pool: the layer-time memos key on identity)."""


def stage_gpus(layout: Layout) -> int:
    """GPUs of one pipeline stage: tp x cp x dp (EP folds inside them)."""
    return layout.tp * layout.cp * layout.dp


def pool_problem(job: Job, layout: Layout) -> str | None:
    """Why a layout cannot run on the job's pools (None when it can): every pool must hold whole
    stages of tp x cp x dp GPUs, and together exactly pp of them."""
    if not job.pools:
        return None
    s = stage_gpus(layout)
    for k, pool in enumerate(job.pools):
        n = pool.cluster.num_gpus
        if n % s:
            return (
                f"pool {pool.name!r} (cluster.pools[{k}]) has {n} GPUs, not a multiple of one "
                f"pipeline stage's tp x cp x dp = {layout.tp} x {layout.cp} x {layout.dp} = {s}"
            )
    stages = sum(p.cluster.num_gpus // s for p in job.pools)
    if stages != layout.pp:
        return f"the pools hold {stages} pipeline stages of {s} GPUs but pp is {layout.pp}"
    return None


def pool_stages(job: Job, layout: Layout) -> tuple[int, ...]:
    """Pipeline ranks each pool hosts, in pipeline order."""
    s = stage_gpus(layout)
    return tuple(p.cluster.num_gpus // s for p in job.pools)


def rank_pools(job: Job, layout: Layout) -> tuple[int, ...]:
    """The pool index of each pipeline rank: contiguous blocks in the pools' order."""
    return tuple(k for k, n in enumerate(pool_stages(job, layout)) for _ in range(n))


def pool_job(job: Job, k: int) -> Job:
    """The job as pool k sees it: its GPU, count, memory and tiers (no pools)."""
    memo = _POOL_JOBS.of(job)
    if k not in memo:
        memo[k] = replace(job, cluster=job.pools[k].cluster, pools=(), between_pools=None)
    return memo[k]


def rank_jobs(job: Job, layout: Layout) -> tuple[Job, ...]:
    """The job of each pipeline rank ((): one pool, every rank runs `job`)."""
    if not job.pools:
        return ()
    return tuple(pool_job(job, k) for k in rank_pools(job, layout))


def rank_hops(job: Job, layout: Layout, size_bytes: float) -> tuple[tuple[float, float], ...]:
    """Per pipeline rank, (hop to the previous rank, hop to the next rank) in seconds for one
    message of `size_bytes`; a rank without that neighbour counts its own pool's hop (as the
    uniform model charges 2 hops on every stage)."""
    pools = rank_pools(job, layout)
    counts = pool_stages(job, layout)
    stride = stage_gpus(layout)
    inner = [
        comms.p2p(size_bytes, comms.p2p_link(p.cluster, stride, max(n, 2)))
        for p, n in zip(job.pools, counts, strict=True)
    ]
    assert job.between_pools is not None
    wan = comms.p2p(size_bytes, comms.achieved(job.between_pools, False))
    out = []
    for r, k in enumerate(pools):
        prev = wan if r > 0 and pools[r - 1] != k else inner[k]
        nxt = wan if r + 1 < len(pools) and pools[r + 1] != k else inner[k]
        out.append((prev, nxt))
    return tuple(out)


def without_slow_link(job: Job) -> Job:
    """The same job with the pools joined by the first pool's own outermost tier: what the
    step would take if the link between pools were as fast as inside a pool."""
    assert job.between_pools is not None
    fast = job.pools[0].cluster.tiers[-1]
    return replace(job, between_pools=fast.model_copy(update={"span_gpus": None}))
