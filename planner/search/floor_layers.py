"""The layer times the search's lower bounds read (`floor_layers`): per kind of layer, the least of
the layout's layer and its bf16 twin's (`LayoutTimes.bf16`, the job's bf16 first / last layers),
so that a bound taken over every layer at one kind's times stays below a mix of both.

Why both. A quantised layer is mostly the faster, but not always: a host-bound layer's floor
counts the kernels it issues (`planner.model.host_floor`), and an FP8 layer issues more (its
casts and scaling), so a host-bound bf16 layer can run faster than its FP8 twin (Llama 3.1 8B
NVFP4 with bf16 ends: 1.22 against 1.67 ms forward). The bounds sum compute, the all-to-all floor
(`stage_time.a2a_floor`, growing with the all-to-all and shrinking with the part of it under the
shared experts), TP traffic and the CP charge; each term here is at most either layer's: the
least compute, all-to-all, TP traffic and CP, and the most shared-expert window, so the floor of
the sums is below both (tests/search/test_search_assumptions.py)."""

from __future__ import annotations

from dataclasses import replace

from planner.model.layer_time import Layer
from planner.model.stage_time import LayoutTimes


def floor_layers(t: LayoutTimes) -> tuple[Layer, ...]:
    """Each kind's layer as the bounds read it (module docstring): `t.layers` where the job has
    no bf16 layers; else per kind the least of the two, compute as one forward (fwd + bwd)."""
    if not t.bf16:
        return t.layers
    return tuple(_least(a, b) for a, b in zip(t.layers, t.bf16, strict=True))


def _least(a: Layer, b: Layer) -> Layer:
    return replace(
        a,
        fwd=min(a.fwd + a.bwd, b.fwd + b.bwd),
        bwd=0.0,
        ep=min(a.ep, b.ep),
        ep_shared=max(a.ep_shared, b.ep_shared),
        tp_traffic=min(a.tp_traffic, b.tp_traffic),
        cp=min(a.cp, b.cp),
    )
