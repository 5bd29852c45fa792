"""torchtitan's float8 (torchao) in memory: what its linear layers save for the backward, and
what FSDP2 gathers in float8.

Oracles:
- pytorch/ao 36027d82 torchao/float8/float8_linear.py:45: `matmul_with_hp_or_float8_args`
  saves `input_hp` and `weight_hp_t`, the high-precision tensors, and casts them again in the
  backward: a float8 linear keeps the same bf16 input a bf16 one keeps (the activations of a
  torchtitan fp8 plan are those of its bf16 twin), where Transformer Engine keeps an 8-bit copy
  (Megatron's fp8 activations are smaller).
- torchao's float8 all-gather (`enable_fsdp_float8_all_gather`) casts the weights of
  Float8Linear modules (WeightWithDynamicFloat8CastTensor, float8_linear.py:25): the routed
  experts are grouped GEMMs, gathered in bf16. Hand arithmetic: with every gathered parameter
  kept (reshard_after_forward = "never"), turning the float8 all-gather on saves 1 byte per
  float8 linear weight, none per expert weight.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import write

from planner.inputs.plan import load_plan
from planner.model import memory
from planner.model.stage_params import quantised_params, stage_params
from planner.search.rules import check_plan


def _plan(tmp_path: Path, framework: str, precision: str, titan: str = "") -> tuple:
    recipe = 'fp8_recipe = "tensorwise"\n' if precision == "fp8" else ""
    text = f"""
[model]
name = "qwen3-30b-a3b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
[training]
framework = "{framework}"
seq_length = 4096
global_batch_size = 64
precision = "{precision}"
{recipe}
[parallel]
zero_stage = {3 if framework == "torchtitan" else 1}
ep = 8
{titan}
"""
    plan = check_plan(load_plan(write(tmp_path, text)))
    job, lay = plan.job, plan.require_layout()
    return job, lay, lay.chunk_layers(job.arch.num_layers)[0]


def _activations(tmp_path: Path, framework: str, precision: str) -> float:
    job, lay, chunks = _plan(tmp_path, framework, precision)
    return memory.stage_memory(job, lay, 0, chunks).activations


def test_torchtitan_float8_keeps_the_bf16_inputs(tmp_path: Path) -> None:
    bf16 = _activations(tmp_path, "torchtitan", "bf16")
    assert _activations(tmp_path, "torchtitan", "fp8") == pytest.approx(bf16)
    # Transformer Engine's 8-bit copies: Megatron's fp8 activations are below its bf16 ones
    assert _activations(tmp_path, "megatron", "fp8") < _activations(tmp_path, "megatron", "bf16")


def test_float8_all_gather_casts_the_linear_weights_not_the_experts(tmp_path: Path) -> None:
    never = '[torchtitan]\nreshard_after_forward = "never"\nfloat8_all_gather = {}\n'
    off = _plan(tmp_path, "torchtitan", "fp8", never.format("false"))
    on = _plan(tmp_path, "torchtitan", "fp8", never.format("true"))
    fp8_dense, fp8_expert = quantised_params(*off[:2], 0, off[2])
    assert fp8_expert > 0 and stage_params(*off[:2], 0, off[2])[1] > 0  # the model has experts
    saved = memory.stage_memory(*off[:2], 0, off[2]).weights
    saved -= memory.stage_memory(*on[:2], 0, on[2]).weights
    assert saved == pytest.approx(1.0 * fp8_dense)  # 2 -> 1 byte per float8 linear weight only
