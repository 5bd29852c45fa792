"""The pooled search's bounds are below the exact step (planner/search/pool_exact.py
`split_floor`, planner/search/pool_bounds.py `lower_bound_s`, both on `pools.time_lines`): on
seeded random two-pool problems (`test_pool_exact_split.random_job`), for every layout of
`pool_search.layouts` with two or three stages and no recompute, every order of the pools and
every split of the layers that breaks no rule, `split_floor` of the split's lines is at most
its exact step, and `lower_bound_s` of the layout at most the least of them.

Before the fix they were above it on hundreds of splits: the boundary term was the slow link's
hop less the SMALLEST pool's own, while each pool's line held its own (seed 0, L40S + H200,
tp1 pp2 dp2 mbs2: the L40S stage's line about 2.2 ms over its exact time, m = 16), and the
tail lines were chords of a tail that is not convex (the same layout's L40S rank 0 at 2
layers: 54,941 us, the chord through its samples at 1 and 7 layers 68,054).

Oracle: brute force with the exact model, `cost.estimate` of each split applied
(`pool_plan.apply`), its `step_time_s`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model.performance import Performance
from planner.model.pools import pool_stages
from planner.search import pool_bounds, pool_search, pools
from planner.search.pool_exact import lowered, split_floor
from planner.search.rules import violations
from planner.search.solver import PoolSplit
from tests.search.test_pool_exact_split import _splits, random_job

REL = 1e-9  # float sums of microseconds
LAYOUT_21 = "tp4 pp3 dp1 sp mbs4 zero1 recompute=none"


def _steps(job: Job, lay: Layout) -> Iterator[tuple[tuple[int, ...], tuple[int, ...], Performance]]:
    """Every (pools per rank, layers per rank, exact estimate) of the layout's splits that
    break no rule: every order of the pools, every split of the layers (each at least one)."""
    stages = pool_stages(job, lay)
    for order in itertools.permutations(range(len(stages))):
        ks = tuple(k for k in order for _ in range(stages[k]))
        for ys in _splits(job.arch.num_layers, sum(stages)):
            pj, sl = pools.apply(job, lay, PoolSplit(ys, ks, 0, 0, ()))
            if not violations(pj, sl):
                yield ks, ys, cost.estimate(pj, sl)


@pytest.mark.parametrize("seed", [0, 25])
def test_the_split_floor_and_the_layout_bound_are_below_the_exact_step(seed: int) -> None:
    """Before the fix: seed 0, 478 of its 648 splits over (the L40S stage's boundary term),
    seed 25 (H100 + A100), 9 of 1,242 (the tail's chords), up to 1.6 % of the step."""
    job = random_job(seed)
    checked = 0
    for lay in pool_search.layouts(job):
        if lay.pp > 3 or lay.recompute != "none":
            continue
        lines = pools.time_lines(job, lay)
        p = pools.problem(job, lay, 3.0, recompute=False, times=lines)
        steps = []
        for ks, ys, perf in _steps(job, lay):
            # each stage's line (its sends, the boundary terms) at most its exact time
            lines_ = lowered(p, ks)
            for (a, b, _, _), y, stage in zip(lines_, ys, perf.stages, strict=True):
                assert a + b * y <= sum(stage) * 1e6 * (1 + REL), (lay.describe(), ks, ys)
            step = perf.step_time_s * 1e6
            floor = split_floor(lines_, ys, p.microbatches)
            assert floor <= step * (1 + REL), (lay.describe(), ks, ys, floor, step)
            steps.append(step)
        if steps:
            assert pool_bounds.lower_bound_s(lines) * 1e6 <= min(steps) * (1 + REL), lay.describe()
            checked += len(steps)
    assert checked > 100  # the seed's job has layouts of two or three stages to check


def test_the_layout_bound_is_below_the_least_exact_step() -> None:
    """Seed 21 (Llama 3.1 8B on A100 40GB + L40S), tp4 pp3 dp1 sp mbs4: before the fix
    `lower_bound_s` was 8.2546 s, above the exact model's fastest split of its 930 (the A100
    pool's two stages first, 13, 13 and 6 layers: 8.2422 s)."""
    job = random_job(21)
    lay = next(q for q in pool_search.layouts(job) if q.describe() == LAYOUT_21)
    least = min(perf.step_time_s for *_, perf in _steps(job, lay)) * 1e6
    assert pool_bounds.lower_bound_s(pools.time_lines(job, lay)) * 1e6 <= least * (1 + REL)
