"""planner.search.solver.solve_pools: layers per stage, stage-to-pool assignment and block
recompute over heterogeneous pools by CP-SAT.

Oracle: brute force. Every composition of the layers over the ranks, every order of the pools in
contiguous blocks, every block recompute count, scored by the same integer stage formulas
(`stage_values`, `tail_of`, `objective_of`); CP-SAT's objective must equal the enumeration's
minimum, and it must say "infeasible" exactly when the enumeration finds nothing that fits."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from pool_brute import top_steps
from pool_problems import pool_job

from planner.search import pool_bounds, pools
from planner.search.solver import (
    PoolSplitProblem,
    may_fit,
    objective_of,
    solve_pools,
    stage_values,
    tail_of,
)


def compositions(n: int, parts: int):
    for cut in itertools.combinations(range(1, n), parts - 1):
        edges = (0, *cut, n)
        yield tuple(b - a for a, b in itertools.pairwise(edges))


def brute_force(p: PoolSplitProblem) -> int | None:
    pp = sum(p.stages)
    best = None
    for order in itertools.permutations(range(len(p.stages))):
        pools = tuple(k for k in order for _ in range(p.stages[k]))
        for layers in compositions(p.num_layers, pp):
            for n in range(p.num_layers + 1 if p.recompute else 1):
                mem, times = stage_values(p, layers, pools, n)
                if any(v > p.capacity_mib[k] for v, k in zip(mem, pools, strict=True)):
                    continue
                obj = objective_of(p, times, tail_of(p, layers, pools))
                best = obj if best is None else min(best, obj)
    return best


def random_problem(rng: random.Random) -> PoolSplitProblem:
    stages = tuple(rng.randint(1, 2) for _ in range(rng.randint(2, 3)))
    pp, npools = sum(stages), len(stages)
    num_layers = rng.randint(pp, 8)

    def grid(lo: int, hi: int) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(rng.randint(lo, hi) for _ in range(npools)) for _ in range(pp))

    p = PoolSplitProblem(
        num_layers=num_layers,
        stages=stages,
        capacity_mib=tuple(rng.randint(30, 80) for _ in range(npools)),
        fixed_mib=grid(0, 20),
        layer_mib=grid(3, 12),
        recompute_mib=grid(-6, 0),
        fixed_us=grid(0, 50),
        layer_us=grid(10, 40),
        recompute_us=grid(0, 12),
        # per pool; a little below 0 too (its own hop the slower), the time still >= 0
        boundary_us=tuple(rng.randint(-5, 60) for _ in range(npools)),
        microbatches=rng.randint(1, 8),
        recompute=rng.random() < 0.7,
    )
    if rng.random() < 0.6:  # a tail after the pipeline: the largest of 1 or 2 lines, rising
        # (or falling) with the layers
        lines = ((grid(-20, 150), grid(-4, 60)) for _ in range(rng.randint(1, 2)))
        p = replace(p, tail_us=tuple(lines))
    if rng.random() < 0.6:  # memory a stage recomputing every layer adds (or spares)
        p = replace(p, whole_mib=grid(-4, 10))
    return p


@pytest.mark.parametrize("seed", range(40))
def test_solver_matches_brute_force(seed: int) -> None:
    p = random_problem(random.Random(seed))
    expected = brute_force(p)
    got = solve_pools(p)
    if expected is None:
        assert got is None
        return
    assert got is not None and got.objective == expected
    # the answer itself is an assignment the enumeration scores the same (contiguous pools)
    _, times = stage_values(p, got.layers, got.pools, got.recompute_layers)
    assert objective_of(p, times, tail_of(p, got.layers, got.pools)) == expected
    changes = sum(a != b for a, b in itertools.pairwise(got.pools))
    assert changes == len(p.stages) - 1


def test_faster_pool_takes_more_layers() -> None:
    """Hand arithmetic: 2 pools of one rank each, 10 layers, per-layer 10 us vs 20 us, no fixed
    cost. One micro-batch: objective = sum = 10 a + 20 b with a + b = 10, a, b >= 1, least at
    (9, 1). Eight: 7 max + sum; (7, 3) gives times (70, 60): 7 x 70 + 130 = 620; (6, 4) gives
    (60, 80): 700; (8, 2) gives (80, 40): 680. So (7, 3)."""
    zero = ((0, 0), (0, 0))
    base = dict(
        num_layers=10,
        stages=(1, 1),
        capacity_mib=(1000, 1000),
        fixed_mib=zero,
        layer_mib=((1, 1), (1, 1)),
        recompute_mib=zero,
        fixed_us=zero,
        layer_us=((10, 20), (10, 20)),
        recompute_us=zero,
        boundary_us=(0, 0),
        recompute=False,
    )
    one = solve_pools(PoolSplitProblem(microbatches=1, **base))
    assert one is not None and sorted(zip(one.pools, one.layers, strict=True)) == [(0, 9), (1, 1)]
    eight = solve_pools(PoolSplitProblem(microbatches=8, **base))
    assert eight is not None and sorted(zip(eight.pools, eight.layers, strict=True)) == [
        (0, 7),
        (1, 3),
    ]
    assert eight.objective == 7 * 70 + 70 + 60


def least_excess_by_enumeration(p: PoolSplitProblem) -> int:
    """The smallest, over every assignment, of the largest MiB any stage exceeds its pool by."""
    pp = sum(p.stages)
    best = None
    for order in itertools.permutations(range(len(p.stages))):
        pools = tuple(k for k in order for _ in range(p.stages[k]))
        for layers in compositions(p.num_layers, pp):
            for n in range(p.num_layers + 1 if p.recompute else 1):
                mem, _ = stage_values(p, layers, pools, n)
                over = max(v - p.capacity_mib[k] for v, k in zip(mem, pools, strict=True))
                best = over if best is None else min(best, over)
    assert best is not None
    return max(best, 0)


@pytest.mark.parametrize("seed", range(12))
def test_relaxed_solve_finds_the_least_excess(seed: int) -> None:
    """The binding constraint of an infeasible mix: capacities cut to a third so that most
    problems do not fit; the relaxed CP-SAT's excess equals the enumeration's."""
    p = random_problem(random.Random(100 + seed))
    p = replace(p, capacity_mib=tuple(c // 3 for c in p.capacity_mib))
    got = solve_pools(p, relax=True)
    assert got is not None
    assert got.excess_mib == least_excess_by_enumeration(p)
    stage, pool, over = got.binding(p)
    assert over == got.excess_mib or got.excess_mib == 0
    assert got.pools[stage] == pool


def test_pooled_search_puts_more_layers_on_the_faster_pool() -> None:
    """Llama 3.1 8B on 16 H100 + 16 A100: the best plan's H100 stages hold more layers than its
    A100 stages (989 vs 312 dense bf16 TFLOP/s, catalog), every stage fits its own GPU, and the
    exact model's step time is what the plan reports."""
    from planner.model import cost, memory
    from planner.search import pool_search

    job = pool_job()
    res = pool_search.search(job, 3.0, top=3)
    best = res.plans[0]
    per_pool: dict[str, list[int]] = {}
    for st in best.memory.stages:
        per_pool.setdefault(st.gpu, []).append(st.layers)
        assert st.total <= st.capacity
    assert min(per_pool["h100-sxm-80gb"]) > max(per_pool["a100-sxm-80gb"])
    again = cost.estimate(best.job, best.layout).step_time_s
    assert again == best.performance.step_time_s
    assert memory.estimate(best.job, best.layout).fits


