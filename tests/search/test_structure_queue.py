"""planner.search.structure_queue: each structure queued first on `structure_floor`, refined
(its states, then the floors of its fitting shapes) only when it may come next.

Oracles: the floors themselves, shape by shape and base by base (`bound.floors`, whose
`lower_bound` is what the search queues a structure on once refined: checked below every layout
of its structure by tests/search/test_search_assumptions.py), so `structure_floor` from any one
shape must be below the least of them over every shape; the search's answers with the queue are
checked against the brute force (tests/search/test_top_k.py) and its order of structures against
queueing every structure on its own bound (tests/search/test_search_queue.py)."""

from __future__ import annotations

import pytest

from planner.model import memory
from planner.search import top_k
from planner.search.bound import floors
from planner.search.space import Space
from planner.search.structure_queue import structure_floor
from planner.search.variants import states_fit
from tests.search.brute_force import MEMO_JOBS, PROBLEMS, make_job, top_shapes

CASES = {**PROBLEMS, **{name: (make_job(*job), Space()) for name, job in MEMO_JOBS.items()}}
"""The brute-forced problems, and the memo tests' larger MoE jobs (DeepSeek-V3 with its dense
first layers, MLA, MTP and the EP overlap; Mixtral on 64 GPUs)."""


@pytest.mark.parametrize("name", list(CASES))
def test_structure_floor_from_any_shape_is_below_every_shapes_floors(name: str) -> None:
    """From a structure's shapes (every fourth, each its bases at its largest micro-batch size),
    `structure_floor` is no more than the `lower_bound` of every base of every shape: the mean
    over the ranks under the slowest, the all-to-all floor of the sums under the sum of the
    floors, whichever EP overlap the base has."""
    job, space = CASES[name]
    checked = unequal = 0
    for s, shapes in top_shapes(job, space):
        least = min(floors(job, b.layout).lower_bound() for shape in shapes for b in shape)
        for shape in shapes[:: max(len(shapes) // 4, 1)]:
            got = structure_floor(job, [b.layout for b in shape])
            assert got <= least, (s, shape[0].layout.describe(), got, least)
            checked += 1
            unequal += got < least * (1 - 1e-6)
    assert checked
    if name == "deepseek-v3-256xh800":  # 61 layers on uneven pipelines: the mean is below
        assert unequal


def test_search_refines_only_the_structures_it_reaches() -> None:
    """DeepSeek-V3 on 256 H800: the search refines fewer of the structures whose states fit than
    there are (the floors of the others are above its cut); refined on demand (`within(None)`)
    they are every structure with a shape whose states fit (the oracle: `states_fit` asked of
    every shape at the structure's largest micro-batch size), and those left out of
    `within(cut)` have bounds above the cut."""
    job, space = CASES["deepseek-v3-256xh800"]
    res = top_k.search(job, space, top_k=5)
    assert res.queued is not None
    reached = len(res.queued.refined)
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    fitting = [
        s
        for s, shapes in top_shapes(job, space)
        if any(states_fit(job, space, b[0].layout, capacity, {}) for b in shapes)
    ]
    everything = res.queued.within(None)
    assert list(everything) == fitting
    assert reached < len(fitting)
    cut = res.candidates[-1].step_time
    kept = top_k.search(job, space, top_k=5).queued
    assert kept is not None
    within = kept.within(cut)
    assert len(within) < len(fitting)
    assert all(q.bound > cut for s, q in everything.items() if s not in within)
