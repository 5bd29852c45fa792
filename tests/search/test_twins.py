"""planner.search.twins: layouts that only trade cp for micro-batch size at the same step time fold
into one row, and the search (`top_k.search(..., fold_twins=True)`, through `search_rows`) still
gives the exact top K distinct rows, each with all its twins.

Oracles: hand-made candidates whose keys and times are chosen so the expected rows can be read off
by eye (comments say why each one joins or starts a row); and, for real jobs, folding the whole
ranking (`top_k.search` asked for more layouts than the space holds, so it returns every layout it
ranks, which tests/search/test_top_k.py proves against brute force) and keeping the first K rows.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from planner.inputs.job_request import JobArgs, load_job
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.memory import MemoryReport, StageMemory
from planner.model.performance import Performance, StepBreakdown
from planner.search import top_k
from planner.search.space import Bound, Space
from planner.search.suggest import search_rows
from planner.search.top_k import Candidate
from planner.search.twins import TWIN_REL_TOL, Row, fold, same_time, twin_key

ZERO = StepBreakdown(**{f.name: 0.0 for f in fields(StepBreakdown)})


def cand(t: float, **lay: object) -> Candidate:
    """A candidate with step time t and a layout of the given fields (tp 2, 8 GPUs by default)."""
    layout = Layout(**{"tp": 2, "dp": 4, **lay})  # type: ignore[arg-type]
    perf = Performance(ZERO, t, 0.0, 0.0, 0.0, 0.0, 0.0)
    mem = MemoryReport((StageMemory(0, 32, 1.0, 1.0, 1.0, 1.0, 1.0),), 10.0, 10.0, 3.0)
    return Candidate(layout, mem, perf)


def shape(rows: list[Row]) -> list[tuple[tuple[int, int, int], ...]]:
    """Each row as its (cp, dp, mbs) triples, the row's own first."""
    return [
        tuple(
            (c.layout.cp, c.layout.dp, c.layout.micro_batch_size)
            for c in (r.candidate, *r.equivalents)
        )
        for r in rows
    ]


def test_twin_key_keeps_dp_times_cp_and_mbs_per_cp() -> None:
    # dp x cp = 4 and mbs / cp = 1 for all three: twins
    a = Layout(tp=2, dp=4, cp=1, micro_batch_size=1)
    b = Layout(tp=2, dp=2, cp=2, micro_batch_size=2)
    c = Layout(tp=2, dp=1, cp=4, micro_batch_size=4)
    assert twin_key(a) == twin_key(b) == twin_key(c)
    # mbs / cp = 1/2 instead of 1: each rank holds half the tokens per micro-batch
    assert twin_key(Layout(tp=2, dp=2, cp=2, micro_batch_size=1)) != twin_key(a)
    # dp x cp = 2: the reduction group and the micro-batch count differ
    assert twin_key(Layout(tp=4, dp=1, cp=2, micro_batch_size=2)) != twin_key(a)
    # any other field differs: not a twin (here ZeRO and recompute)
    assert twin_key(b.with_(zero_stage=2)) != twin_key(a)
    assert twin_key(b.with_(recompute="full")) != twin_key(a)


def test_same_time_is_relative_1e_9() -> None:
    assert TWIN_REL_TOL == 1e-9
    assert same_time(10.0, 10.0 * (1 + 0.5e-9))  # 5 ns in 10 s
    assert not same_time(10.0, 10.0 * (1 + 2e-9))  # 20 ns in 10 s
    assert not same_time(1.0, 1.000001)  # a microsecond in a second is a real difference


