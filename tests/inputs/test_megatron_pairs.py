"""Model settings Megatron-LM refuses together, refused at input (ModelArch._check_megatron_pairs;
QA of this session's later commits), and gpt-oss's quick GEGLU read back from a Megatron line
launched again as it was read."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.hf_import import arch_from_hf
from planner.inputs.tiers import LinkTier, check_domain_used
from tests.emit.megatron_plans import flags, make_plan, round_trip
from tests.model.test_llama4_fields import _scout


def _arch(name: str, **update: Any) -> ModelArch:
    doc = catalog.get_model(name).model_dump(exclude={"name"})
    return ModelArch.model_validate({**doc, "name": "x", **update})


def test_probabilities_on_input_need_top_1() -> None:
    # Megatron-LM d98e8a64 MoE experts.py:918-921: "moe_apply_probs_on_input only works with
    # moe_router_topk=1"; Qwen3-30B-A3B routes to 8
    with pytest.raises(ValueError, match=r"moe_apply_probs_on_input needs moe_router_topk 1"):
        _arch("qwen3-30b-a3b", moe_apply_probs_on_input=True)
    assert _arch("qwen3-30b-a3b", moe_apply_probs_on_input=True, moe_router_topk=1)
    # the HF import sets it for top-1 Llama 4 only
    assert not arch_from_hf(_scout(num_experts_per_tok=2), "s.json").moe_apply_probs_on_input


def test_qk_l2_norm_does_not_run_with_mla() -> None:
    # gpt_layer_specs.py:105 d98e8a64: "qk_l2_norm is not supported with MLA."
    with pytest.raises(ValueError, match="qk_l2_norm does not run with multi_latent_attention"):
        _arch("deepseek-v2-lite", qk_l2_norm=True)


def test_a_swiglu_clamp_needs_experts() -> None:
    # transformer_config.py:2483-2486 d98e8a64: "activation_func_clamp_value for SwiGLU is only
    # supported with MoE."; gpt-oss's clamp comes with its offset (a quick GEGLU): accepted
    with pytest.raises(ValueError, match=r"activation_func_clamp_value \(7.0\) for a SwiGLU"):
        _arch("llama3.1-8b", activation_func_clamp_value=7.0)
    assert _arch("llama3.1-8b", activation_func_clamp_value=7.0, glu_linear_offset=1.0)


def test_quick_geglu_read_back_launches_again() -> None:
    """gpt-oss launched as --quick-geglu --glu-linear-offset 1.0 reads back as the plan had it
    (quick_geglu with the offset), which launches as the same flags."""
    model = {**catalog.get_model("gpt-oss-20b").model_dump(exclude={"name"}), "name": "oss"}
    plan = make_plan(model, 8, {"ep": 8})
    back = round_trip(plan)
    assert back.job.arch.activation == plan.job.arch.activation == "quick_geglu"
    assert flags(back)["--quick-geglu"] == flags(plan)["--quick-geglu"] == []
    assert flags(back)["--glu-linear-offset"] == flags(plan)["--glu-linear-offset"] == ["1.0"]


def test_a_domain_smaller_than_a_node_is_used_whole() -> None:
    tier = LinkTier(name="pair", span_gpus=2, bandwidth_gb_per_s_per_gpu=100.0, latency_us=2.0)
    check_domain_used(2, (tier,), per_node=8)  # the whole 2-GPU domain: fine
    with pytest.raises(ValueError, match="leave it unset or 2"):
        check_domain_used(1, (tier,), per_node=8)
