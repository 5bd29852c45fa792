"""The base bound of torchtitan layouts (`bound.base_bound`): the pipeline's fill and drain under
the schedules whose bubble is the stages' whole time (`bound.fill_drain`), and without pipelining
FSDP2's exposed traffic (`planner.search.fsdp_bound`).

Oracle: the exact model (`cost.estimate`) of every recompute policy torchtitan runs (none,
per-op selective, full, and every-N block recompute, which `planner.search.titan_every` bounds
by the same call) on bases of the torchtitan brute-force problems (tests/search/
test_titan_variants.py, whose merged search is checked against a brute force there), under
each settings variant and each pipeline schedule: the bound is below every one of them. And it
is not vacuous: above `size_floor` (the bound torchtitan's bases had before) by more than 5%
somewhere with pipelining and somewhere without."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan_pipeline import v_stages
from planner.model import cost
from planner.search import rules
from planner.search import titan_variants as tv
from planner.search.bound import base_bound, fill_drain, size_floor
from planner.search.space import Space
from tests.search.test_titan_variants import PROBLEMS, _bases

SCHEDULES = (
    "1F1B",
    "GPipe",
    "Interleaved1F1B",
    "LoopedBFS",
    "InterleavedZeroBubble",
    "ZBVZeroBubble",
)


def _policies(job: Job, space: Space, base: Layout) -> list[Layout]:
    """The recompute policies torchtitan runs on the base: none, per-op selective and full, and
    block recompute of 1 to the largest chunk's layers (every-N)."""
    out = [base.with_(recompute=r) for r in space.recompute]
    most = max(len(c) for chunks in base.chunk_layers(job.arch.num_layers) for c in chunks)
    out += [
        base.with_(recompute="full", recompute_method="block", recompute_num_layers=k)
        for k in range(1, most)
    ]
    return out


def _jobs(job: Job) -> list[Job]:
    """The job under its first settings variants and its last (HSDP), each schedule."""
    order = tv.variants(job)
    picked = order[:3] + order[-1:]
    return [
        replace(job, torchtitan=v.settings(job.titan).model_copy(update={"pipeline_schedule": s}))
        for v in picked
        for s in SCHEDULES
    ]


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_base_bound_below_every_policy_of_the_base(name: str) -> None:
    job, space = PROBLEMS[name]
    bases = _bases(job, space)
    sample = bases[:: max(len(bases) // 40, 1)]
    checked = 0
    tighter = {False: 0, True: 0}  # by whether the base has pipelining
    for vjob in _jobs(job):
        for base in sample:
            # the stages placed as the schedule places them (a V under ZBVZeroBubble)
            base = base.with_(v_stages=v_stages(vjob, base.vpp))
            if rules.violations(vjob, base):
                continue
            bound = base_bound(vjob, base)
            for lay in _policies(vjob, space, base):
                if rules.violations(vjob, lay):
                    continue
                exact = cost.estimate(vjob, lay).step_time_s
                assert bound <= exact, (vjob.titan.pipeline_schedule, lay.describe(), bound, exact)
                checked += 1
            tighter[base.pp > 1] += bound > 1.05 * size_floor(vjob, base)
    assert checked > 0
    if name in BITING:  # the bound bites on these, with pipelining and without
        assert tighter[False] > 0 and tighter[True] > 0


BITING = ("llama8b-8xh100-35gib", "llama8b-8xh100-23gib", "llama70b-64xh100")
"""The problems on whose sampled bases `base_bound` is above 1.05 x `size_floor` both with
pipelining and without (the later ones search pipelined bases alone, LoopedBFS, or a 6-layer
model whose pp-1 bases it does not bite on)."""


def test_fill_drain_follows_the_schedules_bubble() -> None:
    """d of the 1F1B family (1 for 1F1B and GPipe, vpp for the interleaved ones), none for the
    zero-bubble schedules; Megatron's vpp."""
    job, _ = PROBLEMS["llama8b-8xh100-35gib"]
    lay = Layout(tp=1, pp=2, dp=4, vpp=2)
    want = {
        "1F1B": 1,
        "GPipe": 1,
        "Interleaved1F1B": 2,
        "LoopedBFS": 2,
        "InterleavedZeroBubble": None,
        "ZBVZeroBubble": None,
    }
    for s, d in want.items():
        titan = job.titan.model_copy(update={"pipeline_schedule": s})
        assert fill_drain(replace(job, torchtitan=titan), lay) == d, s
    assert fill_drain(replace(job, framework="megatron"), lay) == 2


def test_fsdp_floor_counts_the_exposed_gathers() -> None:
    """Without pipelining the bound holds FSDP2's exposed traffic: on eight nodes (llama 70B,
    dp 64) it is above the compute floor alone for some base, where `cost.estimate` shows
    exposed data-parallel time."""
    job, space = PROBLEMS["llama70b-64xh100"]
    seen = 0
    for base in _bases(job, space):
        if base.pp != 1 or rules.violations(job, base):
            continue
        exposed = cost.estimate(job, base).breakdown.dp_comm_exposed
        if exposed > 0 and base_bound(job, base) > size_floor(job, base) + 0.5 * exposed:
            seen += 1
    assert seen > 0
