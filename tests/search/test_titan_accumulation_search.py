"""suggest on a torchtitan job with `[torchtitan] gradient_accumulation_steps` k = 2: the search
keeps the job's k (every layout pipelined, its micro-batches two schedules' worth, each as torch
runs them) and its lower bounds stay below the estimates of k schedules.

Oracles: the brute force of tests/search/test_titan_variants.py (every layout and setting
torchtitan accepts, filtered by planner's rules, scored by the exact model; it shares none of the
search's pruning) on the job with k = 2; for the bounds, the exact estimates themselves (a lower
bound is one if no estimate goes under it)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import test_titan_variants as brute

from planner.inputs.plan import Job
from planner.model import cost, memory
from planner.search import bound, rules, rungs
from planner.search.space import Bound, Space
from planner.search.suggest import search_rows

NAME = "llama8b-8xh100-35gib-k2"


def _job() -> Job:
    job = brute.titan_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 32, memory_gib=35)
    titan = job.titan.model_copy(update={"gradient_accumulation_steps": 2})
    return replace(job, torchtitan=titan)


SPACE = Space(framework="torchtitan", cp=Bound(1, 2), vpp=Bound(1, 2), mbs=Bound(1, 4))


def test_the_search_keeps_k_and_equals_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merged search's top rows are the brute force's over every (layout, setting) of the
    job with k = 2, and every row runs k = 2 over a pipeline (pp 1 breaks the rules)."""
    job = _job()
    monkeypatch.setitem(brute.PROBLEMS, NAME, (job, SPACE))
    ref = brute.reference(NAME)
    _, rows = search_rows(job, SPACE, brute.TOP_K)
    assert len(ref) == brute.TOP_K
    got = [(r.candidate.layout, getattr(r.candidate, "titan", None)) for r in rows]
    want = [(r.candidate.layout, titan) for _, r, titan in ref]
    assert got == want
    for r, (_, w, titan) in zip(rows, ref, strict=True):
        assert r.candidate.step_time == w.candidate.step_time
        assert r.candidate.layout.pp > 1 and titan.gradient_accumulation_steps == 2
        assert r.candidate.memory.peak == w.candidate.memory.peak


def _bases(job: Job) -> list:
    """Every pipelined base of the space whose micro-batches two schedules split (the rules'
    torchtitan conditions, with recompute none)."""
    out = []
    for lay in brute._bases(job, SPACE):
        if lay.pp > 1 and not rules.violations(job, lay):
            out.append(lay)
    return out


def test_the_bounds_stay_below_k_schedules() -> None:
    """base_bound (one schedule of all m micro-batches: (m - 1/d) max t + sum t / d, below k
    schedules' k ((m/k - 1/d) max t + sum t / d)), the structure's lower bound and the memory
    floor (the states of a rank, which k leaves alone) are below every rung's estimate."""
    job = _job()
    one = replace(job, torchtitan=job.titan.model_copy(update={"gradient_accumulation_steps": 1}))
    checked = 0
    for lay in _bases(job)[::3]:
        low = bound.lower_bound(job, lay)
        base = bound.base_bound(job, lay)
        floor = memory.state_floor(job, lay)
        for rung in rungs.every(job, lay, SPACE.recompute, SPACE.offload):
            var = rung.on(lay)
            if rules.violations(job, var):
                continue
            step = cost.estimate(job, var).step_time_s
            assert max(low, base) <= step * (1 + 1e-12), (var.describe(), low, base, step)
            assert floor <= memory.estimate(job, var).peak, var.describe()
            checked += 1
        # k = 1 (one schedule of all m: one fill and drain, one FSDP2 sync) is never slower,
        # which is why the search keeps the job's k rather than searching it
        assert cost.estimate(one, lay).step_time_s < cost.estimate(job, lay).step_time_s
    assert checked > 20
