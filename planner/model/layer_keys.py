"""Memo keys of a decoder layer's core (`planner.model.layer_time`'s `_core`, remembered in
LAYER_CORES) and of its dispatcher-free parts (`planner.model.layer_parts.parts`): what each reads
besides the job, as one flat tuple of plain values (the memos hold thousands, which the garbage
collector then need not walk).
"""

from __future__ import annotations

from dataclasses import fields
from operator import itemgetter

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.model import comms, layer_parts
from planner.model.gemm import Gpu
from planner.model.job_memo import JobMemo
from planner.model.layer_traffic import LayerCore

LAYER_CORES: JobMemo[tuple[object, ...], LayerCore] = JobMemo()
"""`layer_time`'s cores per job and `core_key`, for `layer_time`'s callers that remember layer
times (`planner.model.stage_time`, which clears it with them): the search times each layout with
and without memory savers and its TP overlap, whose layer cores are the same."""

UNREAD: dict[str, object] = {
    "recompute": "none",
    "recompute_modules": ("core_attn",),
    "tp_comm_overlap": False,
}
"""The layout fields a layer's core does not read (recompute and the TP overlap only change what
`layer_time` computes after it: the recompute, and the TP, CP and EP traffic)."""

_CORE_READ = tuple(f.name for f in fields(Layout) if f.name not in UNREAD)
_CORE_VALUES = itemgetter(*_CORE_READ)
"""A layout's `__dict__` to its `_CORE_READ` values, as a tuple (one C call)."""

_PARTS_READ = tuple(f for f in _CORE_READ if f not in layer_parts.DISPATCHER_FIELDS)
_PARTS_VALUES = itemgetter(*_PARTS_READ)


def core_key(
    lay: Layout, gpu: Gpu, kind: LayerKind, constants: tuple[float, ...]
) -> tuple[object, ...]:
    """What a layer's core (and `layer_traffic.traffic` on it) reads besides the job: the
    layout's fields but the UNREAD ones (in field order), the GPU's and the kind's fields (both
    dataclasses compared field by field), `layer_time`'s constants as it read them at call time
    (`constants`) and the collectives' (`comms.constants`): a calibration or a test that sets one
    never reads a core computed under another (LAYER_TIMES.clear() clears the memo too)."""
    return (
        *_CORE_VALUES(lay.__dict__),
        *gpu.__dict__.values(),
        *kind.__dict__.values(),
        *constants,
        *comms.constants(),
    )


def parts_key(
    lay: Layout, gpu: Gpu, kind: LayerKind, load: float, attention_efficiency: float
) -> tuple[object, ...]:
    """`core_key` without the dispatcher's fields, with the routing load and only the attention
    constant: what `layer_parts.parts` reads."""
    g, k = gpu.__dict__.values(), kind.__dict__.values()
    return (*_PARTS_VALUES(lay.__dict__), *g, *k, attention_efficiency, *comms.constants(), load)
