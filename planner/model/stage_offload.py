"""CPU offloading's host transfers on a pipeline stage, per micro-batch: what of them the
layers' compute leaves exposed (`offload_exposed`: Megatron --cpu-offloading-num-layers under
Transformer Engine's schedule, `planner.model.cpu_offload`; fine-grained offloading,
`fine_offload_exposed`) and how long they take one way (`offload_one_way`), from the layout's
layer times (`stage_time.layout_times`)."""

from __future__ import annotations

from dataclasses import replace
from itertools import chain

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cpu_offload, shared_link
from planner.model.ep_overlap import a2a_floor
from planner.model.fine_offload import group_bytes, transfer_seconds
from planner.model.host_link import host_link_bandwidth
from planner.model.job_memo import JobMemo
from planner.model.layer_kept import Group as Named
from planner.model.layer_kept import mtp_layers_kept
from planner.model.layer_time import Layer
from planner.model.megatron_order import warmup
from planner.model.mtp_precision import mtp_quantised
from planner.model.offload_chunks import (
    chunk_copies,
    fraction_moves,
    moving_layers,
    offloading_layers,
)
from planner.model.offload_groups import Chunk, Group, Item, layer_items
from planner.model.schedule import Chunks
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard
from planner.model.stage_time import LayoutTimes


def _stage_layers(job: Job, chunks: Chunks, t: LayoutTimes) -> list[Layer]:
    """The stage's decoder layers' times in the order it runs them."""
    arch = job.arch
    index = {kind: j for j, kind in enumerate(arch.kinds)}
    return [t.layers[index[kd]] for c in chunks for kd in arch.layer_kinds[c.start : c.stop]]


def offload_exposed(job: Job, lay: Layout, rank: int, chunks: Chunks, t: LayoutTimes) -> float:
    """Seconds per micro-batch the host transfers of CPU offloading leave exposed on a stage
    (Megatron --cpu-offloading-num-layers k, one pipeline stage only): Transformer Engine's
    schedule of the first k layers' copies out and back (`cpu_offload.exposed_seconds`), each
    (`Layer.offload`, the host link at HOST_LINK_EFFICIENCY) hidden under the layers between its
    start and the one that waits for it. Fine-grained offloading (`fine_offload_exposed`) adds
    its own."""
    k = lay.cpu_offloading_num_layers
    if k <= 0:
        return fine_offload_exposed(job, lay, rank, chunks, t)
    layers = _stage_layers(job, chunks, t)
    busy = [copy_windows(job, lay, x) for x in layers]  # compute and waits on other links
    return cpu_offload.exposed_seconds(
        [f for f, _ in busy], [b for _, b in busy], [x.offload for x in layers], k
    )


def copy_windows(job: Job, lay: Layout, layer: Layer) -> tuple[float, float]:
    """A layer's (forward, backward) seconds its host copies can run under: its compute (the
    backward with the layer's recompute, which runs inside it) and, where the GPU has NVLink, the
    seconds it waits on its TP, CP and expert all-to-all traffic (`link_waits`), split as the
    compute, which go over NVLink or the NIC while the copies go over the host link (the DP
    sync's windows hold the same waits, `stage_sync.other_link_seconds`). A slower GPU then
    never shows more of a copy than its compute grows: the waits shrink by no more than the
    compute under them grows. On a PCIe-only GPU (`shared_link.applies`) the copies share the
    link those waits are on: the compute alone."""
    fwd, bwd = layer.fwd, layer.bwd + layer.recompute
    waits = sum(link_waits(job, lay, layer))
    if waits <= 0.0:
        return fwd, bwd
    return fwd + waits * fwd / (fwd + bwd), bwd + waits * bwd / (fwd + bwd)


def link_waits(job: Job, lay: Layout, layer: Layer) -> tuple[float, float, float]:
    """The (TP, CP, expert all-to-all) seconds a layer waits on other links that its host copies
    run under (`copy_windows`): `Layer.tp`, `Layer.cp`, and of `Layer.ep` the least
    `ep_overlap.a2a_floor` leaves exposed (all but what the shared experts hide without
    --overlap-moe-expert-parallel-comm, as `ep_overlap.ep_exposed` charges it); none on a
    PCIe-only GPU (`shared_link.applies`) or a layer with no compute."""
    fwd, bwd = layer.fwd, layer.bwd + layer.recompute
    if shared_link.applies(job.cluster) or fwd + bwd <= 0.0:
        return 0.0, 0.0, 0.0
    share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)
    a2a = a2a_floor(lay, layer.ep, layer.ep_shared, fwd + bwd, share) if layer.ep > 0 else 0.0
    return layer.tp, layer.cp, a2a


