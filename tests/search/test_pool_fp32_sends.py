"""The pooled search's pipeline message between pools in fp32 training (planner/search/pools.py
`time_lines`' boundary, planner/search/pool_costs.py `slow_link`): 4 bytes a value.

Oracles: Megatron-LM d98e8a64 sends and receives config.pipeline_dtype
(pipeline_parallel/p2p_communication.py:340, 348), which is args.params_dtype
(training/argument_utils.py:306): torch.float without --bf16 / --fp16 (arguments.py:1194). Hand
arithmetic on the message's bytes, and the exact model (`cost.estimate`, which sizes the same
sends in the job's dtype): the step time the slow link adds is the two boundary stages' extra hop
each, twice the split solver's boundary coefficient, in bf16 and fp32 alike."""

from __future__ import annotations

import pytest

from planner.inputs.plan import Plan, parse_plan
from planner.model import comms, cost
from planner.search import pool_costs
from planner.search.pools import time_lines

T, H, TP = 4096, 4096, 2  # one micro-batch of 4096 tokens, Llama 3.1 8B's hidden size, tp 2


def _plan(precision: str) -> Plan:
    """Llama 3.1 8B on twin pools of 16 H100 joined by 5 GB/s per GPU at 500 us, tp 2 with
    sequence parallelism x pp 4 x dp 4: one boundary between pools, after the second stage."""
    pools = [{"name": n, "gpu": "h100-sxm-80gb", "num_gpus": 16} for n in "ab"]
    return parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {
                "pools": pools,
                "between_pools": {"bandwidth_gb_per_s_per_gpu": 5.0, "latency_us": 500.0},
            },
            "training": {"seq_length": T, "global_batch_size": 64, "precision": precision},
            "parallel": {"tp": TP, "pp": 4, "dp": 4, "sequence_parallel": True},
        }
    )


def test_the_slow_links_hop_carries_fp32_activations() -> None:
    hops = {}
    for precision in ("bf16", "fp32"):
        plan = _plan(precision)
        lay = plan.require_layout()
        link = pool_costs.slow_link(plan.job, lay, cost.estimate(plan.job, lay))
        assert link is not None and link.crossings == 1
        hops[precision] = link.hop_s
    assert plan.job.between_pools is not None
    wan = comms.achieved(plan.job.between_pools, False)
    # the message: T x H / tp values (sequence parallel), 2 bytes each in bf16, 4 in fp32; the
    # latency is the same, so fp32's hop is longer by 2 x 4096 x 4096 / 2 bytes over the link
    assert hops["bf16"] == pytest.approx(comms.p2p(2 * T * H / TP, wan))
    assert hops["fp32"] - hops["bf16"] == pytest.approx(2 * T * H / TP / wan.bandwidth)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_split_solvers_boundary_is_the_exact_models(precision: str) -> None:
    plan = _plan(precision)
    lay = plan.require_layout()
    link = pool_costs.slow_link(plan.job, lay, cost.estimate(plan.job, lay))
    assert link is not None
    first, second = time_lines(plan.job, lay).boundary_us  # per pool: twins, the same
    # `time_lines` rounds to the microsecond; one stage of each pool at the boundary
    assert first == second
    assert first + second == pytest.approx(link.added_s * 1e6, abs=2)
