"""CPU offloading's host transfers on a pipeline stage, per micro-batch: what of them the
layers' compute leaves exposed (`offload_exposed`: Megatron --cpu-offloading-num-layers under
Transformer Engine's schedule, `planner.model.cpu_offload`; fine-grained offloading,
`fine_offload_exposed`) and how long they take one way (`offload_one_way`), from the layout's
layer times (`stage_time.layout_times`)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cpu_offload, shared_link
from planner.model.ep_overlap import a2a_floor
from planner.model.fine_offload import (
    copied_bytes,
    offloading_layers,
    offloading_totals,
    transfer_seconds,
)
from planner.model.host_link import host_link_bandwidth
from planner.model.layer_time import Layer
from planner.model.megatron_order import warmup
from planner.model.schedule import Chunks
from planner.model.stage_activations import shard
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
    seconds it waits on its TP, CP and expert all-to-all traffic (`Layer.tp`, `Layer.cp`, and of
    `Layer.ep` the least `ep_overlap.a2a_floor` leaves exposed: all but what the shared experts
    hide without --overlap-moe-expert-parallel-comm, as `ep_overlap.ep_exposed` charges it),
    split as the compute, which go over NVLink or the NIC while the copies go over the host link
    (the DP sync's windows hold the same waits, `stage_sync.other_link_seconds`). A slower GPU
    then never shows more of a copy than its compute grows: the waits shrink by no more than the
    compute under them grows. On a PCIe-only GPU (`shared_link.applies`) the copies share the
    link those waits are on: the compute alone."""
    fwd, bwd = layer.fwd, layer.bwd + layer.recompute
    if shared_link.applies(job.cluster) or fwd + bwd <= 0.0:
        return fwd, bwd
    share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)
    a2a = a2a_floor(lay, layer.ep, layer.ep_shared, fwd + bwd, share) if layer.ep > 0 else 0.0
    waits = layer.tp + layer.cp + a2a
    return fwd + waits * fwd / (fwd + bwd), bwd + waits * bwd / (fwd + bwd)


