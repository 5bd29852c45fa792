"""The search's shape-level exits (`variants.bound_exits`): the bases of a shape at a micro-batch
size that `variants.best_variants` would answer [] for at its first check (no ZeRO stage whose
states fit, or `bound.below` of the base's floor over the cut) are skipped without making them,
with the same "memory" counts.

Oracles: `best_variants` itself, called on each skipped base as the search would have called it
(the answer and what it counts), and the search with the exits turned off (every base handed to
`best_variants`, as before the exits): the same rows, scores and counts, in the same order, on
every brute-forced problem of tests/search/brute_force.py."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from planner.search import top_k, variants
from planner.search.structure_queue import Bases
from tests.search.brute_force import PROBLEMS, TOP_K, answer_rows


def _never(*args: Any) -> tuple[list[bool], int]:
    """`bound_exits` that skips nothing: every base goes to `best_variants`."""
    floors = args[3]
    return [False] * len(floors), 0


def _summary(res: top_k.SearchResult) -> tuple[object, ...]:
    """What a search reports of itself, the counts' order included (the JSON keeps it)."""
    return (
        answer_rows(res),
        res.scored,
        res.expanded,
        res.space_size,
        list(res.rejected.items()),
    )


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_the_exits_change_nothing_the_search_reports(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, space = PROBLEMS[name]
    with_exits = top_k.search(job, space, top_k=TOP_K)
    monkeypatch.setattr(top_k, "bound_exits", _never)
    without = top_k.search(job, space, top_k=TOP_K)
    assert _summary(with_exits) == _summary(without)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_each_skipped_base_is_one_best_variants_answers_at_once(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each base the exits skip, handed to `best_variants` as the search would (its floor, the
    cut, the structure's states memo): [] and the counts the search added for it, nothing else
    (returned and counted before any rung: the same with an empty `lean_fails`)."""
    job, space = PROBLEMS[name]
    asked: list[tuple[Any, ...]] = []
    inner = variants.bound_exits
    shape_of = Bases.shape_layout
    last: list[tuple[Bases, int, int, Any]] = []

    def spy_shape(self: Bases, mbs: int, vpp: int, split: Any) -> Any:
        last[:] = [(self, mbs, vpp, split)]
        return shape_of(self, mbs, vpp, split)

    def spy(*args: Any) -> tuple[list[bool], int]:
        exits, lead = inner(*args)
        too_big = dict(args[5])  # as it was: `best_variants` reads it
        asked.append((*last[0], args[3], args[4], too_big, args[6], exits, lead))
        return exits, lead

    monkeypatch.setattr(Bases, "shape_layout", spy_shape)
    monkeypatch.setattr(top_k, "bound_exits", spy)
    top_k.search(job, space, top_k=TOP_K)
    skipped = 0
    for of, mbs, vpp, split, floors, cut, too_big, zeros, exits, lead in asked:
        bases = of(mbs, vpp, split)
        assert len(bases) == len(floors) == len(exits)
        for base, floor, out in zip(bases, floors, exits, strict=True):
            if not out:
                continue
            rejected: Counter[str] = Counter()
            got = variants.best_variants(
                job, space, base, rejected, dict(too_big), cut, {}, floor, zeros
            )
            assert got == []
            assert rejected == (Counter(memory=lead) if lead else Counter())
            skipped += 1
    # the exits are taken on most problems (the problems with one structure and few shapes
    # reach the cut late)
    if name in ("mixtral-ep-overlap", "llama70b-uneven", "qwen7b-small-memory"):
        assert skipped > 0
