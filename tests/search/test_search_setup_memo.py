"""What the search computes once or in part instead of whole, each against its oracle: a
structure's bases made with one `space.ShapeBases` for all its shapes are `space.bases` made
afresh per shape; `structure_queue.layouts_in` is the count of every base's rungs times its
ZeRO stages, base by base; `space.each_structure` yields `space.structures`, rejections and
all; and `StageRungs.fits` on a single rung, which asks the stage of its hot rank alone first
(`StageRungs._hot_stage`), decides as the whole estimate (`memory.estimate`) does, and does not
ask the estimate where that stage is over the capacity. The search's answers themselves:
tests/search/test_top_k.py's brute force."""

from __future__ import annotations

from collections import Counter

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import memory
from planner.search import rungs
from planner.search import space as space_mod
from planner.search import stage_rungs as stage_rungs_mod
from planner.search.space import Space, Structure
from planner.search.stage_rungs import StageRungs
from planner.search.structure_queue import layouts_in
from tests.search.brute_force import PROBLEMS, make_job, sample_layouts

NAMES = [
    "mixtral-8x7b-16xh100",
    "mixtral-ep-overlap",
    "sc21-1.7b-32xa100",
    "llama8b-fp8",
    "llama8b-tiny-memory",
]


@pytest.mark.parametrize("name", NAMES)
def test_shape_bases_are_bases_afresh(name: str) -> None:
    """One `ShapeBases` per structure, asked for every option, gives `space.bases` of each,
    made on its own (the structure's dispatched layouts made once, the shape's fields set on
    them), rungs and all."""
    job, space = PROBLEMS[name]
    checked = 0
    for s in space_mod.structures(job, space, Counter()):
        shapes = space_mod.ShapeBases(job, space, s)
        for mbs, vpp, split in space_mod.options(job, space, s):
            assert shapes(mbs, vpp, split) == space_mod.bases(job, s, mbs, vpp, split, space)
            checked += 1
    assert checked > 0


def _count(job: Job, space: Space, s: Structure) -> int:
    """`layouts_in`'s oracle: over every option, each base's ZeRO stages times its single rungs
    and each ladder's sizes, counted base by base."""
    total = 0
    for mbs, vpp, split in space_mod.options(job, space, s):
        for b in space_mod.bases(job, s, mbs, vpp, split, space):
            per_zero = len(b.single) + sum(ld.hi - ld.lo + 1 for ld in b.ladders)
            total += len(space_mod.zero_stages(job, space, b.layout)) * per_zero
    return total


@pytest.mark.parametrize("name", NAMES)
def test_layouts_in_counts_every_base(name: str) -> None:
    job, space = PROBLEMS[name]
    counted = 0
    for s in space_mod.structures(job, space, Counter()):
        opts = space_mod.options(job, space, s)
        got = layouts_in(job, space, s, opts)
        assert got == _count(job, space, s), s
        counted += got
    assert counted > 0


@pytest.mark.parametrize("name", NAMES)
def test_each_structure_is_structures(name: str) -> None:
    job, space = PROBLEMS[name]
    whole: Counter[str] = Counter()
    one_by_one: Counter[str] = Counter()
    assert list(space_mod.each_structure(job, space, one_by_one)) == space_mod.structures(
        job, space, whole
    )
    assert one_by_one == whole