def offload_one_way(
    job: Job, lay: Layout, chunks: Chunks, t: LayoutTimes, rank: int | None = None
) -> float:
    """Seconds per micro-batch a stage's host copies take one way over the host link (the
    forward's copies out, or the backward's back): the first k layers' (`Layer.offload`) under
    --cpu-offloading-num-layers k, under fine-grained offloading the groups that move
    copy (`offload_chunks.chunk_copies`: of the layers that move them, under full recompute those
    it leaves whole, the groups the activation offload fraction moves; on pipeline rank `rank`
    where given, the MTP layers' groups after the last chunk's and the last rank's rule,
    `_mtp_groups`, `_final`)."""
    arch, k = job.arch, lay.cpu_offloading_num_layers
    if k > 0:  # as `cpu_offload.exposed_seconds` counts them: at most all layers but the last
        layers = _stage_layers(job, chunks, t)
        return sum(x.offload for x in layers[: min(k, len(layers) - 1)])
    if not lay.offload_modules:
        return 0.0
    sh = shard(job, lay)
    end, tail = rank is not None and _final(job, lay, rank), _mtp_groups(job, lay, sh, rank)
    copies = sum(chunk_copies(arch, lay, sh, chunks, end, tail))
    return transfer_seconds(copies, host_link_bandwidth(job))


def _final(job: Job, lay: Layout, rank: int) -> bool:
    """Whether `rank` is the last pipeline rank (its last chunk's backward follows its own
    forward: each module's last group stays, `should_bulk_offload`) of a Megatron job."""
    return rank == lay.pp - 1 and job.framework != "torchtitan"


def _mtp_groups(job: Job, lay: Layout, sh: Shard, rank: int | None) -> tuple[Named, ...]:
    """The offload groups of the MTP layers on their rank (`rank`; none elsewhere or where
    None), which open after its last chunk's in that chunk's forward (Megatron-LM d98e8a64
    gpt_model.py:600, :711-712): `layer_kept.mtp_layers_kept`'s, as GPU memory counts them."""
    arch = job.arch
    if rank is None or rank != lay.mtp_rank(arch.num_layers, arch.mtp_num_layers):
        return ()
    return mtp_layers_kept(job, lay, sh, per_layer(arch, sh))[1]


