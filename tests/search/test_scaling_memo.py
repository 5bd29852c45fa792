"""The layer-time memo's keys (`planner.model.stage_time`): `planner scale` shares it across GPU
counts (`scaling.job_at`), and layouts that differ only in their experts share the dense layer's
time; what is read through either is bit for bit what is computed afresh."""

from __future__ import annotations

import itertools

from planner.inputs.layout import Layout
from planner.model import cost, memory
from planner.model.job_memo import JobMemo
from planner.model.stage_time import LAYER_TIMES, layout_times
from planner.search.scaling import job_at
from tests.search.brute_force import make_job

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


def test_dense_layer_time_reads_no_expert_field() -> None:
    """The layer-time memo shares the dense layer's time across layouts that differ only in
    their experts (`stage_time._dense_key`): over MoE jobs with dense layers (DeepSeek-V3's
    first three), every expert degree, expert TP, dispatcher and recompute, the dense layer's
    time is bit for bit that of the layout with ep 1 and the default dispatcher."""
    from planner.inputs.hybrid import DENSE
    from planner.model.host_floor import issued_layer
    from planner.model.layer_time import gpu_of, layer_time
    from planner.model.stage_time import _dense_key, _layer_key

    for job in (
        make_job("deepseek-v3", "h800-sxm-80gb", 256, 4096, 1024),
        make_job("deepseek-v3", "h100-sxm-80gb", 256, 4096, 1024, precision="fp8"),
    ):
        gpu = gpu_of(job)
        for tp, cp, ep, etp, disp, rc, mbs in itertools.product(
            (1, 2, 8), (1, 2), (1, 8, 64), (None, 1), ("alltoall", "flex", "allgather"),
            ("none", "selective", "full"), (1, 2),
        ):  # fmt: skip
            lay = Layout(
                tp=tp, pp=1, dp=256 // (tp * cp), cp=cp, ep=ep, etp=etp, sequence_parallel=tp > 1,
                micro_batch_size=mbs, recompute=rc, moe_token_dispatcher_type=disp,
                recompute_modules=("mla_up_proj", "mlp"),
            )  # fmt: skip
            key = _layer_key(lay)
            assert layer_time(job, key, gpu, False) == layer_time(job, _dense_key(key), gpu, False)
            # through the memo, warm from the layouts before (another expert setting's entry)
            direct = issued_layer(layer_time(job, key, gpu, False), job, key, DENSE)
            assert layout_times(job, lay).dense == direct


def test_offloading_fields_reach_no_layer_time() -> None:
    """The layer-time memo keys layouts without their offloading (`stage_time._FIXED`): every
    kind's layer time, as computed afresh (`layer_time` and its host floor, output layer
    included), is bit for bit the same whatever number of layers or which modules are offloaded
    (the stage charges the transfers: `offload_exposed`, `fine_offload_exposed`)."""
    from planner.model.host_floor import issued_layer
    from planner.model.layer_time import gpu_of, layer_time
    from planner.model.output_time import output_layer_time

    job = make_job("deepseek-v3", "h100-sxm-80gb", 256, 4096, 1024)
    gpu = gpu_of(job)
    base = Layout(tp=2, pp=4, dp=32, ep=8, sequence_parallel=True, micro_batch_size=1)

    def times(lay: Layout) -> tuple[object, ...]:
        kinds = job.arch.kinds
        each = tuple(issued_layer(layer_time(job, lay, gpu, k), job, lay, k) for k in kinds)
        return (*each, output_layer_time(job, lay, gpu))

    plain = times(base)
    for n, mods in itertools.product((0, 3, 14), ((), ("core_attn", "attn_proj"), ("moe_act",))):
        lay = base.with_(cpu_offloading_num_layers=n, offload_modules=mods)
        assert times(lay) == plain
