"""Megatron-Bridge's bf16 presets launch the precision-aware optimizer on another path than
Megatron-LM's line: bf16_mixed keeps MixedPrecisionConfig.fp8_recipe "tensorwise"
(Megatron-Bridge 067f987d mixed_precision.py:50, :185), copied onto OptimizerConfig
(update_config_with_precision_overrides, :138-156), so
use_precision_aware_optimizer_no_fp8_or_ds_fp8 is False with fp32 main parameters
(Megatron-LM d98e8a64 optimizer_config.py:407-414):
Megatron-Core keeps its own fp32 master (4 bytes a parameter, not Transformer Engine's 2-byte
remainder) and copies 16-bit gradients into fp32 at the step. Megatron-LM's --fp8-recipe
defaults to "delayed", which keeps the decoupled path.

Oracle, hand arithmetic: Llama 3.1 8B (8,030,261,248 parameters) at dp 8, ZeRO 1, bf16 Adam
moments: Megatron-LM's optimizer states are (2 remainder + 2 + 2) / 8 bytes a parameter,
Bridge's (4 + 2 + 2) / 8, 2 / 8 x 8,030,261,248 = 2,007,565,312 bytes more."""

from __future__ import annotations

import re

import pytest
from megatron_plans import make_plan

from planner.emit import bridge, launch_pricing
from planner.model import memory

PARAMS = 8_030_261_248


def _plan(**training: object):  # type: ignore[no-untyped-def]
    return make_plan(
        "llama3.1-8b",
        8,
        {"dp": 8, "zero_stage": 1},
        optimizer_state_dtype="bf16",
        main_grad_dtype="bf16",
        **training,
    )


def test_bridge_keeps_megatron_cores_fp32_master_and_gradient_copy() -> None:
    plan = _plan()
    lay = plan.require_layout()
    run = launch_pricing.bridge_launched(plan)
    assert run is not plan and run.job.optimizer_fp8_recipe == "tensorwise"
    lm, br = memory.estimate(plan.job, lay).stages[0], memory.estimate(run.job, lay).stages[0]
    assert br.optimizer - lm.optimizer == pytest.approx(2 / 8 * PARAMS, rel=1e-9)
    # Megatron-LM reads the bf16 gradients in place; Bridge copies its shard into fp32 (4 bytes),
    # a transient buffer, with the allocator's fragmentation on it
    frag = memory.fragmentation(plan.job)
    assert br.grad_copy - lm.grad_copy == pytest.approx(4 * PARAMS / 8 * frag, rel=0.01)
    # the override's header predicts Bridge's run, and says why
    text = bridge.render(run, "job")
    header = re.search(r"peak memory ([0-9.]+) GiB", text)
    assert header is not None
    assert float(header.group(1)) == pytest.approx(
        memory.estimate(run.job, lay).peak / 2**30, abs=0.05
    )
    assert 'fp8_recipe = "tensorwise"' in text


@pytest.mark.parametrize(
    "training",
    [
        {"precision": "fp8", "fp8_recipe": "tensorwise"},  # the FP8 presets set the plan's recipe
        {"main_params_dtype": "fp16"},  # an fp16 master keeps the decoupled path anywhere
    ],
)
def test_bridge_launches_these_as_planned(training: dict[str, object]) -> None:
    plan = _plan(**training)
    assert launch_pricing.bridge_launched(plan) is plan
    assert launch_pricing.bridge_launched_note(plan) is None


def test_megatron_lm_keeps_the_plans_path() -> None:
    plan = _plan()
    assert launch_pricing.launched(plan, "megatron-args").job.optimizer_fp8_recipe is None
