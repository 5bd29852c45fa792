"""fp16 training and FP8 inside an fp32 model through the launch targets and back.

Oracles:
- Megatron-LM d98e8a64 arguments.py:1194-1217: --fp16 sets params_dtype torch.half and leaves
  accumulate_allreduce_grads_in_fp32 off unless given (it is turned on under --bf16 only);
  neither --bf16 nor --fp16 keeps torch.float, with or without --fp8-format.
- Megatron-Bridge 067f987d training/mixed_precision.py: fp16_mixed (:201, grad_reduce_in_fp32
  False at :212) and the fp16_with_fp8_* presets; no fp16 preset with NVFP4, no fp32 preset.
- torchtitan b5bcd76c config/configs.py:94: mixed_precision_param "bfloat16" or "float32".
- planner's own read-back of the file it wrote (`round_trip`), which must give the same job."""

from __future__ import annotations

import pytest
from megatron_plans import assert_same, flags, make_plan, round_trip

from planner.emit import bridge_notes, bridge_precision, megatron
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import reframe

PAR = {"tp": 2, "zero_stage": 1}


def test_an_fp16_plan_launches_fp16_and_reads_back_the_same() -> None:
    plan = make_plan("llama3.1-8b", 8, PAR, precision="fp16")
    got = flags(plan)
    assert "--fp16" in got and "--bf16" not in got
    assert "--accumulate-allreduce-grads-in-fp32" in got  # the plan's fp32 gradients
    back = round_trip(plan)
    assert back.job.precision == "fp16" and back.job.main_grad_dtype == "fp32"
    assert_same(plan, back)
    half = make_plan("llama3.1-8b", 8, PAR, precision="fp16", main_grad_dtype="bf16")
    half_flags = flags(half)
    assert "--accumulate-allreduce-grads-in-fp32" not in half_flags
    assert "--grad-reduce-in-bf16" not in half_flags  # fp16 buffers are the default
    assert round_trip(half).job.main_grad_dtype == "bf16"


def test_fp8_on_fp32_parameters_launches_without_bf16_or_fp16() -> None:
    plan = make_plan(
        "llama3.1-8b", 8, PAR, precision="fp8", params_dtype="fp32", fp8_recipe="tensorwise"
    )
    got = flags(plan)
    assert "--fp8-format" in got and "--bf16" not in got and "--fp16" not in got
    back = round_trip(plan)
    assert (back.job.precision, back.job.params_dtype) == ("fp8", "fp32")
    assert_same(plan, back)
    fp16 = make_plan("llama3.1-8b", 8, PAR, precision="fp8", params_dtype="fp16")
    assert "--fp16" in flags(fp16) and round_trip(fp16).job.params_dtype == "fp16"


@pytest.mark.parametrize(
    ("training", "preset"),
    [
        ({"precision": "fp16"}, "fp16_mixed"),
        ({"precision": "fp8", "params_dtype": "fp16"}, "fp16_with_fp8_delayed_scaling_mixed"),
        (
            {"precision": "fp8", "params_dtype": "fp16", "fp8_recipe": "blockwise"},
            "fp16_with_fp8_subchannel_scaling_mixed",
        ),
        ({"precision": "fp8"}, "bf16_with_fp8_delayed_scaling_mixed"),
    ],
)
def test_megatron_bridge_names_the_fp16_presets(training: dict[str, str], preset: str) -> None:
    assert bridge_precision.preset(make_plan("llama3.1-8b", 8, PAR, **training)) == preset


def test_an_fp16_preset_reduces_in_fp16_and_says_so_against_fp32_gradients() -> None:
    plan = make_plan("llama3.1-8b", 8, PAR, precision="fp16")  # main_grad_dtype fp32
    (note,) = [n for n in bridge_precision.notes(plan) if "reduces gradients" in n]
    assert "grad_reduce_in_fp32=False" in note and "set grad_reduce_in_fp32=True" in note
    half = make_plan("llama3.1-8b", 8, PAR, precision="fp16", main_grad_dtype="bf16")
    assert not [n for n in bridge_precision.notes(half) if "reduces gradients" in n]


