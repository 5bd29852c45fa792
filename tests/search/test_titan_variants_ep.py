"""suggest --framework torchtitan on MoE models with torchtitan flavors: expert parallelism (ep,
expert TP 1 or tp, alltoall or DeepEP) beside torchtitan's settings, under its V schedules
(ZBVZeroBubble, DualPipeV: `Layout.v_stages`).

Oracle: the brute force of tests/search/titan_brute_force.py (every layout and setting, every ep
dividing the GPU and expert counts, filtered by planner's rules under each setting's job, scored
by the exact model; its own enumeration, none of the search's). The models are whole (a cut
model has no flavor and torchtitan no EP for it), so the problems stay small by their GPU count
and bounds."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import cache

import pytest
import titan_brute_force as brute

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection
from planner.search import rules
from planner.search import space as space_mod
from planner.search.space import Bound, Space

TOP_K = 6


def v_job(model: str, num_gpus: int, gbs: int, schedule: str, **cluster: object) -> Job:
    job = brute.titan_job(model, "h100-sxm-80gb", num_gpus, 4096, gbs, **cluster)
    return replace(job, torchtitan=TorchtitanSection(pipeline_schedule=schedule))


PROBLEMS: dict[str, tuple[Job, Space]] = {
    # DeepSeek-V2-Lite (64 experts) pipelined in a V over 2 ranks on one node: ep 2 and 4 with
    # DeepEP first, then alltoall; tp 2 with experts at etp 2 (ep 1) and at etp 1 (ep 4)
    "dsv2lite-8xh100-dualpipev": (
        v_job("deepseek-v2-lite", 8, 16, "DualPipeV"),
        Space(
            framework="torchtitan",
            tp=Bound(1, 2),
            cp=Bound(1, 1),
            pp=Bound(2, 2),
            vpp=Bound(2, 2),
            mbs=Bound(1, 2),
        ),
    ),
    # the same model on two nodes of 40 GiB GPUs under ZBVZeroBubble, with and without
    # pipelining (the V at pp 2, one rank's two stages at pp 1): full recompute, ep up to 16
    # (four experts a rank), reshard "never" at ep 8, and every dp_replicate torchtitan takes
    # (its shard degree bounds ep x etp: `rules.torchtitan.experts`)
    "dsv2lite-16xh100-zbv-40gib": (
        v_job("deepseek-v2-lite", 16, 32, "ZBVZeroBubble", memory_gib=40),
        Space(
            framework="torchtitan",
            tp=Bound(1, 2),
            cp=Bound(1, 1),
            pp=Bound(1, 2),
            vpp=Bound(1, 2),
            mbs=Bound(1, 2),
        ),
    ),
}


@cache
def reference(name: str) -> brute.Ref:
    job, space = PROBLEMS[name]
    return brute.reference(job, space, TOP_K)


def _runs(job: Job, space: Space, lay: Layout) -> bool:
    """Whether the rules take the base under some recompute policy of the space."""
    return any(not rules.violations(job, lay.with_(recompute=r)) for r in space.recompute)


def _searched_bases(job: Job, space: Space) -> set[Layout]:
    """The base layouts the search builds for the job (structures, their options, the bases of
    each, in each ZeRO stage it asks), before any bound prunes them."""
    out = set()
    for s in space_mod.structures(job, space, Counter()):
        for mbs, vpp, split in space_mod.options(job, space, s):
            for b in space_mod.bases(job, s, mbs, vpp, split, space):
                for z in space_mod.zero_stages(job, space, b.layout):
                    out.add(b.layout.with_(zero_stage=z))
    return out


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_search_builds_every_base_the_rules_take(name: str) -> None:
    """The search's bases that the rules take are the brute force's, ep > 1 among them (a
    dropped expert degree, expert TP or dispatcher shows here even below the top K)."""
    job, space = PROBLEMS[name]
    want = {lay for lay in brute.bases(job, space) if _runs(job, space, lay)}
    got = {lay for lay in _searched_bases(job, space) if _runs(job, space, lay)}
    assert {lay.describe() for lay in want - got} == set()
    assert {lay.describe() for lay in got - want} == set()
    assert got == want
    assert any(lay.ep > 1 and lay.expert_tp == 1 < lay.tp for lay in want)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_merged_search_equals_brute_force(name: str) -> None:
    ref = reference(name)
    assert len(ref) == TOP_K
    brute.assert_search_equals(*PROBLEMS[name], ref)


def test_problems_exercise_the_experts() -> None:
    """The top K rows hold what a wrong expert enumeration would lose: ep > 1 with both
    dispatchers, ep 1, expert TP 1 under tp 2, a V placement at pp 2 and a setting other than
    the default beside ep > 1; every pipelined row is placed in a V (both schedules are V
    schedules, b5bcd76c distributed/pipeline_parallel.py:550-567)."""
    rows = [(row.candidate.layout, titan) for name in PROBLEMS for _, row, titan in reference(name)]
    lays = [lay for lay, _ in rows]
    assert {lay.moe_token_dispatcher_type for lay in lays if lay.ep > 1} == {"alltoall", "flex"}
    assert any(lay.ep == 1 for lay in lays)
    assert any(lay.ep > 1 and lay.expert_tp == 1 < lay.tp for lay in lays)
    assert any(lay.pp == 2 for lay in lays)
    assert all(lay.v_stages for lay in lays if lay.pp > 1)
    assert any(lay.ep > 1 and titan.reshard_after_forward != "default" for lay, titan in rows)
