"""The pooled search keeps no plan over a pool's host memory (QA: `suggest` on pools never asked
it, and ranked first a plan whose h100 stage offloads 0.75 GiB of optimizer a GPU to a host
share of 0.5 GiB, which `check` of the written plan then refused), and its split keeps each
stage within its pool's host (`PoolSplitProblem.most_layers`): fewer layers on the pool whose
host is small.

Oracles: `host_memory.estimate` of each plan returned (each stage against its own pool's share);
every split of a two-stage pipeline judged by the exact model (GPU memory, host memory, step);
and hand arithmetic. A pool with 260 GiB nodes of 8 GPUs leaves 260 / 8 - 32 = 0.5 GiB a GPU
(HOST_RESERVED_GIB_PER_GPU 32). Llama 3.1 70B (hidden 8192, FFN 28672, 64 heads, 8 query groups,
vocabulary 128256, padded to 129024, a multiple of 128 x tp) at tp 8: a decoder layer holds
(2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672) / 8 = 106,954,752 parameters a GPU plus its
two 8192-wide norms, 106,971,136; the first stage adds the word embedding, 129024 x 8192 / 8 =
132,120,576. With dp 128 (ZeRO 1) and the whole optimizer offloaded a GPU pins, before the
pinned blocks' round-up, 16 B x its parameters / 128 of optimizer and 2 B x its parameters /
128 of checkpoint staging (its bf16 weights' share; the optimizer state is on the host
already): 18 / 128 = 0.140625 B a parameter. Then 38 layers (the answer before the staging and
the round-up were counted), 38 x 106,971,136 + 132,120,576 = 4,197,023,744 parameters, are
590,206,464 B = 0.5497 GiB: over 0.5 GiB before any round-up; 34 layers at most fit without it
(0.5 x 2^30 / 0.140625 = 3,817,748,707 parameters, less the embedding, over 106,971,136: 34.45),
and the round-up (`host_pinned`) leaves fewer, found by trying every count. Before the split
kept to the host, the search said no plan fits (every layout's best split put 58 or 59 layers
on the h100 stage)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from planner.inputs.plan import parse_plan
from planner.model import cost, host_memory, memory
from planner.search import pool_search, pools
from planner.search.rules import violations
from planner.search.solver import PoolSplit, objective_of, stage_values, tail_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools-llama3.1-70b-h100-a100.toml"
HEAD = 3.0
GIB = 2**30


def _job(small: str, gib_per_node: float = 260) -> Any:
    doc = tomllib.loads(EXAMPLE.read_text())
    doc["training"]["optimizer_offload_fraction"] = 1.0
    for pool in doc["cluster"]["pools"]:
        if pool["name"] == small:
            pool["host_memory_gib_per_node"] = gib_per_node
    return parse_plan(doc).job


def _two_stage(job: Any) -> Any:
    return next(
        q for q in pool_search.layouts(job)
        if q.describe() == "tp8 pp2 dp128 sp tpov mbs1 zero1 recompute=none"
    )  # fmt: skip


def test_the_small_host_takes_fewer_layers() -> None:
    job = _job("h100")
    res = pool_search.search(job, HEAD, top=3)
    assert res.plans and res.host_over is None
    for p in res.plans:
        assert host_memory.estimate(p.job, p.layout).fits and memory.estimate(p.job, p.layout).fits
    best = res.plans[0]
    assert best.layout.describe().startswith("tp8 pp2 dp128 ")
    assert best.split is not None
    # brute force: the most layers the h100 stage holds with its pool's host fitting, first
    # (with the embedding, the hand arithmetic above) and where the plan puts it
    L, lay = job.arch.num_layers, _two_stage(job)

    def most(ks: tuple[int, ...]) -> int:
        at = ks.index(0)
        fit = []
        for y in range(1, L):
            ys = (y, L - y) if at == 0 else (L - y, y)
            pj, sl = pools.apply(job, lay, PoolSplit(ys, ks, 0, 0, ()))
            if next(h for h in host_memory.by_pool(pj, sl) if h.pool == "h100").fits:
                fit.append(y)
        return max(fit)

    h100 = [st.layers for st in best.memory.stages if st.pool == "h100"]
    assert len(h100) == 1 and h100[0] <= most(best.split.pools)
    first = most((0, 1))
    assert first <= 34  # hand arithmetic above: 34 at most
    # hand arithmetic above: the pinned bytes before the round-up, 0.140625 B a parameter
    pj, sl = pools.apply(job, lay, PoolSplit((first, L - first), (0, 1), 0, 0, ()))
    params = first * 106_971_136 + 132_120_576
    chunks = sl.chunk_layers(L)[0]
    floor = host_memory.rank_fixed_bytes(pj, sl, 0, chunks, "floor")
    assert sum(floor) == 18 * params / 128
    h = next(h for h in host_memory.by_pool(pj, sl) if h.pool == "h100")
    assert 18 * params / 128 < h.total <= h.capacity == 0.5 * GIB


def test_the_two_stage_split_is_the_best_within_the_hosts() -> None:
    """tp8 pp2 dp128 (TP overlap, mbs 1): every order and split of the 80 layers judged exactly
    (the GPUs' and both hosts' memory); `plan_split` gives the fastest of those that fit: the
    host caps leave out no split that fits.

    Not the split solver's objective's pick (1F1B's closed form on `problem`'s lines:
    `solver.objective_of`): the exact model runs an earlier slowest stage faster than the
    closed form (`pool_step_bound`'s docstring), here the a100 stage first with 56 layers,
    14.39 s, where the closed form ranks the h100 stage first with 25 (14.65 s) best; the
    exact model's scoring of the splits the bound leaves (`pool_exact`) finds the former."""
    job = _job("h100")
    lay = _two_stage(job)
    plan = pools.plan_split(job, lay, HEAD)
    p = pools.problem(job, lay, HEAD, False)
    L, scored = job.arch.num_layers, []
    for ks in ((0, 1), (1, 0)):
        for y in range(1, L):
            ys = (y, L - y)
            pj, sl = pools.apply(job, lay, PoolSplit(ys, ks, 0, 0, ()))
            if violations(pj, sl) or not memory.estimate(pj, sl, HEAD).fits:
                continue
            if host_memory.estimate(pj, sl).fits:
                times = stage_values(p, ys, ks, 0)[1]
                closed = objective_of(p, times, tail_of(p, ys, ks))
                scored.append((closed, cost.estimate(pj, sl).step_time_s, ks, ys))
    least = min(c for c, *_ in scored)
    solvers = min(t for c, t, *_ in scored if c == least)
    fastest = min(scored, key=lambda s: s[1:])
    assert plan is not None and plan.split is not None
    assert (plan.step_time, plan.split.pools, plan.split.layers) == fastest[1:]
    assert fastest[1] < solvers  # the closed form's pick is slower exactly (the QA's case)


def test_no_split_fits_a_host_with_nothing_usable() -> None:
    """256 GiB over 8 GPUs: 32 GiB a GPU, all of it reserved (0 usable): no stage on the h100
    pool can offload even one layer's optimizer, so no layout fits, and the report names it."""
    res = pool_search.search(_job("h100", 256), HEAD, top=3)
    assert not res.plans and res.solved == 0
    assert res.host_over is not None and "'h100': 0.00 GiB" in res.host_over


def test_the_plans_returned_fit_every_pools_host() -> None:
    job = _job("a100")  # the a100 stage's share is the smaller (21 of 80 layers): it fits
    res = pool_search.search(job, HEAD, top=3)
    assert res.plans and res.host_over is None
    assert all(host_memory.estimate(p.job, p.layout).fits for p in res.plans)
