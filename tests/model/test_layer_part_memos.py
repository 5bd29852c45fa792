"""Memos under the layer times, each against its unmemoised function: the attention kernels
(`layer_parts.ATTENTION_CORES`, oracle `attention_time.core_attention`), the output layer and
MTP projection (`stage_time.LAYER_TIMES`' ("heads", ...) entries, oracles
`output_time.output_layer_time` and `output_time.mtp_projection`) and the kinds without experts
(its `_dense_memo_key` entries, oracle `layer_time.layer_time` without a memo). Each memo is
first filled by every layout of the problem, so a key that left out something its value reads
would hand one layout another's value; then each value is checked bit for bit against the
function computed afresh."""

from __future__ import annotations

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import (
    attention_time,
    host_floor,
    layer_parts,
    layer_time,
    output_time,
    stage_time,
)
from planner.model.job_memo import JobMemo
from tests.search.brute_force import MEMO_JOBS, memo_problem


def _warm(job: Job, lays: list[Layout]) -> list[stage_time.LayoutTimes]:
    """Every memo forgotten, then each layout's times (filling the memos under them)."""
    JobMemo.forget_all()
    return [stage_time.layout_times(job, lay) for lay in lays]


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_attention_kernels_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = memo_problem(name)
    _warm(job, lays)
    memo = layer_parts.ATTENTION_CORES.of(job)
    assert 0 < len(memo) < len(layer_parts.PARTS.of(job))  # layouts share kernels
    for (gpu, t, s, tp, efficiency, window), core in memo.items():
        assert core == attention_time.core_attention(job, gpu, t, s, tp, efficiency, window)


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_output_layers_from_the_memo_are_computed_afresh(name: str) -> None:
    job, lays = memo_problem(name)
    warm = _warm(job, lays)
    memo = stage_time.LAYER_TIMES.of(job)
    heads = [k for k in memo if k[0] == stage_time._HEADS]
    assert 0 < len(heads) < len({stage_time._memo_key(lay) for lay in lays})  # shared
    gpu = layer_time.gpu_of(job)
    for lay, t in zip(lays, warm, strict=True):
        key = stage_time._layer_key(lay)
        assert t.out == output_time.output_layer_time(job, key, gpu), lay.describe()
        if job.arch.mtp_num_layers:
            assert t.mtp_proj == output_time.mtp_projection(job, key, gpu), lay.describe()


def test_clearing_the_layer_times_clears_the_attention_kernels() -> None:
    """A caller that clears LAYER_TIMES after setting a constant (benchmarks/fit_constants.py)
    never reads an attention kernel made with the old one."""
    job, lays = memo_problem("mixtral-64xh100")
    _warm(job, lays[:20])
    assert layer_parts.ATTENTION_CORES.of(job)
    stage_time.LAYER_TIMES.clear()
    assert not layer_parts.ATTENTION_CORES.of(job)


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_dense_layers_from_the_memo_are_computed_afresh(name: str) -> None:
    """`LAYER_TIMES`' entries of the kinds without experts (`stage_time._dense_memo_key`, a flat
    tuple) are keyed as their dense layouts (`stage_time._dense_key`) compare, and each equals
    the layer timed afresh (`layer_time.layer_time` without a memo, floored by its issue)."""
    job, lays = memo_problem(name)
    warm = _warm(job, lays)
    gpu = layer_time.gpu_of(job)
    keys = list(dict.fromkeys(map(stage_time._layer_key, lays)))
    dense = [k for k in job.arch.kinds if not k.moe]
    assert dense
    for kind in dense:
        by_tuple = {stage_time._dense_memo_key(kind, k): stage_time._dense_key(k) for k in keys}
        assert len(by_tuple) == len(set(map(stage_time._dense_key, keys))) < len(keys)
    j = job.arch.kinds.index(dense[0])
    for lay, t in zip(lays, warm, strict=True):
        key = stage_time._dense_key(stage_time._layer_key(lay))
        one = layer_time.layer_time(job, key, gpu, dense[0])
        assert t.layers[j] == host_floor.issued_layer(one, job, key, dense[0]), lay.describe()
