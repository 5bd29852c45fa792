"""What `space.group_of`'s docstring says of the micro-batch group g: the smallest g Megatron
takes is the leanest, not always the fastest."""

from __future__ import annotations

from typing import Any

from planner.inputs.plan import parse_plan
from planner.model import memory
from planner.model.cost import estimate

_PLAN: dict[str, Any] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "l40s-48gb", "num_gpus": 64},
    "training": {
        "seq_length": 2048,
        "global_batch_size": 128,
        "precision": "bf16",
        "main_grad_dtype": "fp32",
    },
    "parallel": {
        "tp": 1,
        "pp": 4,
        "dp": 16,
        "vpp": 6,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
        "micro_batch_size": 1,
        "zero_stage": 1,
        "recompute": "none",
        "pipeline_layers": [8, 9, 9, 6],
    },
}


class _Planned:
    def __init__(self, g: int) -> None:
        plan = parse_plan({**_PLAN, "parallel": {**_PLAN["parallel"], _G: g}})
        assert plan.layout is not None
        self.job, self.layout = plan.job, plan.layout


_G = "microbatch_group_size_per_vp_stage"


def _at(g: int) -> _Planned:
    """The plan at micro-batch group g."""
    return _Planned(g)


def test_largest_group_is_faster_and_bigger_than_the_least() -> None:
    # m = 128 / (16 x 1) = 8; Megatron takes g 4 (the least) and 8 (schedules.py:1160-1180
    # d98e8a64). The last group holds 8 mod g or g micro-batches (schedules.py:989-1003): 4 at
    # g 4, 8 at g 8, so the chunks' gradient syncs launch 4 or 8 chunk backwards apart
    # (interleaved_sync.chunk_sync), each chunk's share its own parameters'. Rank 0's 8 layers
    # split 2, 2, 1, 1, 1, 1 over its 6 chunks, chunk 0 with the embedding (128,256 x 4,096 =
    # 525M against a layer's 218M: 961M, 436M, then 218M each), launched after rank 0's last
    # backward (schedules.py:1446-1453, 2063-2068): at g 8 chunk 1's 436M go 8 chunk
    # backwards before it and are done before chunk 0 is launched, at g 4 they are not, so
    # less DP traffic shows at g 8. The step is faster at g 8 also as its wrap-around hops hide
    # behind g - pp more chunk forwards (schedule.interleaved_p2p_exposed). The warm-up holds
    # (vpp - 1) g = 20 more chunk micro-batches at g 8 (schedules.py:964-965), so the peak grows.
    lean, wide = (_at(4), _at(8))
    at_lean, at_wide = estimate(lean.job, lean.layout), estimate(wide.job, wide.layout)
    assert at_wide.breakdown.dp_comm_exposed < at_lean.breakdown.dp_comm_exposed
    assert at_wide.breakdown.pp_comm_exposed < at_lean.breakdown.pp_comm_exposed
    assert at_wide.step_time_s < at_lean.step_time_s
    peak = [memory.estimate(p.job, p.layout).worst.total for p in (lean, wide)]
    assert peak[0] < peak[1] <= memory.usable_bytes(lean.job.cluster.capacity_bytes, 3.0)
