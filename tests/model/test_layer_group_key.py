"""The layer times do not read the interleaved schedule's micro-batch group
(`Layout.microbatch_group_size_per_vp_stage`), so `stage_time` keys them without it
(`stage_time._FIXED`): layouts that differ only in their group share one entry of
`stage_time.LAYER_TIMES`.

Oracle: each kind's layer (`layer_time.layer_time`, `host_floor.issued_layer`), the output layer
(`output_time.output_layer_time`) and the MTP projection (`output_time.mtp_projection`) computed
afresh, without any memo, on the layout with every field as it is but its group set to several
values: they are equal bit for bit, and `stage_time.layout_times` hands each the same times."""

from __future__ import annotations

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import stage_time
from planner.model.host_floor import issued_layer
from planner.model.job_memo import JobMemo
from planner.model.layer_time import gpu_of, layer_time
from planner.model.output_time import mtp_projection, output_layer_time
from tests.search.brute_force import MEMO_JOBS, memo_problem

GROUPS = (None, 1, 2, 3, 5)
"""Micro-batch groups each layout is timed under (None: Megatron's default, pp)."""


def _afresh(job: Job, lay: Layout) -> tuple[object, ...]:
    """Every layer time `stage_time` keeps of a layout, computed without a memo."""
    gpu = gpu_of(job)
    kinds = tuple(issued_layer(layer_time(job, lay, gpu, k), job, lay, k) for k in job.arch.kinds)
    proj = mtp_projection(job, lay, gpu) if job.arch.mtp_num_layers else None
    return kinds, output_layer_time(job, lay, gpu), proj


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_layer_times_read_no_micro_batch_group(name: str) -> None:
    job, lays = memo_problem(name)
    interleaved = [lay for lay in lays if lay.vpp > 1]
    assert interleaved  # both problems search interleaved layouts
    for lay in interleaved[:: max(len(interleaved) // 12, 1)]:
        each = [lay.with_(microbatch_group_size_per_vp_stage=g) for g in GROUPS]
        times = [_afresh(job, x) for x in each]
        assert all(t == times[0] for t in times), lay.describe()
        # one memo entry for all of them (before `_FIXED` held the group: one per group)
        assert len({stage_time._memo_key(x) for x in each}) == 1, lay.describe()
        JobMemo.forget_all()
        got = [stage_time.layout_times(job, x) for x in each]
        kinds, out, proj = times[0]
        for t in got:
            assert (t.layers, t.out, t.mtp_proj) == (kinds, out, proj), lay.describe()
    JobMemo.forget_all()
