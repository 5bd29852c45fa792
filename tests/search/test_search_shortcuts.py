"""The suggest search's shortcuts around the exact model, each against its oracle over the
brute-forced problems of tests/search/brute_force.py: the memory premises that spare a rung's
estimate (`StageRungs.fits`: a base with Megatron's EP overlap holds no less than its twin
without it, a rung with the base's TP overlap no less than without it) against the memory model
on both layouts, rank by rank; a shape's floors computed in one pass with the EP-overlap twins'
(`bound.floors_of`) against each layout's own pass, bit for bit, and their EP-overlap spares
against the ranks' mixes by hand; the remembered TP floor share
against computing it; and the search with those memory shortcuts against the search without
them, answer for answer (the answers themselves: tests/search/test_top_k.py's brute force)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.userbuffers import slot_map
from planner.model import comms, cost, memory, tp_overlap
from planner.model.rank_mix import rank_mix
from planner.model.stage_time import layout_times
from planner.search import bound as bounds
from planner.search import rungs, stage_rungs, top_k
from planner.search import space as space_mod
from planner.search.rungs import NONE
from tests.search.brute_force import PROBLEMS, sample_layouts, top_shapes


def _peaks(name: str, lay: Layout) -> tuple[float, tuple[float, ...]]:
    job, space = PROBLEMS[name]
    rep = memory.estimate(job, lay, space.headroom_pct, all_stages=False)
    return rep.shortfall, tuple(st.total for st in rep.stages)


def _no_less(name: str, more: Layout, less: Layout) -> None:
    short_more, more_stages = _peaks(name, more)
    short_less, less_stages = _peaks(name, less)
    assert short_more >= short_less, (more.describe(), short_more, short_less)
    assert all(a >= b for a, b in zip(more_stages, less_stages, strict=True)), more.describe()


EP_PROBLEMS = ["mixtral-ep-overlap", "mixtral-8x7b-16xh100", "mixtral-expert-tp"]


@pytest.mark.parametrize("name", EP_PROBLEMS)
def test_ep_overlap_holds_no_less_than_its_twin_with_every_rung(name: str) -> None:
    job, space = PROBLEMS[name]
    checked = 0
    for lay in sample_layouts(name, 30):
        if lay.ep == 1 or lay.ep_comm_overlap:
            continue
        for z in space_mod.zero_stages(job, space, lay):
            for rung in rungs.every(job, lay, space.recompute, space.offload)[::2]:
                plain = rung.on(lay.with_(zero_stage=z))
                _no_less(name, plain.with_(ep_comm_overlap=True), plain)
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", ["llama8b-16xh100-s4096", "mixtral-expert-tp", "llama8b-fp8"])
def test_tp_overlap_holds_no_less_than_without_it_with_every_rung(name: str) -> None:
    job, space = PROBLEMS[name]
    checked = 0
    for lay in sample_layouts(name, 30):
        if not lay.tp_comm_overlap:
            continue
        for z in space_mod.zero_stages(job, space, lay):
            for rung in rungs.every(job, lay, space.recompute, space.offload):
                if not rung.tp_overlap:
                    continue
                on = rung.on(lay.with_(zero_stage=z))
                _no_less(name, on, rung.without_tp_overlap().on(lay.with_(zero_stage=z)))
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", ["mixtral-ep-overlap", "llama8b-tiny-memory", "mixtral-expert-tp"])
def test_a_shapes_floors_are_each_layouts_own(name: str) -> None:
    """`floors_of` a shape's bases (EP-overlap twins sharing a pass) equals one `_stage_floors`
    pass per base, bit for bit; its spares (`Floors.spare_total`, `spare_worst`) the ranks' by
    hand (`_spares`), nonzero exactly where some base has the EP overlap."""
    job, space = PROBLEMS[name]
    paired = spared = 0
    for _, shapes in top_shapes(job, space):
        for shape in shapes:
            lays = [b.layout for b in shape]
            got = bounds.floors_of(job, lays)
            for lay, f in zip(lays, got, strict=True):
                m, g = bounds._stage_floors(job, lay)
                other = cost.step_overhead_s(job)
                assert (f.micro_batch_size, f.m, f.worst, f.total, f.other) == (
                    lay.micro_batch_size,
                    m,
                    max(g),
                    sum(g),
                    other,
                )
                spares = _spares(job, lay)
                assert f.spare_total == pytest.approx(sum(spares), rel=1e-12)
                # the spare of a rank whose floor is the worst
                assert any(
                    f.spare_worst == pytest.approx(x, rel=1e-12)
                    for x, y in zip(spares, _floors(job, lay), strict=True)
                    if y == pytest.approx(f.worst, rel=1e-12)
                ), lay.describe()
                spared += f.spare_total > 0
            paired += sum(lay.ep_comm_overlap for lay in lays)
    assert paired > 0 or name != "mixtral-ep-overlap"
    assert (spared > 0) == (paired > 0)


def _spares(job: Job, lay: Layout) -> list[float]:
    """Each rank's all-to-all seconds per micro-batch that `stage_time.ep_exposed` charges a
    forward and backward that run alone beyond `stage_time.a2a_floor`, by hand from the ranks'
    layer mixes: (1 - share) x min(all-to-all, compute) with Megatron's EP overlap, else 0."""
    plain = NONE.on(lay)
    t = layout_times(job, plain)
    share = comms.ep_sm_share(job.cluster, plain, job.gemm_sm_margin)
    out = []
    for rank, chunks in enumerate(plain.chunk_layers(job.arch.num_layers)):
        mix, _ = rank_mix(job, plain, rank, chunks, t)
        a2a = sum(n * k.ep for k, n in mix)
        c = sum(n * (k.fwd + k.bwd) for k, n in mix)
        out.append((1 - share) * min(a2a, c) if lay.ep_comm_overlap else 0.0)
    return out


