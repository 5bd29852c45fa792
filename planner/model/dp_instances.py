"""Megatron-LM's --num-distributed-optimizer-instances N > 1 in the step time
(`Job.optimizer_instances`): the data-parallel traffic of a stage split between the ranks of one
instance and the N instances, each group on the link tier it sits on.

Groups (Megatron-LM d98e8a64 parallel_state.py:927-1011): instance i of a dense dp x cp group is
its i-th consecutive slice of dp x cp / N ranks (`intra_partial_dp_ranks_with_cp =
ranks_with_cp[i * size : (i + 1) * size]`), so an instance is tp apart like the whole group
(`dp_sync.data_parallel_groups`) and, small enough, sits inside one NVLink node; the expert
group's instances likewise (create_hierarchical_groups level 0, :378-433, :1474-1496). The group
across instances is the expert one's level 1 (the dense parameters share it:
get_inter_distributed_optimizer_instance_group, :2457-2467): N ranks, one per instance, an
instance's span apart (etp x ep x expert_dp / N = tp x dp x cp / N ranks), so across nodes.

ZeRO 1 (the distributed optimizer, `distributed_optimizer`): per DDP bucket, the reduce-scatter
over the instance and then the all-reduce of its shard across the instances, both on one
communication stream per bucket list, after each other, under the backward as far as
--overlap-grad-reduce allows (param_and_grad_buffer.py:676-762, distributed_data_parallel.py:
357-367); the parameter all-gather over the instance only (:505-524). Buckets of the whole dp x
cp group's size (training.py:2189, `dp_buckets.bucket_params`). The same collectives as the pools'
data parallelism (`planner.model.pools`), with the instance link in place of the pools' one:
`bucket_traffic` is their common arithmetic.

ZeRO 2 / 3 (Megatron-FSDP's hybrid FSDP, `fsdp`): every unit's all-gathers and reduce-scatters of
every micro-batch run over the instance (DP-Shard, mcore_fsdp_adapter.py:346-432); only at the
last micro-batch each unit's reduced shard is also all-reduced across the instances (no_shard),
or reduce-scattered there (--outer-dp-sharding-strategy optim) (megatron_fsdp.py:776-787). The
two run on streams of their own: the instance's reduce-scatter on the reduce-scatter stream
(megatron_fsdp.py:406-411; param_and_grad_buffer.py:4037-4045), the reduction across the
instances on `outer_fsdp_group_grad_reduce_stream` (:3849-3851), which waits for the
reduce-scatter stream as it stands when the unit's reduction is issued (:4135-4139) and nothing
else; the queue waits only on the outer stream's events, its capacity at least 1e9 elements
(megatron_fsdp.py:420-443; param_and_grad_buffer.py:3915-3918, :3942-3944), so nothing holds
the next unit's reduce-scatter back. Under optim each unit's shard is first all-gathered across the
instances while microbatch_count is 0, the first micro-batch's forward and backward
(megatron_fsdp.py:482-490, counted up at :905, reset after the step's sync at :1406), on
`outer_fsdp_group_param_gather_stream`, which waits for the compute stream only; the
instance's gather of that unit waits for it (param_and_grad_buffer.py:4540-4568), the next
unit's gather across the instances does not wait for this one's over the instance. Each unit's
collectives thus run as a pipeline over two links: where the instance sits inside one NVLink
domain and the group across them one rank a domain (`disjoint_links`) a unit's traffic over
the instance runs beside another unit's across the instances, at the pace of the slower link
(`two_links`); where both cross the same NICs they share them and add. Between the first and
the last micro-batch nothing crosses the instances (under no_shard only the last one's
reductions do).
"""

from __future__ import annotations

import math

from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import dp_buckets, dp_sync
from planner.model.comms import Group, all_gather, all_reduce, place, reduce_scatter
from planner.model.interleaved_sync import RankChunks, chunk_sync
from planner.model.shard import BF16

Groups = tuple[Group, Group, Group]
"""(dense instance group, expert instance group, the group across instances)."""


