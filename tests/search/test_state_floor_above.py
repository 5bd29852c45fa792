"""memory.state_floor's `above`: the stages asked until one is over it. The oracle is the whole
maximum (`above` left out): over `above` exactly where it is, and the same bytes where not."""

from __future__ import annotations

from collections import Counter

import pytest

from planner.model import memory
from planner.search import space as space_mod
from tests.search.brute_force import PROBLEMS


@pytest.mark.parametrize("name", ["mixtral-states-tight", "llama70b-uneven", "qwen7b-small-memory"])
def test_over_exactly_where_the_whole_maximum_is(name: str) -> None:
    job, space = PROBLEMS[name]
    checked = 0
    for s in space_mod.structures(job, space, Counter()):
        for mbs, vpp, split in space_mod.options(job, space, s)[::2]:
            for b in space_mod.bases(job, s, mbs, vpp, split, space)[:1]:
                for z in space_mod.zero_stages(job, space, b.layout):
                    lay = b.layout.with_(zero_stage=z)
                    whole = memory.state_floor(job, lay)
                    # capacities below, at and above the whole maximum, and the job's own
                    for above in (whole * 0.5, whole, whole * 1.5, job.cluster.capacity_bytes):
                        got = memory.state_floor(job, lay, above)
                        assert (got > above) == (whole > above), lay.describe()
                        assert got <= whole
                        if whole <= above:
                            assert got == whole
                    checked += 1
    assert checked > 0
