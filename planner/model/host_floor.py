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


def issued(layer: Layer, floor: float, recompute: bool = False, synced: float = 0.0) -> Layer:
    """The layer's forward and backward, each at least as long as its issue (`floor` the
    forward's, `floor_s`); with full `recompute` the backward issues the forward again. `synced`:
    host seconds of the forward that wait for the GPU (`host.realtime_test_s`), added to it and to
    a full recompute's rerun."""
    fwd = max(layer.fwd, floor) + synced
    bwd = max(layer.bwd, BACKWARD_ISSUE_RATIO * floor)
    rec = max(layer.recompute, floor) + synced if recompute else layer.recompute
    if fwd == layer.fwd and bwd == layer.bwd and rec == layer.recompute:
        return layer
    return replace(layer, fwd=fwd, bwd=bwd, recompute=rec)


def issued_layer(layer: Layer, job: Job, lay: Layout, kind: LayerKind) -> Layer:
    """`issued` with the floor of this job, layout and layer kind."""
    synced = realtime_test_s(job, lay, kind)
    return issued(layer, floor_s(job, lay, kind), lay.recompute == "full", synced)
