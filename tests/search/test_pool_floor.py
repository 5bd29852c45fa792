"""The pooled searches' cheaper bounds and shared estimates, each against its oracle:
`pools.floor_lines`' bound against the bound of the exact time lines
(`pool_bounds.lower_bound_s(pools.time_lines(...))`, four exact estimates per pool) on every
layout of the pooled problems; `pool_search._by_bound`'s order against a plain sort of every
layout by that bound (then by its place, as a stable sort leaves ties); the lines and problems
built with the recomputed samples shared (`pools.Recomputed`) against each layout's own
estimates; `pool_data.step_floor` against the exact model on every recompute of every
data-parallel layout; and `pool_data.search`'s plans against a scan that scores every layout it
reaches (the search before its floor). The searches' answers themselves:
tests/search/test_solver_pools.py, test_pool_search_moe.py and test_pool_data_search.py (brute
force)."""

from __future__ import annotations

import bisect
from dataclasses import replace

import pytest
from pool_problems import data_job, pool_job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model import pools as model_pools
from planner.search import pool_bounds, pool_data, pool_search, pools
from planner.search.pool_plan import PoolPlan
from planner.search.pool_tails import NONE, tail_floor
from planner.search.rules import violations

HEADROOM = 3.0


JOBS = {
    "a100+h100": lambda: pool_job(),
    "twin h100": lambda: pool_job(twins=True),
    "mixtral a100+h100": lambda: pool_job("mixtral-8x7b"),
}


def _plains(job: Job) -> list[Layout]:
    """The layouts' time-line keys: a stage's time per micro-batch does not read the ZeRO
    stage."""
    return list(dict.fromkeys(lay.with_(zero_stage=1) for lay in pool_search.layouts(job)))


def _floor(job: Job, lay: Layout, tight: bool = True) -> float:
    """The search's floor of a layout (`pool_search._by_bound`): `lower_bound_s` of
    `pools.floor_lines`, with the layout's tail floor where `tight`, less 1e-9 of itself."""
    least = pools.floor_lines(job, lay)
    tails = tail_floor(job, lay) if tight else NONE
    return 0.0 if least is None else pool_bounds.lower_bound_s(least, tight, tails) * (1 - 1e-9)


def _bound(job: Job, lay: Layout) -> float:
    """The bound of the layout's exact time lines with its tail floor."""
    return pool_bounds.lower_bound_s(pools.time_lines(job, lay), True, tail_floor(job, lay))


@pytest.mark.parametrize("name", list(JOBS))
def test_the_floor_lines_bound_is_below_the_bound_of_the_exact_lines(name: str) -> None:
    job = JOBS[name]()
    tight = 0
    for lay in _plains(job):
        exact = _bound(job, lay)
        for cheap in (False, True):  # the linear programme's optimum grows with every line
            floor = _floor(job, lay, not cheap)
            assert floor <= exact, (lay.describe(), cheap, floor, exact)
        tight += floor > 0.9 * exact
    assert tight > 0  # a floor that says something


def test_more_ranks_than_half_the_layers_with_a_per_layer_pattern() -> None:
    """DeepSeek-V2-Lite (27 layers, its dense and MoE layers a per-layer list, moe_layer_freq)
    on pp 16: the samples give every rank 1 and 2 layers, 32 in all, past the model's 27; the
    list named 27 kinds, and the lines indexed past them (a fuzzer's IndexError in suggest).
    The added layers repeat the last kind; the model's own keep theirs; the floor stays below
    the exact lines' bound."""
    job = pool_job("deepseek-v2-lite")
    assert isinstance(job.arch.moe_layer_freq, tuple) and job.arch.num_layers == 27
    deep = [lay for lay in _plains(job) if 2 * lay.pp > job.arch.num_layers]
    assert deep
    for lay in deep:
        assert _floor(job, lay) <= pool_bounds.lower_bound_s(pools.time_lines(job, lay))
    roomy = pools._room(job, 32).arch
    own = job.arch.layer_kinds
    assert roomy.layer_kinds == own + (own[-1],) * 5


@pytest.mark.parametrize("name", list(JOBS))
def test_layouts_come_in_the_order_of_their_exact_bound(name: str) -> None:
    """What the lazy queue yields is a stable sort of every layout by its lines' bound with its
    tail floor (the larger where its hosts cap its stages' layers: `capped_bound_s`; each
    floor below both, `test_the_floor_lines_bound_is_below_the_bound_of_the_exact_lines`),
    each with the lines `time_lines` gives it and its own tail floor."""
    job = JOBS[name]()
    todo = pool_search.layouts(job)
    lines = {lay: pools.time_lines(job, lay) for lay in _plains(job)}

    def key(lay: Layout) -> float:
        caps, tails = pools.host_caps(job, lay), tail_floor(job, lay)
        capped = pool_bounds.capped_bound_s(lines[lay], caps, tails) if caps else None
        return max(_bound(job, lay), capped or 0.0)

    want = sorted(todo, key=key)
    got = list(pool_search._by_bound(job, todo, pools.Recomputed(), []))
    assert [lay for lay, *_ in got] == want
    assert all(t == lines[lay.with_(zero_stage=1)] for lay, t, _, _ in got)
    assert all(tails == tail_floor(job, lay) for lay, _, tails, _ in got)
    assert all(b == key(lay) for lay, _, _, b in got)


