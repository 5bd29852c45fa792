"""planner.search.top_k's survey (`top_k._pass`): a first pass over the structures that scores each
shape's smallest micro-batch size alone, so that the K-th best time falls before the expansion
scores the rest. It decides only how soon the cut falls: the search answers the same with it as
without it (one pass, `survey=False`), row for row, on every brute-forced problem, and with no cut
it scores every base exactly once, each shape's smallest micro-batch size before any larger."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from planner.inputs.layout import Layout
from planner.search import top_k, variants
from tests.search.brute_force import PROBLEMS, TOP_K, answer_rows


@pytest.mark.parametrize("fold_twins", [False, True])
@pytest.mark.parametrize("k", [1, TOP_K])
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_survey_changes_no_answer(name: str, k: int, fold_twins: bool) -> None:
    job, space = PROBLEMS[name]
    surveyed = top_k.search(job, space, top_k=k, fold_twins=fold_twins)
    plain = top_k.search(job, space, top_k=k, fold_twins=fold_twins, survey=False)
    assert answer_rows(surveyed) == answer_rows(plain)
    assert [c.layout for c in surveyed.candidates] == [c.layout for c in plain.candidates]
    assert surveyed.space_size == plain.space_size
    assert surveyed.structures == plain.structures


def test_survey_changes_what_is_scored() -> None:
    """The two passes are not one in disguise: on some problems the survey lets the cut spare
    layouts that one pass scores (so the equality above is a test of the survey)."""
    diffs = []
    for job, space in PROBLEMS.values():
        a = top_k.search(job, space, top_k=TOP_K)
        b = top_k.search(job, space, top_k=TOP_K, survey=False)
        diffs.append((a.scored, a.rejected["memory"]) != (b.scored, b.rejected["memory"]))
    assert any(diffs)


def _bases_scored(name: str, survey: bool, monkeypatch: pytest.MonkeyPatch) -> list[Layout]:
    """The base layouts the search hands `best_variants`, in order, with no cut (every layout
    asked for)."""
    job, space = PROBLEMS[name]
    seen: list[Layout] = []
    inner = variants.best_variants  # not top_k's, which an earlier call may have replaced

    def spy(job_: Any, space_: Any, base_of: Any, *rest: Any) -> Any:
        seen.append(base_of.layout)
        return inner(job_, space_, base_of, *rest)

    monkeypatch.setattr(top_k, "best_variants", spy)
    top_k.search(job, space, top_k=10**6, survey=survey)
    return seen


@pytest.mark.parametrize("name", ["mixtral-ep-overlap", "llama70b-uneven", "qwen7b-small-memory"])
def test_survey_scores_every_base_once_smallest_micro_batch_first(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    surveyed = _bases_scored(name, True, monkeypatch)
    plain = _bases_scored(name, False, monkeypatch)
    assert Counter(surveyed) == Counter(plain)
    assert len(set(surveyed)) == len(surveyed)

    def shape(lay: Layout) -> Layout:  # the base but its micro-batch size
        return lay.with_(micro_batch_size=1)

    smallest: dict[Layout, int] = {}
    for lay in plain:
        key = shape(lay)
        smallest[key] = min(smallest.get(key, lay.micro_batch_size), lay.micro_batch_size)
    firsts = [lay.micro_batch_size == smallest[shape(lay)] for lay in surveyed]
    # every shape's smallest size before any larger one, and some larger ones after them
    assert firsts == sorted(firsts, reverse=True)
    assert not all(firsts)