def fine_offload_exposed(job: Job, lay: Layout, rank: int, chunks: Chunks, t: LayoutTimes) -> float:
    """Seconds per micro-batch fine-grained activation offloading (Megatron --offload-modules,
    `planner.model.fine_offload`) makes pipeline rank `rank`'s compute wait, as Megatron's streams
    run it (NVIDIA/Megatron-LM d98e8a64 pipeline_parallel/fine_grained_activation_offload.py):

    - Forward: nothing. Each group's copy to the host is queued on the one side stream
      (d2h_stream, :472) after the compute that made it (:1262-1269) and guarded only by
      record_stream and an event (:1098-1130); the compute stream waits on it only under
      fine_grained_offloading_max_inflight_offloads (:1135-1138, :1250-1260), None by default
      (transformer_config.py:1382), required only with full-iteration CUDA graphs (:2965-2973).
      planner has no field for that cap: its plans never set it.
    - Backward: group by group (`offload_groups`): a group's reload is issued where the backward
      leaves the group after it on the chunk's reload stack and waited for where its own backward
      starts, so it hides under the compute between the two only. A chunk's forward queues its
      groups' copies out, each when its group's forward is done, and the queue drains while the
      schedule runs other work until the chunk's backward. That gap is at least the forward and
      backward of every stage chunk after this one in the micro-batch's path (chunk c of rank r
      in Megatron's interleaved layout: (v - 1 - c) p + p - 1 - r of them, each one's backward
      waiting on the next's), each taken as this rank's shortest chunk's (stages balanced; the
      point-to-point hops and the output layer left out, which only lengthen it). None for the
      last rank's last chunk, whose backward follows its own forward (`schedule.op_order`) and
      which then keeps each module's last group (`should_bulk_offload`, :1217-1225).
    - One pipe: copies out and reloads share the host link's rate (`host_link.host_link_bandwidth`),
      taken in the order they are issued. PCIe is full duplex on paper; this is the measured
      behaviour: Megatron-LM's H100 functional test with fine-grained offloading
      (benchmarks/fidelity.py --functional: pp 2, vpp 4, 4 micro-batches) copies 27 ms a MoE
      layer each way against 14.5 ms of its compute; its step (2,116 tokens/s/GPU measured) is
      predicted 4% slow with both directions through one pipe, 20% fast with each at the full
      rate (2,029 and 2,551 under `offload_groups`' windows). So:
      per micro-batch the link carries every group out and back; and a backward that follows
      another micro-batch's forward (1F1B's steady state: all of a rank's backwards but as many
      as its warm-up forwards, which follow backwards in the cool-down) finds that forward's
      copies out (taken as this chunk's own) still on the link, and its reloads but the first
      (issued before that forward, :1278-1286) queue behind them (`offload_groups.Chunk.waits`).
    - The queue is taken empty at each chunk's forward: where a stage's copies out and back per
      micro-batch outlast its compute (forward and backward windows) the link sets its pace
      instead, and the excess shows (the larger of the two).

    Per chunk the layers that move (`offload_chunks.offloading_layers`: block recompute's last
    ones), their groups (`fine_offload.group_bytes`) and, of those that copy anything, the first
    `Layout.activation_offload_fraction` in the order they open (the later ones stay,
    :646-664)."""
    if not lay.offload_modules:
        return 0.0
    arch = job.arch
    sh, mods = shard(job, lay), frozenset(lay.offload_modules)
    groups = _kind_groups(job, sh, mods)
    # a layer that moves its groups runs whole under block recompute (`LayoutTimes.plain`)
    moving_times = t.plain if sh.recompute == "full" and t.plain else t.layers
    index = {kind: j for j, kind in enumerate(arch.kinds)}
    memo = _CHUNKS.of(job)
    # per (kind, whether it moves), what its layers' steps read: their windows, their waits on
    # other links, their groups
    seen: dict[_Key, _Reads] = {}
    runs: list[Chunk] = []
    gaps: list[int] = []  # per chunk, the stage chunks run between its forward and backward
    moving = offloading_layers(arch, lay, sh, chunks)
    mtp = _mtp_reads(job, lay, sh, rank, t)
    for k, (c, counts) in enumerate(zip(chunks, moving, strict=True)):
        # the stage chunks after this one in the micro-batch's path, each forward and back
        gaps.append((len(chunks) - 1 - k) * lay.pp + (lay.pp - 1 - rank))
        kinds = [index[kd] for kd in arch.layer_kinds[c.start : c.stop]]
        mvs = moving_layers(kinds, counts)
        layers = tuple((j, m, False) for j, m in zip(kinds, mvs, strict=True))
        for j, mv, _ in layers:
            if (j, mv, False) not in seen:
                x = (moving_times if mv else t.layers)[j]
                windows = (x.fwd, x.bwd + x.recompute)
                seen[j, mv, False] = (windows, link_waits(job, lay, x), groups[j] if mv else ())
        if k == len(chunks) - 1 and mtp:  # the MTP layers run after the last chunk's
            seen.update(mtp)
            layers += tuple(key for key, _ in mtp)
        kept = (lay.activation_offload_fraction, gaps[-1] == 0)
        key = (layers, tuple(seen[p] for p in sorted(set(layers))), kept)
        chunk = memo.get(key)
        if chunk is None:
            if len(memo) >= 1 << 14:
                memo.clear()
            chunk = memo[key] = _chunk(job, layers, seen, *kept)
        runs.append(chunk)
    busy = sum(chain.from_iterable(ch.spans for ch in runs))
    copies = sum(chain.from_iterable(ch.copies for ch in runs))  # one way; the link: both
    # the shortest forward and backward of a chunk with layers: each other stage's chunk's
    shortest = min((ch.span for ch in runs if ch.spans), default=0.0)
    # of the rank's backwards, those that follow a forward: all but the warm-up's count, which
    # follow a backward in the cool-down (`megatron_order.warmup`)
    total = t.m * lay.vpp
    warm = warmup(lay.pp, lay.vpp, rank, total, lay.microbatch_group_size_per_vp_stage)
    after_fwd = 1.0 - warm / total
    shown = 0.0
    for ch, n in zip(runs, gaps, strict=True):
        alone = ch.waits(n * shortest, False)
        shown += alone + after_fwd * (ch.waits(n * shortest, n > 0) - alone)
    return max(shown, 2.0 * copies - busy)


_Reads = tuple[tuple[float, float], tuple[float, float, float], tuple[tuple[str, float], ...]]
"""What one layer's steps read (`_chunk`): its windows, its waits on other links, its groups."""

