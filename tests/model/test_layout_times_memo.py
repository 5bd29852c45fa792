"""`stage_time.layout_times` from its memo (`stage_time.LAYER_TIMES`: one entry per layer key
holding each kind's layer, the output layer and the MTP projection) against the same times
computed afresh, on a model with MTP layers (DeepSeek-V3) and one without: the memo is first
filled by every layout of the problem, so an entry whose key left out something its value reads
would hand one layout another's times."""

from __future__ import annotations

import pytest

from planner.model import stage_time
from planner.model.job_memo import JobMemo
from tests.search.brute_force import MEMO_JOBS, memo_problem


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_layout_times_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = memo_problem(name)
    JobMemo.forget_all()
    warm = [stage_time.layout_times(job, lay) for lay in lays]
    memo = stage_time.LAYER_TIMES.of(job)
    keys = {stage_time._memo_key(lay) for lay in lays}
    assert keys <= memo.keys()
    assert len(keys) < len(lays)  # layouts share entries
    with_proj = [t for t in warm if t.mtp_proj is not None]
    if job.arch.mtp_num_layers:
        assert len(with_proj) == len(warm)  # every DeepSeek-V3 layout has its MTP rank
        assert len({t.mtp_proj.fwd for t in with_proj if t.mtp_proj}) > 1  # and they differ
    else:
        assert not with_proj
    for lay, t in zip(lays, warm, strict=True):
        stage_time.LAYER_TIMES.clear()
        assert stage_time.layout_times(job, lay) == t, lay.describe()
    stage_time.LAYER_TIMES.clear()
