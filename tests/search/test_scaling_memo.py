"""`planner scale` shares the layer-time memo across GPU counts (`scaling.job_at`): the layer
times of a job at another size, read through the shared memo, are bit for bit those computed
afresh for that size alone."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.model import cost, memory
from planner.model.job_memo import JobMemo
from planner.model.stage_time import LAYER_TIMES, layout_times
from planner.search.scaling import job_at
from tests.search.test_top_k import make_job

LAYOUTS = (
    Layout(tp=8, pp=4, dp=2, cp=1, sequence_parallel=True, micro_batch_size=1),
    Layout(tp=4, pp=2, dp=4, cp=2, sequence_parallel=True, micro_batch_size=2, vpp=2),
    Layout(tp=2, pp=1, dp=32, cp=1, sequence_parallel=True, micro_batch_size=1, zero_stage=3),
)


def test_sizes_share_the_layer_times_bit_for_bit() -> None:
    job = make_job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 256)
    for n in (64, 512, 4096):
        for lay in LAYOUTS:
            lay = lay.with_(dp=n // (lay.tp * lay.cp * lay.pp))
            JobMemo.forget_all()
            alone = job_at(job, n)
            fresh = (layout_times(alone, lay), cost.estimate(alone, lay).step_time_s)
            fresh_peak = memory.estimate(alone, lay).peak
            JobMemo.forget_all()
            for warm in (64, 512, 4096):  # fill the shared memo at other sizes first
                other = job_at(job, warm)
                layout_times(other, lay.with_(dp=warm // (lay.tp * lay.cp * lay.pp)))
            shared = job_at(job, n)
            assert LAYER_TIMES.of(shared) is LAYER_TIMES.of(job)
            assert (layout_times(shared, lay), cost.estimate(shared, lay).step_time_s) == fresh
            assert memory.estimate(shared, lay).peak == fresh_peak


def test_shared_memo_forgets_past_its_jobs() -> None:
    """Sizes that share one memo count once against its limit of jobs."""
    memo: JobMemo[int, int] = JobMemo(jobs=2)
    job = make_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64)
    memo.of(job)[1] = 1
    for n in (16, 32, 64, 128):
        bigger = job_at(job, n)
        memo.share(bigger, job)
        assert memo.of(bigger) is memo.of(job) and memo.of(job)[1] == 1