@pytest.mark.parametrize(
    ("training", "needle"),
    [
        ({"precision": "fp8", "params_dtype": "fp32"}, "no fp32 mixed-precision preset"),
        ({"precision": "fp4", "params_dtype": "fp16"}, "no fp16 preset with NVFP4"),
    ],
)
def test_megatron_bridge_refuses_what_it_has_no_preset_for(
    training: dict[str, str], needle: str
) -> None:
    plan = make_plan("llama3.1-8b", 8, PAR, gpu="b200-sxm-180gb", **training)
    with pytest.raises(InputError, match=needle):
        bridge_precision.preset(plan)


@pytest.mark.parametrize(
    ("training", "needle"),
    [
        ({"precision": "bf16", "params_dtype": "fp16"}, 'params_dtype is for precision "fp8"'),
        ({"precision": "fp32", "params_dtype": "bf16"}, 'params_dtype is for precision "fp8"'),
        ({"precision": "fp16", "framework": "torchtitan"}, "no float16"),
        ({"precision": "fp8", "params_dtype": "fp32", "fp8_attention": True}, "no fused"),
    ],
)
def test_params_dtype_that_cannot_run_is_refused(training: dict[str, object], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        make_plan("llama3.1-8b", 8, {"tp": 2}, **training)


def test_suggest_framework_torchtitan_refuses_non_bf16_parameters() -> None:
    """`suggest --framework torchtitan` re-frames a Megatron job (`reframe`): the checks a plan
    file with framework = "torchtitan" gets (torchtitan b5bcd76c config/configs.py:94: no
    float16; fp32 training modelled for Megatron-LM only) hold there too."""
    for training in ({"precision": "fp16"}, {"precision": "fp8", "params_dtype": "fp32"}):
        job = make_plan("llama3.1-8b", 8, PAR, **training).job
        with pytest.raises(InputError, match="--framework: torchtitan"):
            reframe(job, "torchtitan")
    assert reframe(make_plan("llama3.1-8b", 8, PAR).job, "torchtitan").framework == "torchtitan"


def test_fp16_with_the_precision_aware_optimizer_reads_back_the_same_flags() -> None:
    """Under --fp16 the gradient buffers are 16-bit without --main-grads-dtype (validate_args
    reads it under --bf16 only, arguments.py:1204-1217): the launch leaves it out, so what was
    read launches as it was written; and without the distributed optimizer Megatron raises
    (megatron/core/optimizer/__init__.py:1057-1060), so the line is refused."""
    plan = make_plan(
        "llama3.1-8b",
        8,
        PAR,
        precision="fp16",
        main_grad_dtype="bf16",
        optimizer_state_dtype="bf16",
    )
    got = flags(plan)
    assert "--use-precision-aware-optimizer" in got and "--main-grads-dtype" not in got
    back = round_trip(plan)
    assert (back.job.precision, back.job.main_grad_dtype) == ("fp16", "bf16")
    assert flags(back) == got
    line = megatron.render(plan, "job")
    for flag in ("--use-distributed-optimizer", "--overlap-param-gather"):
        line = line.replace(flag, "")
    with pytest.raises(InputError, match="only with the distributed optimizer"):
        megatron_args.to_plan(line, "h100-sxm-80gb", 8)


def test_an_fsdp_plan_gets_no_preset_gradient_note() -> None:
    """Megatron-FSDP reduces in ddp.megatron_fsdp_main_grads_dtype (mcore_fsdp_adapter.py:141 @
    d98e8a64), not the preset's grad_reduce_in_fp32: no note on the preset's, and the FSDP note
    names the parameters' dtype."""
    plan = make_plan("llama3.1-8b", 8, {"zero_stage": 3}, precision="fp16")
    assert not [n for n in bridge_precision.notes(plan) if "reduces gradients in" in n]
    (note,) = [n for n in bridge_notes.notes(plan, "") if "megatron_fsdp_main_grads_dtype" in n]
    assert "parameters' fp16" in note
