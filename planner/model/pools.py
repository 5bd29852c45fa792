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

Data parallelism across pools (`Layout.dp_pools` = P, the number of pools; allowed by
`[cluster.between_pools] allow_data_parallel`): each pool runs dp / P whole pipeline replicas of
the same layout, as Megatron's partial distributed optimizer lays them out
(`--num-distributed-optimizer-instances P`, Megatron-LM d98e8a64 parallel_state.py: instance i is
the i-th consecutive slice of every data-parallel group, param_and_grad_buffer.py
`start_grad_sync`): with the pools' nodes ranked so that pool k holds data-parallel ranks
[k dp / P, (k + 1) dp / P) of every stage (`planner.emit.pools`), an instance is a pool. Inside
it everything is the pool's own job with dp / P (`replica_views`): its stages, their sends, the
optimizer sharded over the instance, the reduce-scatter of each gradient bucket and the parameter
all-gather over the instance's ranks. Only the all-reduce of each bucket's reduce-scatter shard
between the P instances crosses the link (`data_parallel`): one group of P ranks, one per pool,
per shard, every GPU on its own share of the link; after each bucket's reduce-scatter on the same
communication stream, hidden under the last micro-batch's backward (under the interleaved schedule
each chunk's buckets launch whole, `interleaved_sync.chunk_sync`) as far as `overlap_grad_reduce`
allows. The pools run
in lock-step: the slowest pool's replica sets the step (`planner.model.cost`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, dp_buckets, dp_instances, dp_sync
from planner.model.interleaved_sync import RankChunks
from planner.model.job_memo import JobMemo
from planner.model.shard import BF16

_POOL_JOBS: JobMemo[int, Job] = JobMemo()
"""The job of each pool, per job (one object per pool: the layer-time memos key on identity)."""
_REPLICA_JOBS: JobMemo[int, Job] = JobMemo()
"""The job of each pool's replicas (data parallelism across pools), per job; equal pools share
one object."""


def stage_gpus(layout: Layout) -> int:
    """GPUs of one pipeline stage: tp x cp x dp (EP folds inside them)."""
    return layout.tp * layout.cp * layout.dp


def pool_problem(job: Job, layout: Layout) -> str | None:
    """Why a layout cannot run on the job's pools (None when it can): every pool must hold whole
    stages of tp x cp x dp GPUs, and together exactly pp of them; or, with the data-parallel
    replicas across the pools, `replica_problem`."""
    if layout.dp_pools > 1:
        return replica_problem(job, layout)
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
    message of `size_bytes`; a rank without that neighbour holds its own pool's hop there, which
    1F1B's exchanges leave out on the first and last ranks (`cost._exchanges`)."""
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


# --- data parallelism across pools (Layout.dp_pools > 1) ---


def replica_gpus(layout: Layout) -> int:
    """GPUs of one pool's share of a pipeline stage: tp x cp x dp / dp_pools (whole nodes)."""
    return layout.tp * layout.cp * layout.dp // layout.dp_pools


def replica_problem(job: Job, layout: Layout) -> str | None:
    """Why the data-parallel replicas cannot span the job's pools (None when they can)."""
    p = layout.dp_pools
    if not job.pools:
        return f"dp_pools = {p} needs cluster.pools"
    if not job.pools_data_parallel:
        return (
            f"dp_pools = {p}: data parallelism across pools needs "
            "[cluster.between_pools] allow_data_parallel = true"
        )
    if p != len(job.pools):
        return f"dp_pools = {p}, but the cluster has {len(job.pools)} pools (one instance each)"
    if job.framework != "megatron":
        return "dp_pools > 1: Megatron-LM's partial distributed optimizer (framework megatron)"
    if layout.zero_stage != 1:
        return (
            f"dp_pools > 1 needs zero_stage 1 (Megatron's distributed optimizer, one instance "
            f"per pool; got {layout.zero_stage})"
        )
    sizes = [q.cluster.num_gpus for q in job.pools]
    if len(set(sizes)) > 1:
        return (
            f"dp_pools > 1: the pools hold {' + '.join(map(str, sizes))} GPUs; Megatron's "
            "distributed-optimizer instances are equal slices of every data-parallel group, so "
            "the pools must be of one size"
        )
    if layout.dp % p:
        return f"dp = {layout.dp} is not a multiple of dp_pools = {p}"
    share = replica_gpus(layout)
    for k, q in enumerate(job.pools):
        node = q.cluster.gpus_per_node
        if share % node:
            return (
                f"pool {q.name!r} (cluster.pools[{k}]): its share of a stage, tp x cp x dp / "
                f"dp_pools = {share} GPUs, is not whole nodes of {node}"
            )
    if share % (layout.expert_tp * layout.ep):
        return (
            f"an expert group (etp x ep = {layout.expert_tp * layout.ep}) would leave a pool's "
            f"share of a stage ({share} GPUs)"
        )
    return None


