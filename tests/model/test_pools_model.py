"""planner.model.pools and the per-stage pool in memory.estimate / cost.estimate (issue 25).

Oracles: identity (two pools of one GPU kind joined by that GPU's own outermost tier are the
plain cluster: the same memory and, up to the hop the pools' own smaller span may choose, the
same step time), the catalog (an A100 stage runs the same layers slower than an H100 stage:
312 vs 989 dense bf16 TFLOP/s), and hand arithmetic on which ranks land on which pool."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs.plan import parse_plan
from planner.model import cost, memory
from planner.model.pools import pool_problem, rank_pools


def plan(pools: list[dict[str, Any]], between: dict[str, Any] | None = None, **par: Any):
    cluster: dict[str, Any] = {"pools": pools}
    if between is not None:
        cluster["between_pools"] = between
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": cluster,
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "parallel": {"tp": 2, "pp": 4, **par},
    }
    return parse_plan(doc)


def test_ranks_map_to_pools_in_blocks() -> None:
    """Pools of 16 and 8 GPUs, stages of tp 2 x dp 4 = 8 GPUs: ranks 0, 1 on the first pool,
    rank 2 on the second (pp 3)."""
    p = plan(
        [
            {"name": "a", "gpu": "h100-sxm-80gb", "num_gpus": 16},
            {"name": "b", "gpu": "a100-sxm-80gb", "num_gpus": 8},
        ],
        pp=3,
        dp=4,
    )
    assert p.layout is not None
    assert rank_pools(p.job, p.layout) == (0, 0, 1)
    assert pool_problem(p.job, p.layout) is None
    bad = p.layout.with_(dp=2, pp=6)  # stages of 4 GPUs: 4 + 2 stages, pp 6 - fine
    assert pool_problem(p.job, bad) is None
    worse = p.layout.with_(dp=3)  # stages of 6 GPUs do not divide 16
    assert "not a multiple" in (pool_problem(p.job, worse) or "")


def test_same_gpu_pools_equal_the_plain_cluster() -> None:
    h100 = {"gpu": "h100-sxm-80gb", "num_gpus": 16}
    pooled = plan([{"name": "a", **h100}, {"name": "b", **h100}], dp=4)
    plain = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 32},
            "training": {"seq_length": 4096, "global_batch_size": 64},
            "parallel": {"tp": 2, "pp": 4, "dp": 4},
        }
    )
    assert pooled.layout is not None and plain.layout is not None
    m1 = memory.estimate(pooled.job, pooled.layout)
    m0 = memory.estimate(plain.job, plain.layout)
    assert [s.total for s in m1.stages] == pytest.approx([s.total for s in m0.stages])
    assert [s.pool for s in m1.stages] == ["a", "a", "b", "b"]
    t1 = cost.estimate(pooled.job, pooled.layout).step_time_s
    t0 = cost.estimate(plain.job, plain.layout).step_time_s
    assert t1 == pytest.approx(t0, rel=0.01)


def test_a100_stages_slower_and_slow_link_costs() -> None:
    pools = [
        {"name": "h", "gpu": "h100-sxm-80gb", "num_gpus": 16},
        {"name": "a", "gpu": "a100-sxm-80gb", "num_gpus": 16},
    ]
    fast = plan(pools, dp=4)
    assert fast.layout is not None
    perf = cost.estimate(fast.job, fast.layout)
    per_stage = [f + b for f, b in perf.stages]
    assert min(per_stage[2:]) > 2 * max(per_stage[:2])  # 989 / 312 ~ 3.2x the FLOP rate
    slow = plan(pools, {"bandwidth_gb_per_s_per_gpu": 1.0, "latency_us": 10000}, dp=4)
    assert slow.layout is not None
    # 10 ms latency on each of the 2 stages at the boundary, each way, at least once per step
    assert cost.estimate(slow.job, slow.layout).step_time_s > perf.step_time_s + 0.02


def test_the_steps_fixed_host_time_is_the_slowest_pools() -> None:
    """GB200's Grace host issues at 1.25x the reference Xeon's time (host.HOST_CPU_SLOWDOWN),
    H100's at 1.0: the step's fixed time, cost.STEP_OVERHEAD_S (10 ms) x 1.25 = 12.5 ms, on
    every rank's host, whichever pool runs the first stages. It read the first pool's host
    (a fuzzer: suggest 12.5 ms, check of the plan it wrote, pools in pipeline order, 10 ms)."""
    gb200 = {"name": "g", "gpu": "gb200-nvl72", "num_gpus": 16}
    h100 = {"name": "h", "gpu": "h100-sxm-80gb", "num_gpus": 16}
    others = []
    for pools in ([gb200, h100], [h100, gb200]):
        p = plan(pools, dp=4)
        assert p.layout is not None
        others.append(cost.estimate(p.job, p.layout).breakdown.other)
    assert others == [pytest.approx(cost.STEP_OVERHEAD_S * 1.25)] * 2