def _floors(job: Job, lay: Layout) -> list[float]:
    """Each rank's floor in rank order (`bound.rank_floors`' terms, as `_stage_floors` sums
    them)."""
    _, floors, tps, cps = bounds.rank_floors(job, NONE.on(lay))
    share = bounds.tp_floor_share(job, lay)
    return [f + share * tp + cp for f, tp, cp in zip(floors, tps, cps, strict=True)]


@pytest.mark.parametrize("name", ["llama8b-16xh100-s4096", "mixtral-expert-tp"])
def test_tp_floor_share_is_remembered_as_computed(name: str) -> None:
    job, _ = PROBLEMS[name]
    for lay in sample_layouts(name, 20):
        for on in (False, True):
            one = lay.with_(tp_comm_overlap=on and lay.sequence_parallel)
            if one.tp_comm_overlap and one.tp > 1:
                slots = slot_map(job.tp_overlap_cfg)
                want = tp_overlap.floor_share(job.cluster, one.tp, slots, job.gemm_sm_margin)
            else:
                want = comms.sm_share(job.cluster, job.gemm_sm_margin)
            assert bounds.tp_floor_share(job, one) == want
            assert bounds.tp_floor_share(job, one) == want


@pytest.mark.parametrize(
    "name",
    ["mixtral-ep-overlap", "llama8b-tiny-memory", "qwen7b-small-memory", "mixtral-forced-balance"],
)
def test_memory_shortcuts_change_no_answer(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search with the twin's and the TP overlap's failures taken as this rung's gives the
    answer of the search that estimates every rung it asks about, with fewer estimates."""
    job, space = PROBLEMS[name]
    estimates = Counter[str]()
    inner = memory.estimate

    def counted(*args: Any, **kwargs: Any) -> memory.MemoryReport:
        estimates[mode] += 1
        return inner(*args, **kwargs)

    monkeypatch.setattr(stage_rungs.memory, "estimate", counted)
    mode = "shortcuts"
    fast = top_k.search(job, space, top_k=5, fold_twins=True)
    monkeypatch.setattr(stage_rungs.StageRungs, "failed", lambda self, *what: False)
    monkeypatch.setattr(stage_rungs.StageRungs, "_leaner_failed", lambda self, rung: False)
    mode = "every"
    slow = top_k.search(job, space, top_k=5, fold_twins=True)

    def answer(res: top_k.SearchResult) -> list[tuple[Layout, float, tuple[Layout, ...]]]:
        return [
            (r.candidate.layout, r.candidate.step_time, tuple(c.layout for c in r.equivalents))
            for r in res.rows
        ]

    assert answer(fast) == answer(slow)
    assert fast.space_size == slow.space_size
    assert estimates["shortcuts"] <= estimates["every"]
