"""The split solver within each pool's host memory (`PoolSplitProblem.most_layers`: the most
layers a rank holds on a pool, `planner.search.pool_host`): CP-SAT (`solve_pools`), the exact
enumeration (`pool_enum.optimal_splits`, `best_splits`), the feasibility check (`may_fit`) and
the host-aware bound (`pool_bounds.capped_bound_s`).

Oracle: brute force over every composition of the layers, every order of the pools in
contiguous blocks and every block recompute count (as tests/search/test_solver_pools.py), each
rank's layers checked against its cap here, from the grid itself."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from planner.search import pool_enum
from planner.search.pool_bounds import TimeLines, capped_bound_s
from planner.search.solver import (
    PoolSplitProblem,
    may_fit,
    objective_of,
    solve_pools,
    stage_values,
    tail_of,
)
from tests.search.test_solver_pools import compositions, random_problem


def capped(seed: int) -> PoolSplitProblem:
    """A random problem with random caps: from none to every layer, some ranks barred (0)."""
    rng = random.Random(9000 + seed)
    p = random_problem(rng)
    L, pp = p.num_layers, sum(p.stages)
    caps = tuple(tuple(rng.randint(0, L) for _ in p.stages) for _ in range(pp))
    return replace(p, most_layers=caps)


def brute_force(p: PoolSplitProblem, recompute: bool = True, memory: bool = True) -> int | None:
    """The least objective over every assignment within the caps (and the GPUs' memory where
    `memory`); None: none."""
    pp, best = sum(p.stages), None
    for order in itertools.permutations(range(len(p.stages))):
        ks = tuple(k for k in order for _ in range(p.stages[k]))
        for ys in compositions(p.num_layers, pp):
            if any(y > p.most_layers[r][k] for r, (y, k) in enumerate(zip(ys, ks, strict=True))):
                continue
            for n in range(p.num_layers + 1 if p.recompute and recompute else 1):
                mem, times = stage_values(p, ys, ks, n)
                if memory and any(v > p.capacity_mib[k] for v, k in zip(mem, ks, strict=True)):
                    continue
                obj = objective_of(p, times, tail_of(p, ys, ks))
                best = obj if best is None else min(best, obj)
    return best


def _within(p: PoolSplitProblem, layers: tuple[int, ...], pools: tuple[int, ...]) -> bool:
    return all(y <= p.most_layers[r][k] for r, (y, k) in enumerate(zip(layers, pools, strict=True)))


@pytest.mark.parametrize("seed", range(30))
def test_cp_sat_keeps_every_rank_within_its_cap(seed: int) -> None:
    p = capped(seed)
    want = brute_force(p)
    got = solve_pools(p)
    if want is None:
        assert got is None
        return
    assert got is not None and got.objective == want and _within(p, got.layers, got.pools)


@pytest.mark.parametrize("seed", range(60))
def test_enumeration_keeps_every_rank_within_its_cap(seed: int) -> None:
    """Without recompute the listed splits are optimal within the caps; with it, the first
    split of `best_splits` is (enumeration or CP-SAT)."""
    p = capped(seed)
    flat = replace(p, recompute=False)
    want = brute_force(flat)
    got = pool_enum.optimal_splits(flat)
    assert pool_enum.linear_optimum(flat) == want
    assert [s.objective for s in got[:1]] == ([] if want is None else [want])
    assert all(_within(p, s.layers, s.pools) for s in got)
    best = pool_enum.best_splits(p)
    want = brute_force(p)
    assert [s.objective for s in best[:1]] == ([] if want is None else [want])


@pytest.mark.parametrize("seed", range(60))
def test_may_fit_never_refuses_a_split_within_the_caps(seed: int) -> None:
    p = capped(seed)
    if not may_fit(p):
        assert brute_force(p) is None


def test_the_caps_refuse_some_and_bind_some() -> None:
    """Not vacuous: among the problems above some fit only without the caps, and some have a
    different optimum with them."""
    refused = changed = 0
    for seed in range(60):
        p = capped(seed)
        every = tuple((p.num_layers,) * len(p.stages) for _ in p.most_layers)
        free = brute_force(replace(p, most_layers=every))
        with_caps = brute_force(p)
        refused += free is not None and with_caps is None
        changed += free is not None and with_caps is not None and with_caps != free
    assert refused >= 3 and changed >= 3


@pytest.mark.parametrize("seed", range(60))
def test_capped_bound_is_below_every_split_within_the_caps(seed: int) -> None:
    """`capped_bound_s`, the GPUs' memory aside: no split within the caps (any N) is below it
    in the solver's objective (the closed form, no less than the exact step the bound is of:
    tests/search/test_pool_step_bound.py checks it against the exact step), and it is None
    exactly where no split is within them."""
    p = capped(seed)
    lines = TimeLines(
        p.num_layers, p.fixed_us, p.layer_us, p.recompute_us, p.microbatches, p.stages,
        p.boundary_us, p.tail_us,
    )  # fmt: skip
    bound = capped_bound_s(lines, p.most_layers)
    every = brute_force(p, memory=False)
    if every is None:
        assert bound is None
        return
    assert bound is not None and bound * 1e6 <= every * (1 + 1e-12)
