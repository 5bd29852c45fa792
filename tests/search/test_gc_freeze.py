"""What the search leaves is frozen for the collector (`gc.freeze`) until the next search starts
(`top_k._cyclic_gc_paused`), and nothing is frozen or unfrozen where something else froze
objects first. The collector is enabled again after each search either way."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from planner.search import top_k
from tests.search.brute_force import make_job

JOB = make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 128)


@pytest.fixture
def thawed() -> Iterator[None]:
    """No object frozen before the test, none left frozen after it."""
    top_k._FROZEN.clear()
    gc.unfreeze()
    yield
    top_k._FROZEN.clear()
    gc.unfreeze()


def test_what_a_search_leaves_stays_frozen_until_the_next(
    thawed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_start: list[int] = []
    inner = top_k._search

    def spy(*args: Any, **kwargs: Any) -> top_k.SearchResult:
        at_start.append(gc.get_freeze_count())
        return inner(*args, **kwargs)

    monkeypatch.setattr(top_k, "_search", spy)
    first = top_k.search(JOB)
    assert gc.isenabled() and gc.get_freeze_count() > 0 and top_k._FROZEN == [True]
    second = top_k.search(JOB)
    assert at_start == [0, 0]  # the next search unfroze them first
    assert gc.isenabled() and gc.get_freeze_count() > 0
    assert [c.layout for c in first.candidates] == [c.layout for c in second.candidates]


def test_objects_something_else_froze_are_left_to_it(thawed: None) -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    top_k.search(JOB)
    assert gc.isenabled() and not top_k._FROZEN
    assert gc.get_freeze_count() <= frozen  # none frozen by the search (some freed)
