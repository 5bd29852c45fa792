"""The pooled search on a mixture of experts (issue 25): expert parallelism searched inside each
pipeline stage (`pool_search.expert_degrees`).

Oracles: Megatron's expert grid rule (etp x ep x pp divides the GPUs, ep divides the experts;
with expert TP = tp, ep divides cp x dp, so an EP group stays in its stage and pool), the rules
module on every plan, and brute force (every layout split and scored)."""

from __future__ import annotations

from pool_brute import top_steps
from pool_problems import pool_job

from planner.search import pool_search, pools
from planner.search.rules import violations


def test_expert_degrees() -> None:
    """Mixtral's 8 experts: the divisors of 8 that divide cp x dp; a dense model: ep 1 only."""
    job = pool_job("mixtral-8x7b")
    assert pool_search.expert_degrees(job, 4) == [1, 2, 4]
    assert pool_search.expert_degrees(job, 16) == [1, 2, 4, 8]
    assert pool_search.expert_degrees(job, 6) == [1, 2]
    assert pool_search.expert_degrees(pool_job(), 16) == [1]
    assert {lay.ep for lay in pool_search.layouts(pool_job())} == {1}


def test_every_moe_layout_keeps_its_experts_in_a_stage() -> None:
    """Every layout with ep > 1 passes Megatron's rules on the pools, and its EP group (ep
    consecutive expert ranks of tp each) fits in one stage's tp x cp x dp GPUs."""
    job = pool_job("mixtral-8x7b")
    lays = pool_search.layouts(job)
    assert {lay.ep for lay in lays} == {1, 2, 4, 8}
    for lay in lays:
        assert (lay.cp * lay.dp) % lay.ep == 0
        split = pools.problem(job, lay, 3.0, False)
        assert sum(split.stages) == lay.pp


def test_pooled_moe_search_prunes_nothing_that_matters() -> None:
    """Mixtral 8x7B on 16 A100 + 16 H100: the pooled search's plans are those of splitting every
    layout (every ep, ZeRO 1 and 2), best first; the best uses expert parallelism, fits
    each stage on its own GPU and passes every rule."""
    job = pool_job("mixtral-8x7b")
    top = 3
    res = pool_search.search(job, 3.0, top=top)
    want = top_steps(job, 3.0, top)  # every layout split (tests/search/pool_brute.py)
    assert [q.performance.step_time_s for q in res.plans] == want
    best = res.plans[0]
    assert best.layout.ep > 1
    assert best.memory.fits and not violations(best.job, best.layout)
