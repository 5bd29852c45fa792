"""The pooled search with data parallelism across the pools allowed (issue 25): it ranks the
plans whose data-parallel replicas span the pools against those whose pipeline crosses the link,
and picks the faster.

Oracles: enumeration. The pipeline-across answer is the search without the permission (its own
exactness is tests/search/test_pool_enum.py's); the data-parallel answer is every layout of
`pool_data.layouts` with every recompute that fits, scored by the exact model, no bound and no
cut. Two links on twin H100 pools, one where each kind wins, so that both are exercised. And the
permission off answers exactly as before (no data-parallel layout, no new output)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pool_problems import data_job

from planner.inputs.plan import Job, parse_plan
from planner.model import cost, memory
from planner.search import pool_data, pool_search
from planner.search.rules import violations

HEADROOM = 3.0


def every_data_plan(j: Job) -> float:
    """The least step of every data-parallel-across layout with any recompute that fits."""
    best = float("inf")
    for lay in pool_data.layouts(j):
        for rc in ("none", "selective", "full"):
            one = lay.with_(recompute=rc)
            if violations(j, one) or not memory.estimate(j, one, HEADROOM).fits:
                continue
            best = min(best, cost.estimate(j, one).step_time_s)
    return best


@pytest.mark.parametrize(
    ("bandwidth", "latency_us", "winner"),
    [(5.0, 500.0, "pipeline"), (50.0, 5.0, "data")],
)
def test_the_search_picks_the_faster_kind(bandwidth: float, latency_us: float, winner: str) -> None:
    j = data_job(bandwidth, latency_us)
    pipeline = pool_search.search(replace(j, pools_data_parallel=False), HEADROOM)
    data = every_data_plan(j)
    both = pool_search.search(j, HEADROOM)
    best = both.plans[0]
    expected = min(pipeline.plans[0].performance.step_time_s, data)
    assert best.performance.step_time_s == pytest.approx(expected, rel=1e-12)
    assert (best.layout.dp_pools > 1) == (winner == "data")
    assert (data < pipeline.plans[0].performance.step_time_s) == (winner == "data")
    assert both.best_pipeline is not None
    assert both.best_pipeline.performance.step_time_s == pipeline.plans[0].performance.step_time_s


def test_without_the_permission_nothing_changes() -> None:
    j = data_job(50.0, 5.0)
    off = replace(j, pools_data_parallel=False)
    res = pool_search.search(off, HEADROOM)
    assert all(p.layout.dp_pools == 1 for p in res.plans)
    assert res.data is None and res.best_data is None
    assert res.layouts == len(pool_search.layouts(off))


def test_pools_of_different_sizes_have_no_such_layout() -> None:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {
            "pools": [
                {"name": "a", "gpu": "h100-sxm-80gb", "num_gpus": 16},
                {"name": "b", "gpu": "h100-sxm-80gb", "num_gpus": 32},
            ],
            "between_pools": {"bandwidth_gb_per_s_per_gpu": 50.0, "allow_data_parallel": True},
        },
        "training": {"seq_length": 4096, "global_batch_size": 96},
    }
    assert pool_data.layouts(parse_plan(doc).job) == []
