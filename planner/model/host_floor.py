"""A layer's time floored by its host issue: the GPU cannot run a layer faster than the CPU
issues its kernels (`planner.model.host.floor_s`, which prices the issue; `planner.model.stage_time`
floors every layer it times with `issued_layer`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from planner.model.host import BACKWARD_ISSUE_RATIO, floor_s, realtime_test_s
from planner.model.layer_time import Layer

if TYPE_CHECKING:
    from planner.inputs.hybrid import LayerKind
    from planner.inputs.layout import Layout
    from planner.inputs.plan import Job


def issued(
    layer: Layer, floor: float, recompute: bool = False, synced: float = 0.0, ring: bool = False
) -> Layer:
    """The layer's forward and backward, each at least as long as its issue (`floor` the
    forward's, `floor_s`); with full `recompute` the backward issues the forward again. `synced`:
    host seconds of the forward that wait for the GPU (`host.realtime_test_s`), added to it and to
    a full recompute's rerun. With context parallelism's p2p `ring`, the time the GPU waits on
    the host (the floor over the GPU's own work) hides the layer's exposed CP traffic: the ring's
    transfers are issued ahead of the partial attention that needs them and run as soon as they
    are, so the layer takes the longer of the host's issue and the GPU's work with them, not
    their sum. The other exchanges (all-to-all, all-gather) and TP and EP traffic stay charged as
    computed: their collectives sit between dependent kernels (and the search's bound,
    `planner.search.bound`, counts TP and EP as they are)."""
    fwd = max(layer.fwd, floor) + synced
    bwd = max(layer.bwd, BACKWARD_ISSUE_RATIO * floor)
    rec = max(layer.recompute, floor) + synced if recompute else layer.recompute
    if fwd == layer.fwd and bwd == layer.bwd and rec == layer.recompute:
        return layer
    if not ring:
        return replace(layer, fwd=fwd, bwd=bwd, recompute=rec)
    # the GPU idles while the host issues: the ring's exposed transfers run then
    slack = (fwd - synced - layer.fwd) + (bwd - layer.bwd)
    if recompute:
        slack += rec - synced - layer.recompute
    cp = layer.cp - min(layer.cp, slack)
    return replace(layer, fwd=fwd, bwd=bwd, recompute=rec, cp=cp)


def issued_layer(layer: Layer, job: Job, lay: Layout, kind: LayerKind) -> Layer:
    """`issued` with the floor of this job, layout and layer kind."""
    synced = realtime_test_s(job, lay, kind)
    ring = lay.cp > 1 and lay.cp_comm_type == "p2p" and kind.mixer == "attention"
    return issued(layer, floor_s(job, lay, kind), lay.recompute == "full", synced, ring)
