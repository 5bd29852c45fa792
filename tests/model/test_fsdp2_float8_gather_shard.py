"""torchtitan turns the float8 FSDP all-gather on only where the parameters are sharded over
data parallelism (e347b1e5 components/quantization/float8.py:87-90: `parallel_dims.
dp_shard_enabled and enable_fsdp_float8_all_gather`): a plan that asks for it at dp_shard 1
keeps its linear weights gathered in bf16, as one that does not ask (QA: Llama 3.1 70B, tp 8 pp
4 cp 2 dp 1, was predicted 32.3 GiB with the float8 copies against the run's 34.3).

Oracle: the same plan with `float8_all_gather = false` (the source line says they run alike);
at dp_shard 2 the gather still runs, and saves memory."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs.plan import parse_plan
from planner.model import memory

PLAN: dict[str, Any] = {
    "model": {"name": "llama3.1-70b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
    "training": {
        "seq_length": 16384, "global_batch_size": 8, "precision": "fp8",
        "fp8_recipe": "tensorwise", "framework": "torchtitan",
    },
    "parallel": {
        "tp": 8, "pp": 4, "dp": 1, "cp": 2, "micro_batch_size": 1, "zero_stage": 3,
        "recompute": "full", "sequence_parallel": True,
    },
}  # fmt: skip


def _peak(gather: bool, dp: int = 1) -> float:
    doc = {**PLAN, "torchtitan": {"float8_all_gather": gather}}
    doc["parallel"] = {**PLAN["parallel"], "dp": dp}
    doc["cluster"] = {**PLAN["cluster"], "num_gpus": 64 * dp}
    plan = parse_plan(doc)
    return memory.estimate(plan.job, plan.require_layout()).peak


def test_no_float8_gather_at_dp_shard_1() -> None:
    assert _peak(True) == pytest.approx(_peak(False), rel=1e-12)


def test_the_gather_still_saves_where_sharded() -> None:
    assert _peak(True, dp=2) < _peak(False, dp=2)
