"""torchtitan's float8 without torch.compile: torchao's casts run op by op, nothing fused.

Oracles (pytorch/ao 36027d82, read at that commit):
- one dynamic cast `hp_tensor_to_float8_dynamic` of a bf16 tensor is six elementwise kernels:
  torch.abs (read 2, write 2) and max / amax (read 2) (torchao/float8/float8_utils.py:65, :69),
  .to(float32) (read 2, write 4) and * scale (read 4, write 4) (float8_training_tensor.py:153),
  clamp (read 4, write 4) and .to(float8) (read 4, write 1) (float8_utils.py:136-137): 33 bytes;
- Float8Linear saves the bf16 input and weight (float8_linear.py:45) and casts the input in the
  forward (:56) and again for the weight gradient (:185), the output gradient for the input
  gradient (:113) and again for the weight gradient (:167), the weight in the forward (:73) and
  again for the input gradient (:131); torch._scaled_mm's layouts make float8_ops.py:342-345
  copy the input-gradient GEMM's weight and the weight-gradient GEMM's two operands (read 1,
  write 1): 33 + 33 + 2 = 68 bytes an element of each (config.py:331-351: tensorwise and rowwise
  alike); rowwise_with_gw_hp's weight gradient is bf16 (config.py:364-368): input and output
  gradient 33, weight 68;
- torchtitan's llama3 runs wq, wk, wv and w1, w3 as separate nn.Linear (pytorch/torchtitan
  e347b1e5 models/llama3/model/model.py), each casting the shared input: 3 and 2 casts of it;
- with the float8 FSDP all-gather the gathered weight is float8 already (float8_linear.py:68-69,
  :125-127): no weight cast in either GEMM, the backward's copy left; only Float8Linear weights
  are gathered so (float8_linear.py:324-333): torchao's float8 grouped GEMM casts the bf16 expert
  weights in each forward and backward (prototype/moe_training/fp8_grouped_mm.py:148, :241).
Hand arithmetic: Llama 3.1 8B (h 4096, 32 query and 8 KV heads of 128, ffn 14336) at t = 8192
tokens, tp 1: QKV 3 x 8192 x 4096 inputs + 8192 x 6144 outputs = 150,994,944; wo 2 x 8192 x 4096
= 67,108,864; w1 w3 2 x 8192 x 4096 + 8192 x 28672 = 301,989,888; w2 8192 x 14336 + 8192 x 4096 =
150,994,944: 671,088,640 elements cast per layer and micro-batch; the layer's weights
4096 x 6144 + 4096 x 4096 + 4096 x 28672 + 14336 x 4096 = 218,103,808; H100 HBM 3.35 TB/s at the
0.8 streaming efficiency (`layer_time.HBM_EFFICIENCY`)."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs.plan import Plan, parse_plan
from planner.model import cost, gemm, layer_time, linear_time

HBM = 0.8 * 3.35e12
CAST_ELEMENTS = 671_088_640
WEIGHTS = 218_103_808

PLAN: dict[str, Any] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "training": {
        "seq_length": 8192, "global_batch_size": 32, "precision": "fp8",
        "fp8_recipe": "tensorwise", "framework": "torchtitan",
    },
    "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 3},
}  # fmt: skip


def _plan(recipe: str = "tensorwise", **titan: Any) -> Plan:
    doc = {**PLAN, "training": {**PLAN["training"], "fp8_recipe": recipe}, "torchtitan": titan}
    return parse_plan(doc)


def _lin(plan: Plan) -> linear_time.LinearTimes:
    job, lay = plan.job, plan.require_layout()
    return linear_time.linear_times(job, lay, layer_time.gpu_of(job), job.arch.kinds[0], 8192.0, 1)


def test_one_eager_cast_and_the_recipes_by_hand() -> None:
    assert gemm.EAGER_CAST_BYTES == 4 + 2 + 6 + 8 + 8 + 5 == 33
    assert gemm.eager_float8("tensorwise") == (68.0, 33.0, 35.0)
    assert gemm.eager_float8("rowwise") == (68.0, 33.0, 35.0)
    assert gemm.eager_float8("rowwise_with_gw_hp") == (33.0, 33.0, 35.0)
    assert gemm.eager_float8("delayed") is None  # Transformer Engine's: not torchao


@pytest.mark.parametrize(("recipe", "per_element"), [("tensorwise", 68), ("rowwise", 68)])
def test_an_eager_layer_casts_every_operand_twice_and_the_shared_inputs_apiece(
    recipe: str, per_element: int
) -> None:
    lin = _lin(_plan(recipe))
    assert sum(lin.casts) == pytest.approx(CAST_ELEMENTS * per_element / HBM, rel=1e-9)


def test_rowwise_with_gw_hp_casts_the_activations_once() -> None:
    lin = _lin(_plan("rowwise_with_gw_hp"))
    assert sum(lin.casts) == pytest.approx(CAST_ELEMENTS * 33 / HBM, rel=1e-9)


def test_compiled_keeps_the_fused_bytes() -> None:
    """Compiled (e347b1e5 models/llama3/infra/parallelize.py:107-123 compiles each block, its
    Float8Linears inside): tensorwise 6 - 2 = 4 bytes an element (`gemm.quant_bytes`), the
    shared inputs once: 8192 x (4096 + 6144 + 4096 + 4096 + 4096 + 28672 + 14336 + 4096)."""
    lin = _lin(_plan(compile=True))
    elements = 8192 * (4096 + 6144 + 4096 + 4096 + 4096 + 28672 + 14336 + 4096)
    assert sum(lin.casts) == pytest.approx(elements * 4 / HBM, rel=1e-9)


def test_eager_weights_are_cast_in_each_forward_and_backward() -> None:
    plan = _plan()
    lin = _lin(plan)
    assert lin.per_use == pytest.approx((33 * WEIGHTS / HBM, 35 * WEIGHTS / HBM), rel=1e-9)
    job, lay = plan.job, plan.require_layout()
    one = layer_time.layer_time(job, lay, layer_time.gpu_of(job), job.arch.kinds[0])
    assert one.weight_cast == 0.0


def test_the_float8_gather_leaves_the_eager_backward_its_copy() -> None:
    plan = _plan(float8_all_gather=True)
    lin = _lin(plan)
    assert lin.per_use == pytest.approx((0.0, 2 * WEIGHTS / HBM), rel=1e-9)
    job, lay = plan.job, plan.require_layout()
    one = layer_time.layer_time(job, lay, layer_time.gpu_of(job), job.arch.kinds[0])
    assert one.weight_cast == pytest.approx(33 * WEIGHTS / HBM, rel=1e-9)


def test_eager_float8_is_slower_than_eager_bf16() -> None:
    """The QA's Llama 3.1 8B on 8 H100, FSDP 8, full recompute, compile off: planner had the
    float8 step 4.06 s against bf16's 4.74 s; by hand the float8 casts add ~2.7 s of HBM traffic
    (4 micro-batches x 32 layers x (2 forwards of the inputs' 33-byte casts + the rest) at
    2.68 TB/s) to what float8 GEMMs save (~1 s): slower than bf16."""
    full = {**PLAN["parallel"], "recompute": "full"}
    fp8 = parse_plan({**PLAN, "parallel": full})
    bf16 = parse_plan(
        {**PLAN, "parallel": full, "training": {**PLAN["training"], "precision": "bf16"}}
    )
    times = [cost.estimate(p.job, p.require_layout()).step_time_s for p in (fp8, bf16)]
    assert times[0] > times[1]


QWEN: dict[str, Any] = {
    "model": {"name": "qwen3-30b-a3b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
    "training": {
        "seq_length": 4096, "global_batch_size": 128, "precision": "fp8",
        "fp8_recipe": "tensorwise", "framework": "torchtitan",
    },
    "parallel": {"dp": 16, "ep": 8, "micro_batch_size": 2, "zero_stage": 3},
}  # fmt: skip


def test_float8_experts_recast_their_weights_per_use_beside_the_float8_gather() -> None:
    """Compiled, with the float8 FSDP all-gather: the linears' weights once per step, the
    routed experts' (rowwise, compiled: 10 - 2 x 2 = 6 bytes an element, `gemm.quant_bytes`)
    half in each forward and half in each backward. Qwen3-30B-A3B: 128 experts / ep 8 = 16 on
    the rank, each 2048 x 2 x 768 + 768 x 2048: 16 x 3 x 2048 x 768 = 75,497,472 elements."""
    titan = {"float8_all_gather": True, "float8_experts": True, "compile": True}
    plan = parse_plan({**QWEN, "torchtitan": titan})
    job, lay = plan.job, plan.require_layout()
    kind = next(k for k in job.arch.kinds if k.ffn == "moe")
    t = float(lay.micro_batch_size * job.seq_length)
    lin = linear_time.linear_times(job, lay, layer_time.gpu_of(job), kind, t, 1.0)
    half = 75_497_472 * 6 / HBM / 2
    assert lin.per_use == pytest.approx((half, half), rel=1e-9)
    core = layer_time._core(job, lay, layer_time.gpu_of(job), kind)
    assert core.weight_cast == pytest.approx(lin.weight_cast - 2 * half, rel=1e-9)
