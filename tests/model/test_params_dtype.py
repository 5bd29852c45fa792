"""The parameters' dtype (`Job.params_dtype`): fp16 training, and FP8 GEMMs inside an fp32 model.

Oracles:
- Megatron-LM d98e8a64 arguments.py:1194-1205: params_dtype is torch.float unless --fp16 (half)
  or --bf16; `--fp8-format` leaves it alone, so FP8 without --bf16 / --fp16 quantises only the
  GEMMs' operands of an fp32 model.
- Transformer Engine FusedAdam (04912bf0 optimizers/fused_adam.py `set_scaled_state`) keeps the
  fp32 master's 16-bit remainder only for a bfloat16 parameter, as Megatron-Core's checkpoint of
  it reads (d98e8a64 distrib_optimizer.py:1008, `store_param_remainders and self.config.bf16`):
  an fp16 parameter keeps the whole 4-byte master, 2 bytes more per updated parameter.
- Transformer Engine's linear layers save the FP8 copy of their input (1 byte) whatever the input's
  dtype; the rest of the layer's kept values are in the input's dtype (fp32 here).
- Hand arithmetic in each test."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations, adam_step, memory
from planner.model.stage_activations import shard

LAY = Layout(tp=1, dp=8, zero_stage=1)
N_8B = 8_030_261_248  # Llama 3.1 8B's parameters (the catalog's count)


def _aware(precision: str) -> Job:
    return job(
        "llama3.1-8b",
        "h100-sxm-80gb",
        8,
        2048,
        64,
        precision=precision,
        use_precision_aware_optimizer=True,
    )


def test_fp16_parameters_keep_the_whole_fp32_master() -> None:
    bf16, fp16 = _aware("bf16"), _aware("fp16")
    assert adam_step.master_saving(bf16, 1) == 2.0
    assert adam_step.master_saving(fp16, 1) == 0.0
    b = memory.estimate(bf16, LAY).stages[0]
    f = memory.estimate(fp16, LAY).stages[0]
    # zero 1 over dp 8: each GPU updates N / 8 parameters, 2 bytes more each
    assert f.optimizer - b.optimizer == pytest.approx(2 * N_8B / 8, rel=1e-9)
    assert (f.weights, f.grads, f.activations) == (b.weights, b.grads, b.activations)


def test_fp8_inside_an_fp32_model_keeps_fp32_values_and_fp8_linear_inputs() -> None:
    fp8 = job("llama3.1-8b", "h100-sxm-80gb", 8, 2048, 64, precision="fp8", fp8_param_gather=False)
    fp8_fp32 = replace(fp8, quantised_params_dtype="fp32")
    fp32 = job("llama3.1-8b", "h100-sxm-80gb", 8, 2048, 64, precision="fp32")
    assert (fp8.params_dtype, fp8_fp32.params_dtype, fp32.params_dtype) == ("bf16", "fp32", "fp32")
    sh_q, sh_32 = shard(fp8_fp32, LAY), shard(fp32, LAY)
    assert (sh_q.linear_bytes, sh_q.value_bytes) == (1.0, 4.0)
    assert (sh_32.linear_bytes, sh_32.value_bytes) == (4.0, 4.0)
    assert not sh_q.flash_attention  # fp32 inputs: Transformer Engine's unfused attention
    # one layer: fp32 keeps its four linear inputs (QKV, projection, fc1: T x h each; fc2: T x F)
    # in 4 bytes, FP8-on-fp32 in 1: 3 bytes less per element, all else the same
    arch, T = fp32.arch, 2048
    h, F = arch.hidden_size, arch.ffn_hidden_size
    whole = activations.layer_bytes(arch, False, sh_32)
    quantised = activations.layer_bytes(arch, False, sh_q)
    assert whole - quantised == 3 * T * (3 * h + F)
    # weights: 4 bytes a parameter as in fp32, not FP8-on-bf16's 2 (zero 1, tp 1: every
    # parameter on every GPU); gradients fp32 in all three (main_grad_dtype fp32)
    est = {j.params_dtype + j.precision: memory.estimate(j, LAY).stages[0] for j in (fp8, fp8_fp32)}
    assert est["fp32fp8"].weights - est["bf16fp8"].weights == pytest.approx(2 * N_8B, rel=1e-9)


def test_fp8_on_fp32_parameters_updates_them_in_place_without_a_master() -> None:
    """distrib_optimizer.py:466-475: an fp32 parameter's main shard is a view of it; with
    --fp8-param-gather the parameter is quantised and keeps an fp32 main shard (:421-441)."""
    base = job("llama3.1-8b", "h100-sxm-80gb", 8, 2048, 64, precision="fp8")
    kept = replace(base, quantised_params_dtype="fp32", fp8_param_gather=True)
    viewed = replace(kept, fp8_param_gather=False)
    opt = {j.fp8_param_gather: memory.estimate(j, LAY).stages[0].optimizer for j in (kept, viewed)}
    # Adam's 12 bytes less the 4-byte master, over the N / 8 parameters each GPU updates
    assert opt[True] - opt[False] == pytest.approx(4 * N_8B / 8, rel=1e-9)


@pytest.mark.parametrize("params", ["bf16", "fp32"])
def test_bf16_first_and_last_layers_keep_unquantised_inputs_alone(params: str) -> None:
    """--first-last-layers-bf16 2 + 2 of 32 on one stage: those four layers run outside the FP8
    autocast and keep their linear inputs in the parameters' dtype, the other 28 their FP8 copies
    (Megatron-Core d98e8a64 fp8_utils.py:711-727 `is_first_last_bf16_layer`: no FP8 context). By
    hand: the stage keeps 4 x (unquantised - FP8) more than without them, not 32 x (the whole
    stage counted unquantised before)."""
    base = job(
        "llama3.1-8b",
        "h100-sxm-80gb",
        8,
        2048,
        64,
        precision="fp8",
        fp8_recipe="tensorwise",
        fp8_param_gather=False,
        quantised_params_dtype=params,
    )
    split = replace(base, bf16_layers_at_start=2, bf16_layers_at_end=2)
    sh = shard(base, LAY)
    q = activations.layer_bytes(base.arch, False, sh)
    b = activations.layer_bytes(base.arch, False, replace(sh, linear_bytes=sh.value_bytes))
    assert b > q
    grew = memory.estimate(split, LAY).stages[0].activations
    grew -= memory.estimate(base, LAY).stages[0].activations
    assert grew == pytest.approx(4 * (b - q) * memory.FRAGMENTATION, rel=1e-9)