def test_shared_recomputed_samples_change_no_line() -> None:
    """One `Recomputed` across every layout, as the search keeps it: the same lines and problems
    as each layout's own estimates, and the none and selective layouts do share their samples
    with every layer recomputed (two per pool and layout otherwise). Without flash attention,
    where the search offers selective recompute (`pool_recompute`; under it none)."""
    job = replace(pool_job(), flash_attention=False)
    assert {lay.recompute for lay in pool_search.layouts(job)} == {"none", "selective"}
    shared = pools.Recomputed()
    plains = _plains(job)
    for lay in plains:
        assert pools.time_lines(job, lay, shared) == pools.time_lines(job, lay)
    assert len(shared.times) < 2 * len(job.pools) * len(plains)
    for lay in pool_search.layouts(job):
        times = pools.time_lines(job, lay.with_(zero_stage=1), shared)
        rc = lay.recompute == "none"
        got = pools.problem(job, lay, HEADROOM, rc, times, shared)
        assert got == pools.problem(job, lay, HEADROOM, rc)


def test_room_job_is_one_object_per_count() -> None:
    """A pipeline of more ranks than half the layers samples two layers a rank, on a job with
    room for them (`pools._room`): one job object per count, whose lines are those of a fresh
    job per layout (the memo forgotten before each)."""
    job = pool_job()
    base = model_pools.pool_job(job, 0)
    more = base.arch.num_layers + 8
    assert pools._room(base, more) is pools._room(base, more)
    roomy = [lay for lay in _plains(job) if 2 * lay.pp > job.arch.num_layers]
    assert roomy
    for lay in roomy:
        kept = pools.time_lines(job, lay)
        pools._ROOMY.clear()
        assert pools.time_lines(job, lay) == kept


def test_step_floor_is_below_every_recompute() -> None:
    job = data_job()
    checked = 0
    for lay in pool_data.layouts(job):
        floor = pool_data.step_floor(job, lay)
        for rc in pool_data.LADDER:
            one = lay.with_(recompute=rc)
            if violations(job, one):
                continue
            exact = cost.estimate(job, one).step_time_s
            assert floor <= exact, (one.describe(), floor, exact)
            checked += 1
    assert checked > 0


def _scan_every(job: Job, top: int, known: list[float]) -> list[tuple[int, PoolPlan]]:
    """The data-parallel scan scoring every layout it reaches (no floor): each plan with its
    place in the scan."""
    times = sorted(known)
    todo = pool_data.layouts(job)
    bounded = sorted((pool_data.lower_bound_s(job, lay), i, lay) for i, lay in enumerate(todo))
    found = []
    for place, (bound, _, lay) in enumerate(bounded):
        if len(times) >= top and bound >= times[top - 1]:
            break
        plan = pool_data.score(job, lay, HEADROOM)
        if plan is not None:
            found.append((place, plan))
            bisect.insort(times, plan.performance.step_time_s)
    return found


def _key(plan: PoolPlan) -> tuple[float, Layout]:
    return plan.performance.step_time_s, plan.layout


@pytest.mark.parametrize(("bandwidth", "latency_us"), [(5.0, 500.0), (50.0, 5.0)])
@pytest.mark.parametrize("known", ["none", "one", "pipelines", "at the best's floor"])
def test_data_search_keeps_what_scoring_every_layout_keeps(
    bandwidth: float, latency_us: float, known: str
) -> None:
    """The best plan of the kind and every plan that may enter the top (no slower than the
    final top-th step of all, pipelines' included) are the full scan's, in its order; what the
    floor spares is only slower than both. `known`: no step known before, fewer than the top,
    the pipelines' top, and the top all at the best data plan's own floor (so that it waits
    and the floor's wait decides the best)."""
    job = data_job(bandwidth, latency_us)
    top = 3
    if known == "pipelines":
        off = pool_search.search(replace(job, pools_data_parallel=False), HEADROOM, top=top)
        steps = [q.performance.step_time_s for q in off.plans]
    elif known == "at the best's floor":
        best = min(
            (p for _, p in _scan_every(job, top, [])), key=lambda q: q.performance.step_time_s
        )
        steps = [pool_data.step_floor(job, best.layout.with_(recompute="none"))] * top
    else:
        steps = {"none": [], "one": [1e-3]}[known]
    every = _scan_every(job, top, steps)
    want = [p for _, p in sorted(every, key=lambda f: f[0])]
    want = sorted(want, key=lambda q: q.performance.step_time_s)
    res = pool_data.search(job, HEADROOM, top, steps)
    assert want and res.plans
    assert _key(res.plans[0]) == _key(want[0])
    last = sorted(steps + [q.performance.step_time_s for q in want])[top - 1]
    keep = [_key(q) for q in want if q.performance.step_time_s <= last]
    assert [_key(q) for q in res.plans if q.performance.step_time_s <= last] == keep
    assert {_key(q) for q in res.plans} <= {_key(q) for q in want}
