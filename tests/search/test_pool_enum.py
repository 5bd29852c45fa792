"""planner.search.pool_enum: the split over pools by exact enumeration (no recompute), every
equally good split in a defined order, and the dispatch to CP-SAT only where recompute may help.

Oracle: brute force (tests/search/test_solver_pools.py), every composition of the layers over
the ranks, every order of the pools in contiguous blocks, every block recompute count."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from pool_problems import pool_job

from planner.search import pool_enum, pool_order, pools, solver
from planner.search.solver import PoolSplitProblem, objective_of, stage_values, tail_of
from tests.search.test_solver_pools import brute_force, compositions, random_problem

NO_EXTRAS: dict[str, tuple] = dict(tail_us=(), whole_mib=())
"""The grids `random_problem` may add, left out where a test builds twin pools by hand."""


def optimal_by_enumeration(p: PoolSplitProblem) -> tuple[int | None, list[tuple]]:
    """(least objective with N = 0, every (pools, layers) reaching it in the twin orders)."""
    pp = sum(p.stages)
    found: dict[tuple, int] = {}
    for order in pool_order.twin_orders(p):
        ks = tuple(k for k in order for _ in range(p.stages[k]))
        for layers in compositions(p.num_layers, pp):
            mem, times = stage_values(p, layers, ks, 0)
            if all(v <= p.capacity_mib[k] for v, k in zip(mem, ks, strict=True)):
                found[ks, layers] = objective_of(p, times, tail_of(p, layers, ks))
    if not found:
        return None, []
    least = min(found.values())
    return least, sorted(key for key, v in found.items() if v == least)


@pytest.mark.parametrize("seed", range(150))
def test_every_optimal_split_without_recompute(seed: int) -> None:
    """Without recompute: the least objective is the brute force's (over every order), and the
    splits listed are the first `TIES` optimal ones in (pools, layers) order."""
    p = replace(random_problem(random.Random(seed)), recompute=False)
    if seed % 3 == 0:  # tighter memory: infeasible orders and capped ranks
        p = replace(p, capacity_mib=tuple(c * 2 // 3 for c in p.capacity_mib))
    least, every = optimal_by_enumeration(p)
    assert least == brute_force(p)
    got = pool_enum.optimal_splits(p)
    assert [(s.pools, s.layers) for s in got] == every[: pool_enum.TIES]
    assert all(s.objective == least and s.recompute_layers == 0 for s in got)
    assert pool_enum.linear_optimum(p) == least


@pytest.mark.parametrize("seed", range(60))
def test_best_splits_match_brute_force_with_recompute(seed: int) -> None:
    """With recompute: the first split's objective is the brute force's over every N; a cutoff
    refuses only problems whose optimum is at least the cutoff."""
    rng = random.Random(700 + seed)
    p = random_problem(rng)
    p = replace(p, capacity_mib=tuple(c // rng.choice((1, 1, 2)) for c in p.capacity_mib))
    least = brute_force(p)
    got = pool_enum.best_splits(p)
    assert (got[0].objective if got else None) == least
    bound = pool_enum.linear_optimum(p, least_memory=True)
    if p.recompute and (recomputed := least_with_recompute(p)) is not None:
        assert bound is not None and bound <= recomputed
    if least is not None:
        cut = least * rng.choice((0.9, 1.0, 1.1))
        if not pool_enum.best_splits(p, cut):
            assert least >= cut


def test_twin_pools_are_solved_once() -> None:
    """Two pools with equal columns (the boundary term, per pool, too), capacity and stages:
    one of their two orders is solved, and the optimum is the brute force's over both."""
    base = random_problem(random.Random(3))
    twin = dict(
        stages=(2, 2),
        capacity_mib=(70, 70),
        boundary_us=(base.boundary_us[0],) * 2,
        **{
            g: tuple((row[0], row[0]) for row in getattr(base, g)[:1] * 4)
            for g in (
                "fixed_mib",
                "layer_mib",
                "recompute_mib",
                "fixed_us",
                "layer_us",
                "recompute_us",
            )
        },
    )
    p = replace(base, num_layers=8, recompute=False, **twin, **NO_EXTRAS)
    assert pool_order.twin_orders(p) == [(0, 1)]
    assert pool_enum.optimal_splits(p)[0].objective == brute_force(p)
    q = replace(p, capacity_mib=(70, 69))
    assert pool_order.twin_orders(q) == [(0, 1), (1, 0)]


def test_three_pools_orders() -> None:
    """Three pools, the first and last twins (equal columns, the boundary term's too): the
    orders with the twins in index order."""
    p = random_problem(random.Random(11))
    cols = [0, 1, 0]
    grids = ("fixed_mib", "layer_mib", "recompute_mib", "fixed_us", "layer_us", "recompute_us")
    pp = 4
    p = replace(
        p,
        stages=(1, 2, 1),
        num_layers=max(p.num_layers, pp),
        capacity_mib=(60, 50, 60),
        boundary_us=tuple(p.boundary_us[0] + 5 * c for c in cols),  # per pool: a column too
        **NO_EXTRAS,
        **{
            g: tuple(tuple(getattr(p, g)[0][0] + 5 * c for c in cols) for _ in range(pp))
            for g in grids
        },
    )
    orders = pool_order.twin_orders(p)
    assert orders == [(0, 1, 2), (0, 2, 1), (1, 0, 2)]
    assert pool_enum.optimal_splits(replace(p, recompute=False))[0].objective == brute_force(
        replace(p, recompute=False)
    )


