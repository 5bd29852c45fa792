"""`stage_activations.shard`'s memo key leaves out the layout fields `layout_shard.make_shard`
does not read (`layout_shard.SHARD_UNREAD`): layouts that differ only in those share one
shard.

Oracle: `make_shard` itself, called afresh on each layout as the suggest search builds them
(`tests.search.brute_force.memo_problem`: an MoE model with MTP layers and MLA, and one without;
and an FP8 MoE job, whose shards read the token dispatcher) and on each of those with every
unread field set to other values (the values it takes in the problem's other layouts, a Literal
field's every value, a flag's opposite, an integer doubled plus one, a float halved plus a
quarter): `make_shard` builds equal shards, and `shard` answers the one `make_shard` builds."""

from __future__ import annotations

from dataclasses import fields
from typing import Literal, get_args, get_origin, get_type_hints

import pytest

from planner.inputs.layout import Layout
from planner.model.layout_shard import SHARD_UNREAD, make_shard
from planner.model.stage_activations import shard
from planner.search.space import Space
from tests.search.brute_force import MEMO_JOBS, make_job, memo_problem, search_built_layouts

FP8 = make_job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 512, precision="fp8")
"""An FP8 MoE job: its shards read the token dispatcher (TEGroupedMLP's padded copies)."""


HINTS = get_type_hints(Layout)


def _literals(field: str) -> list[object]:
    """Every value of a field typed as a Literal (or an optional one), else none."""
    hint = HINTS[field]
    if get_origin(hint) is Literal:
        return list(get_args(hint))
    return [v for a in get_args(hint) if get_origin(a) is Literal for v in get_args(a)]


def _others(field: str, value: object, seen: set[object]) -> list[object]:
    """Other values of an unread field: those of the problem's other layouts, every value of a
    Literal field, and one more (a flag's opposite, an integer doubled, a None field set)."""
    extra: list[object] = _literals(field)
    if isinstance(value, bool):
        extra = [not value]
    elif isinstance(value, int):
        extra += [2 * value + 1]
    elif isinstance(value, float):
        extra += [value / 2 + 0.25]
    elif value is None and field == "pipeline_layers":
        extra = [(1, 2)]
    return [v for v in [*seen, *extra] if v != value]


def test_the_unread_fields_are_layout_fields() -> None:
    assert {f.name for f in fields(Layout)} >= SHARD_UNREAD


@pytest.mark.parametrize("name", [*MEMO_JOBS, "mixtral-fp8"])
def test_a_shard_reads_none_of_the_unread_fields(name: str) -> None:
    if name in MEMO_JOBS:
        job, layouts = memo_problem(name)
    else:
        job, layouts = FP8, search_built_layouts(FP8, Space(), 300)
    values = {f: {getattr(lay, f) for lay in layouts} for f in SHARD_UNREAD}
    varied = 0
    for lay in layouts[::10]:
        built = make_shard(job, lay)
        assert shard(job, lay) == built
        for f in sorted(SHARD_UNREAD):
            for v in _others(f, getattr(lay, f), values[f]):
                assert make_shard(job, lay.with_(**{f: v})) == built, (f, v)
                varied += 1
    assert varied > 0
