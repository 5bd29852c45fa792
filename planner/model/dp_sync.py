"""Data-parallel sync on the collectives of `planner.model.comms`: where a stage's gradient and
parameter traffic goes (`data_parallel_groups`: dense parameters over the dp x cp ranks, expert
parameters over the expert-dp ranks) and how much of it shows beyond its overlap windows
(`data_parallel`): Megatron's DDP buckets for ZeRO 0-1, each its own collective; Megatron-FSDP's
ZeRO 2 and 3 per decoder layer, every micro-batch, the next layer's under the current one's.
Over several distributed-optimizer instances (--num-distributed-optimizer-instances):
`planner.model.dp_instances`, on these windows and unit pipelines.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.model.comms import Group, all_gather, all_reduce, place, reduce_scatter
from planner.model.dp_buckets import bucket_params
from planner.model.interleaved_sync import Chunked, RankChunks, chunk_exposed, chunk_sync
from planner.model.shard import BF16

FSDP_MAX_LIVE_PARAMS: float | None = None
"""Cap on the gathered (live) parameters of a ZeRO-3 implementation, or None for none. Megatron-FSDP
and PyTorch FSDP2 hold the current unit and the prefetched next one whatever their size (None).
DeepSpeed ZeRO-3 caps them at `stage3_max_live_parameters`, 1e9 by default (DeepSpeed
docs/_pages/config-json.md): a unit of more than half of the cap cannot be gathered while the
previous one is live, so its all-gathers hide under nothing. Read at call time; the model of a
DeepSpeed run (the SC21 ZeRO-3 rows, tests/model/test_zero3_sc21.py) sets it."""


def pp_stride(lay: Layout) -> int:
    """Ranks between neighbouring pipeline stages: tp x cp x dp in Megatron's default order
    tp-cp-ep-dp-pp, tp x cp under `use_tp_pp_dp_mapping` (order tp-cp-ep-pp-dp, Megatron-LM
    d98e8a64 initialize.py:395; parallel_state.py RankGenerator: a token's stride is the product
    of the sizes before it)."""
    inner = lay.tp * lay.cp
    return inner if lay.use_tp_pp_dp_mapping else inner * lay.dp


def data_parallel_groups(cluster: ClusterSpec, lay: Layout) -> tuple[Group, Group]:
    """The groups gradients reduce over: dense parameters over dp x cp ranks tp apart, expert
    parameters over expert_dp ranks etp x ep apart (MoE parallel folding). The same for every
    pipeline stage: place them once per layout. Under `use_tp_pp_dp_mapping` the data-parallel
    ranks are pp times further apart: the expert group's etp x ep x pp (its grid has no cp), the
    dense group's cp ranks tp apart inside blocks tp x cp x pp apart, placed at their mean
    spacing tp x pp (exact where one node holds whole blocks; else fewer members per node than
    the cp a node holds)."""
    (dense_stride, dense), (expert_stride, expert) = data_parallel_strides(lay)
    return place(cluster, dense_stride, dense), place(cluster, expert_stride, expert)


def data_parallel_strides(lay: Layout) -> tuple[tuple[int, int], tuple[int, int]]:
    """The dense and expert data-parallel groups' (stride, size) in ranks, as
    `data_parallel_groups` places them."""
    pp = lay.pp if lay.use_tp_pp_dp_mapping and lay.pp > 1 else 1
    return (lay.tp * pp, lay.dense_dp), (lay.expert_tp * lay.ep * pp, lay.expert_dp)


def _per_bucket(
    collective: Callable[[float, Group], float], size: float, n: int, grp: Group
) -> float:
    """n collectives of size/n bytes each: the bandwidth of one of `size`, n times the latency."""
    return n * collective(size / n, grp)


def data_parallel(
    groups: tuple[Group, Group],
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
    """(exposed, hidden) seconds per step of one pipeline stage's data-parallel traffic.

    `groups` are `data_parallel_groups`; `grad_bytes` per gradient element (Job.grad_bytes);
    `dense` / `expert` are the parameters one GPU holds (before ZeRO sharding); `fwd` / `bwd` are
    one micro-batch's forward and backward seconds on the stage, the windows the traffic can hide
    in; `layers` the stage's decoder layers. Without `lay.overlap_grad_reduce` the gradient
    reduction has no window (it starts after the backward), nor without
    `lay.overlap_param_gather` the parameter all-gather; except that Megatron-FSDP turns the
    first on at ZeRO 2 and 3 and the second at ZeRO 3 whatever the command line says
    (Megatron-LM d98e8a64 megatron_fsdp.py:328-333). `param_bytes`: (dense, expert) bytes
    per parameter of the parameter all-gather (ZeRO 1-3), the parameters' dtype: 2 in bf16, 4 in
    fp32 training (`fp32.value_bytes`), 1 for FP8 weights with --fp8-param-gather at ZeRO 1/2
    (param_and_grad_buffer.py d98e8a64: "torch.uint8 for FP8/NVFP4 parameters"). `own`: the
    rank and its model chunks' parameters under the interleaved schedule (None: rank 0, the
    chunks even), each chunk's share of the sync its parameters' (`chunk_shares`).

    ZeRO 0-1 (Megatron's DDP): per bucket of `bucket_params` parameters (--ddp-bucket-size, else
    max(DP_BUCKET_PARAMS, 1M x dp)), a gradient all-reduce (ZeRO 0) or reduce-scatter and
    parameter all-gather (ZeRO 1), hidden behind the last micro-batch's backward and the next
    step's first forward (--overlap-grad-reduce / --overlap-param-gather). Without interleaving
    the buckets become final as the last micro-batch's backward runs (Megatron-LM d98e8a64
    schedules.py:2432-2434, 2459-2461: on the first stage; the others launch once their
    backwards are done, during the drain, which hides at least as much); under the interleaved
    schedule each chunk's buckets launch together during the cooldown (`chunk_sync`), and what
    outlasts the compute is `chunk_exposed`. What exceeds its
    window, plus the first bucket's share of the compute before anything could be sent
    (`windowed`), is exposed, and never less than one bucket. Each bucket is its own collective and
    pays its latency. Dense and expert buckets (MoE) whose groups are bound by the same tier
    share its links and so one window: their seconds add before the window is taken off (with
    both across nodes, the same NICs carry both), and the last bucket of each shows.

    ZeRO 2 (Megatron-FSDP optim_grads): per decoder layer, every micro-batch, the gradient
    reduce-scatter under the next layer's backward, and once a step the parameter all-gather
    (`_fsdp_grads`).

    ZeRO 3 (FSDP): each decoder layer is one unit with its own collectives, every micro-batch: a
    parameter all-gather before its forward and again before its backward, and a gradient
    reduce-scatter after it, each a ring over all the group's ranks (`ring_latency`, paid per
    layer). The prefetch runs one unit ahead (PyTorch FSDP's forward / backward prefetch,
    Megatron-FSDP's next-bucket gather): a unit's all-gather hides only under the previous
    unit's forward, its backward all-gather and the next unit's reduce-scatter under one unit's
    backward, so per unit max(comm - window, 0) shows; the first unit's gather (forward and
    backward) and the last unit's reduce-scatter have nothing to hide under. Where the
    implementation caps the live parameters below two units (FSDP_MAX_LIVE_PARAMS) nothing is
    prefetched: every all-gather shows, and only the reduce-scatters hide.
    """
    made = traffic(groups, lay, dense, expert, grad_bytes, layers, param_bytes, own)
    return shown(made, lay, fwd, bwd, m, layers, own)


def traffic(
    groups: tuple[Group, Group],
    lay: Layout,
    dense: float,
    expert: float,
    grad_bytes: float,
    layers: int = 1,
    param_bytes: tuple[float, float] = (BF16, BF16),
    own: RankChunks | None = None,
) -> Traffic:
    """`data_parallel`'s collectives, which no window and no micro-batch count reads (its
    arguments as there): what `shown` then hides under the windows. It reads of the layout the
    ZeRO stage, the DDP bucket settings and vpp (`bucket_params`, `chunk_shares`)."""
    if lay.zero_stage >= 2:
        sizes = (grad_bytes, param_bytes)
        return unit_collectives(groups, dense, expert, sizes, max(layers, 1)), ()
    parts: list[Part] = []
    kinds = zip((dense, expert), groups, param_bytes, strict=True)
    for kind, (n_params, grp, p_bytes) in enumerate(kinds):
        if n_params <= 0 or grp.size <= 1:
            continue
        per_bucket = bucket_params(lay, grp.size, dense + expert, layers)
        buckets = max(1, math.ceil(n_params / per_bucket))
        bucket = 1.0 / buckets
        if lay.zero_stage == 0:
            red, gather = _per_bucket(all_reduce, n_params * grad_bytes, buckets, grp), 0.0
        else:
            red = _per_bucket(reduce_scatter, n_params * grad_bytes, buckets, grp)
            gather = _per_bucket(all_gather, n_params * p_bytes, buckets, grp)
        shares = chunk_shares(lay, own, kind)
        parts.append((grp.tier_name, red, gather, red * bucket, gather * bucket, shares))
    return None, tiers(parts, lay.vpp if lay.vpp > 1 else None)


def shown(
    made: Traffic,
    lay: Layout,
    fwd: float,
    bwd: float,
    m: int,
    layers: int = 1,
    own: RankChunks | None = None,
) -> tuple[float, float]:
    """`data_parallel`'s (exposed, hidden) seconds of the stage's `traffic` under its windows
    (the other arguments as `data_parallel`'s)."""
    bwd = bwd if lay.overlap_grad_reduce or lay.zero_stage >= 2 else 0.0
    fwd = fwd if lay.overlap_param_gather or lay.zero_stage == 3 else 0.0
    units, sums = made
    if units is not None:
        ag, rs, live = units
        if lay.zero_stage == 2:
            return _fsdp_grads(ag, rs, fwd, bwd, m, max(layers, 1))
        return _fsdp(ag, rs, live, fwd, bwd, m, max(layers, 1))
    return tiers_shown(sums, fwd, bwd, chunk_sync(bwd, lay, m, own.rank if own else 0))


def chunk_shares(lay: Layout, own: RankChunks | None, kind: int) -> tuple[float, ...]:
    """Each model chunk's fraction of a stage's gradient sync of parameter `kind` (0 dense, 1
    expert): its share of the rank's parameters (`own`, each chunk its own DDP buckets), even
    where `own` is None; () without interleaving (one chunk)."""
    if lay.vpp <= 1:
        return ()
    if own is None:
        return (1.0 / lay.vpp,) * lay.vpp
    return own.fractions(kind)


def _fsdp(
    ag: float, rs: float, live: float, fwd: float, bwd: float, m: int, u: int
) -> tuple[float, float]:
    """`data_parallel`'s ZeRO 3 over `u` units (decoder layers): (exposed, hidden) seconds per
    step. A unit's dense and expert parameters (MoE) are gathered and their gradients
    reduce-scattered over their own groups, but one after the other: FSDP issues every unit's
    all-gathers on one stream and its reduce-scatters on another (PyTorch FSDP2's comm context,
    shared by all the parameter groups under its root; Megatron-FSDP likewise), so their seconds
    add before a unit's window comes off, whichever tiers bound the two groups: (`ag`, `rs`,
    `live`) are one unit's `unit_collectives`."""
    if live == 0:
        return 0.0, 0.0
    f, b = fwd / u, bwd / u
    cap = FSDP_MAX_LIVE_PARAMS
    if cap is None or 2 * live <= cap:
        shown_f = unit_pipeline(ag, f, u)
        shown_b = unit_pipeline(ag + rs, b, u)
    else:
        shown_f = u * ag
        shown_b = u * ag + rs + (u - 1) * max(rs - b, 0.0)
    hidden = max(u * (2 * ag + rs) - shown_f - shown_b, 0.0)  # rounding: not -1e-16
    return m * (shown_f + shown_b), m * hidden


def _fsdp_grads(
    ag: float, rs: float, fwd: float, bwd: float, m: int, u: int
) -> tuple[float, float]:
    """`data_parallel`'s ZeRO 2 (Megatron-FSDP optim_grads) over `u` units (decoder layers):
    (exposed, hidden) seconds per step. The weights stay whole, so no unit is gathered per
    micro-batch; each unit's gradients are reduce-scattered after its backward in every
    micro-batch (Megatron-LM d98e8a64 megatron_fsdp.py:761-787, grad_reduce_every_bprop for
    optim_grads), under the next unit's backward (`unit_pipeline`, the last unit's shows), and
    once a step the updated shards are all-gathered back into the whole weights, unit by unit
    under the first micro-batch's forward (`fwd` 0: after nothing, all shown). `ag` and `rs` as
    `_fsdp`'s; dense and expert collectives add as there (one stream each)."""
    shown_b = m * unit_pipeline(rs, bwd / u, u)
    shown_f = unit_pipeline(ag, fwd / u, u)
    hidden = max(u * (m * rs + ag) - shown_b - shown_f, 0.0)  # rounding: not -1e-16
    return shown_b + shown_f, hidden


def unit_collectives(
    groups: tuple[Group, Group],
    dense: float,
    expert: float,
    sizes: tuple[float, tuple[float, float]],
    u: int,
) -> tuple[float, float, float]:
    """One unit's (all-gather seconds, reduce-scatter seconds, parameters) over `u` units: its
    dense and expert parameters over their own groups, their seconds added (one stream each,
    `_fsdp`); a group of one rank moves nothing."""
    grad_bytes, param_bytes = sizes
    ag = rs = live = 0.0
    for n_params, grp, p_bytes in zip((dense, expert), groups, param_bytes, strict=True):
        if n_params <= 0 or grp.size <= 1:
            continue
        ag += all_gather(n_params / u * p_bytes, grp)
        rs += reduce_scatter(n_params / u * grad_bytes, grp)
        live += n_params / u
    return ag, rs, live


def unit_pipeline(per_unit: float, window: float, units: int) -> float:
    """Seconds that show of one pass (a forward or a backward) over `units` FSDP units whose
    collectives take `per_unit` seconds each (a unit's all-gather, or in a backward the next
    unit's all-gather and the previous one's reduce-scatter, which FSDP issues on their own
    streams and so add), prefetched one unit ahead under `window` seconds of each unit's compute:
    the first unit's gather (a backward's last reduce-scatter) has nothing to hide under, each
    later unit shows max(per_unit - window, 0). Each unit's collective is its own NCCL call and
    pays its ring latency. The physics of Megatron-FSDP's and PyTorch FSDP2's one-unit-ahead
    prefetch alike (`_fsdp`, `planner.model.fsdp2.data_parallel_time`)."""
    if units <= 0 or per_unit <= 0:
        return 0.0
    return per_unit + (units - 1) * max(per_unit - window, 0.0)


Part = tuple[str, float, float, float, float, tuple[float, ...]]
"""One parameter kind's bucketed sync: (the tier that bounds its group, gradient seconds,
parameter all-gather seconds, those of its last bucket of each, and under the interleaved
schedule each model chunk's fraction of its gradient seconds, `chunk_shares`; () otherwise)."""


def windowed(
    parts: Iterable[Part],
    fwd: float,
    bwd: float,
    chunked: Chunked | None = None,
) -> tuple[float, float]:
    """(exposed, hidden) seconds of bucketed syncs whose gradients hide under the last
    micro-batch's backward, `bwd` seconds, and parameter gathers under a forward window of
    `fwd` seconds. Kinds bound by the same tier share its links and so one window (their
    seconds add before the window comes off); the last bucket of each kind shows whatever the
    window.

    A bucket's collective cannot start before its gradients exist: n buckets of r seconds,
    produced one every c seconds of backward, run as a two-stage pipeline that ends
    c + (n - 1) max(c, r) + r after the backward starts, so it shows n r - (n - 1) c beyond the
    backward's n c where the links are the slower stage (the sync less the window plus the
    first bucket's c: nothing was ready to send until then), and r (the last bucket) where
    the backward is. c is the tier's first bucket's share (the smallest of its kinds') of the
    backward. The parameter all-gathers mirror it: the first bucket's gather runs before any
    forward compute can use it, each later one under the previous bucket's forward.
    `chunked`: the interleaved schedule's whole-chunk launches (`chunk_sync`), the gradients'
    exposed part `chunk_exposed` of each chunk's seconds on the tier (its kinds' seconds by
    their `Part` chunk fractions, added) instead."""
    return tiers_shown(tiers(parts, None if chunked is None else chunked[0]), fwd, bwd, chunked)


Tier = tuple[str, float, float, float, float, float, tuple[float, ...]]
"""One tier's bucketed syncs, its kinds' `Part`s added (`tiers`): (tier, gradient seconds,
all-gather seconds, their last buckets', the smallest first-bucket share, and with the
interleaved schedule each chunk's gradient seconds, else ())."""

Traffic = tuple[tuple[float, float, float] | None, tuple[Tier, ...]]
"""What `data_parallel` reads of a stage beyond its windows (`traffic`): at ZeRO 2 and 3 one
unit's (all-gather seconds, reduce-scatter seconds, parameters) (`unit_collectives`) and (),
else None and its bucketed syncs' `tiers`."""


def tiers(parts: Iterable[Part], vpp: int | None) -> tuple[Tier, ...]:
    """`windowed`'s sums of the parts on each tier (no window reads them), tiers as they first
    occur; with `vpp` (`chunk_sync`'s launches) each chunk's seconds by the kinds' fractions."""
    on_tier: dict[str, list[float]] = {}
    per_chunk: dict[str, list[float]] = {}
    for tier, red, gather, red_last, gather_last, shares in parts:
        acc = on_tier.setdefault(tier, [0.0, 0.0, 0.0, 0.0, 1.0])
        for i, v in enumerate((red, gather, red_last, gather_last)):
            acc[i] += v
        if red > 0 or gather > 0:  # the kind's bucket share
            acc[4] = min(acc[4], red_last / red if red > 0 else gather_last / gather)
        if vpp is not None:
            secs = per_chunk.setdefault(tier, [0.0] * vpp)
            for c in range(vpp):
                secs[c] += red * (shares[c] if shares else 1.0 / vpp)
    out: list[Tier] = []
    for tier, (red, gather, last_r, last_g, frac) in on_tier.items():
        out.append((tier, red, gather, last_r, last_g, frac, tuple(per_chunk.get(tier, ()))))
    return tuple(out)


def tiers_shown(
    sums: tuple[Tier, ...], fwd: float, bwd: float, chunked: Chunked | None
) -> tuple[float, float]:
    """`windowed` of the parts whose `tiers` are `sums` (made with `chunked`'s vpp)."""
    exposed = hidden = 0.0
    for _, red, gather, red_last, gather_last, frac, secs in sums:
        if bwd <= 0:
            e_red = red
        elif chunked is not None:
            e_red = chunk_exposed(secs, chunked)
        else:
            e_red = max(red - bwd + bwd * frac, red_last)
        e_gat = max(gather - fwd + fwd * frac, gather_last) if fwd > 0 else gather
        exposed += e_red + e_gat
        hidden += (red - e_red) + (gather - e_gat)
    return exposed, hidden
