"""The memory model's activations memo (`memory._ACTIVATIONS`, keyed without the ZeRO stage and
the TP overlap) against the activations computed afresh: filled first with every layout of a
problem in each ZeRO stage, with and without its TP overlap, so a key that left out something
the activations read would return another layout's; then each stage's report is checked bit for
bit against the same estimate with the memo emptied."""

from __future__ import annotations

import pytest

from planner.inputs.layout import Layout
from planner.model import memory
from planner.model.job_memo import JobMemo
from tests.model.test_layer_memos import NAMES, problem_layouts

ZEROS = (0, 1, 2, 3)


@pytest.mark.parametrize("name", NAMES)
def test_memory_reports_read_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = problem_layouts(name)
    lays = [
        lay.with_(zero_stage=z, tp_comm_overlap=ov)
        for lay in lays[:: max(len(lays) // 300, 1)]
        for z in ZEROS
        for ov in {lay.tp_comm_overlap, False}
    ]

    def reports(lay: Layout) -> tuple[memory.MemoryReport, memory.MemoryReport]:
        return memory.estimate(job, lay, all_stages=False), memory.estimate(job, lay)

    JobMemo.forget_all()
    warm = [reports(lay) for lay in lays]
    for lay, want in zip(lays, warm, strict=True):
        memory._ACTIVATIONS.clear()
        assert reports(lay) == want, lay.describe()
