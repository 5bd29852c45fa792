"""`lean_peak.min_peak`, the leanest layout `planner suggest` sizes its advice on when nothing
fits, is the least peak over the whole space the search walks, held to the host as the search
holds it.

Oracle: a brute force over every layout of the space (`brute_force_space.all_variants`: every
degree tuple, micro-batch size, vpp, pipeline split, ZeRO stage and memory-saving rung, filtered
by the rules), each layout's peak from `memory.estimate` over all its stages, kept only where
the host holds its pinned bytes (`host_memory.estimate(...).fits`: what the search's
`variants.Budget` asks of a ZeRO stage and of its offloaded activations). It shares none of
`min_peak`'s walk (the smallest micro-batch, the leanest rungs, the bounds that pass a base)."""

from __future__ import annotations

import pytest
from brute_force import make_job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, memory
from planner.search.lean_peak import min_peak
from planner.search.space import Bound, Space
from tests.search.brute_force_space import all_variants


def brute_leanest(job: Job, space: Space) -> tuple[float, Layout | None]:
    best: tuple[float, Layout | None] = (float("inf"), None)
    for variants in all_variants(job, space).values():
        for _, _, lay in variants:
            peak = memory.estimate(job, lay, space.headroom_pct).peak
            if peak < best[0] and host_memory.estimate(job, lay).fits:
                best = (peak, lay)
    return best


CASES = {
    # QA: Llama 3.1 8B on 8 H100 of 20 GiB, 10 sequences of 4096: the leanest layout is
    # interleaved (tp 2 pp 4 vpp 2, 6, 10, 10 and 6 layers a rank: a split vpp 1 does not
    # offer); without interleaving the least is tp 1 pp 8 (21.6 GiB)
    "interleaved": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 10, memory_gib=20),
        Space(cp=Bound(1, 1), mbs=Bound(1, 2), tp=Bound(1, 2)),
    ),
    # QA: Llama 3.1 8B on 8 L40S of 10 GiB with 320 GiB of host memory a node, 8 sequences of
    # 8192: a GPU's host share is 320 / 8 - 32 (the reserve) = 8.0 GiB; tp 8 ZeRO 1 with full
    # recompute pins 14.9 GiB of checkpoint staging, which the search refuses
    "host": (
        make_job(
            "llama3.1-8b", "l40s-48gb", 8, 8192, 8, memory_gib=10, host_memory_gib_per_node=320
        ),
        Space(mbs=Bound(1, 2)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_min_peak_is_the_whole_space_least_the_host_holds(name: str) -> None:
    job, space = CASES[name]
    want, want_lay = brute_leanest(job, space)
    got, lay = min_peak(job, space)
    assert want_lay is not None and lay is not None
    assert got == pytest.approx(want, rel=1e-12), (lay.describe(), want_lay.describe())
    assert host_memory.estimate(job, lay).fits
    if name == "interleaved":  # the case exercises interleaving: the brute's leanest has it
        assert want_lay.vpp > 1