def _deepseek() -> tuple[Job, Space, list[Layout]]:
    """DeepSeek-V3 on 512 H800 at pp 16 (its MTP depth on the last rank, dense first layers,
    fine-grained offloading's rungs), with TP (and its overlap) and without: bases many of whose
    rungs do not fit."""
    job = make_job("deepseek-v3", "h800-sxm-80gb", 512, 4096, 512)
    space = Space()
    lays = []
    for s in (Structure(1, 1, 16, 32, 32, 1), Structure(2, 1, 16, 16, 16, 2)):
        for mbs, vpp, split in space_mod.options(job, space, s)[::3]:
            lays += [b.layout for b in space_mod.bases(job, s, mbs, vpp, split, space)]
    return job, space, lays[:: max(len(lays) // 12, 1)]


def _cases(name: str) -> tuple[Job, Space, list[Layout]]:
    if name == "deepseek-v3":
        return _deepseek()
    job, space = PROBLEMS[name]
    return job, space, sample_layouts(name, 12)


_ESTIMATE = memory.estimate
"""The memory model's estimate, as imported (the tests count the search's calls of it)."""


class _Counting:
    """`memory.estimate`, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: object, **kwargs: object) -> memory.MemoryReport:
        self.calls += 1
        return _ESTIMATE(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["deepseek-v3", "mixtral-8x7b-16xh100", "llama8b-tiny-memory"])
def test_hot_stage_decides_as_the_estimate(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every single rung of every ZeRO stage of sampled bases, asked in the search's order
    (leaner first, `rungs.leaner_first`) of one `StageRungs`: it fits exactly where
    `memory.estimate` says it fits (the oracle, asked afresh), and on DeepSeek-V3 most rungs that
    do not fit are found so without an estimate of their own."""
    job, space, bases = _cases(name)
    counting = _Counting()
    monkeypatch.setattr(stage_rungs_mod.memory, "estimate", counting)
    asked = misfits = 0
    for base in bases:
        single = rungs.rung_tuples(job, base, space.recompute, space.offload)[0]
        for z in space_mod.zero_stages(job, space, base):
            zbase = base.with_(zero_stage=z)
            stage = StageRungs(job, zbase, space.headroom_pct, ("test",), {}, Counter())
            for r in rungs.leaner_first(single):
                lay = r.on(zbase)
                want = _ESTIMATE(job, lay, space.headroom_pct, all_stages=False).fits
                assert (stage.fits(r) is not None) == want, lay.describe()
                asked += 1
                misfits += not want
    assert asked > 0
    if name == "deepseek-v3":
        assert misfits > 0
        assert counting.calls < asked - misfits / 2, (counting.calls, asked, misfits)


def test_a_rung_over_on_its_hot_stage_is_not_estimated(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3 on 512 H800 at tp 1, pp 16, ep 32 without memory savers: rank 0's stage
    alone (`memory.stage_memory`) is over the capacity, and `StageRungs.fits` says it does not
    fit without asking `memory.estimate` (which says so too)."""
    job = make_job("deepseek-v3", "h800-sxm-80gb", 512, 4096, 512)
    space = Space()
    s = Structure(1, 1, 16, 32, 32, 1)
    mbs, vpp, split = space_mod.options(job, space, s)[-1]
    base = space_mod.bases(job, s, mbs, vpp, split, space)[0].layout.with_(zero_stage=1)
    lay = rungs.NONE.on(base)
    chunks = lay.chunk_layers(job.arch.num_layers)
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    assert memory.stage_memory(job, lay, 0, chunks[0]).total > capacity
    assert not memory.estimate(job, lay, space.headroom_pct, all_stages=False).fits
    counting = _Counting()
    monkeypatch.setattr(stage_rungs_mod.memory, "estimate", counting)
    rejected: Counter[str] = Counter()
    stage = StageRungs(job, base, space.headroom_pct, ("test",), {}, rejected)
    assert stage.fits(rungs.NONE) is None
    assert counting.calls == 0
    assert rejected["memory"] == 1


@pytest.mark.parametrize("name", ["deepseek-v3", "mixtral-8x7b-16xh100"])
def test_hot_stage_is_not_computed_again(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a single rung's hot stage is not over the capacity, the estimate takes that stage as
    its own (`memory.estimate`'s `known`): `memory.stage_memory` runs at most once per layout and
    rank inside `StageRungs.fits`, and the report is the one `memory.estimate` makes afresh (the
    oracle, equal field for field)."""
    job, space, bases = _cases(name)
    real = memory.stage_memory
    seen: list[tuple[Layout, int]] = []

    def counted(job: Job, lay: Layout, rank: int, *args: object, **kw: object) -> object:
        seen.append((lay, rank))
        return real(job, lay, rank, *args, **kw)  # type: ignore[arg-type]

    fitted = 0
    for base in bases:
        single = rungs.rung_tuples(job, base, space.recompute, space.offload)[0]
        for z in space_mod.zero_stages(job, space, base):
            zbase = base.with_(zero_stage=z)
            stage = StageRungs(job, zbase, space.headroom_pct, ("test",), {}, Counter())
            for r in rungs.leaner_first(single):
                seen.clear()
                monkeypatch.setattr(memory, "stage_memory", counted)
                rep = stage.fits(r)
                monkeypatch.setattr(memory, "stage_memory", real)
                assert len(seen) == len(set(seen)), r.on(zbase).describe()
                want = memory.estimate(job, r.on(zbase), space.headroom_pct, all_stages=False)
                assert rep == (want if want.fits else None)
                fitted += rep is not None
    assert fitted > 0
