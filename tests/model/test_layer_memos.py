"""The layer-time memos' keys, each against its uncached computation: a layer's TP charges
(`layer_tp.tp_charges`, shared by layouts that differ only in their experts), a layer's core
(`layer_time._core`, shared by layouts that differ only in their recompute and TP overlap), a
process group's placement (`comms.place`) and a
model's GEMM parts and blocks (`gemm_shapes`). Each memo is first filled with every layout of the
problem, so a key that left out something its value reads would return another layout's value;
then each value is checked bit for bit against the function computed afresh."""

from __future__ import annotations

from functools import cache

import pytest

from planner.inputs.hybrid import ATTENTION, DENSE, MAMBA, MLP, MOE, MOE_WINDOW, LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import (
    comms,
    gemm_shapes,
    layer_keys,
    layer_parts,
    layer_time,
    layer_tp,
    routing_load,
    stage_time,
)
from planner.model.gemm import Gpu
from planner.model.job_memo import JobMemo
from planner.model.layer_time import Layer, gpu_of
from planner.model.layer_traffic import LayerCore
from planner.search import rungs
from planner.search import space as space_mod
from tests.search.brute_force import PROBLEMS, make_job, sample_layouts, search_built_layouts

JOBS: dict[str, tuple[Job, space_mod.Space]] = {
    "deepseek-v2-lite-16xh100": (
        make_job("deepseek-v2-lite", "h100-sxm-80gb", 16, 4096, 256),
        space_mod.Space(),
    ),
    "qwen3-30b-a3b-64xh100": (
        make_job("qwen3-30b-a3b", "h100-sxm-80gb", 64, 4096, 512),
        space_mod.Space(),
    ),
}


@cache
def search_layouts(name: str) -> list[Layout]:
    """About 1,500 layouts as the suggest search builds them (`search_built_layouts`)."""
    job, space = JOBS[name]
    return search_built_layouts(job, space, 1500)


def problem_layouts(name: str) -> tuple[Job, list[Layout]]:
    if name in JOBS:
        return JOBS[name][0], search_layouts(name)
    job, space = PROBLEMS[name]
    lays = sample_layouts(name, 25)
    return job, [r.on(lay) for lay in lays for r in rungs.every(job, lay, space.recompute, True)]


NAMES = [*JOBS, "mixtral-expert-tp", "mixtral-ep-overlap", "llama8b-fp8", "llama70b-mi300x-mesh"]


@pytest.mark.parametrize("name", NAMES)
def test_tp_charges_read_from_the_memo_are_computed_afresh(name: str) -> None:
    """Every layer time (its TP charges from the memo, filled by every layout first) equals the
    layer time with the TP-charge memo emptied before it, field for field."""
    job, lays = problem_layouts(name)
    JobMemo.forget_all()
    gpu = gpu_of(job)
    warm = [[layer_time.layer_time(job, lay, gpu, k) for k in job.arch.kinds] for lay in lays]
    assert len(layer_tp.TP_CHARGES.of(job)) < sum(map(len, warm))  # the memo is shared
    for lay, layers in zip(lays, warm, strict=True):
        for k, warm_layer in zip(job.arch.kinds, layers, strict=True):
            layer_tp.TP_CHARGES.clear()
            assert layer_time.layer_time(job, lay, gpu, k) == warm_layer, (lay.describe(), k)


def _filled_cores(
    name: str,
) -> tuple[Job, list[Layout], Gpu, dict[tuple[object, ...], LayerCore], list[list[Layer]]]:
    """The problem's layouts as `stage_time` asks (one per layer key), every memo forgotten, then
    each layout's layer times with their cores from `LAYER_CORES` (filling it and the parts'
    memo): (job, layouts, GPU, the cores' memo, the layer times)."""
    job, lays = problem_layouts(name)
    lays = list(dict.fromkeys(map(stage_time._layer_key, lays)))
    JobMemo.forget_all()
    gpu = gpu_of(job)
    cores = layer_keys.LAYER_CORES.of(job)
    warm = [
        [layer_time.layer_time(job, lay, gpu, k, cores) for k in job.arch.kinds] for lay in lays
    ]
    return job, lays, gpu, cores, warm