_Key = tuple[int, bool, bool]
"""A layer's kind, whether its groups move and whether it is an MTP layer (`_mtp_reads`)."""


def _mtp_reads(
    job: Job, lay: Layout, sh: Shard, rank: int, t: LayoutTimes
) -> list[tuple[_Key, _Reads]]:
    """On the MTP rank, each MTP layer's key and reads in the order they run after the last
    chunk's layers (`_chunk`): its windows (block recompute leaves it whole, Megatron's NVFP4
    runs it in bf16: `LayoutTimes.mtp_plain`, `mtp_layers`), its waits on other links and its
    groups where they move (`_mtp_groups`, as GPU and host memory count them)."""
    if rank != t.mtp_rank:
        return []
    tail = _mtp_groups(job, lay, sh, rank)
    arch, mods = job.arch, frozenset(lay.offload_modules)
    if sh.quantised and not mtp_quantised(job):  # bf16 linear inputs (`mtp_layers_kept`)
        sh = replace(sh, linear_bytes=sh.value_bytes)
    groups = _kind_groups(job, sh, mods) if tail else tuple(() for _ in arch.kinds)
    block = lay.recompute == "full" and lay.recompute_method == "block"
    times = (t.mtp_plain or t.plain) if block else (t.mtp_layers or t.layers)
    out: list[tuple[_Key, _Reads]] = []
    for j, n in enumerate(arch.mtp_counts()):
        x = times[j]
        reads = ((x.fwd, x.bwd + x.recompute), link_waits(job, lay, x), groups[j])
        out += [((j, bool(tail), True), reads)] * n
    return out


_GROUPS: JobMemo[tuple[object, ...], tuple[tuple[tuple[str, float], ...], ...]] = JobMemo()
"""`_kind_groups` per job, shard and modules (all they read)."""

_CHUNKS: JobMemo[tuple[object, ...], Chunk] = JobMemo()
"""`_chunk` per job and what it reads: the chunk's layers, what their steps read, the offload
fraction and whether the chunk is the last rank's last (at most 2^14 per job, then forgotten)."""


def _kind_groups(
    job: Job, sh: Shard, mods: frozenset[str]
) -> tuple[tuple[tuple[str, float], ...], ...]:
    """Per layer kind (`ModelArch.kinds`), its groups in a layer that moves them, each with its
    copy's seconds one way (`fine_offload.group_bytes` over `host_link.host_link_bandwidth`)."""
    memo = _GROUPS.of(job)
    hit = memo.get((sh, mods))
    if hit is None:
        arch, link = job.arch, host_link_bandwidth(job)
        hit = memo[sh, mods] = tuple(
            tuple((name, transfer_seconds(b, link)) for name, b in group_bytes(arch, kd, sh, mods))
            for kd in arch.kinds
        )
    return hit


def _chunk(
    job: Job,
    layers: tuple[_Key, ...],
    seen: dict[_Key, _Reads],
    fraction: float,
    last: bool,
) -> Chunk:
    """One chunk's steps and groups (`offload_groups.Chunk`): `layers`, per layer in order its
    kind, whether its groups move and whether it is an MTP layer; `seen`, per such key its
    (forward, backward) windows, its (TP, CP, all-to-all) waits on other links and its groups
    (`_kind_groups`, none where they stay); `fraction` and `last`, as `_kept` reads them."""
    arch = job.arch
    items: list[Item] = []
    chunk_groups: list[Group] = []
    for key in layers:
        windows, on_links, groups = seen[key]
        j = key[0]
        own = {}
        for name, sec in groups:
            own[name] = len(chunk_groups)
            chunk_groups.append(Group(name, sec, True))
        items += layer_items(arch, arch.kinds[j], job.seq_length, windows, on_links, own)
    return Chunk(items, _kept(chunk_groups, fraction, last))


def _kept(groups: list[Group], fraction: float, last: bool) -> list[Group]:
    """A chunk's groups (in the order they open), each marked whether it moves: of those that
    copy anything all but the last int(n x (1 - fraction)) (Megatron's per-chunk fraction,
    :650-668: `offload_chunks.fraction_moves`, the rule memory and host memory read too); and,
    on the chunk whose backward follows its own forward (`last`), not each module's last
    group, about to be used (`should_bulk_offload`, :1217-1225)."""
    moves = fraction_moves([g.copy for g in groups], fraction)
    final = {g.name: i for i, g in enumerate(groups)} if last else {}
    stay = set(final.values())
    return [
        g._replace(moves=mv and i not in stay)
        for i, (g, mv) in enumerate(zip(groups, moves, strict=True))
    ]
