"""Data parallelism across pools (issue 25, `Layout.dp_pools`): the gradient all-reduce over the
link, the memory of a pool's replicas, lock-step, and the rules.

Oracles: hand arithmetic of the hierarchical reduction (each bucket: a ring reduce-scatter
inside a pool's NVLink node, (n-1)/n S / B_in + (n-1) alpha_in; the all-reduce of its S / n
shard between the two pools, 2 (P-1)/P (S / n) / B_link + 2 alpha_link; a ring parameter
all-gather inside the pool), Megatron's partial distributed optimizer (the optimizer state sharded
over one instance, dp / P ranks: Megatron-LM d98e8a64 param_and_grad_buffer.py, parallel_state.py
`intra_partial_data_parallel_size`), and lock-step (the slowest pool's replica sets the step)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import cost, dp_sync, memory, pools
from planner.model.stage_params import stage_params
from planner.search.rules import violations

SMALL = {
    "name": "small",
    "num_layers": 8,
    "hidden_size": 2048,
    "ffn_hidden_size": 8192,
    "num_attention_heads": 16,
    "vocab_size": 32000,
    "position_embedding_type": "rope",
}
LINK = {"bandwidth_gb_per_s_per_gpu": 10.0, "latency_us": 1000.0, "allow_data_parallel": True}


def two_pools(
    gpus: tuple[str, str] = ("h100-sxm-80gb", "h100-sxm-80gb"), n: int = 8, **link: Any
) -> Job:
    doc = {
        "model": SMALL,
        "cluster": {
            "pools": [{"name": f"p{k}", "gpu": g, "num_gpus": n} for k, g in enumerate(gpus)],
            "between_pools": {**LINK, **link},
        },
        "training": {"seq_length": 2048, "global_batch_size": 32},
    }
    return parse_plan(doc).job


ACROSS = Layout(tp=1, pp=1, dp=16, micro_batch_size=1, zero_stage=1, dp_pools=2)
"""8 replicas in each pool of 8 H100 (one NVLink node): the instance is the node."""


def test_the_link_part_by_hand() -> None:
    job = two_pools()
    (view, lay), _ = pools.replica_views(job, ACROSS)
    assert (view.cluster.num_gpus, lay.dp, view.global_batch_size) == (8, 8, 16)
    dense, expert = stage_params(view, lay, 0, lay.chunk_layers(8)[0])
    assert expert == 0
    # buckets of max(40M, 1M x 16) parameters; fp32 gradients (4 bytes)
    buckets = math.ceil(dense / 40e6)
    shard = 4 * dense / buckets / 8  # one bucket's reduce-scatter shard on each of 8 GPUs
    link_bw = 10e9 * 0.92  # the link's line rate per GPU x the scale-out bus efficiency
    one = 2 * (2 - 1) / 2 * shard / link_bw + 2 * 1e-3  # two pools: 1/2 each way, 2 latencies
    assert pools.link_seconds(view, lay, dense, expert) == pytest.approx(buckets * one)


def test_the_whole_reduction_by_hand() -> None:
    job = two_pools()
    (view, lay), _ = pools.replica_views(job, ACROSS)
    dense, _ = stage_params(view, lay, 0, lay.chunk_layers(8)[0])
    nvlink = view.cluster.tiers[0]
    # scale-up bus efficiency x NCCL's ring share of 8 H100 ranks (nccl_shares.NCCL_NVLINK_SHARE)
    b_in = nvlink.bandwidth_gb_per_s_per_gpu * 1e9 * 0.80 * 0.915
    a_in = nvlink.latency_us * 1e-6
    call = 16.8e-6  # NCCL's ring call (nccl_shares.NCCL_CALL_S)

    def bucket(buckets: int) -> float:  # one bucket's reduce-scatter, link and all-gather
        grad, param = 4 * dense / buckets, 2 * dense / buckets
        rs = 7 / 8 * grad / b_in + 7 * a_in + call  # ring reduce-scatter over the node's 8 GPUs
        ag = 7 / 8 * param / b_in + 7 * a_in + call  # ring all-gather of the bf16 parameters
        across = (grad / 8) / (10e9 * 0.92) + 2e-3
        return rs + across + ag

    groups = dp_sync.data_parallel_groups(view.cluster, lay)
    # no window to hide in: everything shows, in one bucket (Megatron sets bucket_size None
    # without the grad-reduce overlap, training.py:2192-2193 at d98e8a64)
    shut = lay.with_(overlap_grad_reduce=False, overlap_param_gather=False)
    exposed, hidden = pools.data_parallel(view, groups, shut, dense, 0.0, 1.0, 1.0, 4)
    assert hidden == 0.0
    assert exposed == pytest.approx(bucket(1))
    # a window longer than the traffic: one bucket of each shows (its last), the rest hides
    buckets = math.ceil(dense / 40e6)
    exposed, hidden = pools.data_parallel(view, groups, lay, dense, 0.0, 1e3, 1e3, 4)
    assert exposed == pytest.approx(bucket(buckets))
    assert hidden == pytest.approx((buckets - 1) * bucket(buckets))


def test_the_optimizer_is_sharded_over_one_pool() -> None:
    # Megatron's partial distributed optimizer: each instance (a pool, 8 of the 16 replicas)
    # holds the whole optimizer state, sharded over its own 8 ranks: twice one over 16
    job = two_pools()
    across = memory.estimate(job, ACROSS).stages[0]
    one_kind = parse_plan(
        {
            "model": SMALL,
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
            "training": {"seq_length": 2048, "global_batch_size": 32},
        }
    ).job
    whole = memory.estimate(one_kind, ACROSS.with_(dp_pools=1)).stages[0]
    assert across.optimizer == pytest.approx(2 * whole.optimizer)
    assert across.weights == whole.weights and across.pool == "p0"


def test_lock_step_the_slowest_pool_sets_the_step() -> None:
    # an A100 pool beside an H100 one runs as two A100 pools would: each replica waits for the
    # slowest at every gradient all-reduce
    mixed = cost.estimate(two_pools(("a100-sxm-80gb", "h100-sxm-80gb")), ACROSS)
    slow = cost.estimate(two_pools(("a100-sxm-80gb", "a100-sxm-80gb")), ACROSS)
    fast = cost.estimate(two_pools(), ACROSS)
    assert mixed.step_time_s == pytest.approx(slow.step_time_s)
    assert fast.step_time_s < slow.step_time_s
    # tokens per GPU over all 16 GPUs; MFU against the mean of the two peaks
    tokens = 32 * 2048 / (mixed.step_time_s * 16)
    assert mixed.tokens_per_s_per_gpu == pytest.approx(tokens)
    assert slow.mfu * 312 == pytest.approx(mixed.mfu * (312 + 989) / 2)


def test_a_slower_link_costs_more() -> None:
    slow = cost.estimate(two_pools(latency_us=20000.0), ACROSS).step_time_s
    fast = cost.estimate(two_pools(latency_us=10.0), ACROSS).step_time_s
    assert slow > fast


@pytest.mark.parametrize(
    ("job_kw", "layout", "needle"),
    [
        ({"allow_data_parallel": False}, ACROSS, "allow_data_parallel = true"),
        ({}, ACROSS.with_(zero_stage=2), "zero_stage 1"),
        ({}, ACROSS.with_(dp_pools=3), "the cluster has 2 pools"),
        ({}, ACROSS.with_(tp=2, dp=4, sequence_parallel=True), "not whole nodes"),
    ],
)
def test_what_data_parallelism_across_pools_needs(
    job_kw: dict[str, Any], layout: Layout, needle: str
) -> None:
    job = two_pools(**job_kw)
    assert any(needle in v.message for v in violations(job, layout)), violations(job, layout)


def test_pools_of_one_size() -> None:
    doc = {
        "model": SMALL,
        "cluster": {
            "pools": [
                {"name": "a", "gpu": "h100-sxm-80gb", "num_gpus": 16},
                {"name": "b", "gpu": "h100-sxm-80gb", "num_gpus": 8},
            ],
            "between_pools": LINK,
        },
        "training": {"seq_length": 2048, "global_batch_size": 48},
    }
    job = parse_plan(doc).job
    why = pools.replica_problem(job, ACROSS.with_(dp=24))
    assert why is not None and "16 + 8" in why