def replica_views(job: Job, layout: Layout) -> tuple[tuple[Job, Layout], ...]:
    """With the data-parallel replicas across the pools, each pool's replicas as a job and
    layout of their own: the pool's GPUs, dp / dp_pools replicas and their share of the global
    batch, so the same micro-batches per replica (the link between pools kept for
    `data_parallel`); equal pools share one job object. () otherwise."""
    if not job.pools or layout.dp_pools <= 1:
        return ()
    p = layout.dp_pools
    memo = _REPLICA_JOBS.of(job)
    lay = layout.with_(dp=layout.dp // p)
    out = []
    for pool in job.pools:
        twin = next(i for i, q in enumerate(job.pools) if q.cluster == pool.cluster)
        if twin not in memo:
            memo[twin] = replace(
                job,
                cluster=pool.cluster,
                pools=(),
                global_batch_size=job.global_batch_size // p,
                pools_data_parallel=False,
            )
        out.append((memo[twin], lay))
    return tuple(out)


def link_group(job: Job, ranks: int) -> comms.Group:
    """The group of one rank per pool that all-reduces a shard over the link between pools:
    every member on its own share of the link (each GPU's slice of the pool's bandwidth)."""
    assert job.between_pools is not None
    link = comms.achieved(job.between_pools, False)
    return comms.Group(ranks, 1, ranks, link, link, job.between_pools.name)


def data_parallel(
    job: Job,
    groups: tuple[comms.Group, comms.Group],
    lay: Layout,
    dense: float,
    expert: float,
    fwd: float,
    bwd: float,
    m: int,
    layers: int = 1,
    param_bytes: tuple[float, float] = (BF16, BF16),
    own: RankChunks | None = None,
) -> tuple[float, float]:
    """(exposed, hidden) seconds per step of one stage's data-parallel traffic: `dp_sync.
    data_parallel`, or with the replicas across pools (a replica view: `lay.dp_pools` > 1, the
    job's link between pools kept) the partial distributed optimizer's (module docstring), per
    bucket of `dp_buckets.bucket_params` (over the whole dp x cp group) parameters: the instance's
    reduce-scatter and then the P-way all-reduce of its shard over the link, in the backward
    window; the instance's parameter all-gather in the forward window; what exceeds a window
    (with the first bucket's fill, `dp_sync.windowed`) is exposed, and never less than one
    bucket."""
    grads = dp_buckets.reduced_bytes(job, lay)
    if lay.dp_pools <= 1 or job.between_pools is None:
        return dp_sync.data_parallel(
            groups, lay, dense, expert, grads, fwd, bwd, m, layers, param_bytes, own
        )
    # the pools' instances are the distributed optimizer's, the link between pools its group
    # across them: one window, every kind's all-reduce crossing the link
    across = (*groups, link_group(job, lay.dp_pools))
    return dp_instances.distributed_optimizer(
        across, lay, dense, expert, grads, fwd, bwd, m, layers, param_bytes, own
    )


def _link_traffic(
    job: Job, lay: Layout, grp: comms.Group, n_params: float, stage_params: float, layers: int
) -> float:
    """Seconds one parameter kind's buckets spend on the link between pools: per bucket the
    all-reduce of the instance's shard (`dp_instances.bucket_traffic`)."""
    link = link_group(job, lay.dp_pools)
    per_bucket = dp_buckets.bucket_params(lay, grp.size * link.size, stage_params, layers)
    buckets = max(1, math.ceil(n_params / per_bucket))
    grads = n_params * dp_buckets.reduced_bytes(job, lay)
    return dp_instances.bucket_traffic(grp, link, grads, n_params * BF16, buckets)[2]


def link_seconds(job: Job, lay: Layout, dense: float, expert: float, layers: int = 1) -> float:
    """Seconds per step a replica view's stage holding `dense` and `expert` parameters spends
    on the link between pools (the all-reduces of every bucket's shard, hidden or not)."""
    groups = dp_sync.data_parallel_groups(job.cluster, lay)
    return sum(
        _link_traffic(job, lay, grp, n, dense + expert, layers)
        for n, grp in zip((dense, expert), groups, strict=True)
        if n > 0
    )