@pytest.mark.parametrize("seed", range(60))
def test_may_fit_never_refuses_a_split_that_fits(seed: int) -> None:
    """`may_fit` (the check that spares CP-SAT a proof of infeasibility) is False only where the
    enumeration finds nothing that fits; capacities from loose to a fifth, so both answers
    occur."""
    rng = random.Random(300 + seed)
    p = random_problem(rng)
    p = replace(p, capacity_mib=tuple(c // rng.choice((1, 2, 3, 5)) for c in p.capacity_mib))
    if not may_fit(p):
        assert brute_force(p) is None
        assert solve_pools(p) is None


def test_may_fit_refuses_some() -> None:
    """The check is not vacuous: some of the tight problems above are refused."""
    refused = 0
    for seed in range(60):
        rng = random.Random(300 + seed)
        p = random_problem(rng)
        p = replace(p, capacity_mib=tuple(c // rng.choice((1, 2, 3, 5)) for c in p.capacity_mib))
        refused += not may_fit(p)
    assert refused >= 5


@pytest.mark.parametrize("seed", range(40))
def test_lower_bound_is_below_every_split(seed: int) -> None:
    """`pool_bounds.lower_bound_s`, memory aside: no assignment's objective is below it (the
    enumeration with every capacity unbounded), and the time lines alone give the same bound."""
    p = random_problem(random.Random(500 + seed))
    roomy = replace(p, capacity_mib=(10**9,) * len(p.stages))
    least = brute_force(roomy)
    if least is None:  # more ranks than layers
        return
    assert pool_bounds.lower_bound_s(p) * 1e6 <= least * (1 + 1e-12)
    lines = pool_bounds.TimeLines(
        p.num_layers, p.fixed_us, p.layer_us, p.recompute_us, p.microbatches, p.stages,
        p.boundary_us, p.tail_us,
    )  # fmt: skip
    assert pool_bounds.lower_bound_s(lines) == pool_bounds.lower_bound_s(p)


def test_lower_bound_per_order_is_tighter() -> None:
    """The per-order part binds: somewhere among the random problems it is above the any-order
    bound (the pool search solves fewer layouts for it)."""
    tighter = 0
    for seed in range(40):
        p = random_problem(random.Random(500 + seed))
        if sum(p.stages) <= p.num_layers:
            tighter += pool_bounds._order_bound(p) > pool_bounds._any_order_bound(p)
    assert tighter >= 5


def test_pool_search_prunes_nothing_that_matters() -> None:
    """Llama 3.1 8B on 16 H100 + 16 A100: the pooled search (bounded, infeasible splits refused
    before CP-SAT) gives the plans of splitting every layout (ZeRO 1 and 2, TP overlap off and
    on among them), best first."""
    from planner.search import pool_search

    job = pool_job()
    top = 3
    res = pool_search.search(job, 3.0, top=top)
    want = top_steps(job, 3.0, top)  # every layout split (tests/search/pool_brute.py)
    assert [q.performance.step_time_s for q in res.plans] == want
    assert res.solved < res.layouts


def test_equal_pools_share_their_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pools with equal clusters: the problem's lines of the second are copied from the
    first (`pools._twins`), and equal what the exact model gives each pool on its own."""
    from planner.search import pool_search

    job = pool_job(twins=True)
    assert pools._twins(job) == [0, 0]
    lays = pool_search.layouts(job)[::7]
    shared = [pools.problem(job, lay, 3.0, True) for lay in lays]
    monkeypatch.setattr(pools, "_twins", lambda job: list(range(len(job.pools))))
    alone = [pools.problem(job, lay, 3.0, True) for lay in lays]
    assert shared == alone and len(shared) >= 3
