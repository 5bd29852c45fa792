"""Memos under the step-time estimate, each against its unmemoised function: a fused
dispatcher's expected fan-out (`dispatch.distinct_reached`, oracle its own unwrapped body), a
step's model and hardware FLOPs (`cost._step_flops`, oracles `flops.model_flops` and
`flops.hardware_flops`) and a layout's whole `LayoutTimes` (`stage_time.LAYOUT_TIMES`, oracle
`stage_time._layout_times` with every memo under it emptied). Each memo is first filled by every
layout (or argument) of the problem, so a key that left out something its value reads would hand
one another's value; then each value is checked bit for bit against the function afresh."""

from __future__ import annotations

import pytest

from planner.model import cost, dispatch, flops, stage_time
from planner.model.job_memo import JobMemo
from tests.search.brute_force import MEMO_JOBS, memo_problem


def test_distinct_reached_from_the_memo_is_computed_afresh() -> None:
    args = [(b, i, p) for b in (1, 2, 4, 8, 9) for i in (8, 64, 256, 257) for p in (0, 1, 4, 8)]
    warm = [dispatch.distinct_reached(*a) for a in args]
    for a, got in zip(args, warm, strict=True):
        assert dispatch.distinct_reached(*a) == got == dispatch.distinct_reached.__wrapped__(*a)


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_step_flops_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = memo_problem(name)
    asked = {(job.recompute_policy(lay.recompute), lay.recompute_modules) for lay in lays}
    assert len(asked) > 3  # none, full and several selective module sets
    warm = {a: cost._step_flops(job, *a) for a in asked}
    seq, batch = job.seq_length, job.global_batch_size
    for (policy, modules), (model, hw) in warm.items():
        assert model == flops.model_flops(job.arch, seq, batch)
        assert hw == flops.hardware_flops(job.arch, seq, batch, policy, modules)


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_layout_times_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = memo_problem(name)
    lays = [lay.with_(zero_stage=z) for lay in lays for z in (1, 3)]  # read by no layer time
    JobMemo.forget_all()
    warm = [stage_time.layout_times(job, lay) for lay in lays]
    assert len(stage_time.LAYOUT_TIMES.of(job)) < len(lays)  # layouts share them
    for lay, t in zip(lays, warm, strict=True):
        stage_time.LAYER_TIMES.clear()  # and LAYOUT_TIMES with it
        assert not stage_time.LAYOUT_TIMES.of(job)
        m = max(lay.num_microbatches(job.global_batch_size), 1)
        mtp = lay.mtp_rank(job.arch.num_layers, job.arch.mtp_num_layers)
        fresh = stage_time._layout_times(job, lay, stage_time._times_key(job, lay), m, mtp)
        assert fresh == t, lay.describe()
    stage_time.LAYER_TIMES.clear()