def test_fold_hand_made_candidates() -> None:
    ranked = [
        cand(1.0, dp=4, cp=1, micro_batch_size=1),  # row 1
        cand(1.0, dp=4, cp=1, micro_batch_size=1, zero_stage=2),  # other key: row 2
        cand(1.0, dp=2, cp=2, micro_batch_size=2),  # twin of row 1, after a stranger
        cand(1.0, dp=2, cp=2, micro_batch_size=1),  # mbs / cp = 1/2: row 3
        cand(1.0 + 1e-6, dp=1, cp=4, micro_batch_size=4),  # row 1's key, 1 us slower: row 4
        cand(1.0 + 1e-6, dp=1, cp=4, micro_batch_size=2),  # row 3's key, 1 us slower: row 5
        cand(1.0 + 1e-6 + 1e-15, dp=4, cp=1, micro_batch_size=1),  # row 4's time: its twin
    ]
    rows = fold(ranked)
    assert shape(rows) == [
        ((1, 4, 1), (2, 2, 2)),
        ((1, 4, 1),),
        ((2, 2, 1),),
        ((4, 1, 4), (1, 4, 1)),
        ((4, 1, 2),),
    ]
    assert rows[1].candidate.layout.zero_stage == 2
    # every candidate lands in exactly one row, and rows keep the ranked order
    flat = [c for r in rows for c in (r.candidate, *r.equivalents)]
    assert sorted(map(id, flat)) == sorted(map(id, ranked))
    assert [ranked.index(r.candidate) for r in rows] == [0, 1, 3, 4, 5]
    assert fold([]) == []


def _job(*args: object) -> Job:
    return load_job(None, JobArgs(*args))[0]  # type: ignore[arg-type]


JOBS = {
    "default": (),
    "8b-32k": ("llama3.1-8b", "h100-sxm-80gb", 16, None, 32768, 64),
    "8b-64": ("llama3.1-8b", "h100-sxm-80gb", 64),
}


@pytest.fixture(scope="module")
def whole() -> dict[str, tuple[Job, list[Row]]]:
    """Each job and the fold of its whole ranking."""
    out = {}
    for name, args in JOBS.items():
        job = _job(*args)
        everything = top_k.search(job, Space(), 10**6).candidates
        assert len(everything) < 10**6
        out[name] = (job, fold(everything))
    return out


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("name", list(JOBS))
def test_search_rows_are_the_first_rows_of_the_whole_ranking(
    name: str, k: int, whole: dict[str, tuple[Job, list[Row]]]
) -> None:
    job, reference = whole[name]
    res, rows = search_rows(job, Space(), k)
    assert len(rows) == k
    assert shape(rows) == shape(reference[:k])
    for got, want in zip(rows, reference, strict=False):
        assert got.candidate.layout == want.candidate.layout
        assert [c.layout for c in got.equivalents] == [c.layout for c in want.equivalents]
    assert [c.layout for c in res.candidates] == [r.candidate.layout for r in rows]


def test_these_jobs_have_twins(whole: dict[str, tuple[Job, list[Row]]]) -> None:
    """The jobs above exercise folding: twins in their top 5, and in 8b-64 at tp 2 a first row of
    three (cp 1, 2, 4 at mbs 2, 4, 8; 128 sequences of 8k on 64 GPUs): at K = 1 the search must
    keep and certify all three, where without folding it keeps the first 4 x K layouts whatever
    they are."""
    for _, rows in whole.values():
        assert any(r.equivalents for r in rows[:5])
    job = whole["8b-64"][0]
    tp2 = fold(top_k.search(job, Space(tp=Bound(2, 2)), 10**6).candidates)
    assert shape(tp2[:1]) == [((1, 32, 2), (2, 16, 4), (4, 8, 8))]
    _, rows = search_rows(job, Space(tp=Bound(2, 2)), 1)
    assert shape(rows) == shape(tp2[:1])


def test_rows_by_cost_are_distinct_and_ordered() -> None:
    job = _job(*JOBS["8b-32k"])
    _, rows = search_rows(job, Space(), 5, objective="cost")
    keys = [(twin_key(r.candidate.layout), r.candidate.step_time) for r in rows]
    assert len(set(keys)) == 5
    times = [r.candidate.step_time for r in rows]
    assert times == sorted(times)  # cost per token is the step time times a constant here
    for r in rows:
        assert all(t.step_time == r.candidate.step_time for t in r.equivalents)
