"""The precision-aware optimizer's two plan fields (`main_params_dtype`,
`use_precision_aware_optimizer`) launched and read back: the Megatron-LM line writes
--use-precision-aware-optimizer and --main-params-dtype fp16 (Megatron-LM d98e8a64
arguments.py: both flags; optimizer_config.py:468-480 asserts an fp32 master without the first),
and `check --megatron-args` reads them back to the same memory (`assert_same`, planner's own
read-back as the oracle); Megatron-Bridge's OptimizerConfig gets main_params_dtype fp16. Muon
under it is refused (optimizer_config.py:434-436 asserts Adam), and torchtitan has neither."""

from __future__ import annotations

import pytest
from megatron_plans import assert_same, flags, make_plan, round_trip

from planner.emit.bridge_precision import optimizer_precision
from planner.inputs.errors import InputError
from planner.search.rules import check_plan

PARALLEL = {"tp": 2, "dp": 4, "zero_stage": 1}


@pytest.mark.parametrize(
    "training",
    [
        {"main_params_dtype": "fp16", "optimizer_state_dtype": "bf16"},
        {"use_precision_aware_optimizer": True},
    ],
)
def test_megatron_lm_writes_and_reads_back_the_optimizer(training: dict[str, object]) -> None:
    plan = make_plan("llama3.1-8b", 8, PARALLEL, **training)
    written = flags(plan)
    assert "--use-precision-aware-optimizer" in written
    fp16 = training.get("main_params_dtype") == "fp16"
    assert written.get("--main-params-dtype") == (["fp16"] if fp16 else None)
    back = round_trip(plan)
    assert back.job.main_params_dtype == plan.job.main_params_dtype
    assert back.job.precision_aware_optimizer
    assert_same(plan, back)


def test_bridge_gets_the_fp16_master() -> None:
    plan = make_plan("llama3.1-8b", 8, PARALLEL, main_params_dtype="fp16")
    got = optimizer_precision(plan)
    assert got["use_precision_aware_optimizer"] is True
    assert got["main_params_dtype"] == "torch.float16"


def test_muon_under_the_precision_aware_optimizer_is_refused() -> None:
    plan = make_plan(
        "llama3.1-8b", 8, PARALLEL, optimizer="muon", use_precision_aware_optimizer=True
    )
    with pytest.raises(InputError, match="asserts it runs with Adam only"):
        check_plan(plan)


@pytest.mark.parametrize(
    ("field", "value"), [("main_params_dtype", "fp16"), ("use_precision_aware_optimizer", True)]
)
def test_torchtitan_has_neither(field: str, value: object) -> None:
    # torchtitan's optimizers are torch's (no Transformer Engine FusedAdam): rules.torchtitan
    plan = make_plan("llama3.1-8b", 8, {"dp": 8, "zero_stage": 3}, framework="torchtitan")
    check_plan(plan)  # the plan itself is fine
    bad = make_plan(
        "llama3.1-8b", 8, {"dp": 8, "zero_stage": 3}, framework="torchtitan", **{field: value}
    )
    with pytest.raises(InputError, match=f"training.{field}"):
        check_plan(bad)
