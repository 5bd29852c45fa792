"""torchtitan's float8 linears cast their bf16 weights on every use, not once per step.

Oracle: pytorch/ao 36027d82 torchao/float8/float8_linear.py casts the weight in each forward
(:73) and again, in the other orientation, from the saved bf16 weight in each backward (:131);
nothing is cached across micro-batches (Transformer Engine caches its FP8 weight under
is_first_microbatch, which Megatron passes). With the float8 FSDP all-gather the shard is cast
before each gather and the gathered float8 weight serves both GEMMs: once per step stands.
Hand arithmetic: the per-step figure W (`linear_times(...).weight_cast`, both orientations) moves
into each micro-batch, W / 2 into the forward and W / 2 into the backward, so over m
micro-batches the step charges m x W instead of W. Compiled here (torch.compile's fused casts,
`gemm.quant_bytes`); eager, op by op: tests/model/test_titan_eager_float8.py."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs.plan import parse_plan
from planner.model import layer_time, linear_time

PLAN: dict[str, Any] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "training": {
        "seq_length": 8192, "global_batch_size": 64, "precision": "fp8",
        "fp8_recipe": "tensorwise", "framework": "torchtitan",
    },
    "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 3},
}  # fmt: skip


def _layer(framework: str, gather: bool) -> tuple[layer_time.Layer, float]:
    doc = {**PLAN, "training": {**PLAN["training"], "framework": framework}}
    if framework == "torchtitan":
        doc["torchtitan"] = {"float8_all_gather": gather, "compile": True}
    else:
        doc["parallel"] = {**PLAN["parallel"], "zero_stage": 1}
    plan = parse_plan(doc)
    job, lay = plan.job, plan.require_layout()
    gpu = layer_time.gpu_of(job)
    kind = job.arch.kinds[0]
    t = float(lay.micro_batch_size * job.seq_length)
    whole = linear_time.linear_times(job, lay, gpu, kind, t, 1.0).weight_cast
    return layer_time.layer_time(job, lay, gpu, kind), whole


def test_each_micro_batch_casts_both_orientations() -> None:
    per_use, w = _layer("torchtitan", gather=False)
    gathered, w2 = _layer("torchtitan", gather=True)
    assert w == pytest.approx(w2) and w > 0
    assert per_use.weight_cast == 0.0 and gathered.weight_cast == pytest.approx(w)
    assert per_use.fwd - gathered.fwd == pytest.approx(w / 2)
    assert per_use.bwd - gathered.bwd == pytest.approx(w / 2)


def test_megatron_keeps_its_cached_weight() -> None:
    te, w = _layer("megatron", gather=False)
    assert te.weight_cast == pytest.approx(w) and w > 0


def test_the_remembered_layer_times_see_the_float8_gather() -> None:
    # the search's layer times come from a memo keyed on the layout with dp fixed to 1
    # (stage_time._FIXED); the float8 gather runs only at dp_shard > 1 (fsdp2.float8_gather), so
    # the remembered layer must be the one layer_time computes on the layout itself: with the
    # gather, the weight cast once per step (gathered.weight_cast == W above), none per use
    from planner.model import stage_time
    from planner.model.job_memo import JobMemo

    doc = {**PLAN, "torchtitan": {"float8_all_gather": True, "compile": True}}
    plan = parse_plan(doc)
    job, lay = plan.job, plan.require_layout()
    JobMemo.forget_all()
    direct = layer_time.layer_time(job, lay, layer_time.gpu_of(job), job.arch.kinds[0])
    remembered = stage_time.layout_times(job, lay).dense
    assert direct.weight_cast > 0
    assert remembered.weight_cast == pytest.approx(direct.weight_cast)
    assert remembered.fwd == pytest.approx(direct.fwd)
    assert remembered.bwd == pytest.approx(direct.bwd)
