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
two 8192-wide norms, 106,971,136; the last stage adds the output layer, 129024 x 8192 / 8 =
132,120,576, and the final norm, 8192. With dp 128 (ZeRO 1) a GPU offloads 16 B x its
parameters / 128: 38 layers, 38 x 106,971,136 + 132,128,768 = 4,197,031,936 parameters,
524,628,992 B = 0.4886 GiB, fit the 0.5 GiB; 39 layers
add 13,371,392 B, 0.5010 GiB: over. The plan's 38 h100 layers passed `planner check` of the plan
`suggest --write-plan` wrote (host 0.5 GiB of 0.5 GiB usable, exit 0). Before the split kept to
the host, the search said no plan fits (every layout's best split puts 58 or 59 layers on the
h100 stage: 0.75 GiB a GPU)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from planner.inputs.plan import parse_plan
from planner.model import cost, host_memory, memory
from planner.search import pool_search, pools
from planner.search.rules import violations
from planner.search.solver import PoolSplit

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


def test_the_small_host_takes_fewer_layers() -> None:
    res = pool_search.search(_job("h100"), HEAD, top=3)
    assert res.plans and res.host_over is None
    for p in res.plans:
        assert host_memory.estimate(p.job, p.layout).fits and memory.estimate(p.job, p.layout).fits
    best = res.plans[0]
    assert best.layout.describe().startswith("tp8 pp2 dp128 ")
    h100 = [st.layers for st in best.memory.stages if st.pool == "h100"]
    assert h100 == [38]  # hand arithmetic above: 39 is over the host
    h = next(h for h in host_memory.by_pool(best.job, best.layout) if h.pool == "h100")
    assert h.total == 16 * 4_197_031_936 / 128 and h.capacity == 0.5 * GIB


def test_the_two_stage_split_is_the_fastest_within_the_hosts() -> None:
    """tp8 pp2 dp128 (TP overlap, mbs 1): every order and split of the 80 layers judged exactly;
    `plan_split` gives the fastest that fits the GPUs and both hosts."""
    job = _job("h100")
    lay = next(
        q for q in pool_search.layouts(job)
        if q.describe() == "tp8 pp2 dp128 sp tpov mbs1 zero1 recompute=none"
    )  # fmt: skip
    plan = pools.plan_split(job, lay, HEAD)
    L, steps = job.arch.num_layers, []
    for ks in ((0, 1), (1, 0)):
        for y in range(1, L):
            pj, sl = pools.apply(job, lay, PoolSplit((y, L - y), ks, 0, 0, ()))
            if violations(pj, sl) or not memory.estimate(pj, sl, HEAD).fits:
                continue
            if host_memory.estimate(pj, sl).fits:
                steps.append(cost.estimate(pj, sl).step_time_s)
    assert plan is not None and plan.performance.step_time_s == min(steps)


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
