"""planner.search.bound's lower bounds and planner.search.variants.states_fit: what they add to
`cost.compute_floor` is safe, and the compute part is compute_floor itself, bit for bit (so a change
to the model's floor shows here before it can make the search's bound unsafe). The brute force of
tests/search/test_top_k.py proves the certified top K unchanged."""

from __future__ import annotations

from collections import Counter

import pytest

from planner.model import comms, cost, memory
from planner.search import bound as bounds
from planner.search import rungs, variants
from planner.search import space as space_mod
from planner.search.rungs import NONE
from planner.search.space import Space
from tests.search.brute_force import PROBLEMS, make_job


def _some_bases(name: str, count: int) -> list:
    job, space = PROBLEMS[name]
    out = []
    for s in space_mod.structures(job, space, Counter()):
        for mbs, vpp, split in space_mod.options(job, space, s)[::3]:
            out += [b.layout for b in space_mod.bases(job, s, mbs, vpp, split, space)]
    return out[:: max(len(out) // count, 1)]


@pytest.mark.parametrize("name", ["mixtral-ep-overlap", "llama70b-uneven", "qwen7b-small-memory"])
def test_rank_floors_are_compute_floor(name: str) -> None:
    job, _ = PROBLEMS[name]
    for lay in _some_bases(name, 40):
        plain = NONE.on(lay)
        m, floors, tps, cps = bounds.rank_floors(job, plain)
        assert m * max(floors) == cost.compute_floor(job, plain), lay.describe()
        share = comms.sm_share(job.cluster)
        overhead = cost.step_overhead_s(job)
        assert bounds.lower_bound(job, lay) >= cost.compute_floor(job, plain) + overhead
        assert all(tp >= 0 for tp in tps)
        assert all(cp >= 0 for cp in cps) and (lay.cp > 1 or max(cps) == 0)
        assert (lay.tp == 1) == (max(tps) == 0) or share == 0


@pytest.mark.parametrize("name", ["mixtral-ep-overlap", "llama70b-uneven", "sc21-1.7b-32xa100"])
def test_stage_floors_per_kind_of_rank_are_rank_floors(name: str) -> None:
    """The bounds' fast path (one floor per kind of rank, repeated) is rank_floors' per-rank
    terms, bit for bit, in some order (the CP charge among them: some of sc21-1.7b-32xa100's
    bases show their ring's hops beyond the attention at 2,048 tokens)."""
    job, _ = PROBLEMS[name]
    share = None
    with_cp = 0
    for lay in _some_bases(name, 40):
        m, floors, tps, cps = bounds.rank_floors(job, NONE.on(lay))
        share = bounds.tp_floor_share(job, lay)
        per_rank = sorted(f + share * tp + cp for f, tp, cp in zip(floors, tps, cps, strict=True))
        fast_m, fast = bounds._stage_floors(job, lay)
        assert (fast_m, sorted(fast)) == (m, per_rank), lay.describe()
        with_cp += max(cps) > 0
    assert share is not None
    assert with_cp > 0 or name != "sc21-1.7b-32xa100"


@pytest.mark.parametrize(
    "name", ["mixtral-8x7b-16xh100", "llama8b-tiny-memory", "sc21-1.7b-32xa100"]
)
def test_bound_below_every_rung_and_zero_stage(name: str) -> None:
    """At a base's own micro-batch base_bound (with the fill and drain) is below each of its
    (ZeRO stage, rung) variants, the TP overlap turned off and full recompute included (what
    the TP term must survive)."""
    job, space = PROBLEMS[name]
    checked = 0
    for lay in _some_bases(name, 25):
        bound = bounds.base_bound(job, lay)
        for z in space_mod.zero_stages(job, space, lay):
            for rung in rungs.every(job, lay, space.recompute, space.offload)[::2]:
                exact = cost.estimate(job, rung.on(lay.with_(zero_stage=z))).step_time_s
                assert bound <= exact * (1 + 1e-12), (rung, lay.describe(), bound, exact)
                checked += 1
    assert checked > 0


def test_structures_whose_states_never_fit_are_not_queued() -> None:
    """A structure none of whose shapes holds its weights and optimizer state in any ZeRO stage is
    counted as a memory rejection and never expanded; the top K stays the brute force's
    (brute_force.py's problems), and here nothing is lost: every structure the filter drops has no
    layout that fits."""
    job = make_job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 32, memory_gib=24)
    space = Space(cp=space_mod.Bound(1, 1), mbs=space_mod.Bound(1, 2))
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    dropped = 0
    for s in space_mod.structures(job, space, Counter()):
        opts = space_mod.options(job, space, s)
        shapes = {(vpp, split) for _, vpp, split in opts}
        top = max(o[0] for o in opts)
        fit = any(
            variants.states_fit(job, space, space_mod.bases(job, s, top, v, sp, space)[0].layout,
                              capacity, {})
            for v, sp in shapes
        )  # fmt: skip
        if fit:
            continue
        dropped += 1
        for mbs, vpp, split in opts:
            for b in space_mod.bases(job, s, mbs, vpp, split, space):
                for z in space_mod.zero_stages(job, space, b.layout):
                    lean = b.layout.with_(zero_stage=z, recompute="full")
                    assert not memory.estimate(job, lean, space.headroom_pct).fits
    assert dropped > 0
