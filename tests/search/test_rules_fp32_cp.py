"""fp32 training refuses context parallelism (`rules.context.context_attention`), in `check` of a
plan and in the search alike, as the Megatron-LM line reader does.

Oracle: Transformer Engine runs fp32 attention in its unfused backend only (TransformerEngine
a0b36d0c attention/dot_product_attention/utils.py `get_attention_backend`, "Filter: Data
type": flash and cuDNN attention take bf16 / fp16), and the same function disables that backend
under context parallelism ("Disabling UnfusedDotProductAttention as it does not support context
parallelism"): fp32 with cp > 1 finds no backend."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, Plan
from planner.search import rules, top_k


def _job(precision: str, seq: int = 32768) -> Job:
    return job("llama3.1-8b", "h100-sxm-80gb", 8, seq, 128, precision=precision)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_fp32_with_cp_is_refused(cp: int) -> None:
    lay = Layout(cp=cp, dp=8 // cp)
    found = {v.rule: v for v in rules.violations(_job("fp32"), lay)}
    v = found["cp_fp32"]
    assert v.field == "parallel.cp"
    assert "unfused backend" in v.message and "no context parallelism" in v.message
    assert rules.violations(_job("bf16"), lay) == []  # bf16 runs flash / cuDNN attention
    assert any(r(_job("fp32"), lay) is not None for r in rules.STRUCTURAL_RULES)


def test_fp32_without_cp_passes() -> None:
    assert rules.violations(_job("fp32"), Layout(tp=2, dp=4)) == []
    # flash_attention = false names the unfused backend fp32 runs anyway: no cp rule beyond cp
    assert rules.violations(replace(_job("fp32"), flash_attention=False), Layout(dp=8)) == []


def test_check_of_an_fp32_plan_with_cp_raises() -> None:
    plan = Plan(job=_job("fp32"), layout=Layout(cp=2, dp=4))
    with pytest.raises(InputError, match=r"context_parallel_size 2 with fp32 parameters"):
        rules.check_plan(plan)
    # FP8 GEMMs inside an fp32 model: the attention's inputs are fp32 all the same
    fp8 = Plan(job=replace(_job("fp8"), quantised_params_dtype="fp32"), layout=Layout(cp=2, dp=4))
    with pytest.raises(InputError, match=r"fp32 parameters \(precision fp8\)"):
        rules.check_plan(fp8)


def test_the_search_offers_fp32_no_cp() -> None:
    # 32k tokens of Llama 3.1 8B on 8 H100: without the rule the search ranked fp32 layouts of
    # cp 2 in its top 5 (planner suggest); with it every cp > 1 structure is refused
    res = top_k.search(_job("fp32"), top_k=3)
    assert res.rejected["cp_fp32"] > 0
    assert res.candidates and all(c.layout.cp == 1 for c in res.candidates)
