"""Attention sinks (`ModelArch.softmax_type`, Megatron --softmax-type): read from a Megatron line,
launched back, counted as parameters, and noted where Transformer Engine runs them unfused.

Oracles: Megatron-Core d98e8a64 dot_product_attention.py (softmax_type "learnable" registers
`softmax_offset`, one value per attention head of the TP rank; "off-by-one" a constant zero
tensor, no parameter; TransformerConfig.softmax_type's three choices), HF transformers'
GptOssAttention (`sinks`, one per attention head), and Megatron's determinism setup
(megatron/training/determinism.py exports NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, under which TE's
get_attention_backend disables the fused attention for sinks). The counts are hand arithmetic.
"""

from __future__ import annotations

import pytest

from planner.emit import megatron
from planner.inputs import catalog, megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import param_tensors, params
from tests.emit.megatron_plans import flags, make_plan, round_trip
from tests.inputs.test_megatron_args import LLAMA3_8B


def test_the_flag_is_read_and_a_bad_value_is_bad_input() -> None:
    for kind in ("vanilla", "off-by-one", "learnable"):
        text = LLAMA3_8B.replace("--bf16", f"--bf16 --softmax-type {kind}")
        reading = megatron_args.read(text, "h100-sxm-80gb", 8)
        assert reading.doc["model"]["softmax_type"] == kind
        assert "--softmax-type" not in reading.ignored
    assert "softmax_type" not in megatron_args.read(LLAMA3_8B, "h100-sxm-80gb", 8).doc["model"]
    bad = LLAMA3_8B.replace("--bf16", "--bf16 --softmax-type sink")
    with pytest.raises(InputError, match=r"--softmax-type: expected one of .*'sink'"):
        megatron_args.to_plan(bad, "h100-sxm-80gb", 8)


def test_gpt_oss_launches_with_its_sinks_and_reads_back_the_same() -> None:
    """The zoo's gpt-oss carries HF's per-head sinks as Megatron's learnable softmax: the launch
    line says so (a Llama line says nothing: vanilla is Megatron's default) and reads back to the
    same model, parameters included."""
    plan = make_plan("gpt-oss-20b", 8, {"ep": 8})
    assert flags(plan)["--softmax-type"] == ["learnable"]
    back = round_trip(plan)
    assert back.job.arch.softmax_type == "learnable"
    assert params.params_total(back.job.arch) == params.params_total(plan.job.arch)
    assert "--softmax-type" not in flags(make_plan("llama3.1-8b", 8, {"tp": 1}))
    assert "--softmax-type" in megatron.render(plan, "job")


def test_learnable_sinks_are_one_parameter_per_head_and_layer() -> None:
    """gpt-oss-20b: 24 attention layers x 64 heads = 1,536 parameters, one tensor a layer; the
    off-by-one offset is a constant (none)."""
    arch = catalog.get_model("gpt-oss-20b")
    plain = arch.model_copy(update={"softmax_type": "vanilla"})
    fixed = arch.model_copy(update={"softmax_type": "off-by-one"})
    assert params.params_total(arch) - params.params_total(plain) == 24 * 64
    assert params.params_total(fixed) == params.params_total(plain)
    kind = arch.layer_kinds[0]
    assert (
        param_tensors.layer_tensors(arch, kind, 1) - param_tensors.layer_tensors(plain, kind, 1)
        == 1
    )


def test_deterministic_mode_with_sinks_is_noted_on_any_gpu() -> None:
    """--deterministic-mode exports NVTE_ALLOW_NONDETERMINISTIC_ALGO=0; TE then disables its fused
    attention for sinks and runs the unfused one, which planner does not time: a note on Hopper
    too (the Blackwell-only note is about the vanilla backward)."""
    sinks = LLAMA3_8B.replace("--bf16", "--bf16 --softmax-type learnable --deterministic-mode")
    reading = megatron_args.read(sinks, "h100-sxm-80gb", 8)
    assert any("--softmax-type learnable" in n for n in reading.not_modelled)
    plain = LLAMA3_8B.replace("--bf16", "--bf16 --deterministic-mode")
    assert not megatron_args.read(plain, "h100-sxm-80gb", 8).not_modelled
    learnable = LLAMA3_8B.replace("--bf16", "--bf16 --softmax-type learnable")
    assert not megatron_args.read(learnable, "h100-sxm-80gb", 8).not_modelled
    parse_plan(megatron_args.to_plan(sinks, "h100-sxm-80gb", 8))
