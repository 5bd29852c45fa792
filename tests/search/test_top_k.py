"""planner.search: the certified top K equals a brute-force enumeration under the same exact model
(tests/search/brute_force.py, which shares none of the search's pruning), the search enumerates
exactly the reference's space, and ties rank the simpler layout first."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from planner.inputs.layout import Layout
from planner.model import cost, memory
from planner.search import rules
from planner.search import space as space_mod
from planner.search import top_k as search
from planner.search.space import Space
from planner.search.top_k import Candidate
from tests.search.brute_force import (
    PROBLEMS,
    TOP_K,
    layouts_of,
    make_job,
    reference_top,
    searched,
    variants_of,
)


@pytest.fixture(scope="module")
def references() -> dict[str, list[Candidate]]:
    return {name: reference_top(*PROBLEMS[name], variants=variants_of(name)) for name in PROBLEMS}


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_top_k_equals_brute_force(name: str, references: dict[str, list[Candidate]]) -> None:
    job, space = PROBLEMS[name]
    ref = references[name]
    res = searched(name)
    assert len(ref) == TOP_K, f"{name}: the reference found only {len(ref)} layouts"
    got = [c.layout for c in res.candidates]
    want = [c.layout for c in ref]
    assert got == want, "\n".join(
        [f"{name}: search vs brute force"]
        + [
            f"  {g.describe():60} {gc.step_time:.6f} | {w.describe():60} {wc.step_time:.6f}"
            for g, gc, w, wc in zip(got, res.candidates, want, ref, strict=False)
        ]
    )
    for g, w in zip(res.candidates, ref, strict=True):
        assert g.step_time == w.step_time
        assert g.memory.peak == w.memory.peak
        assert g.memory.fits
    assert res.scored <= res.space_size
    # K = 1 is the head of the same ranking
    assert [c.layout for c in search.search(job, space, top_k=1).candidates] == want[:1]


def test_an_overlap_twin_that_takes_more_memory_does_not_hide_its_layout() -> None:
    """Deeper than TOP_K on the EP-overlap problem: the search drops a layout whose EP-overlap
    twin fits and is faster only where the twin also takes no more memory, as the brute force
    (`_overlap_twin_dominates`): the overlap's warm-up holds one more micro-batch in flight, so
    the twin can peak higher (tp1 pp4 dp8 ep4 vpp8 with deepep: 76.8 against 75.8 GB), and the
    layout without it is then an alternative of its own. Oracle: the brute force at k = 10."""
    job, space = PROBLEMS["mixtral-ep-overlap"]
    ref = reference_top(job, space, 10, variants=variants_of("mixtral-ep-overlap"))
    got = search.search(job, space, top_k=10).candidates
    assert [c.layout for c in got] == [c.layout for c in ref]


def test_problems_exercise_the_space(references: dict[str, list[Candidate]]) -> None:
    """The problems are not trivial: somewhere the top K holds pipeline, CP, EP, uneven splits,
    full recompute, several ZeRO stages and the shared PCIe link's floor (so a wrong bound or
    dominance rule would show)."""
    tops = [c.layout for cands in references.values() for c in cands]
    assert any(lay.pp > 1 for lay in tops)
    assert any(lay.ep > 1 for lay in tops)
    assert any(lay.ep_comm_overlap for lay in tops)
    assert any(lay.pipeline_layers is not None for lay in tops)
    assert len({lay.zero_stage for lay in tops}) >= 2
    # the TP overlap turned off where its SM margin costs more than it hides (not for memory)
    assert any(lay.sequence_parallel and not lay.tp_comm_overlap for lay in tops)
    # 24 GiB: nothing fits without a memory saver (recompute or offloading), anywhere in the
    # space, and the savers that fit include uniform full recompute, block recompute and a
    # selective module set
    job, space = PROBLEMS["llama8b-tiny-memory"]
    every = reference_top(job, space, k=10**6, variants=variants_of("llama8b-tiny-memory"))
    assert every and all(
        c.layout.recompute != "none"
        or c.layout.cpu_offloading_num_layers
        or c.layout.offload_modules
        for c in every
    )
    kinds = {(c.layout.recompute, c.layout.recompute_method) for c in every}
    assert {("full", "uniform"), ("full", "block"), ("selective", "uniform")} <= kinds
    pinned = references["llama8b-pinned"]
    assert all(c.layout.tp == 2 and c.layout.pp <= 2 and c.layout.zero_stage == 1 for c in pinned)
    assert all(c.layout.recompute in ("none", "full") for c in pinned)
    assert any(c.layout.recompute == "selective" for c in references["llama8b-tight-selective"])
    # on PCIe-only GPUs the shared link sets some of the top layouts' step times
    link = references["llama70b-l40s-shared-link"]
    assert any(c.performance.breakdown.link_shared > 0 for c in link)


def test_nothing_fits_matches_brute_force() -> None:
    job = make_job("llama3.1-70b", "h100-sxm-80gb", 8, 8192, 64, memory_gib=16)
    space = Space()
    assert reference_top(job, space) == []
    res = search.search(job, space, top_k=TOP_K)
    assert res.candidates == []
    assert res.space_size > 0
    assert res.rejected["memory"] > 0


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_search_enumerates_the_whole_space(name: str) -> None:
    """The search's structures and options are exactly the reference's layouts (every vpp with
    a split included, not only the divisors of layers / pp), and space_size counts them times the
    (zero, recompute) variants searched."""
    job, space = PROBLEMS[name]
    ref = set(layouts_of(name))
    got: set[Layout] = set()
    for s in space_mod.structures(job, space, Counter()):
        for mbs, vpp, split in space_mod.options(job, space, s):
            got.update(b.layout for b in space_mod.bases(job, s, mbs, vpp, split, space))
    assert got == ref, (sorted(ref - got, key=str)[:3], sorted(got - ref, key=str)[:3])
    assert searched(name).space_size == sum(len(v) for v in variants_of(name).values())


def test_rank_key_prefers_simpler_on_ties() -> None:
    job, _ = PROBLEMS["llama8b-8xh100-s8192"]
    a = Layout(tp=2, dp=4, sequence_parallel=True, micro_batch_size=1)
    b = a.with_(zero_stage=2)
    perf = cost.estimate(job, a)
    rep = memory.estimate(job, a)
    ca, cb = Candidate(a, rep, perf), Candidate(b, rep, perf)
    assert sorted([cb, ca], key=search.rank_key) == [ca, cb]
    assert search.simplicity(a) < search.simplicity(b)
    assert math.isfinite(perf.step_time_s)


@pytest.mark.parametrize(
    ("model", "gpu", "gpus", "seq", "gbs", "zeros", "training"),
    [
        # a higher ZeRO stage faster than a lower one: ZeRO 3 above ZeRO 0 (its whole optimizer
        # step), and ZeRO 3 above ZeRO 1 at one micro-batch (its per-layer gathers hide where
        # ZeRO 1's last buckets show)
        ("gemma2-2b", "a100-sxm-80gb", 16, 1024, 64, (0, 3), {}),
        ("gpt-mcore-1.7b", "mi300x-192gb", 64, 2048, 32, (1, 2, 3), {}),
        # the CPU-offloaded optimizer runs at ZeRO >= 1 only: never a ZeRO 0 row
        ("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 32, (0, 2), {"optimizer_offload_fraction": 0.5}),
    ],
)
def test_fuzzed_problems_equal_brute_force(
    model: str,
    gpu: str,
    gpus: int,
    seq: int,
    gbs: int,
    zeros: tuple[int, ...],
    training: dict[str, Any],
) -> None:
    """Problems a random-problem fuzz against the brute force found the search wrong on: it
    stopped at the first ZeRO stage that fit without a rung (assuming no higher stage is
    faster) and missed faster rows, and it returned ZeRO 0 rows with the CPU-offloaded
    optimizer, which the rules refuse (suggest exited 2)."""
    job = make_job(model, gpu, gpus, seq, gbs)
    job = replace(job, **training)
    space = Space(zero_stages=zeros, pp=space_mod.Bound(1, 1) if gpus == 64 else space_mod.Bound())
    ref = reference_top(job, space)
    res = search.search(job, space)
    assert [c.layout for c in res.candidates] == [c.layout for c in ref]
    assert all(not rules.violations(job, c.layout) for c in res.candidates)
