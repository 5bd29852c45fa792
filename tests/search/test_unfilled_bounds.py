"""The search's floors under torch's looped schedules below pp micro-batches
(`pipe_floor.fills`), which planner now prices in torch's own order (`looped_order.looped_step`)
rather than refusing.

Oracles: that order's step itself on random uneven stages (a floor is one if no step goes under
it), against which the interleaved closed form, the floor the search used at m >= pp, is no
floor here (an early slow rank: 21 against 21.5, worked in pipe_floor's docstring); and on the
small-batch brute-force problem of tests/search/test_titan_variants.py (whose merged search
equals its brute force there) the exact model of every policy of every base, with one schedule a
step and with torchtitan's gradient accumulation (k = 2 schedules of the same m each)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from test_titan_variants import PROBLEMS, _bases, reference

from planner.model import cost
from planner.model.looped_order import looped_step
from planner.search import bound, rules, rungs
from planner.search.pipe_floor import fills, pipeline_floor, scaled_floor

NAME = "llama8b-8xh100-gbs2"


def test_floor_below_torchs_order_where_the_closed_form_is_not() -> None:
    """pipeline_floor not filled, ranks in order and in any order (the least over orders), and
    scaled_floor of the same floors, at or below the step of torch's Interleaved1F1B and
    LoopedBFS order below pp; the closed form (filled) above it somewhere."""
    f, b = [10 / 3, 1 / 3, 1 / 3, 1 / 3], [20 / 3, 2 / 3, 2 / 3, 2 / 3]  # the docstring's case
    g = [x + y for x, y in zip(f, b, strict=True)]
    step = looped_step("Interleaved1F1B", 2, 2, f, b, [0.0] * 4)
    assert step == pytest.approx(21.0)
    assert pipeline_floor(g, 2, 2, True) == pytest.approx(21.5) and step < 21.5
    rng = random.Random(2)
    above = 0
    for _ in range(400):
        pp, v = rng.randint(2, 6), rng.randint(2, 4)
        m = rng.randint(1, pp - 1)
        f = [rng.uniform(0.2, 3.0) for _ in range(pp)]
        b = [x * rng.uniform(1.0, 3.0) for x in f]
        g = [x + y for x, y in zip(f, b, strict=True)]
        for name in ("Interleaved1F1B", "LoopedBFS"):
            step = looped_step(name, v, m, f, b, [0.0] * pp) * (1 + 1e-12)
            assert pipeline_floor(g, m, v, True, filled=False) <= step
            for order in itertools.islice(itertools.permutations(g), 24):
                assert pipeline_floor(order, m, v, False, filled=False) <= step
            desc = sorted(g, reverse=True)
            assert scaled_floor(desc, max(g), m, m, v, sum(g)) <= step
            above += pipeline_floor(g, m, v, True) > step
    assert above > 0


def _jobs() -> list:
    """The problem's job, and the same job at twice the batch in two schedules a step."""
    job, _ = PROBLEMS[NAME]
    titan = job.titan.model_copy(update={"gradient_accumulation_steps": 2})
    return [job, replace(job, global_batch_size=4, torchtitan=titan)]


def test_bounds_below_every_policy_of_the_unfilled_bases() -> None:
    """On every base of the small-batch problem (all below pp), under each looped schedule:
    base_bound is at or below the exact step of every recompute policy the rules take, and
    `below` from the base's floors at its largest micro-batch at or below base_bound; and the
    bound bites (above `size_floor`, the steady state alone) on most of them."""
    _, space = PROBLEMS[NAME]
    checked = biting = 0
    for job in _jobs():
        for name in ("Interleaved1F1B", "LoopedBFS"):
            sjob = replace(job, torchtitan=job.titan.model_copy(update={"pipeline_schedule": name}))
            for base in _bases(sjob, space):
                if base.vpp < 2 or rules.violations(sjob, base):
                    continue
                assert not fills(sjob, base)
                own = bound.base_bound(sjob, base)
                share = sjob.global_batch_size // base.dp  # the structure's largest mbs
                most = max(x for x in range(1, share + 1) if share % x == 0 and space.mbs.admits(x))
                top = bound.floors(sjob, base.with_(micro_batch_size=most))
                assert bound.below(sjob, top, base) <= own * (1 + 1e-12), base.describe()
                for rung in rungs.every(sjob, base, space.recompute, space.offload):
                    lay = rung.on(base)
                    if rules.violations(sjob, lay):
                        continue
                    exact = cost.estimate(sjob, lay).step_time_s
                    assert own <= exact * (1 + 1e-12), (name, lay.describe(), own, exact)
                    checked += 1
                biting += own > 1.05 * bound.size_floor(sjob, base)
    assert checked > 100 and biting > checked // 10


def test_the_problem_ranks_fewer_micro_batches_than_ranks() -> None:
    """The small-batch problem's top rows (its brute force's, which the search equals in
    tests/search/test_titan_variants.py) are pipelines of fewer micro-batches than ranks at both
    pipeline depths: what these floors must not cut."""
    job, _ = PROBLEMS[NAME]
    pps = set()
    for _, row, _ in reference(NAME):
        lay = row.candidate.layout
        assert lay.vpp > 1 and lay.num_microbatches(job.global_batch_size) < lay.pp
        pps.add(lay.pp)
    assert pps == {2, 4}