def offload_one_way(job: Job, lay: Layout, chunks: Chunks, t: LayoutTimes) -> float:
    """Seconds per micro-batch a stage's host copies take one way over the host link (the
    forward's copies out, or the backward's back): the first k layers' (`Layer.offload`) under
    --cpu-offloading-num-layers k, under fine-grained offloading what the offload groups copy
    (`fine_offload.copied_bytes`) of each layer that moves them (`fine_offload.offloading_layers`:
    under full recompute, those it leaves whole)."""
    arch, k = job.arch, lay.cpu_offloading_num_layers
    if k > 0:  # as `cpu_offload.exposed_seconds` counts them: at most all layers but the last
        layers = _stage_layers(job, chunks, t)
        return sum(x.offload for x in layers[: min(k, len(layers) - 1)])
    if not lay.offload_modules:
        return 0.0
    sh, mods, link = shard(job, lay), frozenset(lay.offload_modules), host_link_bandwidth(job)
    counts = offloading_totals(arch, lay, sh, chunks)
    return lay.activation_offload_fraction * sum(
        n * transfer_seconds(copied_bytes(arch, kind, sh, mods), link)
        for kind, n in zip(arch.kinds, counts, strict=True)
        if n
    )


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
    - Backward: a layer's reload (h2d_stream, :473) starts under the backward of the layer after
      it (`copy_windows`; launched when that layer's backward is done, :1332-1342, waited on at
      the start of its own, :1288-1308), but not before the group's copy out has finished
      (:1183-1185). A chunk's forward queues its layers' copies out, layer by layer, each when
      its forward is done, and the queue drains while the schedule runs other work until the
      chunk's backward. That gap is at least the forward and backward of every stage chunk after
      this one in the micro-batch's path (chunk c of rank r in Megatron's interleaved layout:
      (v - 1 - c) p + p - 1 - r of them, each one's backward waiting on the next's), each taken
      as this rank's shortest chunk's (stages balanced; the point-to-point hops and the output
      layer left out, which only lengthen it). None for the last rank's last chunk, whose
      backward follows its own forward (`schedule.op_order`) and which then copies nothing of
      its last layer (`should_bulk_offload`, :1217-1225).
    - One pipe: copies out and reloads share the host link's rate (`host_link.host_link_bandwidth`),
      taken in the order they are issued. PCIe is full duplex on paper; this is the measured
      behaviour: Megatron-LM's H100 functional test with fine-grained offloading
      (benchmarks/fidelity.py --functional: pp 2, vpp 4, 4 micro-batches) copies 27 ms a MoE
      layer each way against 14.5 ms of its compute and measured 1.94 s a step, 0.55 s
      predicted without offloading; these streams give 1.32 s with each direction at the full
      rate, 2.02 s with both through one pipe. So: per micro-batch the link carries every group
      out and back; and a backward that follows another micro-batch's forward (1F1B's steady
      state: all of a rank's backwards but as many as its warm-up forwards, which follow
      backwards in the cool-down) finds that forward's copies out (taken as this chunk's own)
      still on the link, and its reloads but the first (issued before that forward, as the
      backward before it starts its last group, :1278-1286) queue behind them (`chunk_waits`).
    - The queue is taken empty at each chunk's forward: where a stage's copies out and back per
      micro-batch outlast its compute (forward and backward windows) the link sets its pace
      instead, and the excess shows (the larger of the two).

    Per chunk the layers that move (`fine_offload.offloading_layers`: block recompute's last
    ones) and, of those, the first `Layout.activation_offload_fraction` (the later ones' groups
    stay, :646-664), each copying `fine_offload.copied_bytes`."""
    if not lay.offload_modules:
        return 0.0
    arch = job.arch
    sh, mods, link = shard(job, lay), frozenset(lay.offload_modules), host_link_bandwidth(job)
    sec = [transfer_seconds(copied_bytes(arch, kind, sh, mods), link) for kind in arch.kinds]
    # a layer that moves its groups runs whole under block recompute (`LayoutTimes.plain`)
    moving_times = t.plain if sh.recompute == "full" and t.plain else t.layers
    index = {kind: j for j, kind in enumerate(arch.kinds)}
    runs: list[list[tuple[float, float, float]]] = []  # per chunk, per layer: (fwd, bwd, copy)
    gaps: list[int] = []  # per chunk, the stage chunks run between its forward and backward
    for c, counts in zip(chunks, offloading_layers(arch, lay, sh, chunks), strict=True):
        kinds = [index[kd] for kd in arch.layer_kinds[c.start : c.stop]]
        moves = _moving(kinds, counts, lay.activation_offload_fraction)
        run = []
        for j, mv in zip(kinds, moves, strict=True):
            f, b = copy_windows(job, lay, (moving_times if mv else t.layers)[j])
            run.append((f, b, sec[j] if mv else 0.0))
        runs.append(run)
    for k, run in enumerate(runs):
        # the stage chunks after this one in the micro-batch's path, each forward and back
        gaps.append((len(runs) - 1 - k) * lay.pp + (lay.pp - 1 - rank))
        if gaps[-1] == 0:  # its last moving layer's groups stay (:1217-1225)
            last = max((i for i, (_, _, s) in enumerate(run) if s > 0), default=None)
            if last is not None:
                runs[k] = [*run[:last], (run[last][0], run[last][1], 0.0), *run[last + 1 :]]
    busy = sum(f + b for run in runs for f, b, _ in run)
    copies = sum(s for run in runs for _, _, s in run)  # one way; the link carries both
    # the shortest forward and backward of a chunk with layers: each other stage's chunk's
    shortest = min((sum(f + b for f, b, _ in run) for run in runs if run), default=0.0)
    # of the rank's backwards, those that follow a forward: all but the warm-up's count, which
    # follow a backward in the cool-down (`megatron_order.warmup`)
    total = t.m * lay.vpp
    warm = warmup(lay.pp, lay.vpp, rank, total, lay.microbatch_group_size_per_vp_stage)
    after_fwd = 1.0 - warm / total
    waits = 0.0
    for run, n in zip(runs, gaps, strict=True):
        alone = chunk_waits(run, n * shortest, False)
        waits += alone + after_fwd * (chunk_waits(run, n * shortest, n > 0) - alone)
    return max(waits, 2.0 * copies - busy)


def _moving(kinds: list[int], counts: tuple[int, ...], fraction: float) -> list[bool]:
    """Per layer of a chunk (its kinds, in order), whether its groups move: each kind's last
    `counts` layers (block recompute checkpoints a chunk's first ones), then of those all but the
    last int(n x (1 - fraction)) (Megatron's per-chunk fraction, :646-664; by layer here, by
    group there)."""
    left = list(counts)
    moves = [False] * len(kinds)
    for i in reversed(range(len(kinds))):
        if left[kinds[i]] > 0:
            left[kinds[i]] -= 1
            moves[i] = True
    drop = int(sum(moves) * (1.0 - fraction))
    for i in reversed(range(len(kinds))):
        if drop <= 0:
            break
        if moves[i]:
            moves[i], drop = False, drop - 1
    return moves


def chunk_waits(run: list[tuple[float, float, float]], gap: float, behind: bool) -> float:
    """Seconds one chunk's backward waits on its reloads: `run`, per layer in forward order, its
    (forward, backward, one-way copy) seconds; `gap`, the seconds between the end of the chunk's
    forward and the start of its backward. The copies out queue from an empty queue, each when
    its layer's forward ends; each layer's reload starts when its copy out is done, the previous
    reload is done, and the backward of the layer after it starts (that layer's backward taken
    as long as its own), and the layer's backward waits until it is done. Both directions go
    through one pipe, in order: `behind`, the backward follows another micro-batch's forward
    (after a gap), whose copies out (taken as this forward's) still hold the link for this
    forward's tail as it starts: its first reload, issued before that forward (:1278-1286), goes
    ahead of them, the others queue behind them."""
    clock = done = 0.0
    out: list[float] = []
    for f, _, s in run:
        clock += f
        if s > 0:
            done = max(done, clock) + s
        out.append(done)
    tail = max(done - clock, 0.0)  # the copies out still queued as the forward ends
    clock += gap
    queued = clock + tail if behind else 0.0  # when the link is through with them
    h2d = waits = 0.0
    for (_, b, s), ready in zip(reversed(run), reversed(out), strict=True):
        if s > 0:
            h2d = max(ready, clock - b, h2d) + s
            wait = max(h2d - clock, 0.0)
            waits += wait
            clock += wait
            h2d = max(h2d, queued)  # the reloads after the first queue behind them
        clock += b
    return waits