def applies(job: Job, lay: Layout) -> bool:
    """Whether the stage's sync runs over several optimizer instances: Megatron-LM with a
    distributed optimizer or Megatron-FSDP (ZeRO >= 1; at ZeRO 0 the flag is inert, emit/common
    `optimizer_instances`) and N > 1, not the pools' own instances (`Layout.dp_pools`)."""
    return (
        job.framework == "megatron"
        and job.optimizer_instances > 1
        and lay.zero_stage >= 1
        and lay.dp_pools <= 1
    )


def instance_groups(cluster: ClusterSpec, lay: Layout, n: int) -> Groups:
    """The dense and expert groups of one of `n` instances and the group across them, placed
    (module docstring). Under `use_tp_pp_dp_mapping` the data-parallel ranks are pp times
    further apart, as `dp_sync.data_parallel_groups` places them."""
    pp = lay.pp if lay.use_tp_pp_dp_mapping and lay.pp > 1 else 1
    e_stride = lay.expert_tp * lay.ep * pp
    e_size = max(lay.expert_dp // n, 1)
    dense = place(cluster, lay.tp * pp, max(lay.dense_dp // n, 1))
    return dense, place(cluster, e_stride, e_size), place(cluster, e_stride * e_size, n)


def bucket_traffic(
    intra: Group, inter: Group, grad: float, param: float, buckets: int
) -> tuple[float, float, float]:
    """(gradient seconds, parameter all-gather seconds, of the gradient seconds those across
    the instances) of `buckets` buckets of `grad` gradient and `param` parameter bytes in all:
    per bucket the reduce-scatter over the instance and the all-reduce of its 1 / intra.size
    shard across the instances, and the instance's all-gather."""
    one = grad / buckets
    across = buckets * all_reduce(one / intra.size, inter)
    red = buckets * reduce_scatter(one, intra) + across
    return red, buckets * all_gather(param / buckets, intra), across


def data_parallel(
    job: Job,
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
    """(exposed, hidden) seconds per step of one stage's data-parallel traffic over
    `job.optimizer_instances` instances; the arguments as `dp_sync.data_parallel`'s."""
    n = job.optimizer_instances
    groups = instance_groups(job.cluster, lay, n)
    grads = dp_buckets.reduced_bytes(job, lay)
    if lay.zero_stage >= 2:
        optim = lay.zero_stage == 3 and job.outer_dp_sharding_strategy == "optim"
        sizes = (grads, param_bytes)
        return fsdp(groups, lay, dense, expert, sizes, fwd, bwd, m, max(layers, 1), optim)
    return distributed_optimizer(
        groups, lay, dense, expert, grads, fwd, bwd, m, layers, param_bytes, own
    )


def distributed_optimizer(
    groups: Groups,
    lay: Layout,
    dense: float,
    expert: float,
    grad_bytes: float,
    fwd: float,
    bwd: float,
    m: int,
    layers: int = 1,
    param_bytes: tuple[float, float] = (BF16, BF16),
    own: RankChunks | None = None,
) -> tuple[float, float]:
    """ZeRO 1 over the instances (module docstring): per kind `bucket_traffic` in
    `dp_sync.windowed`'s windows, every kind keyed on the tier across the instances (each
    kind's all-reduce crosses it: they share its links and one window); under the interleaved
    schedule each chunk's share of it its parameters' (`own`, `dp_sync.chunk_shares`)."""
    bwd = bwd if lay.overlap_grad_reduce else 0.0
    fwd = fwd if lay.overlap_param_gather else 0.0
    *intras, inter = groups
    parts: list[dp_sync.Part] = []
    kinds = zip((dense, expert), intras, param_bytes, strict=True)
    for kind, (n_params, grp, p_bytes) in enumerate(kinds):
        if n_params <= 0 or grp.size * inter.size <= 1:
            continue
        whole = grp.size * inter.size
        per_bucket = dp_buckets.bucket_params(lay, whole, dense + expert, layers)
        buckets = max(1, math.ceil(n_params / per_bucket))
        red, gather, _ = bucket_traffic(
            grp, inter, n_params * grad_bytes, n_params * p_bytes, buckets
        )
        shares = dp_sync.chunk_shares(lay, own, kind)
        parts.append((inter.tier_name, red, gather, red / buckets, gather / buckets, shares))
    chunked = chunk_sync(bwd, lay, m, own.rank if own else 0)
    return dp_sync.windowed(parts, fwd, bwd, chunked)


def disjoint_links(intras: tuple[Group, Group], inter: Group) -> bool:
    """Whether the instance's collectives and those across the instances run on links of their
    own: every instance group (and every other split of its kind, `Group.others`) inside one
    innermost domain, so over NVLink only, and the group across the instances one rank a
    domain, so over the NICs only. Otherwise both cross the NICs and share them."""
    if inter.per_domain != 1 or inter.domains <= 1:
        return False
    return all(g.domains == 1 for grp in intras for g in (grp, *grp.others))


def two_links(intra: float, inter: float, window: float, units: int, apart: bool) -> float:
    """Seconds that show of one pass over `units` FSDP units whose collectives take `intra`
    seconds each over the instance and `inter` across the instances, one after the other for a
    unit (a reduce-scatter, then its shard's reduction; a gather across, then over the
    instance), under `window` seconds of each unit's compute. On links of their own (`apart`)
    they pipeline with the compute as a three-stage flow shop of identical units: the first
    unit's (the last one's) whole chain shows, each later unit max(intra, inter, window) less
    its window; on a shared link they add (`dp_sync.unit_pipeline` of the sum)."""
    if not apart:
        return dp_sync.unit_pipeline(intra + inter, window, units)
    if units <= 0 or intra + inter <= 0:
        return 0.0
    return intra + inter + (units - 1) * max(max(intra, inter) - window, 0.0)


def fsdp(
    groups: Groups,
    lay: Layout,
    dense: float,
    expert: float,
    sizes: tuple[float, tuple[float, float]],
    fwd: float,
    bwd: float,
    m: int,
    u: int,
    optim: bool = False,
) -> tuple[float, float]:
    """Megatron-FSDP's ZeRO 2 / 3 over the instances (module docstring), `u` units: (exposed,
    hidden) seconds per step. Each micro-batch's unit pipeline as `dp_sync`'s ZeRO 2 / 3 over
    the instance's groups (`dp_sync.unit_collectives`, `dp_sync.unit_pipeline`), the last
    micro-batch's backward with each unit's reduction across the instances after its
    reduce-scatter, and under `optim` the first micro-batch's gathers (forward and backward)
    with each unit's gather across the instances before its gather over the instance, both
    `two_links` pipelines. Hidden: the seconds beside compute, at most the micro-batches'
    compute (`fwd` and `bwd` each; collectives beside each other on links of their own are
    neither shown nor under compute)."""
    *intras, inter = groups
    pair = (intras[0], intras[1])
    ag, rs, _ = dp_sync.unit_collectives(pair, dense, expert, sizes, u)
    grad_bytes, param_bytes = sizes
    o_red = o_gat = 0.0  # one unit's reduction and gather across the instances
    for n_params, grp, p_bytes in zip((dense, expert), intras, param_bytes, strict=True):
        if n_params <= 0:
            continue
        shard = n_params / u / grp.size  # the unit's shard on one rank of the instance
        if optim:
            o_red += reduce_scatter(shard * grad_bytes, inter)
            o_gat += all_gather(shard * p_bytes, inter)
        else:
            o_red += all_reduce(shard * grad_bytes, inter)
    f, b = fwd / u, bwd / u
    pipe = dp_sync.unit_pipeline
    apart = disjoint_links(pair, inter)

    def pipe2(intra: float, across: float, window: float) -> float:
        return two_links(intra, across, window, u, apart)

    if lay.zero_stage == 2:  # the weights stay whole: one gather a step, under the forward
        total = u * (m * rs + o_red + ag)
        shown = (m - 1) * pipe(rs, b, u) + pipe2(rs, o_red, b) + pipe(ag, f, u)
    else:

        def one(gat: float, red: float) -> float:  # one micro-batch's forward and backward
            return pipe2(ag, gat, f) + pipe2(ag + rs, gat + red, b)

        total = u * (m * (2 * ag + rs) + 2 * o_gat + o_red)
        if m <= 1:
            shown = one(o_gat, o_red)
        else:
            shown = one(o_gat, 0.0) + one(0.0, o_red) + (m - 2) * one(0.0, 0.0)
    hidden = min(max(total - shown, 0.0), m * (fwd + bwd))  # rounding: not -1e-16
    return shown, hidden