@pytest.mark.parametrize("name", NAMES)
def test_layer_cores_read_from_the_memo_are_computed_afresh(name: str) -> None:
    """Every layer time with its core (`layer_time._core`) from a memo filled by every layout
    first (the layouts share cores across their recompute and TP overlap, and their CP and EP
    traffic per forward pass) equals the layer time computed without the memo, field for
    field."""
    job, lays, gpu, cores, warm = _filled_cores(name)
    kinds = job.arch.kinds
    assert len(cores) < sum(map(len, warm))  # the cores are shared
    for lay, layers in zip(lays, warm, strict=True):
        assert [layer_time.layer_time(job, lay, gpu, k) for k in kinds] == layers, lay.describe()


@pytest.mark.parametrize("name", NAMES)
def test_layer_parts_read_from_the_memo_are_computed_afresh(name: str) -> None:
    """The cores' dispatcher-free parts (`layer_parts.PARTS`, shared by layouts that differ only
    in their token dispatcher), filled by every layout first: each layout's entry equals its
    parts computed afresh, field for field."""
    job, lays, gpu, cores, _ = _filled_cores(name)
    kinds = job.arch.kinds
    memo = layer_parts.PARTS.of(job)
    if job.arch.is_moe and name in JOBS:  # both dispatchers among the layouts: parts shared
        assert len(memo) < len(cores)
    eff = layer_time.ATTENTION_EFFICIENCY
    for lay in lays:
        load = routing_load.step_load(job, lay)
        t = float(lay.micro_batch_size * (job.seq_length // lay.cp))
        for k in kinds:
            got = memo[layer_keys.parts_key(lay, gpu, k, load, layer_time.ATTENTION_EFFICIENCY)]
            assert got == layer_parts.parts(job, lay, gpu, k, t, load, eff), (lay.describe(), k)


def test_clearing_the_layer_times_clears_the_memos_made_with_them() -> None:
    """A caller that clears LAYER_TIMES to recompute them (benchmarks/fit_constants.py after
    setting a constant) never reads a layer core or TP charge made with the old ones."""
    job, lays = problem_layouts("mixtral-expert-tp")
    before = stage_time.layout_times(job, lays[0])
    e = layer_time.ATTENTION_EFFICIENCY
    try:
        layer_time.ATTENTION_EFFICIENCY = e / 2
        stage_time.LAYER_TIMES.clear()
        slower = stage_time.layout_times(job, lays[0])
    finally:
        layer_time.ATTENTION_EFFICIENCY = e
        stage_time.LAYER_TIMES.clear()
    assert slower.dense.fwd > before.dense.fwd
    assert stage_time.layout_times(job, lays[0]) == before
    for memo in (layer_keys.LAYER_CORES, layer_parts.PARTS, layer_tp.TP_CHARGES):
        stage_time.LAYER_TIMES.clear()
        assert not memo.of(job)


@pytest.mark.parametrize("name", NAMES)
def test_placed_groups_are_placed_afresh(name: str) -> None:
    job, _ = problem_layouts(name)
    cluster = job.cluster
    n = cluster.num_gpus
    pairs = [(stride, size) for stride in (1, 2, 4, 8, 16, 64) for size in (1, 2, 3, 4, 8, 16, n)]
    warm = [comms.place(cluster, stride, size) for stride, size in pairs]
    for (stride, size), grp in zip(pairs, warm, strict=True):
        assert comms._place(cluster, stride, size) == grp


def test_placement_follows_the_bus_efficiencies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The efficiencies are in the key: a group placed after they change is placed afresh."""
    job, _ = problem_layouts("mixtral-expert-tp")
    before = comms.place(job.cluster, 1, 8)
    monkeypatch.setattr(comms, "SCALEUP_BUS_EFFICIENCY", comms.SCALEUP_BUS_EFFICIENCY / 2)
    after = comms.place(job.cluster, 1, 8)
    assert after == comms._place(job.cluster, 1, 8)
    assert after.inner.bandwidth == pytest.approx(before.inner.bandwidth / 2)


KINDS: tuple[LayerKind | bool, ...] = (DENSE, MOE, MOE_WINDOW, MAMBA, ATTENTION, MLP, True, False)


@pytest.mark.parametrize("name", NAMES)
def test_gemm_parts_and_blocks_are_the_models_own(name: str) -> None:
    job, _ = problem_layouts(name)
    arch = job.arch
    for kind in KINDS * 2:  # the second pass reads the memo
        k = kind if isinstance(kind, LayerKind) else (MOE if kind else DENSE)
        assert gemm_shapes.linear_gemm_parts(arch, kind) == gemm_shapes._parts_of(arch, k)
        assert gemm_shapes.gemm_blocks(arch, kind) == gemm_shapes._blocks_of(arch, k)