def test_no_cp_sat_without_recompute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A problem without recompute never reaches CP-SAT (nor loads OR-Tools)."""

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("CP-SAT called")

    monkeypatch.setattr(pool_enum, "solve_pools", boom)
    for seed in range(20):
        p = replace(random_problem(random.Random(seed)), recompute=False)
        pool_enum.best_splits(p)


def test_plan_split_takes_the_exact_models_fastest_tie() -> None:
    """Llama 3.1 8B on 16 H100 + 16 H100 (twins): where the solver's objective ties, the plan is
    no slower than the exact model's fastest of the tied splits that fit, and where as fast,
    no later in (pools, layers) order (the splits `pool_exact` scores beside them include them:
    (step, pools, layers) is least over more splits)."""
    from planner.model import cost, memory
    from planner.search import pool_search

    job = pool_job(twins=True)
    tied = 0
    for lay in pool_search.layouts(job)[::5]:
        p = pools.problem(job, lay, 3.0, False)
        splits = pool_enum.best_splits(p)
        plan = pools.plan_split(job, lay, 3.0, recompute=False)
        if not splits or plan is None:
            continue
        tied += len(splits) > 1
        steps = []
        for s in splits:
            pj, sl = pools.apply(job, lay, s)
            if memory.estimate(pj, sl, 3.0).fits:
                steps.append((cost.estimate(pj, sl).step_time_s, s.pools, s.layers))
        if steps:
            want = min(steps)
            assert plan.split is not None
            assert (plan.performance.step_time_s, plan.split.pools, plan.split.layers) <= want
    assert tied >= 1


def test_cp_sat_is_deterministic() -> None:
    """The CP-SAT fallback's answer is picked among equally good ones by one worker under a
    deterministic time limit: the same problem gives the same split."""
    for seed in range(6):
        p = random_problem(random.Random(900 + seed))
        assert solver.solve_pools(p) == solver.solve_pools(p)


def test_compositions_helper() -> None:
    assert list(itertools.islice(compositions(4, 2), 3)) == [(1, 3), (2, 2), (3, 1)]


def least_with_recompute(p: PoolSplitProblem) -> int | None:
    """The brute force's least objective over N >= 1 only."""
    pp = sum(p.stages)
    best = None
    for order in itertools.permutations(range(len(p.stages))):
        ks = tuple(k for k in order for _ in range(p.stages[k]))
        for layers in compositions(p.num_layers, pp):
            for n in range(1, p.num_layers + 1):
                mem, times = stage_values(p, layers, ks, n)
                if all(v <= p.capacity_mib[k] for v, k in zip(mem, ks, strict=True)):
                    obj = objective_of(p, times, tail_of(p, layers, ks))
                    best = obj if best is None else min(best, obj)
    return best


@pytest.mark.parametrize("seed", range(80))
def test_recompute_bound_is_below_every_split(seed: int) -> None:
    """The memory-aware bound over every N >= 1 is at most the brute force's optimum over those
    N, and None only where none fits (a stage recomputing all its layers may need more memory
    than one recomputing fewer, so the relaxation, each rank its own best c, may fit where the
    one N shared by every rank does not); `split_bound` is below the optimum over every N;
    where `needs_solver` is False, N = 0's enumeration is optimal."""
    rng = random.Random(1100 + seed)
    p = replace(random_problem(rng), recompute=True)
    p = replace(p, capacity_mib=tuple(c // rng.choice((1, 1, 2, 3)) for c in p.capacity_mib))
    least = least_with_recompute(p)
    bound = pool_enum.recompute_bound(p)
    if bound is None:  # the relaxation fits nothing: nor does any N
        assert least is None
    if least is not None:
        assert bound is not None and bound <= least * (1 + 1e-12)
        weak = pool_enum.linear_optimum(p, least_memory=True)
        assert weak is not None
        if not p.tail_us:  # with a tail the bound takes its floor, the weak one its value
            assert weak <= bound * (1 + 1e-12)
    overall = brute_force(p)
    sb = pool_enum.split_bound(p)
    if sb is None:
        assert overall is None
    if overall is not None:
        assert sb is not None and sb <= overall * (1 + 1e-12)
        if not pool_enum.needs_solver(p):
            assert pool_enum.optimal_splits(p)[0].objective == overall


def test_recompute_bound_is_tighter_somewhere() -> None:
    """The bound is not vacuous: above the least-memory linear bound in some tight problems,
    and it spares CP-SAT some problems with recompute on."""
    tighter = spared = 0
    for seed in range(80):
        rng = random.Random(1100 + seed)
        p = replace(random_problem(rng), recompute=True)
        p = replace(p, capacity_mib=tuple(c // rng.choice((1, 1, 2, 3)) for c in p.capacity_mib))
        bound, weak = pool_enum.recompute_bound(p), pool_enum.linear_optimum(p, least_memory=True)
        tighter += bound is not None and weak is not None and bound > weak
        spared += pool_enum.linear_optimum(p) is not None and not pool_enum.needs_solver(p)
    assert tighter >= 5 and spared >= 5


@pytest.mark.parametrize("seed", range(60))
def test_a_target_changes_no_decision(seed: int) -> None:
    """`recompute_bound(p, target)` may stop refining once the answer is known to be at least
    `target`: whether it is below `target` is what the full bound says, at N = 0's optimum and
    around it (the targets `needs_solver` and `best_splits` pass)."""
    rng = random.Random(1300 + seed)
    p = replace(random_problem(rng), recompute=True)
    p = replace(p, capacity_mib=tuple(c // rng.choice((1, 1, 2, 3)) for c in p.capacity_mib))
    full = pool_enum.recompute_bound(p)
    least = pool_enum.linear_optimum(p)
    for target in (least, *(None if least is None else least * f for f in (0.9, 1.1))):
        if target is None:
            continue
        got = pool_enum.recompute_bound(p, target)
        assert (got is None) == (full is None)
        if full is not None and got is not None:
            assert (got < target) == (full < target)
