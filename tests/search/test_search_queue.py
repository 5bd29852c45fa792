"""planner.search.top_k's queue of structures: each is asked which shapes' states fit first and
queued on the least bound of those alone, their floors computed only then (`top_k._Queued`). The
oracle: the structures expanded, in the order the search expands them, are those with some shape
whose states fit, sorted by the least bound of those shapes and then by index, as queueing each
on that bound alone orders them; with the survey (`top_k._pass`) the survey visits them in that
order first, then the expansion those with more than one micro-batch size in a fitting shape (the
search's answers themselves: tests/search/test_top_k.py, tests/search/test_search_survey.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from planner.model import memory
from planner.search import space as space_mod
from planner.search import top_k
from planner.search.bound import floors
from planner.search.space import Structure
from planner.search.variants import states_fit
from tests.search.brute_force import PROBLEMS


def _expected(name: str, survey: bool = False) -> list[Structure]:
    """Every structure with a shape whose states fit, by (its least bound over those, index);
    with the survey, then again those with a fitting shape of more than one micro-batch size."""
    job, space = PROBLEMS[name]
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    keyed = []
    for i, s in enumerate(space_mod.structures(job, space, Counter())):
        opts = space_mod.options(job, space, s)
        if not opts:
            continue
        top = max(o[0] for o in opts)
        bounds = []
        sizes = 0
        for vpp, split in {(vpp, split) for _, vpp, split in opts}:
            shape = space_mod.bases(job, s, top, vpp, split, space)
            if states_fit(job, space, shape[0].layout, capacity, {}):
                bounds += [floors(job, b.layout).lower_bound() for b in shape]
                sizes = max(sizes, sum(o[1:] == (vpp, split) for o in opts))
        if bounds:
            keyed.append((min(bounds), i, s, sizes))
    ranked = sorted(keyed, key=lambda k: k[:2])
    first = [s for _, _, s, _ in ranked]
    return first + [s for _, _, s, n in ranked if n > 1] if survey else first


@pytest.mark.parametrize("survey", [False, True])
@pytest.mark.parametrize("name", ["mixtral-states-tight", "qwen7b-small-memory", "llama8b-fp8"])
def test_structures_expand_in_order_of_their_fitting_shapes_bound(
    name: str, survey: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no cut (every layout asked for) every structure whose states fit somewhere is
    expanded, in the order of the bound over its shapes whose states fit (after the survey has
    visited them all in that order)."""
    job, space = PROBLEMS[name]
    seen: list[Structure] = []
    inner = top_k.best_variants

    def spy(job_: Any, space_: Any, base_of: Any, *rest: Any) -> Any:
        lay = base_of.layout
        s = Structure(lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp, lay.cp_comm_type)
        if not seen or seen[-1] != s:
            seen.append(s)
        return inner(job_, space_, base_of, *rest)

    monkeypatch.setattr(top_k, "best_variants", spy)
    res = top_k.search(job, space, top_k=10**6, survey=survey)
    want = _expected(name, survey)
    assert seen == want
    assert res.expanded == len(_expected(name))
    if name == "mixtral-states-tight":  # some structures hold their states in no ZeRO stage
        assert len(_expected(name)) < len(space_mod.structures(job, space, Counter()))
