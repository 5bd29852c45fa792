"""planner.search.top_k.search's `ceiling` (`planner.search.titan_variants` passes the merged K-th
time of the variants searched so far): the cut starts there, so the rows no slower than the
ceiling are those of the search without it, row for row, on every brute-forced problem
(the search without a ceiling is itself checked against the brute force, tests/search/
test_top_k.py), and it spares work somewhere (so the equality is a test of the ceiling)."""

from __future__ import annotations

import pytest

from planner.search import top_k
from planner.search.top_k import SearchResult
from tests.search.brute_force import PROBLEMS, TOP_K, answer_rows


def _rows(res: SearchResult, ceiling: float) -> list[tuple[object, ...]]:
    """The answer's rows (`answer_rows`) no slower than `ceiling`."""
    kept = zip(res.rows, answer_rows(res), strict=True)
    return [row for r, row in kept if r.candidate.step_time <= ceiling]


def _ceilings(plain: SearchResult) -> list[float]:
    """Below the fastest row, at a row's own time, between two rows' times, above the last."""
    times = [r.candidate.step_time for r in plain.rows]
    if not times:
        return [1.0]
    mid = len(times) // 2
    between = (times[mid - 1] + times[mid]) / 2 if mid else times[0]
    return [times[0] * 0.999, times[mid], between, times[-1] * 1.5]


@pytest.mark.parametrize("fold_twins", [False, True])
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_ceiling_changes_no_row_under_it(name: str, fold_twins: bool) -> None:
    job, space = PROBLEMS[name]
    plain = top_k.search(job, space, top_k=TOP_K, fold_twins=fold_twins)
    for ceiling in _ceilings(plain):
        capped = top_k.search(job, space, top_k=TOP_K, fold_twins=fold_twins, ceiling=ceiling)
        assert _rows(capped, ceiling) == _rows(plain, ceiling), ceiling
        assert capped.space_size == plain.space_size
        assert capped.queued and plain.queued
        assert capped.queued.within(None).keys() == plain.queued.within(None).keys()


def test_ceiling_spares_work() -> None:
    """A ceiling at the fastest row's time scores fewer layouts than no ceiling somewhere."""
    spared = []
    for job, space in PROBLEMS.values():
        plain = top_k.search(job, space, top_k=TOP_K)
        if not plain.rows:
            continue
        capped = top_k.search(job, space, top_k=TOP_K, ceiling=plain.rows[0].candidate.step_time)
        assert capped.scored <= plain.scored
        spared.append(capped.scored < plain.scored)
    assert any(spared)
