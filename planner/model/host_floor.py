"""A layer's time floored by its host issue: the GPU cannot run a layer faster than the CPU
issues its kernels (`planner.model.host.floor_s`, which prices the issue; `planner.model.stage_time`
floors every layer it times with `issued_layer`).

Where the floor binds, the GPU idles between kernels while the host issues the next ones: the
layer's slack, its floored passes less the GPU's own work. Traffic on its own stream runs then,
so the slack hides the layer's exposed traffic, and the layer takes the longer of the host's
issue and the GPU's work with its traffic, not their sum. Each second a faster GPU (more FLOPs,
more HBM bandwidth, the same host) saves of its work on a host-bound layer is a second of slack:
the traffic its shorter GEMMs no longer hide (`planner.model.layer_tp` takes the TP windows from
the GEMM times, `dispatch.shared_overlap` the shared experts') hides in it, and the step never
gets slower. The slack goes, once, first to the context-parallel ring, then to the TP
collectives, then to the expert all-to-all beside the shared experts. A hidden second still
holds the SMs its kernels take (`comms.sm_share`, `comms.ep_sm_share`), as under the GEMMs: the
slack takes each charge down to that share of its traffic at most, which keeps
`planner.search.bound`'s premises (a layer's TP charge is at least that share of its
`Layer.tp_traffic`; the all-to-all's charge is `stage_time.a2a_floor` of the layer's own
fields). Not taken: the other CP exchanges (all-to-all, all-gather) and an all-to-all without
the shared experts' overlap, which read no GPU time; under Megatron's EP overlap the all-to-all
already runs under the floored compute (`stage_time.ep_exposed`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from planner.model.comms import ep_sm_share, sm_share
from planner.model.host import BACKWARD_ISSUE_RATIO, floor_s, realtime_test_s
from planner.model.layer_time import Layer

if TYPE_CHECKING:
    from planner.inputs.hybrid import LayerKind
    from planner.inputs.layout import Layout
    from planner.inputs.plan import Job


def issued(
    layer: Layer,
    floor: float,
    recompute: bool = False,
    synced: float = 0.0,
    ring: bool = False,
    shares: tuple[float, float] = (0.0, 0.0),
) -> Layer:
    """The layer's forward and backward, each at least as long as its issue (`floor` the
    forward's, `floor_s`); with full `recompute` the backward issues the forward again. `synced`:
    host seconds of the forward that wait for the GPU (`host.realtime_test_s`), added to it and to
    a full recompute's rerun. The time the GPU waits on the host (the floor over the GPU's own
    work) hides the layer's exposed traffic (the module docstring): with context parallelism's
    p2p `ring` its CP traffic first (the ring's transfers are issued ahead of the partial
    attention that needs them and run as soon as they are), then its TP traffic (`_tp`), then
    the expert all-to-all its shared experts overlap (`_ep`); `shares`: the SM shares a hidden
    TP and a hidden expert all-to-all second hold."""
    fwd = max(layer.fwd, floor) + synced
    bwd = max(layer.bwd, BACKWARD_ISSUE_RATIO * floor)
    rec = max(layer.recompute, floor) + synced if recompute else layer.recompute
    if fwd == layer.fwd and bwd == layer.bwd and rec == layer.recompute:
        return layer
    # the GPU idles while the host issues: the exposed traffic runs then
    slack = (fwd - synced - layer.fwd) + (bwd - layer.bwd)
    if recompute:
        slack += rec - synced - layer.recompute
    slack = max(slack, 0.0)
    cp = layer.cp - min(layer.cp, slack) if ring else layer.cp
    slack -= layer.cp - cp
    tp, hidden, plain = _tp(layer, slack, shares[0])
    slack -= layer.tp - tp
    # the ring's seconds the slack hides are hidden traffic still (on CP's link, which DP may
    # share: `stage_sync.dp_link_hidden`), not gone
    out = replace(layer, fwd=fwd, bwd=bwd, recompute=rec, cp=cp, tp=tp, tp_hidden=hidden)
    out = replace(out, cp_hidden=layer.cp_hidden + layer.cp - cp)
    return replace(out, tp_plain=plain, ep_shared=_ep(layer, slack, shares[1]))


def _tp(layer: Layer, slack: float, share: float) -> tuple[float, float, float]:
    """(`Layer.tp`, `tp_hidden`, `tp_plain`) with `slack` seconds of idle GPU to hide exposed TP
    traffic (`tp_traffic` less `tp_hidden`) under, a hidden second costing `share` of itself:
    the charge goes down by the slack it takes, never up, to no less than `share` of the traffic
    (every collective hidden) nor, under Megatron's TP overlap (tp = exposed + the held SMs,
    `tp_overlap.layer_traffic`), than its held SMs and `share` of what was exposed. The charge
    without the TP overlap (exposed + `share` x hidden) the same, down to `share` of this
    layout's traffic: no more than that layout's own floor, as userbuffers' collectives take no
    longer than NCCL's (`planner.search.bound` reads the lesser of the two charges)."""
    traffic, tp = layer.tp_traffic, layer.tp
    plain = layer.tp_plain - min(slack, max(layer.tp_plain - share * traffic, 0.0))
    exposed = max(traffic - layer.tp_hidden, 0.0)
    least = min(tp, max(tp - (1.0 - share) * exposed, share * traffic))
    cut = min(slack, tp - least)
    if cut <= 0.0:  # nothing exposed to hide, or a hidden second costs all of itself
        return tp, layer.tp_hidden, plain
    return tp - cut, min(layer.tp_hidden + cut / (1.0 - share), traffic), plain


def _ep(layer: Layer, slack: float, share: float) -> float:
    """`Layer.ep_shared` with `slack` seconds of idle GPU stretching the shared experts' window
    (Megatron --moe-shared-expert-overlap: `ep_shared` > 0): the all-to-all shows
    ep - (1 - share) x ep_shared (`stage_time.ep_exposed`), so the window grows by the slack
    over (1 - share), up to the whole all-to-all."""
    if layer.ep_shared <= 0.0 or slack <= 0.0 or share >= 1.0:
        return layer.ep_shared
    return min(layer.ep, layer.ep_shared + slack / (1.0 - share))


def issued_layer(layer: Layer, job: Job, lay: Layout, kind: LayerKind) -> Layer:
    """`issued` with the floor of this job, layout and layer kind, and the SMs a hidden TP
    collective (`comms.sm_share`) and a hidden expert all-to-all (`comms.ep_sm_share`) hold."""
    synced = realtime_test_s(job, lay, kind)
    ring = lay.cp > 1 and lay.cp_comm_type == "p2p" and kind.mixer == "attention"
    margin = job.gemm_sm_margin
    shares = (sm_share(job.cluster, margin), ep_sm_share(job.cluster, lay, margin))
    return issued(layer, floor_s(job, lay, kind), lay.recompute == "full", synced, ring, shares)
