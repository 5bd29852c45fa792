"""The base bound's memo of stage times without memory savers (`bound.PLAIN_STAGES`), keyed on
a layout's fields but the ZeRO stage and those a rung sets (`rungs.RUNG_FIELDS`). Oracles:
`Rung.on` itself (the fields it changes on every rung of every sampled layout are among
RUNG_FIELDS, or the TP overlap it turns off), and `bound.base_bound` computed with every memo
emptied, bit for bit against the same bound read through the memo, filled first with every rung
and ZeRO stage of the problem's layouts."""

from __future__ import annotations

from dataclasses import fields

import pytest

from planner.model.job_memo import JobMemo
from planner.search import bound, rungs
from tests.model.test_layer_memos import problem_layouts
from tests.search.brute_force import PROBLEMS, sample_layouts

NAMES = ["mixtral-expert-tp", "mixtral-ep-overlap", "llama8b-fp8"]


@pytest.mark.parametrize("name", NAMES)
def test_a_rung_sets_only_the_rung_fields(name: str) -> None:
    job, space = PROBLEMS[name]
    allowed = {*rungs.RUNG_FIELDS, "tp_comm_overlap"}
    changed: set[str] = set()
    for lay in sample_layouts(name, 25):
        for r in rungs.every(job, lay, space.recompute, True):
            on = r.on(lay)
            diff = {f.name for f in fields(lay) if getattr(on, f.name) != getattr(lay, f.name)}
            assert diff <= allowed, (r, diff - allowed)
            changed |= diff
    assert changed & set(rungs.RUNG_FIELDS)


@pytest.mark.parametrize("name", NAMES)
def test_base_bounds_read_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = problem_layouts(name)  # every rung of the sampled layouts
    lays = [lay.with_(zero_stage=z) for lay in lays[:: max(len(lays) // 150, 1)] for z in (0, 3)]
    JobMemo.forget_all()
    warm = [bound.base_bound(job, lay) for lay in lays]
    assert len(bound.PLAIN_STAGES.of(job)) < len(lays)  # the rungs and stages share entries
    for lay, want in zip(lays, warm, strict=True):
        JobMemo.forget_all()
        assert bound.base_bound(job, lay) == want, lay.describe()
