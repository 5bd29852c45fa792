"""CPU offloading's host transfers on a pipeline stage, per micro-batch: what of them the
layers' compute leaves exposed (`offload_exposed`: Megatron --cpu-offloading-num-layers under
Transformer Engine's schedule, `planner.model.cpu_offload`; fine-grained offloading,
`fine_offload_exposed`) and how long they take one way (`offload_one_way`), from the layout's
layer times (`stage_time.layout_times`)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cpu_offload, shared_link
from planner.model.fine_offload import copied_bytes, offloading_totals, transfer_seconds
from planner.model.host_link import host_link_bandwidth
from planner.model.layer_time import Layer
from planner.model.schedule import Chunks
from planner.model.stage_activations import shard
from planner.model.stage_time import LayoutTimes


def _stage_layers(job: Job, chunks: Chunks, t: LayoutTimes) -> list[Layer]:
    """The stage's decoder layers' times in the order it runs them."""
    arch = job.arch
    index = {kind: j for j, kind in enumerate(arch.kinds)}
    return [t.layers[index[kd]] for c in chunks for kd in arch.layer_kinds[c.start : c.stop]]


def offload_exposed(job: Job, lay: Layout, chunks: Chunks, t: LayoutTimes) -> float:
    """Seconds per micro-batch the host transfers of CPU offloading leave exposed on a stage
    (Megatron --cpu-offloading-num-layers k, one pipeline stage only): Transformer Engine's
    schedule of the first k layers' copies out and back (`cpu_offload.exposed_seconds`), each
    (`Layer.offload`, the host link at HOST_LINK_EFFICIENCY) hidden under the layers between its
    start and the one that waits for it. Fine-grained offloading (`fine_offload_exposed`) adds
    its own."""
    k = lay.cpu_offloading_num_layers
    if k <= 0:
        return fine_offload_exposed(job, lay, chunks, t)
    layers = _stage_layers(job, chunks, t)
    busy = [copy_windows(job, x) for x in layers]  # each layer's compute and waits on other links
    return cpu_offload.exposed_seconds(
        [f for f, _ in busy], [b for _, b in busy], [x.offload for x in layers], k
    )


def copy_windows(job: Job, layer: Layer) -> tuple[float, float]:
    """A layer's (forward, backward) seconds its host copies can run under: its compute and,
    where the GPU has NVLink, the seconds it waits on its TP and CP traffic (`Layer.tp`,
    `Layer.cp`, split as the compute), which go over NVLink or the NIC while the copies go over
    the host link (the DP sync's windows hold them alike, `stage_sync.other_link_seconds`). A
    slower GPU then never shows more of a copy than its compute grows: the waits shrink by no
    more than the compute under them grows. On a PCIe-only GPU (`shared_link.applies`) the copies
    share the link those waits are on: the compute alone."""
    fwd, bwd = layer.fwd, layer.bwd
    waits = 0.0 if shared_link.applies(job.cluster) else layer.tp + layer.cp
    if waits <= 0.0 or fwd + bwd <= 0.0:
        return fwd, bwd
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


def fine_offload_exposed(job: Job, lay: Layout, chunks: Chunks, t: LayoutTimes) -> float:
    """Seconds per micro-batch fine-grained activation offloading leaves exposed on a stage
    (Megatron --offload-modules, `planner.model.fine_offload`): each layer's offloaded groups go
    to the host on a side stream while the layer's own forward goes on and come back, prefetched,
    under the previous layer's backward; a transfer (one way, the host link at
    HOST_LINK_EFFICIENCY) shows beyond the layer's forward, and beyond its backward, in the
    layers that offload (`fine_offload.offloading_layers`, `Layout.activation_offload_fraction` of
    them)."""
    if not lay.offload_modules:
        return 0.0
    sh = shard(job, lay)
    mods, link = frozenset(lay.offload_modules), host_link_bandwidth(job)
    exposed = 0.0
    counts = offloading_totals(job.arch, lay, sh, chunks)
    for kind, layer, n in zip(job.arch.kinds, t.layers, counts, strict=True):
        if n:
            sec = transfer_seconds(copied_bytes(job.arch, kind, sh, mods), link)
            fwd, bwd = copy_windows(job, layer)
            exposed += n * (max(sec - fwd, 0.0) + max(sec - bwd, 0.0))
    # only the first activation_offload_fraction of the layers move theirs
    return lay.activation_offload_fraction * exposed
